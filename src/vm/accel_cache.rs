//! The `--accel auto` verdict, kept in the image cache so that a KVM that hangs costs its probe
//! once per host boot, QEMU and guest kernel instead of on every run. The file is data in a
//! writable directory: it is read bounded, through no link, and anything in it that does not
//! parse or does not match this host boot, QEMU and kernel exactly is ignored (and the probe
//! runs again). It is written to a temporary file and renamed into place.

use super::qemu::Accel;
use crate::image::ImageEntry;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// The verdicts' directory under the image cache root.
pub const DIR: &str = "accel";

/// Bumped when the record's meaning changes; a record of another format is ignored.
pub const FORMAT: u32 = 1;

/// A record is a few hundred bytes; anything past this is not one.
const MAX_BYTES: u64 = 16 * 1024;

/// The longest reason taken back from a record.
const MAX_REASON: usize = 2000;

/// Everything a verdict depends on: which kernel the host runs (a reboot may fix or break
/// /dev/kvm), which QEMU, and which guest kernel it boots (the probe watches for its banner).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Key {
    pub host_boot_id: String,
    pub qemu_version: String,
    pub kernel_sha256: String,
}

/// One probe's verdict as the file holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub format: u32,
    pub key: Key,
    /// `kvm` or `tcg`.
    pub accel: String,
    /// The probe's reason, as it went into that run's report.
    pub reason: String,
    /// When the probe decided, RFC 3339 UTC.
    pub decided_at: String,
}

/// A verdict that may be used for this key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub accel: Accel,
    pub reason: String,
    pub decided_at: String,
}

/// What the cache says for a key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    Hit(Verdict),
    /// Why there is no usable verdict; the probe runs.
    Miss(String),
}

/// Where the verdict for one guest kernel is kept, and that kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spot {
    /// The image cache root; the record goes in its [`DIR`].
    pub cache_root: PathBuf,
    pub kernel_sha256: String,
}

impl Spot {
    /// The spot for an image's kernel: in the cache root its entry is in.
    pub fn of_image(entry: &ImageEntry) -> Option<Spot> {
        Some(Spot {
            cache_root: entry.dir.parent()?.to_path_buf(),
            kernel_sha256: entry.manifest.kernel_sha256.clone(),
        })
    }

    /// One file per guest kernel, so that images with other kernels do not overwrite each
    /// other's verdict; the host boot and QEMU are checked inside it.
    pub fn path(&self) -> PathBuf {
        let short: String = self
            .kernel_sha256
            .chars()
            .filter(char::is_ascii_hexdigit)
            .take(16)
            .collect();
        self.cache_root
            .join(DIR)
            .join(format!("kernel-{short}.json"))
    }
}

/// The pure decision: the stored bytes (None: no file) against the key of this run.
pub fn decide(key: &Key, stored: Option<&[u8]>) -> Lookup {
    let Some(bytes) = stored else {
        return Lookup::Miss("no verdict cached yet".into());
    };
    let r: Record = match serde_json::from_slice(bytes) {
        Ok(r) => r,
        Err(e) => return Lookup::Miss(format!("the cached verdict does not parse ({e})")),
    };
    if r.format != FORMAT {
        return Lookup::Miss(format!(
            "the cached verdict is of format {}, not {FORMAT}",
            r.format
        ));
    }
    if r.key.host_boot_id != key.host_boot_id {
        return Lookup::Miss("the cached verdict is of another host boot".into());
    }
    if r.key.qemu_version != key.qemu_version {
        return Lookup::Miss(format!(
            "the cached verdict is of another QEMU ({:?}, this is {:?})",
            crate::escape::line(&r.key.qemu_version),
            key.qemu_version
        ));
    }
    if r.key.kernel_sha256 != key.kernel_sha256 {
        return Lookup::Miss("the cached verdict is of another guest kernel".into());
    }
    let accel = match r.accel.as_str() {
        "kvm" => Accel::Kvm,
        "tcg" => Accel::Tcg,
        _ => return Lookup::Miss("the cached verdict names no accelerator".into()),
    };
    if !is_timestamp(&r.decided_at) {
        return Lookup::Miss("the cached verdict's time is not an RFC 3339 time".into());
    }
    if r.reason.is_empty() || r.reason.len() > MAX_REASON {
        return Lookup::Miss("the cached verdict's reason is empty or too long".into());
    }
    Lookup::Hit(Verdict {
        accel,
        // It goes into progress and the report: one line, nothing hidden.
        reason: crate::escape::line(&r.reason),
        decided_at: r.decided_at,
    })
}

/// `2026-12-02T12:00:00.000Z` and the like: digits and the separators of RFC 3339 only.
fn is_timestamp(s: &str) -> bool {
    (20..=35).contains(&s.len())
        && s.as_bytes().get(10) == Some(&b'T')
        && s.chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '-' | ':' | 'T' | 'Z' | '.' | '+'))
}

/// The record of a probe's verdict.
pub fn record(key: &Key, accel: Accel, reason: &str, decided_at: &str) -> Record {
    Record {
        format: FORMAT,
        key: key.clone(),
        accel: accel.as_str().into(),
        reason: reason.into(),
        decided_at: decided_at.into(),
    }
}

/// This host's boot id.
pub fn host_boot_id() -> Result<String> {
    let path = Path::new("/proc/sys/kernel/random/boot_id");
    let mut s = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(128).read_to_string(&mut s))
        .with_context(|| format!("reading {}", path.display()))?;
    let id = s.trim();
    if id.is_empty() {
        bail!("{} is empty", path.display());
    }
    Ok(id.to_string())
}

/// The stored bytes at `path`: None when there is no file. A link, a non-regular file or a
/// file past the bound is an error (and so ignored by the caller).
pub fn read(path: &Path) -> Result<Option<Vec<u8>>> {
    read_capped(path, MAX_BYTES)
}

/// [`read`] with another bound: the session's other small records (a snapshot's) are read by
/// the same rules.
pub fn read_capped(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    let f = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc_o_nofollow())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(e).with_context(|| format!("opening {} (no link followed)", path.display()))
        }
    };
    let meta = f.metadata().context("reading its metadata")?;
    if !meta.is_file() {
        bail!("{} is not a regular file", path.display());
    }
    let mut bytes = Vec::new();
    f.take(max + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("reading {}", path.display()))?;
    if bytes.len() as u64 > max {
        bail!("{} is larger than {max} bytes", path.display());
    }
    Ok(Some(bytes))
}

/// Writes `r` to `path`: a fresh temporary file beside it (created new, through no link), then
/// renamed over it, so a reader sees the old record or the new one, never half of one. A link
/// where the directory should be is refused.
pub fn write(path: &Path, r: &Record) -> Result<()> {
    let dir = path
        .parent()
        .context("the verdict's path has no directory")?;
    match std::fs::symlink_metadata(dir) {
        Ok(m) if m.file_type().is_symlink() => {
            bail!(
                "{} is a symbolic link: not writing through it",
                dir.display()
            )
        }
        Ok(m) if !m.is_dir() => bail!("{} is not a directory", dir.display()),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
    }
    let name = path
        .file_name()
        .context("the verdict's path has no file name")?
        .to_string_lossy();
    let suffix = sharedos_report::random::random_hex(4)
        .unwrap_or_else(|_| format!("{:08x}", std::process::id()));
    let tmp = dir.join(format!(".{name}.{}.{suffix}.tmp", std::process::id()));
    let bytes = serde_json::to_vec_pretty(r).context("encoding the verdict")?;
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc_o_nofollow())
        .open(&tmp)
        .and_then(|mut f| f.write_all(&bytes).and_then(|()| f.sync_all()));
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e).with_context(|| format!("writing {}", tmp.display()));
    }
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        anyhow::Error::new(e).context(format!("renaming {} to {}", tmp.display(), path.display()))
    })
}

fn libc_o_nofollow() -> i32 {
    nix::fcntl::OFlag::O_NOFOLLOW.bits()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        Key {
            host_boot_id: "0f1e2d3c-aaaa-bbbb-cccc-000000000001".into(),
            qemu_version: "QEMU emulator version 7.2.22".into(),
            kernel_sha256: "ab".repeat(32),
        }
    }

    fn stored(r: &Record) -> Vec<u8> {
        serde_json::to_vec(r).unwrap()
    }

    fn probed() -> Record {
        record(
            &key(),
            Accel::Tcg,
            "auto: under KVM the kernel showed no boot progress within 8 s; fell back",
            "2026-12-02T12:00:00.000Z",
        )
    }

    #[test]
    fn a_verdict_for_this_key_is_a_hit() {
        let got = decide(&key(), Some(&stored(&probed())));
        assert_eq!(
            got,
            Lookup::Hit(Verdict {
                accel: Accel::Tcg,
                reason: probed().reason,
                decided_at: "2026-12-02T12:00:00.000Z".into(),
            })
        );
    }

    #[test]
    fn each_part_of_the_key_that_differs_is_a_miss() {
        let mut other_boot = key();
        other_boot.host_boot_id = "0f1e2d3c-aaaa-bbbb-cccc-000000000002".into();
        let mut other_qemu = key();
        other_qemu.qemu_version = "QEMU emulator version 10.0.2".into();
        let mut other_kernel = key();
        other_kernel.kernel_sha256 = "cd".repeat(32);
        for (k, says) in [
            (other_boot, "another host boot"),
            (other_qemu, "another QEMU"),
            (other_kernel, "another guest kernel"),
        ] {
            match decide(&k, Some(&stored(&probed()))) {
                Lookup::Miss(why) => assert!(why.contains(says), "{why}"),
                hit => panic!("{says}: {hit:?}"),
            }
        }
        assert_eq!(
            decide(&key(), None),
            Lookup::Miss("no verdict cached yet".into())
        );
    }

    #[test]
    fn a_damaged_record_is_a_miss() {
        let good = String::from_utf8(stored(&probed())).unwrap();
        let mut wrong_accel = probed();
        wrong_accel.accel = "hvf".into();
        let mut wrong_time = probed();
        wrong_time.decided_at = "yesterday".into();
        let mut no_reason = probed();
        no_reason.reason.clear();
        let mut long_reason = probed();
        long_reason.reason = "x".repeat(MAX_REASON + 1);
        let mut old = probed();
        old.format = 0;
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (good.as_bytes()[..good.len() / 2].to_vec(), "does not parse"),
            (b"\xff\xfe\x00".to_vec(), "does not parse"),
            (Vec::new(), "does not parse"),
            (
                good.replacen('{', "{\"extra\":1,", 1).into_bytes(),
                "does not parse",
            ),
            (stored(&wrong_accel), "names no accelerator"),
            (stored(&wrong_time), "not an RFC 3339 time"),
            (stored(&no_reason), "empty or too long"),
            (stored(&long_reason), "empty or too long"),
            (stored(&old), "format 0"),
        ];
        for (bytes, says) in cases {
            match decide(&key(), Some(&bytes)) {
                Lookup::Miss(why) => assert!(why.contains(says), "{says}: {why}"),
                hit => panic!("{says}: {hit:?}"),
            }
        }
    }

    #[test]
    fn a_reason_from_the_file_reaches_no_terminal_as_itself() {
        let mut r = probed();
        r.reason = "auto: fell back\r\x1b[2Jaccelerator: kvm".into();
        match decide(&key(), Some(&stored(&r))) {
            Lookup::Hit(v) => assert!(
                !v.reason.contains('\r') && !v.reason.contains('\x1b'),
                "{:?}",
                v.reason
            ),
            miss => panic!("{miss:?}"),
        }
    }

    #[test]
    fn written_atomically_read_back_and_no_link_followed() {
        let dir = std::env::temp_dir().join(format!("accel-cache-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let spot = Spot {
            cache_root: dir.clone(),
            kernel_sha256: key().kernel_sha256,
        };
        let path = spot.path();
        assert_eq!(path, dir.join("accel/kernel-abababababababab.json"));
        assert_eq!(read(&path).unwrap(), None);
        write(&path, &probed()).unwrap();
        let bytes = read(&path).unwrap().unwrap();
        assert!(matches!(decide(&key(), Some(&bytes)), Lookup::Hit(_)));
        // Nothing is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.join(DIR))
            .unwrap()
            .flatten()
            .collect();
        assert_eq!(names.len(), 1);
        // A link in the record's place is not followed on read.
        let target = dir.join("elsewhere.json");
        std::fs::write(&target, &bytes).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        assert!(read(&path).is_err());
        // Writing replaces the link itself; the file it pointed at is untouched.
        let mut kvm = probed();
        kvm.accel = "kvm".into();
        write(&path, &kvm).unwrap();
        assert!(!std::fs::symlink_metadata(&path)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&target).unwrap(), bytes);
        // A file past the bound is refused.
        std::fs::write(&path, vec![b' '; MAX_BYTES as usize + 1]).unwrap();
        assert!(read(&path).is_err());
        // A link where the directory should be is not written through.
        let linked = dir.join("linked");
        std::os::unix::fs::symlink(dir.join(DIR), &linked).unwrap();
        assert!(write(&linked.join("kernel-x.json"), &probed()).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
