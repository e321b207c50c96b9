//! What verify refuses in a report a hostile guest could leave: links and FIFOs, a GUI gate that
//! claims to have passed, a guest report at odds with its gates, a density gate its options did
//! not ask for.

use super::{code, read_report, review_pass, rig_in, stderr, stdout, write_report};
use crate::common::scratch::Scratch;
use sharedos_report::digest;
use sharedos_report::report::{self, Check, Gate, GateName, Report, Status};

/// A report a hostile guest could leave: a PNG replaced by a link to a host file with its hash made
/// to match, a FIFO in place of a log, report.json itself a link. Nothing is followed, nothing
/// blocks, and verify fails naming the file.
#[test]
fn links_and_fifos_in_a_report_are_refused_not_followed() {
    use std::os::unix::fs::symlink;
    let s = Scratch::new("hostile");
    let dir = s.0.join("r");
    let secret = s.0.join("id_ed25519");
    std::fs::write(&secret, b"-----BEGIN OPENSSH PRIVATE KEY----- not really").unwrap();
    let (secret_sha, secret_len) = digest::sha256_file(&secret).unwrap();
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| {
        r.artifacts[0].sha256 = secret_sha.clone();
        r.artifacts[0].bytes = secret_len;
    });
    std::fs::remove_file(dir.join("png/live.png")).unwrap();
    symlink(&secret, dir.join("png/live.png")).unwrap();
    std::fs::remove_file(dir.join("logs/dump.log")).unwrap();
    nix::unistd::mkfifo(&dir.join("logs/dump.log"), nix::sys::stat::Mode::S_IRUSR).unwrap();

    let started = std::time::Instant::now();
    let o = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("png/live.png is a symbolic link"), "{out}");
    assert!(
        out.contains("logs/dump.log is a FIFO, not a regular file"),
        "{out}"
    );

    let html = stdout(&rig_in(&dir, &["show", "DIR", "--format", "html"]));
    let leaked = digest::base64(&std::fs::read(&secret).unwrap(), true);
    assert!(!html.contains(&leaked), "the page embedded the host file");
    assert!(html.contains("png/live.png is a symbolic link"), "{html}");
    // A blocked open() on the FIFO would have hung until the harness gave up.
    assert!(started.elapsed() < std::time::Duration::from_secs(60));

    let review = review_pass(&dir);
    assert_ne!(
        code(&review),
        0,
        "a review of a tampered report must be refused"
    );

    // report.json a link to a file outside: refused, and never written through.
    let other = s.0.join("other");
    write_report(&other, "2026-11-30T20:15:00.000Z", |_| {});
    let linked = s.0.join("linked");
    std::fs::create_dir_all(&linked).unwrap();
    symlink(
        other.join(report::REPORT_FILE),
        linked.join(report::REPORT_FILE),
    )
    .unwrap();
    let o = rig_in(&linked, &["verify", "DIR"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("report.json is a symbolic link"),
        "{}",
        stdout(&o)
    );
}

#[test]
fn a_report_claiming_the_gui_gate_passed_fails_verify() {
    let s = Scratch::new("guipass");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| {
        for g in &mut r.gates {
            g.status = Status::Pass;
        }
    });
    let r = read_report(&dir);
    assert!(
        r.all_gates_pass && r.exit_code == 0,
        "sealed as a lying guest would"
    );
    let o = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o)
            .contains("gui_pixel_review PASS, but only a valid review.json can pass that gate"),
        "{}",
        stdout(&o)
    );
}

/// vm-run keeps the guest's own report.json under guest/; a guest that wrote exit 0 beside a
/// failing gate is caught there even though the host's report.json has its own, true fields.
#[test]
fn a_guest_report_claiming_exit_0_beside_a_failing_gate_fails_verify() {
    let s = Scratch::new("guestlie");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| {
        r.gates[3].status = Status::Fail;
    });
    let mut guest = read_report(&dir);
    guest.exit_code = 0;
    guest.all_gates_pass = true;
    std::fs::create_dir_all(dir.join(report::GUEST_DIR)).unwrap();
    std::fs::write(
        dir.join(report::GUEST_DIR).join(report::REPORT_FILE),
        serde_json::to_vec_pretty(&guest).unwrap(),
    )
    .unwrap();
    let o = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    let out = stdout(&o);
    assert!(
        out.contains("guest/report.json, as the guest wrote it: report.json says exit_code=0, but its gates give FAIL (exit 1)"),
        "{out}"
    );

    // Gates that differ between the two files are named as well.
    guest.exit_code = 1;
    guest.all_gates_pass = false;
    guest.gates[3].status = Status::Pass;
    guest.seal();
    std::fs::write(
        dir.join(report::GUEST_DIR).join(report::REPORT_FILE),
        serde_json::to_vec_pretty(&guest).unwrap(),
    )
    .unwrap();
    let out = stdout(&rig_in(&dir, &["verify", "DIR"]));
    assert!(
        out.contains(
            "report.json's gates differ from what the guest reported in guest/report.json"
        ),
        "{out}"
    );
}

/// A density gate after reset, as a `--copies 3` run writes it.
fn add_density_gate(r: &mut Report) {
    let mut g = Gate::new(GateName::Density, Status::Pass, "3 copies up at once");
    g.checks.push(Check {
        name: "all_same_token".into(),
        passed: true,
        value: serde_json::json!({"copies": 3, "failed": []}),
        expected: "every copy's app answers the dump-time token".into(),
    });
    g.data.insert(
        "density".into(),
        serde_json::json!({
            "requested": {"count": 3}, "copies": 3, "stopped_by": "count", "stop_detail": "",
            "restore_ms": [3100, 2900, 3300], "restore_ms_median": 3100.0, "restore_ms_p95": 3300,
            "limits": {"cap": 3, "reserve_kib": null, "deadline": null},
            "per_copy": [], "total": {"rss_kib": 90000, "pss_kib": 78643, "uss_kib": 70000},
            "mem_total_kib": 995000, "mem_used_before_kib": 170000,
            "mem_used_with_copies_kib": 262160, "ended_before": ["b", "reset"]
        }),
    );
    r.insert_gate(g);
}

#[test]
fn a_density_report_verifies_only_when_its_options_ask_for_density() {
    let s = Scratch::new("density");
    let asked = s.0.join("asked");
    write_report(&asked, "2026-11-30T20:15:00.000Z", |r| {
        r.options.copies = Some(report::Copies::Count(3));
        add_density_gate(r);
    });
    let o = rig_in(&asked, &["verify", "DIR"]);
    assert_eq!(code(&o), 3, "{}", stdout(&o));
    let text = stdout(&rig_in(&asked, &["show", "DIR"]));
    assert!(
        text.contains("copies per GiB [tcg], by PSS                  40.0")
            && text.contains("restore ms per copy [tcg]                     median 3100, p95 3300"),
        "{text}"
    );

    let unasked = s.0.join("unasked");
    write_report(&unasked, "2026-11-30T20:15:00.000Z", add_density_gate);
    let o = rig_in(&unasked, &["verify", "DIR"]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o).contains("a density gate, but its options do not ask for one"),
        "{}",
        stdout(&o)
    );
}
