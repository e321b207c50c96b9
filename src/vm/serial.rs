//! What the guest says on its serial console: the kernel's first line, and the lines our PID 1
//! prints (`SHAREDOS-KERNEL`, `SHAREDOS-HOSTKEY`, `SHAREDOS-READY`, `SHAREDOS-ERROR`).

use std::path::Path;

#[derive(Debug, Default, Clone, PartialEq)]
pub struct SerialState {
    /// The kernel printed its banner: boot is making progress.
    pub kernel_started: bool,
    pub kernel_release: Option<String>,
    /// `SHA256:<base64>` as ssh-keygen prints it.
    pub host_key: Option<String>,
    pub ready: bool,
    pub errors: Vec<String>,
    pub panic: Option<String>,
}

/// Reads the whole console log so far; lines can arrive split across reads, so the state is
/// always derived from the full text.
pub fn parse(text: &str) -> SerialState {
    let mut s = SerialState::default();
    for raw in text.lines() {
        let line = raw.trim_matches(|c: char| c == '\r' || c.is_whitespace());
        if line.contains("Linux version ") {
            s.kernel_started = true;
        }
        if line.contains("Kernel panic") {
            s.panic = Some(line.to_string());
        }
        if let Some(r) = line.strip_prefix("SHAREDOS-KERNEL ") {
            s.kernel_release = Some(r.trim().to_string());
        } else if let Some(k) = line.strip_prefix("SHAREDOS-HOSTKEY ") {
            let k = k.trim();
            if k.starts_with("SHA256:") {
                s.host_key = Some(k.to_string());
            }
        } else if line == "SHAREDOS-READY" {
            s.ready = true;
        } else if let Some(e) = line.strip_prefix("SHAREDOS-ERROR ") {
            s.errors.push(e.trim().to_string());
        }
    }
    s
}

pub fn read(path: &Path) -> SerialState {
    parse(&String::from_utf8_lossy(&head_bytes(path, MAX_PARSED)))
}

/// The console is the guest's to write: its markers come in the first kilobytes, so only this
/// much is read, however much a guest prints.
const MAX_PARSED: u64 = 4 << 20;

fn head_bytes(path: &Path, max: u64) -> Vec<u8> {
    use std::io::Read;
    let mut out = Vec::new();
    if let Ok(f) = std::fs::File::open(path) {
        let _ = f.take(max).read_to_end(&mut out);
    }
    out
}

/// The last lines of the console, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    sharedos_report::text::tail(&super::log_tail(path), lines, 3000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_guest_protocol() {
        let s = parse(
            "[    0.000000] Linux version 6.1.0-50-cloud-amd64 (debian-kernel@lists.debian.org)\r\n\
             noise\n\nSHAREDOS-KERNEL 6.1.0-50-cloud-amd64\n\
             SHAREDOS-HOSTKEY SHA256:abcDEF+/0\r\nSHAREDOS-READY\n",
        );
        assert!(s.kernel_started && s.ready);
        assert_eq!(s.kernel_release.as_deref(), Some("6.1.0-50-cloud-amd64"));
        assert_eq!(s.host_key.as_deref(), Some("SHA256:abcDEF+/0"));
        assert!(s.errors.is_empty() && s.panic.is_none());
    }

    #[test]
    fn partial_and_failed_boots() {
        assert_eq!(
            parse("Probing EDD (edd=off to disable)... ok"),
            SerialState::default()
        );
        let s =
            parse("SHAREDOS-ERROR sshd\nSHAREDOS-HOSTKEY md5:xx\nKernel panic - not syncing: VFS");
        assert_eq!(s.errors, vec!["sshd".to_string()]);
        assert!(s.host_key.is_none(), "only SHA256 fingerprints are pinned");
        assert!(s.panic.is_some());
        assert!(!parse("SHAREDOS-READY-ish").ready);
    }

    #[test]
    fn a_flooded_console_is_read_only_so_far() {
        let p = std::env::temp_dir().join(format!("serial-flood-{}", std::process::id()));
        let mut text = String::from("SHAREDOS-HOSTKEY SHA256:abc\nSHAREDOS-READY\n");
        text.push_str(&"x".repeat((MAX_PARSED as usize) * 2));
        text.push_str("\nthe last line\n");
        std::fs::write(&p, &text).unwrap();
        let s = read(&p);
        assert!(s.ready && s.host_key.is_some());
        assert!(tail(&p, 1).ends_with("the last line"), "{}", tail(&p, 1));
        // What lies past the bound is never parsed, whatever it says.
        std::fs::write(
            &p,
            "x".repeat(MAX_PARSED as usize + 10) + "\nSHAREDOS-READY\n",
        )
        .unwrap();
        assert!(!read(&p).ready);
        std::fs::remove_file(&p).unwrap();
    }
}
