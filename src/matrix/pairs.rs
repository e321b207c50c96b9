//! vm-migrate's results side by side (`sharedos-rig matrix pairs DIR...`, and `show` of one
//! migration directory): one row per migration, from image (kernel, criu) to image (kernel,
//! criu), its verdict and a short cause.
//!
//! A migration directory holds two vm-run reports (`from/`, `to/`) and `migration.json`. Like
//! matrix.json, migration.json is an archive's word: each row is judged again from its two
//! halves through the one reader and the one verdict (`judge::verdict::migration`, with its
//! findings), and every place where migration.json says otherwise is returned as a warning.
//! The cause is CRIU's own error when a gate quoted one (a restore CRIU refused, a dump it could
//! not make), else the first failing gate's reason; guest text, escaped wherever shown.

use super::render::{aligned, html_end, html_headings, md_notes, md_row, md_rows, or_dash};
use super::CELL_CAUSE_CHARS;
use crate::escape::{html as html_esc, line as one_line, xml as xml_esc};
use crate::judge::ledger::Ledger;
use crate::judge::reader::{Kind, ReportDir};
use crate::judge::verdict::{
    self, rig_error, How, MigrationFinding, MigrationSide, Outcome, MIGRATION_FILE,
};
use crate::matrix::MATRIX_FILE;
use anyhow::{bail, Result};
use sharedos_report::cause::cut;
use sharedos_report::report::{Verdict, REPORT_FILE, RIG_FAILURE_EXIT};
use std::fmt::Write;
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
                let findings = verdict::migration_findings(f, to);
                (
                    short_cause(&findings),
                    PairOutcome::Judged(verdict::migration(f, to)),
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

/// One migration directory judged again: its halves through the one reader and the one
/// verdict, migration.json read bounded and held against them.
pub fn load_one(dir: &ReportDir, label: &str, ledger: Option<&Ledger>) -> (Pair, Vec<String>) {
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
    (row, warnings)
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
    let mut warnings = Vec::new();
    for path in paths {
        let dir = ReportDir::open(path)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}; {fix}", path.display()))?;
        if is_migration_dir(&dir) {
            let label = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| path.display().to_string());
            let (row, w) = load_one(&dir, &label, ledger);
            rows.push(row);
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
                let (row, w) = load_one(&sub, &name, ledger);
                rows.push(row);
                warnings.extend(w);
            }
        }
        if rows.len() == before {
            bail!("{} holds no migration: {fix}", path.display());
        }
    }
    Ok((Pairs::new(rows), warnings))
}

fn meaning(code: i32) -> &'static str {
    match code {
        0 => "every checkpoint was restored and held in the other guest",
        1 => "a migration failed",
        _ => "the rig failed for a migration",
    }
}

fn headings() -> Vec<String> {
    [
        "from",
        "kernel",
        "criu",
        "to",
        "kernel",
        "criu",
        "verdict",
        "cause",
        "migration",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A row's cells, each escaped for one terminal line, in column order.
fn row(p: &Pair) -> Vec<String> {
    vec![
        or_dash(&p.from.image),
        or_dash(&p.from.kernel),
        or_dash(&p.from.criu),
        or_dash(&p.to.image),
        or_dash(&p.to.kernel),
        or_dash(&p.to.criu),
        p.word().to_string(),
        or_dash(&p.cause),
        or_dash(&p.label),
    ]
}

/// Notes under the table, one escaped line each.
fn notes(m: &Pairs) -> Vec<String> {
    let mut out = Vec::new();
    for p in &m.pairs {
        let label = one_line(&p.label);
        if let PairOutcome::RigFailed(why) = &p.outcome {
            out.push(format!("{label}: {}", one_line(why)));
        }
        for n in &p.notes {
            out.push(format!("{label}: {}", one_line(n)));
        }
    }
    out
}

pub fn text(m: &Pairs) -> String {
    let mut rows = vec![headings()];
    rows.extend(m.pairs.iter().map(row));
    let mut s = format!(
        "pairs: {} migration(s), exit {}: {}\n",
        m.pairs.len(),
        m.exit_code,
        meaning(m.exit_code)
    );
    s.push_str(&aligned(&rows, &notes(m)));
    s
}

pub fn md(m: &Pairs) -> String {
    let mut s = format!(
        "**Migrations: exit {}** ({}), {} pair(s).\n\n",
        m.exit_code,
        meaning(m.exit_code),
        m.pairs.len()
    );
    let h = headings();
    s.push_str(&md_row(&h));
    s.push_str(&md_row(&vec!["---"; h.len()]));
    s.push_str(&md_rows(m.pairs.iter().map(row)));
    s.push_str(&md_notes(&notes(m)));
    s
}

fn colour(p: &Pair) -> &'static str {
    match &p.outcome {
        PairOutcome::Judged(Verdict::Pass) => "#1a7f37",
        _ => "#cf222e",
    }
}

pub fn html(m: &Pairs) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>sharedos-rig migrations</title>\
         <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:3px 6px}}</style>\
         </head><body>\n<h1>sharedos-rig migrations: exit {}</h1>\n<p>{}; {} pair(s).</p>\n\
         <table>\n<tr>",
        m.exit_code,
        html_esc(meaning(m.exit_code)),
        m.pairs.len()
    );
    s.push_str(&html_headings(&headings()));
    s.push_str("</tr>\n");
    for p in &m.pairs {
        s.push_str("<tr>");
        for (i, x) in row(p).iter().enumerate() {
            let style = if i == 6 {
                format!(" style=\"color:{};font-weight:bold\"", colour(p))
            } else {
                String::new()
            };
            let _ = write!(s, "<td{style}>{}</td>", html_esc(x));
        }
        s.push_str("</tr>\n");
    }
    s.push_str(&html_end(&notes(m)));
    s
}

/// One test suite, one test case per migration: FAIL a failure, a rig failure an error, each
/// with the row's cause.
pub fn junit(m: &Pairs) -> String {
    let failures = m.pairs.iter().filter(|p| p.exit_code() == 1).count();
    let errors = m
        .pairs
        .iter()
        .filter(|p| p.exit_code() == RIG_FAILURE_EXIT)
        .count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"sharedos-rig-migrations\">\n  <testsuite name=\"migrations\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">",
        m.pairs.len()
    );
    for p in &m.pairs {
        let name = xml_esc(&format!(
            "{} ({}, criu {}) -> {} ({}, criu {}) [{}]",
            p.from.image, p.from.kernel, p.from.criu, p.to.image, p.to.kernel, p.to.criu, p.label
        ));
        let _ = write!(s, "    <testcase classname=\"migrations\" name=\"{name}\"");
        let body = xml_esc(&p.notes.join("\n"));
        let _ = match (&p.outcome, xml_esc(&p.cause)) {
            (PairOutcome::Judged(Verdict::Pass), _) => writeln!(s, "/>"),
            (PairOutcome::RigFailed(_), cause) => writeln!(
                s,
                "><error message=\"rig failure: {cause}\">{body}</error></testcase>"
            ),
            (PairOutcome::Judged(v), cause) => writeln!(
                s,
                "><failure message=\"{v}: {cause}\">{body}</failure></testcase>"
            ),
        };
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}

#[cfg(test)]
mod tests {
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
}
