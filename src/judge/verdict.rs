//! The one verdict: what an archived report proves, and the exit code that sums it up. verify,
//! show, list, diff, vm-run's own exit code, every matrix cell (vm-matrix and `matrix merge`)
//! and `show MATRIX` all call [`judge`], so a report is judged the same way wherever it is
//! looked at. It reads the directory through the one reader (each file once), re-hashes every
//! artifact, judges review.json against the PNGs, holds report.json's own verdict fields, the
//! guest's own report and the host's recheck against its gates, checks the signatures, and
//! requires the newest signed review the host's ledger holds.

use super::artifacts::{self, Mismatch};
use super::consistency;
use super::ledger::{self, Ledger};
use super::reader::ReportDir;
use super::recheck;
use super::review::{self, ReviewState};
use super::sign::{self, AllowedSigner, SigState, Signature};
use crate::escape;
use anyhow::{bail, Context, Result};
use sharedos_report::cause::Cause;
use sharedos_report::report::{
    self, Gate, GateName, Report, Status, Verdict, REPORT_FILE, REVIEW_FILE,
};
use std::fmt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

pub use super::consistency::rig_error;
pub use sharedos_report::report::RIG_FAILURE_EXIT;

/// Far above any real report.json (tens of KiB); a larger one is refused, not read.
pub const MAX_REPORT_BYTES: u64 = 16 << 20;

/// report.json as read from a report directory.
#[derive(Clone, Debug)]
pub struct LoadedReport {
    pub report: Report,
    /// sha256 of report.json's bytes, which a review cites.
    pub sha256: String,
}

/// Reads report.json through the reader, refusing a schema version this rig does not
/// understand. Err is the problem in words.
pub fn read_report(dir: &ReportDir) -> Result<LoadedReport, String> {
    let read = dir.bytes(REPORT_FILE, MAX_REPORT_BYTES)?;
    let report = parse_report(read.bytes().unwrap_or_default())
        .map_err(|e| format!("{REPORT_FILE} cannot be read: {e:#}"))?;
    Ok(LoadedReport {
        report,
        sha256: read.sha256.clone(),
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
    let mut r: Report =
        serde_json::from_value(value).context("it does not match the report schema")?;
    // Quoted causes are display only, and cut to their bounds here whatever wrote them.
    r.bound_quotes();
    Ok(r)
}

/// How a judgement reads the directory.
#[derive(Clone, Copy, Debug, Default)]
pub struct How<'a> {
    /// Re-hash every artifact (list and diff leave it out to stay fast over many reports).
    pub rehash: bool,
    /// report.json, and review.json when there is one, must be signed by one of these; a review
    /// by a key the file gives to its reviewer.
    pub signers: Option<&'a [AllowedSigner]>,
    /// The host's ledger of signed reviews: required of the report, and added to when a signed
    /// review is seen verified.
    pub ledger: Option<&'a Ledger>,
}

impl<'a> How<'a> {
    /// Everything re-hashed, with the ledger.
    pub fn full(ledger: Option<&'a Ledger>) -> How<'a> {
        How {
            rehash: true,
            signers: None,
            ledger,
        }
    }

    /// The artifacts not re-hashed: the listing, the review, the recheck and the rest still are.
    pub fn quick(ledger: Option<&'a Ledger>) -> How<'a> {
        How {
            rehash: false,
            signers: None,
            ledger,
        }
    }
}

/// A directory the verdict could not judge: not a report directory at all (a usage error), or
/// one whose report.json cannot be read (a verdict: FAIL).
#[derive(Clone, Debug, PartialEq)]
pub struct Refused {
    pub dir: PathBuf,
    pub problem: String,
    /// True when the directory holds a report.json that cannot be read: the verdict is FAIL,
    /// exit 1. False when it is no report directory: exit 2.
    pub unreadable_report: bool,
}

impl Refused {
    pub fn exit_code(&self) -> i32 {
        if self.unreadable_report {
            Verdict::Fail.exit_code()
        } else {
            RIG_FAILURE_EXIT
        }
    }
}

impl fmt::Display for Refused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown = escape::line(&self.dir.join(REPORT_FILE).display().to_string());
        if !self.unreadable_report {
            return write!(f, "{}", escape::line(&self.problem));
        }
        writeln!(f, "report:    {shown}")?;
        writeln!(f, "problems:\n  - {}", escape::line(&self.problem))?;
        write!(
            f,
            "verdict:   {} (exit {}): the report cannot be trusted as it stands",
            Verdict::Fail,
            self.exit_code()
        )
    }
}

impl std::error::Error for Refused {}

/// Everything a report directory proves, and the exit code that sums it up.
#[derive(Clone, Debug)]
pub struct Outcome {
    /// Where the report was read from; None for a report that came from memory.
    pub dir: Option<PathBuf>,
    /// The reader the judgement used: what renders the report reads the same bytes from it.
    pub files: Option<Rc<ReportDir>>,
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
    /// Everything else the host found wrong: report.json against its own gates, the guest's
    /// report against it, the host's recheck, the ledger of signed reviews.
    pub inconsistencies: Vec<String>,
    /// report.json's signature, and review.json's when there is one.
    pub signatures: Vec<Signature>,
    /// Whether the signatures were checked against an allowed signers file (a missing or
    /// rejected one is then a problem).
    pub signatures_required: bool,
    /// What the judgement says beside its verdict (the ledger could not be read, ...).
    pub notes: Vec<String>,
    /// The final verdict: FAIL whenever anything above is wrong.
    pub verdict: Verdict,
    /// 0 all gates pass, review included; 3 only the review is outstanding; 1 anything else.
    pub exit_code: i32,
}

impl Outcome {
    /// Every problem in words: the rig's failure, then what [`Outcome::found`] lists.
    pub fn problems(&self) -> Vec<String> {
        let mut p: Vec<String> = rig_error(&self.report)
            .map(|e| format!("the rig failed, so the report is partial: {e}"))
            .into_iter()
            .collect();
        p.extend(self.found());
        p
    }

    /// What the judgement found wrong with the report, the rig's own failure aside: artifact
    /// mismatches, a rejected review, an inconsistent report, a missing or rejected signature
    /// where one is required.
    pub fn found(&self) -> Vec<String> {
        let mut p = Vec::new();
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

    /// The verdict from the gates and every problem: FAIL when anything is wrong.
    fn fold(mut self) -> Outcome {
        self.verdict = if self.problems().is_empty() {
            self.gates_verdict
        } else {
            Verdict::Fail
        };
        self.exit_code = self.verdict.exit_code();
        self
    }
}

/// The report's own problems (report.json against its gates) beside the ones given.
pub use super::consistency::problems as inconsistencies;

/// The pure verdict: applies the review, folds in the integrity findings.
pub fn evaluate(
    report: Report,
    report_sha256: Option<String>,
    review: ReviewState,
    mismatches: Vec<Mismatch>,
) -> Outcome {
    let gates = review::apply(&report.gates, &review);
    let gates_verdict = report::verdict(&gates);
    Outcome {
        dir: None,
        files: None,
        inconsistencies: consistency::problems(&report),
        report,
        report_sha256,
        review,
        gates,
        gates_verdict,
        artifacts_checked: None,
        mismatches,
        signatures: Vec::new(),
        signatures_required: false,
        notes: Vec::new(),
        verdict: Verdict::Fail,
        exit_code: Verdict::Fail.exit_code(),
    }
    .fold()
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

/// The one verdict on the report directory at `path`.
pub fn judge(path: &Path, how: &How) -> Result<Outcome, Refused> {
    let dir = ReportDir::open(path).map_err(|problem| Refused {
        dir: path.to_path_buf(),
        problem: format!("{problem}: give the report directory (the one holding {REPORT_FILE})"),
        unreadable_report: false,
    })?;
    judge_dir(dir, how)
}

/// The one verdict on a report directory already opened (a row of a matrix, an entry of a
/// list, reached without following a link).
pub fn judge_dir(dir: ReportDir, how: &How) -> Result<Outcome, Refused> {
    let loaded = load(&dir)?;
    let mismatches = artifacts::check(&dir, &loaded.report.artifacts, how.rehash);
    let state = review::assess(
        &loaded.report,
        Some(&loaded.sha256),
        review::read_review(&dir),
    );
    let mut found = consistency::guest_problems(&dir, &loaded.report);
    found.extend(recheck::problems(&loaded.report, &dir));
    let checked = how.rehash.then_some(loaded.report.artifacts.len());
    let mut o = evaluate(loaded.report, Some(loaded.sha256), state, mismatches);
    o.inconsistencies.extend(found);
    o.signatures = signatures(&dir, &o.review, how.signers);
    o.signatures_required = how.signers.is_some();
    o.artifacts_checked = checked;
    if let Some(l) = how.ledger {
        ledger_stage(&dir, &mut o, l, how.signers.is_some());
    }
    o.dir = Some(dir.path().to_path_buf());
    o.files = Some(Rc::new(dir));
    Ok(o.fold())
}

/// report.json, or why the directory cannot be judged.
fn load(dir: &ReportDir) -> Result<LoadedReport, Refused> {
    let refused = |problem: String, unreadable_report: bool| Refused {
        dir: dir.path().to_path_buf(),
        problem,
        unreadable_report,
    };
    match dir.kind(REPORT_FILE) {
        Ok(None) => Err(refused(
            format!(
                "{} holds no {REPORT_FILE}; is it a report directory written by sharedos-gate \
                 diagnose or vm-run?",
                dir.path().display()
            ),
            false,
        )),
        Err(e) => Err(refused(e, true)),
        Ok(Some(_)) => read_report(dir).map_err(|e| refused(e, true)),
    }
}

/// report.json's signature, and review.json's when there is one (by its reviewer's own key).
fn signatures(
    dir: &ReportDir,
    review: &ReviewState,
    signers: Option<&[AllowedSigner]>,
) -> Vec<Signature> {
    let mut out = vec![sign::check(dir, REPORT_FILE, signers, None)];
    if !matches!(dir.kind(REVIEW_FILE), Ok(None)) {
        let reviewer = match review {
            ReviewState::Valid(r) => Some(r.reviewer.as_str()),
            ReviewState::Invalid {
                review: Some(r), ..
            } => Some(r.reviewer.as_str()),
            _ => None,
        };
        out.push(sign::check(dir, REVIEW_FILE, signers, reviewer));
    }
    out
}

/// The ledger's signed reviews of this report must still be carried; a signed review seen
/// verified here is kept in it.
fn ledger_stage(dir: &ReportDir, o: &mut Outcome, l: &Ledger, checked: bool) {
    let Some(sha) = o.report_sha256.clone() else {
        return;
    };
    let review_sig = o.signatures.iter().find(|s| s.file == REVIEW_FILE);
    let signed = review_sig.is_some_and(|s| match s.state {
        SigState::Valid { .. } => true,
        SigState::NotChecked => !checked,
        _ => false,
    });
    let carried_sha = dir.file(REVIEW_FILE).ok().map(|f| f.sha256.clone());
    let carried = match (&o.review, &carried_sha) {
        (ReviewState::Valid(r), Some(s)) => Some(ledger::Carried {
            review: r,
            sha256: s,
            signed,
        }),
        _ => None,
    };
    match l.recorded(&sha) {
        Ok(rec) => o.inconsistencies.extend(ledger::problems(&rec, carried)),
        Err(e) => o
            .notes
            .push(format!("the review ledger could not be read: {e:#}")),
    }
    let verified = review_sig.is_some_and(|s| matches!(s.state, SigState::Valid { .. }));
    if let (true, ReviewState::Valid(_)) = (verified, &o.review) {
        let kept = dir
            .bytes(REVIEW_FILE, review::MAX_REVIEW_BYTES)
            .and_then(|r| {
                dir.bytes(&sign::sig_name(REVIEW_FILE), 64 << 10)
                    .map(|s| (r, s))
            })
            .map_err(anyhow::Error::msg)
            .and_then(|(r, s)| {
                l.record(
                    &sha,
                    r.bytes().unwrap_or_default(),
                    s.bytes().unwrap_or_default(),
                )
            });
        if let Err(e) = kept {
            o.notes.push(format!(
                "the verified review was not kept in the review ledger: {e:#}"
            ));
        }
    }
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

/// verify's output: every line that carries the report's text is escaped, so the verdict line
/// is the last line and the only one that starts with `verdict:`.
impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let l = escape::line;
        if let Some(d) = &self.dir {
            writeln!(
                f,
                "report:    {}",
                l(&d.join(REPORT_FILE).display().to_string())
            )?;
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
                "artifacts: {n} listed, re-hashed once each; {} problem(s)",
                self.mismatches.len()
            )?,
            None => writeln!(f, "artifacts: not re-hashed")?,
        }
        writeln!(f, "review:    {}", l(&self.review.describe()))?;
        for s in &self.signatures {
            writeln!(f, "signature: {}", l(&s.to_string()))?;
        }
        for n in &self.notes {
            writeln!(f, "note:      {}", l(n))?;
        }
        for g in &self.gates {
            writeln!(f, "  {:<16} {}", g.status.as_str(), g.name)?;
        }
        let problems = self.problems();
        if !problems.is_empty() {
            writeln!(f, "problems:")?;
            for p in &problems {
                writeln!(f, "  - {}", l(p))?;
            }
        }
        if self.review == ReviewState::None && self.gates_verdict == Verdict::ReviewRequired {
            if let Some(d) = &self.dir {
                let d = l(&d.display().to_string());
                writeln!(
                    f,
                    "next:      sharedos-rig show {d} --format html > page.html, then \
                     sharedos-rig review {d} --decision pass|fail --reviewer NAME"
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

/// The gates each guest of a migration (vm-migrate) must pass, beside cleanup: the one that
/// dumps runs the tree up to its dump; the one that restores takes the checkpoint in (its dump
/// gate) and runs the restores on it. The rest of each guest's report is NOT_RUN by design.
pub const MIGRATION_DUMP_SIDE: [GateName; 5] = [
    GateName::Prerequisites,
    GateName::Launch,
    GateName::LiveStateProbe,
    GateName::Dump,
    GateName::Cleanup,
];
pub const MIGRATION_RESTORE_SIDE: [GateName; 7] = [
    GateName::Prerequisites,
    GateName::Dump,
    GateName::RestoreLiveProcess,
    GateName::RestoreXState,
    GateName::Isolation,
    GateName::Reset,
    GateName::Cleanup,
];

/// vm-migrate's summary, beside the two halves' report directories (`from/`, `to/`). Written by
/// the migration and read back by the pairs view, which takes nothing in it on trust.
pub const MIGRATION_FILE: &str = "migration.json";

/// Which guest of a migration a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationSide {
    /// The guest that dumps (`--from`, `from/`).
    Dump,
    /// The guest that restores (`--to`, `to/`).
    Restore,
}

impl MigrationSide {
    /// The side's directory in the migration, which is also how tables name it.
    pub fn dir(self) -> &'static str {
        match self {
            MigrationSide::Dump => "from",
            MigrationSide::Restore => "to",
        }
    }

    /// The gates this side must pass.
    pub fn gates(self) -> &'static [GateName] {
        match self {
            MigrationSide::Dump => &MIGRATION_DUMP_SIDE,
            MigrationSide::Restore => &MIGRATION_RESTORE_SIDE,
        }
    }
}

/// One thing that keeps a migration from passing.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationFinding {
    pub side: MigrationSide,
    /// The gate that did not pass; None for a problem with the report itself or a side that
    /// never ran.
    pub gate: Option<GateName>,
    pub problem: String,
    /// What the failing program said in its own log (CRIU's error when it refused a restore),
    /// as the gate quoted it: for people to read, never a verdict.
    pub cause: Option<Cause>,
}

/// What keeps one guest's half of a migration from passing: every problem the judgement found
/// (the rig's failure included), then each gate of the side's that is not PASS, with its
/// reason and the cause it quoted.
pub fn migration_half_findings(o: &Outcome, side: MigrationSide) -> Vec<MigrationFinding> {
    let mut f: Vec<MigrationFinding> = o
        .problems()
        .into_iter()
        .map(|problem| MigrationFinding {
            side,
            gate: None,
            problem,
            cause: None,
        })
        .collect();
    for name in side.gates() {
        let (problem, cause) = match o.gates.iter().find(|g| g.name == *name) {
            Some(g) if g.status == Status::Pass => continue,
            Some(g) => (
                format!("{name} is {}: {}", g.status, g.reason),
                g.cause.clone(),
            ),
            None => (format!("the report has no {name} gate"), None),
        };
        f.push(MigrationFinding {
            side,
            gate: Some(*name),
            problem,
            cause,
        });
    }
    f
}

/// The gates a copy of a VM fork runs: the saved guest's own launch and live probe, whose probe
/// goes on in the copy and holds it against the fork-time state, then the copy's cleanup.
pub const VM_FORK_COPY: [GateName; 4] = [
    GateName::Prerequisites,
    GateName::Launch,
    GateName::LiveStateProbe,
    GateName::Cleanup,
];

/// What keeps a copy of a VM fork (`vm-compare`'s VM-each column) from holding its state: every
/// problem of the judgement, each of [`VM_FORK_COPY`] that is not PASS, and each fork check
/// (`recheck::FORK_CHECKS`, judged again by the host) that its live probe lacks or failed. A
/// copy with none of these is one the column may count; a figure is never taken from another.
///
/// A copy of another save passes every check its guest makes, against a fork-time state of its
/// own; only `saved_token`, the token the saved guest recorded, tells it from a copy of this
/// one.
pub fn vm_fork_copy_problems(o: &Outcome, saved_token: &str) -> Vec<String> {
    let mut p = o.problems();
    for name in VM_FORK_COPY {
        match o.gates.iter().find(|g| g.name == name) {
            Some(g) if g.status == Status::Pass => {}
            Some(g) => p.push(format!("{name} is {}: {}", g.status, g.reason)),
            None => p.push(format!("the report has no {name} gate")),
        }
    }
    let probe = o.gates.iter().find(|g| g.name == GateName::LiveStateProbe);
    for (check, _) in super::recheck::FORK_CHECKS {
        match probe.and_then(|g| g.check(check)) {
            Some(c) if c.passed => {}
            Some(_) => p.push(format!(
                "{} failed its check {check}",
                GateName::LiveStateProbe
            )),
            None => p.push(format!(
                "{} lacks the check {check}: this report is not of a VM fork's copy",
                GateName::LiveStateProbe
            )),
        }
    }
    let at_fork = probe
        .and_then(|g| g.check("fork_token_kept"))
        .and_then(|c| c.value.get("dump_time"))
        .and_then(|v| v.as_str());
    match at_fork {
        _ if saved_token.is_empty() => p.push(
            "fork_token_kept cannot bind the copy to the save: the saved guest's token was not read"
                .into(),
        ),
        Some(t) if t == saved_token => {}
        Some(t) => p.push(format!(
            "{} failed its check fork_token_kept on the host: the copy's fork-time token {t} is not \
             the saved guest's {saved_token}, so it is a copy of another save",
            GateName::LiveStateProbe
        )),
        // Said above: the check is missing.
        None => {}
    }
    p
}

/// What keeps one guest's half of a migration from passing, in words.
pub fn migration_half_problems(o: &Outcome, side: MigrationSide) -> Vec<String> {
    migration_half_findings(o, side)
        .into_iter()
        .map(|f| f.problem)
        .collect()
}

/// Everything that keeps a migration from passing, the dump side's first: a restore CRIU
/// refused is the restore gate's finding, carrying CRIU's own error as its cause. Empty exactly
/// when [`migration`] is PASS.
pub fn migration_findings(from: &Outcome, to: Option<&Outcome>) -> Vec<MigrationFinding> {
    let mut f = migration_half_findings(from, MigrationSide::Dump);
    match to {
        Some(t) => f.extend(migration_half_findings(t, MigrationSide::Restore)),
        None => f.push(MigrationFinding {
            side: MigrationSide::Restore,
            gate: None,
            problem: "the restore side did not run: the migration holds no report of it".into(),
            cause: None,
        }),
    }
    f
}

/// The one verdict on a migration: PASS when both halves hold (the restore side judged only
/// once the dump side passed), else FAIL. No human review stands in a migration's way.
pub fn migration(from: &Outcome, to: Option<&Outcome>) -> Verdict {
    if migration_findings(from, to).is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::consistency::gate_list_problems;
    use crate::judge::review::tests::{fresh_report, review_for};
    use crate::judge::review::ReviewFile;
    use sharedos_report::fidelity::{Key, CLOSABLE};
    use sharedos_report::report::{GateName, ReviewDecision, RunOptions, Status};
    use std::path::Path;

    fn judge(r: &Report, file: ReviewFile, mism: Vec<Mismatch>) -> Outcome {
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
    fn a_migration_passes_only_when_each_side_holds_its_own_gates() {
        use GateName::*;
        let side = |not_here: &[GateName], failed: &[GateName], mism: Vec<Mismatch>| {
            let mut r = fresh_report();
            for g in r.gates.iter_mut() {
                if not_here.contains(&g.name) {
                    g.status = Status::NotRun;
                } else if failed.contains(&g.name) {
                    g.status = Status::Fail;
                    g.reason = "criu restore failed; CRIU says: Error (criu/x.c:1): no".into();
                    g.checks[0].passed = false;
                }
            }
            r.seal();
            judge(&r, ReviewFile::Absent, mism)
        };
        let dump_side = [
            RestoreLiveProcess,
            RestoreXState,
            Isolation,
            Reset,
            GuiPixelReview,
        ];
        let restore_side = [Launch, LiveStateProbe, GuiPixelReview];
        let from = side(&dump_side, &[], vec![]);
        let to = side(&restore_side, &[], vec![]);
        assert!(migration_half_problems(&from, MigrationSide::Dump).is_empty());
        assert_eq!(from.verdict, Verdict::Fail, "alone, each side is FAIL");
        assert_eq!(migration(&from, Some(&to)), Verdict::Pass);
        // No restore side, a restore CRIU refused, a dump side that did not dump, a changed
        // artifact: each a FAIL, and the refusal's reason is quoted.
        assert_eq!(migration(&from, None), Verdict::Fail);
        let refused = side(&restore_side, &[RestoreLiveProcess], vec![]);
        assert_eq!(migration(&from, Some(&refused)), Verdict::Fail);
        let why = migration_half_problems(&refused, MigrationSide::Restore);
        assert!(why.iter().any(|p| p.contains("CRIU says")), "{why:?}");
        let not_dumped = side(&dump_side, &[Dump], vec![]);
        assert_eq!(migration(&not_dumped, Some(&to)), Verdict::Fail);
        let changed = Mismatch {
            path: "guest/checkpoint/images/pages-1.img".into(),
            problem: "sha256 differs".into(),
        };
        let tampered = side(&dump_side, &[], vec![changed]);
        assert_eq!(migration(&tampered, Some(&to)), Verdict::Fail);
    }

    /// A restore CRIU refused is the restore gate's finding and carries CRIU's error; a side that
    /// passes has none, and a missing restore side is a finding of its own.
    #[test]
    fn a_restore_criu_refused_is_a_finding_with_its_cause() {
        use sharedos_report::cause::Cause;
        use GateName::*;
        let half = |not_here: &[GateName], refused: Option<Cause>| {
            let mut r = fresh_report();
            for g in r.gates.iter_mut() {
                if not_here.contains(&g.name) {
                    g.status = Status::NotRun;
                }
            }
            if let Some(c) = refused {
                let g = r.gate_mut(RestoreLiveProcess).unwrap();
                g.status = Status::Fail;
                g.reason = "criu_restore_succeeded failed".into();
                g.checks[0].passed = false;
                g.cause = Some(c);
            }
            r.seal();
            judge(&r, ReviewFile::Absent, vec![])
        };
        let from = half(
            &[
                RestoreLiveProcess,
                RestoreXState,
                Isolation,
                Reset,
                GuiPixelReview,
            ],
            None,
        );
        let restore_side = [Launch, LiveStateProbe, GuiPixelReview];
        let to = half(&restore_side, None);
        assert!(migration_findings(&from, Some(&to)).is_empty());
        let criu = Cause {
            source: "criu restore".into(),
            log: "criu/restore-a.log".into(),
            error: "(00.51) Error (criu/cr-restore.c:1480): Can't fork for 77: File exists".into(),
            before: vec![],
        };
        let refused = half(&restore_side, Some(criu.clone()));
        let f = migration_findings(&from, Some(&refused));
        assert_eq!(migration(&from, Some(&refused)), Verdict::Fail);
        let restore = f
            .iter()
            .find(|f| f.gate == Some(RestoreLiveProcess))
            .unwrap_or_else(|| panic!("{f:?}"));
        assert_eq!(restore.side, MigrationSide::Restore);
        assert_eq!(restore.cause.as_ref(), Some(&criu));
        assert!(restore.problem.starts_with("restore_live_process is FAIL"));
        // Only the gate that quoted CRIU carries its words.
        assert!(f
            .iter()
            .filter(|x| x.gate != Some(RestoreLiveProcess))
            .all(|x| x.cause.is_none()));
        let none = migration_findings(&from, None);
        assert_eq!(none.len(), 1, "{none:?}");
        assert_eq!(none[0].side, MigrationSide::Restore);
        assert!(none[0].problem.contains("restore side did not run"));
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

    #[test]
    fn a_vm_fork_copy_counts_only_with_every_fork_check_passed() {
        let mut r = fresh_report();
        let probe = r.gate_mut(GateName::LiveStateProbe).unwrap();
        for (name, _) in super::super::recheck::FORK_CHECKS {
            let value = match name {
                "fork_token_kept" => serde_json::json!({"dump_time": "t0", "seen": "t0"}),
                _ => serde_json::json!(null),
            };
            probe
                .checks
                .push(sharedos_report::compare::check(name, true, value, "x"));
        }
        assert_eq!(
            vm_fork_copy_problems(&evaluate_report(&r, None), "t0"),
            Vec::<String>::new()
        );
        // A copy of another save holds its own fork-time token, and its guest finds nothing
        // wrong: only the saved guest's token tells.
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t1");
        assert!(
            p.iter()
                .any(|p| p.contains("fork_token_kept on the host")
                    && p.contains("copy of another save")),
            "{p:?}"
        );
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "");
        assert!(p.iter().any(|p| p.contains("was not read")), "{p:?}");
        let probe = r.gate_mut(GateName::LiveStateProbe).unwrap();
        probe.checks.retain(|c| c.name != "fork_token_kept");
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t0");
        assert!(
            p.iter()
                .any(|p| p.contains("lacks the check fork_token_kept")),
            "{p:?}"
        );
        let probe = r.gate_mut(GateName::LiveStateProbe).unwrap();
        probe
            .checks
            .iter_mut()
            .for_each(|c| c.passed = !c.name.starts_with("fork_same_windows"));
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t0");
        assert!(
            p.iter()
                .any(|p| p.contains("failed its check fork_same_windows")),
            "{p:?}"
        );
        r.gate_mut(GateName::Cleanup).unwrap().status = Status::Fail;
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t0");
        assert!(p.iter().any(|p| p.starts_with("cleanup is FAIL")), "{p:?}");
    }
}
