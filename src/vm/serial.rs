//! The guest's serial console as QEMU writes it to a file: read within a bound, parsed by the
//! boot contract (`image::contract`), and its last lines for messages.

use crate::image::contract::{parse_console, ConsoleState};
use sharedos_report::cause::kernel_message;
use std::path::Path;

pub fn read(path: &Path) -> ConsoleState {
    parse_console(&String::from_utf8_lossy(&head_bytes(path, MAX_PARSED)))
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

/// The end of a log QEMU or the guest writes (the console, QEMU's own output), for messages:
/// only its last 64 KiB are read, however large it grew; empty when it cannot be read.
pub fn log_tail(path: &Path) -> String {
    use std::io::{Read, Seek, SeekFrom};
    const LAST: u64 = 64 << 10;
    let mut bytes = Vec::new();
    if let Ok(mut f) = std::fs::File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(LAST)));
        let _ = f.take(LAST).read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// What an error that quotes a panic adds of the oops before it: `; after BUG: ...; RIP: ...`,
/// or nothing when the console has no oops.
pub fn oops_said(s: &ConsoleState) -> String {
    match &s.oops {
        Some(o) if o.rip.is_empty() => format!("; after {}", kernel_message(&o.first)),
        Some(o) => format!(
            "; after {}; {}",
            kernel_message(&o.first),
            kernel_message(&o.rip)
        ),
        None => String::new(),
    }
}

/// The last lines of the console, for error messages.
pub fn tail(path: &Path, lines: usize) -> String {
    sharedos_report::text::tail(&log_tail(path), lines, 3000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_quotes_the_oops_before_it() {
        let s = crate::image::contract::parse_console(
            "[ 2.70] BUG: unable to handle page fault for address: ff11000000000000\n\
             [ 2.71] RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0\n\
             [ 2.72] Kernel panic - not syncing: Fatal exception\n",
        );
        assert_eq!(
            oops_said(&s),
            "; after BUG: unable to handle page fault for address: ff11000000000000; RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0"
        );
        let bare = crate::image::contract::parse_console(
            "Kernel panic - not syncing: sysrq triggered crash\n",
        );
        assert_eq!(oops_said(&bare), "");
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
