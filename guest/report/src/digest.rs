//! sha256 of bytes and files, and the artifact listing both sides verify against.

use crate::report::Artifact;
use anyhow::{Context, Result};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Read;
use std::path::Path;

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Standard base64 (RFC 4648); `pad` false gives the unpadded form OpenSSH prints after
/// `SHA256:`.
pub fn base64(bytes: &[u8], pad: bool) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        let chars = chunk.len() + 1;
        for i in 0..4 {
            if i < chars {
                out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
            } else if pad {
                out.push('=');
            }
        }
    }
    out
}

/// Streams the file, so multi-megabyte CRIU images cost no memory.
pub fn sha256_file(path: &Path) -> Result<(String, u64)> {
    let f = File::open(path).with_context(|| format!("opening {} to hash it", path.display()))?;
    sha256_reader(f, path)
}

/// The names inside a report that the report may cite: relative, no `.`/`..`/empty components.
pub fn relative_name_ok(rel: &str) -> bool {
    !rel.is_empty()
        && !rel.starts_with('/')
        && rel
            .split('/')
            .all(|c| !c.is_empty() && c != "." && c != "..")
}

/// Opens `dir/rel` for reading without following a link at any component below `dir`, and only
/// if it is a regular file. Everything in a report came from the guest, which could have put a
/// symlink to a host file (a key, ~/.bashrc) or a FIFO (which would block a plain open) there.
pub fn open_in_report(dir: &Path, rel: &str) -> Result<File> {
    use nix::fcntl::{open, openat, OFlag};
    use nix::sys::stat::{fstat, Mode, SFlag};
    if !relative_name_ok(rel) {
        anyhow::bail!("{rel:?} is not a plain relative path inside the report directory");
    }
    let dir_flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    let mut at = open(dir, dir_flags, Mode::empty())
        .with_context(|| format!("opening the report directory {}", dir.display()))?;
    let parts: Vec<&str> = rel.split('/').collect();
    let (last, parents) = parts.split_last().context("an empty artifact path")?;
    for p in parents {
        at = openat(&at, *p, dir_flags | OFlag::O_NOFOLLOW, Mode::empty()).with_context(|| {
            format!("{rel}: {p} is not a directory inside the report (a link is never followed)")
        })?;
    }
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
    let fd = openat(
        &at,
        *last,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| match e {
        nix::errno::Errno::ELOOP => anyhow::anyhow!("{rel} is a symbolic link, not a file"),
        e => anyhow::anyhow!("opening {rel} in {}: {e}", dir.display()),
    })?;
    let st = fstat(&fd).with_context(|| format!("stat of {rel}"))?;
    let kind = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT;
    if kind != SFlag::S_IFREG {
        let what = match kind {
            SFlag::S_IFIFO => "a FIFO",
            SFlag::S_IFCHR => "a character device",
            SFlag::S_IFBLK => "a block device",
            SFlag::S_IFSOCK => "a socket",
            SFlag::S_IFDIR => "a directory",
            _ => "not a regular file",
        };
        anyhow::bail!("{rel} is {what}, not a regular file");
    }
    Ok(File::from(fd))
}

/// Reads a whole file of the report (see `open_in_report`), refusing one over `cap` bytes.
pub fn read_in_report(dir: &Path, rel: &str, cap: u64) -> Result<Vec<u8>> {
    let f = open_in_report(dir, rel)?;
    let mut out = Vec::new();
    f.take(cap + 1)
        .read_to_end(&mut out)
        .with_context(|| format!("reading {rel} in {}", dir.display()))?;
    if out.len() as u64 > cap {
        anyhow::bail!("{rel} is larger than the {cap} bytes this rig reads of it");
    }
    Ok(out)
}

/// Writes `dir/name` whole or not at all: a temporary file created fresh (never through a link
/// someone left at its name), then renamed over the old one, which replaces a link rather than
/// writing through it.
pub fn replace_in_report(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let dst = dir.join(name);
    let tmp = dir.join(format!(".{name}.tmp-{}", std::process::id()));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(e).with_context(|| format!("removing a stale {}", tmp.display()))
        }
        _ => {}
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(&tmp)
        .with_context(|| format!("creating {}", tmp.display()))?;
    f.write_all(bytes)
        .and_then(|()| f.sync_all())
        .with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, &dst)
        .with_context(|| format!("renaming {} to {}", tmp.display(), dst.display()))
}

fn sha256_reader(mut f: File, path: &Path) -> Result<(String, u64)> {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 16];
    let mut total = 0u64;
    loop {
        let n = f
            .read(&mut buf)
            .with_context(|| format!("reading {} to hash it", path.display()))?;
        if n == 0 {
            break;
        }
        total += n as u64;
        h.update(&buf[..n]);
    }
    Ok((hex(&h.finalize()), total))
}

/// Hashes `dir/rel` into an artifact entry.
pub fn artifact(dir: &Path, rel: &str, kind: &str) -> Result<Artifact> {
    let (sha256, bytes) = sha256_file(&dir.join(rel))?;
    Ok(Artifact {
        path: rel.to_string(),
        sha256,
        bytes,
        kind: kind.to_string(),
    })
}

/// One artifact whose bytes on disk no longer match the report.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub path: String,
    pub problem: String,
}

/// Re-hashes every artifact under `dir`; returns what does not match.
pub fn verify_artifacts(dir: &Path, artifacts: &[Artifact]) -> Vec<Mismatch> {
    let mut out = Vec::new();
    for a in artifacts {
        if !relative_name_ok(&a.path) {
            out.push(Mismatch {
                path: a.path.clone(),
                problem: "path leaves the report directory".into(),
            });
            continue;
        }
        let hashed =
            open_in_report(dir, &a.path).and_then(|f| sha256_reader(f, &dir.join(&a.path)));
        match hashed {
            Ok((h, _)) if h == a.sha256 => {}
            Ok((h, _)) => out.push(Mismatch {
                path: a.path.clone(),
                problem: format!("sha256 is {h}, report says {}", a.sha256),
            }),
            Err(e) => out.push(Mismatch {
                path: a.path.clone(),
                problem: format!("{e:#}"),
            }),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_vector() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn base64_vectors() {
        for (raw, padded) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(raw.as_bytes(), true), padded);
            assert_eq!(base64(raw.as_bytes(), false), padded.trim_end_matches('='));
        }
    }

    #[test]
    fn verify_finds_changed_missing_and_escaping_files() {
        let dir = std::env::temp_dir().join(format!("digest-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("a.txt"), b"abc").unwrap();
        let good = artifact(&dir, "a.txt", "log").unwrap();
        assert!(verify_artifacts(&dir, std::slice::from_ref(&good)).is_empty());
        std::fs::write(dir.join("a.txt"), b"abd").unwrap();
        let mut list = vec![good.clone()];
        list.push(Artifact {
            path: "gone.png".into(),
            ..good.clone()
        });
        list.push(Artifact {
            path: "../x".into(),
            ..good
        });
        let bad = verify_artifacts(&dir, &list);
        assert_eq!(bad.len(), 3);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn report_files_are_opened_without_following_links_and_only_if_regular() {
        use std::os::unix::fs::symlink;
        let dir = std::env::temp_dir().join(format!("digest-nofollow-{}", std::process::id()));
        let outside = std::env::temp_dir().join(format!("digest-outside-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("png")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"host key").unwrap();
        std::fs::write(dir.join("png/ok.png"), b"png").unwrap();
        symlink(outside.join("secret"), dir.join("png/link.png")).unwrap();
        symlink(&outside, dir.join("linkdir")).unwrap();
        nix::unistd::mkfifo(&dir.join("fifo.log"), nix::sys::stat::Mode::S_IRUSR).unwrap();

        assert_eq!(read_in_report(&dir, "png/ok.png", 3).unwrap(), b"png");
        let err = |rel: &str| format!("{:#}", read_in_report(&dir, rel, 1 << 20).unwrap_err());
        assert!(
            err("png/link.png").contains("is a symbolic link"),
            "{}",
            err("png/link.png")
        );
        assert!(err("linkdir/secret").contains("linkdir is not a directory inside the report"));
        // Would block forever in a plain open().
        assert!(err("fifo.log").contains("fifo.log is a FIFO, not a regular file"));
        assert!(err("png").contains("is a directory"));
        assert!(err("../x").contains("not a plain relative path"));
        assert!(err("png//ok.png").contains("not a plain relative path"));
        let big = format!("{:#}", read_in_report(&dir, "png/ok.png", 2).unwrap_err());
        assert!(big.contains("larger than the 2 bytes"), "{big}");

        // Replacing a file that is a link replaces the link, and the target is untouched.
        symlink(outside.join("secret"), dir.join("report.json")).unwrap();
        replace_in_report(&dir, "report.json", b"{}").unwrap();
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"host key");
        assert_eq!(read_in_report(&dir, "report.json", 2).unwrap(), b"{}");
        symlink(
            outside.join("secret"),
            dir.join(format!(".r.tmp-{}", std::process::id())),
        )
        .unwrap();
        replace_in_report(&dir, "r", b"x").unwrap();
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"host key");

        let (sha, _) = sha256_file(&outside.join("secret")).unwrap();
        let list = [Artifact {
            path: "png/link.png".into(),
            sha256: sha,
            bytes: 8,
            kind: "png".into(),
        }];
        let bad = verify_artifacts(&dir, &list);
        assert_eq!(bad.len(), 1, "a link with a matching hash must not verify");
        assert!(bad[0].problem.contains("symbolic link"));
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
