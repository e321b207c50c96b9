//! The rule every test that needs root follows when it cannot run (tests/common/skip.rs): under
//! `CI` it fails with the reason, elsewhere it skips and says so on stderr. Shown on this very test
//! binary, re-run as an unprivileged user.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Output};

const PROBE: &str = "probe_needs_root";

/// Stands for any test that needs root; as root it passes having done nothing.
#[test]
fn probe_needs_root() {
    if !common::is_root() {
        common::skip::cannot_run(PROBE, "it needs root");
    }
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_test_that_cannot_run_fails_under_ci_and_skips_loudly_elsewhere() {
    if !common::is_root() {
        common::skip::cannot_run(
            "a_test_that_cannot_run_fails_under_ci_and_skips_loudly_elsewhere",
            "it must start as root to re-run itself as the user nobody",
        );
        return;
    }
    // A copy nobody can reach and execute, wherever the checkout lives.
    let dir = std::env::temp_dir().join(format!("sharedos-no-silent-skips-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let exe = dir.join("tests");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let as_nobody = |ci: Option<&str>| -> Output {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "env",
            "-u",
            "CI",
        ]);
        if let Some(v) = ci {
            c.arg(format!("CI={v}"));
        }
        c.arg(&exe)
            .args(["--exact", PROBE, "--test-threads=1", "--nocapture"])
            .current_dir(&dir);
        c.output().expect("running the probe as nobody")
    };

    let ci = as_nobody(Some("true"));
    assert!(
        !ci.status.success(),
        "under CI it must fail:\n{}",
        text(&ci)
    );
    assert!(
        text(&ci).contains("probe_needs_root cannot run: it needs root. CI is set"),
        "{}",
        text(&ci)
    );

    for env in [None, Some("false"), Some("")] {
        let o = as_nobody(env);
        assert!(o.status.success(), "CI={env:?}: {}", text(&o));
        assert!(
            String::from_utf8_lossy(&o.stderr).contains("SKIPPED probe_needs_root: it needs root"),
            "CI={env:?}: the skip must say so on stderr:\n{}",
            text(&o)
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
