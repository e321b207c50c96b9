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
use sharedos_report::report::{self, Gate, Report, Verdict, REPORT_FILE, REVIEW_FILE};
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

mod fork_copy;
mod migration;
pub mod same_run;

pub use fork_copy::{vm_fork_copy_problems, VM_FORK_COPY};
pub use migration::{
    migration, migration_findings, migration_half_findings, migration_half_problems,
    MigrationFinding, MigrationSide, MIGRATION_DUMP_SIDE, MIGRATION_FILE, MIGRATION_RESTORE_SIDE,
};

#[cfg(test)]
mod tests;
