//! The benchmark's floor: the image's own kernel booted bare under the accelerator a vm-run
//! would get, from QEMU's spawn to its exit after the kernel's no-root panic. It is what any
//! boot of that kernel in that QEMU costs, so the rig's phases can be read as multiples of it.

use super::accel::{self, AccelChoice, Logs};
use super::accel_cache::Spot;
use super::event::Sink;
use super::{qemu, serial};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;

/// One bare boot, timed.
#[derive(Debug, Clone)]
pub struct FloorBoot {
    pub accel: qemu::Accel,
    pub accel_reason: String,
    /// QEMU's spawn to its exit.
    pub elapsed: Duration,
    /// The console's panic line.
    pub panic: String,
}

/// A bare boot takes 2-3 s under TCG on a 2-core machine; far past that, something is wrong.
fn bound(accel: qemu::Accel) -> Duration {
    Duration::from_secs(15 * u64::from(accel.slowdown()))
}

/// What the kernel prints when it finds no root filesystem to mount.
const NO_ROOT: &str = "Unable to mount root fs";

/// Whether the console shows the panic the floor is meant to end in; otherwise an error naming
/// what it showed last. Any other end (another panic, no panic) would make the time mean
/// something else.
pub fn judge_console(text: &str) -> Result<String> {
    let state = crate::image::contract::parse_console(text);
    match state.panic {
        Some(p) if p.contains(NO_ROOT) => Ok(p),
        Some(p) => bail!(
            "the bare kernel panicked, but not for want of a root filesystem: {p}; console tail:\n{}",
            sharedos_report::text::tail(text, 15, 3000)
        ),
        None => bail!(
            "the bare kernel did not end in its no-root panic (no \"Kernel panic\" line); console tail:\n{}",
            sharedos_report::text::tail(text, 15, 3000)
        ),
    }
}

/// Boots `kernel` bare once, under `auto` on the verdict kept at `accel_cache` when given (the
/// same kernel a session boots, so the same verdict); `dir` receives `serial.log` and `qemu.log`. QEMU is ended on every
/// path: on an error, on a timeout and on Ctrl-C its process handle's Drop stops it.
pub fn boot_bare(
    choice: AccelChoice,
    accel_cache: Option<&Spot>,
    memory_mib: u64,
    cpus: u32,
    kernel: &Path,
    dir: &Path,
    sink: Sink,
) -> Result<FloorBoot> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("creating the floor's directory {}", dir.display()))?;
    let serial_log = dir.join("serial.log");
    let qemu_log = dir.join("qemu.log");
    let sandbox = super::sandbox_available();
    let cmd_for = |accel| qemu::floor_cmd(accel, memory_mib, cpus, kernel, &serial_log, sandbox);
    let logs = Logs {
        serial: &serial_log,
        qemu: &qemu_log,
    };
    let mut booted = accel::start(choice, accel_cache, &cmd_for, logs, false, sink)?;
    let limit = bound(booted.accel);
    let Some((how, elapsed)) = booted.qemu.wait_exit(limit)? else {
        bail!(
            "QEMU did not exit within {} s of its start under {} (the bare kernel should panic and QEMU stop at once); console tail:\n{}",
            limit.as_secs(),
            booted.accel.as_str(),
            serial::tail(&serial_log, 15)
        );
    };
    let bytes = std::fs::read(&serial_log)
        .with_context(|| format!("reading the floor's console {}", serial_log.display()))?;
    let panic = judge_console(&String::from_utf8_lossy(&bytes)).with_context(|| {
        let qemu_said = serial::log_tail(&qemu_log);
        format!(
            "QEMU exited ({how}) after {:.2} s; QEMU said: {}",
            elapsed.as_secs_f64(),
            sharedos_report::text::tail(&qemu_said, 5, 1500)
        )
    })?;
    Ok(FloorBoot {
        accel: booted.accel,
        accel_reason: booted.reason.clone(),
        elapsed,
        panic,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_no_root_panic_counts() {
        let ok = "[    0.000000] Linux version 6.1.0-50-cloud-amd64\n\
                  [    1.813738] VFS: Cannot open root device \"(null)\" or unknown-block(0,0): error -6\n\
                  [    1.814189] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)\n\
                  [    1.815614]  panic+0x118/0x2f4\n";
        assert!(judge_console(ok).unwrap().contains(NO_ROOT));

        let other = "Linux version 6.1\nKernel panic - not syncing: Attempted to kill init!\n";
        let e = format!("{:#}", judge_console(other).unwrap_err());
        assert!(e.contains("not for want of a root filesystem"), "{e}");
        assert!(e.contains("Attempted to kill init"), "{e}");

        let none = "Linux version 6.1\nProbing EDD (edd=off to disable)... ok\n";
        let e = format!("{:#}", judge_console(none).unwrap_err());
        assert!(
            e.contains("Probing EDD"),
            "the error shows the console's last lines: {e}"
        );
    }
}
