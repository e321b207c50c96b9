//! 9. Smaller.

use super::{archive, archive_with, both, exits, guest_report, out, read, rig, verify, write_json};
use crate::common;
use crate::common::scratch::Scratch;
use sharedos_report::digest;
use sharedos_report::report::{self, Report, REPORT_FILE};

/// A report.json that does not parse is a verdict (exit 1), not a usage error.
#[test]
fn c9_an_unparsable_report_json_exits_1() {
    let s = Scratch::new("c9-json");
    let r = s.path("r");
    archive(&r);
    std::fs::write(r.join(REPORT_FILE), b"{\"schema_version\": 2, \"gates\": [").unwrap();
    exits(&verify(&r), 1);
}

/// An artifact listed twice is refused.
#[test]
fn c9_duplicate_artifact_entries_are_refused() {
    let s = Scratch::new("c9-dup");
    let r = s.path("r");
    archive(&r);
    let mut rep = read(&r);
    let first = rep.artifacts[0].clone();
    rep.artifacts.push(first.clone());
    write_json(&r, &rep);
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains(&first.path), "{}", both(&o));
}

/// A device node in a report is refused without being opened: an inotify watch on it sees no
/// open while verify and show run.
#[test]
fn c9_a_device_node_is_never_opened() {
    if !common::is_root() {
        common::skip::cannot_run(
            "c9_a_device_node_is_never_opened",
            "making a device node needs root",
        );
        return;
    }
    use nix::libc;
    let s = Scratch::new("c9-dev");
    let r = s.path("r");
    archive(&r);
    let node = r.join("guest/console.log");
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let mut rep = read(&r);
    rep.artifacts.push(report::Artifact {
        path: "guest/console.log".into(),
        sha256: digest::sha256_hex(b""),
        bytes: 0,
        kind: "log".into(),
    });
    write_json(&r, &rep);
    // SAFETY: plain syscalls on descriptors this test owns.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(fd >= 0);
    let cpath = std::ffi::CString::new(node.to_str().unwrap()).unwrap();
    let wd = unsafe { libc::inotify_add_watch(fd, cpath.as_ptr(), libc::IN_OPEN) };
    assert!(wd >= 0);
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("guest/console.log"), "{}", both(&o));
    exits(&rig(&[&"show", &r, &"--format", &"html"]), 0);
    let mut buf = [0u8; 4096];
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    unsafe { libc::close(fd) };
    assert!(
        n < 0,
        "the device node was opened ({n} bytes of inotify events)"
    );
}

/// The host's report.json and the guest's own must agree on where it ran, with which options
/// and which fidelity differences, not only on the gates.
#[test]
fn c9_host_and_guest_reports_must_agree_beyond_the_gates() {
    for (what, tweak) in [
        (
            "environment",
            Box::new(|h: &mut Report| h.environment.kernel_release = "6.1.0-99-amd64".into())
                as Box<dyn Fn(&mut Report)>,
        ),
        (
            "options",
            Box::new(|h: &mut Report| h.options.cow_root = true),
        ),
        (
            "fidelity",
            Box::new(|h: &mut Report| {
                let f = h.fidelity_differences[0].clone();
                h.fidelity_differences.push(f);
            }),
        ),
        (
            "marker",
            Box::new(|h: &mut Report| h.marker = "spike-ffffffffffff".into()),
        ),
    ] {
        let s = Scratch::new(&format!("c9-host-{what}"));
        let r = s.path("r");
        archive_with(&r, guest_report(), |h| tweak(h));
        let o = verify(&r);
        exits(&o, 1);
        assert!(out(&o).contains(what), "{what}: {}", both(&o));
    }
}
