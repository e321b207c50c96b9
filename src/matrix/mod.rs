//! `vm-matrix`: one vm-run per row, the per-row reports side by side in
//! `reports/matrix-<UTC>/<row>/`, and `matrix.json` (the [`Matrix`] schema below, its one
//! definition) with one cell per row. A row is an image, or an image with variants
//! (`bookworm+userns`, see [`variant`]). Each image's build comes first, one at a time; an image
//! that cannot be built is a NOT_RUN cell that says why and how to refresh its lock, and the
//! others still run. The runs themselves are child `vm-run` processes, as many at once as
//! `--jobs` allows. `sharedos-rig matrix merge` ([`merge`]) builds the same directory from
//! vm-run reports made elsewhere (one CI job per image); both write matrix.json through
//! [`assemble`], so the two tables follow the same rules.
//!
//! Every cell is judged by the one verdict (`judge::verdict`) on its archived report, whoever
//! made it: vm-matrix after each vm-run, `matrix merge` after each copy, and `show MATRIX`
//! again from the reports ([`show`]), which warns where matrix.json says otherwise.
//!
//! Exit code: 2 when the rig failed for any cell (an image that would not build, a vm-run that
//! exited 2); else 1 when the verdict found anything wrong with a cell's report (a changed
//! artifact, forged pixels, a rejected review...), or a cell differs from its image's
//! `expected-gates` (plain rows only: a variant row is judged by its own verdict), or, for a row
//! without one, its own verdict is FAIL; else 3 when a row without expectations only awaits the
//! human review, as vm-run exits; else 0. A cell is "as expected" only when the verdict found
//! nothing wrong and its statuses match the expectations.

pub mod merge;
pub mod pairs;
pub mod render;
pub mod run;
// One run in two places is the judge's to tell (`judge::verdict::same_run`).
pub use crate::judge::verdict::same_run;
pub mod deployment;
pub mod show;
pub mod variant;
pub mod workloads;

pub use run::{
    parse_images_arg, resolve_images, vm_matrix, vm_matrix_with, vm_run_cmd, MatrixOptions,
};
pub use show::{is_matrix_dir, load};
pub use variant::Row;

use crate::image::{self, definition};
use crate::judge::ledger::Ledger;
use crate::judge::reader::ReportDir;
use crate::judge::verdict::{self, How, Outcome};
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sharedos_report::clock;
use sharedos_report::report::{GateName, Report, Status, RIG_FAILURE_EXIT};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// File name of the matrix summary inside a matrix directory.
pub const MATRIX_FILE: &str = "matrix.json";
/// An image's committed expectations, beside its image.conf.
pub const EXPECTATIONS_FILE: &str = "expected-gates";
/// Bumped whenever a field changes meaning or disappears. Version 2: `exit_code` is the
/// verdict's on the archived report, and `problems` what the verdict found wrong with it.
pub const MATRIX_SCHEMA_VERSION: u32 = 2;
/// The vCPUs each guest gets unless told otherwise (vm-run's `--cpus` default).
pub const DEFAULT_GUEST_CPUS: u32 = 2;

/// How a cell ended, before any expectation is applied.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "snake_case")]
pub enum CellOutcome {
    /// vm-run ran to its end and its report judged 0, 1 or 3.
    Ran,
    /// The image could not be built: nothing ran.
    NotRun,
    /// vm-run itself failed (exit 2): boot, SSH, a refused fetch...
    RigFailed,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CellGate {
    pub name: GateName,
    pub status: Status,
}

/// One row's cell.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Cell {
    /// The row label: the image's name, then `+variant` for each variant.
    pub image: String,
    /// The row's variants, in label order; empty for a plain image row.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub variants: Vec<String>,
    pub outcome: CellOutcome,
    /// The one verdict's exit code on the row's archived report (vm-run's own exit code, 2 when
    /// the rig failed); None when it never ran.
    pub exit_code: Option<i32>,
    /// What the verdict found wrong with the row's report (a changed artifact, forged pixels,
    /// a rejected review, ...): any of them fails the row, expectations or not.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<String>,
    /// The image's report, relative to the matrix directory; None when nothing was archived.
    pub report_dir: Option<String>,
    /// vm-run's output (stdout and stderr), relative to the matrix directory.
    pub log: Option<String>,
    /// Why the cell is NOT_RUN or a rig failure; empty otherwise.
    #[serde(default)]
    pub reason: String,
    /// How to get the cell to run, when it did not.
    #[serde(default)]
    pub fix: String,
    pub kernel_release: String,
    pub criu_version: String,
    pub accelerator: String,
    /// The ten gates in gate order; all NOT_RUN when nothing ran.
    pub gates: Vec<CellGate>,
    pub dump_seconds: Option<f64>,
    pub restore_seconds: Option<f64>,
    /// Size of the CRIU images the dump wrote, in MB (10^6 bytes).
    pub image_mb: Option<f64>,
    /// The image's committed expectations, when it has any.
    pub expected: Option<Vec<CellGate>>,
    /// One line per gate whose status differs from the expectation.
    #[serde(default)]
    pub differences: Vec<String>,
    /// The first failed gate and what it failed on, in a few words (`dump: criu dump: Can't
    /// dump nested ipc namespace for 1234`): CRIU's own first error when the gate quoted one,
    /// else its reason. Guest text, for display only; empty when no gate failed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub cause: String,
    /// A guest kernel oops the host saw on the console (`kernel oops: RIP function+0x..`),
    /// whether or not the run failed; empty when there was none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub kernel_oops: String,
    /// The density gate's status, in a row with `copies<N>` (it is not one of the ten); None
    /// when the report has no density gate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub density: Option<Status>,
    /// Memory per copy: the median PSS of the density gate's copies, in MiB, each copy measured
    /// with every copy up; only when the density gate passed and its figures read (as
    /// vm-compare's shared-OS column takes them, `judge::compare::shared_os_column`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copy_pss_mib: Option<f64>,
}

/// The most characters of a cell's cause: a matrix row stays readable in a terminal.
pub const CELL_CAUSE_CHARS: usize = 120;

/// The first failed gate's cause, as [`Cell::cause`] holds it; in a report with no failed gate,
/// the first gate that did not run and why (a row's gate the guest skipped is never a bare
/// NOT_RUN).
pub fn cell_cause(r: &Report) -> String {
    use sharedos_report::cause::cut;
    let failed = r.gates.iter().find(|g| g.status == Status::Fail).map(|g| {
        let why = match &g.cause {
            Some(c) => c.headline(),
            None => g.reason.clone(),
        };
        format!("{}: {why}", g.name)
    });
    let skipped = || {
        r.gates
            .iter()
            .find(|g| g.status == Status::NotRun)
            .map(|g| format!("{} NOT_RUN: {}", g.name, g.reason))
    };
    failed
        .or_else(skipped)
        .map(|c| cut(&c, CELL_CAUSE_CHARS))
        .unwrap_or_default()
}

impl Cell {
    /// The image the row ran, without its variants.
    pub fn base_image(&self) -> &str {
        self.image.split('+').next().unwrap_or(&self.image)
    }

    pub fn status(&self, gate: GateName) -> Status {
        self.gates
            .iter()
            .find(|g| g.name == gate)
            .map(|g| g.status)
            .unwrap_or(Status::NotRun)
    }

    /// This cell's exit code as the matrix weighs it (0, 1, 2 or 3): a report the verdict
    /// finds anything wrong with is 1 whatever its statuses.
    pub fn judgement(&self) -> i32 {
        match (self.outcome, &self.expected) {
            (CellOutcome::NotRun | CellOutcome::RigFailed, _) => RIG_FAILURE_EXIT,
            (CellOutcome::Ran, _) if !self.problems.is_empty() => 1,
            (CellOutcome::Ran, Some(_)) => i32::from(!self.differences.is_empty()),
            (CellOutcome::Ran, None) => self.exit_code.unwrap_or(RIG_FAILURE_EXIT),
        }
    }

    /// As expected: the verdict found nothing wrong and the statuses match the expectations.
    pub fn as_expected(&self) -> bool {
        self.outcome == CellOutcome::Ran
            && self.expected.is_some()
            && self.problems.is_empty()
            && self.differences.is_empty()
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Matrix {
    pub schema_version: u32,
    pub started_at: String,
    pub finished_at: String,
    pub jobs: usize,
    /// How `jobs` was chosen, in words.
    pub jobs_reason: String,
    pub command_line: Vec<String>,
    pub cells: Vec<Cell>,
    pub exit_code: i32,
}

/// The matrix's exit code from its cells: 2 > 1 > 3 > 0.
pub fn exit_code(cells: &[Cell]) -> i32 {
    let codes: Vec<i32> = cells.iter().map(Cell::judgement).collect();
    for worst in [RIG_FAILURE_EXIT, 1, 3] {
        if codes.contains(&worst) {
            return worst;
        }
    }
    0
}

/// Parallel runs: one per `guest_cpus` host cores, at least one. Under TCG each vCPU is a host
/// thread that keeps a core busy, so more guests than that only slow every run down.
pub fn default_jobs(host_cores: usize, guest_cpus: u32) -> (usize, String) {
    let per = (guest_cpus.max(1)) as usize;
    let jobs = (host_cores / per).max(1);
    (
        jobs,
        format!("{host_cores} host cores / {per} vCPUs per guest, at least 1"),
    )
}

/// Reads an `expected-gates` file: `gate STATUS` per line, `#` comments, every gate once.
pub fn parse_expectations(text: &str) -> Result<Vec<CellGate>> {
    let mut seen: BTreeMap<GateName, Status> = BTreeMap::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        let [gate, status] = f.as_slice() else {
            bail!("line {}: expected `GATE STATUS`, got {raw:?}", i + 1);
        };
        let name: GateName = serde_json::from_value(serde_json::Value::String(gate.to_string()))
            .with_context(|| {
                format!(
                    "line {}: {gate:?} is not a gate (the gates: {})",
                    i + 1,
                    GateName::ALL.map(|g| g.as_str()).join(", ")
                )
            })?;
        let status: Status = serde_json::from_value(serde_json::Value::String(status.to_string()))
            .with_context(|| {
                format!(
                    "line {}: {status:?} is not a status (PASS, FAIL, NOT_RUN, REVIEW_REQUIRED)",
                    i + 1
                )
            })?;
        if seen.insert(name, status).is_some() {
            bail!("line {}: {gate} is given twice", i + 1);
        }
    }
    let missing: Vec<&str> = GateName::ALL
        .iter()
        .filter(|g| !seen.contains_key(g))
        .map(|g| g.as_str())
        .collect();
    if !missing.is_empty() {
        bail!("no expectation for {}", missing.join(", "));
    }
    Ok(GateName::ALL
        .iter()
        .map(|g| CellGate {
            name: *g,
            status: seen[g],
        })
        .collect())
}

/// The expectations committed for an image, if it has any.
pub fn load_expectations(images_dir: &Path, image: &str) -> Result<Option<Vec<CellGate>>> {
    let path = images_dir.join(image).join(EXPECTATIONS_FILE);
    match std::fs::read_to_string(&path) {
        Ok(t) => parse_expectations(&t)
            .map(Some)
            .with_context(|| format!("parsing {}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {}", path.display())),
    }
}

/// Fills `differences` from the gates and the expectations. A row that did not run has no
/// statuses to compare (its NOT_RUN gates say nothing about the image): it stays a rig
/// failure, with its reason, not ten differences.
pub fn compare(cell: &mut Cell) {
    cell.differences.clear();
    let Some(expected) = &cell.expected else {
        return;
    };
    if cell.outcome != CellOutcome::Ran {
        return;
    }
    for e in expected {
        let got = cell.status(e.name);
        if got != e.status {
            cell.differences
                .push(format!("{}: expected {}, got {got}", e.name, e.status));
        }
    }
}

fn all_not_run() -> Vec<CellGate> {
    GateName::ALL
        .iter()
        .map(|g| CellGate {
            name: *g,
            status: Status::NotRun,
        })
        .collect()
}

fn data_f64(r: &Report, gate: GateName, key: &str) -> Option<f64> {
    r.gate(gate)?.data.get(key)?.as_f64()
}

/// A cell from an archived report: the gates as the report has them (a gate missing from it
/// counts as NOT_RUN), where it ran, and the CRIU figures.
pub fn cell_from_report(image: &str, r: &Report, exit_code: i32) -> Cell {
    if let Some(reason) = image_not_built(r) {
        let mut c = not_run_cell(image, &reason, "");
        c.exit_code = Some(exit_code);
        c.report_dir = Some(image.to_string());
        return c;
    }
    let round = |x: f64, places: i32| {
        let k = 10f64.powi(places);
        (x * k).round() / k
    };
    let vm = r.vm.as_ref();
    let rig_error = vm.and_then(|v| v.rig_error.clone());
    let mut cell = Cell {
        image: image.to_string(),
        variants: label_variants(image),
        outcome: if exit_code == RIG_FAILURE_EXIT || rig_error.is_some() {
            CellOutcome::RigFailed
        } else {
            CellOutcome::Ran
        },
        exit_code: Some(exit_code),
        problems: Vec::new(),
        report_dir: Some(image.to_string()),
        log: Some(format!("{image}.log")),
        reason: rig_error.unwrap_or_default(),
        fix: String::new(),
        kernel_release: r.environment.kernel_release.clone(),
        criu_version: r.environment.criu_version.clone().unwrap_or_default(),
        accelerator: vm.map(|v| v.accel.clone()).unwrap_or_default(),
        gates: GateName::ALL
            .iter()
            .map(|g| CellGate {
                name: *g,
                status: r.gate(*g).map(|x| x.status).unwrap_or(Status::NotRun),
            })
            .collect(),
        dump_seconds: data_f64(r, GateName::Dump, "dump_ms").map(|ms| round(ms / 1000.0, 2)),
        restore_seconds: data_f64(r, GateName::RestoreLiveProcess, "restore_ms")
            .map(|ms| round(ms / 1000.0, 2)),
        image_mb: data_f64(r, GateName::Dump, "image_bytes").map(|b| round(b / 1e6, 1)),
        expected: None,
        differences: Vec::new(),
        cause: cell_cause(r),
        kernel_oops: vm
            .and_then(|v| v.kernel_oops.as_ref())
            .map(|o| sharedos_report::cause::cut(&o.headline(), CELL_CAUSE_CHARS))
            .unwrap_or_default(),
        density: r.gate(GateName::Density).map(|g| g.status),
        copy_pss_mib: None,
    };
    if cell.outcome == CellOutcome::RigFailed {
        cell.fix = format!(
            "read {image}/serial.log (the guest's console) and {image}.log, then run the image \
             alone: `cargo xtask vm-run --image {}{}`",
            cell.base_image(),
            Row::parse(image)
                .map(|r| r.diagnose_args())
                .ok()
                .filter(|a| !a.is_empty())
                .map(|a| format!(" -- {}", a.join(" ")))
                .unwrap_or_default()
        );
    }
    if cell.kernel_release.is_empty() {
        if let Some(v) = vm {
            cell.kernel_release = v.kernel_release_pinned.clone();
        }
    }
    cell
}

/// The context vm-run's image phase gives its error (src/run/mod.rs); a report whose rig error
/// starts with it failed while the image was being built.
pub const IMAGE_PHASE_CONTEXT: &str = "ensuring the guest image";

/// The NOT_RUN reason of a row whose image could not be built, from the builder's error: the
/// same words whether vm-matrix built the image itself or a vm-run elsewhere reported it.
pub fn not_built_reason(error: &str) -> String {
    let e = error
        .strip_prefix(IMAGE_PHASE_CONTEXT)
        .and_then(|e| e.strip_prefix(": "))
        .unwrap_or(error);
    format!("the image could not be built: {e}")
}

/// For a vm-run report whose image could not be built (a rig error, no image hashed, the image
/// phase the last one recorded): the NOT_RUN reason. A run that got as far as booting is a rig
/// failure instead.
fn image_not_built(r: &Report) -> Option<String> {
    let vm = r.vm.as_ref()?;
    let err = vm.rig_error.as_deref()?;
    let last_phase = vm.phases.last().map(|p| p.name.as_str());
    (vm.image_sha256.is_empty()
        && last_phase == Some("image")
        && err.starts_with(IMAGE_PHASE_CONTEXT))
    .then(|| not_built_reason(err))
}

/// The variants a row label carries (`bookworm+userns` -> `[userns]`).
fn label_variants(label: &str) -> Vec<String> {
    label.split('+').skip(1).map(str::to_string).collect()
}

/// A cell for an image that was not built, with the way to refresh it.
pub fn not_run_cell(image: &str, reason: &str, kernel_pinned: &str) -> Cell {
    let base = image.split('+').next().unwrap_or(image);
    Cell {
        image: image.to_string(),
        variants: label_variants(image),
        outcome: CellOutcome::NotRun,
        exit_code: None,
        problems: Vec::new(),
        report_dir: None,
        log: None,
        reason: reason.to_string(),
        fix: format!(
            "refresh its lock with `cargo xtask image --image {base} --update-lock` (review and \
             commit the new packages.lock), or build the locked versions from a dated snapshot: \
             `cargo xtask image --image {base} --mirror http://snapshot.debian.org/archive/debian/<YYYYMMDDTHHMMSSZ>`"
        ),
        kernel_release: kernel_pinned.to_string(),
        criu_version: String::new(),
        accelerator: String::new(),
        gates: all_not_run(),
        dump_seconds: None,
        restore_seconds: None,
        image_mb: None,
        expected: None,
        differences: Vec::new(),
        cause: String::new(),
        kernel_oops: String::new(),
        density: None,
        copy_pss_mib: None,
    }
}

/// How the matrix's runs were made, for matrix.json.
#[derive(Clone, Debug)]
pub struct RunInfo {
    pub started_at: String,
    pub jobs: usize,
    pub jobs_reason: String,
    pub command_line: Vec<String>,
}

/// The one way a matrix.json is written, by vm-matrix and by `matrix merge` alike: each plain
/// row's committed expectations applied (a variant row is judged by its own verdict), a row
/// that never booted given the kernel its lock pins, the exit code from the cells, the file
/// written into `dir`.
pub fn assemble(
    dir: &Path,
    mut cells: Vec<Cell>,
    images_dir: &dyn Fn(&str) -> PathBuf,
    info: RunInfo,
) -> Result<Matrix> {
    for c in &mut cells {
        expect(c, images_dir)?;
    }
    let m = Matrix {
        schema_version: MATRIX_SCHEMA_VERSION,
        started_at: info.started_at,
        finished_at: clock::now_rfc3339(),
        jobs: info.jobs,
        jobs_reason: info.jobs_reason,
        command_line: info.command_line,
        exit_code: exit_code(&cells),
        cells,
    };
    write_matrix(dir, &m)?;
    Ok(m)
}

/// A cell's committed expectations applied (a variant row is judged by its own verdict), and a
/// row that never booted given the kernel its lock pins.
pub fn expect(c: &mut Cell, images_dir: &dyn Fn(&str) -> PathBuf) -> Result<()> {
    let base = c.base_image().to_string();
    let idir = images_dir(&base);
    c.expected = if c.variants.is_empty() {
        load_expectations(&idir, &base)?
    } else {
        None
    };
    compare(c);
    if c.outcome == CellOutcome::NotRun && c.kernel_release.is_empty() {
        c.kernel_release = pinned_kernel(&idir, &base);
    }
    Ok(())
}

/// A new matrix directory, refused when it already holds something: two matrices never mix.
pub fn create_matrix_dir(dir: &Path) -> Result<()> {
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} already exists and is not empty: give a new directory",
            dir.display()
        );
    }
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the matrix directory {}", dir.display()))
}

/// The kernel release the image's lock pins, for a row that never booted.
fn pinned_kernel(images_dir: &Path, image: &str) -> String {
    let dir = images_dir.join(image);
    std::fs::read_to_string(dir.join(definition::LOCK_FILE))
        .ok()
        .and_then(|t| image::lock::Lock::parse(&t).ok())
        .map(|l| l.kernel_release)
        .unwrap_or_default()
}

/// A cell from the one verdict on a row's report: the gates as judged (a valid review
/// applied), where it ran, the CRIU figures, the verdict's exit code and what it found wrong,
/// a report of another row among it.
pub fn cell_from_outcome(label: &str, o: &Outcome) -> Cell {
    let mut judged = o.report.clone();
    judged.gates = o.gates.clone();
    let mut c = cell_from_report(label, &judged, o.exit_code);
    if c.outcome == CellOutcome::RigFailed {
        c.exit_code = Some(RIG_FAILURE_EXIT);
    }
    c.problems = o.found();
    c.problems.extend(row_problem(label, &o.report));
    c.copy_pss_mib = copy_pss_mib(o);
    c
}

/// The median PSS of the density gate's copies (MiB), read the way vm-compare's shared-OS
/// column reads them: only from a density gate that passed with the copies its run asked for,
/// in a report the verdict found nothing wrong with.
fn copy_pss_mib(o: &Outcome) -> Option<f64> {
    let requested = o.report.options.copies?;
    o.gates.iter().find(|g| g.name == GateName::Density)?;
    let col = crate::judge::compare::shared_os_column(o, requested);
    if !col.problems.is_empty() || col.per_copy.is_empty() {
        return None;
    }
    let pss: Vec<u64> = col.per_copy.iter().map(|m| m.pss_kib).collect();
    let kib = sharedos_report::model::density::median(&pss)?;
    Some((kib / 1024.0 * 10.0).round() / 10.0)
}

/// Why the report is not its row's, if it is not: a report copied into another row's
/// directory passes every check of its own, and only the row its vm-run recorded (the image,
/// the variants' arguments) tells it apart.
pub fn row_problem(label: &str, r: &Report) -> Option<String> {
    match variant::report_row(r) {
        Ok(row) if row.label() == label => None,
        Ok(row) => Some(format!(
            "its report is a run of row {}, not of {label}: a report of another row put in this \
             one's place",
            row.label()
        )),
        Err(e) => Some(format!("nothing ties its report to row {label}: {e:#}")),
    }
}

/// The cell of the report in the matrix directory's `<label>/`, judged by the one verdict
/// (every artifact re-hashed). `vm_run_exit` is vm-run's exit code when the matrix saw it end:
/// 2 makes the row a rig failure, and any other code the verdict does not give is a problem
/// (the report changed after vm-run judged it).
pub fn finished_cell(
    matrix: &ReportDir,
    label: &str,
    vm_run_exit: Option<i32>,
    ledger: Option<&Ledger>,
) -> Cell {
    let judged = matrix
        .open_beneath(label)
        .and_then(|d| verdict::judge_dir(d, &How::full(ledger)).map_err(|r| r.problem));
    match judged {
        Ok(o) => {
            let mut c = cell_from_outcome(label, &o);
            match vm_run_exit {
                Some(RIG_FAILURE_EXIT) if c.outcome == CellOutcome::Ran => {
                    c.outcome = CellOutcome::RigFailed;
                    c.exit_code = Some(RIG_FAILURE_EXIT);
                    c.reason = format!("vm-run exited {RIG_FAILURE_EXIT}; see {label}.log");
                }
                Some(code) if c.outcome == CellOutcome::Ran && Some(code) != c.exit_code => {
                    c.problems.push(format!(
                        "vm-run exited {code}, but its archived report judges exit {}",
                        c.exit_code.unwrap_or(RIG_FAILURE_EXIT)
                    ));
                }
                _ => {}
            }
            c
        }
        Err(e) => unreadable_cell(label, vm_run_exit, &e),
    }
}

/// A row whose report cannot be judged: the rig's failure, with its log to read.
pub fn unreadable_cell(label: &str, vm_run_exit: Option<i32>, why: &str) -> Cell {
    let said = vm_run_exit.map_or_else(String::new, |c| format!("vm-run exited {c} and "));
    let mut c = not_run_cell(
        label,
        &format!("{said}its report cannot be judged ({why}); see {label}.log"),
        "",
    );
    c.outcome = CellOutcome::RigFailed;
    c.exit_code = Some(vm_run_exit.unwrap_or(RIG_FAILURE_EXIT));
    c.log = Some(format!("{label}.log"));
    c.fix = format!("read {label}.log in the matrix directory");
    c
}

pub fn write_matrix(dir: &Path, m: &Matrix) -> Result<()> {
    let text = serde_json::to_string_pretty(m).context("serialising matrix.json")?;
    sharedos_report::digest::replace_in_report(dir, MATRIX_FILE, (text + "\n").as_bytes())
        .with_context(|| format!("writing {}", dir.join(MATRIX_FILE).display()))
}

#[cfg(test)]
pub(crate) mod tests;
