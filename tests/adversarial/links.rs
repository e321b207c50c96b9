//! 6. No link at any component, no hard link.

use super::{
    archive, archive_with, both, err, exits, guest_report, images_with_expectations, list_artifact,
    merge, out, rig, state_dir, verify, BIN,
};
use crate::common::scratch::Scratch;
use sharedos_report::digest;
use sharedos_report::report::Status;
use std::os::unix::fs::symlink;
use std::process::Command;

/// The report's guest/ directory a link to a directory elsewhere: nothing is read through it.
#[test]
fn c6_a_guest_directory_that_is_a_link_is_refused() {
    let s = Scratch::new("c6-guest");
    let r = s.path("r");
    archive_with(&r, guest_report(), |h| {
        h.artifacts.retain(|a| !a.path.starts_with("guest/"));
    });
    exits(&verify(&r), 3);
    std::fs::rename(r.join("guest"), s.path("elsewhere")).unwrap();
    symlink(s.path("elsewhere"), r.join("guest")).unwrap();
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("guest"), "{}", both(&o));
}

/// A link among list's entries is named, not followed.
#[test]
fn c6_list_does_not_follow_a_linked_entry() {
    let s = Scratch::new("c6-list");
    archive(&s.path("reports/real"));
    archive(&s.path("outside"));
    symlink(s.path("outside"), s.path("reports/link")).unwrap();
    let o = rig(&[&"list", &s.path("reports")]);
    exits(&o, 0);
    let line = out(&o)
        .lines()
        .find(|l| l.contains("reports/link"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(!line.contains("REVIEW_REQUIRED"), "{}", both(&o));
    assert!(line.contains("link"), "{}", both(&o));
}

/// A matrix row that is a link to a report elsewhere is not read through.
#[test]
fn c6_a_matrix_row_that_is_a_link_is_not_read() {
    let s = Scratch::new("c6-matrix");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    let m = s.path("matrix");
    exits(&merge(&m, &images, &[&r]), 0);
    let outside = s.path("outside");
    let mut g = guest_report();
    g.gates[3].status = Status::Fail;
    archive_with(&outside, g, |_| {});
    std::fs::remove_dir_all(m.join("bookworm")).unwrap();
    symlink(&outside, m.join("bookworm")).unwrap();
    let o = Command::new(BIN)
        .args(["show", m.to_str().unwrap()])
        .env("SHAREDOS_RIG_IMAGES", &images)
        .env("SHAREDOS_RIG_STATE_DIR", state_dir())
        .output()
        .unwrap();
    assert!(err(&o).contains("symbolic link"), "{}", both(&o));
    let row = out(&o)
        .lines()
        .find(|l| l.starts_with("bookworm"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        !row.split_whitespace().any(|w| w == "FAIL"),
        "the row shows the linked report: {}",
        both(&o)
    );
}

/// A hard link to a file outside the report passes a plain regular-file test; it is refused,
/// and its bytes never reach the html page.
#[test]
fn c6_a_hard_link_to_a_host_file_is_refused() {
    let s = Scratch::new("c6-hard");
    let r = s.path("r");
    archive(&r);
    let secret = s.path("host-secret.png");
    std::fs::write(&secret, b"HOST SECRET BYTES, NOT A PNG").unwrap();
    std::fs::hard_link(&secret, r.join("guest/png/extra.png")).unwrap();
    list_artifact(&r, "guest/png/extra.png");
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("extra.png"), "{}", both(&o));
    let html = out(&rig(&[&"show", &r, &"--format", &"html"]));
    let leaked = digest::base64(&std::fs::read(&secret).unwrap(), true);
    assert!(!html.contains(&leaked), "the page embedded the host file");
}

/// merge copies what it judges: a hard link in a report is refused, not copied as the host
/// file's bytes into the matrix.
#[test]
fn c6_merge_refuses_a_hard_link() {
    let s = Scratch::new("c6-merge");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    let secret = s.path("host-secret.txt");
    std::fs::write(&secret, b"HOST SECRET").unwrap();
    std::fs::hard_link(&secret, r.join("guest/notes.log")).unwrap();
    let m = s.path("matrix");
    let o = merge(&m, &images, &[&r]);
    exits(&o, 2);
    assert!(!m.join("bookworm/guest/notes.log").exists());
}
