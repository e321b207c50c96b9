//! Thin front end for the project's tasks, following the cargo-xtask convention:
//! `cargo xtask image`, `cargo xtask vm-run`, `cargo xtask vm-exec`, `cargo xtask bench`,
//! `cargo xtask cache`. Everything real lives in the
//! sharedos-rig library; each subcommand that needs more than a call has its own module.

// A front end prints its results and its one error line itself (ARCHITECTURE.md).
#![allow(clippy::disallowed_macros)]

mod bench;
mod cache;
mod compare;
mod migrate;
mod peers;
mod test;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use sharedos_report::report::Workload;
use sharedos_report::signals;
use sharedos_rig::builder_vm::BuilderVm;
use sharedos_rig::gate_binary;
use sharedos_rig::image::{self, definition, BuildOptions};
use sharedos_rig::progress::Progress;
use sharedos_rig::run::{self, VmRunOptions};
use sharedos_rig::vm::AccelChoice;
use std::path::{Path, PathBuf};

#[derive(Parser)]
#[command(name = "xtask", about = "sharedos-rig tasks")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// How the guest boots: shared by vm-run, vm-exec and bench.
#[derive(clap::Args, Clone)]
struct BootArgs {
    #[command(flatten)]
    image: BuildOptions,
    /// auto: KVM only when /dev/kvm opens read-write and the kernel shows progress quickly.
    #[arg(long, value_enum, default_value = "auto")]
    accel: AccelChoice,
    /// Leave the VM running at the end (prints how to reach it); a signal still ends it.
    #[arg(long)]
    keep_vm: bool,
    /// Boot the image's kernel instead of resuming the image's snapshot (made on first use).
    #[arg(long)]
    cold: bool,
    /// Guest memory in MiB.
    #[arg(long, default_value_t = 1024)]
    memory: u64,
    /// Guest CPUs.
    #[arg(long, default_value_t = 2)]
    cpus: u32,
}

#[derive(clap::Args, Clone)]
struct VmArgs {
    #[command(flatten)]
    boot: BootArgs,
    /// Report directory [default: reports/<UTC time>-<id>].
    #[arg(long)]
    out: Option<PathBuf>,
    /// Use this static sharedos-gate instead of building it (for machines without cargo).
    #[arg(long)]
    gate_binary: Option<PathBuf>,
    /// Sign report.json with this OpenSSH private key (writes report.json.sig, which
    /// `sharedos-rig verify --allowed-signers` and `ssh-keygen -Y verify -n sharedos-rig` check).
    #[arg(long, value_name = "KEY")]
    sign_key: Option<PathBuf>,
    /// Bound on the whole gate phase, in seconds [default: 450 under KVM, 1800 under TCG].
    #[arg(long, value_name = "SECS")]
    gates_timeout: Option<u64>,
    /// Arguments passed on to `sharedos-gate diagnose` in the guest.
    #[arg(last = true)]
    diagnose_args: Vec<String>,
}

#[derive(clap::Args, Clone)]
struct MatrixArgs {
    /// Rows in order, comma-separated [default: every image under images/, base/ excepted]. A
    /// row is an image, optionally with variants that become the guest diagnose's arguments:
    /// `bookworm+userns+cgroup`, `trixie+cowroot+copies4` (userns, cgroup, cowroot, copies<N>,
    /// copiesmax, and every workload but xterm by its name: `bookworm-apps+office`). Only a
    /// plain image row is held against its expected-gates.
    #[arg(long)]
    images: Option<String>,
    /// The workload axis: each workload (comma list, or `all`) on each CRIU line Debian ships
    /// (criu 3.17.1 on bookworm, 4.1.1 on trixie, 4.2.1 on trixie-bpo-criu42), one row per
    /// workload and line on the smallest image of that line holding it, with `+copies2` for
    /// the density gate's memory per copy. A line with no such image is a NOT_RUN row naming
    /// the image to add. Not with --images.
    #[arg(long, value_name = "LIST")]
    workloads: Option<String>,
    /// Print the rows and exit: nothing is built or booted.
    #[arg(long)]
    plan: bool,
    /// vm-runs at once [default: host cores / --cpus, at least 1].
    #[arg(long)]
    jobs: Option<usize>,
    #[arg(long, value_enum, default_value = "auto")]
    accel: AccelChoice,
    /// Every row boots its image's kernel instead of resuming its snapshot.
    #[arg(long)]
    cold: bool,
    /// Guest memory in MiB, per guest.
    #[arg(long, default_value_t = 1024)]
    memory: u64,
    /// Guest CPUs, per guest.
    #[arg(long, default_value_t = sharedos_rig::matrix::DEFAULT_GUEST_CPUS)]
    cpus: u32,
    /// Use this static sharedos-gate instead of building it.
    #[arg(long)]
    gate_binary: Option<PathBuf>,
    /// Where images/ is (default: $SHAREDOS_RIG_IMAGES, ./images, then the source tree).
    #[arg(long)]
    images_dir: Option<PathBuf>,
    /// The image cache root.
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Fetch packages from this mirror instead of each definition's.
    #[arg(long)]
    mirror: Option<String>,
    /// Force the image builder's mode (default: unshare where user namespaces work, else
    /// fakechroot when the image's glibc is no newer than the host's, else guest: mmdebstrap
    /// runs as root in a QEMU guest booted from the bookworm image).
    #[arg(long, value_enum)]
    mode: Option<image::BuilderMode>,
    /// Where matrix-<UTC>/ goes.
    #[arg(long, default_value = "reports")]
    reports_root: PathBuf,
}

fn vm_matrix(a: MatrixArgs) -> Result<i32> {
    use sharedos_rig::matrix::{self, MatrixOptions};
    let mut build = with_builder(BuildOptions::new(image::DEFAULT_IMAGE), a.accel);
    build.images_dir = a.images_dir.map(|d| std::path::absolute(&d).unwrap_or(d));
    build.cache_dir = a.cache_dir;
    build.mirror = a.mirror;
    build.mode = a.mode;
    let mut opts = MatrixOptions {
        images: a
            .images
            .as_deref()
            .map(matrix::parse_images_arg)
            .unwrap_or_default(),
        workloads: a
            .workloads
            .as_deref()
            .map(matrix::workloads::parse_workloads)
            .transpose()?
            .unwrap_or_default(),
        jobs: a.jobs,
        build,
        reports_root: a.reports_root,
        vm_run: vec![
            std::env::current_exe()
                .map_err(|e| anyhow::anyhow!("finding this program to run vm-run with: {e}"))?
                .display()
                .to_string(),
            "vm-run".into(),
        ],
        extra_args: vec![
            "--accel".into(),
            a.accel.as_str().into(),
            "--memory".into(),
            a.memory.to_string(),
            "--cpus".into(),
            a.cpus.to_string(),
        ],
        guest_cpus: a.cpus,
        command_line: std::env::args().collect(),
    };
    // Every name is checked before the gate binary is built: a typo costs nothing.
    let rows = matrix::resolve_images(&opts)?;
    if a.plan {
        let plan = matrix::run::plan_lines(&opts)?;
        print!("{plan}");
        return Ok(0);
    }
    let gate = match a.gate_binary {
        Some(p) => p,
        None => gate_binary::build_gate_binary(&workspace())?,
    };
    let gate = std::path::absolute(&gate).unwrap_or(gate);
    // Every row's diagnose arguments, by the gate binary's own parser, before any row runs.
    for row in &rows {
        let args = row.diagnose_args();
        if !args.is_empty() {
            run::gates::check_args(&gate, &args)
                .with_context(|| format!("--images row {}", row.label()))?;
        }
    }
    opts.extra_args
        .extend(["--gate-binary".into(), gate.display().to_string()]);
    if a.cold {
        opts.extra_args.push("--cold".into());
    }
    Ok(matrix::vm_matrix(&opts))
}

#[derive(Subcommand)]
enum Command {
    /// Build (or find in the cache) the pinned guest image; prints the entry directory last.
    Image(BuildOptions),
    /// Boot the pinned image in QEMU, run the ten gates over SSH, archive the report.
    /// Exits 0/3/1 with the verdict, 2 when the rig itself failed.
    VmRun(VmArgs),
    /// Dump the tree in a guest of --from, bring the checkpoint home (bounded, hashed), send it
    /// into a guest of --to, and run the restore, X-state, isolation and reset gates there.
    /// Both guests' reports and migration.json (both kernels and CRIU versions) go under --out.
    VmMigrate(migrate::MigrateArgs),
    /// The shared-OS design against a VM each, in one sitting: N CRIU copies of the tree in one
    /// guest (the density gate), and N VMs resumed at once from one guest saved with the tree
    /// up, each held to the same state checks; memory per desktop read by the host for the VMs.
    /// Writes compare.json and both columns' reports under --out; exits 0/1, 2 for the rig.
    VmCompare(compare::CompareArgs),
    /// Boot the pinned image and run one command in it over the pinned SSH session; its output
    /// streams here, and its exit code is this command's (2 when the rig itself failed).
    /// Example: cargo xtask vm-exec -- 'criu check; uname -r'
    VmExec {
        #[command(flatten)]
        boot: BootArgs,
        /// Bound on the command, in seconds.
        #[arg(long, default_value_t = 600)]
        timeout: u64,
        /// Copy this static gate binary to /usr/local/bin/sharedos-gate first (checked by its
        /// sha256), as vm-run does.
        #[arg(long)]
        gate_binary: Option<PathBuf>,
        /// The command, run by the guest's shell (its words joined by spaces, as ssh does).
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Make the image's snapshot for these settings ahead of time: boot it, save it once it is
    /// ready, and resume it once to show it works. A snapshot already there is checked and
    /// resumed; a stale or damaged one is made again. vm-run and vm-exec then resume it.
    Snapshot {
        #[command(flatten)]
        boot: BootArgs,
    },
    /// vm-run for each image; archives reports/matrix-<UTC>/<image>/ and matrix.json, prints
    /// the matrix directory last. Exits 0 when every cell is as its images/<name>/expected-gates
    /// says (or, without one, passed), 1 when a cell differs or failed, 3 when only the GUI
    /// review is outstanding, 2 when the rig failed for a cell (an image that would not build
    /// included: its cell is NOT_RUN and the others still run).
    VmMatrix(MatrixArgs),
    /// The whole test suite (README's test command and .ci/run's): every test, ignored ones
    /// included, one at a time through cargo-nextest, then each test's wall time, slowest first,
    /// and the total; JUnit XML goes to target/nextest/ci/junit.xml. Exits as the suite did.
    Test(test::TestArgs),
    /// The image cache: `list` its items with size, age and whether anything current needs
    /// them; `prune` what nothing current refers to (never what a running rig holds).
    Cache {
        #[command(subcommand)]
        command: cache::CacheCommand,
    },
    /// Benchmark of the cached image no-op alone.
    BenchImage {
        #[command(flatten)]
        opts: BuildOptions,
        #[arg(long, default_value_t = 10)]
        iterations: usize,
    },
    /// Benchmarks: the cached image no-op, then the floor (the image's kernel booted bare to
    /// its no-root panic) and warm vm-runs in turn; medians, and each phase as a multiple of the
    /// floor.
    Bench {
        #[command(flatten)]
        vm: VmArgs,
        /// Warm vm-runs to time.
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Bare kernel boots to time [default: as many as --runs, at least 3].
        #[arg(long)]
        floor_runs: Option<usize>,
        /// Cached image no-ops to time.
        #[arg(long, default_value_t = 10)]
        image_runs: usize,
        /// Also time virtme-ng (`vng --run KERNEL -- true`) on the image's kernel, each
        /// warm run, after setting it up under <cache root>/peers/ (a venv from PyPI, virtiofsd
        /// built by cargo): the summary says why when it cannot run here.
        #[arg(long)]
        peers: bool,
    },
}

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// The image options of a command that may build an image: guest mode gets the builder VM,
/// under the accelerator the command was asked for.
fn with_builder(mut image: BuildOptions, accel: AccelChoice) -> BuildOptions {
    image.guest_builder = Some(BuilderVm::shared(accel));
    image
}

fn boot_options(b: BootArgs) -> VmRunOptions {
    VmRunOptions {
        plan: b.image.plan,
        image: with_builder(b.image, b.accel),
        accel: b.accel,
        out: None,
        reports_root: PathBuf::from("reports"),
        keep_vm: b.keep_vm,
        cold: b.cold,
        memory_mib: b.memory,
        cpus: b.cpus,
        gate_binary: PathBuf::new(),
        diagnose_args: Vec::new(),
        sign_key: None,
        gates_timeout: None,
        command_line: std::env::args().collect(),
        upload: Vec::new(),
    }
}

fn vm_options(a: VmArgs) -> Result<VmRunOptions> {
    // Before the gate binary's build: a typo, or an image without the workload, costs nothing.
    image::require_image_for(&a.boot.image, &a.diagnose_args)?;
    let gate_binary = match a.gate_binary {
        Some(p) => p,
        None if a.boot.image.plan => gate_binary::default_gate_binary(&workspace()),
        None => gate_binary::build_gate_binary(&workspace())?,
    };
    Ok(VmRunOptions {
        out: a.out,
        gate_binary,
        diagnose_args: a.diagnose_args,
        sign_key: a.sign_key,
        gates_timeout: a.gates_timeout.map(std::time::Duration::from_secs),
        ..boot_options(a.boot)
    })
}

fn main() {
    let matches = <Cli as clap::CommandFactory>::command().get_matches();
    let image_given = matches.subcommand().is_some_and(|(_, m)| given(m, "image"));
    let cli = match <Cli as clap::FromArgMatches>::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => e.exit(),
    };
    let code = match run_cli(cli, image_given) {
        Ok(code) => code,
        Err(e) => {
            let e = signals::naming_interrupt(e);
            eprint!("{}", sharedos_rig::escape::error_chain(&e));
            run::RIG_FAILURE_EXIT
        }
    };
    std::process::exit(code);
}

/// Whether the argument `id` was on the command line (not its default).
fn given(m: &clap::ArgMatches, id: &str) -> bool {
    m.ids().any(|i| i.as_str() == id)
        && m.value_source(id) != Some(clap::parser::ValueSource::DefaultValue)
}

/// With no `--image`, the image that has the workload asked for: the default image unless the
/// workload needs another, which is then named.
fn choose_image(opts: &mut BuildOptions, workload: Option<Workload>) -> Result<()> {
    let dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
    let chosen = image::workload::choose(&dir, workload)?;
    if chosen != opts.image {
        if let Some(w) = workload {
            Progress::new("vm-run").note(&format!(
                "image {chosen}: it has the {w} workload (no --image was given)"
            ));
        }
        opts.image = chosen;
    }
    Ok(())
}

fn run_cli(cli: Cli, image_given: bool) -> Result<i32> {
    match cli.command {
        Command::Image(opts) => {
            // A guest-mode build waits on a VM for minutes: Ctrl-C must end it, and its VM.
            signals::install().context("installing signal handlers")?;
            for line in image::cli_main_image(&with_builder(opts, AccelChoice::Auto))? {
                println!("{line}");
            }
            Ok(0)
        }
        Command::VmRun(mut a) => {
            if !image_given {
                let w = image::workload::in_args(&a.diagnose_args);
                choose_image(&mut a.boot.image, w)?;
            }
            Ok(run::vm_run(&vm_options(a)?))
        }
        Command::VmMigrate(a) => migrate::vm_migrate(a),
        Command::VmCompare(mut a) => {
            if !image_given {
                let w = a.workload.as_deref().and_then(Workload::parse);
                choose_image(&mut a.vm.boot.image, w)?;
            }
            compare::vm_compare(a)
        }
        Command::VmExec {
            boot,
            timeout,
            gate_binary,
            command,
        } => {
            image::require_image(&boot.image)?;
            Ok(run::vm_exec(
                &VmRunOptions {
                    gate_binary: gate_binary.unwrap_or_default(),
                    ..boot_options(boot)
                },
                &command,
                std::time::Duration::from_secs(timeout),
            ))
        }
        Command::Snapshot { boot } => {
            if boot.cold {
                anyhow::bail!(
                    "snapshot makes and resumes a snapshot, so --cold has no meaning here\nfix: drop --cold"
                );
            }
            image::require_image(&boot.image)?;
            Ok(run::vm_exec(
                &boot_options(boot),
                &["true".to_string()],
                std::time::Duration::from_secs(60),
            ))
        }
        Command::VmMatrix(a) => vm_matrix(a),
        Command::Test(a) => test::run(a, &workspace()),
        Command::Cache { command } => cache::cache(command),
        Command::BenchImage { opts, iterations } => {
            let opts = with_builder(opts, AccelChoice::Auto);
            print!("{}", bench::bench_image(&opts, iterations.max(1))?);
            Ok(0)
        }
        Command::Bench {
            vm,
            runs,
            floor_runs,
            image_runs,
            peers,
        } => {
            let runs = runs.max(1);
            let counts = bench::Counts {
                image_runs: image_runs.max(1),
                runs,
                floor_runs: floor_runs.unwrap_or(runs.max(3)).max(1),
            };
            print!("{}", bench::bench(&vm_options(vm)?, counts, peers)?);
            Ok(0)
        }
    }
}
