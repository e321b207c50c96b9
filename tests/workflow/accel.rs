//! The accelerator steps' own lines (`.ci/accel summary` and `check`) on constructed reports.

use super::{read, root, run_blocks, text, WORKFLOW};
use crate::common;
use crate::common::scratch::Scratch;
use sharedos_report::report::{self, VmProvenance};
use std::path::Path;
use std::process::Command;

/// DIR/report.json as vm-run writes the host's part: the real provenance type, so a renamed
/// field breaks this test rather than the workflow.
fn write_vm_report(dir: &Path, accel: &str, reason: &str) {
    let vm = VmProvenance {
        accel: accel.into(),
        accel_reason: reason.into(),
        image_builder_mode: "unshare".into(),
        image_name: "bookworm".into(),
        ..Default::default()
    };
    let doc = serde_json::json!({ "schema_version": report::SCHEMA_VERSION, "vm": vm });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(report::REPORT_FILE),
        serde_json::to_vec_pretty(&doc).unwrap(),
    )
    .unwrap();
}

/// Runs the workflow's own line that starts with `prefix` from the repository root, with the
/// image's report directory at `reports`, /dev/kvm at `kvm` and the job summary at `summary`.
fn run_accel_step(prefix: &str, reports: &Path, kvm: &Path, summary: &Path) -> (bool, String) {
    let line = run_blocks(&read(WORKFLOW))
        .into_iter()
        .flatten()
        .find(|c| c.starts_with(prefix))
        .unwrap_or_else(|| panic!("no run line starting {prefix}"));
    let line = line.replace(
        "\"reports/${{ matrix.image }}\"",
        &format!("'{}'", reports.display()),
    );
    assert!(!line.contains("${{"), "{line}");
    let o = Command::new("bash")
        .args(["--noprofile", "--norc", "-e", "-c", &line])
        .current_dir(root())
        .env("GITHUB_STEP_SUMMARY", summary)
        .env("KVM_DEVICE", kvm)
        .output()
        .unwrap();
    (o.status.success(), text(&o))
}

fn jq_missing(test: &str) -> bool {
    if Command::new("jq").arg("--version").output().is_err() {
        common::skip::cannot_run(test, "jq is not installed (sudo .ci/install-host)");
        return true;
    }
    false
}

/// The summary step shows the accelerator and why, from the report; a hostile reason reaches
/// the page bounded and escaped; a report that is missing, a link, not JSON or too big is named
/// as such, and the step still succeeds (the check step is the one that fails).
#[test]
fn the_summary_step_shows_the_accelerator_escaped() {
    let t = "the_summary_step_shows_the_accelerator_escaped";
    if jq_missing(t) {
        return;
    }
    let s = Scratch::new("summary");
    let summary = s.0.join("summary.md");
    let absent = s.0.join("no-kvm");
    let step = |dir: &Path| {
        let _ = std::fs::remove_file(&summary);
        let (ok, out) = run_accel_step(".ci/accel summary ", dir, &absent, &summary);
        assert!(ok, "{out}");
        std::fs::read_to_string(&summary).unwrap()
    };

    let kvm = s.0.join("kvm-run");
    write_vm_report(
        &kvm,
        "kvm",
        "auto: /dev/kvm opened read-write and the kernel banner appeared after 0.4 s",
    );
    let md = step(&kvm);
    assert!(md.starts_with("### Accelerator\n\n"), "{md}");
    assert!(md.contains("\n- ran under: **kvm**\n"), "{md}");
    assert!(md.contains("\n- why: auto\\: /dev/kvm opened read\\-write and the kernel banner appeared after 0\\.4 s\n"), "{md}");
    assert!(md.contains("\n- image builder mode: unshare\n"), "{md}");
    assert!(md.contains(" on this runner: absent\n"), "{md}");

    // A reason written to break out: HTML, a table cell, a link, a terminal escape, a second
    // line, and far too long.
    let hostile = format!(
        "<script>alert(1)</script> | `code` [link](http://evil.example) \u{1b}[31mred\n- **fake line** {}",
        "A".repeat(2000)
    );
    let bad = s.0.join("hostile");
    write_vm_report(&bad, "tcg", &hostile);
    let md = step(&bad);
    let why = md
        .lines()
        .find(|l| l.starts_with("- why: "))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(!md.contains('<') && !md.contains('\u{1b}'), "{md}");
    assert!(
        why.contains("&lt;script&gt;alert\\(1\\)&lt;/script&gt;"),
        "{why}"
    );
    assert!(
        why.contains(" \\| \\`code\\` \\[link\\]\\(http\\://evil\\.example\\) "),
        "{why}"
    );
    assert!(why.contains(" \\- \\*\\*fake line\\*\\* "), "{why}");
    assert!(!md.lines().any(|l| l.starts_with("- **fake")), "{md}");
    assert!(
        why.matches('A').count() < 300,
        "not bounded: {} chars",
        why.len()
    );
    for (i, c) in why.char_indices() {
        if "|`[]()*_#".contains(c) {
            assert_eq!(&why[i - 1..i], "\\", "unescaped {c} in {why}");
        }
    }

    // No report, a link, not JSON, too big: said, not guessed.
    let none = s.0.join("none");
    std::fs::create_dir_all(&none).unwrap();
    assert!(step(&none).contains("\n- **not known**: no report at "));
    let link = s.0.join("link");
    std::fs::create_dir_all(&link).unwrap();
    std::os::unix::fs::symlink(kvm.join("report.json"), link.join("report.json")).unwrap();
    let md = step(&link);
    assert!(md.contains("is a symbolic link; refused"), "{md}");
    assert!(!md.contains("ran under"), "{md}");
    let garbage = s.0.join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("report.json"), b"{ not json").unwrap();
    assert!(step(&garbage).contains("is not JSON"));
    let big = s.0.join("big");
    std::fs::create_dir_all(&big).unwrap();
    let f = std::fs::File::create(big.join("report.json")).unwrap();
    f.set_len((16 << 20) + 1).unwrap();
    assert!(step(&big).contains("bytes; refused"));
    let early = s.0.join("early");
    write_vm_report(&early, "", "");
    assert!(step(&early).contains("names no accelerator"));
}

/// The check step fails exactly when KVM opens here and the guest ran under anything else, or
/// when there is no accelerator to check.
#[test]
fn the_check_step_fails_on_tcg_where_kvm_opens() {
    let t = "the_check_step_fails_on_tcg_where_kvm_opens";
    if jq_missing(t) {
        return;
    }
    let s = Scratch::new("check");
    let summary = s.0.join("summary.md");
    // A regular file opens read-write as /dev/kvm would once opened; a directory never does.
    let opens = s.0.join("kvm-open");
    std::fs::write(&opens, b"").unwrap();
    let closed = s.0.join("kvm-closed");
    std::fs::create_dir_all(&closed).unwrap();
    let absent = s.0.join("kvm-absent");
    let kvm = s.0.join("kvm-run");
    write_vm_report(&kvm, "kvm", "auto: the kernel banner appeared after 0.4 s");
    let tcg = s.0.join("tcg-run");
    write_vm_report(
        &tcg,
        "tcg",
        "auto: under KVM the kernel showed no boot progress \u{1b}[2J within 8 s",
    );
    let check = |dir: &Path, dev: &Path| run_accel_step(".ci/accel check ", dir, dev, &summary);

    let (ok, out) = check(&kvm, &opens);
    assert!(ok, "{out}");
    assert!(out.contains("the guest ran under kvm"), "{out}");

    let (ok, out) = check(&tcg, &opens);
    assert!(!ok, "TCG where KVM opens must fail: {out}");
    assert!(out.contains("but the guest ran under 'tcg'"), "{out}");
    assert!(out.contains("serial-kvm-probe.log"), "a fix-it line: {out}");
    assert!(
        !out.contains('\u{1b}'),
        "the reason reached the log unescaped: {out:?}"
    );

    for dev in [&absent, &closed] {
        let (ok, out) = check(&tcg, dev);
        assert!(ok, "{}: {out}", dev.display());
        assert!(out.contains("so TCG is expected"), "{out}");
    }

    let none = s.0.join("none");
    std::fs::create_dir_all(&none).unwrap();
    let (ok, out) = check(&none, &absent);
    assert!(!ok, "no report: nothing was checked, so no success: {out}");
    assert!(
        out.contains("the accelerator could not be checked"),
        "{out}"
    );
    assert!(!summary.exists(), "the check writes no summary");
}
