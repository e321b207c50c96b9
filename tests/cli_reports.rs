//! Runs the built `sharedos-rig` binary on report directories written here from constructed
//! reports: review, verify, show (all formats), diff and list, with their exit codes.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

use sharedos_report::digest;
use sharedos_report::report::{
    self, Check, CitedImage, Environment, Gate, GateName, Phase, Report, Review, ReviewDecision,
    Status, VmProvenance,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sharedos-rig");

/// A scratch directory removed when the test ends, pass or fail.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p =
            std::env::temp_dir().join(format!("sharedos-rig-cli-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn png_bytes(w: u32, h: u32, shade: u8) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut enc = png::Encoder::new(&mut out, w, h);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut wr = enc.write_header().unwrap();
        let data: Vec<u8> = (0..w * h)
            .flat_map(|i| [shade, (i % 256) as u8, 255 - shade])
            .collect();
        wr.write_image_data(&data).unwrap();
    }
    out
}

/// Writes a fresh report as the guest would: nine gates PASS, the GUI gate REVIEW_REQUIRED, two
/// PNGs and a log, all hashed. `tweak` changes the report before it is sealed and written.
fn write_report(dir: &Path, started_at: &str, tweak: impl FnOnce(&mut Report)) {
    std::fs::create_dir_all(dir.join("png")).unwrap();
    std::fs::create_dir_all(dir.join("logs")).unwrap();
    std::fs::write(dir.join("png/live.png"), png_bytes(16, 12, 10)).unwrap();
    std::fs::write(dir.join("png/restored.png"), png_bytes(16, 12, 200)).unwrap();
    std::fs::write(dir.join("logs/dump.log"), b"criu dump ok\n").unwrap();
    let artifacts = vec![
        digest::artifact(dir, "png/live.png", "png").unwrap(),
        digest::artifact(dir, "png/restored.png", "png").unwrap(),
        digest::artifact(dir, "logs/dump.log", "criu-log").unwrap(),
    ];
    let gates = GateName::ALL
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let status = if *n == GateName::GuiPixelReview {
                Status::ReviewRequired
            } else {
                Status::Pass
            };
            let mut g = Gate::new(*n, status, format!("{n} did what it should"));
            g.duration_ms = 100 * (i as u64 + 1);
            if status == Status::Pass {
                g.checks.push(Check {
                    name: format!("{n}_holds"),
                    passed: true,
                    value: serde_json::json!(true),
                    expected: "true".into(),
                });
            }
            g
        })
        .collect();
    let mut r = Report {
        schema_version: report::SCHEMA_VERSION,
        marker: "spike-b114cf4c2f15".into(),
        all_gates_pass: false,
        exit_code: 0,
        gates,
        environment: Environment {
            kernel_release: "6.1.0-28-amd64".into(),
            kernel_version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1".into(),
            machine: "x86_64".into(),
            hostname: "sharedos-guest".into(),
            boot_id: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into(),
            os: "Debian GNU/Linux 12 (bookworm)".into(),
            euid: 0,
            started_at: started_at.into(),
            finished_at: started_at.replace("00.000Z", "59.000Z"),
            criu_version: Some("Version: 3.17.1".into()),
            xvfb_version: Some("21.1.7".into()),
            xterm_version: Some("XTerm(379)".into()),
            gate_version: "0.1.0".into(),
            command_line: vec!["sharedos-gate".into(), "diagnose".into()],
        },
        artifacts,
        fidelity_differences: sharedos_report::fidelity::differences(
            "6.1.0-28-amd64",
            &Default::default(),
            &[],
        ),
        options: Default::default(),
        vm: Some(VmProvenance {
            accel: "tcg".into(),
            accel_reason: "/dev/kvm is absent".into(),
            qemu_version: "QEMU emulator version 7.2.15".into(),
            image_sha256: "5e".repeat(32),
            phases: vec![
                Phase {
                    name: "boot_to_ssh".into(),
                    duration_ms: 20_000,
                },
                Phase {
                    name: "gates".into(),
                    duration_ms: 60_000,
                },
            ],
            ..Default::default()
        }),
    };
    hostile_gate::honest::add_to(&mut r, dir).unwrap();
    tweak(&mut r);
    r.seal();
    std::fs::write(
        dir.join(report::REPORT_FILE),
        serde_json::to_vec_pretty(&r).unwrap(),
    )
    .unwrap();
}

/// The binary, with a review ledger of this test run's own, so that no test writes to the home
/// of whoever runs it.
fn rig(args: &[&str]) -> Output {
    let state = std::env::temp_dir().join(format!("sharedos-rig-cli-{}-state", std::process::id()));
    rig_with_state(args, &state)
}

fn rig_with_state(args: &[&str], state: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .env("SHAREDOS_RIG_STATE_DIR", state)
        .output()
        .unwrap()
}

/// The binary on the report `dir`, with a review ledger beside it: the reports these tests
/// write are byte for byte alike, and one test's signed review must not bind another's.
fn rig_in(dir: &Path, args: &[&str]) -> Output {
    let mut v: Vec<&str> = Vec::new();
    let d = dir.to_str().unwrap();
    for a in args {
        v.push(if *a == "DIR" { d } else { a });
    }
    let state = dir.parent().unwrap_or(dir).join("state");
    rig_with_state(&v, &state)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn read_report(dir: &Path) -> Report {
    serde_json::from_slice(&std::fs::read(dir.join(report::REPORT_FILE)).unwrap()).unwrap()
}

fn review_pass(dir: &Path) -> Output {
    rig_in(
        dir,
        &[
            "review",
            "DIR",
            "--decision",
            "pass",
            "--reviewer",
            "alice",
            "--note",
            "xterm visible",
        ],
    )
}

#[test]
fn review_then_verify_passes() {
    let s = Scratch::new("review-verify");
    let dir = s.0.join("r1");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |_| {});

    let before = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&before), 3, "{}{}", stdout(&before), stderr(&before));

    let rv = review_pass(&dir);
    assert_eq!(code(&rv), 0, "{}", stderr(&rv));
    let out = stdout(&rv);
    for a in read_report(&dir).png_artifacts() {
        assert!(out.contains(&a.sha256), "{out}");
        assert!(out.contains(&a.path), "{out}");
    }
    assert!(out.contains("--format html > page.html"), "{out}");

    let review: Review =
        serde_json::from_slice(&std::fs::read(dir.join(report::REVIEW_FILE)).unwrap()).unwrap();
    assert_eq!(
        review.images.len(),
        read_report(&dir).png_artifacts().count()
    );
    assert_eq!(review.reviewer, "alice");

    let after = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&after), 0, "{}{}", stdout(&after), stderr(&after));
    assert!(
        stdout(&after).contains("verdict:   PASS (exit 0)"),
        "{}",
        stdout(&after)
    );

    let text = rig_in(&dir, &["show", "DIR"]);
    assert_eq!(code(&text), 0);
    let t = stdout(&text);
    assert!(t.starts_with("verdict: PASS (exit 0)"), "{t}");
    assert!(t.contains("reviewed by alice"), "{t}");
    assert!(t.contains("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"), "{t}");
    assert!(t.contains("QEMU emulator version 7.2.15"), "{t}");
}

#[test]
fn an_existing_review_needs_force() {
    let s = Scratch::new("force");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |_| {});
    assert_eq!(code(&review_pass(&dir)), 0);
    let again = rig_in(
        &dir,
        &["review", "DIR", "--decision", "fail", "--reviewer", "bob"],
    );
    assert_eq!(code(&again), 2);
    assert!(stderr(&again).contains("--force"), "{}", stderr(&again));
    let forced = rig_in(
        &dir,
        &[
            "review",
            "DIR",
            "--decision",
            "fail",
            "--reviewer",
            "bob",
            "--force",
        ],
    );
    assert_eq!(code(&forced), 0, "{}", stderr(&forced));
    let v = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&v), 1, "a fail decision fails the run: {}", stdout(&v));
}

#[test]
fn tampering_a_png_fails_verify_and_blocks_review() {
    let s = Scratch::new("tamper");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |_| {});
    assert_eq!(code(&review_pass(&dir)), 0);
    std::fs::write(dir.join("png/restored.png"), png_bytes(16, 12, 201)).unwrap();
    let v = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&v), 1, "{}", stdout(&v));
    assert!(stdout(&v).contains("png/restored.png"), "{}", stdout(&v));

    let rv = rig_in(
        &dir,
        &[
            "review",
            "DIR",
            "--decision",
            "pass",
            "--reviewer",
            "a",
            "--force",
        ],
    );
    assert_eq!(code(&rv), 2);
    assert!(
        stderr(&rv).contains("refusing to record"),
        "{}",
        stderr(&rv)
    );
}

#[test]
fn a_review_citing_a_wrong_hash_is_rejected() {
    let s = Scratch::new("wrong-hash");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |_| {});
    let r = read_report(&dir);
    let report_sha = digest::sha256_file(&dir.join(report::REPORT_FILE))
        .unwrap()
        .0;
    let mut images: Vec<CitedImage> = r
        .png_artifacts()
        .map(|a| CitedImage {
            path: a.path.clone(),
            sha256: a.sha256.clone(),
        })
        .collect();
    images[0].sha256 = "0".repeat(64);
    let review = Review {
        schema_version: report::SCHEMA_VERSION,
        decision: ReviewDecision::Pass,
        reviewer: "mallory".into(),
        note: String::new(),
        recorded_at: "2026-11-30T21:00:00.000Z".into(),
        report_sha256: report_sha,
        images,
    };
    std::fs::write(
        dir.join(report::REVIEW_FILE),
        serde_json::to_vec_pretty(&review).unwrap(),
    )
    .unwrap();
    let v = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&v), 1, "{}", stdout(&v));
    assert!(stdout(&v).contains("review rejected"), "{}", stdout(&v));
    let l = rig_in(&s.0, &["list", "DIR"]);
    assert!(stdout(&l).contains("review:invalid"), "{}", stdout(&l));
}

#[test]
fn a_report_without_png_cannot_be_reviewed() {
    let s = Scratch::new("no-png");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| {
        r.artifacts.retain(|a| a.kind != "png")
    });
    let rv = review_pass(&dir);
    assert_eq!(code(&rv), 2);
    assert!(stderr(&rv).contains("lists no PNG"), "{}", stderr(&rv));
    assert!(!dir.join(report::REVIEW_FILE).exists());
}

#[test]
fn junit_is_xml_with_ten_testcases() {
    let s = Scratch::new("junit");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| {
        r.gates[3].status = Status::Fail;
        r.gates[3].reason = "criu said <error> & \"quit\"".into();
        r.gates[4].status = Status::NotRun;
    });
    let o = rig_in(&dir, &["show", "DIR", "--format", "junit"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let xml = stdout(&o);
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("name"), Some("sharedos-rig"));
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 10);
    let dump = cases
        .iter()
        .find(|c| c.attribute("name") == Some("dump"))
        .unwrap();
    let failure = dump.children().find(|n| n.has_tag_name("failure")).unwrap();
    assert_eq!(
        failure.attribute("message"),
        Some("criu said <error> & \"quit\"")
    );
    let skipped = cases
        .iter()
        .filter(|c| c.children().any(|n| n.has_tag_name("skipped")))
        .count();
    assert_eq!(
        skipped, 2,
        "restore_live_process NOT_RUN and the GUI review"
    );
}

#[test]
fn html_embeds_every_png_with_its_hash() {
    let s = Scratch::new("html");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |_| {});
    let o = rig_in(&dir, &["show", "DIR", "--format", "html"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let html = stdout(&o);
    for a in read_report(&dir).png_artifacts() {
        assert!(html.contains(&a.sha256), "missing {}", a.sha256);
        let bytes = std::fs::read(dir.join(&a.path)).unwrap();
        let uri = format!("data:image/png;base64,{}", digest::base64(&bytes, true));
        assert!(html.contains(&uri), "{} not embedded", a.path);
    }
    let again = stdout(&rig_in(&dir, &["show", "DIR", "--format", "html"]));
    assert_eq!(html, again, "html must be deterministic");
    // The same report elsewhere renders to the same page, so screenshots compare.
    let moved = s.0.join("elsewhere").join("r");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&dir, &moved).unwrap();
    let there = stdout(&rig_in(&moved, &["show", "DIR", "--format", "html"]));
    assert_eq!(
        html, there,
        "html must not depend on where the report lives"
    );
    std::fs::rename(&moved, &dir).unwrap();

    let md = stdout(&rig_in(&dir, &["show", "DIR", "--format", "md"]));
    assert!(
        md.starts_with("# sharedos-rig report: REVIEW_REQUIRED"),
        "{md}"
    );
}

#[test]
fn diff_shows_no_change_with_itself_and_the_differing_gate_otherwise() {
    let s = Scratch::new("diff");
    let a = s.0.join("a");
    let b = s.0.join("b");
    write_report(&a, "2026-11-30T20:15:00.000Z", |_| {});
    write_report(&b, "2026-12-01T08:00:00.000Z", |r| {
        r.gates[5].status = Status::Fail;
        r.gates[5].reason = "framebuffer differs".into();
        r.gates[0].duration_ms *= 3;
        r.environment.kernel_release = "6.12.9-amd64".into();
    });
    let same = rig(&["diff", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_eq!(code(&same), 0);
    assert!(
        stdout(&same).contains("no differences"),
        "{}",
        stdout(&same)
    );

    let d = rig(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code(&d), 0);
    let out = stdout(&d);
    assert!(out.contains("restore_x_state: PASS -> FAIL"), "{out}");
    assert!(
        out.contains("kernel release: 6.1.0-28-amd64 -> 6.12.9-amd64"),
        "{out}"
    );
    assert!(out.contains("x3.00"), "{out}");
    assert!(!out.contains("no differences:"), "{out}");

    let missing = rig(&[
        "diff",
        a.to_str().unwrap(),
        s.0.join("nope").to_str().unwrap(),
    ]);
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing).starts_with("error: reading report B"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn list_is_newest_first_and_names_unreadable_entries() {
    let s = Scratch::new("list");
    write_report(&s.0.join("old"), "2026-01-01T00:00:00.000Z", |r| {
        r.vm = None
    });
    write_report(&s.0.join("new"), "2026-12-01T00:00:00.000Z", |_| {});
    std::fs::create_dir_all(s.0.join("broken")).unwrap();
    std::fs::write(s.0.join("broken/report.json"), b"{not json").unwrap();
    let o = rig_in(&s.0, &["list", "DIR"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].contains("2026-12-01") && lines[0].contains("5e5e5e5e5e5e"),
        "{out}"
    );
    assert!(
        lines[0].contains("tcg") && lines[0].contains("review:none"),
        "{out}"
    );
    assert!(
        lines[1].contains("2026-01-01") && lines[1].contains("host"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("UNREADABLE") && lines[2].contains("broken"),
        "{out}"
    );

    let none = rig(&["list", s.0.join("nope").to_str().unwrap()]);
    assert_eq!(code(&none), 2);
}

#[test]
fn another_schema_version_is_refused_clearly() {
    let s = Scratch::new("schema");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| r.schema_version = 99);
    let o = rig_in(&dir, &["show", "DIR"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("schema_version is 99"),
        "{}",
        stderr(&o)
    );
    // To verify, a report.json that cannot be read is a verdict: FAIL, exit 1.
    let v = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&v), 1);
    assert!(
        stdout(&v).contains("schema_version is 99"),
        "{}",
        stdout(&v)
    );
    assert!(
        stdout(&v)
            .lines()
            .last()
            .unwrap()
            .starts_with("verdict:   FAIL (exit 1)"),
        "{}",
        stdout(&v)
    );
}

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

/// A signed report verifies against the allowed signers, and a single changed byte of
/// report.json fails it; a signed review verifies too; without the flag the verdict says
/// whether there is a signature.
#[test]
fn a_signed_report_verifies_and_fails_after_one_changed_byte() {
    let s = Scratch::new("signed");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |_| {});
    let key = s.0.join("key");
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "ci", "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen (openssh-client)");
    assert!(st.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let allowed = s.0.join("allowed_signers");
    std::fs::write(&allowed, format!("ci@example {public}")).unwrap();
    let allowed = allowed.to_str().unwrap();

    let unsigned = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&unsigned), 3);
    assert!(
        stdout(&unsigned).trim_end().ends_with("(unsigned)"),
        "{}",
        stdout(&unsigned)
    );
    let required = rig_in(&dir, &["verify", "DIR", "--allowed-signers", allowed]);
    assert_eq!(code(&required), 1, "{}", stdout(&required));
    assert!(stdout(&required).contains("report.json: unsigned"));

    sharedos_rig::judge::sign::sign(&dir, report::REPORT_FILE, &key).unwrap();
    let o = rig_in(&dir, &["verify", "DIR", "--allowed-signers", allowed]);
    assert_eq!(code(&o), 3, "{}", stdout(&o));
    assert!(stdout(&o).contains("signature: report.json: signed by ci@example (SHA256:"));

    let o = rig_in(
        &dir,
        &[
            "review",
            "DIR",
            "--decision",
            "pass",
            "--reviewer",
            "ci@example",
            "--sign-key",
            key.to_str().unwrap(),
        ],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let o = rig_in(&dir, &["verify", "DIR", "--allowed-signers", allowed]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert!(stdout(&o).contains("signature: review.json: signed by ci@example"));

    // One byte: a space added at the end of report.json.
    let mut bytes = std::fs::read(dir.join(report::REPORT_FILE)).unwrap();
    bytes.push(b' ');
    std::fs::write(dir.join(report::REPORT_FILE), bytes).unwrap();
    let o = rig_in(&dir, &["verify", "DIR", "--allowed-signers", allowed]);
    assert_eq!(code(&o), 1, "{}", stdout(&o));
    assert!(
        stdout(&o)
            .contains("report.json: signature rejected: report.json changed after it was signed"),
        "{}",
        stdout(&o)
    );
}

/// A matrix directory as vm-matrix leaves it: each image's report under its name, one image
/// that never ran, and matrix.json written through the library's one schema.
fn write_matrix(dir: &Path, dump_fails_on: Option<&str>) {
    use sharedos_rig::matrix;
    let mut cells = Vec::new();
    for (image, kernel, criu) in [
        ("bookworm", "6.1.0-50-cloud-amd64", "3.17.1"),
        ("trixie", "6.12.57+deb13-cloud-amd64", "4.1.1"),
    ] {
        let rd = dir.join(image);
        write_report(&rd, "2026-12-01T06:00:00.000Z", |r| {
            r.environment.kernel_release = kernel.into();
            r.environment.criu_version = Some(criu.into());
            if let Some(vm) = r.vm.as_mut() {
                vm.image_name = image.into();
            }
            if dump_fails_on == Some(image) {
                r.gates[3].status = Status::Fail;
                r.gates[3].reason = "criu dump: vdso: Unexpected rt vDSO area bounds".into();
            }
        });
        let o = sharedos_rig::judge::judge(&rd, &sharedos_rig::judge::How::full(None)).unwrap();
        cells.push(matrix::cell_from_outcome(image, &o));
    }
    cells.push(matrix::not_run_cell(
        "forky",
        "the image could not be built: criu 4.2.1-1 is not on the mirror",
        "7.2.12-cloud-amd64",
    ));
    let m = matrix::Matrix {
        schema_version: matrix::MATRIX_SCHEMA_VERSION,
        started_at: "2026-12-01T06:00:00Z".into(),
        finished_at: "2026-12-01T06:09:00Z".into(),
        jobs: 1,
        jobs_reason: "2 host cores / 2 vCPUs per guest, at least 1".into(),
        command_line: vec!["xtask".into(), "vm-matrix".into()],
        exit_code: matrix::exit_code(&cells),
        cells,
    };
    matrix::write_matrix(dir, &m).unwrap();
}

#[test]
fn show_and_diff_read_a_matrix_directory() {
    let s = Scratch::new("matrix");
    let a = s.0.join("matrix-a");
    let b = s.0.join("matrix-b");
    write_matrix(&a, None);
    write_matrix(&b, Some("trixie"));

    let o = rig(&["show", a.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(t.starts_with("matrix: 3 image(s), exit 2"), "{t}");
    let row = t.lines().find(|l| l.starts_with("trixie ")).unwrap();
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(
        words[1..4],
        ["6.12.57+deb13-cloud-amd64", "4.1.1", "tcg"],
        "{row}"
    );
    assert!(t.contains("forky: to fix: refresh its lock"), "{t}");
    for (format, want) in [
        ("md", "| trixie | 6.12.57+deb13-cloud-amd64 | 4.1.1 | tcg |"),
        ("html", "<td>trixie</td>"),
        ("junit", "<testsuite name=\"trixie\""),
    ] {
        let o = rig(&["show", a.to_str().unwrap(), "--format", format]);
        assert_eq!(code(&o), 0, "{format}: {}", stderr(&o));
        assert!(stdout(&o).contains(want), "{format}:\n{}", stdout(&o));
    }

    let o = rig(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let d = stdout(&o);
    assert!(d.contains("trixie:\n  dump: PASS -> FAIL"), "{d}");
    assert!(d.contains("bookworm: same gate statuses"), "{d}");

    // A matrix beside a single report is not a comparison anyone meant.
    let o = rig(&[
        "diff",
        a.to_str().unwrap(),
        a.join("bookworm").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("matrix directory and the other is not"),
        "{}",
        stderr(&o)
    );

    // The per-image report wins over a matrix.json that says otherwise, and show says so.
    let text = std::fs::read_to_string(a.join("matrix.json")).unwrap();
    let forged = text.replacen(
        "\"name\": \"dump\",\n          \"status\": \"PASS\"",
        "\"name\": \"dump\",\n          \"status\": \"FAIL\"",
        1,
    );
    assert_ne!(forged, text);
    std::fs::write(a.join("matrix.json"), forged).unwrap();
    let o = rig(&["show", a.to_str().unwrap()]);
    assert_eq!(code(&o), 0);
    assert!(
        stderr(&o).contains("matrix.json and bookworm/report.json disagree on gate statuses"),
        "{}",
        stderr(&o)
    );
    let row = stdout(&o)
        .lines()
        .find(|l| l.starts_with("bookworm "))
        .unwrap()
        .to_string();
    assert!(!row.contains("FAIL"), "{row}");
}

/// `sharedos-rig matrix merge` as the CI workflow runs it, on report directories as vm-run
/// leaves them: each row named from its report, a plain row held against its image's
/// expected-gates, the exit code vm-matrix's, and bad input refused with exit 2.
#[test]
fn matrix_merge_builds_a_matrix_from_vm_run_reports() {
    let s = Scratch::new("merge");
    let images = s.0.join("images");
    for name in ["bookworm", "trixie"] {
        std::fs::create_dir_all(images.join(name)).unwrap();
        std::fs::write(images.join(name).join("image.conf"), "").unwrap();
    }
    let expect: String = GateName::ALL
        .iter()
        .map(|g| match g {
            GateName::GuiPixelReview => format!("{g} REVIEW_REQUIRED\n"),
            _ => format!("{g} PASS\n"),
        })
        .collect();
    std::fs::write(images.join("bookworm/expected-gates"), &expect).unwrap();
    let as_vm_run = |dir: &Path, image: &str, diagnose: &[&str], dump_fails: bool| {
        let (image, diagnose) = (image.to_string(), diagnose.to_vec());
        write_report(dir, "2026-12-01T06:00:00.000Z", move |r| {
            let vm = r.vm.as_mut().unwrap();
            vm.image_name = image.clone();
            vm.command_line = vec!["xtask".into(), "vm-run".into(), "--image".into(), image];
            if !diagnose.is_empty() {
                vm.command_line.push("--".into());
                vm.command_line
                    .extend(diagnose.iter().map(|a| a.to_string()));
            }
            if dump_fails {
                r.gates[3].status = Status::Fail;
            }
        });
    };
    let b = s.0.join("in/b");
    let t = s.0.join("in/t");
    let v = s.0.join("in/v");
    as_vm_run(&b, "bookworm", &[], false);
    as_vm_run(&t, "trixie", &[], false);
    as_vm_run(&v, "bookworm", &["--userns"], false);
    let merged = s.0.join("merged");
    let (ms, is) = (merged.to_str().unwrap(), images.to_str().unwrap());
    let (bs, ts, vs) = (
        b.to_str().unwrap(),
        t.to_str().unwrap(),
        v.to_str().unwrap(),
    );
    let args = [
        "matrix",
        "merge",
        "--out",
        ms,
        "--images-dir",
        is,
        bs,
        ts,
        vs,
    ];
    let o = rig(&args);
    // bookworm as expected (0); trixie and bookworm+userns, without expectations, await the
    // review (3): the matrix exits 3, as vm-matrix would.
    assert_eq!(code(&o), 3, "{}", stderr(&o));
    assert_eq!(stdout(&o).lines().last(), Some(ms));
    assert!(
        stderr(&o).contains("matrix: 3 image(s), exit 3"),
        "{}",
        stderr(&o)
    );
    let o = rig_in(&merged, &["show", "DIR", "--format", "md"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let md = stdout(&o);
    assert!(md.contains("| bookworm | 6.1.0-28-amd64 |"), "{md}");
    assert!(md.contains("| as expected |"), "{md}");
    assert!(md.contains("| bookworm+userns | "), "{md}");
    assert!(merged.join("bookworm+userns/report.json").is_file());
    // The summary step's command, on the merged directory.
    let o = rig(&["show", ms, "--format", "md"]);
    assert_eq!(
        stdout(&o),
        md,
        "the workflow's [\"show\", \"MERGED\", \"--format\", \"md\"]"
    );

    // bookworm's dump now FAILs where its expectations say PASS: 1.
    let b2 = s.0.join("in/b2");
    as_vm_run(&b2, "bookworm", &[], true);
    let m2 = s.0.join("merged2");
    let o = rig(&[
        "matrix",
        "merge",
        "--out",
        m2.to_str().unwrap(),
        "--images-dir",
        is,
        b2.to_str().unwrap(),
        ts,
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("bookworm: dump: expected PASS, got FAIL"),
        "{}",
        stderr(&o)
    );

    // Two reports of one row, and a directory that holds no report: exit 2, named.
    for (extra, want) in [
        (bs, "are both reports of row bookworm"),
        (is, "report directory"),
    ] {
        let m3 = s.0.join("merged3");
        let o = rig(&["matrix", "merge", "--out", m3.to_str().unwrap(), bs, extra]);
        assert_eq!(code(&o), 2);
        assert!(stderr(&o).contains(want), "{}", stderr(&o));
        assert!(!m3.exists());
    }
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

/// One half of a migration as vm-migrate archives it: the image its guest booted, its kernel and
/// CRIU, the other side's gates NOT_RUN; `refusal` makes its restore one CRIU refused, quoting
/// that error.
fn write_half(dir: &Path, image: &str, kernel: &str, not_here: &[GateName], refusal: Option<&str>) {
    write_report(dir, "2026-12-02T10:00:00.000Z", |r| {
        r.environment.kernel_release = kernel.into();
        if let Some(vm) = r.vm.as_mut() {
            vm.image_name = image.into();
        }
        for g in r.gates.iter_mut() {
            if not_here.contains(&g.name) {
                g.status = Status::NotRun;
            }
        }
        if let Some(error) = refusal {
            let g = r
                .gates
                .iter_mut()
                .find(|g| g.name == GateName::RestoreLiveProcess)
                .unwrap();
            g.status = Status::Fail;
            g.reason = "criu_restore_succeeded failed (log: criu/restore-a.log)".into();
            g.checks.iter_mut().for_each(|c| c.passed = false);
            g.cause = Some(sharedos_report::cause::Cause {
                source: "criu restore".into(),
                log: "criu/restore-a.log".into(),
                error: error.into(),
                before: vec![],
            });
        }
    });
}

fn write_migration(dir: &Path, from: (&str, &str), to: (&str, &str), refusal: Option<&str>) {
    use GateName::*;
    write_half(
        &dir.join("from"),
        from.0,
        from.1,
        &[
            RestoreLiveProcess,
            RestoreXState,
            Isolation,
            Reset,
            GuiPixelReview,
        ],
        None,
    );
    write_half(
        &dir.join("to"),
        to.0,
        to.1,
        &[Launch, LiveStateProbe, GuiPixelReview],
        refusal,
    );
    let verdict = if refusal.is_some() { "FAIL" } else { "PASS" };
    std::fs::write(
        dir.join("migration.json"),
        format!(
            r#"{{"from": {{"image": "{}"}}, "to": {{"image": "{}"}}, "verdict": "{verdict}"}}"#,
            from.0, to.0
        ),
    )
    .unwrap();
}

/// `sharedos-rig matrix pairs` over vm-migrate's directories: one row per pair, a restore CRIU
/// refused a FAIL with CRIU's error as its cause (escaped), the exit code the worst pair's,
/// `show` of one migration its row, migration.json overruled where it says otherwise.
#[test]
fn matrix_pairs_shows_each_migration_with_its_cause() {
    let s = Scratch::new("pairs");
    let reports = s.0.join("reports");
    let ok = reports.join("20261202T100000Z-migrate-bookworm-bookworm-bpo");
    write_migration(
        &ok,
        ("bookworm", "6.1.0-50-cloud-amd64"),
        ("bookworm-bpo", "6.12.95+deb12-cloud-amd64"),
        None,
    );
    let refused = reports.join("20261202T110000Z-migrate-trixie-trixie-bpo");
    write_migration(
        &refused,
        ("trixie", "6.12.117+deb13-cloud-amd64"),
        ("trixie-bpo", "7.3.4+deb13-cloud-amd64"),
        Some("(00.512) Error (criu/cr-restore.c:1480): Can't fork for 77: \u{1b}[2JFile exists"),
    );
    write_report(
        &reports.join("20261202T090000Z-run"),
        "2026-12-02T09:00:00.000Z",
        |_| {},
    );

    let o = rig(&["matrix", "pairs", reports.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    let t = stdout(&o);
    assert!(t.starts_with("pairs: 2 migration(s), exit 1"), "{t}");
    let row = |name: &str| -> Vec<String> {
        t.lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("{t}"))
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        row("bookworm "),
        [
            "bookworm",
            "6.1.0-50-cloud-amd64",
            "Version:",
            "3.17.1",
            "bookworm-bpo",
            "6.12.95+deb12-cloud-amd64",
            "Version:",
            "3.17.1",
            "PASS",
            "-",
            "20261202T100000Z-migrate-bookworm-bookworm-bpo"
        ]
    );
    assert!(
        t.contains("FAIL     to: restore_live_process: criu restore: Can't fork for 77: \\u{1b}[2JFile exists"),
        "{t}"
    );
    assert!(!t.contains('\u{1b}'), "{t:?}");

    for (format, want) in [
        (
            "md",
            "| FAIL | to: restore\\_live\\_process: criu restore: Can't fork for 77:",
        ),
        ("html", "<td>trixie-bpo</td>"),
        (
            "junit",
            "<failure message=\"FAIL: to: restore_live_process: criu restore:",
        ),
    ] {
        let o = rig(&[
            "matrix",
            "pairs",
            "--format",
            format,
            refused.to_str().unwrap(),
        ]);
        assert_eq!(code(&o), 1, "{format}: {}", stderr(&o));
        assert!(stdout(&o).contains(want), "{format}:\n{}", stdout(&o));
        assert!(!stdout(&o).contains('\u{1b}'), "{format}");
    }

    // show of one migration directory: its row, exit 0 as show of a matrix.
    let o = rig(&["show", ok.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("pairs: 1 migration(s), exit 0"),
        "{}",
        stdout(&o)
    );

    // A migration.json that says PASS over a refused restore: the halves win, and it is said.
    let forged = std::fs::read_to_string(refused.join("migration.json"))
        .unwrap()
        .replace("\"FAIL\"", "\"PASS\"");
    std::fs::write(refused.join("migration.json"), forged).unwrap();
    let o = rig(&["matrix", "pairs", refused.to_str().unwrap()]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains("migration.json says PASS, its halves judged again give FAIL"),
        "{}",
        stderr(&o)
    );

    // A vm-run report is no migration: exit 2, and what to give instead.
    let o = rig(&[
        "matrix",
        "pairs",
        reports.join("20261202T090000Z-run").to_str().unwrap(),
    ]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("give vm-migrate's directories"),
        "{}",
        stderr(&o)
    );
}

/// A comparison directory as vm-compare leaves it, but for its copies' reports, which are plain
/// vm-run reports and no copies of a VM fork: compare.json says PASS over them.
fn write_comparison(dir: &Path) {
    use sharedos_report::model::density::Mem;
    use sharedos_rig::judge::compare::{self, SharedOs, Summary, TemplateRam, VmCopy, VmEach};
    let mem = |pss| Mem {
        rss_kib: pss,
        pss_kib: pss,
        uss_kib: pss,
    };
    for d in [
        "shared-os",
        "copy-1",
        "copy-2",
        "reset",
        "template-1",
        "template-2",
        "template-reset",
    ] {
        write_report(&dir.join(d), "2026-12-02T09:00:00Z", |_| {});
    }
    std::fs::create_dir_all(dir.join("vm-each-fork")).unwrap();
    std::fs::create_dir_all(dir.join("vm-template-fork")).unwrap();
    let copy = |label: &str| VmCopy {
        label: label.into(),
        report: label.into(),
        nonce: format!("{label:0>32}"),
        resume_ms: 1700,
        host_mem: Some(mem(380_000)),
        host_split: None,
        problems: vec![],
    };
    let s = Summary {
        format: compare::FORMAT,
        image: "bookworm".into(),
        accel: "tcg".into(),
        copies: 2,
        max: false,
        workload: None,
        arms: compare::Arm::ALL.to_vec(),
        vm_template: Some(VmEach {
            fork: "vm-template-fork".into(),
            copies: vec![copy("template-1"), copy("template-2")],
            reset: Some(copy("template-reset")),
            memory_mib: 1024,
            cpus: 2,
            template: Some(TemplateRam {
                bytes: 1 << 30,
                resident_bytes: 300 << 20,
                how: "a tmpfs file each clone maps private".into(),
                features: vec!["x-ignore-shared".into()],
                off: vec!["free page reporting".into()],
            }),
            ..VmEach::default()
        }),
        shared_os: SharedOs {
            report: "shared-os".into(),
            restore_ms: vec![1900, 1800],
            per_copy: vec![mem(27_000), mem(27_000)],
            ..SharedOs::default()
        },
        vm_each: VmEach {
            fork: "vm-each-fork".into(),
            copies: vec![copy("copy-1"), copy("copy-2")],
            reset: Some(copy("reset")),
            idle_guest: Some(mem(260_000)),
            memory_mib: 1024,
            cpus: 2,
            ..VmEach::default()
        },
        verdict: report::Verdict::Pass,
        problems: vec![],
    };
    std::fs::write(
        dir.join(compare::COMPARE_FILE),
        serde_json::to_string_pretty(&s).unwrap(),
    )
    .unwrap();
}

#[test]
fn show_and_diff_judge_a_comparison_again_from_its_reports() {
    let s = Scratch::new("compare");
    let c = s.0.join("compare");
    write_comparison(&c);
    let cs = c.to_str().unwrap();

    // compare.json says PASS; its copies' reports are no VM copies: FAIL, exit 1, and it is said.
    let o = rig(&["show", cs]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.contains("shared-OS (CRIU)") && t.contains("per desktop:"),
        "{t}"
    );
    assert!(
        t.contains("warning: compare.json says PASS, its reports judged again give FAIL"),
        "{t}"
    );
    assert!(t.contains("problem: VM-each copy-1: "), "{t}");
    // The templated arm's column, judged again as the VM-each one is.
    assert!(
        t.contains("VM template") && t.contains("template RAM file (shared)"),
        "{t}"
    );
    assert!(t.contains("problem: VM-template template-1: "), "{t}");
    assert!(
        t.lines()
            .last()
            .unwrap()
            .starts_with("judged again from its reports: FAIL (exit 1)"),
        "{t}"
    );
    let o = rig(&["show", cs, "--format", "md"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("**vm-compare bookworm: FAIL**"));
    let o = rig(&["show", cs, "--format", "html"]);
    assert_eq!(code(&o), 1);
    assert_eq!(stdout(&o).matches("<svg").count(), 2);
    let o = rig(&["show", cs, "--format", "junit"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("fix: give --format text, md or html"));

    let o = rig(&["diff", cs, cs]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("VM-each fork: median")
            && stdout(&o).contains("VM-template fork: median"),
        "{}",
        stdout(&o)
    );
    // A comparison against a report: a usage error, which says what to give.
    let report = c.join("copy-1");
    for (a, b) in [
        (cs, report.to_str().unwrap()),
        (report.to_str().unwrap(), cs),
    ] {
        let o = rig(&["diff", a, b]);
        assert_eq!(code(&o), 2);
        assert!(
            stderr(&o).contains(
                "is a comparison directory (from `cargo xtask vm-compare`) and the other is not"
            ),
            "{}",
            stderr(&o)
        );
    }
    // A clone of the template named as a VM-each copy's report: one report, two columns,
    // refused, exit 2.
    let said = std::fs::read_to_string(c.join("compare.json")).unwrap();
    let text = said.replace("\"report\": \"template-1\"", "\"report\": \"copy-1\"");
    assert_ne!(text, said);
    std::fs::write(c.join("compare.json"), text).unwrap();
    let o = rig(&["show", cs]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("as VM-template template-1's report and as another's"),
        "{}",
        stderr(&o)
    );
    std::fs::write(c.join("compare.json"), said).unwrap();
    // A report named outside the directory: refused, exit 2.
    let text = std::fs::read_to_string(c.join("compare.json"))
        .unwrap()
        .replace("\"report\": \"copy-2\"", "\"report\": \"../copy-2\"");
    std::fs::write(c.join("compare.json"), text).unwrap();
    let o = rig(&["show", cs]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("one plain name"), "{}", stderr(&o));
}
