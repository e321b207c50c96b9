//! `review` and `verify`: a review signed over the PNGs' hashes, what stops one (a changed PNG, a
//! wrong hash, no PNG, an existing review), and signed reports against the allowed signers.

use super::{code, png_bytes, read_report, review_pass, rig_in, stderr, stdout, write_report};
use crate::common::scratch::Scratch;
use sharedos_report::digest;
use sharedos_report::report::{self, CitedImage, Review, ReviewDecision};
use std::process::Command;

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
