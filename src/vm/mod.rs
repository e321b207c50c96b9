//! Booting the guest: the accelerator probe, QEMU's lifetime, and the serial console protocol.

pub mod floor;
pub mod process;
pub mod qemu;
pub mod serial;

use crate::cmd::Cmd;
use anyhow::{bail, Context, Result};
use process::QemuProcess;
use qemu::{Accel, QemuSpec};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AccelChoice {
    /// KVM when /dev/kvm opens read-write and the kernel shows boot progress quickly, else TCG.
    Auto,
    Kvm,
    Tcg,
}

/// How long KVM gets to show the kernel banner on the serial console. Under TCG the banner
/// appears within about a second even on a loaded host (FIELD-NOTES).
pub const KVM_PROBE: Duration = Duration::from_secs(8);

/// Whether this user may use KVM at all.
pub fn kvm_openable() -> Result<(), String> {
    std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/kvm")
        .map(|_| ())
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => "/dev/kvm does not exist".to_string(),
            std::io::ErrorKind::PermissionDenied => {
                "/dev/kvm is not read-writable by this user (not in group kvm?)".to_string()
            }
            _ => format!("/dev/kvm cannot be opened read-write: {e}"),
        })
}

/// Whether this QEMU was built with its seccomp sandbox: `-sandbox` is then a known option, and
/// `-version` after it exits 0 without starting a machine.
pub fn sandbox_available() -> bool {
    qemu::sandbox_probe_cmd()
        .command()
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The first line of `qemu-system-x86_64 --version`.
pub fn qemu_version() -> Result<String> {
    let out = crate::cmd::capture(&qemu::version_cmd())
        .context("reading QEMU's version (Debian/Ubuntu: apt-get install qemu-system-x86)")?;
    Ok(out.lines().next().unwrap_or("").trim().to_string())
}

/// A booted (or booting) guest with the accelerator that is running it.
pub struct Booted {
    pub qemu: QemuProcess,
    pub accel: Accel,
    /// Why this accelerator, including any failed KVM attempt.
    pub accel_reason: String,
    pub cmd: Cmd,
}

fn start(
    cmd: Cmd,
    serial_log: &Path,
    qemu_log: &Path,
    may_outlive: bool,
) -> Result<(QemuProcess, Cmd)> {
    // A fresh console log per attempt: the probe reads only this boot's lines.
    let _ = std::fs::remove_file(serial_log);
    Ok((QemuProcess::spawn(&cmd, qemu_log, may_outlive)?, cmd))
}

/// Starts QEMU under the chosen accelerator. `auto` tries KVM and watches the console for the
/// kernel banner; on no progress it kills that QEMU, says why, and starts again under TCG.
pub fn boot(
    choice: AccelChoice,
    spec: &QemuSpec,
    qemu_log: &Path,
    may_outlive: bool,
    say: &mut dyn FnMut(&str),
) -> Result<Booted> {
    let cmd_for = |accel| {
        qemu::qemu_cmd(&QemuSpec {
            accel,
            ..spec.clone()
        })
    };
    boot_cmd(
        choice,
        &cmd_for,
        &spec.serial_log,
        qemu_log,
        may_outlive,
        say,
    )
}

/// `boot` for any QEMU command line: `cmd_for` builds it for an accelerator, and its serial
/// console must go to `serial_log`. The floor boots through here so that it runs under the
/// accelerator a vm-run would get.
pub fn boot_cmd(
    choice: AccelChoice,
    cmd_for: &dyn Fn(Accel) -> Cmd,
    serial_log: &Path,
    qemu_log: &Path,
    may_outlive: bool,
    say: &mut dyn FnMut(&str),
) -> Result<Booted> {
    let tcg = |reason: String, say: &mut dyn FnMut(&str)| -> Result<Booted> {
        say(&format!("accelerator: tcg ({reason})"));
        let (qemu, cmd) = start(cmd_for(Accel::Tcg), serial_log, qemu_log, may_outlive)?;
        Ok(Booted {
            qemu,
            accel: Accel::Tcg,
            accel_reason: reason,
            cmd,
        })
    };
    match choice {
        AccelChoice::Tcg => tcg("forced with --accel tcg".into(), say),
        AccelChoice::Kvm => {
            if let Err(why) = kvm_openable() {
                bail!("--accel kvm: {why}; use --accel tcg or --accel auto");
            }
            let (qemu, cmd) = start(cmd_for(Accel::Kvm), serial_log, qemu_log, may_outlive)?;
            say("accelerator: kvm (forced with --accel kvm)");
            Ok(Booted {
                qemu,
                accel: Accel::Kvm,
                accel_reason: "forced with --accel kvm".into(),
                cmd,
            })
        }
        AccelChoice::Auto => {
            if let Err(why) = kvm_openable() {
                return tcg(format!("auto: {why}"), say);
            }
            let (mut qemu, cmd) = start(cmd_for(Accel::Kvm), serial_log, qemu_log, may_outlive)?;
            let started = Instant::now();
            loop {
                if serial::read(serial_log).kernel_started {
                    let reason = format!(
                        "auto: /dev/kvm opened read-write and the kernel banner appeared after {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                    say(&format!("accelerator: kvm ({reason})"));
                    return Ok(Booted {
                        qemu,
                        accel: Accel::Kvm,
                        accel_reason: reason,
                        cmd,
                    });
                }
                if let Some(how) = qemu.exited() {
                    let log = serial::log_tail(qemu_log);
                    let last = log.lines().last().unwrap_or("").to_string();
                    drop(qemu);
                    return tcg(
                        format!("auto: QEMU under KVM exited at once ({how}: {last}); fell back"),
                        say,
                    );
                }
                if started.elapsed() >= KVM_PROBE {
                    qemu.stop();
                    // Read before the rename below moves the log away.
                    let last = serial::tail(serial_log, 1);
                    // Kept as evidence of why KVM was abandoned.
                    let _ = std::fs::rename(
                        serial_log,
                        serial_log.with_file_name("serial-kvm-probe.log"),
                    );
                    return tcg(
                        format!(
                            "auto: under KVM the kernel showed no boot progress on the serial console within {} s (last: {last:?}); killed that QEMU and fell back",
                            KVM_PROBE.as_secs(),
                        ),
                        say,
                    );
                }
                if let Some(sig) = sharedos_report::signals::interrupted() {
                    bail!("interrupted by {sig} while probing KVM");
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// Waits until the guest's PID 1 says it is ready, QEMU exits, the guest reports an error, or
/// the bound passes.
pub fn wait_ready(
    booted: &mut Booted,
    serial_log: &Path,
    timeout: Duration,
) -> Result<crate::image::contract::ConsoleState> {
    let started = Instant::now();
    loop {
        let s = serial::read(serial_log);
        if !s.errors.is_empty() {
            bail!(
                "the guest's init reported: {}; serial console tail:\n{}",
                s.errors.join("; "),
                serial::tail(serial_log, 15)
            );
        }
        if let Some(p) = &s.panic {
            bail!("the guest kernel panicked: {p}");
        }
        if s.ready {
            if s.host_key.is_none() {
                bail!("the guest said it is ready but printed no SHA256 host key fingerprint");
            }
            return Ok(s);
        }
        if let Some(how) = booted.qemu.exited() {
            bail!(
                "QEMU exited ({how}) before the guest was ready; serial console tail:\n{}",
                serial::tail(serial_log, 15)
            );
        }
        if started.elapsed() >= timeout {
            bail!(
                "the guest was not ready within {} s under {} (no SHAREDOS-READY on the serial console); tail:\n{}",
                timeout.as_secs(),
                booted.accel.as_str(),
                serial::tail(serial_log, 15)
            );
        }
        if let Some(sig) = sharedos_report::signals::interrupted() {
            bail!("interrupted by {sig} while the guest was booting");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
