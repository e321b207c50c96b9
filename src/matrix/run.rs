//! `cargo xtask vm-matrix`: the rows resolved, every image built or found first (one at a
//! time), then one child vm-run per row, `--jobs` at a time, each row judged by the one verdict
//! on what it archived, and matrix.json assembled. Each stage is a function of its own:
//! [`plan`], [`build_images`], [`run_rows`] (with [`start_more`], [`forward_interrupt`] and
//! [`reap`]) and [`finish`].

use super::{
    assemble, create_matrix_dir, default_jobs, finished_cell, not_built_reason, not_run_cell, Cell,
    CellOutcome, Row, RunInfo,
};
use crate::cmd::Cmd;
use crate::escape;
use crate::image::{self, definition, BuildOptions};
use crate::judge::ledger::Ledger;
use crate::judge::reader::ReportDir;
use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use sharedos_report::report::{Workload, RIG_FAILURE_EXIT};
use sharedos_report::{clock, signals};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

/// What `cargo xtask vm-matrix` was asked for.
#[derive(Debug, Clone)]
pub struct MatrixOptions {
    /// Rows in order (`image` or `image+variant+...`); empty for every image under images/.
    pub images: Vec<String>,
    /// The workload axis (`--workloads`): each workload on each CRIU line
    /// ([`super::workloads`]); empty for none. Not with `images`.
    pub workloads: Vec<Workload>,
    /// None: [`default_jobs`].
    pub jobs: Option<usize>,
    /// The build options every image shares (`image` is replaced per cell).
    pub build: BuildOptions,
    /// Where `matrix-<UTC>/` goes.
    pub reports_root: PathBuf,
    /// The program and leading arguments that run one vm-run (e.g. `[xtask, "vm-run"]`); the
    /// matrix appends `--image`, `--out`, the shared image options and `extra_args`.
    pub vm_run: Vec<String>,
    /// Options every vm-run gets (`--accel`, `--gate-binary`, ...).
    pub extra_args: Vec<String>,
    pub guest_cpus: u32,
    pub command_line: Vec<String>,
}

impl MatrixOptions {
    fn images_dir(&self, image: &str) -> PathBuf {
        definition::find_images_dir(self.build.images_dir.as_deref(), image)
    }
}

/// Why a row will not run, decided before anything is built: its reason and its fix.
pub type Gap = Option<(String, String)>;

/// The rows to run: the ones asked for, each image and variant checked, or every image there is.
pub fn resolve_images(opts: &MatrixOptions) -> Result<Vec<Row>> {
    Ok(resolve_rows(opts)?.into_iter().map(|(r, _)| r).collect())
}

/// The rows, each with its gap: the workload axis's (a line without an image holding its
/// workload is a NOT_RUN row), or the `--images` rows and every image's, which have none.
pub fn resolve_rows(opts: &MatrixOptions) -> Result<Vec<(Row, Gap)>> {
    if !opts.workloads.is_empty() {
        if !opts.images.is_empty() {
            bail!(
                "--workloads and --images both name the rows; nothing was built or booted\nfix: \
                 give --workloads alone (each workload on each CRIU line), or --images with \
                 workload variants (`bookworm-apps+office`)"
            );
        }
        let dir = opts.images_dir(image::DEFAULT_IMAGE);
        return Ok(super::workloads::resolve(&dir, &opts.workloads)?
            .into_iter()
            .map(|a| (a.row, a.missing))
            .collect());
    }
    Ok(resolve_plain(opts)?
        .into_iter()
        .map(|r| (r, None))
        .collect())
}

fn resolve_plain(opts: &MatrixOptions) -> Result<Vec<Row>> {
    if opts.images.is_empty() {
        let dir = opts.images_dir(image::DEFAULT_IMAGE);
        let all = definition::list_images(&dir);
        if all.is_empty() {
            bail!(
                "no image under {}: run from a checkout, or pass --images-dir",
                dir.display()
            );
        }
        return Ok(all.iter().map(|n| Row::plain(n)).collect());
    }
    let mut out: Vec<Row> = Vec::new();
    for label in &opts.images {
        let row = Row::parse(label)?;
        let dir = opts.images_dir(&row.image);
        definition::require_image(&dir, &row.image)?;
        // A workload variant on an image without its programs: refused before any row runs.
        if let Some(w) = image::workload::in_args(&row.diagnose_args()) {
            image::workload::require(&dir, &row.image, w, image::workload::Named::Row)
                .with_context(|| format!("--images row {}", row.label()))?;
        }
        if out.iter().any(|r| r.label() == row.label()) {
            bail!("--images names {} twice", row.label());
        }
        out.push(row);
    }
    Ok(out)
}

/// What `vm-matrix --plan` prints: one line per row, its label, the criu its image's lock
/// installs, and for a row that will not run, why and the fix. Nothing is built or created.
pub fn plan_lines(opts: &MatrixOptions) -> Result<String> {
    let mut out = String::new();
    for (row, gap) in resolve_rows(opts)? {
        let dir = opts.images_dir(&row.image);
        let label = row.label();
        match gap {
            None => {
                let criu =
                    super::workloads::image_criu(&dir, &row.image).unwrap_or_else(|| "?".into());
                let args = row.diagnose_args();
                let diagnose = if args.is_empty() {
                    String::new()
                } else {
                    format!(", diagnose {}", args.join(" "))
                };
                out.push_str(&format!(
                    "{label}: image {} (criu {criu}){diagnose}\n",
                    row.image
                ));
            }
            Some((reason, fix)) => {
                out.push_str(&format!("{label}: NOT_RUN: {reason}\n  fix: {fix}\n"));
            }
        }
    }
    Ok(out)
}

/// Splits `a,b,c` into names.
pub fn parse_images_arg(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .map(str::to_string)
        .collect()
}

/// The vm-run command of one cell; a variant row's diagnose arguments go last, after `--`.
pub fn vm_run_cmd(opts: &MatrixOptions, row: &Row, out: &Path) -> Cmd {
    let mut a = opts.vm_run.clone();
    a.extend(["--image".into(), row.image.clone()]);
    let b = &opts.build;
    if let Some(d) = &b.images_dir {
        a.extend(["--images-dir".into(), d.display().to_string()]);
    }
    if let Some(d) = &b.cache_dir {
        a.extend(["--cache-dir".into(), d.display().to_string()]);
    }
    if let Some(m) = &b.mirror {
        a.extend(["--mirror".into(), m.clone()]);
    }
    if let Some(m) = b.mode {
        a.extend(["--mode".into(), m.as_str().into()]);
    }
    a.extend(opts.extra_args.iter().cloned());
    a.extend(["--out".into(), out.display().to_string()]);
    let diagnose = row.diagnose_args();
    if !diagnose.is_empty() {
        a.push("--".into());
        a.extend(diagnose);
    }
    Cmd::new(a)
}

/// Every line the matrix tells the person waiting goes through this one progress.
fn progress() -> Progress {
    Progress::new("vm-matrix")
}

/// A row's vm-run, running.
pub struct Running {
    pub index: usize,
    pub child: Child,
    pub started: Instant,
}

/// Runs the matrix; returns its exit code. Prints the matrix directory on the last line of
/// stdout whenever one was created.
pub fn vm_matrix(opts: &MatrixOptions) -> i32 {
    vm_matrix_with(opts, &|b: &BuildOptions| {
        image::ensure_image(b).map(|entry| {
            format!(
                "kernel {}, {}",
                entry.manifest.kernel_release,
                if entry.built { "built" } else { "cached" }
            )
        })
    })
}

/// [`vm_matrix`] with the image step given: it builds or finds one image, and says what it got.
pub fn vm_matrix_with(
    opts: &MatrixOptions,
    build: &dyn Fn(&BuildOptions) -> Result<String>,
) -> i32 {
    match run(opts, build) {
        Ok((dir, code)) => {
            progress().result(&dir.display().to_string());
            code
        }
        Err(e) => {
            progress().error(&e);
            RIG_FAILURE_EXIT
        }
    }
}

/// What the matrix will do, decided before anything runs: its rows, how many at a time, and
/// the new directory it writes into.
#[derive(Debug, Clone)]
pub struct Plan {
    pub rows: Vec<Row>,
    /// Per row: why it will not run, when that is known before anything is built.
    pub gaps: Vec<Gap>,
    pub labels: Vec<String>,
    pub jobs: usize,
    pub jobs_reason: String,
    pub dir: PathBuf,
    pub started_at: String,
}

pub(crate) fn run(
    opts: &MatrixOptions,
    build: &dyn Fn(&BuildOptions) -> Result<String>,
) -> Result<(PathBuf, i32)> {
    signals::install().context("installing signal handlers")?;
    let plan = plan(opts)?;
    let (mut cells, to_run) = build_images(opts, &plan, build);
    let ledger = Ledger::from_env();
    run_rows(opts, &plan, to_run, &mut cells, ledger.as_ref())?;
    finish(opts, &plan, cells)
}

/// How many vm-runs at once: `--jobs`, else [`default_jobs`].
pub fn choose_jobs(asked: Option<usize>, host_cores: usize, guest_cpus: u32) -> (usize, String) {
    match asked {
        Some(j) => (j.max(1), "chosen with --jobs".to_string()),
        None => default_jobs(host_cores, guest_cpus),
    }
}

/// The rows, the jobs and a new `matrix-<UTC>/` under the reports root; nothing is created for
/// rows that do not resolve.
pub fn plan(opts: &MatrixOptions) -> Result<Plan> {
    let (rows, gaps): (Vec<Row>, Vec<Gap>) = resolve_rows(opts)?.into_iter().unzip();
    let labels: Vec<String> = rows.iter().map(Row::label).collect();
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let (jobs, jobs_reason) = choose_jobs(opts.jobs, cores, opts.guest_cpus);
    let started_at = clock::now_rfc3339();
    let dir = opts
        .reports_root
        .join(format!("matrix-{}", clock::compact_utc_now()));
    if dir.exists() {
        bail!(
            "{} already exists: start the matrix again in a second",
            dir.display()
        );
    }
    create_matrix_dir(&dir).with_context(|| {
        format!(
            "is {} writable? (pass --reports-root)",
            opts.reports_root.display()
        )
    })?;
    progress().note(&format!(
        "{} row(s): {}; {jobs} at a time ({jobs_reason}); into {}",
        rows.len(),
        labels.join(", "),
        dir.display()
    ));
    Ok(Plan {
        rows,
        gaps,
        labels,
        jobs,
        jobs_reason,
        dir,
        started_at,
    })
}

/// Builds or finds every image once, one at a time however many rows share it (they share the
/// network, the package index and the cores). A row whose image would not build is a NOT_RUN
/// cell already; the indices of the others are returned, to run in order.
pub fn build_images(
    opts: &MatrixOptions,
    plan: &Plan,
    build: &dyn Fn(&BuildOptions) -> Result<String>,
) -> (Vec<Option<Cell>>, Vec<usize>) {
    let mut cells: Vec<Option<Cell>> = vec![None; plan.rows.len()];
    let mut built: BTreeMap<String, Option<String>> = BTreeMap::new();
    let mut to_run = Vec::new();
    for (i, row) in plan.rows.iter().enumerate() {
        let label = &plan.labels[i];
        if signals::interrupted().is_some() {
            cells[i] = Some(not_run_cell(label, "the matrix was interrupted", ""));
            continue;
        }
        if let Some(Some((reason, fix))) = plan.gaps.get(i) {
            progress().note(&format!("{label}: NOT_RUN: {}", escape::line(reason)));
            let mut c = not_run_cell(label, reason, "");
            c.fix = fix.clone();
            cells[i] = Some(c);
            continue;
        }
        let failure = built
            .entry(row.image.clone())
            .or_insert_with(|| build_one(opts, &row.image, build))
            .clone();
        match failure {
            None => to_run.push(i),
            Some(reason) => {
                progress().note(&format!("{label}: NOT_RUN: {}", escape::line(&reason)));
                cells[i] = Some(not_run_cell(label, &reason, ""));
            }
        }
    }
    (cells, to_run)
}

/// One image built or found: None, or why it could not be built.
fn build_one(
    opts: &MatrixOptions,
    image: &str,
    build: &dyn Fn(&BuildOptions) -> Result<String>,
) -> Option<String> {
    let mut b = opts.build.clone();
    b.image = image.to_string();
    b.plan = false;
    b.update_lock = false;
    progress().note(&format!("image {image} ..."));
    match build(&b) {
        Ok(what) => {
            progress().note(&format!("image {image}: {what}"));
            None
        }
        Err(e) => Some(not_built_reason(&format!("{e:#}"))),
    }
}

/// The rows' vm-runs, `plan.jobs` at a time, each cell judged as its vm-run ends.
pub fn run_rows(
    opts: &MatrixOptions,
    plan: &Plan,
    to_run: Vec<usize>,
    cells: &mut [Option<Cell>],
    ledger: Option<&Ledger>,
) -> Result<()> {
    let matrix = ReportDir::open(&plan.dir).map_err(anyhow::Error::msg)?;
    let mut queue = to_run.into_iter();
    let mut running: Vec<Running> = Vec::new();
    let mut forwarded = false;
    loop {
        start_more(opts, plan, &mut queue, &mut running, cells);
        if running.is_empty() {
            return Ok(());
        }
        if !forwarded {
            forwarded = forward_interrupt(&running);
        }
        running = reap(plan, &matrix, running, cells, ledger);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Starts vm-runs until `plan.jobs` are running or the queue is empty (none after an
/// interrupt); a vm-run that will not start is a rig-failed cell.
pub fn start_more(
    opts: &MatrixOptions,
    plan: &Plan,
    queue: &mut impl Iterator<Item = usize>,
    running: &mut Vec<Running>,
    cells: &mut [Option<Cell>],
) {
    while running.len() < plan.jobs && signals::interrupted().is_none() {
        let Some(i) = queue.next() else { return };
        match spawn_cell(opts, &plan.dir, &plan.rows[i]) {
            Ok(child) => running.push(Running {
                index: i,
                child,
                started: Instant::now(),
            }),
            Err(e) => {
                let mut c = not_run_cell(&plan.labels[i], &format!("{e:#}"), "");
                c.outcome = CellOutcome::RigFailed;
                c.fix = "see the error: the rig could not start vm-run".into();
                cells[i] = Some(c);
            }
        }
    }
}

/// After an interrupt, passes SIGTERM on to the running vm-runs. Ctrl-C at a terminal reaches
/// the children too; a SIGTERM sent to the matrix alone is passed on, so that every vm-run
/// archives what it has and ends its QEMU. True once forwarded.
pub fn forward_interrupt(running: &[Running]) -> bool {
    let Some(sig) = signals::interrupted() else {
        return false;
    };
    for r in running {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(r.child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
    }
    progress().note(&format!(
        "interrupted by {sig}: waiting for the running vm-runs to end"
    ));
    true
}

/// The vm-runs that ended, each judged into its cell; the ones still running, returned.
pub fn reap(
    plan: &Plan,
    matrix: &ReportDir,
    running: Vec<Running>,
    cells: &mut [Option<Cell>],
    ledger: Option<&Ledger>,
) -> Vec<Running> {
    let mut still = Vec::new();
    for mut r in running {
        let name = &plan.labels[r.index];
        match r.child.try_wait() {
            Ok(Some(status)) => {
                let code = status.code().unwrap_or(RIG_FAILURE_EXIT);
                let cell = finished_cell(matrix, name, Some(code), ledger);
                progress().note(&format!(
                    "{name}: vm-run exit {code} after {:.0} s: {}",
                    r.started.elapsed().as_secs_f64(),
                    gates_line(&cell)
                ));
                cells[r.index] = Some(cell);
            }
            Ok(None) => still.push(r),
            Err(e) => {
                let mut c = not_run_cell(name, &format!("waiting for vm-run: {e}"), "");
                c.outcome = CellOutcome::RigFailed;
                cells[r.index] = Some(c);
            }
        }
    }
    still
}

/// matrix.json from the cells (a row that never got one was interrupted), the table on
/// stderr, and the matrix's exit code.
pub fn finish(
    opts: &MatrixOptions,
    plan: &Plan,
    cells: Vec<Option<Cell>>,
) -> Result<(PathBuf, i32)> {
    let cells: Vec<Cell> = cells
        .into_iter()
        .zip(&plan.labels)
        .map(|(c, name)| c.unwrap_or_else(|| not_run_cell(name, "the matrix was interrupted", "")))
        .collect();
    let m = assemble(
        &plan.dir,
        cells,
        &|image| opts.images_dir(image),
        RunInfo {
            started_at: plan.started_at.clone(),
            jobs: plan.jobs,
            jobs_reason: plan.jobs_reason.clone(),
            command_line: opts.command_line.clone(),
        },
    )?;
    progress().block(&super::render::text(&m));
    Ok((plan.dir.clone(), m.exit_code))
}

fn gates_line(c: &Cell) -> String {
    let mut parts: Vec<String> = c
        .gates
        .iter()
        .map(|g| format!("{} {}", g.name, g.status))
        .collect();
    if !c.problems.is_empty() {
        parts.push(format!("{} problem(s) in its report", c.problems.len()));
    }
    parts.join(", ")
}

fn spawn_cell(opts: &MatrixOptions, dir: &Path, row: &Row) -> Result<Child> {
    let label = row.label();
    let out = dir.join(&label);
    let vm_run = vm_run_cmd(opts, row, &out);
    let log_path = dir.join(format!("{label}.log"));
    let log = std::fs::File::create(&log_path)
        .with_context(|| format!("creating {}", log_path.display()))?;
    let err = log.try_clone().context("duplicating the log handle")?;
    progress().note(&format!(
        "{label}: {} (log: {})",
        vm_run.display(),
        log_path.display()
    ));
    let mut cmd = vm_run.command();
    cmd.stdout(log).stderr(err);
    // SAFETY: prctl is async-signal-safe. A matrix that dies, even by SIGKILL, ends its
    // vm-runs with SIGTERM, which they turn into an archived partial report and a stopped QEMU.
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                .map_err(std::io::Error::from)
        });
    }
    cmd.spawn()
        .with_context(|| format!("starting {}", vm_run.display()))
}
