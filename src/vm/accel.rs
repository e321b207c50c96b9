//! The accelerator: KVM or TCG, forced or chosen by a probe. `auto` tries KVM and watches the
//! console for the kernel's banner; on no progress it ends that QEMU, says why, and starts
//! again under TCG. Never silently: the reason goes with the choice. The probe's verdict is
//! kept in the image cache (`accel_cache`) for this host boot, QEMU and guest kernel, so a KVM
//! that hangs costs its probe once.

use super::accel_cache::{self, Lookup, Spot};
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
                "auto: only if /dev/kvm opens read-write; kept if 'Linux version' shows on the console within {} s; not tried while the verdict cached for this host boot, QEMU and kernel is tcg",
                KVM_PROBE.as_secs()
            ),
            (AccelChoice::Auto, Accel::Tcg) => {
                "auto: otherwise, or at once on a cached tcg verdict".into()
            }
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
/// `cache`, when given, is where `auto` keeps its verdict for the guest kernel it boots;
/// `--accel kvm|tcg` never reads or writes it.
pub fn start(
    choice: AccelChoice,
    cache: Option<&Spot>,
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
        AccelChoice::Auto => match cache {
            Some(spot) => auto_cached(spot, cmd_for, logs, may_outlive, sink)?,
            None => auto(cmd_for, logs, may_outlive)?.0,
        },
    };
    sink(&Event::Accel {
        accel: started.accel,
        reason: started.reason.clone(),
    });
    Ok(started)
}

/// The accelerator a session would get without starting anything: forced, or `auto` where
/// KVM does not open or its cached verdict holds. None: only a probe can tell (or `--accel
/// kvm` cannot work, which the cold path reports). A resume needs it before its QEMU starts,
/// since a snapshot belongs to one accelerator.
pub fn settled(choice: AccelChoice, cache: Option<&Spot>) -> Option<(Accel, String)> {
    match choice {
        AccelChoice::Tcg => Some((Accel::Tcg, "forced with --accel tcg".into())),
        AccelChoice::Kvm => kvm_openable()
            .ok()
            .map(|()| (Accel::Kvm, "forced with --accel kvm".into())),
        AccelChoice::Auto => {
            if let Err(why) = kvm_openable() {
                return Some((Accel::Tcg, format!("auto: {why}")));
            }
            let spot = cache?;
            let key = cache_key(spot).ok()?;
            let bytes = accel_cache::read(&spot.path()).ok()?;
            match accel_cache::decide(&key, bytes.as_deref()) {
                Lookup::Hit(v) => Some((
                    v.accel,
                    format!(
                        "auto: cached verdict of {} for this host boot, QEMU and guest kernel: {}",
                        v.decided_at,
                        v.reason.strip_prefix("auto: ").unwrap_or(&v.reason)
                    ),
                )),
                Lookup::Miss(_) => None,
            }
        }
    }
}

/// QEMU under `accel`, for `reason`, sending the choice as [`start`] does. The console log is
/// left as it is: a resumed guest's console goes on from the saved boot's.
pub fn start_as(
    accel: Accel,
    reason: String,
    cmd_for: &dyn Fn(Accel) -> Cmd,
    logs: Logs,
    may_outlive: bool,
    sink: Sink,
) -> Result<Started> {
    let cmd = cmd_for(accel);
    let started = Started {
        qemu: QemuProcess::spawn(&cmd, logs.qemu, logs.serial, may_outlive)?,
        accel,
        reason,
        cmd,
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

/// KVM where it opens and the kernel shows progress under it, else TCG with the reason; and
/// whether the probe ran (only a probe's verdict is worth keeping: the rest costs nothing).
fn auto(cmd_for: &dyn Fn(Accel) -> Cmd, logs: Logs, may_outlive: bool) -> Result<(Started, bool)> {
    let tcg = |why: String| spawn(Accel::Tcg, why, cmd_for, logs, may_outlive);
    if let Err(why) = kvm_openable() {
        return Ok((tcg(format!("auto: {why}"))?, false));
    }
    let kvm = spawn(Accel::Kvm, String::new(), cmd_for, logs, may_outlive)?;
    match probe_kvm(kvm, logs)? {
        Ok(kvm) => Ok((kvm, true)),
        Err(why) => Ok((tcg(why)?, true)),
    }
}

/// `auto` with the verdict kept at `spot`. A TCG verdict boots TCG at once. A KVM verdict
/// still watches for the banner, which costs nothing while KVM works and falls back if it
/// stopped working. No verdict, or one that does not hold for this host boot, QEMU and kernel:
/// the probe runs and its verdict is kept. A cache that cannot be read or written only costs
/// the probe, and says so.
fn auto_cached(
    spot: &Spot,
    cmd_for: &dyn Fn(Accel) -> Cmd,
    logs: Logs,
    may_outlive: bool,
    sink: Sink,
) -> Result<Started> {
    // Whether this user may open /dev/kvm is asked every time: it is instant, and it may differ
    // between users of one cache.
    if kvm_openable().is_err() {
        return Ok(auto(cmd_for, logs, may_outlive)?.0);
    }
    let path = spot.path();
    let note = |sink: Sink, text: String| {
        sink(&Event::AccelCache {
            note: format!("{text} ({})", path.display()),
        })
    };
    let key = match cache_key(spot) {
        Ok(k) => k,
        Err(e) => {
            note(sink, format!("auto: not using the verdict cache ({e:#})"));
            return Ok(auto(cmd_for, logs, may_outlive)?.0);
        }
    };
    let lookup = match accel_cache::read(&path) {
        Ok(bytes) => accel_cache::decide(&key, bytes.as_deref()),
        Err(e) => Lookup::Miss(format!("the cached verdict is unreadable ({e:#})")),
    };
    let (started, probed) = match lookup {
        Lookup::Hit(v) if v.accel == Accel::Tcg => {
            let reason = format!(
                "auto: cached verdict of {} for this host boot, QEMU and guest kernel: {}",
                v.decided_at,
                v.reason.strip_prefix("auto: ").unwrap_or(&v.reason)
            );
            note(
                sink,
                format!("auto: using the cached verdict of {}: tcg", v.decided_at),
            );
            return spawn(Accel::Tcg, reason, cmd_for, logs, may_outlive);
        }
        Lookup::Hit(v) => {
            note(
                sink,
                format!(
                    "auto: cached verdict of {} is kvm: watching for the kernel banner",
                    v.decided_at
                ),
            );
            let (mut started, probed) = auto(cmd_for, logs, may_outlive)?;
            if started.accel == Accel::Kvm {
                started.reason = format!(
                    "auto: cached verdict of {} was kvm; {}",
                    v.decided_at,
                    started
                        .reason
                        .strip_prefix("auto: ")
                        .unwrap_or(&started.reason)
                );
                return Ok(started);
            }
            (started, probed)
        }
        Lookup::Miss(why) => {
            note(
                sink,
                format!("auto: {why}: probing KVM (up to {} s)", KVM_PROBE.as_secs()),
            );
            auto(cmd_for, logs, may_outlive)?
        }
    };
    if probed {
        let r = accel_cache::record(
            &key,
            started.accel,
            &started.reason,
            &sharedos_report::clock::now_rfc3339(),
        );
        match accel_cache::write(&path, &r) {
            Ok(()) => note(
                sink,
                format!("auto: verdict {} cached", started.accel.as_str()),
            ),
            Err(e) => note(sink, format!("auto: the verdict was not cached ({e:#})")),
        }
    }
    Ok(started)
}

/// This run's key: the host boot, the QEMU that runs, the guest kernel.
fn cache_key(spot: &Spot) -> Result<accel_cache::Key> {
    let k = &spot.kernel_sha256;
    if k.len() != 64 || !k.chars().all(|c| c.is_ascii_hexdigit()) {
        bail!("the guest kernel's sha256 is unknown");
    }
    Ok(accel_cache::Key {
        host_boot_id: accel_cache::host_boot_id()?,
        qemu_version: super::qemu_version()?,
        kernel_sha256: spot.kernel_sha256.clone(),
    })
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
