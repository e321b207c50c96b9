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
mod readings;
pub mod search;
pub mod template;
mod vm_arm;

use crate::image;
use crate::judge::compare::{self as cmp, Arm, SharedOs, Summary, VmEach};
use crate::judge::verdict::{self, How};
use crate::progress::Progress;
use crate::run::{self, VmRunOptions, RIG_FAILURE_EXIT};
use anyhow::{bail, Context, Result};
/// Milliseconds, saturating: every duration the comparison records.
pub(crate) use sharedos_report::clock::millis as ms;
use sharedos_report::model::density::MAX_COPIES;
use sharedos_report::report::{CgroupLimits, Copies, CPU_PERIOD_US};
use sharedos_report::{clock, digest, procfs};
use std::path::{Path, PathBuf};

#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Everything but the report directory and the diagnose arguments, as for vm-run.
    pub base: VmRunOptions,
    /// N copies in each arm, or the most each holds (`max`).
    pub copies: Copies,
    /// `max`: the cap of each arm's search, lower than the most there is (`--max-copies`).
    pub max_copies: Option<u32>,
    /// The shared-OS guest's memory (MiB): `--guest-memory`, resolved.
    pub guest_memory_mib: u64,
    pub ksm: ksm::Want,
    /// The shared-OS guest's KSM for the CRIU copies (`--guest-ksm`).
    pub guest_ksm: ksm::Want,
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
/// host's memory cannot hold as VMs. A search (`max`) needs room for one VM: it stops itself
/// at the memory floor.
pub fn check_copies(copies: Copies, memory_mib: u64, host_available_kib: u64) -> Result<()> {
    let copies = match copies {
        Copies::Count(n) => n,
        Copies::Max => 1,
    };
    if !(1..=MAX_COPIES).contains(&copies) {
        bail!(
            "--copies {copies}: give 1 to {MAX_COPIES}, the copies each column runs at once\nfix: give --copies between 1 and {MAX_COPIES}"
        );
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
pub fn check_copies_here(copies: Copies, memory_mib: u64) -> Result<()> {
    let (_, available) = procfs::read_meminfo()?;
    check_copies(copies, memory_mib, available)
}

fn compare(opts: &CompareOptions) -> Result<i32> {
    sharedos_report::signals::install().context("installing signal handlers")?;
    image::require_image(&opts.base.image)?;
    let vm_opts = vm_base(opts);
    let arms = run_arms(opts);
    check_copies_here(opts.copies, vm_opts.memory_mib)?;
    ksm::check(opts.ksm, Path::new(ksm::SYSFS))?;
    if arms.contains(&Arm::VmTemplate) {
        template::check(vm_opts.memory_mib)?;
    }
    crate::gate_binary::require(&opts.base.gate_binary)?;
    let vm_arm = arms.iter().any(|a| *a != Arm::Criu);
    if let Some(why) = vm_arm
        .then(|| run::boot::why_no_resume(&vm_opts.resolve().boot))
        .transpose()?
        .flatten()
    {
        bail!(
            "--image {}: a VM arm's column is made of copies of a guest resumed from the image's \
             snapshot, and {why}; nothing was booted\n\
             fix: give a --cache-dir this user can write, or have the cache's owner make the \
             snapshot once with the same --memory, --cpus and --accel (`cargo xtask vm-exec \
             --image {} -- true`)",
            opts.base.image.image,
            opts.base.image.image
        );
    }
    let out = create_out(opts)?;

    let (shared_os, mut rig_failed, mut accel) = if !arms.contains(&Arm::Criu) {
        (
            SharedOs {
                report: "shared-os".into(),
                problems: vec![NOT_AMONG_ARMS.into()],
                ..SharedOs::default()
            },
            false,
            String::new(),
        )
    } else if opts.lies.is_empty() {
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
    let mut vm_column = |kind: vm_arm::Kind| {
        let (col, failed) = vm_arm_column(kind, opts, &vm_opts, &out, &mut accel);
        rig_failed |= failed;
        col
    };
    let vm_each = if arms.contains(&Arm::Vm) {
        vm_column(vm_arm::Kind::Each)
    } else {
        VmEach {
            fork: vm_arm::Kind::Each.fork_dir().into(),
            problems: vec![NOT_AMONG_ARMS.into()],
            ..VmEach::default()
        }
    };
    let vm_template = arms
        .contains(&Arm::VmTemplate)
        .then(|| vm_column(vm_arm::Kind::Template));
    let mut s = Summary {
        format: cmp::FORMAT,
        image: opts.base.image.image.clone(),
        accel,
        copies: match opts.copies {
            Copies::Count(n) => n,
            Copies::Max => opts.max_copies.unwrap_or(MAX_COPIES),
        },
        max: opts.copies == Copies::Max,
        workload: opts.workload.clone(),
        arms,
        shared_os,
        vm_each,
        vm_template,
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

/// What a column not asked for says.
const NOT_AMONG_ARMS: &str = "not run: not among --arms";

/// The arms this run runs: those asked for, but a lie run (`--lie`) puts its faults into the
/// VM-each arm alone, and runs no templated one.
fn run_arms(opts: &CompareOptions) -> Vec<Arm> {
    let mut arms = arms(&opts.arms);
    if !opts.lies.is_empty() {
        arms.retain(|a| *a != Arm::VmTemplate);
        if !arms.contains(&Arm::Vm) {
            arms.push(Arm::Vm);
            arms.sort();
        }
    }
    arms
}

/// A VM arm's column, and whether the rig failed in it.
fn vm_arm_column(
    kind: vm_arm::Kind,
    opts: &CompareOptions,
    vm_opts: &VmRunOptions,
    out: &Path,
    accel: &mut String,
) -> (VmEach, bool) {
    let n = match opts.copies {
        Copies::Count(n) => format!("{n} times at once"),
        Copies::Max => "one copy at a time, each kept up, until a limit".into(),
    };
    let name = kind.name();
    progress().note(&match kind {
        vm_arm::Kind::Each => {
            format!("{name} column: one guest saved with its tree up, resumed {n}")
        }
        vm_arm::Kind::Template => format!(
            "{name} column: one template guest saved with its tree up, its RAM a file on {}, cloned {n}, each clone mapping it copy-on-write",
            template::TMPFS
        ),
    });
    progress().note(
        "each copy's own report is FAIL by design (CRIU's gates do not run in a VM copy); the comparison's verdict comes last",
    );
    let mut col = VmEach {
        fork: kind.fork_dir().into(),
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
    // An interrupt ends the comparison here: no further column is started for nothing.
    let ran = match sharedos_report::signals::interrupted() {
        Some(sig) => Err(anyhow::anyhow!("interrupted by {sig}: not started")),
        None => vm_arm::column(kind, opts, &vm_opts.resolve(), out, &mut col, accel),
    };
    let failed = ran.is_err();
    if let Err(e) = ran {
        col.problems.push(format!(
            "the column could not be run (rig): {}",
            crate::escape::error_chain(&e)
        ));
    }
    (col, failed)
}

/// The shared-OS column: a vm-run with `--copies N` into `shared-os/`, judged. Returns the
/// column, whether the rig failed, and the accelerator it ran under.
fn shared_os_column(opts: &CompareOptions, out: &Path) -> (SharedOs, bool, String) {
    let n = opts.copies;
    progress().note(&format!(
        "shared-OS column: one guest of {} MiB, CRIU copies of one dump (vm-run --memory {} -- --copies {n})",
        opts.guest_memory_mib, opts.guest_memory_mib
    ));
    let so_dir = out.join("shared-os");
    let mut so = opts.base.clone();
    so.out = Some(so_dir.clone());
    so.memory_mib = opts.guest_memory_mib;
    so.diagnose_args = vec!["--copies".into(), n.to_string()];
    if let (Copies::Max, Some(cap)) = (n, opts.max_copies) {
        so.diagnose_args
            .extend(["--max-copies".to_string(), cap.to_string()]);
    }
    so.diagnose_args
        .extend(workload_args(opts.workload.as_deref()));
    if opts.guest_ksm != ksm::Want::Off {
        so.diagnose_args.push("--guest-ksm".into());
    }
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
                opts.guest_memory_mib, opts.base.cpus
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

/// A fault put into the VM-each column on purpose, to show that its checks catch it (`--lie`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Lie {
    /// The last copy resumed from another guest's save.
    WrongSave,
    /// The first copy's state app restarted before its go.
    RestartedApp,
    /// The first copy given its go without a MAC of its own: it keeps the saved guest's.
    SameMac,
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
            Lie::SameMac => {
                "copy-1 was given its go without a MAC of its own on purpose (--lie same-mac)"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_n_that_cannot_fit_is_refused_before_booting() {
        let n = Copies::Count;
        assert!(check_copies(n(4), 1024, 24 << 20).is_ok());
        let e = format!("{:#}", check_copies(n(16), 1024, 8 << 20).unwrap_err());
        assert!(
            e.contains("16 VMs of 1024 MiB") && e.contains("fix:"),
            "{e}"
        );
        assert!(check_copies(n(0), 1024, 24 << 20).is_err());
        assert!(check_copies(n(MAX_COPIES + 1), 64, u64::MAX).is_err());
        // A search needs room for its first VM only; it keeps its own floor after.
        assert!(check_copies(Copies::Max, 1024, 2 << 20).is_ok());
        assert!(check_copies(Copies::Max, 1024, 1 << 20).is_err());
    }

    #[test]
    fn a_vm_gets_a_copy_s_cgroup_rounded_up_to_what_qemu_takes() {
        let l = |s| sharedos_report::report::parse_cgroup_limits(s).unwrap();
        assert_eq!(vm_resources(&l("cpu=1,memory=512M")), (512, 1));
        assert_eq!(vm_resources(&l("cpu=1.5,memory=1000000000")), (954, 2));
        assert_eq!(vm_resources(&l("cpu=0.25,memory=256M")), (256, 1));
    }
}
