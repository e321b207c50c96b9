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
    let mut f =
        File::open(path).with_context(|| format!("opening {} to hash it", path.display()))?;
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
        if a.path.starts_with('/') || a.path.split('/').any(|c| c == "..") {
            out.push(Mismatch {
                path: a.path.clone(),
                problem: "path leaves the report directory".into(),
            });
            continue;
        }
        match sha256_file(&dir.join(&a.path)) {
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
}
