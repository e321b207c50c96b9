//! A cold boot and the login: a fresh key on the kernel command line and a fresh overlay, QEMU on
//! a free port (another when QEMU says the one it got was taken), the guest's ready line and the
//! host key it announced, "QEMU said: ..." on a failed boot, and the SSH session pinned to that
//! key.

use super::{
    bounds, free_port, kernel_append, key_path, keygen_cmd, overlay_cmd, qemu_cmd, GuestMedia,
    Instance, Opened, SessionSpec,
};
use crate::cmd;
use crate::image::contract::{self, ConsoleState};
use crate::vm::accel::{self, Logs, Started};
use crate::vm::event::{Event, Sink};
use crate::vm::serial;
use crate::vm::ssh::Guest;
use anyhow::{bail, Context, Result};
use sharedos_report::report::GuestStart;
use sharedos_report::signals;
use std::path::Path;
use std::time::{Duration, Instant};

/// A cold boot: a fresh key on the kernel command line, a fresh overlay on the image's disk.
pub(super) fn cold(
    spec: &SessionSpec,
    media: &GuestMedia,
    run_dir: &Path,
    reason: &str,
    sink: Sink,
) -> Result<Opened> {
    let public = new_key(run_dir)?;
    cmd::capture(&overlay_cmd(&media.disk, run_dir))
        .context("making the session's overlay (qemu-img comes with qemu-utils)")?;
    let inst = Instance::cold(
        run_dir,
        kernel_append(&contract::authorized_key_param(&public)?),
    );
    let up = boot(spec, media, inst, sink)?;
    let guest = login(&up, &key_path(run_dir), sink)?;
    Ok(Opened {
        up,
        guest,
        start: GuestStart {
            how: "cold".into(),
            reason: reason.into(),
            client_key: public_key_text(&public),
            ..GuestStart::default()
        },
        resumed_from: None,
        hold: Vec::new(),
    })
}

/// A public key line as the report keeps it: type and key, no comment.
pub(super) fn public_key_text(public: &str) -> String {
    public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Stage "key": a fresh client key in `dir` (anything a failed attempt left there goes first,
/// since ssh-keygen would ask before overwriting). Returns its public line.
pub(super) fn new_key(dir: &Path) -> Result<String> {
    let key = key_path(dir);
    for f in [
        key.clone(),
        key.with_extension("pub"),
        dir.join("overlay.qcow2"),
    ] {
        let _ = std::fs::remove_file(f);
    }
    cmd::capture(&keygen_cmd(dir))
        .context("making the session's SSH key (ssh-keygen comes with openssh-client)")?;
    std::fs::read_to_string(key.with_extension("pub")).context("reading the session's public key")
}

/// A QEMU whose guest said it is ready.
pub(super) struct Up {
    pub(super) started: Started,
    pub(super) port: u16,
    pub(super) host_key: String,
    /// QEMU's first start, the KVM probe included.
    pub(super) since: Instant,
}

/// How many ports a boot tries when QEMU finds each one taken.
const PORT_ATTEMPTS: u32 = 3;

/// Stage "boot": QEMU on a free port under the chosen accelerator, until the guest's ready line;
/// another port when QEMU says the one it got was taken meanwhile.
pub(super) fn boot(
    spec: &SessionSpec,
    media: &GuestMedia,
    mut inst: Instance,
    sink: Sink,
) -> Result<Up> {
    let since = Instant::now();
    let qemu_log = spec.qemu_log();
    for attempt in 1..=PORT_ATTEMPTS {
        inst.port = free_port()?;
        let mut started = start_qemu(spec, media, &inst, sink)?;
        match ready(&mut started, spec, sink) {
            Ok(host_key) => {
                return Ok(Up {
                    started,
                    port: inst.port,
                    host_key,
                    since,
                })
            }
            Err(_) if attempt < PORT_ATTEMPTS && port_taken(&qemu_log) => sink(&Event::PortRetry {
                port: inst.port,
                attempt: attempt + 1,
            }),
            Err(e) => return Err(with_qemu_said(e, &qemu_log)),
        }
    }
    unreachable!("the last attempt returns")
}

/// QEMU for `inst` under the accelerator the spec's choice gets through to.
fn start_qemu(
    spec: &SessionSpec,
    media: &GuestMedia,
    inst: &Instance,
    sink: Sink,
) -> Result<Started> {
    let (serial_log, qemu_log) = (spec.serial_log(), spec.qemu_log());
    let logs = Logs {
        serial: &serial_log,
        qemu: &qemu_log,
    };
    let cmd_for = |accel| qemu_cmd(spec, media, inst, accel);
    let started = accel::start(
        spec.accel,
        spec.accel_cache.as_ref(),
        &cmd_for,
        logs,
        spec.keep,
        sink,
    )?;
    booting(&started, inst.port, sink);
    Ok(started)
}

pub(super) fn booting(started: &Started, port: u16, sink: Sink) {
    sink(&Event::Booting {
        pid: started.qemu.pid,
        port,
        argv: started.cmd.argv.clone(),
    });
}

/// The guest's ready line, within the accelerator's bound: the host key it announced.
fn ready(started: &mut Started, spec: &SessionSpec, sink: Sink) -> Result<String> {
    let limit = bounds(started.accel).boot;
    let console = wait_ready(started, &spec.serial_log(), limit)?;
    let host_key = console
        .host_key
        .context("the guest said it is ready but printed no host key")?;
    sink(&Event::Ready {
        host_key: host_key.clone(),
    });
    Ok(host_key)
}

/// Whether QEMU could not set up the port forward: another process took the port between our
/// probe and QEMU's bind.
fn port_taken(qemu_log: &Path) -> bool {
    serial::log_tail(qemu_log).contains("hostfwd")
}

/// A failed boot's error, with the end of what QEMU itself printed.
pub(super) fn with_qemu_said(e: anyhow::Error, qemu_log: &Path) -> anyhow::Error {
    let said = sharedos_report::text::tail(&serial::log_tail(qemu_log), 5, 1500);
    if said.is_empty() {
        e
    } else {
        e.context(format!("QEMU said: {said}"))
    }
}

/// Waits until the guest's PID 1 says it is ready, QEMU exits, the guest reports an error, a
/// signal arrives, or `timeout` passes.
fn wait_ready(started: &mut Started, serial_log: &Path, timeout: Duration) -> Result<ConsoleState> {
    let since = Instant::now();
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
            bail!(
                "the guest kernel panicked: {}{}",
                sharedos_report::cause::kernel_message(p),
                serial::oops_said(&s)
            );
        }
        if s.ready {
            if s.host_key.is_none() {
                bail!("the guest said it is ready but printed no SHA256 host key fingerprint");
            }
            return Ok(s);
        }
        if let Some(how) = started.qemu.exited() {
            bail!(
                "QEMU exited ({how}) before the guest was ready; serial console tail:\n{}",
                serial::tail(serial_log, 15)
            );
        }
        if since.elapsed() >= timeout {
            bail!(
                "the guest was not ready within {} s under {} (no {} on the serial console); tail:\n{}",
                timeout.as_secs(),
                started.accel.as_str(),
                contract::MARK_READY,
                serial::tail(serial_log, 15)
            );
        }
        if let Some(sig) = signals::interrupted() {
            bail!("interrupted by {sig} while the guest was booting");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Stage "login": one SSH session, pinned to the host key the console announced.
fn login(up: &Up, key: &Path, sink: Sink) -> Result<Guest> {
    let guest = Guest::connect(up.port, &up.host_key, key, bounds(up.started.accel).ssh)
        .context("opening the SSH session to the guest")?;
    sink(&Event::LoggedIn {
        after: up.since.elapsed(),
    });
    Ok(guest)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_taken_port_is_told_from_other_failures() {
        let d = std::env::temp_dir().join(format!("session-port-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let log = d.join("qemu.log");
        std::fs::write(
            &log,
            "qemu-system-x86_64: -netdev user,id=n0,hostfwd=tcp:127.0.0.1:4-:22: Could not set up host forwarding rule 'tcp:127.0.0.1:4-:22'\n",
        )
        .unwrap();
        assert!(port_taken(&log));
        let e = with_qemu_said(anyhow::anyhow!("QEMU exited"), &log);
        assert!(
            format!("{e:#}").contains("QEMU said: qemu-system-x86_64: -netdev"),
            "{e:#}"
        );
        std::fs::write(
            &log,
            "qemu-system-x86_64: cannot set up guest memory 'pc.ram'\n",
        )
        .unwrap();
        assert!(!port_taken(&log));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
