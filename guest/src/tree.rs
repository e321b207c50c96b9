//! The tree under test: private pid, mount, net, ipc and uts namespaces; a minimal mount table
//! reached through pivot_root; Xvfb, an xterm and the stateful app under a PID 1 of our own.
//!
//! The sequence: `diagnose` execs `sharedos-gate tree-spawn` after unshare(2) of the five
//! namespaces; tree-spawn forks the namespace's PID 1, prints its host pid and exits. PID 1
//! builds the mount table, pivots, copies our binary into the private /tmp (so CRIU finds every
//! executable inside the tree at restore, wherever the binary lived on the host) and re-execs it
//! as `tree-init`, which starts the programs and reaps.
//!
//! Here: what a tree is (its spec, namespaces, device nodes and environment); `argv`: the argv
//! builders; `workload`: the workload definitions; `setup`: the spawn and PID 1's mount table
//! and pivot; `init`: PID 1 starting the programs.

mod argv;
mod chromium;
mod init;
mod office;
mod session;
mod setup;
mod workload;

pub use argv::{
    browser_argv, dbus_argv, init_argv, spawn_argv, stateapp_argv, unshare_equivalent_argv,
    xterm_argv, xvfb_argv,
};
pub use chromium::{chromium_page_html, CHROMIUM_HOME, CHROMIUM_PAGE, CHROMIUM_UID};
pub use init::init_main;
pub use office::{office_argv, OFFICE_CLASS, OFFICE_PROFILE};
pub use session::{PANEL_CLASS, SESSION_WM_NAME, SETTINGS_NEEDLE, WORKSPACES, XSETTINGS_SELECTION};
pub use setup::{bind_with_flags, pid_line, spawn_main, spawn_setup, spawned_pid};
pub use workload::{
    browser_prefs, expected_processes, page_html, workload, After, Program, TreeFile, Workload,
    BROWSER_NO_SANDBOX_ENV, BROWSER_PROFILE, BUS_SOCKET, EDITOR_CLASS, PAGE, WM_NAME,
};

use nix::sched::CloneFlags;
use sharedos_report::report::{Evidence, Workload as Kind};
use std::path::{Path, PathBuf};

pub const XTERM_TITLE: &str = "sharedos-spike";
/// Our binary's path inside the tree when the tree's root does not show it (see [`exe_in_tree`]):
/// a copy in the tree's own /tmp.
pub const TREE_EXE: &str = "/tmp/sharedos-gate";
pub const MARKER_ENV: &str = "SHAREDOS_MARKER";
pub const SCREEN: &str = "640x480x24";

#[derive(Clone, Debug)]
pub struct TreeSpec {
    pub marker: String,
    pub display: u32,
    /// A read-only bind of the host's `/`: the tree's root, and CRIU's `--root` at restore.
    pub root: PathBuf,
    /// With `--cgroup`: the cgroup2 directory the tree joins before its PID 1 is forked.
    pub cgroup: Option<PathBuf>,
    /// With `--userns`: the tree in a user namespace of its own, root mapped to `USERNS_MAP`.
    pub userns: bool,
    /// What the tree runs beside Xvfb and the state app.
    pub workload: Kind,
    /// This binary as the tree runs it (PID 1 and the state app): see [`exe_in_tree`].
    pub exe: PathBuf,
}

/// Where the tree runs this binary (`exe`, as the outside sees it) from. CRIU dumps a tmpfs by
/// tarring and gzipping its files, so a copy of this 5 MB binary in the tree's /tmp cost every
/// dump 2 s and every restore 1 s under TCG. The binary itself serves when the tree's root (a
/// bind of `/`, not of what is mounted below it) shows it at the same path: it is on the root
/// filesystem, and anyone may execute it (root inside a user namespace is anyone). CRIU then
/// records only its path, and checks at restore that the file is still the one it dumped.
pub fn exe_in_tree(exe: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let shown = exe.is_absolute()
        && match (std::fs::metadata(exe), std::fs::metadata("/")) {
            (Ok(e), Ok(r)) => e.is_file() && e.dev() == r.dev() && e.mode() & 0o001 != 0,
            _ => false,
        };
    if shown {
        exe.to_path_buf()
    } else {
        PathBuf::from(TREE_EXE)
    }
}

/// The device nodes of the tree's /dev: name, major, minor.
pub const DEV_NODES: [(&str, u64, u64); 6] = [
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

pub fn dev_node_names() -> Vec<&'static str> {
    DEV_NODES.iter().map(|(n, _, _)| *n).collect()
}

/// First uid and gid outside that root inside the tree's user namespace maps to, and how many.
pub const USERNS_OUTSIDE: u32 = 100_000;
pub const USERNS_COUNT: u32 = 65_536;

/// The line written to the tree's uid_map and gid_map: inside, outside, count.
pub fn userns_map_line() -> String {
    format!("0 {USERNS_OUTSIDE} {USERNS_COUNT}")
}

pub fn namespaces() -> CloneFlags {
    CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
}

/// The log of the tree's PID 1, beside its programs' logs.
const INIT_LOG: &str = "/tmp/tree-init.log";

/// The environment of every process in the tree: nothing inherited from the caller.
pub fn tree_env(spec: &TreeSpec) -> Vec<(String, String)> {
    vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOME".into(), "/tmp".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("DISPLAY".into(), format!(":{}", spec.display)),
        (MARKER_ENV.into(), spec.marker.clone()),
    ]
    .into_iter()
    .chain((spec.workload == Kind::Desktop).then(|| {
        (
            "DBUS_SESSION_BUS_ADDRESS".to_string(),
            format!("unix:path={BUS_SOCKET}"),
        )
    }))
    .chain(if spec.workload == Kind::Session {
        session::session_env()
    } else {
        Vec::new()
    })
    .collect()
}

/// A path inside the tree as seen from outside, through the tree's root.
pub fn path_in_tree(tree_pid: i32, inner: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{tree_pid}/root{inner}"))
}

/// The logs PID 1 and the programs of the tree (`spec`'s) write in its private /tmp, as
/// evidence of a failed start.
pub fn log_evidence(spec: &TreeSpec, pid: i32) -> Vec<Evidence> {
    let w = workload(spec);
    let logs = std::iter::once(("tree-init", INIT_LOG.to_string()))
        .chain(w.programs().map(|p| (p.name, p.log())));
    logs.filter_map(|(name, log)| {
        let p = path_in_tree(pid, &log);
        std::fs::read_to_string(&p).ok().map(|text| Evidence {
            step: format!("log of {name} inside the tree"),
            note: sharedos_report::text::tail(&text, 20, 3000),
            ..Evidence::default()
        })
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn spec() -> TreeSpec {
        TreeSpec {
            marker: "spike-0123456789ab".into(),
            display: 170,
            root: PathBuf::from("/w/root"),
            cgroup: None,
            userns: false,
            workload: Kind::Xterm,
            exe: PathBuf::from("/usr/local/bin/sharedos-gate"),
        }
    }

    #[test]
    fn the_tree_runs_the_binary_in_place_only_when_its_root_shows_it() {
        use std::os::unix::fs::PermissionsExt;
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        assert_eq!(exe_in_tree(&sh), sh, "a program on the root filesystem");
        assert_eq!(exe_in_tree(Path::new("bin/sh")), Path::new(TREE_EXE));
        assert_eq!(
            exe_in_tree(Path::new("/nonexistent/sharedos-gate")),
            Path::new(TREE_EXE)
        );
        // /dev is mounted over the root filesystem: the tree's bind of / does not show it.
        let below = Path::new("/dev/shm").join(format!("sharedos-exe-{}", std::process::id()));
        std::fs::write(&below, b"x").unwrap();
        std::fs::set_permissions(&below, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(exe_in_tree(&below), Path::new(TREE_EXE));
        std::fs::remove_file(&below).unwrap();
        // Root inside a user namespace is anyone: a binary only its owner may run is copied.
        let dir = std::env::temp_dir();
        let private = std::fs::canonicalize(&dir)
            .unwrap()
            .join(format!("sharedos-exe-{}", std::process::id()));
        std::fs::write(&private, b"x").unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(exe_in_tree(&private), Path::new(TREE_EXE));
        std::fs::remove_file(&private).unwrap();
    }

    #[test]
    fn every_tree_process_gets_the_marker() {
        let env = tree_env(&spec());
        assert!(env
            .iter()
            .any(|(k, v)| k == MARKER_ENV && v == "spike-0123456789ab"));
        assert!(stateapp_argv(Path::new("/g"), "m1").contains(&"m1".to_string()));
    }

    #[test]
    fn five_namespaces() {
        let f = namespaces();
        for n in [
            CloneFlags::CLONE_NEWPID,
            CloneFlags::CLONE_NEWNS,
            CloneFlags::CLONE_NEWNET,
            CloneFlags::CLONE_NEWIPC,
            CloneFlags::CLONE_NEWUTS,
        ] {
            assert!(f.contains(n));
        }
        assert!(!f.contains(CloneFlags::CLONE_NEWUSER));
    }
}
