use super::*;
use crate::judge::review::tests::fresh_report;
use crate::judge::verdict::evaluate_report;
use sharedos_report::cause::Cause;
use sharedos_report::report::{GateName, Report, Status, VmProvenance};
use GateName::*;

const DUMP_SIDE_NOT_RUN: [GateName; 5] = [
    RestoreLiveProcess,
    RestoreXState,
    Isolation,
    Reset,
    GuiPixelReview,
];
const RESTORE_SIDE_NOT_RUN: [GateName; 3] = [Launch, LiveStateProbe, GuiPixelReview];

/// One half of a migration as vm-run archives it: the image it booted, its kernel and CRIU,
/// the other side's gates NOT_RUN.
fn half(image: &str, kernel: &str, criu: &str, not_here: &[GateName]) -> Report {
    let mut r = fresh_report();
    for g in r.gates.iter_mut() {
        if not_here.contains(&g.name) {
            g.status = Status::NotRun;
        }
    }
    r.environment.kernel_release = kernel.into();
    r.environment.criu_version = Some(criu.into());
    r.vm = Some(VmProvenance {
        image_name: image.into(),
        accel: "tcg".into(),
        ..Default::default()
    });
    r.seal();
    r
}

fn dump_side(image: &str, kernel: &str, criu: &str) -> Report {
    half(image, kernel, criu, &DUMP_SIDE_NOT_RUN)
}

fn restore_side(image: &str, kernel: &str, criu: &str) -> Report {
    half(image, kernel, criu, &RESTORE_SIDE_NOT_RUN)
}

/// `gate` failed, quoting `error` from `source`'s log when given.
fn failed(mut r: Report, gate: GateName, source: &str, error: Option<&str>) -> Report {
    let g = r.gate_mut(gate).unwrap();
    g.status = Status::Fail;
    g.reason = format!("{gate} failed (log: criu/x.log)");
    g.checks[0].passed = false;
    g.cause = error.map(|e| Cause {
        source: source.into(),
        log: "criu/restore-a.log".into(),
        error: e.into(),
        before: vec!["(00.50) Restoring task 77".into()],
    });
    r.seal();
    r
}

fn judged(label: &str, from: &Report, to: Option<&Report>) -> (Pair, Vec<String>) {
    let f = evaluate_report(from, None);
    let t = to.map(|t| evaluate_report(t, None));
    pair(label, None, Ok(&f), t.as_ref().map(Ok))
}

/// The restore side with CRIU's refusal quoted in restore_live_process: the failing half
/// most of these tests need, kept in one place so they fail for the same reason.
fn refused(r: Report) -> Report {
    failed(r, RestoreLiveProcess, "criu restore", Some(REFUSAL))
}

const REFUSAL: &str = "(00.512) Error (criu/cr-restore.c:1480): Can't fork for 77: File exists";

#[test]
fn a_pair_passes_only_when_both_halves_hold() {
    let from = dump_side("bookworm", "6.1.0-50-cloud-amd64", "3.17.1");
    let to = restore_side("bookworm-bpo", "6.12.95+deb12-cloud-amd64", "3.17.1");
    let (p, w) = judged("m1", &from, Some(&to));
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(p.outcome, PairOutcome::Judged(Verdict::Pass), "{p:?}");
    assert_eq!(p.cause, "");
    assert_eq!(
        (
            p.from.image.as_str(),
            p.from.kernel.as_str(),
            p.from.criu.as_str()
        ),
        ("bookworm", "6.1.0-50-cloud-amd64", "3.17.1")
    );
    assert_eq!(p.to.kernel, "6.12.95+deb12-cloud-amd64");
    let m = Pairs::new(vec![p]);
    assert_eq!(m.exit_code, 0);
    let t = text(&m);
    let row: Vec<&str> = t.lines().nth(2).unwrap().split_whitespace().collect();
    assert_eq!(
        row,
        [
            "bookworm",
            "6.1.0-50-cloud-amd64",
            "3.17.1",
            "bookworm-bpo",
            "6.12.95+deb12-cloud-amd64",
            "3.17.1",
            "PASS",
            "-",
            "m1"
        ],
        "{t}"
    );
}

#[test]
fn a_restore_criu_refused_fails_its_row_with_crius_error_as_the_cause() {
    let from = dump_side("trixie", "6.12.117+deb13-cloud-amd64", "4.1.1");
    let to = refused(restore_side(
        "trixie-bpo",
        "7.3.4+deb13-cloud-amd64",
        "4.1.1",
    ));
    let (p, _) = judged("m2", &from, Some(&to));
    assert_eq!(p.outcome, PairOutcome::Judged(Verdict::Fail));
    assert_eq!(p.exit_code(), 1);
    assert_eq!(
        p.cause,
        "to: restore_live_process: criu restore: Can't fork for 77: File exists"
    );
    assert!(
        p.notes
            .iter()
            .any(|n| n == &format!("to: criu restore said (to/criu/restore-a.log): {REFUSAL}")),
        "{:?}",
        p.notes
    );
    let m = Pairs::new(vec![p]);
    assert_eq!(m.exit_code, 1);
    let t = text(&m);
    assert!(
        t.contains(
            "FAIL     to: restore_live_process: criu restore: Can't fork for 77: File exists"
        ),
        "{t}"
    );
    assert!(t.contains("m2: to: criu restore said"), "{t}");
    let md_page = md(&m);
    assert!(
        md_page.contains(
            "| FAIL | to: restore\\_live\\_process: criu restore: Can't fork for 77: File exists | m2 |"
        ),
        "{md_page}"
    );
    assert!(html(&m).contains("font-weight:bold\">FAIL</td><td>to: restore_live_process: criu restore: Can&#39;t fork"), "{}", html(&m));
    let x = junit(&m);
    assert!(
        x.contains(
            "<failure message=\"FAIL: to: restore_live_process: criu restore: Can&apos;t fork"
        ),
        "{x}"
    );
    roxmltree::Document::parse(&x).unwrap();

    // The same refusal where the gate quoted nothing: the cause is its reason.
    let quiet = failed(to.clone(), RestoreLiveProcess, "", None);
    let (q, _) = judged("m3", &from, Some(&quiet));
    assert_eq!(
        q.cause,
        "to: restore_live_process is FAIL: restore_live_process failed (log: criu/x.log)"
    );
    // A dump side CRIU could not dump: its cause, and no restore side after it.
    let no_dump = failed(
        from.clone(),
        Dump,
        "criu dump",
        Some("(01.41) Error (criu/sockets.c:885): sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2"),
    );
    let (d, _) = judged("m4", &no_dump, None);
    assert_eq!(d.outcome, PairOutcome::Judged(Verdict::Fail));
    assert!(
        d.cause
            .starts_with("from: dump: criu dump: sockets: Sockects collect"),
        "{}",
        d.cause
    );
    assert!(d
        .notes
        .iter()
        .any(|n| n.contains("restore side did not run")));
}

#[test]
fn a_cause_is_cut_to_a_cells_length() {
    let from = dump_side("a", "k", "c");
    let long = format!("Error (x.c:1): {}", "y".repeat(1000));
    let to = failed(
        restore_side("b", "k", "c"),
        RestoreLiveProcess,
        "criu restore",
        Some(&long),
    );
    let (p, _) = judged("m", &from, Some(&to));
    assert_eq!(p.cause.chars().count(), CELL_CAUSE_CHARS);
    assert!(p.cause.ends_with("..."));
}

/// Text from a guest (a cause, a kernel release) reaches no table as itself: a terminal
/// escape, a table cell's bar, a tag and a new line are escaped in every format.
#[test]
fn a_hostile_cause_comes_out_escaped_in_every_format() {
    let from = dump_side("bookworm", "6.1\u{1b}]0;owned\u{7}", "3.17.1");
    let evil = "Error (x.c:1): \u{1b}[2J\u{1b}[1;1Hverdict PASS\n| PASS | *boom* <img src=x onerror=alert(1)>";
    let to = failed(
        restore_side("bookworm-bpo", "6.12", "3.17.1"),
        RestoreLiveProcess,
        "criu restore",
        Some(evil),
    );
    let (p, _) = judged("m\u{1b}[31m", &from, Some(&to));
    assert!(
        p.cause.contains('\u{1b}'),
        "kept as it came, escaped when shown"
    );
    let m = Pairs::new(vec![p]);
    let t = text(&m);
    assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
    assert!(t.contains("\\u{1b}[2J"), "{t}");
    assert!(t.contains("6.1\\u{1b}]0;owned\\u{7}"), "{t}");
    // The header, the headings, one row and two notes: the new line made no line of its own.
    assert_eq!(t.lines().count(), 5, "{t}");
    assert_eq!(
        t.lines().filter(|l| l.contains("verdict PASS")).count(),
        2,
        "{t}"
    );
    assert!(t.lines().all(|l| !l.starts_with("| PASS")), "{t}");
    let md_page = md(&m);
    assert!(!md_page.contains('\u{1b}'), "{md_page:?}");
    assert!(!md_page.contains("| PASS | *boom*"), "{md_page}");
    assert!(!md_page.contains("<img"), "{md_page}");
    assert_eq!(
        md_page.lines().filter(|l| l.starts_with("| ")).count(),
        3,
        "{md_page}"
    );
    let page = html(&m);
    assert!(!page.contains("<img") && !page.contains('\u{1b}'), "{page}");
    let x = junit(&m);
    assert!(!x.contains("<img"), "{x}");
    roxmltree::Document::parse(&x).unwrap();
}

#[test]
fn a_rig_failure_outranks_a_verdict_and_says_why() {
    let from = dump_side("bookworm", "6.1", "3.17.1");
    let to = restore_side("bookworm-bpo", "6.12", "3.17.1");
    let f = evaluate_report(&from, None);
    // A half that cannot be judged; migration.json names the guest it ran.
    let summary = serde_json::json!({
        "from": {"image": "bookworm", "kernel": "6.1", "criu": "3.17.1"},
        "to": {"image": "bookworm-bpo"},
        "verdict": "RIG_FAILURE",
    });
    let (p, w) = pair(
        "m",
        Some(&summary),
        Err("from/report.json: a symbolic link, not followed".into()),
        None,
    );
    assert!(w.is_empty(), "{w:?}");
    assert_eq!(p.exit_code(), RIG_FAILURE_EXIT);
    assert_eq!(p.from.image, "bookworm");
    assert_eq!(p.to.image, "bookworm-bpo");
    assert!(
        p.cause.contains("a symbolic link, not followed"),
        "{}",
        p.cause
    );
    // The restore side's run failed.
    let mut lost = to.clone();
    lost.vm.as_mut().unwrap().rig_error = Some("ssh: connection refused".into());
    lost.exit_code = RIG_FAILURE_EXIT;
    let l = evaluate_report(&lost, None);
    let (p2, _) = pair("m2", None, Ok(&f), Some(Ok(&l)));
    assert_eq!(
        p2.outcome,
        PairOutcome::RigFailed("the restore side's run failed: ssh: connection refused".into())
    );
    // The dump side's run failed: whatever the restore side says.
    let mut crashed = from.clone();
    crashed.vm.as_mut().unwrap().rig_error = Some("the guest kernel panicked".into());
    crashed.exit_code = RIG_FAILURE_EXIT;
    let c = evaluate_report(&crashed, None);
    let t = evaluate_report(&to, None);
    let (p5, _) = pair("m5", None, Ok(&c), Some(Ok(&t)));
    assert_eq!(
        p5.outcome,
        PairOutcome::RigFailed("the dump side's run failed: the guest kernel panicked".into())
    );
    // The dump side passed and nothing came after it.
    let (p3, _) = pair("m3", None, Ok(&f), None);
    assert!(
        matches!(&p3.outcome, PairOutcome::RigFailed(w) if w.contains("holds no restore side")),
        "{p3:?}"
    );
    // Without the failure, the same halves pass: the check can go either way.
    let t = evaluate_report(&to, None);
    assert_eq!(pair("m4", None, Ok(&f), Some(Ok(&t))).0.exit_code(), 0);
    let (fail, _) = judged("m5", &from, Some(&refused(to.clone())));
    assert_eq!(Pairs::new(vec![fail.clone(), p3.clone()]).exit_code, 2);
    assert_eq!(Pairs::new(vec![fail.clone()]).exit_code, 1);
    let shown = text(&Pairs::new(vec![p2]));
    assert!(shown.contains("RIG FAILURE"), "{shown}");
    assert!(
        shown.contains("m2: the restore side's run failed: ssh: connection refused"),
        "{shown}"
    );
}

#[test]
fn where_migration_json_says_otherwise_the_halves_win_and_it_is_said() {
    let from = dump_side("trixie", "6.12", "4.1.1");
    let to = refused(restore_side("trixie-bpo", "7.3", "4.1.1"));
    let (f, t) = (evaluate_report(&from, None), evaluate_report(&to, None));
    let honest = serde_json::json!({
        "from": {"image": "trixie"}, "to": {"image": "trixie-bpo"}, "verdict": "FAIL",
    });
    let (p, w) = pair("m", Some(&honest), Ok(&f), Some(Ok(&t)));
    assert!(w.is_empty(), "{w:?}");
    let forged = serde_json::json!({
        "from": {"image": "trixie"}, "to": {"image": "forky"}, "verdict": "PASS",
    });
    let (q, w) = pair("m", Some(&forged), Ok(&f), Some(Ok(&t)));
    assert_eq!(q, p, "the row is the halves' whatever migration.json says");
    assert_eq!(
        w,
        [
            "m: migration.json says PASS, its halves judged again give FAIL; showing the recomputed verdict",
            "m: migration.json says the to guest ran forky, its report says trixie-bpo",
        ]
    );
    let silent = serde_json::json!({"from": {"image": "trixie"}});
    let (_, w) = pair("m", Some(&silent), Ok(&f), Some(Ok(&t)));
    assert_eq!(
        w,
        ["m: migration.json names no verdict; showing its halves' judged again"]
    );
}

/// A report written where vm-migrate's run archives it, as vm-run leaves one: the checks
/// the host judges again, the PNGs they name, every artifact listed.
fn archive(dir: &Path, mut r: Report) {
    std::fs::create_dir_all(dir).unwrap();
    r.artifacts.clear();
    hostile_gate::honest::add_to(&mut r, dir).unwrap();
    r.seal();
    std::fs::write(dir.join(REPORT_FILE), serde_json::to_vec(&r).unwrap()).unwrap();
}

fn migration(dir: &Path, from: Report, to: Option<Report>, summary: &str) {
    archive(&dir.join("from"), from);
    if let Some(to) = to {
        archive(&dir.join("to"), to);
    }
    std::fs::write(dir.join(MIGRATION_FILE), summary).unwrap();
}

/// Directories on disk as vm-migrate leaves them, read through the one reader: a directory
/// holding several is each of its migrations by name, its vm-run report passed over and a
/// link named, not followed; a forged or flooded migration.json is named and overruled.
#[test]
fn load_judges_each_migration_from_its_halves_on_disk() {
    let root = std::env::temp_dir().join(format!("pairs-load-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let reports = root.join("reports");
    let a = reports.join("20261202T100000Z-migrate-bookworm-bookworm-bpo");
    migration(
        &a,
        dump_side("bookworm", "6.1.0-50-cloud-amd64", "3.17.1"),
        Some(restore_side(
            "bookworm-bpo",
            "6.12.95+deb12-cloud-amd64",
            "3.17.1",
        )),
        r#"{"from": {"image": "bookworm"}, "to": {"image": "bookworm-bpo"}, "verdict": "PASS"}"#,
    );
    let b = reports.join("20261202T110000Z-migrate-trixie-trixie-bpo");
    let refused = refused(restore_side(
        "trixie-bpo",
        "7.3.4+deb13-cloud-amd64",
        "4.1.1",
    ));
    // Forged: the halves say FAIL.
    migration(
        &b,
        dump_side("trixie", "6.12.117+deb13-cloud-amd64", "4.1.1"),
        Some(refused),
        r#"{"verdict": "PASS"}"#,
    );
    archive(
        &reports.join("20261202T090000Z-run"),
        dump_side("bookworm", "6.1", "3.17.1"),
    );
    std::os::unix::fs::symlink(&a, reports.join("zz-link")).unwrap();

    let (m, w) = load(std::slice::from_ref(&reports), None).unwrap();
    let labels: Vec<&str> = m.pairs.iter().map(|p| p.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "20261202T100000Z-migrate-bookworm-bookworm-bpo",
            "20261202T110000Z-migrate-trixie-trixie-bpo"
        ]
    );
    assert_eq!(
        m.pairs[0].outcome,
        PairOutcome::Judged(Verdict::Pass),
        "{:?}",
        m.pairs[0]
    );
    assert_eq!(m.pairs[1].outcome, PairOutcome::Judged(Verdict::Fail));
    assert_eq!(
        m.pairs[1].cause,
        "to: restore_live_process: criu restore: Can't fork for 77: File exists"
    );
    assert_eq!(m.exit_code, 1);
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].contains("migration.json says PASS, its halves judged again give FAIL"),
        "{w:?}"
    );
    assert!(
        w[1].contains("zz-link: a symbolic link, not followed"),
        "{w:?}"
    );

    // One migration named by itself; a flooded migration.json is not read.
    std::fs::write(
        a.join(MIGRATION_FILE),
        vec![b' '; (MAX_SUMMARY_BYTES + 1) as usize],
    )
    .unwrap();
    let (one, w) = load(std::slice::from_ref(&a), None).unwrap();
    assert_eq!(one.pairs.len(), 1);
    assert_eq!(one.exit_code, 0);
    assert_eq!(one.pairs[0].to.image, "bookworm-bpo");
    assert!(w[0].contains("migration.json cannot be read"), "{w:?}");
    assert!(is_migration_path(&a));
    assert!(!is_migration_path(&reports));

    // A half changed after it was archived: the judgement says so, and the row fails.
    let png = a
        .join("to")
        .join(sharedos_report::report::GUEST_DIR)
        .join("png/reset.png");
    let mut bytes = std::fs::read(&png).unwrap();
    bytes.push(0);
    std::fs::write(&png, bytes).unwrap();
    let (changed, _) = load(std::slice::from_ref(&a), None).unwrap();
    assert_eq!(changed.pairs[0].exit_code(), 1);
    assert!(
        changed.pairs[0]
            .notes
            .iter()
            .any(|n| n.contains("png/reset.png")),
        "{:?}",
        changed.pairs[0].notes
    );
    // A half that is a link is not followed: the rig's failure, said.
    std::fs::rename(b.join("to"), root.join("to-elsewhere")).unwrap();
    std::os::unix::fs::symlink(root.join("to-elsewhere"), b.join("to")).unwrap();
    let (linked, _) = load(std::slice::from_ref(&b), None).unwrap();
    assert_eq!(linked.exit_code, RIG_FAILURE_EXIT);
    assert!(
        linked.pairs[0]
            .cause
            .starts_with("to/report.json cannot be judged"),
        "{}",
        linked.pairs[0].cause
    );

    // Bad input: a vm-run report, a directory with no migration, nothing at all.
    for (bad, want) in [
        (
            reports.join("20261202T090000Z-run"),
            "is a vm-run report or a matrix",
        ),
        (
            root.join("to-elsewhere").join("guest"),
            "holds no migration",
        ),
        (root.join("nowhere"), "does not exist"),
    ] {
        let e = format!("{:#}", load(&[bad], None).unwrap_err());
        assert!(
            e.contains(want) && e.contains("give vm-migrate's directories"),
            "{e}"
        );
    }
    std::fs::remove_dir_all(&root).unwrap();
}

/// `r` as a half of the migration whose guests ran with `marker`, with a client key of its
/// session's own.
fn of(mut r: Report, marker: &str, key: &str) -> Report {
    r.marker = marker.into();
    if let Some(vm) = r.vm.as_mut() {
        vm.start = Some(sharedos_report::report::GuestStart {
            how: "cold".into(),
            client_key: format!("ssh-ed25519 AAAA-{key}"),
            ..Default::default()
        });
    }
    r
}

/// migration.json as vm-migrate writes it, with the marker it drew for both guests.
fn summary(from: &str, to: &str, marker: &str, verdict: &str) -> String {
    format!(
        r#"{{"from": {{"image": "{from}"}}, "to": {{"image": "{to}"}}, "marker": "{marker}", "verdict": "{verdict}"}}"#
    )
}

fn notes_of(dirs: &[PathBuf]) -> (Pairs, Vec<String>, String) {
    let (m, w) = load(dirs, None).unwrap();
    let notes = m
        .pairs
        .iter()
        .flat_map(|p| p.notes.clone())
        .collect::<Vec<_>>();
    (m, w, notes.join("\n"))
}

fn replace_dir(with: &Path, place: &Path) {
    std::fs::remove_dir_all(place).unwrap();
    crate::matrix::tests::copy_dir(with, place);
}

/// An archive editor puts a half of one migration, copied byte for byte, in another's place:
/// another migration's restore side of the same pair of images, or of another pair; the dump
/// side as the restore side; one whole run's report as both; a whole migration under a second
/// name. Each half passes its own checks wherever it is; the row fails, naming both places.
#[test]
fn a_half_from_elsewhere_fails_its_migration_naming_both_places() {
    let root = std::env::temp_dir().join(format!("pairs-forged-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let reports = root.join("reports");
    let (k1, k2) = ("6.1.0-50-cloud-amd64", "6.12.95+deb12-cloud-amd64");
    let a = reports.join("20261202T100000Z-migrate-bookworm-bookworm-bpo");
    migration(
        &a,
        of(
            dump_side("bookworm", k1, "3.17.1"),
            "spike-aaaaaa",
            "a-from",
        ),
        Some(of(
            refused(restore_side("bookworm-bpo", k2, "3.17.1")),
            "spike-aaaaaa",
            "a-to",
        )),
        &summary("bookworm", "bookworm-bpo", "spike-aaaaaa", "FAIL"),
    );
    let b = reports.join("20261202T110000Z-migrate-bookworm-bookworm-bpo");
    migration(
        &b,
        of(
            dump_side("bookworm", k1, "3.17.1"),
            "spike-bbbbbb",
            "b-from",
        ),
        Some(of(
            restore_side("bookworm-bpo", k2, "3.17.1"),
            "spike-bbbbbb",
            "b-to",
        )),
        &summary("bookworm", "bookworm-bpo", "spike-bbbbbb", "PASS"),
    );
    let c = reports.join("20261202T120000Z-migrate-trixie-trixie-bpo");
    migration(
        &c,
        of(
            dump_side("trixie", "6.12.57", "4.1.1"),
            "spike-cccccc",
            "c-from",
        ),
        Some(of(
            restore_side("trixie-bpo", "7.3.4", "4.1.1"),
            "spike-cccccc",
            "c-to",
        )),
        &summary("trixie", "trixie-bpo", "spike-cccccc", "PASS"),
    );
    let (m, w, _) = notes_of(std::slice::from_ref(&reports));
    assert!(w.is_empty(), "{w:?}");
    let verdicts: Vec<i32> = m.pairs.iter().map(Pair::exit_code).collect();
    assert_eq!(verdicts, [1, 0, 0]);
    let one = std::slice::from_ref(&a);

    // B's restore side, of the same pair of images, in place of A's that CRIU refused.
    replace_dir(&b.join("to"), &a.join("to"));
    let (m, _, notes) = notes_of(one);
    assert_eq!(m.exit_code, 1, "{notes}");
    assert!(
        notes.contains(
            "to: to/ is not of from/'s migration: its guest ran with the marker \
             \"spike-bbbbbb\", from/'s with \"spike-aaaaaa\": a half of another migration put \
             in this one's place"
        ),
        "{notes}"
    );
    assert!(
        notes.contains(
            "to: to/ is not of the migration migration.json records: its guest ran with the \
             marker \"spike-bbbbbb\", migration.json records \"spike-aaaaaa\""
        ),
        "{notes}"
    );
    assert!(
        m.pairs[0]
            .cause
            .starts_with("to: to/ is not of from/'s migration"),
        "{}",
        m.pairs[0].cause
    );
    // The same with a migration.json that records no marker: the halves alone tell.
    std::fs::write(
        a.join(MIGRATION_FILE),
        r#"{"from": {"image": "bookworm"}, "to": {"image": "bookworm-bpo"}, "verdict": "PASS"}"#,
    )
    .unwrap();
    let (m, _, notes) = notes_of(one);
    assert_eq!(m.exit_code, 1, "{notes}");
    assert!(notes.contains("to/ is not of from/'s migration"), "{notes}");
    assert!(!notes.contains("migration.json records"), "{notes}");

    // Another pair's restore side: another image in A's restore side's place.
    std::fs::write(
        a.join(MIGRATION_FILE),
        summary("bookworm", "bookworm-bpo", "spike-aaaaaa", "PASS"),
    )
    .unwrap();
    replace_dir(&c.join("to"), &a.join("to"));
    let (m, w, notes) = notes_of(one);
    assert_eq!(m.exit_code, 1, "{notes}");
    assert!(
        notes.contains(
            "its guest ran with the marker \"spike-cccccc\", from/'s with \"spike-aaaaaa\""
        ),
        "{notes}"
    );
    assert!(
        w.iter()
            .any(|w| w.ends_with("says the to guest ran bookworm-bpo, its report says trixie-bpo")),
        "{w:?}"
    );

    // A's dump side as its restore side: its restore gates never ran (caught before), and it is
    // named as the one run it is.
    replace_dir(&a.join("from"), &a.join("to"));
    let (m, _, notes) = notes_of(one);
    assert_eq!(m.exit_code, 1, "{notes}");
    assert!(
        notes.contains("to: restore_live_process is NOT_RUN"),
        "{notes}"
    );
    assert!(
        notes.contains("to: to/ is the same run as from/: both carry the report.json sha256 "),
        "{notes}"
    );

    // One whole run's report, which passes both sides' gates, as both halves.
    let whole = of(half("bookworm", k1, "3.17.1", &[]), "spike-aaaaaa", "whole");
    archive(&root.join("whole"), whole);
    replace_dir(&root.join("whole"), &a.join("from"));
    replace_dir(&root.join("whole"), &a.join("to"));
    let (m, _, notes) = notes_of(one);
    assert_eq!(m.exit_code, 1, "{notes}");
    assert!(
        notes.contains("to/ is the same run as from/: both carry the report.json sha256 ")
            && notes.contains(": one guest's report counted as both halves of a migration"),
        "{notes}"
    );

    // B whole under a second name beside it: the second row is the same runs as B's.
    let b2 = reports.join("20261202T130000Z-migrate-bookworm-bookworm-bpo");
    crate::matrix::tests::copy_dir(&b, &b2);
    let (m, _, _) = notes_of(std::slice::from_ref(&reports));
    let row = |name: &Path| {
        let label = name.file_name().unwrap().to_string_lossy();
        m.pairs.iter().find(|p| p.label == label).unwrap().clone()
    };
    assert_eq!(row(&b).exit_code(), 0, "the first stands");
    let second = row(&b2);
    assert_eq!(second.exit_code(), 1, "{second:?}");
    let label = b.file_name().unwrap().to_string_lossy();
    for side in ["from", "to"] {
        let want = format!(
            "{side}/ is the same run as {label}'s {side}/: both carry the report.json sha256 "
        );
        assert!(
            second.notes.iter().any(|n| n.starts_with(&want)),
            "{want}: {:?}",
            second.notes
        );
    }
    assert!(
        second.cause.starts_with("from/ is the same run as"),
        "{}",
        second.cause
    );
    // B's two halves in A's place, A's migration.json kept: the marker A's guests ran with.
    replace_dir(&b.join("from"), &a.join("from"));
    replace_dir(&b.join("to"), &a.join("to"));
    let (m, _, notes) = notes_of(one);
    assert_eq!(m.exit_code, 1, "{notes}");
    assert!(
        notes.contains("from: from/ is not of the migration migration.json records")
            && notes.contains("to: to/ is not of the migration migration.json records"),
        "{notes}"
    );
    std::fs::remove_dir_all(&root).unwrap();
}
