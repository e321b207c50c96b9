//! CRIU command lines. Each is a pure function so the plan prints exactly what runs and tests can
//! check the flags FIELD-NOTES found necessary.

use std::path::Path;

/// How CRIU locks the tree's network while it dumps. The default lock runs iptables-restore;
/// with only nft present, criu 3.17.1 leaves its drop table behind in restored copies
/// (FIELD-NOTES), so iptables is preferred whenever it is installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NetworkLock {
    Iptables,
    Nftables,
}

impl NetworkLock {
    /// iptables when iptables-restore is installed, else nftables.
    pub fn detect() -> NetworkLock {
        if crate::gates::find_program("iptables-restore").is_some() {
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

/// Dumps the whole tree rooted at `pid` (the tree's PID 1 as the host sees it). No
/// `--shell-job`: the tree's init called setsid(). No socket flags: no connection is open
/// across the tree's boundary at dump time.
pub fn dump_argv(
    criu: &Path,
    pid: i32,
    images: &Path,
    log: &Path,
    lock: NetworkLock,
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
    v
}

/// Restores one copy, detached. `--root` is required: without it CRIU 3.17 crashes in
/// mount.c. The pidfile must not exist yet, or CRIU kills what it restored. With a
/// `cgroup_root` (the copy's own group, made beforehand with the limits), CRIU puts the tree's
/// dump-time group there instead of back into the original's.
pub fn restore_argv(
    criu: &Path,
    images: &Path,
    root: &Path,
    pidfile: &Path,
    log: &Path,
    cgroup_root: Option<&str>,
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
    if let Some(cg) = cgroup_root {
        v.push("--cgroup-root".into());
        v.push(cg.to_string());
    }
    v
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
        );
        assert!(n.ends_with(&["--network-lock".to_string(), "nftables".to_string()]));
    }

    #[test]
    fn restore_is_detached_with_root_and_pidfile() {
        let a = restore_argv(
            &PathBuf::from("criu"),
            Path::new("/w/dump"),
            Path::new("/w/root"),
            Path::new("/w/a.pid"),
            Path::new("/r/criu/restore-a.log"),
            None,
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
            Some("/sharedos-m/copy-a"),
        );
        assert!(c.ends_with(&[
            "--cgroup-root".to_string(),
            "/sharedos-m/copy-a".to_string()
        ]));
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
