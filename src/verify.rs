//! Reading an archived report back and deciding what it proves: every artifact re-hashed, the
//! review judged against the PNGs, report.json's own verdict checked against its gates.

use crate::recheck;
use crate::review::{self, ReviewState};
use crate::sign::{self, AllowedSigner, SigState, Signature};
use anyhow::{bail, Context, Result};
use sharedos_report::digest::{self, Mismatch};
use sharedos_report::report::{
    self, Gate, GateName, Report, RunOptions, Status, Verdict, REPORT_FILE,
};
use std::fmt;
use std::path::{Path, PathBuf};

/// Far above any real report.json (tens of KiB); a larger one is refused, not read.
pub const MAX_REPORT_BYTES: u64 = 16 << 20;

/// report.json as read from a report directory.
#[derive(Clone, Debug)]
pub struct LoadedReport {
    pub path: PathBuf,
    pub report: Report,
    /// sha256 of report.json's bytes, which a review cites.
    pub sha256: String,
}

/// Reads `dir/report.json`, refusing a schema version this rig does not understand.
pub fn read_report(dir: &Path) -> Result<LoadedReport> {
    let path = dir.join(REPORT_FILE);
    if !dir.is_dir() {
        bail!(
            "{} is not a directory; give the report directory (the one holding {REPORT_FILE})",
            dir.display()
        );
    }
    let bytes = digest::read_in_report(dir, REPORT_FILE, MAX_REPORT_BYTES).with_context(|| {
        format!(
            "reading {}; is {} a report directory written by sharedos-gate diagnose or vm-run?",
            path.display(),
            dir.display()
        )
    })?;
    let report = parse_report(&bytes).with_context(|| format!("reading {}", path.display()))?;
    Ok(LoadedReport {
        sha256: digest::sha256_hex(&bytes),
        path,
        report,
    })
}

/// Parses report.json's bytes. The schema version is checked before the fields so that a report
/// from another version says so instead of failing on some field it lacks.
pub fn parse_report(bytes: &[u8]) -> Result<Report> {
    let value: serde_json::Value = serde_json::from_slice(bytes).context("it is not valid JSON")?;
    match value.get("schema_version").and_then(|v| v.as_u64()) {
        Some(v) if v == u64::from(report::SCHEMA_VERSION) => {}
        Some(v) => bail!(
            "schema_version is {v}, but this sharedos-rig reads version {}; use the sharedos-rig \
             that matches the report (see its environment.gate_version) or rerun the diagnostic",
            report::SCHEMA_VERSION
        ),
        None => bail!("it has no numeric schema_version, so it is not a sharedos report"),
    }
    serde_json::from_value(value).context("it does not match the report schema")
}

/// Everything a report directory proves, and the exit code that sums it up.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Where the report was read from; None for a report that came from memory.
    pub dir: Option<PathBuf>,
    pub report: Report,
    pub report_sha256: Option<String>,
    pub review: ReviewState,
    /// The report's gates with a valid review applied.
    pub gates: Vec<Gate>,
    /// The verdict of `gates` alone, before integrity problems.
    pub gates_verdict: Verdict,
    /// How many artifacts were re-hashed; None when nothing was re-hashed.
    pub artifacts_checked: Option<usize>,
    pub mismatches: Vec<Mismatch>,
    /// report.json fields that contradict its own gates.
    pub inconsistencies: Vec<String>,
    /// report.json's signature, and review.json's when there is one.
    pub signatures: Vec<Signature>,
    /// Whether the signatures were checked against an allowed signers file (a missing or
    /// rejected one is then a problem).
    pub signatures_required: bool,
    /// The final verdict: FAIL whenever anything above is wrong.
    pub verdict: Verdict,
    /// 0 all gates pass, review included; 3 only the review is outstanding; 1 anything else.
    pub exit_code: i32,
}

impl Outcome {
    /// Every problem in words: artifact mismatches, a rejected review, an inconsistent report.
    pub fn problems(&self) -> Vec<String> {
        let mut p: Vec<String> = rig_error(&self.report)
            .map(|e| format!("the rig failed, so the report is partial: {e}"))
            .into_iter()
            .collect();
        p.extend(
            self.mismatches
                .iter()
                .map(|m| format!("artifact {}: {}", m.path, m.problem)),
        );
        if let ReviewState::Invalid { problems, .. } = &self.review {
            p.extend(problems.iter().map(|s| format!("review rejected: {s}")));
        }
        p.extend(self.inconsistencies.iter().cloned());
        if self.signatures_required {
            p.extend(
                self.signatures
                    .iter()
                    .filter(|s| !matches!(s.state, SigState::Valid { .. }))
                    .map(|s| s.to_string()),
            );
        }
        p
    }

    /// What the verdict line adds about report.json's signature.
    pub fn signature_note(&self) -> &'static str {
        match self
            .signatures
            .iter()
            .find(|s| s.file == REPORT_FILE)
            .map(|s| &s.state)
        {
            Some(SigState::Valid { .. }) => ", signed",
            Some(SigState::NotChecked) => " (signed, signature not checked)",
            Some(SigState::Invalid(_)) => " (signature rejected)",
            Some(SigState::Unsigned) | None => " (unsigned)",
        }
    }

    /// Whether report.json carries a signature that was checked and holds.
    pub fn signed(&self) -> bool {
        self.signatures
            .iter()
            .any(|s| s.file == REPORT_FILE && matches!(s.state, SigState::Valid { .. }))
    }
}

/// The rig's own failure recorded by vm-run, if any.
pub fn rig_error(r: &Report) -> Option<&str> {
    r.vm.as_ref().and_then(|vm| vm.rig_error.as_deref())
}

pub use sharedos_report::report::RIG_FAILURE_EXIT;

/// The SPEC's shape of a report: the ten gates, once each, in order, and the density gate after
/// reset exactly when the report's options asked for it (`--copies`). Empty when it holds.
pub fn gate_list_problems(gates: &[Gate], options: &RunOptions) -> Vec<String> {
    let names: Vec<GateName> = gates.iter().map(|g| g.name).collect();
    let expected = options.gates();
    if names == expected {
        return Vec::new();
    }
    let mut out = Vec::new();
    for n in &expected {
        match names.iter().filter(|m| *m == n).count() {
            0 if *n == GateName::Density => out.push(format!(
                "report.json has no {n} gate, though its options ask for one (copies: {})",
                options.copies.map(|c| c.to_string()).unwrap_or_default()
            )),
            0 => out.push(format!("report.json has no {n} gate")),
            1 => {}
            k => out.push(format!("report.json has the {n} gate {k} times")),
        }
    }
    if !expected.contains(&GateName::Density) && names.contains(&GateName::Density) {
        out.push(
            "report.json has a density gate, but its options do not ask for one (no copies)"
                .to_string(),
        );
    }
    if out.is_empty() {
        let got: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
        out.push(format!(
            "report.json's gates are out of the SPEC's order: {}",
            got.join(", ")
        ));
    }
    out
}

/// report.json must have the SPEC's ten gates in order; its GUI gate can never say PASS, since
/// only a valid review.json beside it passes that gate; its `all_gates_pass` and `exit_code`
/// must be what its own gates say (or, for a run whose rig failed, the rig-failure code); and
/// it may leave out a fidelity difference only when its options and their passing checks close
/// it (a run whose rig failed has no guest list to judge).
pub fn inconsistencies(r: &Report) -> Vec<String> {
    let v = report::verdict(&r.gates);
    let mut out = gate_list_problems(&r.gates, &r.options);
    if rig_error(r).is_none() {
        out.extend(
            sharedos_report::fidelity::problems(&r.fidelity_differences, &r.options, &r.gates)
                .into_iter()
                .map(|p| format!("report.json {p}")),
        );
    }
    for g in r.gates.iter().filter(|g| g.status == Status::Pass) {
        if g.name == GateName::GuiPixelReview {
            out.push(format!(
                "report.json says {} PASS, but only a valid {} can pass that gate",
                g.name,
                report::REVIEW_FILE
            ));
            continue;
        }
        // A PASS stands on the checks behind it: with none, or a failed one, it is only a claim.
        if g.checks.is_empty() {
            out.push(format!(
                "report.json says {} PASS, but records no check behind it",
                g.name
            ));
        }
        for c in g.checks.iter().filter(|c| !c.passed) {
            out.push(format!(
                "report.json says {} PASS, but its check {} failed",
                g.name, c.name
            ));
        }
    }
    let expected_exit = if rig_error(r).is_some() {
        RIG_FAILURE_EXIT
    } else {
        v.exit_code()
    };
    if r.all_gates_pass != (v == Verdict::Pass) {
        out.push(format!(
            "report.json says all_gates_pass={}, but its gates give {v}",
            r.all_gates_pass
        ));
    }
    if r.exit_code != expected_exit {
        out.push(format!(
            "report.json says exit_code={}, but its gates give {v} (exit {expected_exit})",
            r.exit_code,
        ));
    }
    out
}

/// The pure verdict: applies the review, folds in the integrity findings.
pub fn evaluate(
    report: Report,
    report_sha256: Option<String>,
    review: ReviewState,
    mismatches: Vec<Mismatch>,
) -> Outcome {
    let gates = review::apply(&report.gates, &review);
    let gates_verdict = report::verdict(&gates);
    let inconsistencies = inconsistencies(&report);
    let clean = mismatches.is_empty()
        && inconsistencies.is_empty()
        && !review.is_invalid()
        && rig_error(&report).is_none();
    let verdict = if clean { gates_verdict } else { Verdict::Fail };
    Outcome {
        dir: None,
        report,
        report_sha256,
        review,
        gates,
        gates_verdict,
        artifacts_checked: None,
        mismatches,
        inconsistencies,
        signatures: Vec::new(),
        signatures_required: false,
        verdict,
        exit_code: verdict.exit_code(),
    }
}

/// Judges a report and an optional review that came from memory, without touching the disk.
pub fn evaluate_report(report: &Report, review: Option<&report::Review>) -> Outcome {
    let file = match review {
        Some(r) => review::ReviewFile::Parsed(r.clone()),
        None => review::ReviewFile::Absent,
    };
    let state = review::assess(report, None, file);
    evaluate(report.clone(), None, state, Vec::new())
}

/// Reads a report directory and judges it without re-hashing the artifacts (for list and diff,
/// which must stay fast on a directory of many reports).
pub fn load_dir(dir: &Path) -> Result<Outcome> {
    judge_dir(dir, false, None)
}

/// `sharedos-rig verify`: re-hashes every artifact, judges review.json, checks the report's own
/// verdict. Err only when report.json itself cannot be read.
pub fn verify_dir(dir: &Path) -> Result<Outcome> {
    judge_dir(dir, true, None)
}

/// `verify_dir`, and report.json (and review.json, when present) must carry a signature by one
/// of `signers`.
pub fn verify_dir_signed(dir: &Path, signers: &[AllowedSigner]) -> Result<Outcome> {
    judge_dir(dir, true, Some(signers))
}

/// What vm-run archived of the guest's own report: its verdict fields must be what its gates
/// give, and its gates must be the archived report's. Nothing when there is no guest/ (a report
/// written by diagnose directly).
pub fn guest_report_problems(dir: &Path, top: &Report) -> Vec<String> {
    let guest = dir.join(report::GUEST_DIR);
    let rel = format!("{}/{REPORT_FILE}", report::GUEST_DIR);
    if std::fs::symlink_metadata(guest.join(REPORT_FILE)).is_err() {
        return Vec::new();
    }
    let g = match digest::read_in_report(&guest, REPORT_FILE, MAX_REPORT_BYTES)
        .and_then(|b| parse_report(&b))
    {
        Ok(g) => g,
        Err(e) => return vec![format!("{rel} cannot be read: {e:#}")],
    };
    let mut out: Vec<String> = inconsistencies(&g)
        .into_iter()
        .map(|p| format!("{rel}, as the guest wrote it: {p}"))
        .collect();
    if g.gates != top.gates {
        out.push(format!(
            "{REPORT_FILE}'s gates are not the ones the guest reported in {rel}"
        ));
    }
    out
}

fn judge_dir(dir: &Path, rehash: bool, signers: Option<&[AllowedSigner]>) -> Result<Outcome> {
    let loaded = read_report(dir)?;
    let mismatches = if rehash {
        digest::verify_artifacts(dir, &loaded.report.artifacts)
    } else {
        Vec::new()
    };
    let state = review::assess(
        &loaded.report,
        Some(&loaded.sha256),
        review::read_review(dir),
    );
    let checked = loaded.report.artifacts.len();
    let mut from_guest = guest_report_problems(dir, &loaded.report);
    from_guest.extend(recheck::problems(&loaded.report, dir));
    let mut o = evaluate(loaded.report, Some(loaded.sha256), state, mismatches);
    o.signatures = vec![sign::check(dir, REPORT_FILE, signers)];
    if std::fs::symlink_metadata(dir.join(report::REVIEW_FILE)).is_ok() {
        o.signatures
            .push(sign::check(dir, report::REVIEW_FILE, signers));
    }
    o.signatures_required = signers.is_some();
    let unsigned = o.signatures_required
        && o.signatures
            .iter()
            .any(|s| !matches!(s.state, SigState::Valid { .. }));
    if !from_guest.is_empty() || unsigned {
        o.inconsistencies.extend(from_guest);
        o.verdict = Verdict::Fail;
        o.exit_code = Verdict::Fail.exit_code();
    }
    o.dir = Some(dir.to_path_buf());
    o.artifacts_checked = rehash.then_some(checked);
    Ok(o)
}

/// What the verdict means, in words.
pub fn verdict_meaning(o: &Outcome) -> &'static str {
    match o.verdict {
        Verdict::Pass => "every gate passed, the human review included",
        Verdict::ReviewRequired => "every gate passed; only the human GUI review is outstanding",
        Verdict::Fail if rig_error(&o.report).is_some() => "the rig failed before the run ended",
        Verdict::Fail if !o.problems().is_empty() => "the report cannot be trusted as it stands",
        Verdict::Fail => "at least one gate did not pass",
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(d) = &self.dir {
            writeln!(f, "report:    {}", d.join(REPORT_FILE).display())?;
        }
        if let Some(sha) = &self.report_sha256 {
            writeln!(f, "sha256:    {sha}")?;
        }
        match self.artifacts_checked {
            Some(n) if self.mismatches.is_empty() => {
                writeln!(f, "artifacts: {n} re-hashed, all match")?
            }
            Some(n) => writeln!(
                f,
                "artifacts: {n} re-hashed, {} do not match",
                self.mismatches.len()
            )?,
            None => writeln!(f, "artifacts: not re-hashed")?,
        }
        writeln!(f, "review:    {}", self.review.describe())?;
        for s in &self.signatures {
            writeln!(f, "signature: {s}")?;
        }
        for g in &self.gates {
            writeln!(f, "  {:<16} {}", g.status.as_str(), g.name)?;
        }
        let problems = self.problems();
        if !problems.is_empty() {
            writeln!(f, "problems:")?;
            for p in &problems {
                writeln!(f, "  - {p}")?;
            }
        }
        if self.review == ReviewState::None && self.gates_verdict == Verdict::ReviewRequired {
            if let Some(d) = &self.dir {
                writeln!(
                    f,
                    "next:      sharedos-rig show {} --format html > page.html, then \
                     sharedos-rig review {} --decision pass|fail --reviewer NAME",
                    d.display(),
                    d.display()
                )?;
            }
        }
        write!(
            f,
            "verdict:   {} (exit {}): {}{}",
            self.verdict,
            self.exit_code,
            verdict_meaning(self),
            self.signature_note()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::review::tests::{fresh_report, review_for};
    use crate::review::ReviewFile;
    use sharedos_report::report::ReviewDecision;

    fn judge(r: &Report, file: ReviewFile, mism: Vec<Mismatch>) -> Outcome {
        let state = review::assess(r, None, file);
        evaluate(r.clone(), None, state, mism)
    }

    #[test]
    fn a_fidelity_difference_left_out_needs_its_option_and_passing_checks() {
        let cgroup = sharedos_report::fidelity::CLOSABLE[1];
        assert_eq!(cgroup.key, sharedos_report::fidelity::Key::NoCgroupLimits);
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
            p[0].starts_with(
                "report.json's gates are out of the SPEC's order: launch, prerequisites,"
            ),
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
        assert!(p[0].contains("out of the SPEC's order"), "{p:?}");
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
}
