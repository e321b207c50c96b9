//! `xtask vm-migrate` end to end, as an unprivileged user: the tree dumped in a bookworm guest
//! (kernel 6.1), the checkpoint brought home and sent into a bookworm-bpo guest (kernel 6.12, the
//! same criu 3.17.1 and userland), restored and checked there; then the same with the checkpoint
//! tampered with on the host between the two guests, which the restore side's check must catch.
//! The bookworm-bpo guest, already made, also shows the guest's KSM merging the density gate's
//! copies, which its 6.12 kernel lets opt in (bookworm's 6.1 cannot: tests/vm_run.rs).
//! And the cheap part: bad image names are refused before anything boots.
//!
//! Minutes, so `#[ignore]`d in a plain `cargo test` but for the bad-input test.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use common::{gate_binary, read_report};

use common::{last_line, Sandbox};
use serde_json::Value;
use sharedos_report::report::{GateName, Status};
use std::path::Path;
use std::process::Command;

fn read_summary(dir: &Path) -> Value {
    let text = std::fs::read_to_string(dir.join("migration.json"))
        .unwrap_or_else(|e| panic!("no migration.json in {}: {e}", dir.display()));
    serde_json::from_str(&text).unwrap()
}

/// vm-run's arguments as every VM test gives them, for vm-migrate from bookworm to bookworm-bpo.
fn migrate_args(sb: &Sandbox, gate: &Path, out: &Path, extra: &[&str]) -> Vec<String> {
    let mut v = common::vm_run_args(sb, gate, out, "tcg");
    v[0] = "vm-migrate".into();
    v.splice(
        1..1,
        ["--from", "bookworm", "--to", "bookworm-bpo"].map(String::from),
    );
    v.extend(extra.iter().map(|s| s.to_string()));
    v
}

fn run(sb: &Sandbox, args: &[String]) -> (i32, String) {
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sb.run_as_user(&sb.xtask, &a);
    let code = out.status.code().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (
        code,
        stderr + &String::from_utf8_lossy(&out.stdout) + &last_line(&out),
    )
}

#[test]
#[ignore = "boots four VMs: minutes; run with --include-ignored"]
fn vm_migrate_bookworm_to_bookworm_bpo_as_an_unprivileged_user() {
    let Some(sb) = Sandbox::new_or_skip("vmmigrate") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    common::seed::seed(&sb, "cache", "bookworm-bpo", "fakechroot");
    migrates_and_names_both_kernels(&sb, &gate);
    a_checkpoint_tampered_with_between_the_guests_fails_the_restore_side(&sb, &gate);
    guest_ksm_merges_the_copies_on_a_6_12_kernel(&sb, &gate);
}

/// `vm-run --image bookworm-bpo -- --copies 2 --guest-ksm`: the copies opt in through the
/// restoring process, the guest's ksmd merges their pages, and each copy is read again, for
/// less than it took before; ksmd's counters say what it merged.
fn guest_ksm_merges_the_copies_on_a_6_12_kernel(sb: &Sandbox, gate: &Path) {
    use sharedos_report::model::density::DensityData;
    let out_dir = sb.dir.join("reports/guest-ksm");
    let mut args = common::vm_run_args(sb, gate, &out_dir, "tcg");
    args.splice(1..1, ["--image", "bookworm-bpo"].map(String::from));
    args.extend(["--", "--copies", "2", "--guest-ksm"].map(String::from));
    let (code, said) = run(sb, &args);
    assert_eq!(code, 3, "{said}");
    let r = read_report(&out_dir);
    let g = r.gate(GateName::Density).unwrap();
    assert_eq!(g.status, Status::Pass, "{}", g.reason);
    let d: DensityData = serde_json::from_value(g.data["density"].clone()).unwrap();
    let k = d.guest_ksm.as_ref().expect("the guest KSM reading");
    assert_eq!(k.status, Status::Pass, "{k:?}");
    assert!(k.pages_sharing > 0 && k.full_scans >= 2, "{k:?}");
    assert_eq!(k.per_copy.len(), 2, "{k:?}");
    let pss = |cs: &[sharedos_report::model::density::CopyMem]| -> u64 {
        cs.iter().map(|c| c.mem.pss_kib).sum()
    };
    assert!(
        pss(&k.per_copy) < pss(&d.per_copy),
        "merged {} KiB, before {} KiB",
        pss(&k.per_copy),
        pss(&d.per_copy)
    );
    assert_eq!(d.reset_ms.len(), 2, "{d:?}");
}

fn migrates_and_names_both_kernels(sb: &Sandbox, gate: &Path) {
    let out_dir = sb.dir.join("reports/migrate");
    let (code, said) = run(sb, &migrate_args(sb, gate, &out_dir, &[]));
    assert_ne!(code, 2, "the rig failed:\n{said}");
    let s = read_summary(&out_dir);
    let kernel = |side: &str| s[side]["kernel"].as_str().unwrap_or("").to_string();
    assert!(kernel("from").starts_with("6.1."), "{s:#}");
    assert!(kernel("to").starts_with("6.12."), "{s:#}");
    for side in ["from", "to"] {
        assert_eq!(s[side]["criu"].as_str(), Some("3.17.1"), "{s:#}");
    }
    assert!(said.contains(&format!(
        "bookworm (kernel {}, criu 3.17.1) -> bookworm-bpo (kernel {}",
        kernel("from"),
        kernel("to")
    )));
    let to = read_report(&out_dir.join("to"));
    let from = read_report(&out_dir.join("from"));
    // The dump side passed and kept its checkpoint.
    let dump = from.gate(GateName::Dump).unwrap();
    assert_eq!(dump.status, Status::Pass, "{}", dump.reason);
    assert!(dump.check("checkpoint_kept").is_some_and(|c| c.passed));
    // The restore side took it in whole.
    let taken = to.gate(GateName::Dump).unwrap();
    assert_eq!(taken.status, Status::Pass, "{}", taken.reason);
    let restore = to.gate(GateName::RestoreLiveProcess).unwrap();
    if code == 0 {
        assert_eq!(s["verdict"], "PASS");
        for (gate, check) in [
            (GateName::RestoreLiveProcess, "same_token"),
            (GateName::RestoreLiveProcess, "counter_continues"),
            (GateName::RestoreXState, "same_windows"),
            (GateName::RestoreXState, "same_framebuffer"),
            (GateName::Isolation, "b_same_token"),
            (GateName::Isolation, "b_same_framebuffer"),
        ] {
            let c = to.gate(gate).and_then(|g| g.check(check));
            assert!(c.is_some_and(|c| c.passed), "{gate}.{check}: {c:?}");
        }
        // The host judged the restore side as it judges a vm-run: no problem found.
        let o = sharedos_rig::judge::verdict::judge(
            &out_dir.join("to"),
            &sharedos_rig::judge::verdict::How::full(None),
        )
        .unwrap();
        assert!(o.found().is_empty(), "{:?}", o.found());
    } else {
        // A restore CRIU refuses is a finding that quotes CRIU.
        assert_eq!(code, 1, "{said}");
        assert_eq!(s["verdict"], "FAIL");
        assert_eq!(restore.status, Status::Fail);
        assert!(restore.reason.contains("CRIU says"), "{}", restore.reason);
        assert!(said.contains("CRIU says"), "{said}");
    }
    eprintln!("migration bookworm -> bookworm-bpo: exit {code}");
}

fn a_checkpoint_tampered_with_between_the_guests_fails_the_restore_side(sb: &Sandbox, gate: &Path) {
    let out_dir = sb.dir.join("reports/tampered");
    let args = migrate_args(sb, gate, &out_dir, &["--test-tamper-checkpoint"]);
    let (code, said) = run(sb, &args);
    assert_eq!(code, 1, "{said}");
    let s = read_summary(&out_dir);
    assert_eq!(s["verdict"], "FAIL");
    let to = read_report(&out_dir.join("to"));
    let taken = to.gate(GateName::Dump).unwrap();
    assert_eq!(taken.status, Status::Fail);
    let c = taken.check("checkpoint_matches_manifest").unwrap();
    assert!(!c.passed);
    assert!(c.value.to_string().contains("has sha256"), "{}", c.value);
    let restore = to.gate(GateName::RestoreLiveProcess).unwrap();
    assert_eq!(restore.status, Status::NotRun, "{}", restore.reason);
}

#[test]
fn vm_migrate_refuses_unknown_images_before_booting() {
    let scratch =
        std::env::temp_dir().join(format!("sharedos-migrate-input-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let out_dir = scratch.join("out");
    let xtask = common::xtask_binary();
    for (from, to, flag) in [
        ("nosuch", "bookworm", "--from"),
        ("bookworm", "nosuch", "--to"),
    ] {
        let out = Command::new(&xtask)
            .args(["vm-migrate", "--from", from, "--to", to, "--images-dir"])
            .arg(&images)
            .arg("--cache-dir")
            .arg(scratch.join("cache"))
            .arg("--gate-binary")
            .arg(scratch.join("no-gate"))
            .arg("--out")
            .arg(&out_dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains(&format!("{flag} nosuch")), "{stderr}");
        assert!(
            stderr.contains("bookworm-bpo") && stderr.contains("trixie"),
            "names the images that exist: {stderr}"
        );
        assert!(!out_dir.exists(), "nothing archived");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
