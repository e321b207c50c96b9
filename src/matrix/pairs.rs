//! vm-migrate's results side by side (`sharedos-rig matrix pairs DIR...`, and `show` of one
//! migration directory): one row per migration, from image (kernel, criu) to image (kernel,
//! criu), its verdict and a short cause.
//!
//! A migration directory holds two vm-run reports (`from/`, `to/`) and `migration.json`. Like
//! matrix.json, migration.json is an archive's word: each row is judged again from its two
//! halves through the one reader and the one verdict (`judge::verdict::migration`, with its
//! findings), and every place where migration.json says otherwise is returned as a warning.
//! The halves must be of one migration: the verdict holds the restore side to the dump side
//! (one marker, the dump-time frame the host carried between them, two runs), each half's
//! marker is held to the one migration.json records, and a half that is the same run as a half
//! of an earlier row fails its row, naming both.
//! The cause is CRIU's own error when a gate quoted one (a restore CRIU refused, a dump it could
//! not make), else the first failing gate's reason; guest text, escaped wherever shown.
//!
//! Here: the rows and how each is judged and read from disk; `formats`: the rows as text,
//! Markdown, HTML and JUnit.

mod formats;

pub use formats::{html, junit, md, text};

use super::same_run::RunId;
use super::CELL_CAUSE_CHARS;
use crate::judge::ledger::Ledger;
use crate::judge::reader::{Kind, ReportDir};
use crate::judge::verdict::{
    self, rig_error, How, MigrationFinding, MigrationSide, Outcome, MIGRATION_FILE,
};
use crate::matrix::MATRIX_FILE;
use anyhow::{bail, Result};
use sharedos_report::cause::cut;
use sharedos_report::report::{Verdict, REPORT_FILE, RIG_FAILURE_EXIT};
use std::path::{Path, PathBuf};

/// Far above any migration.json (a few KiB); a larger one is not read.
const MAX_SUMMARY_BYTES: u64 = 1 << 20;

/// One guest of a migration, as its judged report (or, when it has none, migration.json) names
/// it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Guest {
    pub image: String,
    pub kernel: String,
    pub criu: String,
}

/// How a migration ended.
#[derive(Clone, Debug, PartialEq)]
pub enum PairOutcome {
    /// The migration verdict on its judged halves.
    Judged(Verdict),
    /// A guest's run failed as a rig (it did not boot, its session was lost...), a half cannot
    /// be judged, or the migration ended before its restore side ran: why, in words.
    RigFailed(String),
}

/// One row: a migration directory judged again.
#[derive(Clone, Debug, PartialEq)]
pub struct Pair {
    /// The migration directory's name.
    pub label: String,
    pub from: Guest,
    pub to: Guest,
    pub outcome: PairOutcome,
    /// What kept it from passing, in a few words (`to: restore_live_process: criu restore:
    /// ...`); empty for a PASS. Guest text: not escaped here.
    pub cause: String,
    /// Every finding of the verdict, and CRIU's whole error line beside each one that quoted
    /// it; the console's oops headlines. Not escaped here.
    pub notes: Vec<String>,
}

impl Pair {
    /// 0 PASS, 1 FAIL, 2 the rig failed.
    pub fn exit_code(&self) -> i32 {
        match &self.outcome {
            PairOutcome::Judged(v) => v.exit_code(),
            PairOutcome::RigFailed(_) => RIG_FAILURE_EXIT,
        }
    }

    /// The word migration.json's `verdict` uses for this outcome.
    fn summary_word(&self) -> String {
        match &self.outcome {
            PairOutcome::Judged(v) => v.to_string(),
            PairOutcome::RigFailed(_) => "RIG_FAILURE".into(),
        }
    }

    fn word(&self) -> &'static str {
        match &self.outcome {
            PairOutcome::Judged(v) => v.as_str(),
            PairOutcome::RigFailed(_) => "RIG FAILURE",
        }
    }
}

/// The rows, and the exit code they sum up to: 2 when the rig failed for any, else 1 when any
/// failed, else 0.
#[derive(Clone, Debug, PartialEq)]
pub struct Pairs {
    pub pairs: Vec<Pair>,
    pub exit_code: i32,
}

impl Pairs {
    pub fn new(pairs: Vec<Pair>) -> Pairs {
        let codes: Vec<i32> = pairs.iter().map(Pair::exit_code).collect();
        let exit_code = [RIG_FAILURE_EXIT, 1]
            .into_iter()
            .find(|c| codes.contains(c))
            .unwrap_or(0);
        Pairs { pairs, exit_code }
    }
}

/// A half as read: its judgement, or why it has none.
pub type Half<'a> = std::result::Result<&'a Outcome, String>;

/// A row from its halves, judged: `to` is None when the migration holds no restore side.
/// `summary` is migration.json when it could be read; it names a guest that left no report, and
/// is otherwise only held against the judgement. Returns the row and where migration.json
/// disagrees.
pub fn pair(
    label: &str,
    summary: Option<&serde_json::Value>,
    from: Half,
    to: Option<Half>,
) -> (Pair, Vec<String>) {
    let said = |side: MigrationSide, key: &str| -> String {
        summary
            .and_then(|s| s.get(side.dir()))
            .and_then(|s| s.get(key))
            .and_then(|v| v.as_str())
            .unwrap_or_default()
            .to_string()
    };
    let guest = |side: MigrationSide, h: Option<&Half>| match h {
        Some(Ok(o)) => {
            let vm = o.report.vm.as_ref();
            let env = &o.report.environment;
            let image = vm.map(|v| v.image_name.clone()).unwrap_or_default();
            let kernel = match env.kernel_release.as_str() {
                "" => vm
                    .map(|v| v.kernel_release_pinned.clone())
                    .unwrap_or_default(),
                k => k.to_string(),
            };
            Guest {
                image: if image.is_empty() {
                    said(side, "image")
                } else {
                    image
                },
                kernel,
                criu: env.criu_version.clone().unwrap_or_default(),
            }
        }
        _ => Guest {
            image: said(side, "image"),
            kernel: said(side, "kernel"),
            criu: said(side, "criu"),
        },
    };
    let rig = |why: String| {
        (
            cut(&why, CELL_CAUSE_CHARS),
            PairOutcome::RigFailed(why),
            vec![],
        )
    };
    let (cause, outcome, notes) = match &from {
        Err(e) => rig(format!("from/{REPORT_FILE} cannot be judged: {e}")),
        Ok(f) => match rig_failure(f, to.as_ref()) {
            Some(why) => rig(why),
            None => {
                let to = to.as_ref().and_then(|t| t.as_ref().ok().copied());
                let mut findings = verdict::migration_findings(f, to);
                findings.extend(unrecorded_halves(summary, f, to));
                let v = if findings.is_empty() {
                    Verdict::Pass
                } else {
                    Verdict::Fail
                };
                (
                    short_cause(&findings),
                    PairOutcome::Judged(v),
                    findings.iter().flat_map(finding_notes).collect(),
                )
            }
        },
    };
    let mut row = Pair {
        label: label.to_string(),
        from: guest(MigrationSide::Dump, Some(&from)),
        to: guest(MigrationSide::Restore, to.as_ref()),
        outcome,
        cause,
        notes,
    };
    for (side, h) in [
        (MigrationSide::Dump, Some(&from)),
        (MigrationSide::Restore, to.as_ref()),
    ] {
        let oops = h
            .and_then(|h| h.as_ref().ok())
            .and_then(|o| o.report.vm.as_ref())
            .and_then(|v| v.kernel_oops.as_ref());
        if let Some(oops) = oops {
            row.notes.push(format!(
                "{}: the guest kernel oopsed ({}); its serial.log has the whole report",
                side.dir(),
                oops.headline()
            ));
        }
    }
    let warnings = disagreements(&row, summary);
    (row, warnings)
}

/// Each half whose guest ran with another marker than the one migration.json records (vm-migrate
/// writes the marker it drew for both guests): halves of another migration put in this one's
/// place, which pass every check between the two of them. A migration.json that records no
/// marker (one written before it did) binds nothing; it only ever fails a row.
fn unrecorded_halves(
    summary: Option<&serde_json::Value>,
    from: &Outcome,
    to: Option<&Outcome>,
) -> Vec<MigrationFinding> {
    let Some(recorded) = summary
        .and_then(|s| s.get("marker"))
        .and_then(|m| m.as_str())
    else {
        return Vec::new();
    };
    [
        (MigrationSide::Dump, Some(from)),
        (MigrationSide::Restore, to),
    ]
    .into_iter()
    .filter_map(|(side, o)| Some((side, o?)))
    .filter(|(_, o)| o.report.marker != recorded)
    .map(|(side, o)| MigrationFinding {
        side,
        gate: None,
        problem: format!(
            "{}/ is not of the migration {MIGRATION_FILE} records: its guest ran with the \
             marker {:?}, {MIGRATION_FILE} records {recorded:?}: a half of another migration \
             put in this one's place",
            side.dir(),
            o.report.marker
        ),
        cause: None,
    })
    .collect()
}

/// Why the row is the rig's failure rather than a verdict, if it is: a guest's run that failed,
/// a restore side that cannot be judged, or a dump side that passed with no restore side after
/// it (the migration ended between its guests).
fn rig_failure(f: &Outcome, to: Option<&Half>) -> Option<String> {
    if let Some(e) = rig_error(&f.report) {
        return Some(format!("the dump side's run failed: {e}"));
    }
    match to {
        Some(Err(e)) => Some(format!("to/{REPORT_FILE} cannot be judged: {e}")),
        Some(Ok(t)) => rig_error(&t.report).map(|e| format!("the restore side's run failed: {e}")),
        None if verdict::migration_half_findings(f, MigrationSide::Dump).is_empty() => Some(
            "the dump side passed, but the migration holds no restore side (to/): it ended \
             before the restore side's guest ran"
                .into(),
        ),
        None => None,
    }
}

/// The row's short cause: the first gate that did not pass, in CRIU's words when it quoted
/// them, else its reason; a problem with a report itself when no gate failed.
fn short_cause(findings: &[MigrationFinding]) -> String {
    let Some(f) = findings
        .iter()
        .find(|f| f.gate.is_some())
        .or_else(|| findings.first())
    else {
        return String::new();
    };
    let why = match (&f.gate, &f.cause) {
        (Some(g), Some(c)) => format!("{g}: {}", c.headline()),
        _ => f.problem.clone(),
    };
    cut(&format!("{}: {why}", f.side.dir()), CELL_CAUSE_CHARS)
}

/// A finding as notes: its problem, then the error line of the log it quoted.
fn finding_notes(f: &MigrationFinding) -> Vec<String> {
    let side = f.side.dir();
    let mut out = vec![format!("{side}: {}", f.problem)];
    if let Some(c) = &f.cause {
        let log = match c.log.as_str() {
            "" => String::new(),
            l => format!(" ({side}/{l})"),
        };
        out.push(format!("{side}: {} said{log}: {}", c.source, c.error));
    }
    out
}

/// Where migration.json says otherwise than the halves judged again.
fn disagreements(row: &Pair, summary: Option<&serde_json::Value>) -> Vec<String> {
    let Some(s) = summary else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let name = &row.label;
    let ours = row.summary_word();
    match s.get("verdict").and_then(|v| v.as_str()) {
        Some(v) if v == ours => {}
        Some(v) => out.push(format!(
            "{name}: {MIGRATION_FILE} says {v}, its halves judged again give {ours}; showing \
             the recomputed verdict"
        )),
        None => out.push(format!(
            "{name}: {MIGRATION_FILE} names no verdict; showing its halves' judged again"
        )),
    }
    for (side, g) in [
        (MigrationSide::Dump, &row.from),
        (MigrationSide::Restore, &row.to),
    ] {
        let said = s
            .get(side.dir())
            .and_then(|x| x.get("image"))
            .and_then(|v| v.as_str());
        if let Some(said) = said.filter(|x| !x.is_empty() && !g.image.is_empty() && *x != g.image) {
            out.push(format!(
                "{name}: {MIGRATION_FILE} says the {} guest ran {said}, its report says {}",
                side.dir(),
                g.image
            ));
        }
    }
    out
}

/// Whether `dir` is a migration directory: no report or matrix of its own, and a
/// migration.json or a `from/` half (a migration that failed early may have written no
/// summary). Nothing is followed to find out.
pub fn is_migration_dir(dir: &ReportDir) -> bool {
    let none = |rel: &str| matches!(dir.kind(rel), Ok(None));
    none(REPORT_FILE)
        && none(MATRIX_FILE)
        && (matches!(dir.kind(MIGRATION_FILE), Ok(Some(Kind::File { .. })))
            || matches!(dir.kind("from"), Ok(Some(Kind::Dir))))
}

/// Whether the path is a migration directory (`show` takes one).
pub fn is_migration_path(path: &Path) -> bool {
    ReportDir::open(path).is_ok_and(|d| is_migration_dir(&d))
}

/// The runs a row's halves are, from/ then to/; None for a half that cannot be judged.
type Runs = [Option<RunId>; 2];

/// One migration directory judged again: its halves through the one reader and the one
/// verdict, migration.json read bounded and held against them; the runs its halves are.
fn load_one(dir: &ReportDir, label: &str, ledger: Option<&Ledger>) -> (Pair, Vec<String>, Runs) {
    let mut warnings = Vec::new();
    let summary = match dir.kind(MIGRATION_FILE) {
        Ok(None) => None,
        _ => match dir.bytes(MIGRATION_FILE, MAX_SUMMARY_BYTES).and_then(|r| {
            serde_json::from_slice::<serde_json::Value>(r.bytes().unwrap_or_default())
                .map_err(|e| format!("it is not JSON: {e}"))
        }) {
            Ok(v) => Some(v),
            Err(e) => {
                warnings.push(format!(
                    "{label}: {MIGRATION_FILE} cannot be read ({e}); the row comes from its \
                     halves' reports alone"
                ));
                None
            }
        },
    };
    let judge = |rel: &str| -> std::result::Result<Outcome, String> {
        let d = dir.open_beneath(rel)?;
        verdict::judge_dir(d, &How::full(ledger)).map_err(|r| r.problem)
    };
    let from = judge("from");
    let to = match dir.kind("to") {
        Ok(None) => None,
        _ => Some(judge("to")),
    };
    let (row, w) = pair(
        label,
        summary.as_ref(),
        from.as_ref().map_err(Clone::clone),
        to.as_ref().map(|t| t.as_ref().map_err(Clone::clone)),
    );
    warnings.extend(w);
    let run = |h: &std::result::Result<Outcome, String>| h.as_ref().ok().map(RunId::of);
    let runs = [run(&from), to.as_ref().and_then(run)];
    (row, warnings, runs)
}

/// Each half that is the same run as a half of an earlier row fails its row, naming both: a
/// migration copied under a second name, or a half copied into a second migration, is one run
/// counted twice, and each copy alone passes.
fn repeated_halves(rows: &mut [Pair], runs: &[Runs]) {
    let sides = [MigrationSide::Dump, MigrationSide::Restore];
    for i in 0..rows.len().min(runs.len()) {
        let mut problems = Vec::new();
        for (side, id) in sides.iter().zip(&runs[i]) {
            let Some(id) = id else { continue };
            let earlier = runs[..i].iter().enumerate().find_map(|(j, r)| {
                sides
                    .iter()
                    .zip(r)
                    .find_map(|(s, e)| e.as_ref().and_then(|e| id.shared(e)).map(|w| (j, *s, w)))
            });
            if let Some((j, s, what)) = earlier {
                problems.push(format!(
                    "{}/ is the same run as {}'s {}/: both carry {what}: one run counted in two \
                     migrations",
                    side.dir(),
                    rows[j].label,
                    s.dir()
                ));
            }
        }
        let Some(row) = rows.get_mut(i) else { continue };
        for p in problems {
            if let PairOutcome::Judged(v) = &mut row.outcome {
                *v = Verdict::Fail;
            }
            if row.cause.is_empty() {
                row.cause = cut(&p, CELL_CAUSE_CHARS);
            }
            row.notes.push(p);
        }
    }
}

/// Every migration the paths name: each a migration directory, or a directory holding some
/// (reports/, whose other entries are passed over; a link among them is named, not followed).
/// Rows in the order given, a holding directory's by name (vm-migrate starts each with the UTC
/// time). Err when a path cannot be read or names no migration at all.
pub fn load(paths: &[PathBuf], ledger: Option<&Ledger>) -> Result<(Pairs, Vec<String>)> {
    let fix = "give vm-migrate's directories (each holding from/, to/ and migration.json) or a \
               directory that holds them, such as reports/";
    if paths.is_empty() {
        bail!("no directory given: {fix}");
    }
    let mut rows = Vec::new();
    let mut runs = Vec::new();
    let mut warnings = Vec::new();
    for path in paths {
        let dir = ReportDir::open(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}; {fix}", path.display()))?;
        if is_migration_dir(&dir) {
            let label = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string());
            let (row, w, r) = load_one(&dir, &label, ledger);
            rows.push(row);
            runs.push(r);
            warnings.extend(w);
            continue;
        }
        if [REPORT_FILE, MATRIX_FILE]
            .iter()
            .any(|f| matches!(dir.kind(f), Ok(Some(_))))
        {
            bail!(
                "{} is a vm-run report or a matrix, not a migration: {fix}",
                path.display()
            );
        }
        let entries = dir
            .entries("")
            .map_err(|e| anyhow::anyhow!("listing {}: {e}; {fix}", path.display()))?;
        let before = rows.len();
        for (name, kind) in entries {
            match kind {
                Kind::Dir => {}
                Kind::Link => {
                    warnings.push(format!(
                        "{}: a symbolic link, not followed",
                        path.join(&name).display()
                    ));
                    continue;
                }
                _ => continue,
            }
            let sub = match dir.open_beneath(&name) {
                Ok(sub) => sub,
                Err(e) => {
                    warnings.push(format!("{}: {e}", path.join(&name).display()));
                    continue;
                }
            };
            if is_migration_dir(&sub) {
                let (row, w, r) = load_one(&sub, &name, ledger);
                rows.push(row);
                runs.push(r);
                warnings.extend(w);
            }
        }
        if rows.len() == before {
            bail!("{} holds no migration: {fix}", path.display());
        }
    }
    repeated_halves(&mut rows, &runs);
    Ok((Pairs::new(rows), warnings))
}

#[cfg(test)]
mod tests;
