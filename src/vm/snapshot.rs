//! Snapshots of a booted, ready guest, kept in the image cache: the machine's state as QEMU
//! migrated it out, the disk overlay as it was at that moment (backed by the image's disk), the
//! client key the saved boot trusts, and `snapshot.json`, which says what decides the snapshot
//! and the sha256 of each file. A resume checks every one of those before QEMU starts; a
//! snapshot that fails a check is never used.
//!
//! The store is the rig's own cache, not the guest's output, but it lives on disk beside other
//! users' files: its record is read bounded and through no link, and its directories are 0700
//! because the key in them logs into every resume.

use super::accel_cache;
use super::qemu::Accel;
use super::qmp::Qmp;
use crate::image::ImageEntry;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sharedos_report::digest;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The snapshot store's directory under the image cache root.
pub const DIR: &str = "snapshots";
const FORMAT: u32 = 1;
pub const STATE: &str = "state";
pub const DISK: &str = "disk.qcow2";
pub const KEY: &str = "id_ed25519";
pub const RECORD: &str = "snapshot.json";
/// The saved boot's console, which a resumed run's console log goes on from.
pub const CONSOLE: &str = "serial.log";
/// A record holds one QEMU line and a few hashes.
const RECORD_MAX: u64 = 64 * 1024;
/// The lock a run holds shared on the snapshot it resumes, for its whole session. Whoever
/// removes a snapshot takes it exclusive without waiting, and leaves the snapshot alone when
/// it cannot: a snapshot in use is never removed.
pub const IN_USE: &str = "in-use.lock";

/// A shared hold on a snapshot ([`hold`]): released when dropped.
pub type Hold = nix::fcntl::Flock<std::fs::File>;

/// Everything that decides a snapshot: a resume under any other value would be another
/// machine, or one QEMU cannot load.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub qemu_version: String,
    pub image_sha256: String,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
    /// The resume's QEMU line with what differs per run (paths, port, name, key) as
    /// placeholders: the machine, CPU model, accelerator, memory, CPUs, kernel command line,
    /// devices and sandbox. The guest's init is in the image's sha256.
    pub argv: Vec<String>,
    /// A layer's: the sha256 of the gate binary it holds, on top of the snapshot of the same key
    /// without it (its base). None for a snapshot of a ready guest as it booted; left out of
    /// the record then, so that a base's key and directory are what they were before layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_sha256: Option<String>,
}

impl Key {
    pub fn sha256(&self) -> String {
        digest::sha256_hex(serde_json::to_string(self).unwrap_or_default().as_bytes())
    }

    /// The key of the layer over this snapshot that holds the gate binary of sha256 `gate`.
    pub fn layer(&self, gate: &str) -> Key {
        Key {
            gate_sha256: Some(gate.to_string()),
            ..self.clone()
        }
    }

    /// The key of the snapshot a layer of this key is made over (itself for a base).
    pub fn base(&self) -> Key {
        Key {
            gate_sha256: None,
            ..self.clone()
        }
    }

    /// The first field that differs from `want`, in words.
    pub fn differs(&self, want: &Key) -> Option<String> {
        if self.qemu_version != want.qemu_version {
            return Some(format!(
                "it was made by {:?}, and this is {:?}",
                self.qemu_version, want.qemu_version
            ));
        }
        if (&self.image_sha256, &self.kernel_sha256, &self.initrd_sha256)
            != (&want.image_sha256, &want.kernel_sha256, &want.initrd_sha256)
        {
            return Some("it was made from another build of the image".into());
        }
        if self.argv != want.argv {
            let at = self
                .argv
                .iter()
                .zip(&want.argv)
                .position(|(a, b)| a != b)
                .unwrap_or(self.argv.len().min(want.argv.len()));
            return Some(format!(
                "its QEMU line differs at argument {at} ({:?}, now {:?})",
                self.argv.get(at).map(String::as_str).unwrap_or(""),
                want.argv.get(at).map(String::as_str).unwrap_or("")
            ));
        }
        if self.gate_sha256 != want.gate_sha256 {
            let says = |g: &Option<String>| match g {
                Some(sha) => format!("the gate binary of sha256 {sha}"),
                None => "no gate binary".to_string(),
            };
            return Some(format!(
                "it holds {}, and this run wants {}",
                says(&self.gate_sha256),
                says(&want.gate_sha256)
            ));
        }
        None
    }
}

/// A layer's record of the snapshot it was made over: its disk is that snapshot's disk, so a
/// layer is used only while its base is still the one it was made over.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BaseRef {
    /// The base's directory name in the same store.
    pub dir: String,
    pub state_sha256: String,
    pub disk_sha256: String,
}

/// `snapshot.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    pub format: u32,
    pub key: Key,
    pub made_at: String,
    /// The accelerator the saved boot ran under, and why.
    pub accel: String,
    pub accel_reason: String,
    /// The kernel command line the saved boot had: a resume passes it again unchanged.
    pub append: String,
    /// The host key the saved boot's init announced; every resume presents it.
    pub host_key: String,
    pub state_sha256: String,
    pub state_bytes: u64,
    pub disk_sha256: String,
    pub key_sha256: String,
    /// A layer's base; None for a base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<BaseRef>,
}

/// Where an image's snapshots are kept, and the image's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spot {
    pub root: PathBuf,
    pub image_name: String,
    pub image_sha256: String,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
}

impl Spot {
    /// In the cache root the image's entry is in.
    pub fn of_image(entry: &ImageEntry) -> Option<Spot> {
        Some(Spot {
            root: entry.dir.parent()?.join(DIR),
            image_name: entry.manifest.image_name.clone(),
            image_sha256: entry.manifest.image_sha256.clone(),
            kernel_sha256: entry.manifest.kernel_sha256.clone(),
            initrd_sha256: entry.manifest.initrd_sha256.clone(),
        })
    }

    pub fn key(&self, qemu_version: &str, argv: Vec<String>) -> Key {
        Key {
            qemu_version: qemu_version.to_string(),
            image_sha256: self.image_sha256.clone(),
            kernel_sha256: self.kernel_sha256.clone(),
            initrd_sha256: self.initrd_sha256.clone(),
            argv,
            gate_sha256: None,
        }
    }

    /// The image's disk as a snapshot's overlay names it: relative when it is in the same cache
    /// (QEMU resolves a relative backing file from the overlay's own directory), so that a
    /// cache copied or moved whole keeps working snapshots.
    pub fn backing(&self, disk: &Path) -> PathBuf {
        match self.root.parent().map(|cache| disk.strip_prefix(cache)) {
            Some(Ok(rel)) => Path::new("../..").join(rel),
            _ => disk.to_path_buf(),
        }
    }

    /// One directory per key. The image's name is only for the reader of the cache: only
    /// characters safe in a file name are kept.
    pub fn dir(&self, key: &Key) -> PathBuf {
        self.root.join(format!(
            "{}-{}",
            self.dir_name_prefix(),
            &key.sha256()[..16]
        ))
    }

    /// The image's name as its snapshots' directory names begin with it.
    pub fn dir_name_prefix(&self) -> String {
        self.image_name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(40)
            .collect()
    }
}

/// The record in `dir`: None when there is no snapshot there.
pub fn load(dir: &Path) -> Result<Option<Record>> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        Ok(m) if !m.is_dir() => bail!(
            "{} is not a directory (a link is not followed)",
            dir.display()
        ),
        Ok(_) => {}
    }
    let Some(bytes) = accel_cache::read_capped(&dir.join(RECORD), RECORD_MAX)? else {
        bail!("{} has no {RECORD}: an unfinished snapshot", dir.display());
    };
    let r: Record = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a snapshot record", dir.join(RECORD).display()))?;
    if r.format != FORMAT {
        bail!(
            "{} is of format {}, this rig reads {FORMAT}",
            RECORD,
            r.format
        );
    }
    Ok(Some(r))
}

/// Whether the snapshot in `dir` is the one `want` asks for, with its files as they were made.
/// The state is hashed here too: a damaged one must not reach QEMU, which would run whatever
/// it loaded.
pub fn check(dir: &Path, r: &Record, want: &Key) -> Result<(), String> {
    if let Some(d) = r.key.differs(want) {
        return Err(format!("stale: {d}"));
    }
    for (name, sha) in [(DISK, &r.disk_sha256), (STATE, &r.state_sha256)] {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(format!("damaged: {name} is not a regular file")),
            Err(e) => return Err(format!("damaged: {name}: {e}")),
        }
        match digest::sha256_file(&path) {
            Ok((got, _)) if &got == sha => {}
            Ok((got, _)) => {
                return Err(format!(
                    "damaged: {name} has sha256 {got}, its record says {sha}"
                ))
            }
            Err(e) => return Err(format!("damaged: {e:#}")),
        }
    }
    for name in [KEY, CONSOLE] {
        match std::fs::symlink_metadata(dir.join(name)) {
            Ok(m) if m.is_file() => {}
            _ => {
                return Err(format!(
                    "damaged: its {name} is missing or not a regular file"
                ))
            }
        }
    }
    Ok(())
}

/// Whether the base a layer in `dir` names (`base`) is still the snapshot it was made over: a
/// plain name beside it in the same store, its record's state and disk the ones the layer
/// recorded, its disk hashing as recorded (the layer's disk reads through it). Its state is
/// not hashed: a layer's resume loads its own.
pub fn check_base(dir: &Path, base: &BaseRef) -> Result<(), String> {
    if base.dir.contains('/') || base.dir.starts_with('.') || image_of_dir(&base.dir).is_none() {
        return Err(format!(
            "damaged: its base {:?} is not a snapshot's name",
            crate::escape::line(&base.dir)
        ));
    }
    let Some(root) = dir.parent() else {
        return Err("damaged: it is in no store".into());
    };
    let at = root.join(&base.dir);
    let r = match load(&at) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(format!("stale: its base {} is gone", base.dir)),
        Err(e) => return Err(format!("stale: its base cannot be read ({e:#})")),
    };
    if (&r.state_sha256, &r.disk_sha256) != (&base.state_sha256, &base.disk_sha256) {
        return Err(format!("stale: its base {} was made again since", base.dir));
    }
    match digest::sha256_file(&at.join(DISK)) {
        Ok((got, _)) if got == base.disk_sha256 => Ok(()),
        Ok((got, _)) => Err(format!(
            "damaged: its base's {DISK} has sha256 {got}, recorded {}",
            base.disk_sha256
        )),
        Err(e) => Err(format!("damaged: its base's {DISK}: {e:#}")),
    }
}

/// Whether a snapshot of key `other` is a layer of the same base as the layer of key `made`,
/// holding another gate binary: the layer just made replaces it.
pub fn replaced_layer(other: &Key, made: &Key) -> bool {
    other.gate_sha256.is_some()
        && other.gate_sha256 != made.gate_sha256
        && other.base() == made.base()
}

/// Once the layer of key `made_key` is made (in `made`): removes the other layers of its base
/// and settings, which hold another gate binary, each unless a running rig holds it.
pub fn remove_replaced_layers(spot: &Spot, made: &Path, made_key: &Key) -> Vec<Swept> {
    sweep_siblings(spot, made, |r| {
        replaced_layer(&r.key, made_key).then(|| {
            format!(
                "a layer of the same snapshot with another gate binary ({})",
                r.key.gate_sha256.as_deref().unwrap_or("")
            )
        })
    })
}

/// Every snapshot of `spot`'s image in its store but `made` for which `why` gives a reason,
/// removed unless a run holds it. One that has no readable record is left to its own check.
fn sweep_siblings(spot: &Spot, made: &Path, why: impl Fn(&Record) -> Option<String>) -> Vec<Swept> {
    let mine = spot.dir_name_prefix();
    let Ok(rd) = std::fs::read_dir(&spot.root) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in rd.flatten() {
        let dir = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        if dir == made || image_of_dir(&name) != Some(mine.as_str()) {
            continue;
        }
        let Ok(Some(r)) = load(&dir) else {
            continue;
        };
        let Some(why) = why(&r) else {
            continue;
        };
        let outcome = remove_unless_in_use(&dir).map_err(|e| format!("{e:#}"));
        out.push(Swept { dir, why, outcome });
    }
    out
}

/// Why no snapshot can be made under `root`, or None: the store, or the nearest directory above
/// it that exists, must be a directory this user can write (a snapshot is made beside the
/// store's others and renamed into place).
pub fn why_cannot_make(root: &Path) -> Option<String> {
    use nix::unistd::{access, AccessFlags};
    let mut at = root;
    loop {
        match std::fs::symlink_metadata(at) {
            Ok(m) if m.is_dir() => {
                return access(at, AccessFlags::W_OK | AccessFlags::X_OK)
                    .err()
                    .map(|_| format!("{} is not writable by this user", at.display()));
            }
            Ok(_) => return Some(format!("{} is not a directory", at.display())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => match at.parent() {
                Some(up) if !up.as_os_str().is_empty() => at = up,
                _ => return Some(format!("no directory above {} exists", root.display())),
            },
            Err(e) => return Some(format!("{}: {e}", at.display())),
        }
    }
}

/// Removes a snapshot that failed its check, or a half-made one.
pub fn discard(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
}

/// The snapshot's [`IN_USE`] file, opened through no link: created when missing and the
/// directory is writable, else opened read-only (a lock needs no write access).
fn open_in_use(dir: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = dir.join(IN_USE);
    let nofollow = nix::fcntl::OFlag::O_NOFOLLOW.bits();
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(nofollow)
        .open(&path)
    {
        Ok(f) => Ok(f),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(e),
        Err(_) => std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nofollow)
            .open(&path),
    }
}

/// Holds the snapshot in `dir` as in use (a shared lock, without waiting) for as long as the
/// hold lives: a run takes it before it checks the snapshot and keeps it for its whole session.
/// Fails when the snapshot is gone or another process is removing it. None: a snapshot made
/// before snapshots had the lock file, in a store this user cannot write, cannot be marked;
/// it is used unmarked (this user cannot remove it either).
pub fn hold(dir: &Path) -> Result<Option<Hold>> {
    let f = match open_in_use(dir) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir.join(RECORD).is_file() => {
            return Ok(None)
        }
        Err(e) => {
            return Err(e).with_context(|| {
                format!("opening {} (no link followed)", dir.join(IN_USE).display())
            })
        }
    };
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockSharedNonblock)
        .map(Some)
        .map_err(|(_, e)| {
            anyhow::anyhow!(
                "{} is locked by another process that is removing it ({e})",
                dir.display()
            )
        })
}

/// What [`remove_unless_in_use`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Removal {
    /// Removed; the bytes its files held.
    Removed(u64),
    /// Left alone: a running rig holds it.
    InUse,
}

/// Removes the snapshot directory `dir` unless a run holds it ([`hold`]): its [`IN_USE`] lock
/// is taken exclusive without waiting and kept while the directory goes. A link is refused,
/// never followed; links inside it are removed as links.
pub fn remove_unless_in_use(dir: &Path) -> Result<Removal> {
    let m = std::fs::symlink_metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    if !m.is_dir() {
        bail!(
            "{} is not a directory (a link is not followed)",
            dir.display()
        );
    }
    let f = open_in_use(dir).with_context(|| {
        format!(
            "opening {} to take it exclusive (no link followed)",
            dir.join(IN_USE).display()
        )
    })?;
    let _held = match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(l) => l,
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => return Ok(Removal::InUse),
        Err((_, e)) => bail!("locking {}: {e}", dir.join(IN_USE).display()),
    };
    let bytes = tree_bytes(dir);
    std::fs::remove_dir_all(dir).with_context(|| format!("removing {}", dir.display()))?;
    Ok(Removal::Removed(bytes))
}

/// The bytes of the files under `path` (or of `path` itself), following no link: a link counts
/// as its own size. Unreadable parts count as nothing.
pub fn tree_bytes(path: &Path) -> u64 {
    let Ok(m) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    if !m.is_dir() {
        return m.len();
    }
    let Ok(rd) = std::fs::read_dir(path) else {
        return 0;
    };
    rd.flatten()
        .map(|e| tree_bytes(&e.path()))
        .fold(0u64, u64::saturating_add)
}

/// The files of an image build a snapshot boots from, by sha256.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Media {
    pub image_sha256: String,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
}

impl Media {
    pub fn of(m: &crate::image::Manifest) -> Media {
        Media {
            image_sha256: m.image_sha256.clone(),
            kernel_sha256: m.kernel_sha256.clone(),
            initrd_sha256: m.initrd_sha256.clone(),
        }
    }

    pub fn of_key(k: &Key) -> Media {
        Media {
            image_sha256: k.image_sha256.clone(),
            kernel_sha256: k.kernel_sha256.clone(),
            initrd_sha256: k.initrd_sha256.clone(),
        }
    }
}

/// Why no run here can use a snapshot of `key` any more, or None: it was made by another QEMU
/// than `qemu_version`, or from an image build none of `cached` (the cache's entries) holds.
/// Another memory, CPU count or accelerator of a build still cached is another run's key, not
/// a stale one.
pub fn unusable(key: &Key, qemu_version: &str, cached: &[Media]) -> Option<String> {
    if key.qemu_version != qemu_version {
        return Some(format!(
            "it was made by {:?}, and the installed QEMU is {:?}",
            crate::escape::line(&key.qemu_version),
            qemu_version
        ));
    }
    if !cached.contains(&Media::of_key(key)) {
        return Some("the image build it was made from is no longer in the cache".into());
    }
    None
}

/// The image name a snapshot directory's name carries (`<image>-<16 hex>`, as [`Spot::dir`]
/// makes it), or None for a name of another shape.
pub fn image_of_dir(name: &str) -> Option<&str> {
    let (image, hex) = name.rsplit_once('-')?;
    (hex.len() == 16 && hex.chars().all(|c| c.is_ascii_hexdigit()) && !image.is_empty())
        .then_some(image)
}

/// One snapshot [`remove_stale`] looked at.
#[derive(Debug)]
pub struct Swept {
    pub dir: PathBuf,
    /// Why it was stale.
    pub why: String,
    /// Removed, left in use, or why removing it failed.
    pub outcome: std::result::Result<Removal, String>,
}

/// Once a snapshot for `spot`'s image is made (in `made`): removes the image's other snapshots
/// that no run can use any more ([`unusable`]), each unless a run holds it. Snapshots of other
/// images, and of this image's builds still cached under other settings, stay.
pub fn remove_stale(spot: &Spot, qemu_version: &str, made: &Path) -> Vec<Swept> {
    let cached: Vec<Media> = spot
        .root
        .parent()
        .map(crate::image::cache::entry_manifests)
        .unwrap_or_default()
        .iter()
        .map(|(_, m)| Media::of(m))
        .collect();
    sweep_siblings(spot, made, |r| unusable(&r.key, qemu_version, &cached))
}

/// A fresh directory (0700) to make a snapshot in, beside the store's snapshots so that the
/// finished one is renamed into place whole.
pub fn making_dir(root: &Path, id: &str) -> Result<PathBuf> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(root)
        .with_context(|| format!("creating the snapshot store {}", root.display()))?;
    sweep(root);
    let dir = root.join(format!(".making-{}-{id}", std::process::id()));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// Removes what a run killed while making a snapshot left: `.making-PID-*` of a PID that no
/// longer runs.
fn sweep(root: &Path) {
    let Ok(rd) = std::fs::read_dir(root) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(pid) = making_pid(&name) {
            if !pid_runs(pid) {
                discard(&e.path());
            }
        }
    }
}

/// The PID of the run making a snapshot in a directory of this name (`.making-PID-*`).
pub fn making_pid(name: &str) -> Option<u32> {
    name.strip_prefix(".making-")
        .and_then(|r| r.split('-').next())
        .and_then(|p| p.parse::<u32>().ok())
}

/// Whether a process of this PID runs on this host now.
pub fn pid_runs(pid: u32) -> bool {
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Saves the running guest behind `qmp` into `into/state`: QEMU migrates it to a socket the rig
/// listens on, and stops the guest itself for the last pass, so the disk and the memory are of
/// one moment. The guest stays stopped; the caller ends that QEMU. Returns the state's sha256
/// and size.
/// `max` bounds the state: QEMU's stream is the guest's memory and a little of each device, so
/// the caller passes the guest's memory with room for the rest.
pub fn save(
    qmp: &mut Qmp,
    socket: &Path,
    into: &Path,
    max: u64,
    timeout: Duration,
) -> Result<(String, u64)> {
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)
        .with_context(|| format!("listening on {} for the guest's state", socket.display()))?;
    let out = into.join(STATE);
    let receiver = std::thread::spawn(move || receive(listener, &out, max, timeout));
    let uri = format!("unix:{}", socket.display());
    let asked = qmp.execute("migrate", Some(serde_json::json!({ "uri": uri })));
    if let Err(e) = asked {
        // Nothing will connect: wake the receiver so its thread ends.
        let _ = UnixStream::connect(socket);
        let _ = receiver.join();
        return Err(e);
    }
    let since = Instant::now();
    loop {
        let r = qmp.execute("query-migrate", None)?;
        match r.get("status").and_then(|s| s.as_str()) {
            Some("completed") => break,
            Some("failed") | Some("cancelled") => bail!(
                "QEMU's migration to the snapshot failed: {}",
                r.get("error-desc")
                    .and_then(|s| s.as_str())
                    .unwrap_or("no reason given")
            ),
            _ if since.elapsed() >= timeout => {
                let _ = qmp.execute("migrate_cancel", None);
                bail!(
                    "the guest's state was not saved within {} s",
                    timeout.as_secs()
                )
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
        if let Some(sig) = sharedos_report::signals::interrupted() {
            let _ = qmp.execute("migrate_cancel", None);
            bail!("interrupted by {sig} while saving the snapshot");
        }
    }
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the thread receiving the guest's state panicked"))?
}

fn receive(
    listener: UnixListener,
    out: &Path,
    max: u64,
    timeout: Duration,
) -> Result<(String, u64)> {
    let (mut conn, _) = listener.accept().context("accepting QEMU's migration")?;
    conn.set_read_timeout(Some(timeout))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("creating {}", out.display()))?;
    let (sha, n) = copy_hashing(&mut (&mut conn).take(max.saturating_add(1)), &mut file)
        .context("receiving the guest's state from QEMU")?;
    if n > max {
        bail!("QEMU sent more than {max} bytes of state; the snapshot was not kept");
    }
    Ok((sha, n))
}

/// Streams the saved state into the resuming QEMU's socket, which QEMU creates as it starts.
/// Gives up when `timeout` passes before the socket accepts. [`check`] hashed the state just
/// before; hashing it again here would only delay the guest (0.1 s for 120 MB).
pub fn feed(state: &Path, socket: &Path, timeout: Duration) -> Result<u64> {
    let mut conn = super::qmp::connect_when_listening(socket, timeout, "the state socket")?;
    conn.set_write_timeout(Some(timeout))?;
    let mut file =
        std::fs::File::open(state).with_context(|| format!("opening {}", state.display()))?;
    let n = std::io::copy(&mut file, &mut conn).context("sending the saved state to QEMU")?;
    conn.flush().context("sending the saved state to QEMU")?;
    Ok(n)
}

fn copy_hashing(from: &mut dyn Read, to: &mut dyn Write) -> Result<(String, u64)> {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n: u64 = 0;
    loop {
        let k = match from.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.into()),
        };
        h.update(&buf[..k]);
        to.write_all(&buf[..k])?;
        n = n.saturating_add(k as u64);
    }
    to.flush()?;
    Ok((digest::hex(&h.finalize()), n))
}

/// Writes the record last, then renames the made directory into place. Another run that made
/// the same snapshot meanwhile wins: ours is removed and theirs is used.
pub fn install(making: &Path, dir: &Path, r: &Record) -> Result<()> {
    // Made now, so that a run that cannot write the store can still hold the snapshot.
    drop(
        open_in_use(making)
            .with_context(|| format!("creating {IN_USE} in {}", making.display()))?,
    );
    let bytes = serde_json::to_vec_pretty(r).context("encoding the snapshot record")?;
    digest::replace_in_report(making, RECORD, &bytes)?;
    if let Err(e) = std::fs::rename(making, dir) {
        discard(making);
        if !dir.is_dir() {
            return Err(e).with_context(|| format!("moving the snapshot into {}", dir.display()));
        }
    }
    Ok(())
}

/// The record of a snapshot just made.
#[allow(clippy::too_many_arguments)]
pub fn record(
    key: Key,
    accel: Accel,
    accel_reason: &str,
    append: &str,
    host_key: &str,
    state: (String, u64),
    disk_sha256: String,
) -> Record {
    let key_sha256 = key.sha256();
    Record {
        format: FORMAT,
        key,
        made_at: sharedos_report::clock::now_rfc3339(),
        accel: accel.as_str().into(),
        accel_reason: accel_reason.into(),
        append: append.into(),
        host_key: host_key.into(),
        state_sha256: state.0,
        state_bytes: state.1,
        disk_sha256,
        key_sha256,
        base: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            qemu_version: "QEMU emulator version 7.2.22".into(),
            image_sha256: "a".repeat(64),
            kernel_sha256: "b".repeat(64),
            initrd_sha256: "c".repeat(64),
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "1024".into()],
            gate_sha256: None,
        }
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("snapshot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn made(dir: &Path) -> Record {
        std::fs::write(dir.join(STATE), b"machine state").unwrap();
        std::fs::write(dir.join(DISK), b"overlay").unwrap();
        std::fs::write(dir.join(KEY), b"key").unwrap();
        std::fs::write(dir.join(CONSOLE), b"SHAREDOS-READY").unwrap();
        record(
            key(),
            Accel::Tcg,
            "forced with --accel tcg",
            "console=ttyS0",
            "SHA256:x",
            digest::sha256_file(&dir.join(STATE)).unwrap(),
            digest::sha256_file(&dir.join(DISK)).unwrap().0,
        )
    }

    #[test]
    fn a_snapshot_names_its_cache_s_disk_relatively() {
        let spot = Spot {
            root: "/c/snapshots".into(),
            image_name: "bookworm".into(),
            image_sha256: String::new(),
            kernel_sha256: String::new(),
            initrd_sha256: String::new(),
        };
        assert_eq!(
            spot.backing(Path::new("/c/bookworm-1/disk.img")),
            Path::new("../../bookworm-1/disk.img")
        );
        assert_eq!(
            spot.backing(Path::new("/d/disk.img")),
            Path::new("/d/disk.img")
        );
        // Two levels up from a snapshot's directory (and from the one it is made in) is the
        // cache root.
        assert_eq!(
            spot.dir(&key()).parent().unwrap().parent().unwrap(),
            Path::new("/c")
        );
    }

    #[test]
    fn every_part_of_the_key_decides_it() {
        let k = key();
        assert_eq!(k.differs(&k), None);
        let other_qemu = Key {
            qemu_version: "QEMU emulator version 8.2.0".into(),
            ..key()
        };
        assert!(k.differs(&other_qemu).unwrap().contains("8.2.0"));
        let other_image = Key {
            kernel_sha256: "d".repeat(64),
            ..key()
        };
        assert!(k.differs(&other_image).unwrap().contains("another build"));
        let other_memory = Key {
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "2048".into()],
            ..key()
        };
        let d = k.differs(&other_memory).unwrap();
        assert!(d.contains("argument 2") && d.contains("2048"), "{d}");
        assert_ne!(k.sha256(), other_memory.sha256());
    }

    #[test]
    fn a_layer_s_key_is_its_base_s_with_the_gate_binary_s_sha256() {
        let base = key();
        let a = base.layer(&"1".repeat(64));
        let b = base.layer(&"2".repeat(64));
        // A base's record and key hash as they did before layers.
        let json = serde_json::to_string(&base).unwrap();
        assert!(!json.contains("gate_sha256"), "{json}");
        let old: Key = serde_json::from_str(&json).unwrap();
        assert_eq!(old, base);
        // The gate binary decides the layer: another binary is another key and directory.
        assert_ne!(a.sha256(), base.sha256());
        assert_ne!(a.sha256(), b.sha256());
        let d = a.differs(&b).unwrap();
        assert!(
            d.contains(&"1".repeat(64)) && d.contains(&"2".repeat(64)),
            "{d}"
        );
        assert!(base.differs(&a).unwrap().contains("no gate binary"));
        assert_eq!(a.base(), base);
        assert_eq!(a.differs(&a), None);
        // The layer it replaces: same base and settings, another binary; nothing else.
        assert!(replaced_layer(&a, &b));
        assert!(!replaced_layer(&a, &a));
        assert!(!replaced_layer(&base, &b));
        let other_memory = Key {
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "2048".into()],
            ..key()
        }
        .layer(&"1".repeat(64));
        assert!(!replaced_layer(&other_memory, &b));
    }

    #[test]
    fn a_layer_is_used_only_over_the_base_it_was_made_over() {
        let root = scratch("layer-base");
        let making = making_dir(&root, "t").unwrap();
        let r = made(&making);
        let base_dir = root.join("bookworm-0123456789abcdef");
        install(&making, &base_dir, &r).unwrap();
        let layer_dir = root.join("bookworm-fedcba9876543210");
        std::fs::create_dir(&layer_dir).unwrap();
        let base = BaseRef {
            dir: "bookworm-0123456789abcdef".into(),
            state_sha256: r.state_sha256.clone(),
            disk_sha256: r.disk_sha256.clone(),
        };
        assert_eq!(check_base(&layer_dir, &base), Ok(()));
        // Its base's disk written to: damaged.
        std::fs::write(base_dir.join(DISK), b"overlay, written to").unwrap();
        let e = check_base(&layer_dir, &base).unwrap_err();
        assert!(e.starts_with("damaged") && e.contains(DISK), "{e}");
        std::fs::write(base_dir.join(DISK), b"overlay").unwrap();
        // Its base made again: stale.
        let remade = BaseRef {
            state_sha256: "0".repeat(64),
            ..base.clone()
        };
        assert!(check_base(&layer_dir, &remade)
            .unwrap_err()
            .starts_with("stale"));
        // A name that is no snapshot's (a path out of the store), or a base that is gone.
        for dir in [
            "../etc",
            "bookworm-0123456789abcdef/../x",
            "x/bookworm-0123456789abcdef",
            "",
        ] {
            let b = BaseRef {
                dir: dir.into(),
                ..base.clone()
            };
            assert!(check_base(&layer_dir, &b).is_err(), "{dir}");
        }
        let gone = BaseRef {
            dir: "bookworm-aaaaaaaaaaaaaaaa".into(),
            ..base.clone()
        };
        assert!(check_base(&layer_dir, &gone).unwrap_err().contains("gone"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_new_layer_removes_the_layers_of_its_base_with_another_binary_unless_held() {
        let root = scratch("layers");
        let spot = Spot {
            root: root.clone(),
            image_name: "bookworm".into(),
            image_sha256: key().image_sha256,
            kernel_sha256: key().kernel_sha256,
            initrd_sha256: key().initrd_sha256,
        };
        let put = |k: Key| {
            let making = making_dir(&root, "t").unwrap();
            let mut r = made(&making);
            r.key = k.clone();
            let dir = spot.dir(&k);
            install(&making, &dir, &r).unwrap();
            dir
        };
        let base = put(key());
        let old = put(key().layer(&"1".repeat(64)));
        let held_old = put(key().layer(&"2".repeat(64)));
        let other_memory = put(Key {
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "2048".into()],
            ..key()
        }
        .layer(&"1".repeat(64)));
        let new_key = key().layer(&"3".repeat(64));
        let new = put(new_key.clone());
        let held = hold(&held_old).unwrap().unwrap();
        let swept = remove_replaced_layers(&spot, &new, &new_key);
        assert_eq!(swept.len(), 2, "{swept:?}");
        assert!(swept
            .iter()
            .any(|s| s.dir == old && matches!(s.outcome, Ok(Removal::Removed(_)))));
        assert!(swept
            .iter()
            .any(|s| s.dir == held_old && s.outcome == Ok(Removal::InUse)));
        assert!(!old.exists());
        for kept in [&base, &held_old, &other_memory, &new] {
            assert!(kept.join(RECORD).is_file(), "{}", kept.display());
        }
        drop(held);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_snapshot_whose_files_changed_fails_its_check() {
        let root = scratch("check");
        let making = making_dir(&root, "t").unwrap();
        let r = made(&making);
        let dir = root.join("bookworm-x");
        install(&making, &dir, &r).unwrap();
        // A dead run's half-made snapshot goes when the next one is made; a live one's stays.
        let dead = root.join(".making-4294967294-x");
        std::fs::create_dir(&dead).unwrap();
        let live = making_dir(&root, "u").unwrap();
        assert!(!dead.exists() && live.exists());
        discard(&live);
        let loaded = load(&dir).unwrap().unwrap();
        assert_eq!(loaded, r);
        assert_eq!(check(&dir, &loaded, &key()), Ok(()));

        std::fs::write(dir.join(DISK), b"overlay, written to").unwrap();
        let e = check(&dir, &loaded, &key()).unwrap_err();
        assert!(e.starts_with("damaged: disk.qcow2"), "{e}");
        std::fs::write(dir.join(DISK), b"overlay").unwrap();

        std::fs::write(dir.join(STATE), b"machine statf").unwrap();
        assert!(check(&dir, &loaded, &key()).unwrap_err().contains("state"));
        std::fs::write(dir.join(STATE), b"machine state").unwrap();

        std::fs::remove_file(dir.join(KEY)).unwrap();
        assert!(check(&dir, &loaded, &key()).unwrap_err().contains(KEY));

        let stale = Key {
            qemu_version: "QEMU emulator version 9".into(),
            ..key()
        };
        assert!(check(&dir, &loaded, &stale)
            .unwrap_err()
            .starts_with("stale"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_key_of_another_qemu_or_of_a_build_no_longer_cached_is_unusable() {
        let cached = [Media::of_key(&key())];
        assert_eq!(unusable(&key(), &key().qemu_version, &cached), None);
        // Other memory: another run's key, still usable.
        let other_memory = Key {
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "2048".into()],
            ..key()
        };
        assert_eq!(unusable(&other_memory, &key().qemu_version, &cached), None);
        let why = unusable(&key(), "QEMU emulator version 8.2.0", &cached).unwrap();
        assert!(why.contains("8.2.0") && why.contains("7.2.22"), "{why}");
        let gone = Key {
            initrd_sha256: "e".repeat(64),
            ..key()
        };
        let why = unusable(&gone, &key().qemu_version, &cached).unwrap();
        assert!(why.contains("no longer in the cache"), "{why}");
        assert!(unusable(&key(), &key().qemu_version, &[]).is_some());
    }

    #[test]
    fn a_snapshot_directory_names_its_image() {
        assert_eq!(image_of_dir("bookworm-0123456789abcdef"), Some("bookworm"));
        assert_eq!(
            image_of_dir("bookworm-desktop-0123456789abcdef"),
            Some("bookworm-desktop")
        );
        assert_eq!(image_of_dir("bookworm-0123"), None);
        assert_eq!(image_of_dir(".making-12-abc"), None);
        assert_eq!(image_of_dir("-0123456789abcdef"), None);
        assert_eq!(making_pid(".making-4242-abc"), Some(4242));
        assert_eq!(making_pid("bookworm-0123456789abcdef"), None);
    }

    #[test]
    fn a_held_snapshot_is_not_removed_and_a_free_one_is() {
        let root = scratch("hold");
        let making = making_dir(&root, "t").unwrap();
        let r = made(&making);
        let dir = root.join("bookworm-0123456789abcdef");
        install(&making, &dir, &r).unwrap();
        let held = hold(&dir).unwrap().unwrap();
        // A second run holds it too: holds are shared.
        let held2 = hold(&dir).unwrap().unwrap();
        assert_eq!(remove_unless_in_use(&dir).unwrap(), Removal::InUse);
        assert!(dir.join(RECORD).is_file());
        drop(held);
        assert_eq!(remove_unless_in_use(&dir).unwrap(), Removal::InUse);
        drop(held2);
        let bytes = tree_bytes(&dir);
        assert!(bytes > 0);
        assert_eq!(remove_unless_in_use(&dir).unwrap(), Removal::Removed(bytes));
        assert!(!dir.exists());
        assert!(hold(&dir).is_err());
        // A link is refused, and what it points at stays.
        let real = root.join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, root.join("link")).unwrap();
        assert!(remove_unless_in_use(&root.join("link")).is_err());
        assert!(real.is_dir());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn making_a_snapshot_removes_the_image_s_stale_ones_only() {
        use crate::image::manifest::Manifest;
        let cache = scratch("stale");
        let root = cache.join(DIR);
        // The cache holds one build of the image: key()'s.
        let entry = cache.join("bookworm-00000000000000000000");
        std::fs::create_dir_all(&entry).unwrap();
        let m = Manifest {
            image_name: "bookworm".into(),
            image_sha256: key().image_sha256,
            kernel_sha256: key().kernel_sha256,
            initrd_sha256: key().initrd_sha256,
            ..Manifest::default()
        };
        m.write(&entry.join(crate::image::manifest::MANIFEST_FILE))
            .unwrap();
        let spot = Spot {
            root: root.clone(),
            image_name: "bookworm".into(),
            image_sha256: key().image_sha256,
            kernel_sha256: key().kernel_sha256,
            initrd_sha256: key().initrd_sha256,
        };
        let put = |k: Key, image: &str| {
            let making = making_dir(&root, "t").unwrap();
            let mut r = made(&making);
            r.key = k.clone();
            let dir = Spot {
                image_name: image.into(),
                ..spot.clone()
            }
            .dir(&k);
            install(&making, &dir, &r).unwrap();
            dir
        };
        let now = put(key(), "bookworm");
        let other_memory = put(
            Key {
                argv: vec!["qemu-system-x86_64".into(), "-m".into(), "2048".into()],
                ..key()
            },
            "bookworm",
        );
        let old_qemu = put(
            Key {
                qemu_version: "QEMU emulator version 6.2.0".into(),
                ..key()
            },
            "bookworm",
        );
        let gone_build = put(
            Key {
                image_sha256: "f".repeat(64),
                ..key()
            },
            "bookworm",
        );
        let held_stale = put(
            Key {
                qemu_version: "QEMU emulator version 6.1.0".into(),
                ..key()
            },
            "bookworm",
        );
        let other_image = put(
            Key {
                qemu_version: "QEMU emulator version 6.2.0".into(),
                ..key()
            },
            "trixie",
        );
        let held = hold(&held_stale).unwrap().unwrap();
        let swept = remove_stale(&spot, &key().qemu_version, &now);
        let removed: Vec<&Path> = swept
            .iter()
            .filter(|s| matches!(s.outcome, Ok(Removal::Removed(_))))
            .map(|s| s.dir.as_path())
            .collect();
        assert_eq!(removed.len(), 2, "{swept:?}");
        assert!(removed.contains(&old_qemu.as_path()) && removed.contains(&gone_build.as_path()));
        assert!(swept
            .iter()
            .any(|s| s.dir == held_stale && s.outcome == Ok(Removal::InUse)));
        for kept in [&now, &other_memory, &held_stale, &other_image] {
            assert!(kept.join(RECORD).is_file(), "{}", kept.display());
        }
        for gone in [&old_qemu, &gone_build] {
            assert!(!gone.exists(), "{}", gone.display());
        }
        drop(held);
        std::fs::remove_dir_all(&cache).unwrap();
    }

    #[test]
    fn a_store_is_makeable_under_a_writable_directory_and_not_under_a_file() {
        let d = scratch("makeable");
        assert_eq!(why_cannot_make(&d.join("snapshots/deeper")), None);
        std::fs::write(d.join("file"), b"").unwrap();
        let why = why_cannot_make(&d.join("file")).unwrap();
        assert!(why.contains("is not a directory"), "{why}");
        let why = why_cannot_make(&d.join("file/snapshots")).unwrap();
        assert!(why.contains("file/snapshots"), "{why}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_record_is_read_bounded_and_through_no_link() {
        let root = scratch("load");
        assert_eq!(load(&root.join("none")).unwrap(), None);
        let real = root.join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, root.join("link")).unwrap();
        assert!(load(&root.join("link")).is_err());
        assert!(load(&real).unwrap_err().to_string().contains("unfinished"));
        std::fs::write(real.join(RECORD), vec![b' '; RECORD_MAX as usize + 1]).unwrap();
        assert!(format!("{:#}", load(&real).unwrap_err()).contains("larger than"));
        std::fs::remove_file(real.join(RECORD)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", real.join(RECORD)).unwrap();
        assert!(load(&real).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn state_streams_through_a_socket_whole() {
        let root = scratch("feed");
        std::fs::write(root.join(STATE), vec![7u8; 3 << 20]).unwrap();
        let sock = root.join("in.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let out = root.join("got");
        let t =
            std::thread::spawn(move || receive(listener, &out, 3 << 20, Duration::from_secs(5)));
        let n = feed(&root.join(STATE), &sock, Duration::from_secs(5)).unwrap();
        let (sha, got) = t.join().unwrap().unwrap();
        assert_eq!((n, got), (3 << 20, 3 << 20));
        assert_eq!(sha, digest::sha256_file(&root.join(STATE)).unwrap().0);
        assert!(feed(
            &root.join(STATE),
            &root.join("nobody.sock"),
            Duration::from_millis(100)
        )
        .is_err());
        // One byte past the bound is refused.
        let sock2 = root.join("in2.sock");
        let listener = UnixListener::bind(&sock2).unwrap();
        let out = root.join("got2");
        let t = std::thread::spawn(move || {
            receive(listener, &out, (3 << 20) - 1, Duration::from_secs(5))
        });
        let _ = feed(&root.join(STATE), &sock2, Duration::from_secs(5));
        assert!(format!("{:#}", t.join().unwrap().unwrap_err()).contains("more than"));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
