//! The image cache: where it is, the key of an entry, and whether an entry can be trusted.
//! An entry is trusted only when the manifest beside its files says it was built from exactly
//! the inputs just computed (key, every input's sha256, the lock's) and every file hashes as
//! that manifest says: a manifest is data in a writable directory, so what it claims about its
//! own origin is checked, never taken. A bad entry is deleted only while holding the cache lock,
//! so that two processes never delete and rebuild the same entry under each other.

use super::manifest::{Manifest, MANIFEST_FILE, MANIFEST_VERSION};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use sharedos_report::digest::{sha256_file, sha256_hex};
use std::collections::BTreeMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// Records the stat of each file when its hash was last checked. Hashing a 1.5 GiB disk takes
/// seconds; a cached build must take well under one, so a file whose size, inode, mtime and
/// ctime are unchanged since it last hashed right is not hashed again. ctime cannot be set back
/// from user space, so any write through the file system is noticed.
pub const STAMP_FILE: &str = ".verified";

/// Bumped when the builder changes what it produces from the same inputs.
pub const BUILDER_FORMAT: &str = "sharedos-rig image builder 1";

/// The cache lock, in the cache root: held while a bad entry is deleted.
pub const LOCK_FILE: &str = ".entries.lock";

/// What an entry must have been built from: the key and the inputs computed just now for the
/// image (as [`entry_key`] takes them, the lock file among them).
#[derive(Debug, Clone, Copy)]
pub struct Want<'a> {
    pub image: &'a str,
    pub key: &'a str,
    /// (input name, sha256) in key order.
    pub inputs: &'a [(String, String)],
}

/// The [`Want`] of the inputs just computed.
pub fn want<'a>(image: &'a str, key: &'a str, inputs: &'a [(String, String)]) -> Want<'a> {
    Want { image, key, inputs }
}

impl Want<'_> {
    /// Where the stored manifest differs from what was computed, in words; None when it agrees.
    pub fn mismatch(&self, m: &Manifest) -> Option<String> {
        // The key is recomputed from the inputs too: a manifest cannot name a key its own
        // inputs do not give.
        let key = entry_key(self.image, self.inputs);
        if key != self.key {
            return Some(format!(
                "the inputs give key {key}, the caller computed {}",
                self.key
            ));
        }
        if m.image_name != self.image {
            return Some(format!(
                "its manifest is of image {:?}, not {:?}",
                m.image_name, self.image
            ));
        }
        if m.key != self.key {
            return Some(format!(
                "its manifest records key {}, the inputs give {}",
                m.key, self.key
            ));
        }
        let stored: Vec<(&str, &str)> = m
            .inputs
            .iter()
            .map(|i| (i.path.as_str(), i.sha256.as_str()))
            .collect();
        let computed: Vec<(&str, &str)> = self
            .inputs
            .iter()
            .map(|(p, h)| (p.as_str(), h.as_str()))
            .collect();
        if stored != computed {
            let differ: Vec<&str> = computed
                .iter()
                .filter(|c| !stored.contains(c))
                .map(|(p, _)| *p)
                .chain(
                    stored
                        .iter()
                        .filter(|s| !computed.iter().any(|c| c.0 == s.0))
                        .map(|(p, _)| *p),
                )
                .collect();
            return Some(format!(
                "its manifest's inputs differ from the ones computed ({})",
                differ.join(", ")
            ));
        }
        let lock = self
            .inputs
            .iter()
            .find(|(p, _)| p == super::definition::LOCK_FILE)
            .map(|(_, h)| h.as_str())
            .unwrap_or("");
        if m.lock_sha256 != lock {
            return Some(format!(
                "its manifest records lock sha256 {}, the lock hashes to {lock}",
                m.lock_sha256
            ));
        }
        None
    }
}

pub fn cache_root() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("SHAREDOS_RIG_CACHE").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("XDG_CACHE_HOME").filter(|p| !p.is_empty()) {
        return Ok(PathBuf::from(p).join("sharedos-rig"));
    }
    let home = std::env::var_os("HOME").filter(|p| !p.is_empty()).context(
        "none of SHAREDOS_RIG_CACHE, XDG_CACHE_HOME or HOME is set: no place for the image cache",
    )?;
    Ok(PathBuf::from(home).join(".cache").join("sharedos-rig"))
}

/// The entry key: the image name and the sha256 of every input, in a fixed order.
pub fn entry_key(image: &str, inputs: &[(String, String)]) -> String {
    let mut s = format!("{BUILDER_FORMAT}\nimage {image}\n");
    for (path, sha) in inputs {
        s.push_str(&format!("{path} {sha}\n"));
    }
    format!("{image}-{}", &sha256_hex(s.as_bytes())[..20])
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct FileStat {
    len: u64,
    ino: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

fn stat(path: &Path) -> Result<FileStat> {
    let m = std::fs::metadata(path).with_context(|| format!("stat {}", path.display()))?;
    Ok(FileStat {
        len: m.len(),
        ino: m.ino(),
        mtime_ns: m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128,
        ctime_ns: m.ctime() as i128 * 1_000_000_000 + m.ctime_nsec() as i128,
    })
}

/// The state of an existing entry.
#[derive(Debug)]
pub enum EntryState {
    Missing,
    /// Present and every file hashes as its manifest says.
    Good(Box<Manifest>),
    /// Present but not trustworthy; the reason says why.
    Bad(String),
}

/// Checks an entry against what it must have been built from; only files whose stat changed
/// since the last good check are re-hashed.
pub fn check_entry(dir: &Path, want: &Want) -> EntryState {
    let mpath = dir.join(MANIFEST_FILE);
    if !dir.exists() {
        return EntryState::Missing;
    }
    let manifest = match Manifest::read(&mpath) {
        Ok(m) => m,
        Err(e) => return EntryState::Bad(format!("{e:#}")),
    };
    if manifest.manifest_version != MANIFEST_VERSION {
        return EntryState::Bad(format!(
            "manifest version {} is not {MANIFEST_VERSION}",
            manifest.manifest_version
        ));
    }
    if let Some(why) = want.mismatch(&manifest) {
        return EntryState::Bad(why);
    }
    let stamps: BTreeMap<String, FileStat> = std::fs::read_to_string(dir.join(STAMP_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    let mut fresh = BTreeMap::new();
    let mut rehashed = false;
    for (name, want) in manifest.hashed_files() {
        let path = dir.join(name);
        let now = match stat(&path) {
            Ok(s) => s,
            Err(_) => return EntryState::Bad(format!("{name} is missing")),
        };
        if stamps.get(name) != Some(&now) {
            rehashed = true;
            match sha256_file(&path) {
                Ok((got, _)) if got == want => {}
                Ok((got, _)) => {
                    return EntryState::Bad(format!(
                        "{name} has sha256 {got}, the manifest says {want}"
                    ))
                }
                Err(e) => return EntryState::Bad(format!("{e:#}")),
            }
        }
        fresh.insert(name.to_string(), now);
    }
    if rehashed {
        // A read-only cache is still usable; the next check just hashes again.
        let _ = write_stamps(dir, &fresh);
    }
    EntryState::Good(Box::new(manifest))
}

/// Holds the cache lock of `root` (blocking until it is free) for as long as it lives.
pub fn lock(root: &Path) -> Result<nix::fcntl::Flock<std::fs::File>> {
    std::fs::create_dir_all(root).with_context(|| format!("creating {}", root.display()))?;
    let path = root.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .with_context(|| format!("opening the cache lock {}", path.display()))?;
    nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| anyhow::anyhow!("locking {}: {e}", path.display()))
}

/// Takes the cache lock of the existing `root` without waiting: None when another process holds
/// it.
pub fn try_lock(root: &Path) -> Result<Option<nix::fcntl::Flock<std::fs::File>>> {
    use std::os::unix::fs::OpenOptionsExt;
    let path = root.join(LOCK_FILE);
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
        .with_context(|| {
            format!(
                "opening the cache lock {} (no link followed)",
                path.display()
            )
        })?;
    match nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusiveNonblock) {
        Ok(l) => Ok(Some(l)),
        Err((_, nix::errno::Errno::EWOULDBLOCK)) => Ok(None),
        Err((_, e)) => Err(anyhow::anyhow!("locking {}: {e}", path.display())),
    }
}

/// Deletes an entry found bad, holding the cache lock. Under the lock the entry is checked
/// again: one that another process has meanwhile replaced with a good entry is left alone.
/// Returns whether it was deleted.
pub fn remove_bad_entry(dir: &Path, want: &Want) -> Result<bool> {
    let root = dir
        .parent()
        .with_context(|| format!("{} has no parent directory", dir.display()))?;
    let _lock = lock(root)?;
    match check_entry(dir, want) {
        EntryState::Good(_) | EntryState::Missing => Ok(false),
        EntryState::Bad(_) => {
            std::fs::remove_dir_all(dir)
                .with_context(|| format!("removing the bad cache entry {}", dir.display()))?;
            Ok(true)
        }
    }
}

/// A manifest is a few hundred KiB at most (its package list); anything past this is not one.
const MANIFEST_MAX: u64 = 8 << 20;

/// The manifest of the entry in `dir`, read bounded and through no link (the entry itself, a
/// link where an entry should be, is refused too). Its files are not hashed: this says what the
/// entry claims to be, as a listing of the cache needs, not whether it can be trusted.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let m = std::fs::symlink_metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    if !m.is_dir() {
        anyhow::bail!(
            "{} is not a directory (a link is not followed)",
            dir.display()
        );
    }
    let path = dir.join(MANIFEST_FILE);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(&path)
        .with_context(|| format!("opening {} (no link followed)", path.display()))?;
    if !f.metadata()?.is_file() {
        anyhow::bail!("{} is not a regular file", path.display());
    }
    let mut bytes = Vec::new();
    f.take(MANIFEST_MAX + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > MANIFEST_MAX {
        anyhow::bail!("{} is larger than {MANIFEST_MAX} bytes", path.display());
    }
    serde_json::from_slice(&bytes).with_context(|| format!("parsing {}", path.display()))
}

/// The entries directly under the cache `root` whose manifest reads ([`read_manifest`]), with
/// it; links are not followed.
pub fn entry_manifests(root: &Path) -> Vec<(PathBuf, Manifest)> {
    let Ok(rd) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let mut out: Vec<(PathBuf, Manifest)> = rd
        .flatten()
        .filter(|e| e.path().join(MANIFEST_FILE).exists())
        .filter_map(|e| read_manifest(&e.path()).ok().map(|m| (e.path(), m)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn write_stamps(dir: &Path, stamps: &BTreeMap<String, FileStat>) -> Result<()> {
    let text = serde_json::to_string(stamps).context("serialising stamps")?;
    std::fs::write(dir.join(STAMP_FILE), text).context("writing the verification stamp")
}

/// Records the current stat of the manifest's files as verified (right after hashing them).
pub fn stamp_entry(dir: &Path, manifest: &Manifest) -> Result<()> {
    let mut stamps = BTreeMap::new();
    for (name, _) in manifest.hashed_files() {
        stamps.insert(name.to_string(), stat(&dir.join(name))?);
    }
    write_stamps(dir, &stamps)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::manifest::*;

    #[test]
    fn key_changes_with_any_input() {
        let a = entry_key(
            "bookworm",
            &[
                ("image.conf".into(), "aa".into()),
                ("packages.lock".into(), "bb".into()),
            ],
        );
        let b = entry_key(
            "bookworm",
            &[
                ("image.conf".into(), "aa".into()),
                ("packages.lock".into(), "bc".into()),
            ],
        );
        assert!(a.starts_with("bookworm-") && a.len() == "bookworm-".len() + 20);
        assert_ne!(a, b);
        assert_eq!(
            a,
            entry_key(
                "bookworm",
                &[
                    ("image.conf".into(), "aa".into()),
                    ("packages.lock".into(), "bb".into())
                ]
            )
        );
    }

    fn inputs() -> Vec<(String, String)> {
        vec![
            ("image.conf".into(), "aa".repeat(32)),
            ("packages.lock".into(), "bb".repeat(32)),
        ]
    }

    fn want(inputs: &[(String, String)]) -> (String, Vec<(String, String)>) {
        (entry_key("t", inputs), inputs.to_vec())
    }

    fn manifest_for(dir: &Path) -> Manifest {
        let mut files = Vec::new();
        for (n, body) in [
            (DISK_FILE, "disk"),
            (KERNEL_FILE, "kernel"),
            (INITRD_FILE, "initrd"),
        ] {
            std::fs::write(dir.join(n), body).unwrap();
            files.push(sha256_hex(body.as_bytes()));
        }
        Manifest {
            manifest_version: MANIFEST_VERSION,
            image_name: "t".into(),
            key: entry_key("t", &inputs()),
            suite: "bookworm".into(),
            architecture: "amd64".into(),
            image_sha256: files[0].clone(),
            image_bytes: 4,
            kernel_sha256: files[1].clone(),
            initrd_sha256: files[2].clone(),
            lock_sha256: "bb".repeat(32),
            definition_sha256: String::new(),
            inputs: inputs()
                .into_iter()
                .map(|(path, sha256)| InputFile { path, sha256 })
                .collect(),
            kernel_release: "6.1".into(),
            packages: vec![],
            mirror: String::new(),
            source_date_epoch: 0,
            builder: "mmdebstrap".into(),
            builder_mode: "unshare".into(),
            tool_versions: BTreeMap::new(),
            built_at: String::new(),
            build_seconds: 0.0,
            disk_image: DISK_FILE.into(),
            kernel: KERNEL_FILE.into(),
            initrd: INITRD_FILE.into(),
            init_path: String::new(),
            kernel_cmdline: String::new(),
        }
    }

    #[test]
    fn check_entry_trusts_stamps_and_catches_changes() {
        let dir = std::env::temp_dir().join(format!("cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let (key, ins) = want(&inputs());
        let w = Want {
            image: "t",
            key: &key,
            inputs: &ins,
        };
        assert!(matches!(check_entry(&dir, &w), EntryState::Missing));
        std::fs::create_dir_all(&dir).unwrap();
        let m = manifest_for(&dir);
        m.write(&dir.join(MANIFEST_FILE)).unwrap();
        assert!(matches!(check_entry(&dir, &w), EntryState::Good(_)));
        assert!(dir.join(STAMP_FILE).exists());
        assert!(matches!(check_entry(&dir, &w), EntryState::Good(_)));
        std::fs::write(dir.join(KERNEL_FILE), "kernel, changed").unwrap();
        match check_entry(&dir, &w) {
            EntryState::Bad(why) => assert!(why.contains("vmlinuz has sha256"), "{why}"),
            other => panic!("{other:?}"),
        }
        std::fs::write(dir.join(KERNEL_FILE), "kernel").unwrap();
        assert!(matches!(check_entry(&dir, &w), EntryState::Good(_)));
        std::fs::remove_file(dir.join(INITRD_FILE)).unwrap();
        assert!(matches!(check_entry(&dir, &w), EntryState::Bad(_)));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// A manifest beside good files that claims other inputs than the ones computed is not
    /// trusted, whichever field it tampers with; the bad entry is deleted under the cache lock,
    /// and not while another process holds it.
    #[test]
    fn a_tampered_manifest_is_a_bad_entry_deleted_under_the_lock() {
        let root = std::env::temp_dir().join(format!("cache-tamper-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let dir = root.join("t-entry");
        std::fs::create_dir_all(&dir).unwrap();
        let (key, ins) = want(&inputs());
        let w = Want {
            image: "t",
            key: &key,
            inputs: &ins,
        };
        let good = manifest_for(&dir);
        good.write(&dir.join(MANIFEST_FILE)).unwrap();
        assert!(matches!(check_entry(&dir, &w), EntryState::Good(_)));

        type Tamper = Box<dyn Fn(&mut Manifest)>;
        let tampers: Vec<(Tamper, &str)> = vec![
            (Box::new(|m| m.key = "t-0000".into()), "records key t-0000"),
            (Box::new(|m| m.image_name = "u".into()), "is of image \"u\""),
            (
                Box::new(|m| m.inputs[1].sha256 = "cc".repeat(32)),
                "inputs differ from the ones computed (packages.lock)",
            ),
            (
                Box::new(|m| m.inputs.pop().map(drop).unwrap_or(())),
                "packages.lock",
            ),
            (
                Box::new(|m| m.lock_sha256 = "dd".repeat(32)),
                "records lock sha256",
            ),
        ];
        for (tamper, want_msg) in &tampers {
            let mut m = good.clone();
            tamper(&mut m);
            m.write(&dir.join(MANIFEST_FILE)).unwrap();
            match check_entry(&dir, &w) {
                EntryState::Bad(why) => assert!(why.contains(want_msg), "{why}"),
                other => panic!("{want_msg}: {other:?}"),
            }
        }
        // The same entry checked against other inputs (a changed lock) is bad too.
        let other = [ins[0].clone(), ("packages.lock".into(), "ee".repeat(32))];
        let other_key = entry_key("t", &other);
        good.write(&dir.join(MANIFEST_FILE)).unwrap();
        let w2 = Want {
            image: "t",
            key: &other_key,
            inputs: &other,
        };
        assert!(matches!(check_entry(&dir, &w2), EntryState::Bad(_)));
        // A good entry is never deleted.
        assert!(!remove_bad_entry(&dir, &w).unwrap());
        assert!(dir.exists());

        // Tampered, then deleted only once the lock another holder has is released.
        let mut m = good.clone();
        m.key = "t-0000".into();
        m.write(&dir.join(MANIFEST_FILE)).unwrap();
        let held = lock(&root).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let (d2, key2, ins2) = (dir.clone(), key.clone(), ins.clone());
        let t = std::thread::spawn(move || {
            let w = Want {
                image: "t",
                key: &key2,
                inputs: &ins2,
            };
            tx.send(remove_bad_entry(&d2, &w).unwrap()).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "deleted while another process held the lock"
        );
        assert!(dir.exists());
        drop(held);
        assert!(rx.recv_timeout(std::time::Duration::from_secs(10)).unwrap());
        t.join().unwrap();
        assert!(!dir.exists());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
