//! The accelerator: KVM or TCG, forced or chosen by a probe. `auto` tries KVM and watches the
//! console for the kernel's banner; on no progress it ends that QEMU, says why, and starts
//! again under TCG. Never silently: the reason goes with the choice.

use super::event::{Event, Sink};
use super::process::QemuProcess;
use super::qemu::Accel;
use super::serial;
use crate::cmd::Cmd;
use anyhow::{bail, Result};
use std::path::Path;
use std::time::{Duration, Instant};

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum AccelChoice {
    /// KVM when /dev/kvm opens read-write and the kernel shows boot progress quickly, else TCG.
    Auto,
    Kvm,
    Tcg,
}

impl AccelChoice {
    pub fn as_str(self) -> &'static str {
        match self {
            AccelChoice::Auto => "auto",
            AccelChoice::Kvm => "kvm",
            AccelChoice::Tcg => "tcg",
        }
    }

    /// The accelerators a start may run under, in the order it tries them.
    pub fn tries(self) -> Vec<Accel> {
        match self {
            AccelChoice::Tcg => vec![Accel::Tcg],
            AccelChoice::Kvm => vec![Accel::Kvm],
            AccelChoice::Auto => vec![Accel::Kvm, Accel::Tcg],
        }
    }

    /// When `accel` runs under this choice, for the plan; empty when it is forced.
    pub fn when(self, accel: Accel) -> String {
        match (self, accel) {
            (AccelChoice::Auto, Accel::Kvm) => format!(
                "auto: only if /dev/kvm opens read-write; kept if 'Linux version' shows on the console within {} s",
                KVM_PROBE.as_secs()
            ),
            (AccelChoice::Auto, Accel::Tcg) => "auto: otherwise".into(),
            _ => String::new(),
        }
    }
}

/// How long KVM gets to show the kernel banner on the serial console. Under TCG the banner
/// appears within about a second even on a loaded host (measured on this project's machines).
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

/// A QEMU running under the accelerator the choice got through to.
pub struct Started {
    pub qemu: QemuProcess,
    pub accel: Accel,
    /// Why this accelerator, including any failed KVM attempt.
    pub reason: String,
    pub cmd: Cmd,
}

/// Where a start's QEMU writes: its guest's console and its own output.
#[derive(Clone, Copy)]
pub struct Logs<'a> {
    pub serial: &'a Path,
    pub qemu: &'a Path,
}

/// Starts QEMU as `cmd_for` builds it for an accelerator (its serial console must go to
/// `logs.serial`), under the accelerator `choice` gets through to, and sends the choice and its
/// reason. The floor starts through here too, so it runs under the accelerator a session gets.
pub fn start(
    choice: AccelChoice,
    cmd_for: &dyn Fn(Accel) -> Cmd,
    logs: Logs,
    may_outlive: bool,
    sink: Sink,
) -> Result<Started> {
    let started = match choice {
        AccelChoice::Tcg => spawn(
            Accel::Tcg,
            "forced with --accel tcg".into(),
            cmd_for,
            logs,
            may_outlive,
        )?,
        AccelChoice::Kvm => {
            if let Err(why) = kvm_openable() {
                bail!("--accel kvm: {why}; use --accel tcg or --accel auto");
            }
            spawn(
                Accel::Kvm,
                "forced with --accel kvm".into(),
                cmd_for,
                logs,
                may_outlive,
            )?
        }
        AccelChoice::Auto => auto(cmd_for, logs, may_outlive)?,
    };
    sink(&Event::Accel {
        accel: started.accel,
        reason: started.reason.clone(),
    });
    Ok(started)
}

fn spawn(
    accel: Accel,
    reason: String,
    cmd_for: &dyn Fn(Accel) -> Cmd,
    logs: Logs,
    may_outlive: bool,
) -> Result<Started> {
    let cmd = cmd_for(accel);
    // A fresh console log per attempt: the probe reads only this boot's lines.
    let _ = std::fs::remove_file(logs.serial);
    Ok(Started {
        qemu: QemuProcess::spawn(&cmd, logs.qemu, logs.serial, may_outlive)?,
        accel,
        reason,
        cmd,
    })
}

/// KVM where it opens and the kernel shows progress under it, else TCG with the reason.
fn auto(cmd_for: &dyn Fn(Accel) -> Cmd, logs: Logs, may_outlive: bool) -> Result<Started> {
    let tcg = |why: String| spawn(Accel::Tcg, why, cmd_for, logs, may_outlive);
    if let Err(why) = kvm_openable() {
        return tcg(format!("auto: {why}"));
    }
    let kvm = spawn(Accel::Kvm, String::new(), cmd_for, logs, may_outlive)?;
    match probe_kvm(kvm, logs)? {
        Ok(kvm) => Ok(kvm),
        Err(why) => tcg(why),
    }
}

/// Watches KVM's boot for the kernel banner: Ok with the QEMU that showed it, or Err with why
/// KVM was abandoned (that QEMU ended).
fn probe_kvm(mut kvm: Started, logs: Logs) -> Result<Result<Started, String>> {
    let started = Instant::now();
    loop {
        if serial::read(logs.serial).kernel_started {
            kvm.reason = format!(
                "auto: /dev/kvm opened read-write and the kernel banner appeared after {:.1} s",
                started.elapsed().as_secs_f64()
            );
            return Ok(Ok(kvm));
        }
        if let Some(how) = kvm.qemu.exited() {
            let log = serial::log_tail(logs.qemu);
            let last = log.lines().last().unwrap_or("");
            return Ok(Err(format!(
                "auto: QEMU under KVM exited at once ({how}: {last}); fell back"
            )));
        }
        if started.elapsed() >= KVM_PROBE {
            kvm.qemu.stop();
            // Read before the rename below moves the log away.
            let last = serial::tail(logs.serial, 1);
            // Kept as evidence of why KVM was abandoned.
            let _ = std::fs::rename(
                logs.serial,
                logs.serial.with_file_name("serial-kvm-probe.log"),
            );
            return Ok(Err(format!(
                "auto: under KVM the kernel showed no boot progress on the serial console within {} s (last: {last:?}); killed that QEMU and fell back",
                KVM_PROBE.as_secs(),
            )));
        }
        if let Some(sig) = sharedos_report::signals::interrupted() {
            bail!("interrupted by {sig} while probing KVM");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_tries_kvm_then_tcg() {
        assert_eq!(AccelChoice::Auto.tries(), vec![Accel::Kvm, Accel::Tcg]);
        assert_eq!(AccelChoice::Tcg.tries(), vec![Accel::Tcg]);
        assert!(AccelChoice::Auto.when(Accel::Kvm).contains("within 8 s"));
        assert_eq!(AccelChoice::Kvm.when(Accel::Kvm), "");
    }
}
