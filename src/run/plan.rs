//! `--plan`: every step a run would take, printed from the same builders the run executes, with
//! placeholders only where a value exists once the run is under way (its id, port, key).

use super::{archive, boot, bounds, fetch, session, VmRunOptions, GUEST_GATE};
use crate::cmd::Cmd;
use crate::image;
use crate::ssh;
use crate::vm::{self, qemu, AccelChoice};
use anyhow::Result;
use sharedos_report::text::shell_words;
use std::fmt::Write;
use std::path::{Path, PathBuf};

/// The accelerators a run may boot under, in the order it tries them.
pub fn accels(choice: AccelChoice) -> Vec<qemu::Accel> {
    match choice {
        AccelChoice::Tcg => vec![qemu::Accel::Tcg],
        AccelChoice::Kvm => vec![qemu::Accel::Kvm],
        AccelChoice::Auto => vec![qemu::Accel::Kvm, qemu::Accel::Tcg],
    }
}

/// The QEMU line the run would start under `accel`, from `boot::qemu_spec`.
pub fn qemu_cmd(opts: &VmRunOptions, accel: qemu::Accel, sandbox: bool, report_dir: &Path) -> Cmd {
    let run = PathBuf::from("<run dir>");
    let media = boot::Media {
        kernel: "<cache entry>/vmlinuz".into(),
        initrd: "<cache entry>/initrd.img".into(),
        overlay: run.join("overlay.qcow2"),
        append: format!(
            "{} sharedos.authorized_key=<run key>",
            image::contract::kernel_cmdline()
        ),
    };
    let serial_log = report_dir.join("serial.log");
    qemu::qemu_cmd(&boot::qemu_spec(
        opts,
        "<id>",
        accel,
        &media,
        &serial_log,
        0,
        sandbox,
    ))
}

pub fn plan(opts: &VmRunOptions) -> Result<String> {
    let mut s = String::from("plan: sharedos-rig vm-run (nothing is started)\n");
    let report_dir = archive::report_dir_for(opts);
    // fmt::Write into a String cannot fail.
    let _ = write_boot(&mut s, opts, &report_dir);
    let _ = write_run(&mut s, opts, &report_dir);
    Ok(s)
}

/// vm-exec's plan: the same boot, then the one command.
pub fn plan_exec(opts: &VmRunOptions, command: &[String]) -> String {
    let mut s = String::from("plan: sharedos-rig vm-exec (nothing is started)\n");
    let _ = write_boot(&mut s, opts, Path::new("<scratch dir>"));
    let _ = writeln!(s, "    {}", command.join(" "));
    s
}

/// Image, key, overlay, QEMU and the SSH login: what every boot does.
fn write_boot(s: &mut String, opts: &VmRunOptions, report_dir: &Path) -> std::fmt::Result {
    writeln!(s, "[image]")?;
    let mut img = opts.image.clone();
    img.plan = true;
    match image::plan_image(&img) {
        Ok(lines) => {
            for l in lines {
                writeln!(s, "    {l}")?;
            }
        }
        Err(e) => writeln!(s, "    (cannot plan the image: {e:#})")?,
    }
    let run = Path::new("<run dir>");
    writeln!(s, "[keys]\n    {}", boot::keygen_cmd(run).display())?;
    writeln!(
        s,
        "[overlay]\n    {}",
        boot::overlay_cmd(Path::new("<cache entry>/disk.img"), run).display()
    )?;
    let sandbox = vm::sandbox_available();
    for a in accels(opts.accel) {
        let when = match (opts.accel, a) {
            (AccelChoice::Auto, qemu::Accel::Kvm) => format!(
                " (auto: only if /dev/kvm opens read-write; kept if 'Linux version' shows on the console within {} s)",
                vm::KVM_PROBE.as_secs()
            ),
            (AccelChoice::Auto, qemu::Accel::Tcg) => " (auto: otherwise)".into(),
            _ => String::new(),
        };
        writeln!(
            s,
            "[qemu {}]{when}\n    {}",
            a.as_str(),
            qemu_cmd(opts, a, sandbox, report_dir).display()
        )?;
    }
    if !sandbox {
        writeln!(
            s,
            "    (this QEMU has no -sandbox: it was built without seccomp)"
        )?;
    }
    writeln!(s, "[ssh] one session to 127.0.0.1:<free port>, host key pinned from SHAREDOS-HOSTKEY on the console")
}

/// What vm-run does over the session, the guest's own plan, and where the report goes.
fn write_run(s: &mut String, opts: &VmRunOptions, report_dir: &Path) -> std::fmt::Result {
    let b = bounds(qemu::Accel::Tcg);
    writeln!(
        s,
        "    {}   (stdin: {})",
        ssh::upload_command(GUEST_GATE, 0o755),
        opts.gate_binary.display()
    )?;
    writeln!(s, "    {}", session::prep_command("<host epoch seconds>"))?;
    writeln!(
        s,
        "    {}   (--step-timeout shown for tcg; kvm uses {} s; the whole gate phase is bounded by {} s under tcg)",
        shell_words(&session::diagnose_argv(b.guest_step, &opts.diagnose_args)),
        bounds(qemu::Accel::Kvm).guest_step.as_secs(),
        b.gates.as_secs()
    )?;
    writeln!(s, "    {}", session::MEMINFO)?;
    writeln!(
        s,
        "    {}   | on the host: unpacked into {} (regular files and directories only)",
        shell_words(&fetch::fetch_argv()),
        report_dir.join(fetch::GUEST_DIR).display()
    )?;
    writeln!(s, "[guest plan]")?;
    for l in guest_plan(opts, b) {
        writeln!(s, "    {l}")?;
    }
    writeln!(s, "[archive] {}", report_dir.display())
}

/// The gate binary's own plan, run here with the very arguments the guest gets. Its lines name
/// the binary where it will be in the guest, not where it is on this host.
fn guest_plan(opts: &VmRunOptions, b: super::Bounds) -> Vec<String> {
    let argv = session::diagnose_argv(b.guest_step, &opts.diagnose_args);
    let local = opts.gate_binary.display().to_string();
    let out = std::process::Command::new(&opts.gate_binary)
        .args(&argv[1..])
        .arg("--plan")
        .output();
    match out {
        Ok(o) if o.status.success() => String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(|l| l.replace(&local, GUEST_GATE))
            .collect(),
        Ok(o) => vec![format!(
            "(the gate binary's plan failed: {})",
            String::from_utf8_lossy(&o.stderr).trim()
        )],
        Err(e) => vec![format!("(cannot run {local}: {e})")],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_tries_kvm_then_tcg() {
        assert_eq!(
            accels(AccelChoice::Auto),
            vec![qemu::Accel::Kvm, qemu::Accel::Tcg]
        );
        assert_eq!(accels(AccelChoice::Tcg), vec![qemu::Accel::Tcg]);
    }
}
