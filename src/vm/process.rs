//! The QEMU process: started in its own process group, under the watchdog, killed with us even
//! if we are killed, and ended on every path by Drop.

use super::watchdog::{self, Watch};
use crate::cmd::{self, Cmd};
use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

pub struct QemuProcess {
    child: Option<Child>,
    /// Held while QEMU may still be running, given up before it is reaped.
    watch: Option<Watch>,
    pub pid: u32,
    /// Taken just before the spawn, so a measured lifetime includes QEMU's own start-up.
    pub started: Instant,
    /// `--keep-vm`, set only once the run reached its end: leave it running. Until then every
    /// path, a failure or a signal, ends it.
    keep: bool,
}

impl QemuProcess {
    /// Starts `qemu`, its output into `log`, its guest console (the file `console`) under the
    /// watchdog's cap. `may_outlive`: `--keep-vm` asked for QEMU to survive the rig, so it is
    /// not tied to the rig's death; Drop still ends it unless [`QemuProcess::keep`] was called.
    pub fn spawn(qemu: &Cmd, log: &Path, console: &Path, may_outlive: bool) -> Result<QemuProcess> {
        let out =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let err = out.try_clone()?;
        let mut cmd = qemu.command();
        cmd.stdout(out)
            .stderr(err)
            // Ctrl-C at the terminal reaches only the rig, which then ends QEMU itself.
            .process_group(0);
        if !may_outlive {
            // SAFETY: prctl is async-signal-safe. If the rig dies, even by SIGKILL, QEMU dies
            // too.
            unsafe {
                cmd.pre_exec(|| {
                    nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL)
                        .map_err(std::io::Error::from)
                });
            }
        }
        let started = Instant::now();
        let child = cmd.spawn().with_context(|| {
            format!(
                "starting {}: is QEMU installed? (Debian/Ubuntu: apt-get install qemu-system-x86)",
                qemu.argv[0]
            )
        })?;
        Ok(QemuProcess {
            pid: child.id(),
            watch: Some(watchdog::watch(child.id(), console)),
            child: Some(child),
            started,
            keep: false,
        })
    }

    /// Waits for QEMU to exit on its own, up to `timeout` after its spawn; returns how it ended
    /// and its lifetime from spawn to the first poll that saw it gone, or None on timeout (QEMU
    /// is then still running, and Drop ends it). The poll is short because the lifetime is a
    /// benchmark figure: each poll can add up to one interval to it.
    pub fn wait_exit(&mut self, timeout: Duration) -> Result<Option<(String, Duration)>> {
        const POLL: Duration = Duration::from_millis(2);
        loop {
            if let Some(how) = self.exited() {
                return Ok(Some((how, self.started.elapsed())));
            }
            if self.started.elapsed() >= timeout {
                return Ok(None);
            }
            if let Some(sig) = sharedos_report::signals::interrupted() {
                anyhow::bail!("interrupted by {sig} while waiting for QEMU to exit");
            }
            std::thread::sleep(POLL);
        }
    }

    /// Waits up to `wait` from now (not from its spawn, as [`Self::wait_exit`]) for QEMU to
    /// exit: for a QEMU told to quit after it ran for a while, such as one that saved its guest.
    pub fn wait_exit_from_now(&mut self, wait: Duration) -> Result<Option<String>> {
        let limit = self.started.elapsed().saturating_add(wait);
        Ok(self.wait_exit(limit)?.map(|(how, _)| how))
    }

    /// None while running, else how it ended.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        let how = match child.try_wait() {
            Ok(None) => return None,
            Ok(Some(s)) => s.to_string(),
            Err(e) => format!("unknown ({e})"),
        };
        self.watch = None;
        Some(how)
    }

    /// Leaves QEMU running past this handle: `--keep-vm` at the end of a run. Nothing watches
    /// it any more.
    pub fn keep(&mut self) {
        self.keep = true;
        self.watch = None;
    }

    /// SIGTERM, a short grace, then SIGKILL; always reaped.
    pub fn stop(&mut self) {
        self.watch = None;
        if let Some(mut child) = self.child.take() {
            cmd::end_group(&mut child, Duration::from_secs(5));
        }
    }
}

impl Drop for QemuProcess {
    fn drop(&mut self) {
        if !self.keep {
            self.stop();
        }
    }
}
