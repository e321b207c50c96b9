//! The QEMU process: started in its own process group, killed with us even if we are killed,
//! and ended on every path by Drop.

use crate::cmd::Cmd;
use anyhow::{Context, Result};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

pub struct QemuProcess {
    child: Option<Child>,
    pub pid: u32,
    /// Taken just before the spawn, so a measured lifetime includes QEMU's own start-up.
    pub started: Instant,
    /// `--keep-vm`, set only once the run reached its end: leave it running. Until then every
    /// path, a failure or a signal, ends it.
    pub keep: bool,
}

impl QemuProcess {
    /// `may_outlive`: `--keep-vm` asked for QEMU to survive the rig, so it is not tied to the
    /// rig's death; Drop still ends it unless `keep` is set.
    pub fn spawn(qemu: &Cmd, log: &Path, may_outlive: bool) -> Result<QemuProcess> {
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

    /// None while running, else how it ended.
    pub fn exited(&mut self) -> Option<String> {
        let child = self.child.as_mut()?;
        match child.try_wait() {
            Ok(None) => None,
            Ok(Some(s)) => Some(s.to_string()),
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// SIGTERM, a short grace, then SIGKILL; always reaped.
    pub fn stop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        // Already reaped: its pid may belong to another process by now.
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        let pid = nix::unistd::Pid::from_raw(child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let gone = sharedos_report::wait::until("QEMU to exit", Duration::from_secs(5), || {
            child.try_wait().ok().flatten()
        });
        if gone.is_err() {
            let _ = child.kill();
            let _ = child.wait();
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
