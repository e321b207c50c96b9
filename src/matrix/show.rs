//! A matrix directory read back (`sharedos-rig show MATRIX`, `diff`): matrix.json is as
//! untrusted as any report, so nothing it says about a row is taken on its word. Each row is
//! judged again by the one verdict from its own report (reached without following a link), its
//! image's committed expectations are applied again, the exit code is recomputed, and every
//! place where matrix.json said otherwise is returned as a warning. A row's report must be of
//! that row (the image and variants its vm-run recorded, [`super::row_problem`]), and no two
//! rows may hold one run ([`super::same_run`]): either fails the row, naming both places.

use super::same_run::{self, RunId};
use super::{
    cell_from_outcome, compare, exit_code, expect, unreadable_cell, Cell, CellOutcome, Matrix,
    MATRIX_FILE, MATRIX_SCHEMA_VERSION,
};
use crate::image::definition;
use crate::judge::ledger::Ledger;
use crate::judge::reader::{Kind, ReportDir};
use crate::judge::verdict::{self, How};
use anyhow::{bail, Context, Result};
use sharedos_report::report::REPORT_FILE;
use std::path::{Path, PathBuf};

/// More than any matrix.json (one cell per image).
const MAX_MATRIX_BYTES: u64 = 16 << 20;

/// Whether `dir` is a matrix directory rather than one report: it holds a matrix.json (a
/// regular file, not a link) and no report.json.
pub fn is_matrix_dir(dir: &Path) -> bool {
    let Ok(d) = ReportDir::open(dir) else {
        return false;
    };
    matches!(d.kind(MATRIX_FILE), Ok(Some(Kind::File { .. })))
        && matches!(d.kind(REPORT_FILE), Ok(None))
}

/// Reads a matrix directory and recomputes it from its rows' reports: what is returned is
/// what the reports and the expectations under `images_dir` (found as vm-matrix finds it when
/// None) say, with every disagreement of matrix.json named in the warnings.
pub fn load(
    dir: &Path,
    images_dir: Option<&Path>,
    ledger: Option<&Ledger>,
) -> Result<(Matrix, Vec<String>)> {
    let files = ReportDir::open(dir).map_err(anyhow::Error::msg)?;
    let read = files
        .bytes(MATRIX_FILE, MAX_MATRIX_BYTES)
        .map_err(anyhow::Error::msg)?;
    let mut m: Matrix = serde_json::from_slice(read.bytes().unwrap_or_default())
        .with_context(|| format!("{} is not a matrix.json", dir.join(MATRIX_FILE).display()))?;
    if m.schema_version != MATRIX_SCHEMA_VERSION {
        bail!(
            "{} has schema version {}, this rig reads {MATRIX_SCHEMA_VERSION}: show it with the \
             sharedos-rig that wrote it, or merge its rows' reports again with `matrix merge`",
            dir.join(MATRIX_FILE).display(),
            m.schema_version
        );
    }
    let find = |image: &str| -> PathBuf { definition::find_images_dir(images_dir, image) };
    let mut warnings = Vec::new();
    let (mut fresh, ids): (Vec<Cell>, Vec<Option<RunId>>) = m
        .cells
        .iter()
        .map(|c| recompute(&files, c, &find, ledger))
        .unzip();
    repeated_rows(&mut fresh, &ids);
    for (c, fresh) in m.cells.iter_mut().zip(fresh) {
        warnings.extend(disagreements(c, &fresh));
        *c = fresh;
    }
    let code = exit_code(&m.cells);
    if code != m.exit_code {
        warnings.push(format!(
            "matrix.json says exit {}, its rows judged again give {code}",
            m.exit_code
        ));
        m.exit_code = code;
    }
    Ok((m, warnings))
}

/// Each row a matrix.json names a second time, and each row whose report is the same run as
/// an earlier row's: one run counted twice, which no row's report shows of its own.
fn repeated_rows(cells: &mut [Cell], ids: &[Option<RunId>]) {
    let dir = |c: &Cell| {
        c.report_dir
            .as_deref()
            .map_or_else(|| "no report".to_string(), |d| format!("{d}/"))
    };
    let mut found: Vec<(usize, String)> = Vec::new();
    for (i, c) in cells.iter().enumerate() {
        if let Some(first) = cells[..i].iter().find(|f| f.image == c.image) {
            found.push((
                i,
                format!(
                    "matrix.json names row {} a second time (first with {})",
                    c.image,
                    dir(first)
                ),
            ));
        }
    }
    for (later, first, what) in same_run::repeats(ids) {
        let f = &cells[first];
        found.push((
            later,
            format!(
                "its report is the same run as row {}'s ({}): both carry {what}: one run counted \
                 in two rows",
                f.image,
                dir(f)
            ),
        ));
    }
    for (i, problem) in found {
        if let Some(c) = cells.get_mut(i) {
            c.problems.push(problem);
        }
    }
}

/// A cell as its row's report and the committed expectations make it now, and the run its
/// report is of. A row that names no report keeps matrix.json's cell only when it says the row
/// never ran.
fn recompute(
    files: &ReportDir,
    c: &Cell,
    images_dir: &dyn Fn(&str) -> PathBuf,
    ledger: Option<&Ledger>,
) -> (Cell, Option<RunId>) {
    let mut id = None;
    let mut fresh = match c.report_dir.as_deref() {
        None if c.outcome != CellOutcome::Ran => c.clone(),
        None => unreadable_cell(
            &c.image,
            None,
            "matrix.json says it ran, but names no report",
        ),
        Some(rel) if rel.contains('/') || rel.starts_with('.') || rel.is_empty() => {
            unreadable_cell(
                &c.image,
                None,
                &format!("report_dir {rel:?} is not a plain name"),
            )
        }
        Some(rel) => match files
            .open_beneath(rel)
            .and_then(|d| verdict::judge_dir(d, &How::full(ledger)).map_err(|r| r.problem))
        {
            Ok(o) => {
                id = Some(RunId::of(&o));
                cell_from_outcome(&c.image, &o)
            }
            Err(e) => unreadable_cell(&c.image, None, &format!("{rel}/{REPORT_FILE}: {e}")),
        },
    };
    fresh.log = c.log.clone();
    fresh.report_dir = c.report_dir.clone();
    if fresh.outcome != CellOutcome::Ran && fresh.reason.is_empty() {
        fresh.reason = c.reason.clone();
    }
    // A row that never booted reports no kernel; the one its lock pins was recorded when the
    // matrix was assembled.
    if fresh.kernel_release.is_empty() {
        fresh.kernel_release = c.kernel_release.clone();
    }
    if let Err(e) = expect(&mut fresh, images_dir) {
        fresh.expected = None;
        compare(&mut fresh);
        fresh
            .problems
            .push(format!("its expectations cannot be read: {e:#}"));
    }
    (fresh, id)
}

/// Where matrix.json's cell says otherwise than the recomputed one.
fn disagreements(said: &Cell, fresh: &Cell) -> Vec<String> {
    let name = &fresh.image;
    let mut out = Vec::new();
    let mut differ = |field: &str, what: String| {
        out.push(format!(
            "{name}: matrix.json and {what} disagree on {field}; showing the recomputed {field}"
        ))
    };
    let report = format!(
        "{}/{REPORT_FILE}",
        fresh.report_dir.as_deref().unwrap_or("(no report)")
    );
    if said.outcome != fresh.outcome {
        let why = match fresh.reason.as_str() {
            "" => report.clone(),
            r => format!("{report} ({r})"),
        };
        differ("outcome", why);
    }
    if said.gates != fresh.gates {
        differ("gate statuses", report.clone());
    }
    if said.exit_code != fresh.exit_code {
        differ("exit_code", format!("the verdict on {report}"));
    }
    if said.expected != fresh.expected {
        differ(
            "expected",
            format!("images/{}/{}", fresh.base_image(), super::EXPECTATIONS_FILE),
        );
    }
    if said.differences != fresh.differences {
        differ(
            "differences",
            "the expectations held against the report".into(),
        );
    }
    for p in fresh.problems.iter().filter(|p| !said.problems.contains(p)) {
        out.push(format!(
            "{name}: its report has a problem matrix.json does not name: {p}"
        ));
    }
    out
}
