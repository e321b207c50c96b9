//! `vm-compare`: one desktop workload run two ways in one sitting, on one accelerator, each
//! column held to the same state checks, side by side in `compare.json`:
//!
//! - **shared-OS** (`shared-os/`): a vm-run with `--copies N`, whose density gate restores N
//!   CRIU copies of one dump in one guest and measures each;
//! - **VM each** (`vm-each-fork/`, `copy-1/` ... `copy-N/`, `reset/`): a guest whose run stops
//!   after its live probe, with the tree up, and is saved there over QMP (the fork); N QEMUs
//!   resumed from that save at once, each a copy whose run goes on and checks the tree against
//!   its fork-time state; their memory read by the host from each QEMU's smaps_rollup with
//!   every copy up; then a copy put back to the save (a fresh QEMU resumed from it), timed and
//!   checked as well.
//!
//! Each copy's report is archived and judged like any vm-run's; the comparison's verdict
//! (`judge::compare`) counts a column only when every copy of it held its state.

pub mod fork;
pub mod ksm;

use crate::image;
use crate::judge::compare::{self as cmp, Arm, Reading, SharedOs, Summary, VmCopy, VmEach};
use crate::judge::verdict::{self, How};
use crate::progress::Progress;
use crate::run::{self, gates, Observed, VmRunOptions, RIG_FAILURE_EXIT};
use crate::vm::{self, Fork, GuestMedia, Session, SessionSpec};
use anyhow::{bail, Context, Result};
use sharedos_report::model::density::{Mem, MAX_COPIES};
use sharedos_report::procfs::QemuMem;
use sharedos_report::report::{CgroupLimits, Status, CPU_PERIOD_US};
use sharedos_report::{clock, digest, procfs, wait};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Everything but the report directory and the diagnose arguments, as for vm-run.
    pub base: VmRunOptions,
    pub copies: u32,
    pub ksm: ksm::Want,
    /// Each CRIU copy's cgroup limits, and each VM's memory and CPUs made to match them.
    pub cgroup: Option<CgroupLimits>,
    /// What the tree runs in both columns (`--workload`); None: the gate binary's default.
    pub workload: Option<String>,
    /// A fault to put into the VM-each column; the shared-OS column is then not run.
    pub lies: Vec<Lie>,
    /// The arms to run (`--arms`), each once, in `Arm`'s order.
    pub arms: Vec<Arm>,
}

/// The memory (MiB) and CPUs a VM gets to match a copy's cgroup, as near as QEMU allows: whole
/// MiB and whole CPUs, rounded up.
pub fn vm_resources(l: &CgroupLimits) -> (u64, u32) {
    let mib = l.memory_max_bytes.div_ceil(1 << 20);
    let cpus = l.cpu_quota_us.div_ceil(CPU_PERIOD_US).max(1);
    (mib, u32::try_from(cpus).unwrap_or(u32::MAX))
}

/// The options of the VM-each column's guests: a copy's cgroup's resources, when given.
fn vm_base(opts: &CompareOptions) -> VmRunOptions {
    let mut b = opts.base.clone();
    if let Some(l) = &opts.cgroup {
        (b.memory_mib, b.cpus) = vm_resources(l);
    }
    b
}

/// The arms asked for, each once, in `Arm`'s order; none asked: all of them.
pub fn arms(asked: &[Arm]) -> Vec<Arm> {
    let mut v: Vec<Arm> = if asked.is_empty() {
        Arm::ALL.to_vec()
    } else {
        asked.to_vec()
    };
    v.sort();
    v.dedup();
    v
}

fn progress() -> Progress {
    Progress::new("vm-compare")
}

/// Runs the comparison; returns its exit code (0 PASS, 1 FAIL, 2 the rig failed).
pub fn vm_compare(opts: &CompareOptions) -> i32 {
    match compare(opts) {
        Ok(code) => code,
        Err(e) => {
            progress().error(&e);
            RIG_FAILURE_EXIT
        }
    }
}

/// What each QEMU costs the host beyond the guest's memory: its own code, TCG's translation
/// cache, device state. Measured here at 100-250 MiB for an idle guest; the check is only to
/// refuse an N that cannot fit before anything boots.
const QEMU_OVERHEAD_MIB: u64 = 256;

/// Refuses, before anything boots, a number of copies the density gate would refuse or the
/// host's memory cannot hold as VMs.
pub fn check_copies(copies: u32, memory_mib: u64, host_available_kib: u64) -> Result<()> {
    if !(1..=MAX_COPIES).contains(&copies) {
        bail!("--copies {copies}: give 1 to {MAX_COPIES}");
    }
    let need_mib = u64::from(copies).saturating_mul(memory_mib.saturating_add(QEMU_OVERHEAD_MIB));
    let have_mib = host_available_kib / 1024;
    if need_mib > have_mib {
        bail!(
            "--copies {copies} needs {copies} VMs of {memory_mib} MiB at once, about {need_mib} MiB with QEMU's own, \
             and this host has {have_mib} MiB available; nothing was booted\n\
             fix: give fewer --copies, or less --memory"
        );
    }
    Ok(())
}

/// [`check_copies`] against this host's MemAvailable now.
pub fn check_copies_here(copies: u32, memory_mib: u64) -> Result<()> {
    let (_, available) = procfs::parse_meminfo(&procfs::read_proc("/proc/meminfo")?)?;
    check_copies(copies, memory_mib, available)
}

fn compare(opts: &CompareOptions) -> Result<i32> {
    sharedos_report::signals::install().context("installing signal handlers")?;
    image::require_image(&opts.base.image)?;
    let vm_opts = vm_base(opts);
    check_copies_here(opts.copies, vm_opts.memory_mib)?;
    ksm::check(opts.ksm, Path::new(ksm::SYSFS))?;
    crate::gate_binary::require(&opts.base.gate_binary)?;
    if let Some(why) = run::boot::why_no_resume(&vm_opts)? {
        bail!(
            "--image {}: the VM-each column is made of copies of a guest resumed from the image's \
             snapshot, and {why}; nothing was booted\n\
             fix: give a --cache-dir this user can write, or have the cache's owner make the \
             snapshot once with the same --memory, --cpus and --accel (`cargo xtask vm-exec \
             --image {} -- true`)",
            opts.base.image.image,
            opts.base.image.image
        );
    }
    let out = create_out(opts)?;
    let n = opts.copies;

    let (shared_os, mut rig_failed, mut accel) = if opts.lies.is_empty() {
        shared_os_column(opts, &out)
    } else {
        (
            SharedOs {
                report: "shared-os".into(),
                problems: vec![
                    "not run: a lie run (--lie) tests the VM-each column's checks".into(),
                ],
                ..SharedOs::default()
            },
            false,
            String::new(),
        )
    };

    progress().note(&format!(
        "VM-each column: one guest saved with its tree up, resumed {n} times at once"
    ));
    progress().note(
        "each copy's own report is FAIL by design (CRIU's gates do not run in a VM copy); the comparison's verdict comes last",
    );
    let mut vm_each = VmEach {
        fork: FORK_DIR.into(),
        memory_mib: vm_opts.memory_mib,
        cpus: vm_opts.cpus,
        resources: match &opts.cgroup {
            Some(l) => format!(
                "matched to a copy's cgroup ({l}) as near as QEMU allows: whole MiB and whole CPUs, rounded up; a VM's memory holds its own kernel as well, a cgroup's does not"
            ),
            None => "--memory and --cpus, not matched to the CRIU copies, which share their guest's (give --cgroup to match them)".into(),
        },
        memory_source: "the host's /proc/PID/smaps_rollup of each copy's QEMU process (a host figure, not the guest's word; under TCG it includes QEMU's translation cache), read with every copy up and its tree idle".into(),
        ..VmEach::default()
    };
    // An interrupt ends the comparison here: the second column is not started for nothing.
    let ran = match sharedos_report::signals::interrupted() {
        Some(sig) => Err(anyhow::anyhow!("interrupted by {sig}: not started")),
        None => vm_each_column(opts, &vm_opts, &out, &mut vm_each, &mut accel),
    };
    if let Err(e) = ran {
        rig_failed = true;
        vm_each.problems.push(format!(
            "the column could not be run (rig): {}",
            crate::escape::error_chain(&e)
        ));
    }
    let mut s = Summary {
        format: cmp::FORMAT,
        image: opts.base.image.image.clone(),
        accel,
        copies: n,
        workload: opts.workload.clone(),
        arms: opts.arms.clone(),
        shared_os,
        vm_each,
        vm_template: None,
        verdict: sharedos_report::report::Verdict::Fail,
        problems: Vec::new(),
    };
    cmp::judge(&mut s);
    let text = serde_json::to_string_pretty(&s)? + "\n";
    digest::replace_in_report(&out, cmp::COMPARE_FILE, text.as_bytes())?;
    progress().block(&crate::render::compare::text(&s));
    progress().result(&out.display().to_string());
    Ok(if rig_failed {
        RIG_FAILURE_EXIT
    } else {
        s.verdict.exit_code()
    })
}

/// The shared-OS column: a vm-run with `--copies N` into `shared-os/`, judged. Returns the
/// column, whether the rig failed, and the accelerator it ran under.
fn shared_os_column(opts: &CompareOptions, out: &Path) -> (SharedOs, bool, String) {
    let n = opts.copies;
    progress().note(&format!(
        "shared-OS column: one guest, {n} CRIU copies of one dump (vm-run -- --copies {n})"
    ));
    let so_dir = out.join("shared-os");
    let mut so = opts.base.clone();
    so.out = Some(so_dir.clone());
    so.diagnose_args = vec!["--copies".into(), n.to_string()];
    so.diagnose_args
        .extend(workload_args(opts.workload.as_deref()));
    if let Some(l) = &opts.cgroup {
        so.diagnose_args
            .extend(["--cgroup".to_string(), l.to_string()]);
    }
    so.keep_vm = false;
    let code = run::vm_run(&so);
    let rig_failed = code == RIG_FAILURE_EXIT;
    let mut accel = String::new();
    let shared_os = match verdict::judge(&so_dir, &How::full(None)) {
        Ok(o) => {
            if let Some(vm) = &o.report.vm {
                accel = vm.accel.clone();
            }
            cmp::shared_os_column(&o, n)
        }
        Err(e) => SharedOs {
            problems: vec![format!("its report does not read back: {e}")],
            ..SharedOs::default()
        },
    };
    let shared_os = SharedOs {
        report: "shared-os".into(),
        resources: match &opts.cgroup {
            Some(l) => format!(
                "own cgroup ({l}) in a {} MiB, {}-CPU guest",
                opts.base.memory_mib, opts.base.cpus
            ),
            None => shared_os.resources,
        },
        ..shared_os
    };

    (shared_os, rig_failed, accel)
}

/// The diagnose arguments that choose the workload: the same in both columns.
fn workload_args(workload: Option<&str>) -> Vec<String> {
    workload
        .map(|w| vec!["--workload".to_string(), w.to_string()])
        .unwrap_or_default()
}

/// The saved guest's console and QEMU log, under the comparison's directory.
const FORK_DIR: &str = "vm-each-fork";
/// The second saved guest's, made only for `--lie wrong-save`.
const OTHER_FORK_DIR: &str = "vm-each-fork-other";

/// A fault put into the VM-each column on purpose, to show that its checks catch it (`--lie`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lie {
    /// The last copy resumed from another guest's save.
    WrongSave,
    /// The first copy's state app restarted before its go.
    RestartedApp,
}

impl Lie {
    /// What the lie did, as compare.json says it.
    fn said(self, copies: u32) -> String {
        match self {
            Lie::WrongSave => format!(
                "copy-{copies} was resumed from another guest's save on purpose (--lie wrong-save)"
            ),
            Lie::RestartedApp => {
                "copy-1's state app was restarted before its go on purpose (--lie restarted-app)"
                    .into()
            }
        }
    }
}

/// The comparison's directory: `--out`, or `<reports root>/<UTC>-compare-IMAGE-N`; new or empty.
fn create_out(opts: &CompareOptions) -> Result<PathBuf> {
    let dir = match &opts.base.out {
        Some(d) => d.clone(),
        None => opts.base.reports_root.join(format!(
            "{}-compare-{}-{}",
            clock::compact_utc_now(),
            opts.base.image.image,
            opts.copies
        )),
    };
    run::archive::create_empty_dir(&dir, "comparison's directory", "")?;
    Ok(dir)
}

/// A copy up and waiting for its go.
struct Up {
    label: String,
    obs: Observed,
    session: Session,
    resume: Duration,
    /// The nonce the host gave this resume, as its session recorded it.
    nonce: String,
    host_mem: Result<Mem, String>,
    /// The same QEMU's memory by what holds it, read with `host_mem`.
    split: Option<QemuMem>,
}

/// The VM-each column into `col`. An error is the rig's: what was measured stays in `col`, and
/// each copy already up is archived as far as it got.
fn vm_each_column(
    opts: &CompareOptions,
    base: &VmRunOptions,
    out: &Path,
    col: &mut VmEach,
    accel: &mut String,
) -> Result<()> {
    let fork_dir = out.join(FORK_DIR);
    std::fs::create_dir(&fork_dir).with_context(|| format!("creating {}", fork_dir.display()))?;
    let mut obs = run::observe(base, fork_dir);
    let entry = run::image_phase(base, &mut obs)?;
    let made = make_fork(base, &entry, &mut obs, opts.workload.as_deref())?;
    *accel = made.accel.as_str().to_string();
    col.idle_guest = made.idle;
    col.fork_token = made.token.clone();
    let saved = &made.fork;
    // What each copy is judged against: the save the column's copies must come from.
    let origin = cmp::Origin {
        token: &made.token,
        state_sha256: &saved.record.state_sha256,
    };
    let b = run::bounds(made.accel);
    col.state_bytes = saved.record.state_bytes;
    col.state_sha256 = saved.record.state_sha256.clone();
    col.save_ms = ms(saved.save_took);
    progress().note(&format!(
        "saved the guest with its tree up: {} MiB of state in {:.1} s",
        saved.record.state_bytes >> 20,
        saved.save_took.as_secs_f64()
    ));
    if !opts.lies.is_empty() {
        let said: Vec<String> = opts.lies.iter().map(|l| l.said(opts.copies)).collect();
        col.lie = Some(said.join("; "));
    }
    // The wrong save: the last copy is resumed from a second guest's save, made the same way.
    let other = if opts.lies.contains(&Lie::WrongSave) {
        let dir = out.join(OTHER_FORK_DIR);
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut obs = run::observe(base, dir);
        Some(make_fork(base, &entry, &mut obs, opts.workload.as_deref())?.fork)
    } else {
        None
    };
    let media = GuestMedia::of(&entry);
    let mut up: Vec<Up> = Vec::new();
    let mut failed = None;
    for i in 1..=opts.copies {
        let from = match &other {
            Some(o) if i == opts.copies => o,
            _ => saved,
        };
        match open_copy(base, &entry, &media, from, out, &format!("copy-{i}")) {
            Ok(c) => up.push(c),
            Err(c) => {
                failed = Some(c);
                break;
            }
        }
    }
    for c in &mut up {
        c.host_mem = host_mem(c.session.qemu_pid());
        c.split = host_split(c.session.qemu_pid());
    }
    if failed.is_none() {
        let pids: Vec<u32> = up.iter().map(|c| c.session.qemu_pid()).collect();
        col.ksm = ksm_reading(opts.ksm, &pids, opts.copies);
        col.reclaim = reclaim_reading(&up, b);
    }
    if let Some(c) = failed {
        // The copies up are told to go on, so that each run ends and its report is kept.
        col.copies
            .extend(up.into_iter().map(|c| finish_copy(c, b, true, origin)));
        col.copies.push(*c);
        bail!("a copy did not come up: see its report");
    }
    // The first copy runs to its end alone; then it is put back to the save while the others
    // still wait, so that the reset is timed among as many guests as the copies were.
    let mut rest = up.into_iter();
    if let Some(first) = rest.next() {
        if opts.lies.contains(&Lie::RestartedApp) {
            // A lie that did not happen is said; the copies still end and are archived.
            match first.session.guest().exec(&fork::restart_app_command()) {
                Ok(r) if r.status == 0 => {}
                Ok(r) => col.problems.push(format!(
                    "--lie restarted-app: restarting the app in {} failed (exit {}): {}",
                    first.label,
                    r.status,
                    crate::escape::line(&r.output)
                )),
                Err(e) => col.problems.push(format!(
                    "--lie restarted-app: {}: {}",
                    first.label,
                    crate::escape::error_chain(&e)
                )),
            }
        }
        col.copies.push(finish_copy(first, b, true, origin));
    }
    match open_copy(base, &entry, &media, saved, out, "reset") {
        Ok(mut r) => {
            r.host_mem = host_mem(r.session.qemu_pid());
            r.split = host_split(r.session.qemu_pid());
            let all: Vec<Up> = rest.chain([r]).collect();
            for c in &all {
                give_go(&c.session, &c.label);
            }
            let mut done: Vec<VmCopy> = all
                .into_iter()
                .map(|c| finish_copy(c, b, false, origin))
                .collect();
            col.reset = done.pop();
            col.copies.extend(done);
        }
        Err(r) => {
            col.copies
                .extend(rest.map(|c| finish_copy(c, b, true, origin)));
            col.reset = Some(*r);
        }
    }
    Ok(())
}

/// A guest with its tree up, saved: the fork its copies are resumed from.
struct Made {
    fork: Fork,
    accel: vm::qemu::Accel,
    /// The app's token at the fork, as the saved guest recorded it: what binds a copy to this
    /// save, since a copy of another save holds a fork-time state of its own.
    token: String,
    /// Its QEMU just after it resumed from the image's snapshot, before the tree started.
    idle: Option<Mem>,
}

/// A guest resumed from the image's snapshot runs `diagnose --vm-fork-go` up to its fork-time
/// state, and is saved there, its QEMU ended. Its console and QEMU log go to `obs`'s directory.
fn make_fork(
    base: &VmRunOptions,
    entry: &image::ImageEntry,
    obs: &mut Observed,
    workload: Option<&str>,
) -> Result<Made> {
    let session = run::boot::open(base, entry, obs)?;
    let accel = session.accel();
    let idle = host_mem(session.qemu_pid()).ok();
    gates::copy(session.guest(), Some(session.start()), base, obs)?;
    let b = run::bounds(accel);
    let mut args = fork::diagnose_args(b.gates);
    args.extend(workload_args(workload));
    let argv = gates::diagnose_argv(b.guest_step, &args);
    let started = session.guest().exec(&fork::start_command(&argv))?;
    if started.status != 0 {
        bail!(
            "starting the run in the guest failed: {}",
            crate::escape::line(&started.output)
        );
    }
    session.guest().set_timeout(b.gates);
    let ready = session.guest().exec(&fork::ready_command(b.gates))?;
    session.guest().set_timeout(b.ssh);
    if ready.status != 0 {
        let tail = session
            .guest()
            .exec(&fork::log_tail_command())
            .map(|r| r.output)
            .unwrap_or_default();
        bail!(
            "the guest's run did not reach its fork-time state (exit {}); its last lines:\n{}",
            ready.status,
            crate::escape::lines(&tail)
        );
    }
    let state = session.guest().exec(&fork::state_command())?;
    let token = fork::token_of_state(&state.output).context("reading the fork-time state")?;
    let save_dir = std::env::temp_dir().join(format!(
        "sharedos-rig-fork-{}-{}",
        std::process::id(),
        vm::session::short_id()
    ));
    let fork = session.save_fork(&save_dir)?;
    Ok(Made {
        fork,
        accel,
        token,
        idle,
    })
}

/// A copy of `saved` resumed into its own report directory `out/label`; on failure, its
/// partial report archived and the copy as the column records it.
fn open_copy(
    base: &VmRunOptions,
    entry: &image::ImageEntry,
    media: &GuestMedia,
    saved: &Fork,
    out: &Path,
    label: &str,
) -> std::result::Result<Up, Box<VmCopy>> {
    let dir = out.join(label);
    let failed = |why: String| {
        Box::new(VmCopy {
            label: label.into(),
            report: label.into(),
            problems: vec![why],
            ..VmCopy::default()
        })
    };
    if let Err(e) = std::fs::create_dir(&dir) {
        return Err(failed(format!("creating {}: {e}", dir.display())));
    }
    let mut obs = run::observe(base, dir.clone());
    run::provenance::image(&mut obs.vm, entry);
    let spec = SessionSpec {
        accel_cache: None,
        snapshot: None,
        ..run::boot::spec(base, &vm::session::short_id(), &dir)
    };
    let t = Instant::now();
    let opened = Session::open_fork(&spec, media, saved, &mut obs.vm_sink());
    match opened {
        Ok(session) => {
            let resume = t.elapsed();
            progress().note(&format!(
                "{label}: resumed in {:.2} s",
                resume.as_secs_f64()
            ));
            let nonce = session.start().nonce.clone().unwrap_or_default();
            Ok(Up {
                label: label.into(),
                obs,
                session,
                resume,
                nonce,
                host_mem: Err("not read".into()),
                split: None,
            })
        }
        Err(e) => {
            obs.phase("boot_to_ssh", t);
            run::archive::finish(
                obs,
                Err(e.context(format!("resuming {label} of the VM fork"))),
                None,
            );
            Err(failed(format!("it did not come up (rig): see {label}/")))
        }
    }
}

/// The host's view of one QEMU's memory.
fn host_mem(pid: u32) -> Result<Mem, String> {
    procfs::read_proc(&format!("/proc/{pid}/smaps_rollup"))
        .and_then(|t| procfs::parse_smaps_rollup(&t))
        .map_err(|e| format!("{e:#}"))
}

/// The host's view of one QEMU's memory by what holds it; None when it does not read (the
/// copy's figure is then only its whole).
fn host_split(pid: u32) -> Option<QemuMem> {
    procfs::read_proc_up_to(&format!("/proc/{pid}/smaps"), procfs::MAX_SMAPS_READ)
        .and_then(|t| procfs::parse_qemu_smaps(&t))
        .ok()
}

/// Every copy's QEMU, as the host reads it.
fn host_mems(pids: &[u32]) -> Result<Vec<Mem>> {
    pids.iter()
        .map(|&pid| host_mem(pid).map_err(|e| anyhow::anyhow!("QEMU {pid}: {e}")))
        .collect()
}

/// Every copy read again with the host's KSM merging: NOT_RUN where it was not asked for or
/// this host does not let the rig turn it on (`ksm::check` refused `--ksm on` there already).
fn ksm_reading(want: ksm::Want, pids: &[u32], copies: u32) -> Reading {
    let dir = Path::new(ksm::SYSFS);
    let why_not = match want {
        ksm::Want::Off => Some("not asked for (--ksm off)".to_string()),
        _ => ksm::why_not(dir),
    };
    if let Some(why) = why_not {
        return Reading::not_run(why);
    }
    let how = ksm::how();
    // ksmd goes over every copy's RAM twice; 30 s a copy is far more than it takes under TCG.
    let bound = Duration::from_secs(60 + 30 * u64::from(copies));
    progress().note("host KSM: merging the copies' pages, then reading each QEMU again");
    let t = Instant::now();
    let result = (|| -> Result<(Vec<Mem>, Vec<String>)> {
        let before = ksm::counters(dir)?;
        let mut notes = Vec::new();
        let merging = ksm::Merging::start(dir)?;
        if merging.host_run() != "0" {
            notes.push(format!(
                "the host's KSM run was {} before, so the first reading was not with KSM off",
                merging.host_run()
            ));
        }
        let after = merging.wait_merged(&before, bound)?;
        let mems = host_mems(pids)?;
        merging.restore()?;
        notes.push(format!(
            "ksmd: {} pages shared, {} more pages sharing them, after {} full scans",
            after.pages_shared,
            after.pages_sharing,
            after.full_scans.saturating_sub(before.full_scans)
        ));
        Ok((mems, notes))
    })();
    match result {
        Ok((per_copy, notes)) => Reading {
            status: Status::Pass,
            reason: "every copy read with KSM merging".into(),
            how,
            per_copy,
            took_ms: ms(t.elapsed()),
            notes,
        },
        Err(e) => Reading::failed(how, crate::escape::error_chain(&e)),
    }
}

/// How long each QEMU's resident memory must hold still before the guest is taken to have
/// handed back all it will: longer than the guest's 2-s delay before it reports free pages.
const SETTLED: Duration = Duration::from_secs(4);

/// What the reading of memory given back did before it read the copies, as the report says it.
fn reclaim_how() -> String {
    format!(
        "in each copy's guest: drop_caches 3, then the virtio_balloon driver loaded, which reports \
         free pages to QEMU (free-page-reporting); read once every QEMU's RSS had held still for \
         {} s",
        SETTLED.as_secs()
    )
}

/// Every copy read again after its guest dropped its caches and reported its free pages.
fn reclaim_reading(up: &[Up], b: run::Bounds) -> Reading {
    let how = reclaim_how();
    progress()
        .note("each copy's guest gives back what it does not use, then each QEMU is read again");
    let t = Instant::now();
    for c in up {
        match c.session.guest().exec(&fork::reclaim_command()) {
            Ok(r) if r.status == 0 => {}
            Ok(r) => {
                return Reading::failed(
                    how,
                    format!(
                        "{}: the guest could not give memory back (exit {}): {}",
                        c.label,
                        r.status,
                        crate::escape::line(&r.output)
                    ),
                )
            }
            Err(e) => {
                return Reading::failed(
                    how,
                    format!("{}: {}", c.label, crate::escape::error_chain(&e)),
                )
            }
        }
    }
    let pids: Vec<u32> = up.iter().map(|c| c.session.qemu_pid()).collect();
    let mut last: Option<(Instant, Vec<u64>)> = None;
    let settled = wait::until("every copy's QEMU to stop shrinking", b.gates, || {
        let mems = host_mems(&pids).ok()?;
        let rss: Vec<u64> = mems.iter().map(|m| m.rss_kib).collect();
        match &last {
            // A fall of more than 1 MiB starts the wait for stillness again.
            Some((since, was))
                if rss
                    .iter()
                    .zip(was)
                    .all(|(now, was)| now.saturating_add(1024) >= *was) =>
            {
                (since.elapsed() >= SETTLED).then_some(mems)
            }
            _ => {
                last = Some((Instant::now(), rss));
                None
            }
        }
    });
    match settled {
        Ok(per_copy) => Reading {
            status: Status::Pass,
            reason: "every copy read after its guest gave memory back".into(),
            how,
            per_copy,
            took_ms: ms(t.elapsed()),
            notes: Vec::new(),
        },
        Err(e) => Reading::failed(how, e.to_string()),
    }
}

/// Writes the copy's go; a failure shows when its run is followed, as a run that never ends.
fn give_go(session: &Session, label: &str) {
    if let Some(cmd) = fork::go_command(label) {
        let _ = session.guest().exec(&cmd);
    }
}

/// Gives the copy its go (unless given already), follows its run to the end, fetches its
/// report, ends its QEMU and archives the report; the copy as the column records it.
fn finish_copy(c: Up, b: run::Bounds, go_first: bool, origin: cmp::Origin) -> VmCopy {
    let Up {
        label,
        mut obs,
        session,
        resume,
        nonce,
        host_mem,
        split,
    } = c;
    if go_first {
        give_go(&session, &label);
    }
    let dir = obs.report_dir.clone();
    let result = (|| {
        // The run's exit code is not waited for (`tail --pid`): the judged report is the verdict.
        gates::follow(session.guest(), &fork::follow_command(), b, &mut obs)
            .context("following the copy's run")?;
        gates::read_guest_memory(session.guest(), b, &mut obs)?;
        run::fetch::fetch(session.guest(), b, &mut obs)
    })();
    run::boot::end(session, &mut obs);
    run::archive::finish(obs, result, None);
    let mut problems = cmp::vm_copy_problems(&dir, origin, &nonce);
    let host_mem = match host_mem {
        Ok(m) => Some(m),
        Err(e) => {
            problems.push(format!("its QEMU's memory could not be read: {e}"));
            None
        }
    };
    VmCopy {
        report: label.clone(),
        label,
        nonce,
        resume_ms: ms(resume),
        host_mem,
        host_split: split,
        problems,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_n_that_cannot_fit_is_refused_before_booting() {
        assert!(check_copies(4, 1024, 24 << 20).is_ok());
        let e = format!("{:#}", check_copies(16, 1024, 8 << 20).unwrap_err());
        assert!(
            e.contains("16 VMs of 1024 MiB") && e.contains("fix:"),
            "{e}"
        );
        assert!(check_copies(0, 1024, 24 << 20).is_err());
        assert!(check_copies(MAX_COPIES + 1, 64, u64::MAX).is_err());
    }

    #[test]
    fn the_reclaim_reading_says_its_wait_in_one_plain_sentence() {
        let h = reclaim_how();
        assert!(
            h.ends_with(&format!("held still for {} s", SETTLED.as_secs())),
            "{h}"
        );
        assert!(!h.contains("  "), "{h}");
    }

    #[test]
    fn a_vm_gets_a_copy_s_cgroup_rounded_up_to_what_qemu_takes() {
        let l = |s| sharedos_report::report::parse_cgroup_limits(s).unwrap();
        assert_eq!(vm_resources(&l("cpu=1,memory=512M")), (512, 1));
        assert_eq!(vm_resources(&l("cpu=1.5,memory=1000000000")), (954, 2));
        assert_eq!(vm_resources(&l("cpu=0.25,memory=256M")), (256, 1));
    }
}
