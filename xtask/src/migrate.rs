//! `cargo xtask vm-migrate --from IMAGE --to IMAGE`: a checkpoint made in a guest of one image
//! restored in a guest of another (sharedos_rig::migrate).

use crate::{vm_options, VmArgs};
use anyhow::Result;
use sharedos_rig::migrate::{self, MigrateOptions};

#[derive(clap::Args)]
pub struct MigrateArgs {
    /// The image whose guest runs the tree and dumps it.
    #[arg(long, value_name = "IMAGE")]
    pub from: String,
    /// The image whose guest is sent the checkpoint and restores it.
    #[arg(long, value_name = "IMAGE")]
    pub to: String,
    /// Test only: flip a byte of the checkpoint between the two guests.
    #[arg(long, hide = true)]
    pub test_tamper_checkpoint: bool,
    /// How the guests boot, the gate binary, --out (the migration's directory); --image and
    /// the arguments after `--` are not taken (the migration sets them).
    #[command(flatten)]
    pub vm: VmArgs,
}

pub fn vm_migrate(a: MigrateArgs) -> Result<i32> {
    if !a.vm.diagnose_args.is_empty() {
        anyhow::bail!(
            "vm-migrate takes no diagnose arguments after `--` (it gives each guest its own): \
             leave them out"
        );
    }
    if a.vm.boot.image.plan || a.vm.boot.keep_vm {
        anyhow::bail!(
            "vm-migrate takes neither --plan nor --keep-vm yet: each guest's plan is vm-run's \
             (`cargo xtask vm-run --plan --image IMAGE`), and its guests end with it"
        );
    }
    // Both names, each with its flag, before the gate binary's build: a typo costs nothing.
    migrate::plan::check_pair(&a.vm.boot.image, &a.from, &a.to)?;
    let mut vm = a.vm;
    // --image plays no part: each guest gets its own.
    vm.boot.image.image = a.from.clone();
    let base = vm_options(vm)?;
    Ok(migrate::vm_migrate(&MigrateOptions {
        base,
        from: a.from,
        to: a.to,
        tamper_checkpoint: a.test_tamper_checkpoint,
    }))
}
