//! L3, the session layer: from a QEMU start to a pinned, logged-in SSH session. The QEMU
//! command lines (`qemu`, pure), the accelerator (`accel`, its `auto` verdict kept by
//! `accel_cache`), the QEMU process (`process`) and its `watchdog`, the serial console
//! (`serial`, read by `image::contract`), `ssh`, and `session`, which puts them together for
//! every client; `event` is what a session tells its client, and `floor` is the benchmark's
//! bare kernel boot. Nothing here prints or knows about run/.

pub mod accel;
pub mod accel_cache;
pub mod event;
pub mod floor;
pub mod process;
pub mod qemu;
pub mod qmp;
pub mod serial;
pub mod session;
pub mod snapshot;
pub mod ssh;
pub mod watchdog;

pub use accel::AccelChoice;
pub use event::{Event, Sink};
pub use session::{Fork, GuestMedia, Session, SessionSpec, Start};

use anyhow::{Context, Result};

use std::sync::OnceLock;

/// Whether this QEMU was built with its seccomp sandbox: `-sandbox` is then a known option, and
/// `-version` after it exits 0 without starting a machine. Asked once per process: the QEMU
/// on PATH does not change under a running rig, and a resume needs the answer several times.
pub fn sandbox_available() -> bool {
    static ANSWER: OnceLock<bool> = OnceLock::new();
    *ANSWER.get_or_init(|| {
        qemu::sandbox_probe_cmd()
            .command()
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    })
}

/// The first line of `qemu-system-x86_64 --version`, asked once per process as above. A
/// failure is kept too, so every caller reports the same one.
pub fn qemu_version() -> Result<String> {
    static ANSWER: OnceLock<std::result::Result<String, String>> = OnceLock::new();
    ANSWER
        .get_or_init(|| {
            crate::cmd::capture(&qemu::version_cmd())
                .map(|out| out.lines().next().unwrap_or("").trim().to_string())
                .map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(anyhow::Error::msg)
        .context("reading QEMU's version (Debian/Ubuntu: apt-get install qemu-system-x86)")
}
