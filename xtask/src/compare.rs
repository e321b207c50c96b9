//! `cargo xtask vm-compare [--copies N]`: the shared-OS design against a VM each, on one image,
//! in one sitting (sharedos_rig::compare).

use crate::{vm_options, VmArgs};
use anyhow::Result;
use sharedos_rig::compare::{self, CompareOptions};

#[derive(clap::Args)]
pub struct CompareArgs {
    /// Copies of the desktop in each column: N CRIU copies in one guest, N VMs at once.
    #[arg(long, default_value_t = 4, value_name = "N")]
    pub copies: u32,
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
    compare::check_copies_here(a.copies, a.vm.boot.memory)?;
    let base = vm_options(a.vm)?;
    Ok(compare::vm_compare(&CompareOptions {
        base,
        copies: a.copies,
    }))
}
