//! `Session`: everything from a QEMU start to a pinned, logged-in SSH session, and the end of
//! that QEMU on every path. The run directory (mode 0700) with the client key and the overlay;
//! a free port, and another when QEMU says the forward's port was taken; the accelerator; the
//! ready line and the host key pinned from the console; the watchdog; "QEMU said: ..." on a
//! failed boot; `--keep-vm`. vm-run, vm-exec, the image builder's VM and the bench all open
//! guests through here; a spec says what differs between them.
//!
//! How the guest comes up is one value of [`Start`], so that another way (a resume from a
//! snapshot) changes the stages that differ and adds no second boot path.

use super::accel::{self, AccelChoice, Logs, Started};
use super::event::{Event, Sink};
use super::qemu::{self, Accel, Network};
use super::serial;
use super::snapshot::{self, Record};
use super::ssh::{self, Guest};
use crate::cmd::{self, Cmd};
use crate::image::contract::{self, ConsoleState};
use crate::image::ImageEntry;
use anyhow::{bail, Context, Result};
use sharedos_report::report::{GuestStart, SnapshotRef};
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
            let inst = Instance {
                incoming: Some(run_dir.join("incoming.sock")),
                ..Instance::cold(
                    &run_dir,
                    kernel_append(&format!("{}<snapshot key>", contract::AUTHORIZED_KEY)),
                )
            };
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
}

impl Drop for Fork {
    fn drop(&mut self) {
        snapshot::discard(&self.dir);
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
        let mut fork = Fork {
            dir: dir.to_path_buf(),
            record: from,
            save_took: Duration::ZERO,
        };
        let since = Instant::now();
        let run = self.run_dir.path.clone();
        let state = save_and_quit(&mut self.qemu, self.accel, &run, dir, self.memory_mib)
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

/// A cold boot: a fresh key on the kernel command line, a fresh overlay on the image's disk.
fn cold(
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
fn public_key_text(public: &str) -> String {
    public
        .split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Stage "key": a fresh client key in `dir` (anything a failed attempt left there goes first,
/// since ssh-keygen would ask before overwriting). Returns its public line.
fn new_key(dir: &Path) -> Result<String> {
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

/// The resume's QEMU line with placeholders for what differs per run: the snapshot's key.
fn key_argv(spec: &SessionSpec, accel: Accel, sandbox: bool) -> Vec<String> {
    let ph = PathBuf::from;
    let spec = SessionSpec {
        name: "<name>".into(),
        logs: ph("<logs>"),
        ..spec.clone()
    };
    let media = GuestMedia {
        kernel: ph("<kernel>"),
        initrd: ph("<initrd>"),
        disk: ph("<disk>"),
    };
    let inst = Instance {
        overlay: ph("<overlay>"),
        qmp: ph("<qmp>"),
        append: kernel_append(&format!("{}<snapshot key>", contract::AUTHORIZED_KEY)),
        port: 0,
        sandbox,
        incoming: Some(ph("<incoming>")),
        stopped: false,
    };
    qemu_cmd(&spec, &media, &inst, accel).argv
}

/// Only the tests set this: the resumed guest stays stopped, so its resume never answers.
const TEST_RESUME_STOPPED: &str = "SHAREDOS_RIG_TEST_RESUME_STOPPED";

/// Why a start of this session cannot be a resume, told before anything boots, or None: there
/// is a snapshot for these settings (its files are hashed only when it is resumed), or one can
/// be made. The accelerator `auto` has not settled before its first boot; the snapshot's store
/// must then be writable.
pub fn why_no_resume(spec: &SessionSpec) -> Option<String> {
    let Some(spot) = &spec.snapshot else {
        return Some("this image has no snapshot store".into());
    };
    let settled = accel::settled(spec.accel, spec.accel_cache.as_ref());
    if let (Ok(version), Some((accel, _))) = (super::qemu_version(), settled) {
        let key = spot.key(&version, key_argv(spec, accel, super::sandbox_available()));
        let found =
            matches!(snapshot::load(&spot.dir(&key)), Ok(Some(r)) if r.key.differs(&key).is_none());
        if found {
            return None;
        }
    }
    snapshot::why_cannot_make(&spot.root).map(|why| {
        format!(
            "there is no snapshot for this image and these settings, and none can be made: {why}"
        )
    })
}

/// Resumes the image's snapshot for these settings; makes it first when there is none or the
/// one there fails its check; boots cold, saying why, when a resume fails.
fn resume_or_cold(
    spec: &SessionSpec,
    media: &GuestMedia,
    run_dir: &Path,
    sink: Sink,
) -> Result<Opened> {
    match try_resume(spec, media, run_dir, sink)? {
        Ok(o) => Ok(o),
        Err(reason) => cold(spec, media, run_dir, &reason, sink),
    }
}

/// A resume, or why this run must boot cold instead (the inner error). The outer error is a
/// failure no cold boot would mend: an interrupt, or the snapshot's own boot failing.
fn try_resume(
    spec: &SessionSpec,
    media: &GuestMedia,
    run_dir: &Path,
    sink: Sink,
) -> Result<std::result::Result<Opened, String>> {
    let Some(spot) = &spec.snapshot else {
        return Ok(Err("this image has no snapshot store".into()));
    };
    // A resume that fails is told apart from one that was interrupted, which must end the run.
    // With a layer asked for, the base found or made is resumed through its layer instead.
    let resumed = |made: Option<&str>,
                   dir: &Path,
                   r: &Record,
                   reason: String,
                   hold: Option<snapshot::Hold>,
                   sink: Sink| {
        let base = (dir.to_path_buf(), r.clone(), hold);
        let (dir, r, holds, note) = with_layer(spec, media, spot, run_dir, base, sink)?;
        match resume(spec, media, run_dir, &dir, &r, reason, None, sink) {
            Ok(mut o) => {
                o.hold = holds;
                o.start.reason = match (made, note) {
                    (Some(why), Some(note)) => format!("{why}: made one, then resumed it; {note}"),
                    (Some(why), None) => format!("{why}: made one, then resumed it"),
                    (None, Some(note)) => note,
                    (None, None) => o.start.reason,
                };
                Ok(Ok(o))
            }
            Err(e) if signals::interrupted().is_some() => Err(e),
            Err(e) => {
                let failed = match made {
                    None => "the resume failed".to_string(),
                    Some(why) => format!("{why}; the one made now did not resume"),
                };
                Ok(Err(format!("{failed}, so this run booted cold: {e:#}")))
            }
        }
    };
    let version = super::qemu_version()?;
    let sandbox = super::sandbox_available();
    let why = match accel::settled(spec.accel, spec.accel_cache.as_ref()) {
        None => "the accelerator was not decided yet".to_string(),
        Some((accel, reason)) => {
            let key = spot.key(&version, key_argv(spec, accel, sandbox));
            let dir = spot.dir(&key);
            match snapshot::load(&dir) {
                Ok(None) => "there was no snapshot for this image and these settings".into(),
                Err(e) => {
                    snapshot::discard(&dir);
                    format!("the snapshot could not be read ({e:#})")
                }
                // Held before its check, so that no other rig removes it between the check and
                // the end of this session.
                Ok(Some(r)) => match snapshot::hold(&dir) {
                    Err(e) => format!("the snapshot could not be held ({e:#})"),
                    Ok(held) => match snapshot::check(&dir, &r, &key) {
                        Err(bad) => {
                            drop(held);
                            snapshot::discard(&dir);
                            format!("the snapshot was {bad}")
                        }
                        Ok(()) => return resumed(None, &dir, &r, reason, held, sink),
                    },
                },
            }
        }
    };
    match make(spec, media, spot, &version, sandbox, run_dir, sink)? {
        Ok((dir, r, held)) => resumed(Some(&why), &dir, &r, r.accel_reason.clone(), held, sink),
        Err(e) => Ok(Err(format!(
            "{why}, and saving one failed, so this run booted cold: {e:#}"
        ))),
    }
}

/// The snapshot a resume of the base `base` (its directory, record and hold) resumes: with no
/// layer asked for, the base; else the layer over it that holds the spec's file, checked as a
/// snapshot is (its key with the file's sha256, its files, its base still the one it was made
/// over), and made first when there is none or it fails a check. A layer that cannot be made
/// leaves the base, with why (the note). The outer error is an interrupt.
#[allow(clippy::type_complexity)]
fn with_layer(
    spec: &SessionSpec,
    media: &GuestMedia,
    spot: &snapshot::Spot,
    run_dir: &Path,
    base: (PathBuf, Record, Option<snapshot::Hold>),
    sink: Sink,
) -> Result<(PathBuf, Record, Vec<snapshot::Hold>, Option<String>)> {
    let (base_dir, base_r, base_hold) = base;
    let mut holds: Vec<snapshot::Hold> = base_hold.into_iter().collect();
    let Some(layer) = &spec.layer else {
        return Ok((base_dir, base_r, holds, None));
    };
    let base_name = base_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let key = base_r.key.layer(&layer.sha256);
    let dir = spot.dir(&key);
    let why = match snapshot::load(&dir) {
        Ok(None) => "there was no snapshot layer holding this gate binary".to_string(),
        Err(e) => {
            snapshot::discard(&dir);
            format!("the snapshot layer holding this gate binary could not be read ({e:#})")
        }
        // Held before its check, as a base is.
        Ok(Some(r)) => match snapshot::hold(&dir) {
            Err(e) => {
                format!("the snapshot layer holding this gate binary could not be held ({e:#})")
            }
            Ok(held) => {
                let checked = snapshot::check(&dir, &r, &key).and_then(|()| match &r.base {
                    Some(b) if b.dir == base_name => snapshot::check_base(&dir, b),
                    _ => Err("damaged: it names no base, or another".to_string()),
                });
                match checked {
                    Ok(()) => {
                        holds.extend(held);
                        return Ok((dir, r, holds, None));
                    }
                    Err(bad) => {
                        drop(held);
                        snapshot::discard(&dir);
                        format!("the snapshot layer holding this gate binary was {bad}")
                    }
                }
            }
        },
    };
    sink(&Event::LayerMaking {
        base: base_dir.clone(),
        why: why.clone(),
    });
    let since = Instant::now();
    match make_layer(
        spec,
        media,
        spot,
        run_dir,
        (&base_dir, &base_r),
        &key,
        layer,
        sink,
    ) {
        Ok((dir, r, held)) => {
            sink(&Event::Stage {
                name: "layer_make",
                took: since.elapsed(),
            });
            holds.extend(held);
            Ok((
                dir,
                r,
                holds,
                Some(format!("{why}: made it over the snapshot, then resumed it")),
            ))
        }
        Err(e) if signals::interrupted().is_some() => Err(e),
        Err(e) => Ok((
            base_dir,
            base_r,
            holds,
            Some(format!(
                "{why}, and making it failed, so the plain snapshot was resumed: {e:#}"
            )),
        )),
    }
}

/// Makes the layer of key `key` over the base snapshot `base`: the base resumed with the
/// layer's overlay in a fresh directory of the store (backed by the base's disk through a
/// relative name), the file put in and its sha256 checked in the guest, then the guest saved
/// over QMP and QEMU quit, as a snapshot is made; installed under `key`, held, and the layers
/// of the same base with another file removed unless a running rig holds them.
#[allow(clippy::too_many_arguments)]
fn make_layer(
    spec: &SessionSpec,
    media: &GuestMedia,
    spot: &snapshot::Spot,
    run_dir: &Path,
    base: (&Path, &Record),
    key: &snapshot::Key,
    layer: &Layer,
    sink: Sink,
) -> Result<(PathBuf, Record, Option<snapshot::Hold>)> {
    let (base_dir, base_r) = base;
    let making = snapshot::making_dir(&spot.root, &short_id())?;
    let made = (|| {
        // The layer's console goes on from its base's, and stays with it.
        let lspec = SessionSpec {
            logs: making.clone(),
            keep: false,
            layer: None,
            ..spec.clone()
        };
        // Only the resume of the layer that follows is this run's boot.
        let mut quiet = |e: &Event| {
            if !matches!(e, Event::Stage { .. } | Event::LoggedIn { .. }) {
                sink(e)
            }
        };
        let o = resume(
            &lspec,
            media,
            run_dir,
            base_dir,
            base_r,
            base_r.accel_reason.clone(),
            Some(&making),
            &mut quiet,
        )
        .context("resuming the base snapshot")?;
        let Opened { mut up, guest, .. } = o;
        let b = bounds(up.started.accel);
        guest.set_timeout(Duration::from_secs(60 * 4));
        guest
            .upload(&layer.file, &layer.guest_path, layer.mode)
            .with_context(|| format!("copying {} into the guest", layer.file.display()))?;
        guest.set_timeout(b.ssh);
        let out = guest.exec(&sha256_command(&layer.guest_path))?;
        if out.status != 0 || !sha256_matches(&out.output, &layer.sha256) {
            bail!(
                "{} arrived corrupted: sha256 on the host {}, in the guest {:?}",
                layer.guest_path,
                layer.sha256,
                crate::escape::line(&sharedos_report::text::tail(&out.output, 3, 300))
            );
        }
        // The saved guest accepts the key this resume put in.
        std::fs::copy(key_path(run_dir), making.join(snapshot::KEY))
            .context("keeping the key the saved guest accepts")?;
        drop(guest);
        let state = save_and_quit(
            &mut up.started.qemu,
            up.started.accel,
            run_dir,
            &making,
            spec.memory_mib,
        )?;
        let (disk_sha256, _) = sharedos_report::digest::sha256_file(&making.join(snapshot::DISK))?;
        let mut r = snapshot::record(
            key.clone(),
            up.started.accel,
            &base_r.accel_reason,
            &base_r.append,
            &base_r.host_key,
            state,
            disk_sha256,
        );
        r.base = Some(snapshot::BaseRef {
            dir: base_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            state_sha256: base_r.state_sha256.clone(),
            disk_sha256: base_r.disk_sha256.clone(),
        });
        let dir = spot.dir(key);
        snapshot::install(&making, &dir, &r)?;
        // Another rig that made the same layer meanwhile won the rename: its record is the one
        // whose files are there.
        let r = match snapshot::load(&dir) {
            Ok(Some(there)) if there.key == r.key => there,
            _ => r,
        };
        Ok::<_, anyhow::Error>((dir, r))
    })();
    let (dir, r) = match made {
        Ok(m) => m,
        Err(e) => {
            snapshot::discard(&making);
            return Err(e.context(format!(
                "making the gate binary's layer over {}\nfix: nothing to do for this run (it goes on from the plain snapshot); if it recurs, `cargo xtask cache prune` or remove {}",
                base_dir.display(),
                spot.root.display()
            )));
        }
    };
    sink(&Event::SnapshotMade {
        dir: dir.clone(),
        state_bytes: r.state_bytes,
    });
    let held = snapshot::hold(&dir).ok().flatten();
    for swept in snapshot::remove_replaced_layers(spot, &dir, key) {
        sink(&swept_event(swept));
    }
    Ok((dir, r, held))
}

/// What a removal of a snapshot another one replaced did, as an event.
fn swept_event(swept: snapshot::Swept) -> Event {
    match swept.outcome {
        Ok(snapshot::Removal::Removed(bytes)) => Event::SnapshotRemoved {
            dir: swept.dir,
            why: swept.why,
            bytes,
        },
        Ok(snapshot::Removal::InUse) => Event::SnapshotLeft {
            dir: swept.dir,
            why: swept.why,
            left: "a running rig holds it".into(),
        },
        Err(e) => Event::SnapshotLeft {
            dir: swept.dir,
            why: swept.why,
            left: format!("removing it failed: {e}"),
        },
    }
}

/// Makes the snapshot: a cold boot to its ready line whose key, overlay and console go into a
/// fresh directory of the store, then QEMU migrates the guest out and quits. A boot that fails
/// is this run's failure (the outer error); a save that fails leaves the run to boot cold (the
/// inner one).
fn make(
    spec: &SessionSpec,
    media: &GuestMedia,
    spot: &snapshot::Spot,
    version: &str,
    sandbox: bool,
    run_dir: &Path,
    sink: Sink,
) -> Result<Result<(PathBuf, Record, Option<snapshot::Hold>)>> {
    let making = match snapshot::making_dir(&spot.root, &short_id()) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    let made = (|| {
        let public = new_key(&making)?;
        let disk = making.join(snapshot::DISK);
        cmd::capture(&qemu::overlay_cmd(&spot.backing(&media.disk), &disk))
            .context("making the snapshot's overlay (qemu-img comes with qemu-utils)")?;
        let append = kernel_append(&contract::authorized_key_param(&public)?);
        let inst = Instance {
            overlay: disk.clone(),
            ..Instance::cold(run_dir, append.clone())
        };
        // The saved boot's console stays with the snapshot.
        let boot_spec = SessionSpec {
            logs: making.clone(),
            keep: false,
            ..spec.clone()
        };
        let up = boot(&boot_spec, media, inst, sink)?;
        Ok::<_, anyhow::Error>((up, append, disk))
    })();
    let (mut up, append, disk) = match made {
        Ok(m) => m,
        Err(e) => {
            // A boot that failed is this run's failure: its console and QEMU's words go where
            // the run keeps its own, for the report, before the half-made snapshot goes.
            for f in [snapshot::CONSOLE, "qemu.log"] {
                let _ = std::fs::copy(making.join(f), spec.logs.join(f));
            }
            snapshot::discard(&making);
            return Err(e);
        }
    };
    let saved = (|| {
        let state = save_and_quit(
            &mut up.started.qemu,
            up.started.accel,
            run_dir,
            &making,
            spec.memory_mib,
        )?;
        let (disk_sha256, _) = sharedos_report::digest::sha256_file(&disk)?;
        let key = spot.key(version, key_argv(spec, up.started.accel, sandbox));
        let dir = spot.dir(&key);
        let r = snapshot::record(
            key,
            up.started.accel,
            &up.started.reason,
            &append,
            &up.host_key,
            state,
            disk_sha256,
        );
        snapshot::install(&making, &dir, &r)?;
        sink(&Event::SnapshotMade {
            dir: dir.clone(),
            state_bytes: r.state_bytes,
        });
        let held = snapshot::hold(&dir).ok().flatten();
        // The image's snapshots that no run can use any more go now, each unless a running
        // rig holds it: a changed key must not leave the old one behind for good.
        for swept in snapshot::remove_stale(spot, version, &dir) {
            sink(&swept_event(swept));
        }
        Ok((dir, r, held))
    })();
    up.started.qemu.stop();
    if saved.is_err() {
        snapshot::discard(&making);
    }
    Ok(saved)
}

/// Saves the running guest of the QEMU started in `run_dir` into `into/state` over QMP (see
/// `snapshot::save`), then has that QEMU quit, and waits for it. The state is bounded by the
/// guest's memory and room for its devices. Returns the state's sha256 and size.
fn save_and_quit(
    qemu: &mut super::process::QemuProcess,
    accel: Accel,
    run_dir: &Path,
    into: &Path,
    memory_mib: u64,
) -> Result<(String, u64)> {
    let b = bounds(accel);
    let mut qmp = super::qmp::Qmp::connect(&run_dir.join("qmp.sock"), b.ssh)?;
    let max = memory_mib.saturating_add(256).saturating_mul(1 << 20);
    let state = snapshot::save(&mut qmp, &run_dir.join("migrate.sock"), into, max, b.boot)?;
    let _ = qmp.execute("quit", None);
    // The bound runs from the quit: a guest saved after minutes of work is long past any
    // bound counted from QEMU's spawn, and would fail here whenever QEMU took a moment to exit.
    if qemu.wait_exit_from_now(b.ssh)?.is_none() {
        bail!(
            "QEMU did not quit within {:?} after saving the guest",
            b.ssh
        );
    }
    Ok(state)
}

/// Resumes the snapshot in `dir`, already checked: a new overlay on its disk and a new QEMU
/// fed its state; then, logged in with the snapshot's key, the guest's clock is set, this
/// run's own key replaces the snapshot's, and the guest echoes this run's nonce; then the
/// session logs in again with its own key. `into`: a layer being made there, whose overlay
/// (its disk) is made in it, naming the snapshot's disk relatively, instead of the run's.
#[allow(clippy::too_many_arguments)]
fn resume(
    spec: &SessionSpec,
    media: &GuestMedia,
    run_dir: &Path,
    dir: &Path,
    r: &Record,
    reason: String,
    into: Option<&Path>,
    sink: Sink,
) -> Result<Opened> {
    let public = new_key(run_dir)?;
    let (overlay, backing) = match (into, dir.file_name()) {
        (Some(making), Some(name)) => (
            making.join(snapshot::DISK),
            Path::new("..").join(name).join(snapshot::DISK),
        ),
        _ => (run_dir.join("overlay.qcow2"), dir.join(snapshot::DISK)),
    };
    cmd::capture(&qemu::overlay_on_cmd(&backing, "qcow2", &overlay))
        .context("making the run's overlay on the snapshot's disk")?;
    let accel = match r.accel.as_str() {
        "kvm" => Accel::Kvm,
        _ => Accel::Tcg,
    };
    let incoming = run_dir.join("incoming.sock");
    let inst = Instance {
        overlay,
        port: free_port()?,
        incoming: Some(incoming.clone()),
        stopped: std::env::var_os(TEST_RESUME_STOPPED).is_some(),
        ..Instance::cold(run_dir, r.append.clone())
    };
    let since = Instant::now();
    let (serial_log, qemu_log) = (spec.serial_log(), spec.qemu_log());
    // The guest's console so far is the saved boot's.
    let _ = std::fs::remove_file(&serial_log);
    std::fs::copy(dir.join(snapshot::CONSOLE), &serial_log).with_context(|| {
        format!(
            "copying the snapshot's boot console to {}",
            serial_log.display()
        )
    })?;
    let logs = Logs {
        serial: &serial_log,
        qemu: &qemu_log,
    };
    let mut started = accel::start_as(
        accel,
        reason,
        &|a| qemu_cmd(spec, media, &inst, a),
        logs,
        spec.keep,
        sink,
    )?;
    booting(&started, inst.port, sink);
    let b = bounds(accel);
    let mut stage = Instant::now();
    let mut lap = |name: &'static str, sink: Sink| {
        sink(&Event::Stage {
            name,
            took: stage.elapsed(),
        });
        stage = Instant::now();
    };
    snapshot::feed(&dir.join(snapshot::STATE), &incoming, b.ssh)
        .map_err(|e| with_qemu_said(e, &qemu_log))?;
    lap("resume_load", sink);
    // A resumed guest answers within a few of its seconds; one that does not is not waited on
    // as long as a boot.
    let answer = b.ssh / 3;
    let first = Guest::connect(inst.port, &r.host_key, &dir.join(snapshot::KEY), answer)
        .map_err(|e| with_qemu_said(e, &qemu_log))
        .context("the resumed guest did not answer with the snapshot's key")?;
    lap("resume_answer", sink);
    first.set_timeout(answer);
    let nonce = sharedos_report::random::random_hex(16)?;
    let entropy = sharedos_report::random::random_hex(32)?;
    let clock_set_to = sharedos_report::clock::now_rfc3339();
    let out = first
        .exec(&after_resume_command(
            &public,
            &nonce,
            &entropy,
            std::time::SystemTime::now(),
        )?)
        .context("setting up the resumed guest")?;
    let echo = out.output.trim().to_string();
    if out.status != 0 || echo != nonce {
        bail!(
            "the resumed guest did not echo this run's nonce (exit {}, it said {:?})",
            out.status,
            sharedos_report::text::tail(&echo, 3, 300)
        );
    }
    lap("resume_setup", sink);
    if let Some(how) = started.qemu.exited() {
        bail!("QEMU exited ({how}) after the resume");
    }
    let up = Up {
        started,
        port: inst.port,
        host_key: r.host_key.clone(),
        since,
    };
    // The session the setup ran over carries on as the run's: a second login with the run's
    // key would cost another handshake (0.4 s under TCG) and prove nothing more, since the
    // nonce already came back over this pinned session. From the setup on, sshd accepts only
    // the run's key for any new login, as `--keep-vm` hands it out.
    let guest = first;
    guest.set_timeout(ssh::SESSION_TIMEOUT);
    sink(&Event::LoggedIn {
        after: up.since.elapsed(),
    });
    let start = GuestStart {
        how: "resumed".into(),
        reason: match &r.key.gate_sha256 {
            None => "the snapshot for this image and these settings passed its checks".into(),
            Some(_) => "the layer holding this gate binary over the snapshot for this image and these settings passed its checks".into(),
        },
        snapshot: Some(SnapshotRef {
            state_sha256: r.state_sha256.clone(),
            disk_sha256: r.disk_sha256.clone(),
            key_sha256: r.key_sha256.clone(),
            made_at: r.made_at.clone(),
            boot_host_key: r.host_key.clone(),
            gate_sha256: r.key.gate_sha256.clone(),
            base_state_sha256: r.base.as_ref().map(|b| b.state_sha256.clone()),
        }),
        client_key: public_key_text(&public),
        nonce: Some(nonce),
        nonce_echo: Some(echo),
        clock_set_to: Some(clock_set_to),
        rng_reseeded: true,
    };
    Ok(Opened {
        up,
        guest,
        start,
        resumed_from: Some(r.clone()),
        hold: Vec::new(),
    })
}

/// What the resumed guest runs first, as root over the snapshot's key: its clock from the
/// host's (it stood still while saved); fresh entropy from the host, credited, and its CRNG
/// reseeded from it (every resume starts from the same generator state, and Debian's cloud
/// kernels have no vmgenid driver to notice the new generation ID); the run's key as the only
/// one sshd accepts; and the nonce back. Each step must succeed for the nonce to come back.
///
/// It is one perl program (perl-base is in every Debian system), because every program a
/// resumed guest starts costs 0.1-0.3 s under TCG: `date`, `mv` and a shell pipeline cost more
/// than the work. The syscall is clock_settime(CLOCK_REALTIME) on x86_64, the only architecture
/// the VM boots; the ioctls are RNDADDENTROPY and RNDRESEEDCRNG.
pub fn after_resume_command(
    public: &str,
    nonce: &str,
    entropy: &str,
    now: std::time::SystemTime,
) -> Result<String> {
    let param = contract::authorized_key_param(public)?;
    // The parameter's characters are checked (alphanumerics, `+/=,-`), so it needs no quoting,
    // neither in the shell's single quotes nor in perl's double ones.
    let line = param
        .strip_prefix(contract::AUTHORIZED_KEY)
        .unwrap_or(&param)
        .replacen(',', " ", 1);
    if ![nonce, entropy]
        .iter()
        .all(|h| !h.is_empty() && h.len() % 2 == 0 && h.chars().all(|c| c.is_ascii_hexdigit()))
    {
        bail!("the nonce and the entropy must be hex");
    }
    let bits = entropy.len() * 4;
    let t = now
        .duration_since(std::time::UNIX_EPOCH)
        .context("the host clock is before 1970")?;
    let (secs, nanos) = (t.as_secs(), t.subsec_nanos());
    let keys = "/root/.ssh/authorized_keys";
    Ok(format!(
        "perl -e 'my $t = pack(\"q q\", {secs}, {nanos}); syscall(227, 0, $t) == 0 or die \"clock_settime: $!\"; \
open(my $f, \">\", \"/dev/urandom\") or die \"open: $!\"; my $b = pack(\"H*\", \"{entropy}\"); \
ioctl($f, 0x40085203, pack(\"ii\", {bits}, length $b) . $b) or die \"RNDADDENTROPY: $!\"; \
ioctl($f, 0x5207, 0) or die \"RNDRESEEDCRNG: $!\"; \
umask(077); open(my $k, \">\", \"{keys}.new\") or die \"open: $!\"; print $k \"{line}\\n\" or die \"write: $!\"; \
close($k) or die \"close: $!\"; rename(\"{keys}.new\", \"{keys}\") or die \"rename: $!\"; \
print \"{nonce}\\n\"'"
    ))
}

/// A QEMU whose guest said it is ready.
struct Up {
    started: Started,
    port: u16,
    host_key: String,
    /// QEMU's first start, the KVM probe included.
    since: Instant,
}

/// How many ports a boot tries when QEMU finds each one taken.
const PORT_ATTEMPTS: u32 = 3;

/// Stage "boot": QEMU on a free port under the chosen accelerator, until the guest's ready line;
/// another port when QEMU says the one it got was taken meanwhile.
fn boot(spec: &SessionSpec, media: &GuestMedia, mut inst: Instance, sink: Sink) -> Result<Up> {
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

fn booting(started: &Started, port: u16, sink: Sink) {
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
fn with_qemu_said(e: anyhow::Error, qemu_log: &Path) -> anyhow::Error {
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

    #[test]
    fn the_command_after_a_resume_takes_only_checked_text() {
        let t = std::time::UNIX_EPOCH + Duration::new(1_700_000_000, 5);
        let c = after_resume_command("ssh-ed25519 AAAAC3Nz+/= me@h\n", "ab12", "00ff", t).unwrap();
        // One program, in the shell's single quotes, with none inside them.
        assert!(c.starts_with("perl -e '") && c.ends_with('\''), "{c}");
        assert_eq!(c.matches('\'').count(), 2, "{c}");
        assert!(
            c.contains("pack(\"q q\", 1700000000, 5); syscall(227, 0, $t)"),
            "{c}"
        );
        assert!(
            c.contains("pack(\"H*\", \"00ff\")") && c.contains("pack(\"ii\", 16,"),
            "{c}"
        );
        assert!(c.contains("print $k \"ssh-ed25519 AAAAC3Nz+/=\\n\""), "{c}");
        assert!(c.ends_with("print \"ab12\\n\"'"), "{c}");
        assert!(after_resume_command("ssh-ed25519 AA'x", "ab", "00", t).is_err());
        assert!(after_resume_command("ssh-ed25519 AA", "ab;reboot", "00", t).is_err());
        assert!(after_resume_command("ssh-ed25519 AA", "ab", "0", t).is_err());
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
