//! Booting the guest: the accelerator probe, QEMU's lifetime, and the serial console protocol.

pub mod process;
pub mod qemu;
pub mod serial;

use anyhow::{bail, Result};
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

/// A booted (or booting) guest with the accelerator that is running it.
pub struct Booted {
    pub qemu: QemuProcess,
    pub accel: Accel,
    /// Why this accelerator, including any failed KVM attempt.
    pub accel_reason: String,
    pub argv: Vec<String>,
}

fn start(spec: &QemuSpec, qemu_log: &Path, keep: bool) -> Result<(QemuProcess, Vec<String>)> {
    // A fresh console log per attempt: the probe reads only this boot's lines.
    let _ = std::fs::remove_file(&spec.serial_log);
    let argv = qemu::qemu_argv(spec);
    Ok((QemuProcess::spawn(&argv, qemu_log, keep)?, argv))
}

/// Starts QEMU under the chosen accelerator. `auto` tries KVM and watches the console for the
/// kernel banner; on no progress it kills that QEMU, says why, and starts again under TCG.
pub fn boot(
    choice: AccelChoice,
    spec: &QemuSpec,
    qemu_log: &Path,
    keep: bool,
    say: &mut dyn FnMut(&str),
) -> Result<Booted> {
    let tcg = |reason: String, say: &mut dyn FnMut(&str)| -> Result<Booted> {
        say(&format!("accelerator: tcg ({reason})"));
        let spec = QemuSpec {
            accel: Accel::Tcg,
            ..spec.clone()
        };
        let (qemu, argv) = start(&spec, qemu_log, keep)?;
        Ok(Booted {
            qemu,
            accel: Accel::Tcg,
            accel_reason: reason,
            argv,
        })
    };
    match choice {
        AccelChoice::Tcg => tcg("forced with --accel tcg".into(), say),
        AccelChoice::Kvm => {
            if let Err(why) = kvm_openable() {
                bail!("--accel kvm: {why}; use --accel tcg or --accel auto");
            }
            let spec = QemuSpec {
                accel: Accel::Kvm,
                ..spec.clone()
            };
            let (qemu, argv) = start(&spec, qemu_log, keep)?;
            say("accelerator: kvm (forced with --accel kvm)");
            Ok(Booted {
                qemu,
                accel: Accel::Kvm,
                accel_reason: "forced with --accel kvm".into(),
                argv,
            })
        }
        AccelChoice::Auto => {
            if let Err(why) = kvm_openable() {
                return tcg(format!("auto: {why}"), say);
            }
            let kspec = QemuSpec {
                accel: Accel::Kvm,
                ..spec.clone()
            };
            let (mut qemu, argv) = start(&kspec, qemu_log, keep)?;
            let started = Instant::now();
            loop {
                if serial::read(&kspec.serial_log).kernel_started {
                    let reason = format!(
                        "auto: /dev/kvm opened read-write and the kernel banner appeared after {:.1} s",
                        started.elapsed().as_secs_f64()
                    );
                    say(&format!("accelerator: kvm ({reason})"));
                    return Ok(Booted {
                        qemu,
                        accel: Accel::Kvm,
                        accel_reason: reason,
                        argv,
                    });
                }
                if let Some(how) = qemu.exited() {
                    let log = std::fs::read_to_string(qemu_log).unwrap_or_default();
                    let last = log.lines().last().unwrap_or("").to_string();
                    drop(qemu);
                    return tcg(
                        format!("auto: QEMU under KVM exited at once ({how}: {last}); fell back"),
                        say,
                    );
                }
                if started.elapsed() >= KVM_PROBE {
                    qemu.stop();
                    // Kept as evidence of why KVM was abandoned.
                    let _ = std::fs::rename(
                        &kspec.serial_log,
                        kspec.serial_log.with_file_name("serial-kvm-probe.log"),
                    );
                    return tcg(
                        format!(
                            "auto: under KVM the kernel showed no boot progress on the serial console within {} s (last: {:?}); killed that QEMU and fell back",
                            KVM_PROBE.as_secs(),
                            serial::tail(&kspec.serial_log, 1)
                        ),
                        say,
                    );
                }
                if let Some(sig) = sharedos_gate::signals::interrupted() {
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
) -> Result<serial::SerialState> {
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
        if let Some(sig) = sharedos_gate::signals::interrupted() {
            bail!("interrupted by {sig} while the guest was booting");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}
