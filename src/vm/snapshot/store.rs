//! The snapshot store's housekeeping: whether a snapshot can be made there, the directory one
//! is made in, the hold a run keeps on the snapshot it resumes, and the removal of the
//! snapshots a new one replaced or that no run can use any more, each unless a run holds it.

use super::{load, Hold, Key, Record, Spot, IN_USE, RECORD};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

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
pub(super) fn open_in_use(dir: &Path) -> std::io::Result<std::fs::File> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::snapshot::tests::{key, made, scratch};
    use crate::vm::snapshot::{install, DIR};

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
}
