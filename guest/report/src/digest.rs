//! sha256 of bytes and files, the names a report may hold, and writing a report's files: what
//! the writers on both sides share. Reading a report directory back is the host's one reader
//! (sharedos-rig's `judge::reader`).

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
    fn a_file_is_replaced_whole_and_never_written_through_a_link() {
        use std::os::unix::fs::symlink;
        let dir = std::env::temp_dir().join(format!("digest-replace-{}", std::process::id()));
        let outside = std::env::temp_dir().join(format!("digest-outside-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let _ = std::fs::remove_dir_all(&outside);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret"), b"host key").unwrap();
        symlink(outside.join("secret"), dir.join("report.json")).unwrap();
        replace_in_report(&dir, "report.json", b"{}").unwrap();
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"host key");
        assert_eq!(std::fs::read(dir.join("report.json")).unwrap(), b"{}");
        assert!(!std::fs::symlink_metadata(dir.join("report.json"))
            .unwrap()
            .file_type()
            .is_symlink());
        symlink(
            outside.join("secret"),
            dir.join(format!(".r.tmp-{}", std::process::id())),
        )
        .unwrap();
        replace_in_report(&dir, "r", b"x").unwrap();
        assert_eq!(std::fs::read(outside.join("secret")).unwrap(), b"host key");
        let a = artifact(&dir, "r", "log").unwrap();
        assert_eq!((a.sha256, a.bytes), (sha256_hex(b"x"), 1));
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::remove_dir_all(&outside).unwrap();
    }
}
