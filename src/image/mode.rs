//! The builder mode: how mmdebstrap gets the root it needs (a user namespace, fakechroot, a
//! QEMU guest), and the automatic choice between them, with its reason in words.

use super::exec::{self, Cmd};
use super::lock::Lock;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BuilderMode {
    /// mmdebstrap --mode=unshare: unprivileged user namespaces plus subuid/subgid ranges.
    Unshare,
    /// mmdebstrap --mode=fakechroot: no namespaces at all (e.g. Ubuntu runners with AppArmor);
    /// only for a suite whose glibc is no newer than the host's.
    Fakechroot,
    /// mmdebstrap --mode=root inside a QEMU guest booted from the pinned bookworm image: no
    /// namespaces and no root on the host, any suite.
    Guest,
}

impl BuilderMode {
    pub fn as_str(self) -> &'static str {
        match self {
            BuilderMode::Unshare => "unshare",
            BuilderMode::Fakechroot => "fakechroot",
            BuilderMode::Guest => "guest",
        }
    }

    /// mmdebstrap's own `--mode=` for this builder mode.
    pub fn mmdebstrap_mode(self) -> &'static str {
        match self {
            BuilderMode::Unshare => "unshare",
            BuilderMode::Fakechroot => "fakechroot",
            BuilderMode::Guest => "root",
        }
    }

    /// Host tools this mode needs besides the common ones, each with the Debian/Ubuntu package
    /// that provides it.
    pub fn tools(self) -> &'static [(&'static str, &'static str)] {
        match self {
            BuilderMode::Unshare => &[
                ("unshare", "util-linux"),
                ("newuidmap", "uidmap"),
                ("newgidmap", "uidmap"),
            ],
            BuilderMode::Fakechroot => &[("fakechroot", "fakechroot"), ("fakeroot", "fakeroot")],
            BuilderMode::Guest => &[
                ("qemu-system-x86_64", "qemu-system-x86"),
                ("qemu-img", "qemu-utils"),
                ("ssh-keygen", "openssh-client"),
            ],
        }
    }

    /// The tools this mode needs that are missing, each named with its package.
    pub fn missing_tools(self) -> Vec<String> {
        self.tools()
            .iter()
            .filter(|(t, _)| sharedos_report::which::find_program(t).is_none())
            .map(|(t, pkg)| format!("{t} (apt install {pkg})"))
            .collect()
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

/// Asks the host's C library for its version (`glibc 2.36`).
pub fn host_glibc_cmd() -> Cmd {
    Cmd::new(vec!["getconf".into(), "GNU_LIBC_VERSION".into()])
}

/// glibc's (major, minor).
pub type Glibc = (u32, u32);

fn major_minor(v: &str) -> Option<Glibc> {
    let mut it = v.split('.');
    let major = it.next()?.trim().parse().ok()?;
    let minor: String = it
        .next()?
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    Some((major, minor.parse().ok()?))
}

/// `getconf GNU_LIBC_VERSION`'s answer, `glibc 2.36`.
pub fn parse_host_glibc(text: &str) -> Option<Glibc> {
    major_minor(text.trim().strip_prefix("glibc ")?)
}

/// The glibc of Debian suites an image may name before it has a lock.
const SUITE_GLIBC: [(&str, Glibc); 4] = [
    ("buster", (2, 28)),
    ("bullseye", (2, 31)),
    ("bookworm", (2, 36)),
    ("trixie", (2, 41)),
];

/// The image's glibc and where that came from: the lock's libc6 (`2.41-12+deb13u5`), else the
/// suite's known one; None when neither says.
pub fn image_glibc(suite: &str, lock: Option<&Lock>) -> Option<(Glibc, String)> {
    if let Some(libc6) = lock.and_then(|l| l.get("libc6")) {
        let g = major_minor(&libc6.version)?;
        return Some((g, format!("libc6 {} in the lock", libc6.version)));
    }
    SUITE_GLIBC
        .iter()
        .find(|(s, _)| *s == suite)
        .map(|(s, g)| (*g, format!("{s}'s")))
}

/// Where unshare mode cannot work: fakechroot runs the image's own programs with the host's
/// libfakechroot preloaded, which fails (`symbol lookup error ... __tunable_is_initialized`)
/// once the image's glibc is newer than the host's; guest mode works for any suite.
pub fn fallback_mode(
    image: Option<&(Glibc, String)>,
    host: Option<Glibc>,
) -> (BuilderMode, String) {
    let show = |g: Glibc| format!("{}.{}", g.0, g.1);
    match (image, host) {
        (Some((img, from)), Some(host)) if *img <= host => (
            BuilderMode::Fakechroot,
            format!(
                "the image's glibc {} ({from}) is no newer than the host's {}, so fakechroot can run it",
                show(*img),
                show(host)
            ),
        ),
        (Some((img, from)), Some(host)) => (
            BuilderMode::Guest,
            format!(
                "the image's glibc {} ({from}) is newer than the host's {}, which fakechroot cannot run: mmdebstrap runs as root in a QEMU guest",
                show(*img),
                show(host)
            ),
        ),
        (None, _) => (
            BuilderMode::Guest,
            "the image's glibc is unknown (no lock, and a suite this rig does not know), so fakechroot may not run it: mmdebstrap runs as root in a QEMU guest".into(),
        ),
        (Some(_), None) => (
            BuilderMode::Guest,
            format!(
                "the host's glibc version is unknown (`{}` failed), so fakechroot may not run the image: mmdebstrap runs as root in a QEMU guest",
                host_glibc_cmd().display()
            ),
        ),
    }
}

/// Why unshare mode cannot work here, or None when it can: this user has subordinate id ranges
/// (root needs none), the tools are there, and the probe succeeds.
fn unshare_blocker() -> Option<String> {
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
        return Some(format!(
            "user {name} has no range in /etc/subuid and /etc/subgid, so unshare mode cannot map ids"
        ));
    }
    if !BuilderMode::Unshare.missing_tools().is_empty() {
        return Some("newuidmap/newgidmap or unshare is missing".into());
    }
    let probe = userns_probe_cmd();
    if exec::succeeds(&probe) {
        return None;
    }
    Some(format!(
        "`{}` failed: unprivileged user namespaces are blocked here",
        probe.display()
    ))
}

/// Picks the mode: an explicit choice, else unshare where it works, else fakechroot when the
/// image's glibc (`image_glibc`) is no newer than the host's, else guest. Returns the reason in
/// words.
pub fn choose_mode(
    explicit: Option<BuilderMode>,
    image: Option<&(Glibc, String)>,
) -> (BuilderMode, String) {
    if let Some(m) = explicit {
        return (m, "chosen with --mode".into());
    }
    let Some(blocked) = unshare_blocker() else {
        return (
            BuilderMode::Unshare,
            "unprivileged user namespaces work here".into(),
        );
    };
    let c = host_glibc_cmd();
    let host = exec::capture(&c).ok().and_then(|t| parse_host_glibc(&t));
    let (mode, why) = fallback_mode(image, host);
    (mode, format!("{blocked}; {why}"))
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
    fn glibc_versions() {
        assert_eq!(parse_host_glibc("glibc 2.36\n"), Some((2, 36)));
        assert_eq!(parse_host_glibc("glibc 2.39"), Some((2, 39)));
        assert_eq!(parse_host_glibc("musl"), None);
        assert_eq!(major_minor("2.41-12+deb13u5"), Some((2, 41)));
        assert_eq!(major_minor("2.36-9+deb12u14"), Some((2, 36)));
        assert_eq!(image_glibc("trixie", None).unwrap().0, (2, 41));
        assert!(image_glibc("sid", None).is_none());
    }

    #[test]
    fn fakechroot_only_for_a_glibc_no_newer_than_the_hosts() {
        let bookworm = ((2, 36), "libc6 2.36-9+deb12u14 in the lock".to_string());
        let trixie = ((2, 41), "libc6 2.41-12+deb13u5 in the lock".to_string());
        let (m, why) = fallback_mode(Some(&bookworm), Some((2, 36)));
        assert_eq!(m, BuilderMode::Fakechroot);
        assert!(why.contains("no newer than the host's 2.36"), "{why}");
        assert_eq!(
            fallback_mode(Some(&bookworm), Some((2, 39))).0,
            BuilderMode::Fakechroot
        );
        let (m, why) = fallback_mode(Some(&trixie), Some((2, 36)));
        assert_eq!(m, BuilderMode::Guest);
        assert!(
            why.contains(
                "glibc 2.41 (libc6 2.41-12+deb13u5 in the lock) is newer than the host's 2.36"
            ),
            "{why}"
        );
        assert_eq!(fallback_mode(None, Some((2, 36))).0, BuilderMode::Guest);
        assert_eq!(fallback_mode(Some(&bookworm), None).0, BuilderMode::Guest);
    }

    #[test]
    fn each_mode_names_mmdebstraps_mode_and_its_tools() {
        assert_eq!(BuilderMode::Guest.mmdebstrap_mode(), "root");
        assert_eq!(BuilderMode::Unshare.mmdebstrap_mode(), "unshare");
        assert!(BuilderMode::Guest
            .tools()
            .contains(&("qemu-img", "qemu-utils")));
    }

    #[test]
    fn probe_argv() {
        assert_eq!(
            userns_probe_cmd().argv,
            ["unshare", "--user", "--map-root-user", "true"]
        );
    }
}
