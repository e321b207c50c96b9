use super::*;
use crate::image::BuildOptions;
use sharedos_report::report::REPORT_FILE;
use sharedos_report::report::{Environment, Gate, VmProvenance};

pub(crate) fn report(statuses: &[(GateName, Status)], kernel: &str, criu: &str) -> Report {
    let mut r: Report = crate::judge::review::tests::fresh_report();
    for (n, s) in statuses {
        if let Some(g) = r.gate_mut(*n) {
            g.status = *s;
        }
    }
    r.environment = Environment {
        kernel_release: kernel.into(),
        criu_version: Some(criu.into()),
        ..r.environment.clone()
    };
    let mut dump = Gate::new(GateName::Dump, Status::Pass, "");
    dump.data.insert("dump_ms".into(), serde_json::json!(6543));
    dump.data
        .insert("image_bytes".into(), serde_json::json!(27_400_000u64));
    if let Some(g) = r.gate_mut(GateName::Dump) {
        g.data = dump.data;
    }
    if let Some(g) = r
        .gates
        .iter_mut()
        .find(|g| g.name == GateName::RestoreLiveProcess)
    {
        g.data.insert("restore_ms".into(), serde_json::json!(4012));
    }
    r.vm = Some(VmProvenance {
        accel: "tcg".into(),
        ..Default::default()
    });
    r.seal();
    r
}

pub(crate) fn cell(image: &str, fail: Option<GateName>, kernel: &str, criu: &str) -> Cell {
    let st: Vec<(GateName, Status)> = fail.map(|g| vec![(g, Status::Fail)]).unwrap_or_default();
    let r = report(&st, kernel, criu);
    let code = crate::judge::verdict::evaluate_report(&r, None).exit_code;
    cell_from_report(image, &r, code)
}

fn expectations_text(c: &Cell) -> String {
    c.gates
        .iter()
        .map(|g| format!("{} {}  # why\n", g.name, g.status))
        .collect()
}

#[test]
fn jobs_default_to_cores_over_guest_cpus_and_at_least_one() {
    assert_eq!(default_jobs(2, 2).0, 1);
    assert_eq!(default_jobs(8, 2).0, 4);
    assert_eq!(default_jobs(1, 2).0, 1);
    assert_eq!(default_jobs(3, 0).0, 3);
    assert!(default_jobs(2, 2)
        .1
        .contains("2 host cores / 2 vCPUs per guest"));
}

#[test]
fn a_cell_carries_where_it_ran_and_the_criu_figures() {
    let c = cell("trixie", None, "6.12.57+deb13-cloud-amd64", "4.1.1");
    assert_eq!(c.outcome, CellOutcome::Ran);
    assert_eq!(c.kernel_release, "6.12.57+deb13-cloud-amd64");
    assert_eq!(c.criu_version, "4.1.1");
    assert_eq!(c.accelerator, "tcg");
    assert_eq!(c.dump_seconds, Some(6.54));
    assert_eq!(c.restore_seconds, Some(4.01));
    assert_eq!(c.image_mb, Some(27.4));
    assert_eq!(c.gates.len(), 10);
    assert_eq!(c.report_dir.as_deref(), Some("trixie"));
}

#[test]
fn expectations_parse_strictly() {
    let c = cell("b", None, "k", "c");
    let e = parse_expectations(&expectations_text(&c)).unwrap();
    assert_eq!(e, c.gates);
    let t = expectations_text(&c);
    let err = parse_expectations(&t.replacen("prerequisites", "prereq", 1)).unwrap_err();
    assert!(format!("{err:#}").contains("is not a gate"), "{err:#}");
    let err = parse_expectations(&t.replacen("PASS", "OK", 1)).unwrap_err();
    assert!(format!("{err:#}").contains("is not a status"), "{err:#}");
    let err = parse_expectations(&format!("{t}dump PASS\n")).unwrap_err();
    assert!(format!("{err:#}").contains("given twice"), "{err:#}");
    let short: String = t.lines().skip(1).map(|l| format!("{l}\n")).collect();
    let err = parse_expectations(&short).unwrap_err();
    assert!(
        format!("{err:#}").contains("no expectation for prerequisites"),
        "{err:#}"
    );
}

/// Every images/<name>/expected-gates in the repository reads with the parser vm-matrix and
/// the merge use.
#[test]
fn every_committed_expectation_file_parses() {
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let mut with = Vec::new();
    for name in definition::list_images(&images) {
        if let Some(e) = load_expectations(&images, &name).unwrap() {
            assert_eq!(e.len(), GateName::ALL.len());
            with.push((name, e));
        }
    }
    let names: Vec<&str> = with.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "bookworm",
            "bookworm-bpo",
            "forky",
            "trixie",
            "trixie-bpo",
            "trixie-bpo-criu42"
        ]
    );
    for (name, e) in &with {
        let status = |g: GateName| e.iter().find(|x| x.name == g).unwrap().status;
        assert_eq!(
            status(GateName::GuiPixelReview),
            Status::ReviewRequired,
            "{name}"
        );
        let dump = if name == "trixie-bpo" {
            Status::Fail
        } else {
            Status::Pass
        };
        assert_eq!(status(GateName::Dump), dump, "{name}");
    }
}

/// Variants are checked with the images, before anything is built.
#[test]
fn rows_are_resolved_with_their_variants_checked() {
    let root = std::env::temp_dir().join(format!("matrix-rows-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(root.join("bookworm")).unwrap();
    std::fs::write(root.join("bookworm").join(definition::DEFINITION_FILE), "").unwrap();
    let mut build = BuildOptions::new("bookworm");
    build.images_dir = Some(root.clone());
    let mut o = MatrixOptions {
        images: parse_images_arg("bookworm,bookworm+userns+cgroup,bookworm+copiesmax"),
        workloads: vec![],
        jobs: None,
        build,
        reports_root: root.join("reports"),
        vm_run: vec!["/nonexistent".into()],
        extra_args: vec![],
        guest_cpus: 2,
        command_line: vec![],
    };
    let rows = resolve_images(&o).unwrap();
    let labels: Vec<String> = rows.iter().map(Row::label).collect();
    assert_eq!(
        labels,
        ["bookworm", "bookworm+userns+cgroup", "bookworm+copiesmax"]
    );
    for (images, want) in [
        ("bookworm,bookworm+turbo", "unknown variant \"turbo\""),
        (
            "bookworm+userns,bookworm+userns",
            "names bookworm+userns twice",
        ),
        ("nosuch+userns", "there is no image \"nosuch\""),
    ] {
        o.images = parse_images_arg(images);
        let built = std::cell::Cell::new(false);
        let code = vm_matrix_with(&o, &|_: &BuildOptions| {
            built.set(true);
            Ok(String::new())
        });
        assert_eq!(code, RIG_FAILURE_EXIT, "{images}");
        assert!(!built.get(), "{images}: nothing is built for bad input");
        let e = format!("{:#}", resolve_images(&o).unwrap_err());
        assert!(e.contains(want), "{images}: {e}");
    }
    assert!(
        !root.join("reports").exists(),
        "no matrix directory for bad input"
    );
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn exit_codes_follow_expectations_then_verdicts() {
    let pass = cell("a", None, "k", "c");
    assert_eq!(
        pass.judgement(),
        3,
        "a fresh run awaits the review, as vm-run"
    );
    let fail = cell("b", Some(GateName::Dump), "k", "c");
    assert_eq!(fail.judgement(), 1);
    assert_eq!(exit_code(&[pass.clone(), fail.clone()]), 1);
    assert_eq!(exit_code(std::slice::from_ref(&pass)), 3);

    // A known FAIL that is expected is a match: 0.
    let mut known = fail.clone();
    known.expected = Some(fail.gates.clone());
    compare(&mut known);
    assert!(known.differences.is_empty());
    assert_eq!(known.judgement(), 0);
    assert_eq!(exit_code(&[known.clone()]), 0);

    // The same expectation on a run that now passes: an improvement to record, 1.
    let mut better = pass.clone();
    better.expected = Some(fail.gates.clone());
    compare(&mut better);
    assert_eq!(better.differences, ["dump: expected FAIL, got PASS"]);
    assert_eq!(exit_code(&[known.clone(), better]), 1);

    // Any rig failure or unbuilt image outranks everything.
    let nr = not_run_cell("forky", "stale pin", "7.2.12-cloud-amd64");
    assert_eq!(nr.judgement(), 2);
    assert!(nr
        .fix
        .contains("cargo xtask image --image forky --update-lock"));
    assert!(nr.gates.iter().all(|g| g.status == Status::NotRun));
    // Its NOT_RUN gates are not held against the image's expectations: no differences.
    let mut nr_expected = nr.clone();
    nr_expected.expected = Some(pass.gates.clone());
    compare(&mut nr_expected);
    assert!(nr_expected.differences.is_empty());
    assert_eq!(nr_expected.judgement(), 2);
    assert_eq!(exit_code(&[known, nr]), 2);
}

/// A row whose report the verdict rejects is not "as expected", whatever its statuses: the
/// verdict's problems outrank the expectations, and the table and JUnit say so.
#[test]
fn a_rejected_report_fails_its_row_even_as_expected() {
    let mut c = cell("bookworm", None, "k", "c");
    c.expected = Some(c.gates.clone());
    compare(&mut c);
    assert!(c.as_expected());
    assert_eq!(c.judgement(), 0);
    c.problems = vec!["artifact serial.log: sha256 is 00, report says 11".into()];
    assert!(!c.as_expected());
    assert_eq!(c.judgement(), 1);
    assert_eq!(exit_code(std::slice::from_ref(&c)), 1);
    let m = Matrix {
        schema_version: MATRIX_SCHEMA_VERSION,
        started_at: "s".into(),
        finished_at: "f".into(),
        jobs: 1,
        jobs_reason: "r".into(),
        command_line: vec![],
        exit_code: 1,
        cells: vec![c],
    };
    let t = render::text(&m);
    assert!(t.contains("REJECTED") && !t.contains("as expected"), "{t}");
    assert!(
        t.contains("bookworm: report rejected: artifact serial.log"),
        "{t}"
    );
    let x = render::junit(&m);
    assert!(
        x.contains("bookworm.verdict") && x.contains("failures=\"1\""),
        "{x}"
    );
    // A rig failure still outranks it.
    let mut rig = m.cells[0].clone();
    rig.outcome = CellOutcome::RigFailed;
    assert_eq!(rig.judgement(), 2);
}

#[test]
fn vm_run_cmd_carries_the_shared_options() {
    let mut build = BuildOptions::new("x");
    build.images_dir = Some("/src/images".into());
    build.cache_dir = Some("/c".into());
    build.mode = Some(crate::image::BuilderMode::Unshare);
    let o = MatrixOptions {
        images: vec![],
        workloads: vec![],
        jobs: None,
        build,
        reports_root: "reports".into(),
        vm_run: vec!["/bin/xtask".into(), "vm-run".into()],
        extra_args: vec!["--accel".into(), "tcg".into()],
        guest_cpus: 2,
        command_line: vec![],
    };
    assert_eq!(
        vm_run_cmd(&o, &Row::plain("trixie"), Path::new("/m/trixie")).argv,
        [
            "/bin/xtask",
            "vm-run",
            "--image",
            "trixie",
            "--images-dir",
            "/src/images",
            "--cache-dir",
            "/c",
            "--mode",
            "unshare",
            "--accel",
            "tcg",
            "--out",
            "/m/trixie"
        ]
    );
    assert_eq!(parse_images_arg("a, b,,c"), ["a", "b", "c"]);
    // A variant row: its diagnose arguments last, after `--`, for vm-run to pass on.
    let row = Row::parse("trixie+cowroot+copies4").unwrap();
    let a = vm_run_cmd(&o, &row, Path::new("/m/trixie+cowroot+copies4")).argv;
    assert_eq!(
        a[a.len() - 7..],
        [
            "tcg",
            "--out",
            "/m/trixie+cowroot+copies4",
            "--",
            "--cow-root",
            "--copies",
            "4"
        ][..]
    );
    assert_eq!(&a[2..4], ["--image", "trixie"]);
}

/// The whole run with a stand-in vm-run (a script that archives a prepared report) and a
/// stand-in build that fails for one image: that cell is NOT_RUN with the way to refresh
/// its lock, the others still run, matrix.json is written and the exit code is the rig's.
#[test]
fn an_image_that_will_not_build_is_not_run_and_the_others_still_run() {
    use std::os::unix::fs::PermissionsExt;
    let root = std::env::temp_dir().join(format!("matrix-run-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let images = root.join("images");
    for n in ["good", "stale", "failing"] {
        std::fs::create_dir_all(images.join(n)).unwrap();
        std::fs::write(images.join(n).join(definition::DEFINITION_FILE), "").unwrap();
    }
    let src = root.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let mut good = report(&[], "6.12.57+deb13-cloud-amd64", "4.1.1");
    let mut failing = report(&[(GateName::Prerequisites, Status::Fail)], "7.3.1", "4.1.1");
    // As vm-run archives them: the image recorded, every listed artifact present (none).
    for (r, name) in [(&mut good, "good"), (&mut failing, "failing")] {
        r.artifacts.clear();
        if let Some(vm) = r.vm.as_mut() {
            vm.image_name = name.into();
            vm.image_sha256 = "ab".repeat(32);
        }
    }
    // Each with the checks the host judges again, and the PNGs they name.
    for (r, name) in [(&mut good, "good"), (&mut failing, "failing")] {
        let d = src.join(name);
        hostile_gate::honest::add_to(r, &d).unwrap();
        std::fs::write(d.join(REPORT_FILE), serde_json::to_string(&*r).unwrap()).unwrap();
    }
    // The failing image's known FAIL is committed as its expectation.
    let exp: String = cell_from_report("failing", &failing, 1)
        .gates
        .iter()
        .map(|g| format!("{} {}\n", g.name, g.status))
        .collect();
    std::fs::write(images.join("failing").join(EXPECTATIONS_FILE), exp).unwrap();
    let script = root.join("fake-vm-run");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in --image) img=$2; shift;; \
                 --out) out=$2; shift;; esac; shift; done\n\
                 mkdir -p \"$out\" && cp -R {}/\"$img\"/. \"$out\" || exit 2\n\
                 echo \"ran $img\"\n[ \"$img\" = good ] && exit 3\nexit 1\n",
            src.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut build = BuildOptions::new("good");
    build.images_dir = Some(images.clone());
    let opts = MatrixOptions {
        images: vec!["good".into(), "stale".into(), "failing".into()],
        workloads: vec![],
        jobs: Some(2),
        build,
        reports_root: root.join("reports"),
        vm_run: vec![script.display().to_string()],
        extra_args: vec![],
        guest_cpus: 2,
        command_line: vec!["test".into()],
    };
    let stale_build = |b: &BuildOptions| -> Result<String> {
        if b.image == "stale" {
            bail!("the lock of image stale does not match the mirror: criu 9 is not on the mirror")
        }
        Ok("cached".into())
    };
    let (dir, code) = run::run(&opts, &stale_build).unwrap();
    assert_eq!(
        code, 2,
        "an image that would not build is the rig's failure"
    );
    let (m, problems) = load(&dir, Some(&images), None).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(m.exit_code, 2);
    let names: Vec<&str> = m.cells.iter().map(|c| c.image.as_str()).collect();
    assert_eq!(names, ["good", "stale", "failing"]);
    assert_eq!(m.cells[0].outcome, CellOutcome::Ran);
    assert_eq!(m.cells[0].exit_code, Some(3));
    assert_eq!(m.cells[0].criu_version, "4.1.1");
    assert_eq!(m.cells[1].outcome, CellOutcome::NotRun);
    assert!(
        m.cells[1].reason.contains("criu 9 is not on the mirror"),
        "{:?}",
        m.cells[1]
    );
    assert!(m.cells[1].fix.contains("--update-lock"));
    assert!(m.cells[1].report_dir.is_none());
    assert!(!dir.join("stale").exists());
    assert_eq!(m.cells[2].status(GateName::Prerequisites), Status::Fail);
    assert!(
        m.cells[2].differences.is_empty(),
        "the known FAIL is expected"
    );
    assert_eq!(m.cells[2].judgement(), 0);
    assert!(std::fs::read_to_string(dir.join("good.log"))
        .unwrap()
        .contains("ran good"));

    // The same reports merged as CI merges them (stale's being what vm-run archives when its
    // image would not build) give the same table, expectations and exit code included.
    let stale_dir = root.join("stale-report");
    std::fs::create_dir_all(&stale_dir).unwrap();
    let stale = merge::tests::stale_report(
        "stale",
        "the lock of image stale does not match the mirror: criu 9 is not on the mirror",
    );
    std::fs::write(
        stale_dir.join(REPORT_FILE),
        serde_json::to_string(&stale).unwrap(),
    )
    .unwrap();
    let merged = merge::merge(&merge::MergeOptions {
        out: root.join("merged"),
        reports: vec![dir.join("good"), stale_dir, dir.join("failing")],
        images_dir: Some(images.clone()),
        images: vec![],
        command_line: vec![],
    })
    .unwrap();
    let body = |m: &Matrix| render::md(m).lines().skip(1).collect::<Vec<_>>().join("\n");
    assert_eq!(body(&merged), body(&m));
    assert_eq!(merged.exit_code, m.exit_code);
    for (a, b) in merged.cells.iter().zip(&m.cells) {
        assert_eq!(
            (&a.image, a.outcome, &a.gates, &a.expected, &a.differences),
            (&b.image, b.outcome, &b.gates, &b.expected, &b.differences)
        );
        assert_eq!(a.judgement(), b.judgement(), "{}", a.image);
    }

    // Without the unbuildable image: the good one awaits review (3), the failing one is as
    // expected (0), so 3.
    let mut o2 = opts.clone();
    o2.images = vec!["good".into(), "failing".into()];
    o2.reports_root = root.join("reports2");
    let (_, code) = run::run(&o2, &stale_build).unwrap();
    assert_eq!(code, 3);
    std::fs::remove_dir_all(&root).unwrap();
}

#[test]
fn load_rereads_each_cell_from_its_report() {
    let dir = std::env::temp_dir().join(format!("matrix-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bookworm")).unwrap();
    let mut r = report(&[], "6.1.0-50-cloud-amd64", "3.17.1");
    r.artifacts.clear();
    r.vm.as_mut().unwrap().image_name = "bookworm".into();
    hostile_gate::honest::add_to(&mut r, &dir.join("bookworm")).unwrap();
    std::fs::write(
        dir.join("bookworm/report.json"),
        serde_json::to_string(&r).unwrap(),
    )
    .unwrap();
    let c = cell_from_report("bookworm", &r, 3);
    let nr = not_run_cell("forky", "stale", "");
    let mut m = Matrix {
        schema_version: MATRIX_SCHEMA_VERSION,
        started_at: "s".into(),
        finished_at: "f".into(),
        jobs: 1,
        jobs_reason: "r".into(),
        command_line: vec![],
        cells: vec![c.clone(), nr],
        exit_code: 2,
    };
    write_matrix(&dir, &m).unwrap();
    assert!(is_matrix_dir(&dir));
    let (got, problems) = load(&dir, Some(&dir), None).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(got, m);

    // A matrix.json that claims more than its report: the report wins, and it is said.
    m.cells[0].gates[3].status = Status::Fail;
    write_matrix(&dir, &m).unwrap();
    let (got, problems) = load(&dir, Some(&dir), None).unwrap();
    assert_eq!(got.cells[0].status(GateName::Dump), Status::Pass);
    assert!(
        problems[0].contains("matrix.json and bookworm/report.json disagree on gate statuses"),
        "{problems:?}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Copies a report directory as an archive editor would: every byte the same.
pub(crate) fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

/// A row's report written into `matrix/<label>/` as vm-run archives it (the image and the row's
/// diagnose arguments on its command line, a client key of its session's own, the checks the
/// host judges again), and its cell as vm-matrix judges it.
fn archived_row(matrix: &Path, label: &str, kernel: &str) -> Cell {
    let row = Row::parse(label).unwrap();
    let mut r = report(&[], kernel, "3.17.1");
    r.artifacts.clear();
    let vm = r.vm.as_mut().unwrap();
    vm.image_name = row.image.clone();
    vm.image_sha256 = format!("{:0>64}", row.image.len());
    vm.command_line = ["xtask", "vm-run", "--image", &row.image]
        .map(String::from)
        .to_vec();
    if !row.variants.is_empty() {
        vm.command_line.push("--".into());
        vm.command_line.extend(row.diagnose_args());
    }
    vm.start = Some(sharedos_report::report::GuestStart {
        how: "cold".into(),
        client_key: format!("ssh-ed25519 AAAA-{label}"),
        ..Default::default()
    });
    hostile_gate::honest::add_to(&mut r, &matrix.join(label)).unwrap();
    std::fs::write(
        matrix.join(label).join(REPORT_FILE),
        serde_json::to_string(&r).unwrap(),
    )
    .unwrap();
    let c = finished_cell(&ReportDir::open(matrix).unwrap(), label, None, None);
    assert!(c.problems.is_empty(), "{label}: {:?}", c.problems);
    c
}

fn write_cells(dir: &Path, cells: Vec<Cell>) {
    let m = Matrix {
        schema_version: MATRIX_SCHEMA_VERSION,
        started_at: "s".into(),
        finished_at: "f".into(),
        jobs: 1,
        jobs_reason: "r".into(),
        command_line: vec![],
        exit_code: exit_code(&cells),
        cells,
    };
    write_matrix(dir, &m).unwrap();
}

/// `cell` as an editor who put `from`'s report in its place would write it in matrix.json: the
/// cell the report makes, under the other row's name, so matrix.json says nothing the reports
/// do not.
fn relabelled(from: &Cell, label: &str, report_dir: &str) -> Cell {
    let mut c = from.clone();
    c.image = label.into();
    c.variants = Row::parse(label).unwrap().variants;
    c.report_dir = Some(report_dir.into());
    c.log = Some(format!("{label}.log"));
    c
}

/// An archive editor copies one row's report, byte for byte, into another row's place (another
/// image's, the same image's variant row, a second row of the same name, the same directory
/// named twice) and writes matrix.json to agree. Each report passes its own checks there; the
/// reader fails the row, naming the row the report is of, or the row it repeats.
#[test]
fn a_report_copied_into_another_rows_place_fails_that_row() {
    let root = std::env::temp_dir().join(format!("matrix-forged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let dir = root.join("matrix");
    let images = root.join("images");
    std::fs::create_dir_all(&images).unwrap();
    let bookworm = archived_row(&dir, "bookworm", "6.1.0-50-cloud-amd64");
    let userns = archived_row(&dir, "bookworm+userns", "6.1.0-50-cloud-amd64");
    let trixie = archived_row(&dir, "trixie", "6.12.57+deb13-cloud-amd64");
    write_cells(&dir, vec![bookworm.clone(), userns.clone(), trixie]);
    let (honest, w) = load(&dir, Some(&images), None).unwrap();
    assert!(w.is_empty(), "{w:?}");
    assert!(honest.cells.iter().all(|c| c.problems.is_empty()));
    assert_eq!(honest.exit_code, 3, "every row awaits its review");

    let problems = |label: &str| -> Vec<String> {
        let (m, _) = load(&dir, Some(&images), None).unwrap();
        assert_eq!(m.exit_code, 1, "{label}: {:?}", m.cells);
        let c = m.cells.iter().rev().find(|c| c.image == label).unwrap();
        assert_eq!(c.judgement(), 1);
        c.problems.clone()
    };
    // Another image's report in trixie's place.
    std::fs::remove_dir_all(dir.join("trixie")).unwrap();
    copy_dir(&dir.join("bookworm"), &dir.join("trixie"));
    let forged = relabelled(&bookworm, "trixie", "trixie");
    write_cells(&dir, vec![bookworm.clone(), userns.clone(), forged]);
    let p = problems("trixie");
    assert_eq!(
        p[0],
        "its report is a run of row bookworm, not of trixie: a report of another row put in this \
         one's place"
    );
    let same = "its report is the same run as row bookworm's (bookworm/): both carry the \
                report.json sha256 ";
    assert!(p[1].starts_with(same), "{p:?}");
    assert_eq!(p.len(), 2, "{p:?}");
    // The plain row's report in its variant row's place: the same image, another run.
    std::fs::remove_dir_all(dir.join("bookworm+userns")).unwrap();
    copy_dir(&dir.join("bookworm"), &dir.join("bookworm+userns"));
    let forged = relabelled(&bookworm, "bookworm+userns", "bookworm+userns");
    write_cells(&dir, vec![bookworm.clone(), forged]);
    let p = problems("bookworm+userns");
    assert_eq!(
        p[0],
        "its report is a run of row bookworm, not of bookworm+userns: a report of another row \
         put in this one's place"
    );
    assert!(p[1].starts_with(same), "{p:?}");
    // One run as two rows of one name, from a copy of its directory.
    copy_dir(&dir.join("bookworm"), &dir.join("bookworm-again"));
    let again = relabelled(&bookworm, "bookworm", "bookworm-again");
    write_cells(&dir, vec![bookworm.clone(), again]);
    let p = problems("bookworm");
    assert_eq!(p.len(), 2, "{p:?}");
    assert_eq!(
        p[0],
        "matrix.json names row bookworm a second time (first with bookworm/)"
    );
    assert!(
        p[1].starts_with(same) && p[1].ends_with(": one run counted in two rows"),
        "{p:?}"
    );
    // One directory named by two rows.
    let twice = relabelled(&bookworm, "trixie", "bookworm");
    write_cells(&dir, vec![bookworm, twice]);
    let p = problems("trixie");
    assert!(
        p[0].contains("a run of row bookworm, not of trixie"),
        "{p:?}"
    );
    assert!(p[1].starts_with(same), "{p:?}");
    std::fs::remove_dir_all(&root).unwrap();
}
