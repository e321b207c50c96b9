use super::*;
use crate::judge::consistency::gate_list_problems;
use crate::judge::review::tests::{fresh_report, review_for};
use crate::judge::review::ReviewFile;
use sharedos_report::fidelity::{Key, CLOSABLE};
use sharedos_report::report::{GateName, ReviewDecision, RunOptions, Status};
use std::path::Path;

pub(super) fn judge(r: &Report, file: ReviewFile, mism: Vec<Mismatch>) -> Outcome {
    let state = review::assess(r, None, file);
    evaluate(r.clone(), None, state, mism)
}

#[test]
fn a_fidelity_difference_left_out_needs_its_option_and_passing_checks() {
    let cgroup = CLOSABLE[1];
    assert_eq!(cgroup.key, Key::NoCgroupLimits);
    let mut r = fresh_report();
    r.fidelity_differences.retain(|f| f.key != cgroup.key);
    let flagged = |r: &Report| {
        judge(r, ReviewFile::Absent, vec![])
            .inconsistencies
            .into_iter()
            .filter(|p| p.contains("no_cgroup_limits"))
            .collect::<Vec<_>>()
    };
    let p = flagged(&r);
    assert!(
        p.len() == 1 && p[0].contains("--cgroup was not requested"),
        "{p:?}"
    );
    r.options.cgroup = Some(report::CgroupLimits {
        cpu_quota_us: 100_000,
        memory_max_bytes: 512 << 20,
    });
    let p = flagged(&r);
    assert!(
        p[0].contains("isolation.a_cgroup_limits did not run"),
        "{p:?}"
    );
    for (gate, name) in cgroup.checks {
        let g = r.gate_mut(*gate).unwrap();
        g.checks.push(report::Check {
            name: name.to_string(),
            passed: true,
            value: serde_json::json!(null),
            expected: String::new(),
        });
    }
    assert!(flagged(&r).is_empty());
    assert_eq!(judge(&r, ReviewFile::Absent, vec![]).exit_code, 3);
    // One failed check in a copy and the omission is a lie again.
    r.gates[7].checks.last_mut().unwrap().passed = false;
    let o = judge(&r, ReviewFile::Absent, vec![]);
    assert!(o
        .inconsistencies
        .iter()
        .any(|p| p.contains("reset.cgroup_limits failed")));
    assert_eq!(o.verdict, Verdict::Fail);
}

#[test]
fn fresh_report_without_review_is_three() {
    let r = fresh_report();
    let o = judge(&r, ReviewFile::Absent, vec![]);
    assert_eq!(o.verdict, Verdict::ReviewRequired);
    assert_eq!(o.exit_code, 3);
    assert!(o.problems().is_empty());
}

#[test]
fn pass_review_on_all_pass_is_zero() {
    let r = fresh_report();
    let rv = review_for(&r, ReviewDecision::Pass);
    let o = judge(&r, ReviewFile::Parsed(rv), vec![]);
    assert_eq!(o.exit_code, 0);
    assert_eq!(o.verdict, Verdict::Pass);
}

#[test]
fn fail_review_is_one() {
    let r = fresh_report();
    let rv = review_for(&r, ReviewDecision::Fail);
    let o = judge(&r, ReviewFile::Parsed(rv), vec![]);
    assert_eq!(o.exit_code, 1);
    assert!(
        o.problems().is_empty(),
        "a fail decision is a verdict, not a problem"
    );
}

#[test]
fn pass_review_with_a_not_run_gate_is_one() {
    let mut r = fresh_report();
    r.gates[4].status = Status::NotRun;
    r.seal();
    let rv = review_for(&r, ReviewDecision::Pass);
    let o = judge(&r, ReviewFile::Parsed(rv), vec![]);
    assert_eq!(o.exit_code, 1);
    assert_eq!(o.gates_verdict, Verdict::Fail);
}

#[test]
fn rejected_review_is_one_even_when_gates_would_pass() {
    let r = fresh_report();
    let mut rv = review_for(&r, ReviewDecision::Pass);
    rv.images[0].sha256 = "0".repeat(64);
    let o = judge(&r, ReviewFile::Parsed(rv), vec![]);
    assert_eq!(o.exit_code, 1);
    assert_eq!(o.gates_verdict, Verdict::ReviewRequired);
    assert!(o.problems()[0].starts_with("review rejected"));
}

#[test]
fn any_hash_mismatch_is_one() {
    let r = fresh_report();
    let rv = review_for(&r, ReviewDecision::Pass);
    let m = Mismatch {
        path: "logs/criu.log".into(),
        problem: "changed".into(),
    };
    let o = judge(&r, ReviewFile::Parsed(rv), vec![m]);
    assert_eq!(o.gates_verdict, Verdict::Pass);
    assert_eq!(o.exit_code, 1);
    assert_eq!(o.verdict, Verdict::Fail);
}

#[test]
fn inconsistent_report_fields_are_one() {
    let mut r = fresh_report();
    r.all_gates_pass = true;
    r.exit_code = 0;
    assert_eq!(inconsistencies(&r).len(), 2);
    let rv = review_for(&r, ReviewDecision::Pass);
    let o = judge(&r, ReviewFile::Parsed(rv), vec![]);
    assert_eq!(o.exit_code, 1);
}

#[test]
fn a_gui_pass_without_a_review_is_an_inconsistency() {
    let mut r = fresh_report();
    let i = r
        .gates
        .iter()
        .position(|g| g.name == GateName::GuiPixelReview)
        .unwrap();
    r.gates[i].status = Status::Pass;
    r.seal();
    assert!(
        r.all_gates_pass && r.exit_code == 0,
        "sealed as a liar would"
    );
    let o = judge(&r, ReviewFile::Absent, vec![]);
    assert_eq!(o.exit_code, 1);
    assert_eq!(o.verdict, Verdict::Fail);
    assert!(
        o.problems()
            .iter()
            .any(|p| p.contains("gui_pixel_review PASS, but only a valid review.json")),
        "{:?}",
        o.problems()
    );
    assert_eq!(
        verdict_meaning(&o),
        "the report cannot be trusted as it stands"
    );
}

#[test]
fn a_pass_needs_checks_behind_it_and_none_failed() {
    let mut r = fresh_report();
    r.gates[3].checks.clear();
    r.gates[4].checks[0].passed = false;
    r.seal();
    let p = inconsistencies(&r);
    assert_eq!(
        p,
        vec![
            "report.json says dump PASS, but records no check behind it",
            "report.json says restore_live_process PASS, but its check restore_live_process_holds failed",
        ]
    );
    assert_eq!(judge(&r, ReviewFile::Absent, vec![]).exit_code, 1);
}

#[test]
fn gates_missing_repeated_or_out_of_order_are_named() {
    assert!(gate_list_problems(&fresh_report().gates, &RunOptions::default()).is_empty());
    let mut r = fresh_report();
    let dup = r.gates[3].clone();
    r.gates.push(dup);
    assert_eq!(
        gate_list_problems(&r.gates, &r.options),
        vec!["report.json has the dump gate 2 times"]
    );
    let o = judge(&r, ReviewFile::Absent, vec![]);
    assert_eq!(o.exit_code, 1);

    let mut r = fresh_report();
    r.gates.remove(4);
    assert_eq!(
        gate_list_problems(&r.gates, &r.options),
        vec!["report.json has no restore_live_process gate"]
    );

    let mut r = fresh_report();
    r.gates.swap(0, 1);
    let p = gate_list_problems(&r.gates, &r.options);
    assert_eq!(p.len(), 1);
    assert!(
        p[0].starts_with("report.json's gates are out of gate order: launch, prerequisites,"),
        "{p:?}"
    );
    // Order alone changes no gate's status, so only this rule catches it.
    assert_eq!(report::verdict(&r.gates), Verdict::ReviewRequired);
    assert_eq!(judge(&r, ReviewFile::Absent, vec![]).exit_code, 1);
}

#[test]
fn rig_failure_is_one_and_its_exit_two_is_consistent() {
    let mut r = fresh_report();
    r.vm = Some(sharedos_report::report::VmProvenance {
        rig_error: Some("ssh: connection refused".into()),
        ..Default::default()
    });
    r.exit_code = RIG_FAILURE_EXIT;
    assert!(inconsistencies(&r).is_empty(), "{:?}", inconsistencies(&r));
    let rv = review_for(&r, ReviewDecision::Pass);
    let o = judge(&r, ReviewFile::Parsed(rv), vec![]);
    assert_eq!(o.gates_verdict, Verdict::Pass);
    assert_eq!(o.exit_code, 1);
    assert!(o.problems()[0].contains("ssh: connection refused"));
    assert_eq!(verdict_meaning(&o), "the rig failed before the run ended");
    // Without a rig error, exit 2 in report.json is a contradiction.
    r.vm = None;
    assert_eq!(inconsistencies(&r).len(), 1);
}

#[test]
fn verdict_propagates_from_every_gate() {
    for i in 0..GateName::ALL.len() {
        if GateName::ALL[i] == GateName::GuiPixelReview {
            continue;
        }
        for s in [Status::Fail, Status::NotRun, Status::ReviewRequired] {
            let mut r = fresh_report();
            r.gates[i].status = s;
            r.seal();
            let rv = review_for(&r, ReviewDecision::Pass);
            let o = judge(&r, ReviewFile::Parsed(rv), vec![]);
            assert_eq!(o.exit_code, 1, "gate {i} {s}");
            let o = judge(&r, ReviewFile::Absent, vec![]);
            assert_eq!(o.exit_code, 1, "gate {i} {s} without review");
        }
    }
}

#[test]
fn other_schema_version_is_named() {
    let mut v = serde_json::to_value(fresh_report()).unwrap();
    v["schema_version"] = serde_json::json!(99);
    let err = parse_report(&serde_json::to_vec(&v).unwrap()).unwrap_err();
    let msg = format!("{err:#}");
    assert!(msg.contains("schema_version is 99"), "{msg}");
    let ok = parse_report(&serde_json::to_vec(&fresh_report()).unwrap()).unwrap();
    assert_eq!(ok, fresh_report());
}

#[test]
fn a_quoted_cause_is_bounded_on_read_and_never_a_verdict() {
    use sharedos_report::cause::{Cause, KernelOops, CONTEXT_LINES, LINE_CHARS};
    let mut r = fresh_report();
    r.gates[3].status = Status::Fail;
    r.gates[3].cause = Some(Cause {
        source: "criu dump".into(),
        log: "criu/dump.log".into(),
        error: format!("all gates PASS {}", "x".repeat(1 << 20)),
        before: vec!["PASS".to_string(); 10_000],
    });
    r.vm = Some(sharedos_report::report::VmProvenance {
        kernel_oops: Some(KernelOops {
            first: "BUG: ".to_string() + &"y".repeat(1 << 20),
            ..KernelOops::default()
        }),
        ..Default::default()
    });
    r.seal();
    let read = parse_report(&serde_json::to_vec(&r).unwrap()).unwrap();
    let c = read.gates[3].cause.as_ref().unwrap();
    assert_eq!(c.error.chars().count(), LINE_CHARS);
    assert_eq!(c.before.len(), CONTEXT_LINES);
    let oops = read
        .vm
        .as_ref()
        .and_then(|v| v.kernel_oops.as_ref())
        .unwrap();
    assert_eq!(oops.first.chars().count(), LINE_CHARS);
    assert_eq!(evaluate_report(&read, None).exit_code, 1);
}

#[test]
fn evaluate_report_from_memory() {
    let r = fresh_report();
    let rv = review_for(&r, ReviewDecision::Pass);
    assert_eq!(evaluate_report(&r, Some(&rv)).exit_code, 0);
    assert_eq!(evaluate_report(&r, None).exit_code, 3);
}

#[test]
fn display_ends_with_the_verdict() {
    let r = fresh_report();
    let o = judge(&r, ReviewFile::Absent, vec![]);
    let s = o.to_string();
    assert!(s
        .lines()
        .last()
        .unwrap()
        .starts_with("verdict:   REVIEW_REQUIRED (exit 3)"));
}

/// A fresh report whose run was given `--copies 3`, with a passing density gate in its place.
fn dense_report() -> Report {
    let mut r = fresh_report();
    r.options.copies = Some(report::Copies::Count(3));
    let mut d = Gate::new(GateName::Density, Status::Pass, "3 copies");
    d.checks.push(report::Check {
        name: "all_same_token".into(),
        passed: true,
        value: serde_json::json!({"copies": 3, "failed": []}),
        expected: String::new(),
    });
    r.insert_gate(d);
    r.seal();
    r
}

#[test]
fn density_is_accepted_in_its_place_when_the_options_ask_for_it() {
    let r = dense_report();
    assert!(inconsistencies(&r).is_empty(), "{:?}", inconsistencies(&r));
    assert_eq!(judge(&r, ReviewFile::Absent, vec![]).exit_code, 3);
    let rv = review_for(&r, ReviewDecision::Pass);
    assert_eq!(judge(&r, ReviewFile::Parsed(rv), vec![]).exit_code, 0);
    // A failed density gate fails the run.
    let mut failed = dense_report();
    let d = failed.gate_mut(GateName::Density).unwrap();
    d.status = Status::Fail;
    d.checks[0].passed = false;
    failed.seal();
    assert!(inconsistencies(&failed).is_empty());
    assert_eq!(judge(&failed, ReviewFile::Absent, vec![]).exit_code, 1);
}

#[test]
fn density_is_rejected_unasked_missing_or_out_of_place() {
    // A density gate the options do not ask for.
    let mut r = dense_report();
    r.options = RunOptions::default();
    assert_eq!(
        gate_list_problems(&r.gates, &r.options),
        vec!["report.json has a density gate, but its options do not ask for one (no copies)"]
    );
    assert_eq!(judge(&r, ReviewFile::Absent, vec![]).exit_code, 1);
    // Options that ask for one, and no density gate.
    let mut r = fresh_report();
    r.options.copies = Some(report::Copies::Max);
    assert_eq!(
        gate_list_problems(&r.gates, &r.options),
        vec!["report.json has no density gate, though its options ask for one (copies: max)"]
    );
    assert_eq!(judge(&r, ReviewFile::Absent, vec![]).exit_code, 1);
    // In the wrong place: after the review.
    let mut r = dense_report();
    let d = r.gates.remove(8);
    assert_eq!(d.name, GateName::Density);
    r.gates.insert(9, d);
    let p = gate_list_problems(&r.gates, &r.options);
    assert!(p[0].contains("out of gate order"), "{p:?}");
    assert_eq!(judge(&r, ReviewFile::Absent, vec![]).exit_code, 1);
    // Twice.
    let mut r = dense_report();
    let d = r.gate(GateName::Density).unwrap().clone();
    r.gates.push(d);
    assert_eq!(
        gate_list_problems(&r.gates, &r.options),
        vec!["report.json has the density gate 2 times"]
    );
}

/// A report directory on disk as vm-run leaves one: the honest checks, their PNGs under
/// guest/, every artifact listed.
fn archive(name: &str) -> (std::path::PathBuf, Report) {
    let d = std::env::temp_dir().join(format!("verdict-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    let mut r = fresh_report();
    r.artifacts.clear();
    r.vm = Some(Default::default());
    hostile_gate::honest::add_to(&mut r, &d).unwrap();
    r.seal();
    std::fs::write(d.join(REPORT_FILE), serde_json::to_vec_pretty(&r).unwrap()).unwrap();
    (d, r)
}

fn keygen(dir: &Path) -> (std::path::PathBuf, Vec<AllowedSigner>) {
    let key = dir.join("key");
    let st = crate::cmd::Cmd::new(vec!["ssh-keygen".into()])
        .command()
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "ci", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen (openssh-client)");
    assert!(st.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let signers = sign::parse_allowed_signers(&format!("ci@example {public}")).unwrap();
    (key, signers)
}

#[test]
fn an_archive_on_disk_awaits_only_the_review_and_reads_each_file_once() {
    let (d, r) = archive("once");
    let o = super::judge(&d, &How::full(None)).unwrap();
    assert_eq!(o.exit_code, 3, "{o}");
    assert_eq!(o.artifacts_checked, Some(r.artifacts.len()));
    let reads = o.files.as_ref().unwrap().reads();
    assert!(reads.contains_key(REPORT_FILE) && reads.len() > r.artifacts.len());
    assert!(reads.values().all(|n| *n == 1), "{reads:?}");
    std::fs::remove_dir_all(&d).unwrap();
}

/// The swap between two reads: a forged report.json is in place when the verdict reads it,
/// and the signed original is put back right after (the reader's hook runs at that moment,
/// deterministically). The signature is checked on the bytes that were parsed, so the
/// forgery is rejected; a second read would have found the original and said "signed".
#[test]
fn a_file_swapped_after_it_was_read_is_judged_as_it_was_read() {
    let (d, _) = archive("swap");
    let (key, signers) = keygen(&d);
    sign::sign(&d, REPORT_FILE, &key).unwrap();
    let original = std::fs::read(d.join(REPORT_FILE)).unwrap();
    let how = How {
        rehash: true,
        signers: Some(&signers),
        ledger: None,
    };
    assert!(super::judge(&d, &how).unwrap().signed());
    let forged = String::from_utf8(original.clone()).unwrap().replacen(
        "prerequisites reason",
        "prerequisites, forged",
        1,
    );
    assert_ne!(forged.as_bytes(), &original[..]);
    std::fs::write(d.join(REPORT_FILE), &forged).unwrap();
    let files = ReportDir::open(&d).unwrap();
    let path = d.join(REPORT_FILE);
    files.after_read(move |rel| {
        if rel == REPORT_FILE {
            std::fs::write(&path, &original).unwrap();
        }
    });
    let o = judge_dir(files, &how).unwrap();
    assert!(o.report.gates[0].reason.contains("forged"));
    assert!(!o.signed(), "{o}");
    assert_eq!(o.exit_code, 1);
    assert!(
        o.problems()
            .iter()
            .any(|p| p.contains("report.json changed after it was signed")),
        "{o}"
    );
    let reads = o.files.as_ref().unwrap().reads();
    assert_eq!(reads[REPORT_FILE], 1, "{reads:?}");
    // The original, put back by the hook, still verifies as signed.
    assert!(super::judge(&d, &how).unwrap().signed());
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn an_unreadable_report_json_is_a_verdict_and_a_missing_one_is_not() {
    let (d, _) = archive("unreadable");
    std::fs::write(d.join(REPORT_FILE), b"{\"schema_version\": 2, \"gates\": [").unwrap();
    let r = super::judge(&d, &How::full(None)).unwrap_err();
    assert!(r.unreadable_report);
    assert_eq!(r.exit_code(), 1);
    let shown = r.to_string();
    assert!(
        shown
            .lines()
            .last()
            .unwrap()
            .starts_with("verdict:   FAIL (exit 1)"),
        "{shown}"
    );
    std::fs::remove_file(d.join(REPORT_FILE)).unwrap();
    let r = super::judge(&d, &How::full(None)).unwrap_err();
    assert!(!r.unreadable_report);
    assert_eq!(r.exit_code(), 2);
    assert!(r.problem.contains("holds no report.json"), "{}", r.problem);
    let r = super::judge(&d.join("nowhere"), &How::full(None)).unwrap_err();
    assert!(r.problem.contains("does not exist"), "{}", r.problem);
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn verify_prints_guest_text_escaped_and_one_verdict_line() {
    let mut r = fresh_report();
    r.gates[1].checks[0].passed = false;
    r.gates[1].checks[0].name = "x\nverdict:   PASS (exit 0)\r\u{1b}[2J".into();
    let o = evaluate_report(&r, None);
    let t = o.to_string();
    assert_eq!(
        t.lines().filter(|l| l.starts_with("verdict:")).count(),
        1,
        "{t}"
    );
    assert!(!t.chars().any(|c| c.is_control() && c != '\n'), "{t:?}");
    assert!(t.contains("\\u{1b}[2J"), "{t}");
}
