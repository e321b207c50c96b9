//! `cargo xtask vm-compare [--copies N]`: the shared-OS design against a VM each, on one image,
//! in one sitting (sharedos_rig::compare).

use crate::{vm_options, VmArgs};
use anyhow::Result;
use sharedos_report::report::{parse_cgroup_limits, CgroupLimits};
use sharedos_rig::compare::{self, ksm, CompareOptions};
use sharedos_rig::judge::compare::Arm;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Copies of the desktop in each column: N CRIU copies in one guest, N VMs at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub copies: u32,
    /// The host's KSM for one more reading of the VM copies (turning it on takes root). The
    /// host's settings are put back after.
    #[arg(long, value_enum, default_value_t = ksm::Want::Auto)]
    pub ksm: ksm::Want,
    /// The shared-OS guest's KSM for one more reading of the CRIU copies: they opt in
    /// (PR_SET_MEMORY_MERGE, Linux 6.4 and later) and the guest's ksmd merges their pages.
    /// `on` refuses, before anything boots, an image whose pinned kernel lacks it; `auto`
    /// records the reading as NOT_RUN there, saying why.
    #[arg(long, value_enum, default_value_t = ksm::Want::Auto)]
    pub guest_ksm: ksm::Want,
    /// The same resources on both sides: each CRIU copy restored into a cgroup of its own with
    /// these limits (the density gate's `--cgroup`), and each VM given that memory and that many
    /// CPUs (rounded up) in place of --memory and --cpus. The shared-OS guest keeps --memory and
    /// --cpus around its copies.
    #[arg(long, value_name = "cpu=N,memory=SIZE", value_parser = parse_cgroup_limits)]
    pub cgroup: Option<CgroupLimits>,
    /// What the tree runs in both columns (the gate binary's `--workload`: xterm, desktop,
    /// browser, browser-nosandbox); give an image that has it (`--image bookworm-desktop`).
    #[arg(long, value_name = "NAME")]
    pub workload: Option<String>,
    /// A fault put into the VM-each column on purpose, to show its checks catch it: `wrong-save`
    /// resumes the last copy from a second guest's save, `restarted-app` restarts the first
    /// copy's state app before its go. Repeatable. The shared-OS column is not run, and
    /// the verdict is FAIL. For the rig's own tests.
    #[arg(long, value_enum, hide = true)]
    pub lie: Vec<compare::Lie>,
    /// The designs to run, comma-separated: `criu` (N CRIU copies in one guest), `vm` (N VMs
    /// resumed from one save, each with its RAM in memory of its own) and `vm-template` (N VMs
    /// cloned from a template whose RAM file each maps copy-on-write). Default: all three.
    #[arg(long, value_enum, value_delimiter = ',', value_name = "ARM,...")]
    pub arms: Vec<Arm>,
    /// How the guests boot (each VM gets --memory and --cpus), the gate binary, --out (the
    /// comparison's directory); the arguments after `--` are not taken (the columns set them).
    #[command(flatten)]
    pub vm: VmArgs,
}

pub fn vm_compare(a: CompareArgs) -> Result<i32> {
    if !a.vm.diagnose_args.is_empty() {
        anyhow::bail!(
            "vm-compare takes no diagnose arguments after `--` (each column sets its own): leave them out"
        );
    }
    if a.vm.boot.image.plan || a.vm.boot.keep_vm || a.vm.boot.cold {
        anyhow::bail!(
            "vm-compare takes none of --plan, --keep-vm and --cold: its VM column is made of resumes \
             (each column's plan is vm-run's: `cargo xtask vm-run --plan`)"
        );
    }
    // Before the gate binary's build: an N that cannot fit costs nothing.
    let vm_memory = a
        .cgroup
        .map_or(a.vm.boot.memory, |l| compare::vm_resources(&l).0);
    compare::check_copies_here(a.copies, vm_memory)?;
    if compare::arms(&a.arms).contains(&Arm::VmTemplate) && a.lie.is_empty() {
        compare::template::check(vm_memory)?;
    }
    ksm::check(a.ksm, std::path::Path::new(ksm::SYSFS))?;
    if compare::arms(&a.arms).contains(&Arm::Criu) {
        let release = sharedos_rig::image::pinned_kernel_release(&a.vm.boot.image)?;
        ksm::check_guest(a.guest_ksm, &a.vm.boot.image.image, release.as_deref())?;
    }
    // Both columns run the workload: an image without it is refused before anything boots.
    if let Some(w) = &a.workload {
        let args = ["--workload".to_string(), w.clone()];
        sharedos_rig::image::require_image_for(&a.vm.boot.image, &args)?;
    }
    let base = vm_options(a.vm)?;
    Ok(compare::vm_compare(&CompareOptions {
        base,
        copies: a.copies,
        ksm: a.ksm,
        guest_ksm: a.guest_ksm,
        cgroup: a.cgroup,
        workload: a.workload,
        lies: a.lie,
        arms: compare::arms(&a.arms),
    }))
}
