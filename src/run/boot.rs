//! Boot: the run's key and overlay, QEMU under the accelerator the choice gets through to, and
//! the guest's ready line with its host key on the serial console. QEMU ends on every path: a
//! failure drops it, and a signal ends it through the watchdog even under `--keep-vm`; only a
//! run that reached its end keeps it.

use super::{bounds, Bounds, Observed, VmRunOptions};
use crate::cmd::Cmd;
use crate::image::{self, ImageEntry};
use crate::vm::{self, qemu, Booted};
use anyhow::{Context, Result};
use sharedos_report::signals;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The running QEMU, for the watchdog; 0 when none.
static QEMU_PID: AtomicI32 = AtomicI32::new(0);
/// The running QEMU's console file, for the watchdog.
static CONSOLE: Mutex<Option<PathBuf>> = Mutex::new(None);
/// Set when the watchdog stopped QEMU because its console passed [`CONSOLE_CAP`].
static CONSOLE_FLOODED: AtomicBool = AtomicBool::new(false);

/// The most the guest's serial console may write into the report. QEMU writes the file itself,
/// so the cap is enforced by stopping QEMU: an honest boot and run write well under 1 MiB, and
/// a guest writing flat out under TCG (about 0.6 MB/s here) passes the cap by at most one
/// watchdog interval's worth.
pub const CONSOLE_CAP: u64 = 16 << 20;

fn kill_qemu() {
    let pid = QEMU_PID.load(Ordering::SeqCst);
    if pid > 0 {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

fn console_over_cap() -> bool {
    let path = CONSOLE.lock().ok().and_then(|c| c.clone());
    path.and_then(|p| std::fs::symlink_metadata(p).ok())
        .is_some_and(|m| m.len() > CONSOLE_CAP)
}

/// Whether the watchdog stopped this run's QEMU for writing too much to its console.
pub fn console_flooded() -> bool {
    CONSOLE_FLOODED.load(Ordering::SeqCst)
}

/// Ctrl-C and SIGTERM only set a flag; a blocking SSH read would not see it. This thread ends
/// QEMU when the flag rises, which breaks the session, so the run fails over to its partial
/// report and its cleanup at once. It ends QEMU the same way when the guest's console passes
/// [`CONSOLE_CAP`]: a guest must not fill the host's disk through its UART.
pub fn start_signal_watchdog() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("signal-watchdog".into())
            .spawn(|| loop {
                if signals::interrupted().is_some() {
                    kill_qemu();
                    return;
                }
                if QEMU_PID.load(Ordering::SeqCst) > 0 && console_over_cap() {
                    CONSOLE_FLOODED.store(true, Ordering::SeqCst);
                    kill_qemu();
                }
                std::thread::sleep(Duration::from_millis(100));
            });
    });
}

/// The run's private scratch (overlay, client key): mode 0700, removed at the end unless the VM
/// is kept.
pub struct RunDir {
    pub path: PathBuf,
    keep: bool,
}

impl RunDir {
    fn create(id: &str) -> Result<RunDir> {
        use std::os::unix::fs::DirBuilderExt;
        let path =
            std::env::temp_dir().join(format!("sharedos-rig-run-{}-{id}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating the run directory {}", path.display()))?;
        Ok(RunDir { path, keep: false })
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// A guest that said it is ready, and how to reach it.
pub struct Vm {
    /// When QEMU was first started: boot_to_ssh runs from here to the SSH login.
    pub started: Instant,
    pub booted: Booted,
    pub port: u16,
    pub host_key: String,
    pub key: PathBuf,
    pub run_dir: RunDir,
}

impl Vm {
    pub fn bounds(&self) -> Bounds {
        bounds(self.booted.accel)
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        QEMU_PID.store(0, Ordering::SeqCst);
    }
}

pub fn short_id() -> String {
    sharedos_report::random::random_hex(3).unwrap_or_else(|_| format!("{:06x}", std::process::id()))
}

/// A free loopback port. Another process may take it before QEMU binds it; the boot retries
/// with a new port when QEMU says so.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// The run's client key, made fresh.
pub fn keygen_cmd(run_dir: &Path) -> Cmd {
    crate::ssh::keygen_cmd(&run_dir.join("id_ed25519"))
}

/// The run's overlay on the cached disk.
pub fn overlay_cmd(disk: &Path, run_dir: &Path) -> Cmd {
    qemu::overlay_cmd(disk, &run_dir.join("overlay.qcow2"))
}

/// The kernel command line: the image's own plus the run's public key.
pub fn kernel_append(pubkey_line: &str) -> Result<String> {
    Ok(format!(
        "{} {}",
        image::contract::kernel_cmdline(),
        image::contract::authorized_key_param(pubkey_line)?
    ))
}

/// Where the guest's files are, for a QEMU line; the plan passes placeholders.
pub struct Media {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub overlay: PathBuf,
    pub append: String,
}

/// The vm-run's QEMU, for one accelerator.
pub fn qemu_spec(
    opts: &VmRunOptions,
    id: &str,
    accel: qemu::Accel,
    media: &Media,
    serial_log: &Path,
    port: u16,
    sandbox: bool,
) -> qemu::QemuSpec {
    qemu::QemuSpec {
        name: format!("sharedos-rig-{id}"),
        accel,
        memory_mib: opts.memory_mib,
        cpus: opts.cpus,
        kernel: media.kernel.clone(),
        initrd: media.initrd.clone(),
        overlay: media.overlay.clone(),
        append: media.append.clone(),
        serial_log: serial_log.to_path_buf(),
        ssh_port: port,
        sandbox,
    }
}

/// A quick tool of the run; a failure names its command line, status and stderr.
fn run_tool(cmd: &Cmd, missing_hint: &str) -> Result<String> {
    crate::cmd::capture(cmd).context(missing_hint.to_string())
}

/// Key, overlay, QEMU, and the wait for the guest's ready line.
pub fn boot(opts: &VmRunOptions, entry: &ImageEntry, obs: &mut Observed) -> Result<Vm> {
    let id = short_id();
    let run_dir = RunDir::create(&id)?;
    run_tool(
        &keygen_cmd(&run_dir.path),
        "making the run's SSH key (ssh-keygen comes with openssh-client)",
    )?;
    let pubkey = std::fs::read_to_string(run_dir.path.join("id_ed25519.pub"))
        .context("reading the run's public key")?;
    run_tool(
        &overlay_cmd(&entry.disk(), &run_dir.path),
        "making the run's overlay (qemu-img comes with qemu-utils)",
    )?;
    let media = Media {
        kernel: entry.kernel(),
        initrd: entry.initrd(),
        overlay: run_dir.path.join("overlay.qcow2"),
        append: kernel_append(&pubkey)?,
    };
    let sandbox = vm::sandbox_available();
    let serial_log = obs.report_dir.join("serial.log");
    let qemu_log = obs.report_dir.join("qemu.log");

    let t = Instant::now();
    let result = start_and_wait(opts, &id, &media, &serial_log, &qemu_log, sandbox, obs);
    if result.is_err() {
        obs.phase("boot_to_ssh", t);
    }
    let (booted, port, console) = result?;
    let host_key = console
        .host_key
        .context("the guest said it is ready but printed no host key")?;
    Ok(Vm {
        started: t,
        booted,
        port,
        host_key,
        key: run_dir.path.join("id_ed25519"),
        run_dir,
    })
}

fn start_and_wait(
    opts: &VmRunOptions,
    id: &str,
    media: &Media,
    serial_log: &Path,
    qemu_log: &Path,
    sandbox: bool,
    obs: &mut Observed,
) -> Result<(Booted, u16, image::contract::ConsoleState)> {
    let mut attempt = 0;
    loop {
        attempt += 1;
        let port = free_port()?;
        let spec = qemu_spec(opts, id, qemu::Accel::Tcg, media, serial_log, port, sandbox);
        let mut booted = vm::boot(opts.accel, &spec, qemu_log, opts.keep_vm, &mut |s| {
            super::progress().note(s)
        })?;
        if let Ok(mut c) = CONSOLE.lock() {
            *c = Some(serial_log.to_path_buf());
        }
        QEMU_PID.store(booted.qemu.pid as i32, Ordering::SeqCst);
        obs.vm.accel = booted.accel.as_str().into();
        obs.vm.accel_reason = booted.accel_reason.clone();
        obs.vm.cpu_model = booted.accel.cpu_model().into();
        obs.vm.qemu_argv = booted.cmd.argv.clone();
        super::progress().note(&format!(
            "booting (QEMU pid {}, ssh port {port}) ...",
            booted.qemu.pid
        ));
        let limit = bounds(booted.accel).boot;
        match vm::wait_ready(&mut booted, serial_log, limit) {
            Ok(s) => return Ok((booted, port, s)),
            Err(e) => {
                let log = vm::serial::log_tail(qemu_log);
                // Another process took the port between our probe and QEMU's bind.
                if attempt < 3 && log.contains("hostfwd") {
                    super::progress()
                        .note(&format!("port {port} was taken; retrying with another"));
                    continue;
                }
                let qemu_said = sharedos_report::text::tail(&log, 5, 1500);
                if qemu_said.is_empty() {
                    return Err(e);
                }
                return Err(e.context(format!("QEMU said: {qemu_said}")));
            }
        }
    }
}

/// The run reached its end: with `--keep-vm` QEMU and the run directory stay, and the way in is
/// printed; otherwise QEMU is stopped.
pub fn end(vm: &mut Vm, keep_vm: bool) {
    QEMU_PID.store(0, Ordering::SeqCst);
    let interrupted = signals::interrupted();
    if let (true, Some(sig)) = (keep_vm, interrupted) {
        super::progress().note(&format!("--keep-vm: not kept, {sig} arrived"));
    }
    if keep_vm && interrupted.is_none() {
        vm.booted.qemu.keep = true;
        vm.run_dir.keep = true;
        super::progress().note(&format!("--keep-vm: QEMU pid {} keeps running; ssh -i {} -p {} -o StrictHostKeyChecking=no root@127.0.0.1 (host key {}); run dir {}",
            vm.booted.qemu.pid,
            vm.key.display(),
            vm.port,
            vm.host_key,
            vm.run_dir.path.display()
        ));
    } else {
        vm.booted.qemu.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn append_carries_the_key_without_spaces() {
        let a = kernel_append("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1 sharedos-rig\n").unwrap();
        assert!(a.ends_with("sharedos.authorized_key=ssh-ed25519,AAAAC3NzaC1lZDI1NTE5AAAAIE1"));
        assert!(a.contains("console=ttyS0"));
    }
}
