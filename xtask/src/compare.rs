//! `cargo xtask vm-compare [--copies N]`: the shared-OS design against a VM each, on one image,
//! in one sitting (sharedos_rig::compare).

use crate::{vm_options, VmArgs};
use anyhow::Result;
use sharedos_report::model::density::MAX_COPIES;
use sharedos_report::report::{parse_cgroup_limits, CgroupLimits, Copies};
use sharedos_rig::compare::{self, ksm, CompareOptions};
use sharedos_rig::judge::compare::Arm;

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Copies of the desktop in each column: N CRIU copies in one guest, N VMs at once; or
    /// `max`: each arm adds one copy at a time, all kept up, until its first limit (the cap,
    /// the memory floor of the guest's or the host's MemAvailable, a copy slower than the bound
    /// on one, the search's deadline, or a restore or clone that fails), and names it.
    #[arg(long, default_value = "4", value_name = "N|max", value_parser = parse_copies)]
    pub copies: Copies,
    /// With --copies max: stop each arm's search at N copies at most (1 to 64; default 64).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_COPIES)))]
    pub max_copies: Option<u32>,
    /// The shared-OS guest's memory in MiB, or `auto`: with --copies max, half the host's
    /// MemAvailable (at most 16 GiB), so that the guest's own size is not what stops its
    /// search first; with --copies N, --memory.
    #[arg(long, default_value = "auto", value_name = "MIB|auto", value_parser = parse_guest_memory)]
    pub guest_memory: GuestMemory,
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
    /// copy's state app before its go, `same-mac` gives the first copy its go without a MAC of
    /// its own. Repeatable. The shared-OS column is not run, and
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

fn parse_copies(s: &str) -> Result<Copies, String> {
    if s == "max" {
        return Ok(Copies::Max);
    }
    s.parse::<u32>()
        .map(Copies::Count)
        .map_err(|_| format!("`{s}` is not a number of copies: give 1 to {MAX_COPIES}, or `max`"))
}

/// `--guest-memory`: `auto` is resolved once the request is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestMemory {
    Auto,
    Mib(u64),
}

fn parse_guest_memory(s: &str) -> Result<GuestMemory, String> {
    if s == "auto" {
        return Ok(GuestMemory::Auto);
    }
    match s.parse::<u64>() {
        Ok(m) if m >= 256 => Ok(GuestMemory::Mib(m)),
        _ => Err(format!(
            "`{s}` is not a guest memory: give MiB (256 or more), or `auto`"
        )),
    }
}

/// The most `--guest-memory auto` gives the shared-OS guest of a search (MiB).
const AUTO_GUEST_MEMORY_MAX_MIB: u64 = 16 * 1024;

/// `--guest-memory auto` for a search: half what the host has available now, within --memory
/// and 16 GiB, in whole 256 MiB.
fn auto_guest_memory(available_kib: u64, memory_mib: u64) -> u64 {
    let half = available_kib / 1024 / 2 / 256 * 256;
    half.clamp(
        memory_mib.min(AUTO_GUEST_MEMORY_MAX_MIB),
        AUTO_GUEST_MEMORY_MAX_MIB,
    )
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
    if a.max_copies.is_some() && a.copies != Copies::Max {
        anyhow::bail!(
            "--max-copies caps the search of --copies max, and this run asks for {} copies\nfix: give --copies max, or leave --max-copies out",
            a.copies
        );
    }
    if a.copies == Copies::Max && !a.lie.is_empty() {
        anyhow::bail!(
            "--lie puts its fault into a copy of a known count, and --copies max has none\nfix: give --copies N with --lie"
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
    let guest_memory_mib = match (a.guest_memory, a.copies) {
        (GuestMemory::Mib(m), _) => m,
        (GuestMemory::Auto, Copies::Count(_)) => a.vm.boot.memory,
        (GuestMemory::Auto, Copies::Max) => {
            let (_, available) = sharedos_report::procfs::read_meminfo()?;
            auto_guest_memory(available, a.vm.boot.memory)
        }
    };
    let base = vm_options(a.vm)?;
    Ok(compare::vm_compare(&CompareOptions {
        base,
        copies: a.copies,
        max_copies: a.max_copies,
        guest_memory_mib,
        ksm: a.ksm,
        guest_ksm: a.guest_ksm,
        cgroup: a.cgroup,
        workload: a.workload,
        lies: a.lie,
        arms: compare::arms(&a.arms),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_sizes_a_search_s_guest_to_half_the_host_within_bounds() {
        // 22 GiB available: 11 GiB.
        assert_eq!(auto_guest_memory(22 << 20, 1024), 11 * 1024);
        // Never less than --memory, never more than 16 GiB.
        assert_eq!(auto_guest_memory(1 << 20, 1024), 1024);
        assert_eq!(
            auto_guest_memory(200 << 20, 1024),
            AUTO_GUEST_MEMORY_MAX_MIB
        );
        assert_eq!(
            auto_guest_memory(200 << 20, 64 * 1024),
            AUTO_GUEST_MEMORY_MAX_MIB
        );
        assert_eq!(parse_guest_memory("auto"), Ok(GuestMemory::Auto));
        assert_eq!(parse_guest_memory("2048"), Ok(GuestMemory::Mib(2048)));
        assert!(parse_guest_memory("12").is_err());
        assert_eq!(parse_copies("max"), Ok(Copies::Max));
        assert_eq!(parse_copies("3"), Ok(Copies::Count(3)));
        assert!(parse_copies("many").is_err());
    }
}
