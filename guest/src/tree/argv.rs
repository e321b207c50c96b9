//! The argv builders: the tree's spawn and its unshare(1) equivalent, its PID 1, and each
//! program a workload starts.

use super::{
    TreeSpec, BROWSER_PROFILE, BUS_SOCKET, PAGE, SCREEN, USERNS_COUNT, USERNS_OUTSIDE, XTERM_TITLE,
};
use std::path::Path;

fn spec_args(spec: &TreeSpec) -> Vec<String> {
    let mut v = vec![
        "--marker".into(),
        spec.marker.clone(),
        "--display".into(),
        format!(":{}", spec.display),
        "--exe".into(),
        spec.exe.display().to_string(),
    ];
    if !spec.workload.is_default() {
        v.extend(["--workload".into(), spec.workload.to_string()]);
    }
    v
}

/// What diagnose execs, after unshare(2), to start the tree.
pub fn spawn_argv(exe: &Path, spec: &TreeSpec) -> Vec<String> {
    let mut v = vec![exe.display().to_string(), "tree-spawn".into()];
    v.extend(spec_args(spec));
    v.push("--root".into());
    v.push(spec.root.display().to_string());
    if let Some(cg) = &spec.cgroup {
        v.push("--cgroup".into());
        v.push(cg.display().to_string());
    }
    if spec.userns {
        v.push("--userns".into());
    }
    v
}

/// The util-linux command that makes the same namespaces, for readers of the plan.
pub fn unshare_equivalent_argv(exe: &Path, spec: &TreeSpec) -> Vec<String> {
    let mut v: Vec<String> = vec!["unshare".into()];
    if spec.userns {
        // util-linux 2.38's form: outer, inner, count.
        let map = format!("{USERNS_OUTSIDE},0,{USERNS_COUNT}");
        v.extend([
            "--user".to_string(),
            format!("--map-users={map}"),
            format!("--map-groups={map}"),
        ]);
    }
    v.extend(
        [
            "--pid",
            "--fork",
            "--mount-proc",
            "--mount",
            "--net",
            "--ipc",
            "--uts",
            "--propagation",
            "private",
            "--",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v.extend(spawn_argv(exe, spec));
    v
}

/// PID 1's re-exec, from inside the tree.
pub fn init_argv(spec: &TreeSpec) -> Vec<String> {
    let mut v = vec![spec.exe.display().to_string(), "tree-init".into()];
    v.extend(spec_args(spec));
    v
}

pub fn xvfb_argv(display: u32) -> Vec<String> {
    [
        "Xvfb",
        &format!(":{display}"),
        "-screen",
        "0",
        SCREEN,
        "-nolisten",
        "tcp",
        "-noreset",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The xterm prints the marker and then idles, so its screen stays still between grabs.
pub fn xterm_argv(marker: &str) -> Vec<String> {
    [
        "xterm",
        "-ut",
        "-T",
        XTERM_TITLE,
        "-geometry",
        "80x24+0+0",
        "-e",
        "/bin/sh",
        "-c",
        &format!("echo {marker}; exec sleep infinity"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub fn stateapp_argv(exe: &Path, marker: &str) -> Vec<String> {
    vec![
        exe.display().to_string(),
        "stateapp".into(),
        "--marker".into(),
        marker.into(),
        "--socket".into(),
        crate::stateapp::SOCKET.into(),
    ]
}

pub fn dbus_argv() -> Vec<String> {
    [
        "dbus-daemon",
        "--session",
        "--nofork",
        "--nopidfile",
        &format!("--address=unix:path={BUS_SOCKET}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The browser's window: kiosk mode (no tab strip, whose title would move on with the counter),
/// 520x360 at the top left, clear of the mark isolation and reset draw at 560,400: Firefox
/// repaints its window over anything drawn on it.
pub fn browser_argv() -> Vec<String> {
    [
        "firefox-esr",
        "--no-remote",
        "--profile",
        BROWSER_PROFILE,
        "--kiosk",
        "--width",
        "520",
        "--height",
        "360",
        &format!("file://{PAGE}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::tests::spec;

    #[test]
    fn xvfb_line_matches_the_spec() {
        assert_eq!(
            xvfb_argv(170).join(" "),
            "Xvfb :170 -screen 0 640x480x24 -nolisten tcp -noreset"
        );
    }

    #[test]
    fn xterm_carries_title_and_marker() {
        let a = xterm_argv("spike-x");
        assert_eq!(a[2..4], ["-T".to_string(), XTERM_TITLE.to_string()]);
        assert!(a.last().unwrap().contains("echo spike-x"));
    }

    /// The binary itself only where the tree's root shows it and anyone may run it; else the copy.

    #[test]
    fn spawn_and_unshare_lines() {
        let s = spec();
        let exe = Path::new("/usr/local/bin/sharedos-gate");
        assert_eq!(
            spawn_argv(exe, &s).join(" "),
            "/usr/local/bin/sharedos-gate tree-spawn --marker spike-0123456789ab --display :170 --exe /usr/local/bin/sharedos-gate --root /w/root"
        );
        let u = unshare_equivalent_argv(exe, &s).join(" ");
        assert!(u.starts_with(
            "unshare --pid --fork --mount-proc --mount --net --ipc --uts --propagation private -- "
        ));
        assert!(init_argv(&s)
            .join(" ")
            .contains("tree-init --marker spike-0123456789ab"));
    }
}
