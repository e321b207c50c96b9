//! CRIU command lines. Each is a pure function so the plan prints exactly what runs and tests can
//! check the flags the tree was found to need.

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

/// "Version: 3.17.1" -> "3.17.1".
/// The most of a CRIU log read for its errors, from its end: the errors that end a dump or a
/// restore are its last lines.
const LOG_TAIL: u64 = 256 * 1024;
/// How many error lines a gate's reason quotes.
const ERRORS_QUOTED: usize = 4;

/// CRIU's own error lines (`Error (file:line): ...`) in the last lines of its log: the first
/// few and the last, each cut to 300 characters; empty when the log cannot be read or holds
/// none.
pub fn log_errors(log: &Path) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(log) else {
        return Vec::new();
    };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    if f.seek(SeekFrom::Start(len.saturating_sub(LOG_TAIL)))
        .is_err()
    {
        return Vec::new();
    }
    let mut bytes = Vec::new();
    if f.take(LOG_TAIL).read_to_end(&mut bytes).is_err() {
        return Vec::new();
    }
    parse_log_errors(&String::from_utf8_lossy(&bytes))
}

pub fn parse_log_errors(text: &str) -> Vec<String> {
    let errors: Vec<String> = text
        .lines()
        .filter(|l| l.contains("Error (") || l.contains("Error:"))
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

pub fn parse_version(stdout: &str) -> Option<String> {
    stdout
        .lines()
        .find_map(|l| l.trim().strip_prefix("Version:"))
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

#[cfg(test)]
mod tests {
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
            &external_dev_dump_args(&["null"]),
        );
        assert_eq!(
            n[n.len() - 4..].join(" "),
            "--network-lock nftables --external mnt[/dev/null]:dev-null"
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
            &[
                cgroup_root_args("/sharedos-m/copy-a"),
                external_dev_restore_args(&["null", "tty"]),
            ]
            .concat(),
        );
        assert_eq!(
            c[c.len() - 6..].join(" "),
            "--cgroup-root /sharedos-m/copy-a --external mnt[dev-null]:/dev/null --external mnt[dev-tty]:/dev/tty"
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
