//! `Session`: everything from a QEMU start to a pinned, logged-in SSH session, and the end of
//! that QEMU on every path. The run directory (mode 0700) with the client key and the overlay;
//! a free port, and another when QEMU says the forward's port was taken; the accelerator; the
//! ready line and the host key pinned from the console; the watchdog; "QEMU said: ..." on a
//! failed boot; `--keep-vm`. vm-run, vm-exec, the image builder's VM and the bench all open
//! guests through here; a spec says what differs between them.
//!
//! How the guest comes up is one value of [`Start`], so that another way (a resume from a
//! snapshot) changes the stages that differ and adds no second boot path.
//!
//! Here: what a session is and what it runs; `boot`: a cold boot and the login; `resume`: the
//! resume path; `make`: snapshot making.

mod boot;
mod make;
mod resume;

pub use resume::{agent_answer, agent_setup_line, snapshot_found};

use boot::{cold, Up};
use make::save_and_quit;
use resume::{resume, resume_or_cold};

use super::accel::AccelChoice;
use super::event::{Event, Sink};
use super::qemu::{self, Accel, Network};
use super::snapshot::{self, Record};
use super::ssh::{self, Guest};
use crate::cmd::Cmd;
use crate::image::contract;
use crate::image::ImageEntry;
use anyhow::{bail, Context, Result};
use sharedos_report::report::GuestStart;
use sharedos_report::signals;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// How the guest comes up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// The image's kernel boots from a fresh overlay on its disk; the client key goes in on the
    /// kernel command line.
    Cold,
    /// From the image's snapshot for these settings, made first if there is none (a cold boot
    /// saved once it is ready); a cold boot when no snapshot can be used, with the reason.
    Resume,
}

/// What differs between the sessions the rig opens.
#[derive(Debug, Clone)]
pub struct SessionSpec {
    /// QEMU's `-name`.
    pub name: String,
    pub accel: AccelChoice,
    /// Where `--accel auto` keeps its verdict for the guest's kernel; None: it probes every time.
    pub accel_cache: Option<super::accel_cache::Spot>,
    pub memory_mib: u64,
    pub cpus: u32,
    pub network: Network,
    /// Where the guest's console (`serial.log`) and QEMU's output (`qemu.log`) go.
    pub logs: PathBuf,
    /// `--keep-vm`: QEMU may outlive the rig, and stays when the client ends the session
    /// having reached its end ([`Session::end`]) with no signal.
    pub keep: bool,
    pub start: Start,
    /// Where the image's snapshots are kept; None: every start is cold.
    pub snapshot: Option<snapshot::Spot>,
    /// A resume's file to find in the guest: the layer over the image's snapshot that holds
    /// it is resumed instead, made first when there is none. None: the plain snapshot.
    pub layer: Option<Layer>,
    /// The guest's RAM in a file: a template's or a clone's (`qemu::RamFile`). Not part of a
    /// snapshot's key: the saved state is the same either way, and snapshots are made with
    /// QEMU's own memory.
    pub ram: Option<qemu::RamFile>,
}

/// A file a snapshot layer holds in the guest (the gate binary): what decides the layer is its
/// sha256, which its key carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Layer {
    /// The file on the host.
    pub file: PathBuf,
    /// Its sha256, as the host hashed it.
    pub sha256: String,
    /// Where it goes in the guest (absolute).
    pub guest_path: String,
    /// Its mode there.
    pub mode: u32,
    /// What the guest runs once the file is in, before it is saved: the layer's guest then
    /// holds in its caches what that command read. Its exit status is not looked at; it must
    /// end within the bound [`make_layer`](session::make) gives it.
    pub warm_up: Option<String>,
}

/// The guest's command that hashes `guest_path`: its first word is the sha256, or the command
/// fails when the file is missing.
pub fn sha256_command(guest_path: &str) -> String {
    format!("sha256sum {guest_path}")
}

/// Whether the first word of what [`sha256_command`] printed in the guest is `want`.
pub fn sha256_matches(printed: &str, want: &str) -> bool {
    !want.is_empty() && printed.split_whitespace().next() == Some(want)
}

impl SessionSpec {
    pub fn serial_log(&self) -> PathBuf {
        self.logs.join("serial.log")
    }

    pub fn qemu_log(&self) -> PathBuf {
        self.logs.join("qemu.log")
    }
}

/// The image's files a guest boots from.
#[derive(Debug, Clone)]
pub struct GuestMedia {
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    /// Only ever read: every session writes to an overlay of its own.
    pub disk: PathBuf,
}

impl GuestMedia {
    pub fn of(entry: &ImageEntry) -> GuestMedia {
        GuestMedia {
            kernel: entry.kernel(),
            initrd: entry.initrd(),
            disk: entry.disk(),
        }
    }
}

/// Bounds of a session that scale with the accelerator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// QEMU's start to the guest's ready line.
    pub boot: Duration,
    /// The SSH login, and each blocking SSH call after it unless the client says otherwise.
    pub ssh: Duration,
}

pub fn bounds(accel: Accel) -> Bounds {
    let k = u64::from(accel.slowdown());
    Bounds {
        boot: Duration::from_secs(45 * k),
        ssh: Duration::from_secs(15 * k),
    }
}

/// A few hex digits naming one run, for its directories and its QEMU.
pub fn short_id() -> String {
    sharedos_report::random::random_hex(3).unwrap_or_else(|_| format!("{:06x}", std::process::id()))
}

/// A free loopback port. Another process may take it before QEMU binds it; the session retries
/// with a new port when QEMU says so.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

/// The session's private scratch (client key, overlay): mode 0700, removed at the end unless
/// the VM is kept.
struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl RunDir {
    fn create() -> Result<RunDir> {
        use std::os::unix::fs::DirBuilderExt;
        let path = std::env::temp_dir().join(format!(
            "sharedos-rig-run-{}-{}",
            std::process::id(),
            short_id()
        ));
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

/// The client key in the run directory.
pub fn key_path(run_dir: &Path) -> PathBuf {
    run_dir.join("id_ed25519")
}

/// The session's client key, made fresh.
pub fn keygen_cmd(run_dir: &Path) -> Cmd {
    ssh::keygen_cmd(&key_path(run_dir))
}

/// The session's overlay on the image's disk.
pub fn overlay_cmd(disk: &Path, run_dir: &Path) -> Cmd {
    qemu::overlay_cmd(disk, &run_dir.join("overlay.qcow2"))
}

/// The kernel command line: the image's own plus the key parameter.
pub fn kernel_append(key_param: &str) -> String {
    format!("{} {key_param}", contract::kernel_cmdline())
}

/// What a QEMU line holds that exists only once a session is under way; the plan shows
/// placeholders for it.
#[derive(Debug, Clone)]
pub struct Instance {
    pub overlay: PathBuf,
    pub qmp: PathBuf,
    pub append: String,
    pub port: u16,
    pub sandbox: bool,
    /// A resume's socket for the saved state.
    pub incoming: Option<PathBuf>,
    pub stopped: bool,
    /// TCG's translation cache bound: not part of a snapshot's key, since no saved state holds
    /// the cache.
    pub tb_size_mib: Option<u64>,
}

impl Instance {
    /// A session's QEMU in `run_dir`, booting with `append`.
    fn cold(run_dir: &Path, append: String) -> Instance {
        Instance {
            overlay: run_dir.join("overlay.qcow2"),
            qmp: run_dir.join("qmp.sock"),
            append,
            port: 0,
            sandbox: super::sandbox_available(),
            incoming: None,
            stopped: false,
            tb_size_mib: Some(qemu::TB_SIZE_MIB),
        }
    }

    /// A resume's QEMU in `run_dir`: fed the saved state on `incoming.sock`, and started stopped
    /// (`-S`), since its guest is let go only once that state hashed as recorded.
    fn resume(run_dir: &Path, append: String) -> Instance {
        Instance {
            incoming: Some(run_dir.join("incoming.sock")),
            stopped: true,
            ..Instance::cold(run_dir, append)
        }
    }
}

/// The session's QEMU under `accel`.
pub fn qemu_cmd(spec: &SessionSpec, media: &GuestMedia, inst: &Instance, accel: Accel) -> Cmd {
    qemu::qemu_cmd(&qemu::QemuSpec {
        name: spec.name.clone(),
        accel,
        memory_mib: spec.memory_mib,
        cpus: spec.cpus,
        kernel: media.kernel.clone(),
        initrd: media.initrd.clone(),
        overlay: inst.overlay.clone(),
        append: inst.append.clone(),
        serial_log: spec.serial_log(),
        ssh_port: inst.port,
        network: spec.network,
        sandbox: inst.sandbox,
        qmp: inst.qmp.clone(),
        incoming: inst.incoming.clone(),
        stopped: inst.stopped,
        ram: spec.ram.clone(),
        tb_size_mib: inst.tb_size_mib,
    })
}

/// The commands a session runs, as the plan prints them.
pub struct SessionPlan {
    pub keygen: Cmd,
    pub overlay: Cmd,
    /// The QEMU line under each accelerator the choice may try, in order, with when it runs.
    pub qemu: Vec<(Accel, String, Cmd)>,
    /// Whether this QEMU has `-sandbox`.
    pub sandbox: bool,
    /// A resume: the run's overlay on the snapshot's disk, and the QEMU line under each
    /// accelerator; the cold lines above then make the snapshot when there is none.
    pub resume: Option<(Cmd, Vec<(Accel, Cmd)>)>,
}

/// What opening a session would run, from the same builders, with placeholders for the run
/// directory, the key and the port.
pub fn plan(spec: &SessionSpec, media: &GuestMedia) -> SessionPlan {
    let run_dir = PathBuf::from("<run dir>");
    let inst = Instance::cold(
        &run_dir,
        kernel_append(&format!("{}<run key>", contract::AUTHORIZED_KEY)),
    );
    SessionPlan {
        keygen: keygen_cmd(&run_dir),
        overlay: overlay_cmd(&media.disk, &run_dir),
        qemu: spec
            .accel
            .tries()
            .into_iter()
            .map(|a| (a, spec.accel.when(a), qemu_cmd(spec, media, &inst, a)))
            .collect(),
        sandbox: inst.sandbox,
        resume: (spec.start == Start::Resume).then(|| {
            let snap = PathBuf::from("<snapshot>");
            let inst = Instance::resume(
                &run_dir,
                kernel_append(&format!("{}<snapshot key>", contract::AUTHORIZED_KEY)),
            );
            (
                qemu::overlay_on_cmd(
                    &snap.join(snapshot::DISK),
                    "qcow2",
                    &run_dir.join("overlay.qcow2"),
                ),
                spec.accel
                    .tries()
                    .into_iter()
                    .map(|a| (a, qemu_cmd(spec, media, &inst, a)))
                    .collect(),
            )
        }),
    }
}

/// A guest that said it is ready, with one SSH session logged in and pinned to the host key its
/// console announced. Dropping it ends QEMU and removes the run directory.
pub struct Session {
    guest: Guest,
    qemu: super::process::QemuProcess,
    accel: Accel,
    port: u16,
    host_key: String,
    start: GuestStart,
    run_dir: RunDir,
    keep: bool,
    memory_mib: u64,
    serial_log: PathBuf,
    /// Its RAM file, when the spec gave one (a template's or a clone's).
    ram: Option<qemu::RamFile>,
    /// The snapshot this guest was resumed from; None after a cold boot.
    resumed_from: Option<Record>,
    /// The image's snapshot this session resumed (a layer and its base), held as in use until
    /// the session ends, so that no other rig removes it meanwhile.
    _snapshot_hold: Vec<snapshot::Hold>,
}

/// A guest up and logged in, and how it came up.
struct Opened {
    up: Up,
    guest: Guest,
    start: GuestStart,
    resumed_from: Option<Record>,
    hold: Vec<snapshot::Hold>,
}

/// A saved guest that sessions resume copies of (`Session::save_fork`): a snapshot directory
/// of this run's own, laid out as the image's snapshots are, removed when dropped.
pub struct Fork {
    pub dir: PathBuf,
    pub record: Record,
    /// Saving: from the migrate command to QEMU's exit.
    pub save_took: Duration,
    /// A template's: the file its RAM is in, which its state leaves out and each copy maps
    /// private. Removed with the fork.
    pub ram: Option<PathBuf>,
}

impl Drop for Fork {
    fn drop(&mut self) {
        snapshot::discard(&self.dir);
        if let Some(ram) = &self.ram {
            let _ = std::fs::remove_file(ram);
        }
    }
}

impl Session {
    /// Opens a session: key and overlay, QEMU, the ready line (or a resume), the SSH login.
    /// Every failure ends what was started; a failed boot says what QEMU said.
    pub fn open(spec: &SessionSpec, media: &GuestMedia, sink: Sink) -> Result<Session> {
        // Whoever opens a session, Ctrl-C and SIGTERM reach the waits below as a flag, and the
        // watchdog ends QEMU on it, instead of killing the rig before it cleans up.
        signals::install().context("installing signal handlers")?;
        let run_dir = RunDir::create()?;
        let opened = match spec.start {
            Start::Cold => cold(spec, media, &run_dir.path, "asked for a cold boot", sink)?,
            Start::Resume => resume_or_cold(spec, media, &run_dir.path, sink)?,
        };
        Ok(Session::of(opened, run_dir, spec, spec.keep, sink))
    }

    /// The session of a guest up and logged in; its start is sent first.
    fn of(opened: Opened, run_dir: RunDir, spec: &SessionSpec, keep: bool, sink: Sink) -> Session {
        sink(&Event::GuestStart(Box::new(opened.start.clone())));
        Session {
            guest: opened.guest,
            qemu: opened.up.started.qemu,
            accel: opened.up.started.accel,
            port: opened.up.port,
            host_key: opened.up.host_key,
            start: opened.start,
            run_dir,
            keep,
            memory_mib: spec.memory_mib,
            serial_log: spec.serial_log(),
            ram: spec.ram.clone(),
            resumed_from: opened.resumed_from,
            _snapshot_hold: opened.hold,
        }
    }

    /// Opens a session on a copy of `fork`: a new QEMU resumed from its state, on an overlay
    /// of its own over the fork's disk, with this session's key, clock, entropy and nonce, as
    /// a resume of the image's snapshot gets them.
    pub fn open_fork(
        spec: &SessionSpec,
        media: &GuestMedia,
        fork: &Fork,
        sink: Sink,
    ) -> Result<Session> {
        signals::install().context("installing signal handlers")?;
        let run_dir = RunDir::create()?;
        let mut opened = resume(
            spec,
            media,
            &run_dir.path,
            &fork.dir,
            &fork.record,
            fork.record.accel_reason.clone(),
            None,
            sink,
        )?;
        opened.start.reason = "a copy of a VM fork this run saved with the tree up".into();
        // A copy is never kept: the save it came from is gone when the comparison ends.
        Ok(Session::of(opened, run_dir, spec, false, sink))
    }

    /// Saves this guest as it runs now into a new directory `dir` (mode 0700), which sessions
    /// then resume copies of with [`Session::open_fork`]. QEMU stops the guest for the last
    /// pass of the migration and then quits, so the session ends here. Only a resumed session
    /// can be forked: its record carries the kernel command line and the accelerator a copy
    /// must be started with.
    pub fn save_fork(mut self, dir: &Path) -> Result<Fork> {
        let Some(from) = self.resumed_from.clone() else {
            bail!("this guest booted cold, and a VM fork is made from a resumed guest\nfix: run without --cold so the image's snapshot is resumed first");
        };
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .with_context(|| format!("creating the fork's directory {}", dir.display()))?;
        // A template's RAM file goes with the fork from here, so that it is removed whatever
        // happens next.
        let template = self
            .ram
            .as_ref()
            .filter(|r| r.share)
            .map(|r| r.path.clone());
        let mut fork = Fork {
            dir: dir.to_path_buf(),
            record: from,
            save_took: Duration::ZERO,
            ram: template.clone(),
        };
        let since = Instant::now();
        let run = self.run_dir.path.clone();
        let state = save_and_quit(
            &mut self.qemu,
            self.accel,
            &run,
            dir,
            self.memory_mib,
            template.is_some(),
        )
        .context("saving the guest for the VM fork")?;
        let disk = dir.join(snapshot::DISK);
        std::fs::copy(run.join("overlay.qcow2"), &disk)
            .context("keeping the saved guest's overlay for the fork")?;
        std::fs::copy(key_path(&run), dir.join(snapshot::KEY))
            .context("keeping the key the saved guest accepts")?;
        std::fs::copy(&self.serial_log, dir.join(snapshot::CONSOLE))
            .context("keeping the saved guest's console")?;
        let (disk_sha256, _) = sharedos_report::digest::sha256_file(&disk)?;
        fork.record = snapshot::record(
            fork.record.key.clone(),
            self.accel,
            &fork.record.accel_reason,
            &fork.record.append,
            &self.host_key,
            state,
            disk_sha256,
        );
        fork.save_took = since.elapsed();
        Ok(fork)
    }

    /// QEMU's process id: the host reads the guest's memory cost from it.
    pub fn qemu_pid(&self) -> u32 {
        self.qemu.pid
    }

    pub fn guest(&self) -> &Guest {
        &self.guest
    }

    pub fn accel(&self) -> Accel {
        self.accel
    }

    /// How the guest came up.
    pub fn start(&self) -> &GuestStart {
        &self.start
    }

    pub fn bounds(&self) -> Bounds {
        bounds(self.accel)
    }

    /// The client reached its end: under `--keep-vm` QEMU and the run directory stay and the way
    /// in is sent; otherwise, or when a signal arrived, QEMU is ended.
    pub fn end(mut self, sink: Sink) {
        match (self.keep, signals::interrupted()) {
            (true, None) => {
                self.qemu.keep();
                self.run_dir.keep = true;
                sink(&Event::Kept {
                    pid: self.qemu.pid,
                    port: self.port,
                    key: key_path(&self.run_dir.path),
                    host_key: self.host_key.clone(),
                    run_dir: self.run_dir.path.clone(),
                });
            }
            (true, Some(sig)) => sink(&Event::NotKept {
                signal: sig.to_string(),
            }),
            (false, _) => {}
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // QEMU first: the SSH session then closes on a dead socket at once instead of waiting
        // on a guest that may have stopped answering.
        if !self.run_dir.keep {
            self.qemu.stop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(network: Network, accel: AccelChoice) -> SessionSpec {
        SessionSpec {
            name: "sharedos-rig-ab12".into(),
            accel,
            accel_cache: None,
            memory_mib: 1024,
            cpus: 2,
            network,
            logs: "/r".into(),
            keep: false,
            start: Start::Cold,
            snapshot: None,
            layer: None,
            ram: None,
        }
    }

    fn media() -> GuestMedia {
        GuestMedia {
            kernel: "/c/vmlinuz".into(),
            initrd: "/c/initrd.img".into(),
            disk: "/c/disk.img".into(),
        }
    }

    #[test]
    fn append_carries_the_key_without_spaces() {
        let param = contract::authorized_key_param(
            "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1 sharedos-rig\n",
        )
        .unwrap();
        let a = kernel_append(&param);
        assert!(a.ends_with("sharedos.authorized_key=ssh-ed25519,AAAAC3NzaC1lZDI1NTE5AAAAIE1"));
        assert!(a.starts_with(&contract::kernel_cmdline()));
    }

    #[test]
    fn the_plan_is_the_sessions_own_lines() {
        let s = spec(Network::Restricted, AccelChoice::Auto);
        let p = plan(&s, &media());
        assert_eq!(
            p.keygen.display(),
            "ssh-keygen -q -t ed25519 -N '' -C sharedos-rig -f '<run dir>/id_ed25519'"
        );
        assert_eq!(
            p.overlay.display(),
            "qemu-img create -q -f qcow2 -F raw -b /c/disk.img '<run dir>/overlay.qcow2'"
        );
        let accels: Vec<Accel> = p.qemu.iter().map(|(a, _, _)| *a).collect();
        assert_eq!(accels, [Accel::Kvm, Accel::Tcg]);
        let tcg = &p.qemu[1].2.argv;
        let inst = Instance {
            sandbox: p.sandbox,
            ..Instance::cold(
                Path::new("<run dir>"),
                kernel_append("sharedos.authorized_key=<run key>"),
            )
        };
        assert_eq!(*tcg, qemu_cmd(&s, &media(), &inst, Accel::Tcg).argv);
        assert!(tcg.contains(&"file:/r/serial.log".to_string()));
        assert!(tcg.contains(
            &"file=<run dir>/overlay.qcow2,if=virtio,format=qcow2,cache=unsafe".to_string()
        ));
    }

    #[test]
    fn the_network_is_the_specs() {
        let inst = Instance {
            port: 2222,
            sandbox: false,
            ..Instance::cold(Path::new("/t"), String::new())
        };
        let line = |n| qemu_cmd(&spec(n, AccelChoice::Tcg), &media(), &inst, Accel::Tcg).argv;
        assert!(line(Network::Restricted)
            .contains(&"user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:2222-:22".to_string()));
        assert!(line(Network::Outbound)
            .contains(&"user,id=n0,hostfwd=tcp:127.0.0.1:2222-:22".to_string()));
    }

    #[test]
    fn tcg_bounds_are_wider() {
        let (k, t) = (bounds(Accel::Kvm), bounds(Accel::Tcg));
        assert!(t.boot > k.boot && t.ssh > k.ssh);
    }

    #[test]
    fn a_layer_s_file_is_checked_by_its_whole_sha256() {
        assert_eq!(
            sha256_command("/usr/local/bin/sharedos-gate"),
            "sha256sum /usr/local/bin/sharedos-gate"
        );
        let sha = "c".repeat(64);
        assert!(sha256_matches(&format!("{sha}  /x\n"), &sha));
        assert!(!sha256_matches(&format!("{}  /x\n", "d".repeat(64)), &sha));
        assert!(!sha256_matches(
            "sha256sum: /x: No such file or directory",
            &sha
        ));
        assert!(!sha256_matches("", ""));
    }
}
