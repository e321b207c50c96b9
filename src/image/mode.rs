//! The builder mode: how mmdebstrap gets the root it needs (a user namespace, fakechroot), and
//! the automatic choice between them, with its reason in words.

use super::exec::{self, Cmd};

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BuilderMode {
    /// mmdebstrap --mode=unshare: unprivileged user namespaces plus subuid/subgid ranges.
    Unshare,
    /// mmdebstrap --mode=fakechroot: no namespaces at all (e.g. Ubuntu runners with AppArmor).
    Fakechroot,
}

impl BuilderMode {
    pub fn as_str(self) -> &'static str {
        match self {
            BuilderMode::Unshare => "unshare",
            BuilderMode::Fakechroot => "fakechroot",
        }
    }

    /// Host tools this mode needs besides the common ones.
    pub fn tools(self) -> &'static [&'static str] {
        match self {
            BuilderMode::Unshare => &["unshare", "newuidmap", "newgidmap"],
            BuilderMode::Fakechroot => &["fakechroot", "fakeroot"],
        }
    }
}

pub const COMMON_TOOLS: [&str; 6] = ["mmdebstrap", "genext2fs", "tar", "apt-get", "dpkg", "gpgv"];
/// Probes whether unprivileged user namespaces with a root mapping work here.
pub fn userns_probe_cmd() -> Cmd {
    Cmd::new(vec![
        "unshare".into(),
        "--user".into(),
        "--map-root-user".into(),
        "true".into(),
    ])
}

/// Picks the mode: an explicit choice, else unshare when the probe works and this user has
/// subordinate id ranges (root needs none), else fakechroot. Returns the reason in words.
pub fn choose_mode(explicit: Option<BuilderMode>) -> (BuilderMode, String) {
    if let Some(m) = explicit {
        return (m, "chosen with --mode".into());
    }
    let uid = nix::unistd::getuid();
    let name = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or_default();
    let has_range = |file: &str| {
        std::fs::read_to_string(file)
            .map(|t| subid_has(&t, &name, uid.as_raw()))
            .unwrap_or(false)
    };
    // As root, mmdebstrap's unshare mode maps ids without subordinate ranges, and root
    // usually has none: requiring them sent root to fakechroot, which cannot build a suite
    // newer than the host's.
    if !uid.is_root() && (!has_range("/etc/subuid") || !has_range("/etc/subgid")) {
        return (
            BuilderMode::Fakechroot,
            format!("user {name} has no range in /etc/subuid and /etc/subgid, so unshare mode cannot map ids"),
        );
    }
    if !exec::missing_tools(BuilderMode::Unshare.tools()).is_empty() {
        return (
            BuilderMode::Fakechroot,
            "newuidmap/newgidmap or unshare is missing".into(),
        );
    }
    let probe = userns_probe_cmd();
    let ok = std::process::Command::new(&probe.argv[0])
        .args(&probe.argv[1..])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if ok {
        (
            BuilderMode::Unshare,
            "unprivileged user namespaces work here".into(),
        )
    } else {
        (
            BuilderMode::Fakechroot,
            format!(
                "`{}` failed: unprivileged user namespaces are blocked here",
                probe.display()
            ),
        )
    }
}

/// Whether an /etc/subuid-style file has a non-empty range for this user (by name or uid).
pub fn subid_has(text: &str, name: &str, uid: u32) -> bool {
    text.lines().any(|l| {
        let f: Vec<&str> = l.trim().split(':').collect();
        f.len() == 3
            && (f[0] == name && !name.is_empty() || f[0] == uid.to_string())
            && f[2].parse::<u64>().map(|n| n > 0).unwrap_or(false)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subid_lookup() {
        let t = "alice:100000:65536\n1001:165536:65536\nbob:1:0\n";
        assert!(subid_has(t, "alice", 1000));
        assert!(subid_has(t, "carol", 1001));
        assert!(!subid_has(t, "bob", 1002));
        assert!(!subid_has(t, "", 5));
    }

    #[test]
    fn probe_argv() {
        assert_eq!(
            userns_probe_cmd().argv,
            ["unshare", "--user", "--map-root-user", "true"]
        );
    }
}
