//! The image cache: where it is, the key of an entry, and whether an entry can be trusted.

use super::manifest::{Manifest, MANIFEST_FILE, MANIFEST_VERSION};
use crate::digest::{sha256_file, sha256_hex};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
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

/// Checks an entry; only files whose stat changed since the last good check are re-hashed.
pub fn check_entry(dir: &Path) -> EntryState {
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
            key: "t-x".into(),
            suite: "bookworm".into(),
            architecture: "amd64".into(),
            image_sha256: files[0].clone(),
            image_bytes: 4,
            kernel_sha256: files[1].clone(),
            initrd_sha256: files[2].clone(),
            lock_sha256: String::new(),
            definition_sha256: String::new(),
            inputs: vec![],
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
        assert!(matches!(check_entry(&dir), EntryState::Missing));
        std::fs::create_dir_all(&dir).unwrap();
        let m = manifest_for(&dir);
        m.write(&dir.join(MANIFEST_FILE)).unwrap();
        assert!(matches!(check_entry(&dir), EntryState::Good(_)));
        assert!(dir.join(STAMP_FILE).exists());
        assert!(matches!(check_entry(&dir), EntryState::Good(_)));
        std::fs::write(dir.join(KERNEL_FILE), "kernel, changed").unwrap();
        match check_entry(&dir) {
            EntryState::Bad(why) => assert!(why.contains("vmlinuz has sha256"), "{why}"),
            other => panic!("{other:?}"),
        }
        std::fs::write(dir.join(KERNEL_FILE), "kernel").unwrap();
        assert!(matches!(check_entry(&dir), EntryState::Good(_)));
        std::fs::remove_file(dir.join(INITRD_FILE)).unwrap();
        assert!(matches!(check_entry(&dir), EntryState::Bad(_)));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
