//! CRIU command lines. Each is a pure function so the plan prints exactly what runs and tests can
//! check the flags the tree was found to need.

use sharedos_report::cause::{self, Cause};
use std::path::Path;

/// How CRIU locks the tree's network while it dumps. The default lock runs iptables-restore;
/// with only nft present, criu 3.17.1 leaves its drop table behind in restored copies
/// (seen with criu 3.17.1), so iptables is preferred whenever it is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkLock {
    Iptables,
    Nftables,
}

impl NetworkLock {
    /// iptables when iptables-restore is installed, else nftables.
    pub fn detect() -> NetworkLock {
        if sharedos_report::which::find_program("iptables-restore").is_some() {
            NetworkLock::Iptables
        } else {
            NetworkLock::Nftables
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NetworkLock::Iptables => "iptables",
            NetworkLock::Nftables => "nftables",
        }
    }

    /// The lock for a dump that treats the network namespace as `net`. With the namespace left
    /// out, nothing of the lock reaches a copy, so nftables serves wherever this CRIU has it
    /// (`nft_ok`): CRIU sets and lifts it through libnftables, where iptables costs a program run
    /// each way (0.15 s under TCG). A namespace saved in full keeps the `detected` lock.
    pub fn for_dump(detected: NetworkLock, net: NetNs, nft_ok: bool) -> NetworkLock {
        match net {
            NetNs::New if nft_ok => NetworkLock::Nftables,
            _ => detected,
        }
    }
}

/// What CRIU does with the tree's network namespace (see `crate::netns`): saves its contents at
/// the dump and replays them at each restore, or makes a new one at each restore
/// (`--empty-ns net`), which equals it when the tree left it as it was made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetNs {
    Saved,
    New,
}

impl NetNs {
    fn args(self) -> Vec<String> {
        match self {
            NetNs::Saved => Vec::new(),
            NetNs::New => vec!["--empty-ns".into(), "net".into()],
        }
    }
}

fn s(p: &Path) -> String {
    p.display().to_string()
}

pub fn version_argv(criu: &Path) -> Vec<String> {
    vec![s(criu), "--version".into()]
}

pub fn check_argv(criu: &Path) -> Vec<String> {
    vec![s(criu), "check".into()]
}

/// Whether this CRIU can lock a network with nftables: built with libnftables, on a kernel with
/// set concatenations.
pub fn nft_lock_check_argv(criu: &Path) -> Vec<String> {
    vec![
        s(criu),
        "check".into(),
        "--feature".into(),
        "network_lock_nftables".into(),
    ]
}

/// Dumps the whole tree rooted at `pid` (the tree's PID 1 as the host sees it; the plan shows a
/// placeholder). No
/// `--shell-job`: the tree's init called setsid(). No socket flags: no connection is open
/// across the tree's boundary at dump time.
pub fn dump_argv(
    criu: &Path,
    pid: impl std::fmt::Display,
    images: &Path,
    log: &Path,
    lock: NetworkLock,
    net: NetNs,
    extra: &[String],
) -> Vec<String> {
    let mut v = vec![
        s(criu),
        "dump".into(),
        "-t".into(),
        pid.to_string(),
        "-D".into(),
        s(images),
        "-o".into(),
        s(log),
        "-v4".into(),
    ];
    if lock == NetworkLock::Nftables {
        v.push("--network-lock".into());
        v.push("nftables".into());
    }
    v.extend(net.args());
    v.extend(extra.iter().cloned());
    v
}

/// Restores one copy, detached. `--root` is required: without it CRIU 3.17 crashes in
/// mount.c. The pidfile must not exist yet, or CRIU kills what it restored. `extra` comes from
/// the options (`cgroup_root_args`, `external_dev_restore_args`).
pub fn restore_argv(
    criu: &Path,
    images: &Path,
    root: &Path,
    pidfile: &Path,
    log: &Path,
    net: NetNs,
    extra: &[String],
) -> Vec<String> {
    let mut v = vec![
        s(criu),
        "restore".into(),
        "-D".into(),
        s(images),
        "-d".into(),
        "--root".into(),
        s(root),
        "--pidfile".into(),
        s(pidfile),
        "-o".into(),
        s(log),
        "-v4".into(),
    ];
    v.extend(net.args());
    v.extend(extra.iter().cloned());
    v
}

/// The copy's own group (made beforehand with the limits): CRIU puts the tree's dump-time group
/// there instead of back into the original's. CRIU's default `--manage-cgroups soft` then
/// leaves the properties of a group it did not make alone.
pub fn cgroup_root_args(group: &str) -> Vec<String> {
    vec!["--cgroup-root".into(), group.to_string()]
}

/// In a user namespace the tree's /dev nodes are binds of the machine's (mknod is refused
/// there), which CRIU cannot dump as mounts of the tree: they are named external at dump ...
pub fn external_dev_dump_args(nodes: &[&str]) -> Vec<String> {
    nodes
        .iter()
        .flat_map(|n| ["--external".to_string(), format!("mnt[/dev/{n}]:dev-{n}")])
        .collect()
}

/// ... and bound again from the machine's at restore.
pub fn external_dev_restore_args(nodes: &[&str]) -> Vec<String> {
    nodes
        .iter()
        .flat_map(|n| ["--external".to_string(), format!("mnt[dev-{n}]:/dev/{n}")])
        .collect()
}

/// The most of a CRIU log read for its errors, from its end: the errors that end a dump or a
/// restore are its last lines.
const LOG_TAIL: u64 = 256 * 1024;
/// How many error lines a gate's reason quotes.
const ERRORS_QUOTED: usize = 4;

/// The last [`LOG_TAIL`] bytes of a CRIU log, from the first whole line; None when it cannot be
/// read.
fn log_tail(log: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(log).ok()?;
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let from = len.saturating_sub(LOG_TAIL);
    f.seek(SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::new();
    f.take(LOG_TAIL).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    // A tail that starts inside a line would quote half of it.
    Some(match text.split_once('\n') {
        Some((_, rest)) if from > 0 => rest.to_string(),
        _ => text,
    })
}

/// CRIU's own error lines (`Error (file:line): ...`) in the last lines of its log: the first
/// few and the last, each cut to 300 characters; empty when the log cannot be read or holds
/// none.
pub fn log_errors(log: &Path) -> Vec<String> {
    log_tail(log)
        .map(|t| parse_log_errors(&t))
        .unwrap_or_default()
}

pub fn parse_log_errors(text: &str) -> Vec<String> {
    let errors: Vec<String> = text
        .lines()
        .filter(|l| l.contains("Error (") || l.contains("Error:") || is_failed_call(l))
        .map(|l| l.trim().chars().take(300).collect())
        .collect();
    // The first errors name the cause (`Can't dump nested ipc namespace for 883`), the last
    // one how it ended (`Dumping FAILED.`): the first few and the last are quoted.
    if errors.len() <= ERRORS_QUOTED {
        return errors;
    }
    let last = errors.len() - 1;
    errors
        .iter()
        .take(ERRORS_QUOTED - 1)
        .chain(std::iter::once(&errors[last]))
        .cloned()
        .collect()
}

/// What a failed CRIU call's log says, for a gate's reason: ` CRIU says: ...`, or nothing.
pub fn says(log: &Path) -> String {
    let errors = log_errors(log);
    if errors.is_empty() {
        return String::new();
    }
    format!("; CRIU says: {}", errors.join(" | "))
}

/// A line CRIU writes when it fails: its error level (`Error (criu/x.c:N):`, or `Error:` from
/// its early checks), or the closing `Dumping FAILED.` / `Restoring FAILED.`, which criu 4 logs
/// without the level.
fn is_error_line(l: &str) -> bool {
    l.contains("Error (") || l.contains("Error:") || is_closing_line(l)
}

/// The line that says only that the whole call failed, not why.
fn is_closing_line(l: &str) -> bool {
    l.contains("FAILED")
}

/// A call CRIU reports as failed with its negative errno at the end of the line, at no error
/// level: criu 4.1.1 logs a socket family the kernel lacks (`... IPPROTO_UDPLITE: -2`) so, and
/// its only error line is then the closing one.
fn is_failed_call(l: &str) -> bool {
    let Some((_, errno)) = l.trim_end().rsplit_once(": -") else {
        return false;
    };
    !errno.is_empty() && errno.len() <= 4 && errno.bytes().all(|b| b.is_ascii_digit())
}

/// Where the cause is: the first error line that says why, or failed call; else the closing line.
fn cause_line(lines: &[&str]) -> Option<usize> {
    lines
        .iter()
        .position(|l| (is_error_line(l) && !is_closing_line(l)) || is_failed_call(l))
        .or_else(|| lines.iter().position(|l| is_error_line(l)))
}

/// The cause of a failed CRIU call from its log's text: the first error line and up to
/// [`cause::CONTEXT_LINES`] lines before it, bounded. None when no line is an error: a cause
/// is quoted, never made up.
pub fn parse_cause(text: &str, source: &str, log: &str) -> Option<Cause> {
    let lines: Vec<&str> = text.lines().collect();
    let at = cause_line(&lines)?;
    let from = at.saturating_sub(cause::CONTEXT_LINES);
    Some(
        Cause {
            source: source.to_string(),
            log: log.to_string(),
            error: lines[at].to_string(),
            before: lines[from..at]
                .iter()
                .filter(|l| !l.trim().is_empty())
                .map(|l| l.to_string())
                .collect(),
        }
        .bounded(),
    )
}

/// The cause a failed CRIU call left in its log (`name` as for `Config::criu_log`, so the log
/// is `criu/<name>.log` in the report); None when the log cannot be read or holds no error.
pub fn cause(log: &Path, source: &str, name: &str) -> Option<Cause> {
    parse_cause(&log_tail(log)?, source, &format!("criu/{name}.log"))
}

/// "Version: 3.17.1" -> "3.17.1".
pub fn parse_version(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
    /// The last 31 lines of trixie-bpo's `criu/dump.log` (criu 4.1.1 on Linux 7.3.4, which has no
    /// UDP-Lite), as a matrix run wrote it: criu 4.1.1 logs the failed socket collection without
    /// an error level, and its only `Error` line is the closing one.
    const TRIXIE_BPO_DUMP: &str = "\
(01.398447) mnt: Inspecting sharing on 67 shared_id 0 master_id 0 (@./dev/shm)
(01.398464) mnt: Inspecting sharing on 66 shared_id 0 master_id 0 (@./dev/pts)
(01.398482) mnt: Inspecting sharing on 65 shared_id 0 master_id 0 (@./dev)
(01.398499) mnt: Inspecting sharing on 63 shared_id 0 master_id 0 (@./)
(01.399055) net: Collecting netns 10/163
(01.399167) net: Switching to 163's net for collecting sockets
(01.410643) unix: \tCollected: ino 1330 peer_ino 698 family    1 type    1 state  1 name null
(01.411266) unix: \tCollected: ino 1328 peer_ino 0 family    1 type    1 state 10 name /tmp/.X11-unix/X170
(01.411477) unix: \tCollected: ino 693 peer_ino 0 family    1 type    1 state 10 name /tmp/sharedos-app.sock
(01.411617) unix: \tCollected: ino 1465 peer_ino 0 family    1 type    5 state  7 name null
(01.411686) unix: \tCollected: ino 698 peer_ino 1330 family    1 type    1 state  1 name 
(01.411829) unix: \tCollected: ino 1327 peer_ino 0 family    1 type    1 state 10 name 
(01.416890) sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2
(01.419305) sockets: Sockects collect procedure family AF_INET6 proto IPPROTO_UDPLITE: -2
(01.422501) netlink: Collect netlink sock 0x514
(01.422771) netlink: Collect netlink sock 0x51a
(01.422815) netlink: Collect netlink sock 0x5b8
(01.422835) netlink: Collect netlink sock 0x516
(01.422853) netlink: Collect netlink sock 0x518
(01.422871) netlink: Collect netlink sock 0x51b
(01.422887) netlink: Collect netlink sock 0x517
(01.422905) netlink: Collect netlink sock 0x515
(01.425890) net: Unlock network
(01.426270) Running network-unlock scripts
(02.449964) Unfreezing tasks into 1
(02.450680) \tUnseizing 163 into 1
(02.451345) \tUnseizing 164 into 1
(02.451625) \tUnseizing 165 into 1
(02.451871) \tUnseizing 166 into 1
(02.452014) \tUnseizing 193 into 1
(02.457363) Error (criu/cr-dump.c:2111): Dumping FAILED.
";

    /// A log ending as bookworm-browser's did (criu 3.17.1, Firefox with its sandbox on; the
    /// docs/running.md quotes its error lines); the lines before them are examples.
    const BOOKWORM_BROWSER_DUMP: &str = "\
(00.512301) Dumping pid 1234 namespaces
(00.512388) Dumping 1234's namespaces
(00.512401) Error (criu/namespaces.c:463): Can't dump nested ipc namespace for 1234
(00.512420) Error (criu/namespaces.c:717): Can't make ipcns id
(00.512630) Unlock network
(00.513010) Unfreezing tasks into 1
(00.514102) Error (criu/cr-dump.c:2053): Dumping FAILED.
";

    #[test]
    fn a_failed_call_is_a_negative_errno_ending_the_line() {
        for yes in [
            "(01.416890) sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2",
            "(00.1) foo: bar: -22  ",
        ] {
            assert!(super::is_failed_call(yes), "{yes}");
        }
        for no in [
            "(01.422501) netlink: Collect netlink sock 0x514",
            "(00.1) offset: -",
            "(00.1) range: -12345678",
            "(00.1) value: -2x",
            "(00.1) Unseizing 163 into 1",
        ] {
            assert!(!super::is_failed_call(no), "{no}");
        }
    }

    #[test]
    fn the_cause_is_the_first_error_and_what_led_to_it() {
        let c = super::parse_cause(TRIXIE_BPO_DUMP, "criu dump", "criu/dump.log").unwrap();
        assert!(
            c.error.contains("AF_INET proto IPPROTO_UDPLITE: -2"),
            "{c:?}"
        );
        assert!(
            !c.error.contains("AF_INET6"),
            "the first failed call, not a later one"
        );
        assert_eq!(
            c.before.len(),
            sharedos_report::cause::CONTEXT_LINES,
            "the lines before it, up to the bound: {c:?}"
        );
        assert!(c.before[7].contains("Collected: ino 1327"), "{c:?}");
        assert_eq!(
            c.headline(),
            "criu dump: sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2"
        );
        assert_eq!(c.log, "criu/dump.log");
        // The gate's reason quotes the failed calls and the closing line.
        let said = super::parse_log_errors(TRIXIE_BPO_DUMP);
        assert_eq!(said.len(), 3, "{said:?}");
        assert!(said[0].contains("AF_INET proto IPPROTO_UDPLITE: -2"));
        assert!(said[2].contains("Dumping FAILED."));

        let b = super::parse_cause(BOOKWORM_BROWSER_DUMP, "criu dump", "criu/dump.log").unwrap();
        assert_eq!(
            b.headline(),
            "criu dump: Can't dump nested ipc namespace for 1234"
        );
        assert_eq!(b.before.len(), 2);
    }

    #[test]
    fn a_cause_is_quoted_never_made_up() {
        // A log without an error line, as a restore that CRIU thought went well leaves.
        let clean = "(00.000001) Version: 4.1.1 (gitid 0)\n(00.2) Restore finished successfully. Tasks resumed.\n";
        assert_eq!(super::parse_cause(clean, "criu restore", "l"), None);
        assert_eq!(super::parse_cause("", "criu restore", "l"), None);
        assert_eq!(
            super::cause(
                std::path::Path::new("/nonexistent/log"),
                "criu dump",
                "dump"
            ),
            None
        );
        // criu 4 logs the closing line without a level: it alone still counts.
        let only = "(00.1) Unfreezing tasks into 1\n(00.2) Dumping FAILED.\n";
        let c = super::parse_cause(only, "criu dump", "l").unwrap();
        assert_eq!(c.headline(), "criu dump: Dumping FAILED.");
    }

    #[test]
    fn a_flooding_log_gives_a_bounded_cause() {
        let mut log: String = (0..50)
            .map(|i| format!("(00.{i}) {}\n", "x".repeat(5000)))
            .collect();
        log.push_str(&format!("Error (a.c:1): {}\n", "y".repeat(100_000)));
        let c = super::parse_cause(&log, "criu dump", "l").unwrap();
        assert_eq!(c.before.len(), sharedos_report::cause::CONTEXT_LINES);
        for l in c.before.iter().chain([&c.error]) {
            assert!(l.chars().count() <= sharedos_report::cause::LINE_CHARS);
        }
        // Read from a file, only its tail is read, from the first whole line.
        let p = std::env::temp_dir().join(format!("criu-cause-{}", std::process::id()));
        let big = "z".repeat(super::LOG_TAIL as usize + 10) + "\n" + BOOKWORM_BROWSER_DUMP;
        std::fs::write(&p, big).unwrap();
        let c = super::cause(&p, "criu dump", "dump").unwrap();
        std::fs::remove_file(&p).unwrap();
        assert_eq!(c.log, "criu/dump.log");
        assert!(c.error.contains("nested ipc"), "{c:?}");
    }

    #[test]
    fn the_last_error_lines_of_a_log() {
        let log = "(00.1) Warn (criu/x.c:1): harmless\n(00.2) Error (criu/namespaces.c:451): Can't dump nested pid namespace for 57\n(00.3) Error (criu/cr-dump.c:2111): Dumping FAILED.\n";
        let e = super::parse_log_errors(log);
        assert_eq!(e.len(), 2);
        assert!(e[0].contains("nested pid namespace"), "{e:?}");
        assert!(super::parse_log_errors("all good\n").is_empty());
        let many: String = (0..10).map(|i| format!("Error (a.c:{i}): x\n")).collect();
        let e = super::parse_log_errors(&many);
        assert_eq!(e.len(), 4);
        assert!(e[0].contains("a.c:0") && e[2].contains("a.c:2"), "{e:?}");
        assert!(e[3].contains("a.c:9"));
        assert_eq!(super::says(std::path::Path::new("/nonexistent/log")), "");
    }

    use super::*;
    use std::path::PathBuf;

    #[test]
    fn dump_targets_the_tree_init_with_a_log() {
        let a = dump_argv(
            Path::new("/usr/sbin/criu"),
            4242,
            Path::new("/w/dump"),
            Path::new("/r/criu/dump.log"),
            NetworkLock::Iptables,
            NetNs::Saved,
            &[],
        );
        assert_eq!(
            a.join(" "),
            "/usr/sbin/criu dump -t 4242 -D /w/dump -o /r/criu/dump.log -v4"
        );
        assert!(!a.iter().any(|x| x == "--shell-job"));
        let n = dump_argv(
            Path::new("criu"),
            1,
            Path::new("d"),
            Path::new("l"),
            NetworkLock::Nftables,
            NetNs::New,
            &external_dev_dump_args(&["null"]),
        );
        assert_eq!(
            n[n.len() - 6..].join(" "),
            "--network-lock nftables --empty-ns net --external mnt[/dev/null]:dev-null"
        );
    }

    #[test]
    fn nftables_locks_a_namespace_left_out_where_criu_has_it() {
        use NetworkLock::*;
        assert_eq!(NetworkLock::for_dump(Iptables, NetNs::New, true), Nftables);
        assert_eq!(NetworkLock::for_dump(Iptables, NetNs::New, false), Iptables);
        assert_eq!(
            NetworkLock::for_dump(Iptables, NetNs::Saved, true),
            Iptables
        );
        assert_eq!(
            NetworkLock::for_dump(Nftables, NetNs::Saved, false),
            Nftables
        );
    }

    #[test]
    fn restore_is_detached_with_root_and_pidfile() {
        let a = restore_argv(
            &PathBuf::from("criu"),
            Path::new("/w/dump"),
            Path::new("/w/root"),
            Path::new("/w/a.pid"),
            Path::new("/r/criu/restore-a.log"),
            NetNs::Saved,
            &[],
        );
        assert_eq!(
            a.join(" "),
            "criu restore -D /w/dump -d --root /w/root --pidfile /w/a.pid -o /r/criu/restore-a.log -v4"
        );
        let c = restore_argv(
            &PathBuf::from("criu"),
            Path::new("d"),
            Path::new("r"),
            Path::new("p"),
            Path::new("l"),
            NetNs::New,
            &[
                cgroup_root_args("/sharedos-m/copy-a"),
                external_dev_restore_args(&["null", "tty"]),
            ]
            .concat(),
        );
        assert_eq!(
            c[c.len() - 8..].join(" "),
            "--empty-ns net --cgroup-root /sharedos-m/copy-a --external mnt[dev-null]:/dev/null --external mnt[dev-tty]:/dev/tty"
        );
    }

    #[test]
    fn parses_version() {
        assert_eq!(
            parse_version("Version: 3.17.1\n").as_deref(),
            Some("3.17.1")
        );
        assert_eq!(
            parse_version("Version: 4.1.1\nGitID: v4.1.1\n").as_deref(),
            Some("4.1.1")
        );
        assert_eq!(parse_version("garbage"), None);
    }
}
