//! The guest's boot contract: what the image's PID 1 (the `sharedos-init` guest file) does and
//! the host relies on. Where that init lives, the kernel command line it boots with, the
//! parameter that hands it the client's public key, and the lines it prints on the serial
//! console. The image defines it, since its init implements it; vm/ imports it to boot the
//! guest, and nothing here boots anything.

use anyhow::{bail, Result};
use sharedos_report::cause::{kernel_message, KernelOops};

/// Where PID 1 lives in the image; the kernel command line passes it as `init=`.
pub const GUEST_INIT_PATH: &str = "/usr/sbin/sharedos-init";

/// The kernel command line the image boots with, minus `sharedos.authorized_key=`.
pub fn kernel_cmdline() -> String {
    format!("console=ttyS0 earlyprintk=serial,ttyS0 root=/dev/vda rootfstype=ext4 rw init={GUEST_INIT_PATH} panic=-1")
}

/// The kernel parameter the init reads the client's public key from.
pub const AUTHORIZED_KEY: &str = "sharedos.authorized_key=";

/// The kernel parameter that hands the guest the client's public key: the OpenSSH public key
/// line (`type base64 [comment]`) without its comment, its one space written as a comma.
pub fn authorized_key_param(pubkey_line: &str) -> Result<String> {
    let f: Vec<&str> = pubkey_line.split_whitespace().collect();
    if f.len() < 2 || !f[0].starts_with("ssh-") && !f[0].starts_with("ecdsa-") {
        bail!("{pubkey_line:?} is not an OpenSSH public key line");
    }
    if !f[1]
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
    {
        bail!("the key's base64 part has characters a kernel command line cannot carry");
    }
    Ok(format!("{AUTHORIZED_KEY}{},{}", f[0], f[1]))
}

/// What the kernel prints first: boot is making progress.
pub const KERNEL_BANNER: &str = "Linux version ";
/// What the kernel prints when it panics.
pub const KERNEL_PANIC: &str = "Kernel panic";
/// The init's lines on the console, each a whole line. `SHAREDOS-KERNEL <release>`.
pub const MARK_KERNEL: &str = "SHAREDOS-KERNEL ";
/// `SHAREDOS-HOSTKEY SHA256:<base64>`: the fingerprint of sshd's ed25519 host key.
pub const MARK_HOSTKEY: &str = "SHAREDOS-HOSTKEY ";
/// sshd is listening and every step before it succeeded.
pub const MARK_READY: &str = "SHAREDOS-READY";
/// `SHAREDOS-ERROR <what failed>`; the init then never says it is ready.
pub const MARK_ERROR: &str = "SHAREDOS-ERROR ";

/// What the guest said on its serial console so far.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConsoleState {
    /// The kernel printed its banner: boot is making progress.
    pub kernel_started: bool,
    pub kernel_release: Option<String>,
    /// `SHA256:<base64>` as ssh-keygen prints it.
    pub host_key: Option<String>,
    pub ready: bool,
    pub errors: Vec<String>,
    pub panic: Option<String>,
    /// The first kernel oops (its first line, the RIP line after it, the panic when one
    /// followed), whether or not the kernel went on to panic.
    pub oops: Option<KernelOops>,
}

/// How the kernel starts an oops report: a BUG, a fault it cannot handle, a double fault.
/// Matched at the start of a message (after the time stamp), so the init's own lines that
/// merely mention one do not count.
pub const OOPS_STARTS: [&str; 7] = [
    "Oops:",
    "BUG:",
    "kernel BUG at",
    "general protection fault",
    "double fault",
    "PANIC: double fault",
    "traps: PANIC: double fault",
];

fn oops_start(message: &str) -> bool {
    OOPS_STARTS.iter().any(|p| message.starts_with(p))
}

/// Reads the whole console text so far; lines can arrive split across reads, so the state is
/// always derived from the full text.
pub fn parse_console(text: &str) -> ConsoleState {
    let mut s = ConsoleState::default();
    for raw in text.lines() {
        let line = raw.trim_matches(|c: char| c == '\r' || c.is_whitespace());
        if line.contains(KERNEL_BANNER) {
            s.kernel_started = true;
        }
        // The first: the panic's own line, not the `---[ end Kernel panic ...` that closes it.
        if s.panic.is_none() && line.contains(KERNEL_PANIC) {
            s.panic = Some(line.to_string());
        }
        let message = kernel_message(line);
        match &mut s.oops {
            None if oops_start(message) => {
                s.oops = Some(KernelOops {
                    first: line.to_string(),
                    ..KernelOops::default()
                })
            }
            Some(o) if o.rip.is_empty() && message.starts_with("RIP: ") => {
                o.rip = line.to_string();
            }
            _ => {}
        }
        if let Some(r) = line.strip_prefix(MARK_KERNEL) {
            s.kernel_release = Some(r.trim().to_string());
        } else if let Some(k) = line.strip_prefix(MARK_HOSTKEY) {
            let k = k.trim();
            if k.starts_with("SHA256:") {
                s.host_key = Some(k.to_string());
            }
        } else if line == MARK_READY {
            s.ready = true;
        } else if let Some(e) = line.strip_prefix(MARK_ERROR) {
            s.errors.push(e.trim().to_string());
        }
    }
    if let (Some(o), Some(p)) = (&mut s.oops, &s.panic) {
        o.panic = p.clone();
    }
    s.oops = s.oops.map(KernelOops::bounded);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::{Path, PathBuf};

    #[test]
    fn reads_the_guest_protocol() {
        let s = parse_console(
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
            parse_console("Probing EDD (edd=off to disable)... ok"),
            ConsoleState::default()
        );
        let s = parse_console(
            "SHAREDOS-ERROR sshd\nSHAREDOS-HOSTKEY md5:xx\nKernel panic - not syncing: VFS",
        );
        assert_eq!(s.errors, vec!["sshd".to_string()]);
        assert!(s.host_key.is_none(), "only SHA256 fingerprints are pinned");
        assert!(s.panic.is_some());
        assert!(!parse_console("SHAREDOS-READY-ish").ready);
    }

    /// A console in the form bookworm-bpo's took in the matrix (kernel 6.12.95 under TCG): a
    /// double fault in the slab allocator, then the panic it ends in. Written after it, not a
    /// copy: the offsets and addresses are examples.
    const DOUBLE_FAULT_THEN_PANIC: &str = "\
[    2.690114] Freeing unused kernel image (rodata/data gap) memory: 1572K\r
[    2.703542] traps: PANIC: double fault, error_code: 0x0\r
[    2.703551] Oops: double fault: 0000 [#1] PREEMPT SMP NOPTI\r
[    2.703560] CPU: 1 UID: 0 PID: 1 Comm: swapper/0 Not tainted 6.12.95+bpo-cloud-amd64 #1  Debian 6.12.95-1~bpo12+1\r
[    2.703566] Hardware name: QEMU Standard PC (i440FX + PIIX, 1996), BIOS 1.16.2-debian-1.16.2-1 04/01/2014\r
[    2.703570] RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0\r
[    2.703575] Code: 48 8b 50 08 48 83 78 10 00 49 8b 04 24 0f 84 6f 01 00 00 48 85 c0\r
[    2.703580] RSP: 0018:ff5e2c3180013f58 EFLAGS: 00010086\r
[    2.703720] Call Trace:\r
[    2.703744]  <#DF>\r
[    2.703790] RIP: 0033:0x7f3a1c2e4d27\r
[    2.704001] Kernel panic - not syncing: Fatal exception in interrupt\r
[    2.705210] ---[ end Kernel panic - not syncing: Fatal exception in interrupt ]---\r
";

    /// An oops the kernel survives, as forky's did inside criu during a restore: in the kernel's
    /// own form, but the function and addresses are examples.
    const OOPS_WITHOUT_PANIC: &str = "\
SHAREDOS-READY\n\
[  301.442871] BUG: kernel NULL pointer dereference, address: 0000000000000008\n\
[  301.442902] #PF: supervisor read access in kernel mode\n\
[  301.442913] Oops: Oops: 0000 [#1] PREEMPT SMP NOPTI\n\
[  301.442940] CPU: 0 UID: 0 PID: 2211 Comm: criu Not tainted 7.2.0-1-cloud-amd64 #1 Debian 7.2.3-1\n\
[  301.442968] RIP: 0010:mnt_ns_tree_add+0x3c/0x120\n\
[  301.443410] ---[ end trace 0000000000000000 ]---\n\
[  305.112003] sharedos-gate[2101]: restore of copy a finished\n";

    #[test]
    fn an_oops_is_quoted_with_its_rip_and_its_panic() {
        let s = parse_console(DOUBLE_FAULT_THEN_PANIC);
        let o = s.oops.expect("the double fault is an oops");
        assert!(o.first.contains("PANIC: double fault"), "{o:?}");
        // The first RIP after the oops, the kernel's, not the user one of the trace.
        assert_eq!(o.rip_function(), Some("kmem_cache_alloc_noprof+0x9d/0x2f0"));
        assert!(o.panic.contains("Fatal exception"), "{o:?}");
        assert!(
            !o.panic.contains("---[ end"),
            "the panic's line, not its closing one: {o:?}"
        );
        assert_eq!(s.panic.as_deref(), Some(o.panic.as_str()));

        let s = parse_console(OOPS_WITHOUT_PANIC);
        assert!(s.ready && s.panic.is_none());
        let o = s.oops.expect("an oops that did not panic is still one");
        assert!(
            o.first.contains("BUG: kernel NULL pointer dereference"),
            "{o:?}"
        );
        assert_eq!(o.rip_function(), Some("mnt_ns_tree_add+0x3c/0x120"));
        assert!(o.panic.is_empty());
        assert_eq!(o.headline(), "kernel oops: RIP mnt_ns_tree_add+0x3c/0x120");
    }

    #[test]
    fn a_clean_console_flags_nothing() {
        let clean = "[    0.000000] Linux version 6.1.0-50-cloud-amd64\n\
                     [    1.2] Run /sbin/sharedos-init as init process\n\
                     SHAREDOS-KERNEL 6.1.0-50-cloud-amd64\n\
                     echo BUG: not a kernel line, and neither is this Oops: one\n\
                     SHAREDOS-READY\n";
        let s = parse_console(clean);
        assert!(s.ready);
        assert_eq!(s.oops, None);
        assert_eq!(s.panic, None);
        // A flood of oops lines quotes one, bounded.
        let flood = format!("BUG: {}\n", "z".repeat(100_000)).repeat(3);
        let o = parse_console(&flood).oops.unwrap();
        assert!(o.first.chars().count() <= sharedos_report::cause::LINE_CHARS);
    }

    #[test]
    fn authorized_key_param_replaces_the_space() {
        assert_eq!(
            authorized_key_param("ssh-ed25519 AAAAC3Nza+/= me@host\n").unwrap(),
            "sharedos.authorized_key=ssh-ed25519,AAAAC3Nza+/="
        );
        assert!(authorized_key_param("garbage").is_err());
        assert!(authorized_key_param("ssh-ed25519 AA\"x").is_err());
    }

    #[test]
    fn kernel_cmdline_names_the_init_and_never_reboots() {
        let c = kernel_cmdline();
        for part in [
            "console=ttyS0",
            "root=/dev/vda",
            "rootfstype=ext4",
            "rw",
            "init=/usr/sbin/sharedos-init",
            "panic=-1",
        ] {
            assert!(c.split(' ').any(|w| w == part), "{part} missing from {c}");
        }
    }

    /// Every `sharedos-init` under images/, wherever the image layout keeps it.
    fn init_scripts(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                init_scripts(&p, out);
            } else if e.file_name() == "sharedos-init" {
                out.push(p);
            }
        }
    }

    /// The host waits for what the init prints, and the init reads what the host passes: a
    /// marker renamed on one side only would leave every boot waiting out its bound.
    #[test]
    fn the_shipped_init_speaks_this_contract() {
        let mut scripts = Vec::new();
        init_scripts(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("images"),
            &mut scripts,
        );
        assert!(!scripts.is_empty(), "no sharedos-init under images/");
        for path in scripts {
            let init = std::fs::read_to_string(&path).unwrap();
            for said in [
                format!("say \"{MARK_KERNEL}$"),
                format!("say \"{MARK_HOSTKEY}$"),
                format!("say \"{MARK_READY}\""),
                format!("say \"{MARK_ERROR}$"),
                format!("{AUTHORIZED_KEY}*)"),
            ] {
                assert!(init.contains(&said), "{} lacks {said:?}", path.display());
            }
        }
    }
}
