//! The host install step, `.ci/install-host`, run for real on this machine: it leaves
//! `qemu-system-x86` and `qemu-utils` at one version, says what it chose, and a second run changes
//! nothing (dpkg's status file is byte-identical). Its `--check` is shown failing on a mismatched
//! pair through a stand-in `dpkg-query`.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use sharedos_report::digest::sha256_file;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

const DPKG_STATUS: &str = "/var/lib/dpkg/status";

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/install-host")
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn install_host(args: &[&str]) -> Output {
    let o = Command::new(script())
        .args(args)
        .output()
        .expect("running .ci/install-host");
    eprintln!(
        "--- .ci/install-host {args:?} ({}):\n{}",
        o.status,
        text(&o)
    );
    o
}

fn installed_version(pkg: &str) -> Option<String> {
    let o = Command::new("dpkg-query")
        .args(["-W", "-f=${db:Status-Abbrev}|${Version}", pkg])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&o.stdout).to_string();
    let (status, version) = s.split_once('|')?;
    status.starts_with("ii").then(|| version.to_string())
}

#[test]
#[ignore = "installs packages as root; run with --include-ignored"]
fn installs_a_matching_qemu_pair_and_a_second_run_changes_nothing() {
    if !common::is_root() {
        common::skip::cannot_run(
            "installs_a_matching_qemu_pair_and_a_second_run_changes_nothing",
            "it installs packages, which needs root",
        );
        return;
    }
    if !Path::new("/usr/bin/apt-get").exists() {
        common::skip::cannot_run(
            "installs_a_matching_qemu_pair_and_a_second_run_changes_nothing",
            "this host has no apt-get; the install step supports Debian and Ubuntu",
        );
        return;
    }
    let first = install_host(&[]);
    assert!(first.status.success(), "{}", text(&first));
    let sys = installed_version("qemu-system-x86").expect("qemu-system-x86 installed");
    let utils = installed_version("qemu-utils").expect("qemu-utils installed");
    assert_eq!(sys, utils, "the install step left a mixed QEMU pair");
    assert!(
        text(&first).contains("install-host: QEMU"),
        "it must say which QEMU it chose:\n{}",
        text(&first)
    );

    let before = sha256_file(Path::new(DPKG_STATUS)).unwrap();
    let second = install_host(&[]);
    assert!(second.status.success(), "{}", text(&second));
    assert_eq!(
        sha256_file(Path::new(DPKG_STATUS)).unwrap(),
        before,
        "a second run changed dpkg's status"
    );
    let out = text(&second);
    assert!(
        out.contains(&format!(
            "keeping the installed pair, qemu-system-x86 and qemu-utils {sys}"
        )),
        "{out}"
    );
    assert!(
        out.contains("nothing changed: every package was already installed"),
        "{out}"
    );

    let check = install_host(&["--check"]);
    assert!(check.status.success(), "{}", text(&check));
    assert!(text(&check).contains(&format!("qemu-utils {sys}")));
}

/// `--check` with a stand-in `dpkg-query` first on PATH that reports the given versions.
fn check_with(sys: Option<&str>, utils: Option<&str>) -> Output {
    // PATH cannot hold a ':', which Debian versions carry: one directory per call by count.
    static CALLS: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "sharedos-install-check-{}-{}",
        std::process::id(),
        CALLS.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let line = |v: Option<&str>| match v {
        Some(v) => format!("echo 'ii |{v}'"),
        None => "echo \"dpkg-query: no packages found matching $3\" >&2; exit 1".to_string(),
    };
    let fake = dir.join("dpkg-query");
    std::fs::write(
        &fake,
        format!(
            "#!/bin/sh\ncase \"$3\" in\nqemu-system-x86) {};;\nqemu-utils) {};;\nesac\n",
            line(sys),
            line(utils)
        ),
    )
    .unwrap();
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let o = Command::new(script())
        .arg("--check")
        .env("PATH", path)
        .output()
        .expect("running .ci/install-host --check");
    let _ = std::fs::remove_dir_all(&dir);
    o
}

#[test]
fn check_fails_on_a_mixed_or_missing_pair_naming_it_and_the_fix() {
    let mixed = check_with(
        Some("1:7.2+dfsg-7+deb12u18+b3"),
        Some("1:10.0.2+ds-2+deb13u1~bpo12+1"),
    );
    assert_eq!(mixed.status.code(), Some(1), "{}", text(&mixed));
    let t = text(&mixed);
    assert!(
        t.contains("qemu-system-x86 1:7.2+dfsg-7+deb12u18+b3 and qemu-utils 1:10.0.2+ds-2+deb13u1~bpo12+1 come from different releases"),
        "{t}"
    );
    assert!(t.contains("run: sudo .ci/install-host"), "{t}");

    let missing = check_with(None, Some("1:10.0.2+ds-2+deb13u1~bpo12+1"));
    assert_eq!(missing.status.code(), Some(1), "{}", text(&missing));
    assert!(
        text(&missing).contains("QEMU is not installed (qemu-system-x86: missing"),
        "{}",
        text(&missing)
    );

    let same = check_with(Some("1:9.0"), Some("1:9.0"));
    assert!(same.status.success(), "{}", text(&same));
    assert!(text(&same).contains("qemu-system-x86 and qemu-utils 1:9.0"));
}

#[test]
fn an_unknown_option_is_named_and_nothing_runs() {
    let o = install_host(&["--test"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        text(&o).contains("unknown option '--test'; use --tests, --peers, --check or nothing"),
        "{}",
        text(&o)
    );
}
