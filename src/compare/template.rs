//! The templated VM arm's own parts: the RAM file its template writes and its clones map
//! private, on the host's tmpfs; what the arm needs of the host, checked before anything
//! boots; and the file read with the clones' memory.

use crate::judge::compare::TemplateRam;
use crate::vm::qemu::{RamFile, IGNORE_SHARED};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// Where template RAM files go: a tmpfs, so that the file's pages are memory the host holds
/// (as a deployment's template is), not a disk's page cache the kernel may drop and read back.
pub const TMPFS: &str = "/dev/shm";

/// Why the arm keeps the balloon's free page reporting off, as its reading of memory given
/// back says.
pub const NO_RECLAIM: &str = "not run: free page reporting stays off with a template";

/// The QEMU features the arm needs, as the report names them.
pub fn features() -> Vec<String> {
    vec![
        "memory-backend-file: share=on for the template, share=off (private, copy-on-write) for each clone".into(),
        format!("migration capability {IGNORE_SHARED}: the saved state leaves the RAM file out"),
        "-incoming defer, so that each clone sets the capability before its state arrives".into(),
    ]
}

/// What the arm keeps off.
pub fn off() -> Vec<String> {
    vec![
        "free page reporting: the guest's virtio_balloon driver is never loaded, since a page a clone reported would be dropped from its private map of the template's file and read back as the template's".into(),
        "the balloon: never inflated (the device is there, since the image's snapshot holds it)".into(),
    ]
}

/// The oldest QEMU with the `x-ignore-shared` capability (4.0) and `-incoming defer`.
const MIN_QEMU: (u32, u32) = (4, 0);

/// Why this host cannot run the arm with guests of `memory_mib`, or None. `qemu_version` is
/// QEMU's own `x.y.z`; `tmpfs_free` the bytes free on [`TMPFS`], None when it is no tmpfs.
pub fn why_not(qemu_version: &str, tmpfs_free: Option<u64>, memory_mib: u64) -> Option<String> {
    // QEMU says "QEMU emulator version 7.2.22 (Debian ...)": its first word that starts with a
    // digit.
    let word = qemu_version
        .split_whitespace()
        .find(|w| w.starts_with(|c: char| c.is_ascii_digit()))
        .unwrap_or(qemu_version);
    let mut parts = word.split('.').map(|p| p.parse::<u32>().ok());
    let have = match (parts.next().flatten(), parts.next().flatten()) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            return Some(format!(
                "QEMU's version {qemu_version:?} does not read as x.y\nfix: install QEMU {}.{} or later (`.ci/install-host`)",
                MIN_QEMU.0, MIN_QEMU.1
            ))
        }
    };
    if have < MIN_QEMU {
        return Some(format!(
            "--arms vm-template needs QEMU {}.{} or later (the migration capability {IGNORE_SHARED}), and this QEMU is {qemu_version}; nothing was booted\nfix: install a newer QEMU (`.ci/install-host`), or leave vm-template out of --arms",
            MIN_QEMU.0, MIN_QEMU.1
        ));
    }
    let need = memory_mib.saturating_mul(1 << 20);
    match tmpfs_free {
        None => Some(format!(
            "--arms vm-template keeps its template's RAM on a tmpfs at {TMPFS}, and there is none; nothing was booted\nfix: mount one (`mount -t tmpfs tmpfs {TMPFS}`), or leave vm-template out of --arms"
        )),
        Some(free) if free < need => Some(format!(
            "--arms vm-template keeps its template's RAM ({memory_mib} MiB) on {TMPFS}, which has {} MiB free; nothing was booted\nfix: free space there, give less --memory, or leave vm-template out of --arms",
            free >> 20
        )),
        Some(_) => None,
    }
}

/// The bytes free on [`TMPFS`], None when it is not a tmpfs (or cannot be read).
pub fn tmpfs_free() -> Option<u64> {
    let st = nix::sys::statfs::statfs(TMPFS).ok()?;
    if st.filesystem_type() != nix::sys::statfs::TMPFS_MAGIC {
        return None;
    }
    st.blocks_available()
        .checked_mul(u64::try_from(st.block_size()).ok()?)
}

/// [`why_not`] on this host, as an error that says the fix.
pub fn check(memory_mib: u64) -> Result<()> {
    let version = crate::vm::qemu_version()?;
    match why_not(&version, tmpfs_free(), memory_mib) {
        Some(why) => bail!("{why}"),
        None => Ok(()),
    }
}

/// A template RAM file's path, removed when dropped (whether or not QEMU ever made the file),
/// so that no failure leaves a guest's memory on the host's tmpfs.
pub struct RamGuard {
    path: PathBuf,
}

impl RamGuard {
    /// A new, empty file for a template of `memory_mib`, readable by this user alone (it will
    /// hold a guest's memory, keys included, on a tmpfs every user sees); QEMU sizes it. Made
    /// with O_EXCL, so that nothing another user placed at the name is written through.
    pub fn new(memory_mib: u64) -> Result<RamGuard> {
        use std::os::unix::fs::OpenOptionsExt;
        check(memory_mib)?;
        let path = Path::new(TMPFS).join(format!(
            "sharedos-rig-template-{}-{}.ram",
            std::process::id(),
            crate::vm::session::short_id()
        ));
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .with_context(|| format!("creating the template's RAM file {}", path.display()))?;
        Ok(RamGuard { path })
    }

    /// The template's RAM, written through.
    pub fn template(&self) -> RamFile {
        RamFile {
            path: self.path.clone(),
            share: true,
        }
    }
}

impl Drop for RamGuard {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// The page size the template's file is sparsified by.
const PAGE: usize = 4096;

/// Punches every all-zero page out of the template's RAM file, once its QEMU has quit: the
/// template loaded the image's snapshot through a shared mapping of the file, and QEMU reads
/// each page it is sent to tell a zero page, which on a tmpfs gives the page memory. A hole
/// reads back as zeros, so no clone sees a difference. Returns the bytes punched out.
pub fn sparsify(path: &Path) -> Result<u64> {
    use nix::fcntl::{fallocate, FallocateFlags};
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
        .open(path)
        .with_context(|| format!("opening the template's RAM file {}", path.display()))?;
    let mut buf = vec![0u8; 512 * PAGE];
    let mut at: u64 = 0;
    // A run of zero pages not yet punched: (start, length).
    let mut run: Option<(u64, u64)> = None;
    let mut punched: u64 = 0;
    let mut punch = |f: &std::fs::File, (start, len): (u64, u64)| -> Result<()> {
        let (o, l) = (i64::try_from(start)?, i64::try_from(len)?);
        fallocate(
            f,
            FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE,
            o,
            l,
        )
        .with_context(|| format!("punching zero pages out of {}", path.display()))?;
        punched = punched.saturating_add(len);
        Ok(())
    };
    loop {
        let n = match f.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e).context("reading the template's RAM file"),
        };
        for page in buf[..n].chunks(PAGE) {
            let len = page.len() as u64;
            if page.iter().all(|b| *b == 0) {
                run = Some(match run {
                    Some((start, l)) => (start, l.saturating_add(len)),
                    None => (at, len),
                });
            } else if let Some(r) = run.take() {
                punch(&f, r)?;
            }
            at = at.saturating_add(len);
        }
    }
    if let Some(r) = run {
        punch(&f, r)?;
    }
    Ok(punched)
}

/// The template's RAM file as the host holds it, read with the clones' memory: its size and
/// its tmpfs blocks. A file that cannot be read is said in `how`, with zero figures.
/// `sparsified`: what [`sparsify`] punched out after the save, or why it failed.
pub fn reading(
    path: &Path,
    memory_mib: u64,
    sparsified: &std::result::Result<u64, String>,
) -> TemplateRam {
    use std::os::unix::fs::MetadataExt;
    let sparse = match sparsified {
        Ok(b) => format!(
            "its zero pages ({} MiB) punched out after the save",
            b >> 20
        ),
        Err(e) => format!("its zero pages could not be punched out ({e}), so all of it is held"),
    };
    let how = format!(
        "a file of the guest's {memory_mib} MiB on the host's tmpfs ({TMPFS}), written by the template's QEMU (share=on) and mapped private by each clone's (share=off), {sparse}; resident: its tmpfs blocks, read by the host with every clone up"
    );
    let read = std::fs::symlink_metadata(path)
        .with_context(|| format!("reading {}", path.display()))
        .and_then(|m| {
            if !m.file_type().is_file() {
                bail!("{} is not a plain file", path.display());
            }
            Ok((m.size(), m.blocks().saturating_mul(512)))
        });
    match read {
        Ok((bytes, resident_bytes)) => TemplateRam {
            bytes,
            resident_bytes,
            how,
            features: features(),
            off: off(),
        },
        Err(e) => TemplateRam {
            how: format!("{how}; it could not be read: {e:#}"),
            features: features(),
            off: off(),
            ..TemplateRam::default()
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_old_qemu_no_tmpfs_or_too_little_room_is_refused_with_the_fix() {
        assert_eq!(why_not("7.2.22", Some(4 << 30), 2048), None);
        let said = "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)";
        assert_eq!(why_not(said, Some(4 << 30), 2048), None);
        let old = "QEMU emulator version 3.1.1 (Debian 1:3.1+dfsg-8)";
        assert!(why_not(old, Some(4 << 30), 2048).is_some());
        assert_eq!(why_not("10.0.2", Some(2 << 30), 2048), None);
        for (version, free, says) in [
            ("3.1.0", Some(4 << 30), "needs QEMU 4.0 or later"),
            ("x", Some(4 << 30), "does not read as x.y"),
            ("7.2.22", None, "there is none"),
            ("7.2.22", Some(1 << 30), "which has 1024 MiB free"),
        ] {
            let why = why_not(version, free, 2048).unwrap();
            assert!(why.contains(says) && why.contains("fix:"), "{why}");
        }
    }

    #[test]
    fn the_file_read_back_is_its_size_and_blocks() {
        let dir = std::env::temp_dir().join(format!("template-reading-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("t.ram");
        std::fs::write(&f, vec![1u8; 1 << 20]).unwrap();
        let r = reading(&f, 1, &Ok(0));
        assert_eq!(r.bytes, 1 << 20);
        assert!(r.resident_bytes >= 1 << 20, "{r:?}");
        assert!(!r.features.is_empty() && !r.off.is_empty());
        let gone = reading(&dir.join("none"), 1, &Err("no file".into()));
        assert_eq!((gone.bytes, gone.resident_bytes), (0, 0));
        assert!(gone.how.contains("could not be read"), "{}", gone.how);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_ram_file_is_this_user_s_alone_and_gone_with_its_guard() {
        use std::os::unix::fs::PermissionsExt;
        let g = RamGuard::new(1).unwrap();
        let path = g.template().path;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        drop(g);
        assert!(path.symlink_metadata().is_err());
    }

    #[test]
    fn zero_pages_are_punched_out_and_the_rest_reads_back_the_same() {
        use std::os::unix::fs::MetadataExt;
        let dir = std::path::Path::new(TMPFS).join(format!("sparsify-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        let mut data = vec![0u8; 1 << 22];
        // Pages 1, 3 and the last hold data; a zero run spans a read's chunk boundary.
        for p in [1usize, 3, (1 << 22) / PAGE - 1] {
            data[p * PAGE + 7] = 9;
        }
        std::fs::write(&dir, &data).unwrap();
        let punched = sparsify(&dir).unwrap();
        assert_eq!(punched, (1 << 22) - 3 * PAGE as u64);
        assert_eq!(std::fs::read(&dir).unwrap(), data);
        let m = std::fs::metadata(&dir).unwrap();
        assert_eq!(m.size(), 1 << 22);
        // Where the file system is a tmpfs, only the three data pages are held.
        if tmpfs_free().is_some() {
            assert_eq!(m.blocks() * 512, 3 * PAGE as u64);
        }
        std::fs::remove_file(&dir).unwrap();
    }
}
