//! Matrix directories: show and diff of one as vm-matrix leaves it, `matrix merge` over vm-run
//! reports as the CI workflow runs it, and `matrix pairs` over vm-migrate's directories.

use super::{code, rig, rig_in, stderr, stdout, write_report};
use crate::common::scratch::Scratch;
use sharedos_report::report::{GateName, Status};
use std::path::Path;

/// A matrix directory as vm-matrix leaves it: each image's report under its name, one image
/// that never ran, and matrix.json written through the library's one schema.
fn write_matrix(dir: &Path, dump_fails_on: Option<&str>) {
    use sharedos_rig::matrix;
    let mut cells = Vec::new();
    for (image, kernel, criu) in [
        ("bookworm", "6.1.0-50-cloud-amd64", "3.17.1"),
        ("trixie", "6.12.57+deb13-cloud-amd64", "4.1.1"),
    ] {
        let rd = dir.join(image);
        write_report(&rd, "2026-12-01T06:00:00.000Z", |r| {
            r.environment.kernel_release = kernel.into();
            r.environment.criu_version = Some(criu.into());
            if let Some(vm) = r.vm.as_mut() {
                vm.image_name = image.into();
            }
            if dump_fails_on == Some(image) {
                r.gates[3].status = Status::Fail;
                r.gates[3].reason = "criu dump: vdso: Unexpected rt vDSO area bounds".into();
            }
        });
        let o = sharedos_rig::judge::judge(&rd, &sharedos_rig::judge::How::full(None)).unwrap();
        cells.push(matrix::cell_from_outcome(image, &o));
    }
    cells.push(matrix::not_run_cell(
        "forky",
        "the image could not be built: criu 4.2.1-1 is not on the mirror",
        "7.2.12-cloud-amd64",
    ));
    let m = matrix::Matrix {
        schema_version: matrix::MATRIX_SCHEMA_VERSION,
        started_at: "2026-12-01T06:00:00Z".into(),
        finished_at: "2026-12-01T06:09:00Z".into(),
        jobs: 1,
        jobs_reason: "2 host cores / 2 vCPUs per guest, at least 1".into(),
        command_line: vec!["xtask".into(), "vm-matrix".into()],
        exit_code: matrix::exit_code(&cells),
        cells,
    };
    matrix::write_matrix(dir, &m).unwrap();
}

#[test]
fn show_and_diff_read_a_matrix_directory() {
    let s = Scratch::new("matrix");
    let a = s.0.join("matrix-a");
    let b = s.0.join("matrix-b");
    write_matrix(&a, None);
    write_matrix(&b, Some("trixie"));

    let o = rig(&["show", a.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.starts_with("matrix: 3 image(s), exit 2"), "{t}");
    let row = t.lines().find(|l| l.starts_with("trixie ")).unwrap();
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        words[1..4],
        ["6.12.57+deb13-cloud-amd64", "4.1.1", "tcg"],
        "{row}"
    );
    assert!(t.contains("forky: to fix: refresh its lock"), "{t}");
    for (format, want) in [
        ("md", "| trixie | 6.12.57+deb13-cloud-amd64 | 4.1.1 | tcg |"),
        ("html", "<td>trixie</td>"),
        ("junit", "<testsuite name=\"trixie\""),
    ] {
        let o = rig(&["show", a.to_str().unwrap(), "--format", format]);
        assert_eq!(code(&o), 0, "{format}: {}", stderr(&o));
        assert!(stdout(&o).contains(want), "{format}:\n{}", stdout(&o));
    }

    let o = rig(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let d = stdout(&o);
    assert!(d.contains("trixie:\n  dump: PASS -> FAIL"), "{d}");
    assert!(d.contains("bookworm: same gate statuses"), "{d}");

    // A matrix beside a single report is not a comparison anyone meant.
    let o = rig(&[
        "diff",
        a.to_str().unwrap(),
        a.join("bookworm").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("matrix directory and the other is not"),
        "{}",
        stderr(&o)
    );

    // The per-image report wins over a matrix.json that says otherwise, and show says so.
    let text = std::fs::read_to_string(a.join("matrix.json")).unwrap();
    let forged = text.replacen(
        "\"name\": \"dump\",\n          \"status\": \"PASS\"",
        "\"name\": \"dump\",\n          \"status\": \"FAIL\"",
        1,
    );
    assert_ne!(forged, text);
    std::fs::write(a.join("matrix.json"), forged).unwrap();
    let o = rig(&["show", a.to_str().unwrap()]);
    assert_eq!(code(&o), 0);
    assert!(
        stderr(&o).contains("matrix.json and bookworm/report.json disagree on gate statuses"),
        "{}",
        stderr(&o)
    );
    let row = stdout(&o)
        .lines()
        .find(|l| l.starts_with("bookworm "))
        .unwrap()
        .to_string();
    assert!(!row.contains("FAIL"), "{row}");
}

/// `sharedos-rig matrix merge` as the CI workflow runs it, on report directories as vm-run
/// leaves them: each row named from its report, a plain row held against its image's
/// expected-gates, the exit code vm-matrix's, and bad input refused with exit 2.
#[test]
fn matrix_merge_builds_a_matrix_from_vm_run_reports() {
    let s = Scratch::new("merge");
    let images = s.0.join("images");
    for name in ["bookworm", "trixie"] {
        std::fs::create_dir_all(images.join(name)).unwrap();
        std::fs::write(images.join(name).join("image.conf"), "").unwrap();
    }
    let expect: String = GateName::ALL
        .iter()
        .map(|g| match g {
            GateName::GuiPixelReview => format!("{g} REVIEW_REQUIRED\n"),
            _ => format!("{g} PASS\n"),
        })
        .collect();
    std::fs::write(images.join("bookworm/expected-gates"), &expect).unwrap();
    let as_vm_run = |dir: &Path, image: &str, diagnose: &[&str], dump_fails: bool| {
        let (image, diagnose) = (image.to_string(), diagnose.to_vec());
        write_report(dir, "2026-12-01T06:00:00.000Z", move |r| {
            let vm = r.vm.as_mut().unwrap();
            vm.image_name = image.clone();
            vm.command_line = vec!["xtask".into(), "vm-run".into(), "--image".into(), image];
            if !diagnose.is_empty() {
                vm.command_line.push("--".into());
                vm.command_line
                    .extend(diagnose.iter().map(|a| a.to_string()));
            }
            if dump_fails {
                r.gates[3].status = Status::Fail;
            }
        });
    };
    let b = s.0.join("in/b");
    let t = s.0.join("in/t");
    let v = s.0.join("in/v");
    as_vm_run(&b, "bookworm", &[], false);
    as_vm_run(&t, "trixie", &[], false);
    as_vm_run(&v, "bookworm", &["--userns"], false);
    let merged = s.0.join("merged");
    let (ms, is) = (merged.to_str().unwrap(), images.to_str().unwrap());
    let (bs, ts, vs) = (
        b.to_str().unwrap(),
        t.to_str().unwrap(),
        v.to_str().unwrap(),
    );
    let args = [
        "matrix",
        "merge",
        "--out",
        ms,
        "--images-dir",
        is,
        bs,
        ts,
        vs,
    ];
    let o = rig(&args);
    // bookworm as expected (0); trixie and bookworm+userns, without expectations, await the
    // review (3): the matrix exits 3, as vm-matrix would.
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().last(), Some(ms));
    assert!(
        stderr(&o).contains("matrix: 3 image(s), exit 3"),
        "{}",
        stderr(&o)
    );
    let o = rig_in(&merged, &["show", "DIR", "--format", "md"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let md = stdout(&o);
    assert!(md.contains("| bookworm | 6.1.0-28-amd64 |"), "{md}");
    assert!(md.contains("| as expected |"), "{md}");
    assert!(md.contains("| bookworm+userns | "), "{md}");
    assert!(merged.join("bookworm+userns/report.json").is_file());
    // The summary step's command, on the merged directory.
    let o = rig(&["show", ms, "--format", "md"]);
    assert_eq!(
        stdout(&o),
        md,
        "the workflow's [\"show\", \"MERGED\", \"--format\", \"md\"]"
    );

    // bookworm's dump now FAILs where its expectations say PASS: 1.
    let b2 = s.0.join("in/b2");
    as_vm_run(&b2, "bookworm", &[], true);
    let m2 = s.0.join("merged2");
    let o = rig(&[
        "matrix",
        "merge",
        "--out",
        m2.to_str().unwrap(),
        "--images-dir",
        is,
        b2.to_str().unwrap(),
        ts,
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bookworm: dump: expected PASS, got FAIL"),
        "{}",
        stderr(&o)
    );

    // Two reports of one row, and a directory that holds no report: exit 2, named.
    for (extra, want) in [
        (bs, "are both reports of row bookworm"),
        (is, "report directory"),
    ] {
        let m3 = s.0.join("merged3");
        let o = rig(&["matrix", "merge", "--out", m3.to_str().unwrap(), bs, extra]);
        assert_eq!(code(&o), 2);
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
        assert!(!m3.exists());
    }
}

/// One half of a migration as vm-migrate archives it: the image its guest booted, its kernel and
/// CRIU, the other side's gates NOT_RUN; `refusal` makes its restore one CRIU refused, quoting
/// that error.
fn write_half(dir: &Path, image: &str, kernel: &str, not_here: &[GateName], refusal: Option<&str>) {
    write_report(dir, "2026-12-02T10:00:00.000Z", |r| {
        r.environment.kernel_release = kernel.into();
        if let Some(vm) = r.vm.as_mut() {
            vm.image_name = image.into();
        }
        for g in r.gates.iter_mut() {
            if not_here.contains(&g.name) {
                g.status = Status::NotRun;
            }
        }
        if let Some(error) = refusal {
            let g = r
                .gates
                .iter_mut()
                .find(|g| g.name == GateName::RestoreLiveProcess)
                .unwrap();
            g.status = Status::Fail;
            g.reason = "criu_restore_succeeded failed (log: criu/restore-a.log)".into();
            g.checks.iter_mut().for_each(|c| c.passed = false);
            g.cause = Some(sharedos_report::cause::Cause {
                source: "criu restore".into(),
                log: "criu/restore-a.log".into(),
                error: error.into(),
                before: vec![],
            });
        }
    });
}

fn write_migration(dir: &Path, from: (&str, &str), to: (&str, &str), refusal: Option<&str>) {
    use GateName::*;
    write_half(
        &dir.join("from"),
        from.0,
        from.1,
        &[
            RestoreLiveProcess,
            RestoreXState,
            Isolation,
            Reset,
            GuiPixelReview,
        ],
        None,
    );
    write_half(
        &dir.join("to"),
        to.0,
        to.1,
        &[Launch, LiveStateProbe, GuiPixelReview],
        refusal,
    );
    let verdict = if refusal.is_some() { "FAIL" } else { "PASS" };
    std::fs::write(
        dir.join("migration.json"),
        format!(
            r#"{{"from": {{"image": "{}"}}, "to": {{"image": "{}"}}, "verdict": "{verdict}"}}"#,
            from.0, to.0
        ),
    )
    .unwrap();
}

/// `sharedos-rig matrix pairs` over vm-migrate's directories: one row per pair, a restore CRIU
/// refused a FAIL with CRIU's error as its cause (escaped), the exit code the worst pair's,
/// `show` of one migration its row, migration.json overruled where it says otherwise.
#[test]
fn matrix_pairs_shows_each_migration_with_its_cause() {
    let s = Scratch::new("pairs");
    let reports = s.0.join("reports");
    let ok = reports.join("20261202T100000Z-migrate-bookworm-bookworm-bpo");
    write_migration(
        &ok,
        ("bookworm", "6.1.0-50-cloud-amd64"),
        ("bookworm-bpo", "6.12.95+deb12-cloud-amd64"),
        None,
    );
    let refused = reports.join("20261202T110000Z-migrate-trixie-trixie-bpo");
    write_migration(
        &refused,
        ("trixie", "6.12.117+deb13-cloud-amd64"),
        ("trixie-bpo", "7.3.4+deb13-cloud-amd64"),
        Some("(00.512) Error (criu/cr-restore.c:1480): Can't fork for 77: \u{1b}[2JFile exists"),
    );
    write_report(
        &reports.join("20261202T090000Z-run"),
        "2026-12-02T09:00:00.000Z",
        |_| {},
    );

    let o = rig(&["matrix", "pairs", reports.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    let t = stdout(&o);
    assert!(t.starts_with("pairs: 2 migration(s), exit 1"), "{t}");
    let row = |name: &str| -> Vec<String> {
        t.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{t}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("bookworm "),
        [
            "bookworm",
            "6.1.0-50-cloud-amd64",
            "Version:",
            "3.17.1",
            "bookworm-bpo",
            "6.12.95+deb12-cloud-amd64",
            "Version:",
            "3.17.1",
            "PASS",
            "-",
            "20261202T100000Z-migrate-bookworm-bookworm-bpo"
        ]
    );
    assert!(
        t.contains("FAIL     to: restore_live_process: criu restore: Can't fork for 77: \\u{1b}[2JFile exists"),
        "{t}"
    );
    assert!(!t.contains('\u{1b}'), "{t:?}");

    for (format, want) in [
        (
            "md",
            "| FAIL | to: restore\\_live\\_process: criu restore: Can't fork for 77:",
        ),
        ("html", "<td>trixie-bpo</td>"),
        (
            "junit",
            "<failure message=\"FAIL: to: restore_live_process: criu restore:",
        ),
    ] {
        let o = rig(&[
            "matrix",
            "pairs",
            "--format",
            format,
            refused.to_str().unwrap(),
        ]);
        assert_eq!(code(&o), 1, "{format}: {}", stderr(&o));
        assert!(stdout(&o).contains(want), "{format}:\n{}", stdout(&o));
        assert!(!stdout(&o).contains('\u{1b}'), "{format}");
    }

    // show of one migration directory: its row, exit 0 as show of a matrix.
    let o = rig(&["show", ok.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("pairs: 1 migration(s), exit 0"),
        "{}",
        stdout(&o)
    );

    // A migration.json that says PASS over a refused restore: the halves win, and it is said.
    let forged = std::fs::read_to_string(refused.join("migration.json"))
        .unwrap()
        .replace("\"FAIL\"", "\"PASS\"");
    std::fs::write(refused.join("migration.json"), forged).unwrap();
    let o = rig(&["matrix", "pairs", refused.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("migration.json says PASS, its halves judged again give FAIL"),
        "{}",
        stderr(&o)
    );

    // A vm-run report is no migration: exit 2, and what to give instead.
    let o = rig(&[
        "matrix",
        "pairs",
        reports.join("20261202T090000Z-run").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("give vm-migrate's directories"),
        "{}",
        stderr(&o)
    );
}

/// The density gate of a `--copies 2` run, its two copies measured (PSS 26870 and 26900 KiB).
const DENSITY: &str = r#"{"copies": 2, "ended_before": [], "limits": {"cap": 2, "deadline": null, "reserve_kib": null}, "mem_total_kib": 995356, "mem_used_before_kib": 167072, "mem_used_with_copies_kib": 221000, "per_copy": [{"label": "density-1", "mem": {"pss_kib": 26870, "rss_kib": 28468, "uss_kib": 26464}, "pid": 339, "processes": 5}, {"label": "density-2", "mem": {"pss_kib": 26900, "rss_kib": 28468, "uss_kib": 26464}, "pid": 340, "processes": 5}], "requested": {"count": 2}, "restore_ms": [1922, 1773], "restore_ms_median": 1847.5, "restore_ms_p95": 1922, "reset_ms": [2100, 2200], "stop_detail": "2 copies restored as asked", "stopped_by": "count", "total": {"pss_kib": 53770, "rss_kib": 56936, "uss_kib": 52928}}"#;

/// A matrix directory as `vm-matrix --workloads xterm,browser` leaves it, in part: the xterm on
/// bookworm forked with two copies measured, the browser's dump refused by CRIU, and a line
/// with no image for it.
fn write_workload_matrix(dir: &Path) {
    use sharedos_rig::matrix;
    let mut cells = Vec::new();
    for (label, diagnose, dump_refused) in [
        ("bookworm+copies2", vec!["--copies", "2"], false),
        (
            "bookworm-browser+browser+copies2",
            vec!["--workload", "browser", "--copies", "2"],
            true,
        ),
    ] {
        let rd = dir.join(label);
        let image = label.split('+').next().unwrap();
        write_report(&rd, "2026-12-01T06:00:00.000Z", |r| {
            r.environment.kernel_release = "6.1.0-50-cloud-amd64".into();
            r.environment.criu_version = Some("3.17.1".into());
            if let Some(vm) = r.vm.as_mut() {
                vm.image_name = image.into();
                vm.command_line.push("--".into());
                vm.command_line
                    .extend(diagnose.iter().map(|s| s.to_string()));
            }
            r.options.copies =
                Some(serde_json::from_value(serde_json::json!({"count": 2})).unwrap());
            let mut g = r.gate(GateName::Reset).unwrap().clone();
            g.name = GateName::Density;
            g.reason = "2 copies up at once".into();
            g.data
                .insert("density".into(), serde_json::from_str(DENSITY).unwrap());
            r.gates[4]
                .data
                .insert("restore_ms".into(), serde_json::json!(3880));
            if dump_refused {
                r.gates[3].status = Status::Fail;
                r.gates[3].reason = "criu dump: Can't dump nested ipc namespace for 1234".into();
                for i in 4..8 {
                    r.gates[i].status = Status::NotRun;
                    r.gates[i].checks.clear();
                    r.gates[i].data.clear();
                }
                g.status = Status::NotRun;
                g.checks.clear();
                g.data.clear();
            }
            r.insert_gate(g);
        });
        let o = sharedos_rig::judge::judge(&rd, &sharedos_rig::judge::How::full(None)).unwrap();
        cells.push(matrix::cell_from_outcome(label, &o));
    }
    let mut gap = matrix::not_run_cell(
        "trixie+browser+copies2",
        "no image on criu 4.1.1's line holds browser: add images/trixie-apps (the line's image is \
         trixie or inherits it, its lock installs criu 4.1.1; browser needs firefox-esr)",
        "",
    );
    gap.fix = "add images/trixie-apps/image.conf".into();
    cells.push(gap);
    let m = matrix::Matrix {
        schema_version: matrix::MATRIX_SCHEMA_VERSION,
        started_at: "2026-12-01T06:00:00Z".into(),
        finished_at: "2026-12-01T06:09:00Z".into(),
        jobs: 1,
        jobs_reason: "2 host cores / 2 vCPUs per guest, at least 1".into(),
        command_line: vec!["xtask".into(), "vm-matrix".into()],
        exit_code: matrix::exit_code(&cells),
        cells,
    };
    matrix::write_matrix(dir, &m).unwrap();
}

/// `matrix table`: the deployment table from a matrix directory, each row judged again from its
/// report, and README's copy held to it (`--readme`, `--write`).
#[test]
fn matrix_table_renders_the_deployment_table_and_holds_readme_to_it() {
    let s = Scratch::new("table");
    let m = s.0.join("matrix-w");
    write_workload_matrix(&m);
    let o = rig(&["matrix", "table", m.to_str().unwrap(), "--format", "md"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let table = stdout(&o);
    assert_eq!(
        table,
        "| application | criu | forks | cause where not | turned off to fork | memory per copy | fork latency | row |\n\
         | --- | --- | --- | --- | --- | --- | --- | --- |\n\
         | xterm | 3.17.1 | yes | - | nothing | 26.3 MiB PSS | 3.88 s (tcg) | bookworm+copies2 |\n\
         | browser | 3.17.1 | no | dump: criu dump: Can't dump nested ipc namespace for 1234 | nothing | - (density NOT\\_RUN) | - | bookworm-browser+browser+copies2 |\n\
         | browser | 4.1.1 | NOT\\_RUN | no image on criu 4.1.1's line holds browser: add images/trixie-apps (the line's image is trixie or inherits it, its l... | nothing | - (nothing ran) | - | trixie+browser+copies2 |\n",
        "{table}"
    );
    let o = rig(&["matrix", "table", m.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("application  criu    forks"),
        "{}",
        stdout(&o)
    );

    // README's copy, between the markers naming the matrix directory beside it.
    let readme = s.0.join("README.md");
    let good = format!(
        "# rig\n\n<!-- deployment-table:begin matrix-w -->\n{table}<!-- deployment-table:end -->\n"
    );
    std::fs::write(&readme, &good).unwrap();
    let check = || rig(&["matrix", "table", "--readme", readme.to_str().unwrap()]);
    let o = check();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    // A figure changed by hand: the check fails, naming the fix.
    std::fs::write(&readme, good.replace("26.3 MiB", "20.0 MiB")).unwrap();
    let o = check();
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stderr(&o).contains("fix: `sharedos-rig matrix table --readme"),
        "{}",
        stderr(&o)
    );
    let o = rig(&[
        "matrix",
        "table",
        "--readme",
        readme.to_str().unwrap(),
        "--write",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&readme).unwrap(), good);
    // The report wins over matrix.json: a cell said to pass in matrix.json is the report's.
    let text = std::fs::read_to_string(m.join("matrix.json")).unwrap();
    std::fs::write(
        m.join("matrix.json"),
        text.replace("Can't dump nested ipc namespace", "it was fine"),
    )
    .unwrap();
    let o = check();
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}
