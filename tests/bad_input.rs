//! Bad input stays cheap: `xtask vm-run --image NAME` for a name that is not an image exits 2
//! at once, says which images exist, builds nothing (not even the gate binary) and archives
//! nothing. Runs in a plain `cargo test`: nothing here boots or builds.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn vm_run_of_an_unknown_image_exits_2_before_building_anything() {
    let scratch = std::env::temp_dir().join(format!("sharedos-bad-input-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let out_dir = scratch.join("report");
    let cache = scratch.join("cache");
    let xtask = common::xtask_binary();
    for sub in ["vm-run", "vm-exec"] {
        let mut args = vec![
            sub.to_string(),
            "--image".into(),
            "nosuch".into(),
            "--images-dir".into(),
            images.display().to_string(),
            "--cache-dir".into(),
            cache.display().to_string(),
        ];
        if sub == "vm-run" {
            args.extend(["--out".into(), out_dir.display().to_string()]);
        } else {
            args.extend(["--".into(), "true".into()]);
        }
        let started = std::time::Instant::now();
        let out = Command::new(&xtask)
            .args(&args)
            // A gate binary build would run this cargo and fail naming it.
            .env("CARGO", scratch.join("no-cargo-here"))
            .current_dir(&scratch)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sub}: {stderr}");
        assert!(stderr.contains("no image \"nosuch\""), "{sub}: {stderr}");
        assert!(
            stderr.contains("bookworm"),
            "{sub}: the images are not listed: {stderr}"
        );
        assert!(
            !stderr.contains("no-cargo-here"),
            "{sub}: built something: {stderr}"
        );
        assert!(
            !stderr.contains("building"),
            "{sub}: built something: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{sub}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(!out_dir.exists(), "{sub}: archived a report");
        assert!(!cache.exists(), "{sub}: touched the cache");
        assert!(
            !scratch.join("reports").exists(),
            "{sub}: archived a report"
        );
        assert!(
            started.elapsed().as_secs() < 10,
            "{sub}: took {:?}",
            started.elapsed()
        );
    }
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// `vm-run -- --cgroup memory=512M`: the gate binary's own parser refuses it on the host,
/// before the image phase and the boot. The message is the parser's, with a fix; nothing is
/// built, booted or archived.
#[test]
fn vm_run_refuses_bad_diagnose_arguments_before_building_or_booting() {
    let scratch =
        std::env::temp_dir().join(format!("sharedos-bad-diagnose-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let out_dir = scratch.join("report");
    let cache = scratch.join("cache");
    // The gate binary's host build: the check runs it here, as vm-run runs the static one.
    let gate = common::cargo_binary("sharedos-gate");
    let run = |diagnose: &[&str]| {
        let out = Command::new(common::xtask_binary())
            .arg("vm-run")
            .arg("--images-dir")
            .arg(&images)
            .arg("--cache-dir")
            .arg(&cache)
            .arg("--accel")
            .arg("tcg")
            .arg("--gate-binary")
            .arg(&gate)
            .arg("--out")
            .arg(&out_dir)
            .arg("--")
            .args(diagnose)
            .env("CARGO", scratch.join("no-cargo-here"))
            .current_dir(&scratch)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        eprintln!("--- vm-run -- {diagnose:?}: {}\n{stderr}", out.status);
        (out, stderr)
    };
    let mut seen = Vec::new();
    let (out, stderr) = run(&["--cgroup", "memory=512M"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("refused by the gate binary's own parser"),
        "{stderr}"
    );
    // The parser's own words, and the fix.
    assert!(stderr.contains("gives no cpu=: it needs both"), "{stderr}");
    assert!(stderr.contains("fix: correct them"), "{stderr}");
    seen.push((out, stderr));
    let (out, stderr) = run(&["--copies", "65"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("not a number of copies"), "{stderr}");
    seen.push((out, stderr));
    let (out, stderr) = run(&["--check-args"]);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("leave it out"), "{stderr}");
    seen.push((out, stderr));
    // Nothing was built, booted or archived.
    for (out, stderr) in &seen {
        assert!(
            !stderr.contains("image bookworm") && !stderr.contains("booting"),
            "{stderr}"
        );
        assert!(out.stdout.is_empty());
    }
    // vm-matrix checks each row's arguments the same way, before any row runs.
    let out = Command::new(common::xtask_binary())
        .arg("vm-matrix")
        .arg("--images")
        .arg("bookworm,bookworm+copies65")
        .arg("--images-dir")
        .arg(&images)
        .arg("--cache-dir")
        .arg(&cache)
        .arg("--accel")
        .arg("tcg")
        .arg("--gate-binary")
        .arg(&gate)
        .arg("--reports-root")
        .arg(scratch.join("reports"))
        .env("CARGO", scratch.join("no-cargo-here"))
        .current_dir(&scratch)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--images row bookworm+copies65")
            && stderr.contains("not a number of copies"),
        "{stderr}"
    );
    assert!(!scratch.join("reports").exists(), "a matrix was archived");
    assert!(!cache.exists(), "the image phase ran: {}", cache.display());
    assert!(!out_dir.exists(), "a report was archived");
    assert!(common::processes_mentioning(scratch.to_str().unwrap()).is_empty());
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// A workload on an image without its programs is refused on the host, in vm-run, vm-compare
/// and vm-matrix alike: exit 2, the image to use named, nothing built, booted or archived. With
/// no `--image` at all, vm-run takes the image that has the workload.
#[test]
fn a_workload_the_image_lacks_is_refused_before_anything_and_no_image_means_the_one_with_it() {
    let scratch =
        std::env::temp_dir().join(format!("sharedos-bad-workload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let cache = scratch.join("cache");
    let xtask = common::xtask_binary();
    let common_args = |sub: &str| {
        vec![
            sub.to_string(),
            "--images-dir".into(),
            images.display().to_string(),
            "--cache-dir".into(),
            cache.display().to_string(),
        ]
    };
    let run = |args: Vec<String>| {
        Command::new(&xtask)
            .args(&args)
            // A gate binary build would run this cargo and fail naming it.
            .env("CARGO", scratch.join("no-cargo-here"))
            .current_dir(&scratch)
            .output()
            .unwrap()
    };
    let mut vm_run = common_args("vm-run");
    vm_run.extend(["--image", "bookworm", "--", "--workload", "desktop"].map(String::from));
    let mut compare = common_args("vm-compare");
    compare.extend(["--image", "trixie", "--workload", "browser"].map(String::from));
    let mut matrix = common_args("vm-matrix");
    matrix.extend(["--images", "bookworm,bookworm+desktop"].map(String::from));
    for (args, fix) in [
        (
            vm_run,
            "fix: give --image bookworm-desktop (or bookworm-apps, trixie-desktop, trixie-apps, trixie-bpo-criu42-apps), or leave --image out",
        ),
        (
            compare,
            "fix: give --image bookworm-browser (or bookworm-apps, trixie-apps, trixie-bpo-criu42-apps), or leave --image out",
        ),
        (matrix, "fix: write the row as bookworm-desktop+desktop"),
    ] {
        let out = run(args.clone());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains("workload (its definition does not install"),
            "{stderr}"
        );
        assert!(stderr.contains(fix), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("no-cargo-here"),
            "built something: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(!cache.exists(), "{args:?}: touched the cache");
        assert!(!scratch.join("reports").exists(), "{args:?}: archived");
    }
    // No --image: the plan is the desktop image's.
    let mut plan = common_args("vm-run");
    plan.extend(["--plan", "--", "--workload", "desktop"].map(String::from));
    let out = run(plan);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr
            .contains("image bookworm-desktop: it has the desktop workload (no --image was given)"),
        "{stderr}"
    );
    assert!(stdout.contains("/bookworm-desktop-"), "{stdout}");
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// vm-matrix's workload axis: an unknown workload, an empty list and `--workloads` beside
/// `--images` are refused before anything is built (exit 2, a fix line, nothing archived), and
/// `--plan` prints one row per workload and CRIU line, on the image of that line that holds it.
#[test]
fn vm_matrix_workloads_refuses_bad_lists_and_plans_one_row_per_workload_and_line() {
    let scratch =
        std::env::temp_dir().join(format!("sharedos-bad-workloads-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let cache = scratch.join("cache");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "vm-matrix".to_string(),
            "--images-dir".into(),
            images.display().to_string(),
            "--cache-dir".into(),
            cache.display().to_string(),
        ];
        args.extend(extra.iter().map(|s| s.to_string()));
        Command::new(common::xtask_binary())
            .args(&args)
            .env("CARGO", scratch.join("no-cargo-here"))
            .current_dir(&scratch)
            .output()
            .unwrap()
    };
    for (extra, says) in [
        (&["--workloads", "kde"][..], "\"kde\" is not a workload"),
        (&["--workloads", ","][..], "names no workload"),
        (
            &["--workloads", "xterm", "--images", "bookworm"][..],
            "--workloads and --images both name the rows",
        ),
    ] {
        let out = run(extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(stderr.contains("fix: "), "{extra:?}: {stderr}");
        assert!(
            !stderr.contains("no-cargo-here"),
            "built something: {stderr}"
        );
        assert!(!cache.exists(), "{extra:?}: touched the cache");
        assert!(!scratch.join("reports").exists(), "{extra:?}: archived");
    }
    let out = run(&["--workloads", "xterm,desktop", "--plan"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout
            .lines()
            .map(|l| l.split(':').next().unwrap())
            .collect::<Vec<_>>(),
        [
            "bookworm+copies2",
            "trixie+copies2",
            "trixie-bpo-criu42+copies2",
            "bookworm-desktop+desktop+copies2",
            "trixie-desktop+desktop+copies2",
            "trixie-bpo-criu42-apps+desktop+copies2",
        ],
        "{stdout}"
    );
    assert!(
        stdout.contains("trixie-bpo-criu42-apps+desktop+copies2: image trixie-bpo-criu42-apps (criu 4.2.1), diagnose --workload desktop --copies 2"),
        "{stdout}"
    );
    assert!(!cache.exists(), "--plan touched the cache");
    assert!(!scratch.join("reports").exists(), "--plan archived");
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// vm-compare's own bad input, each refused before anything is built or booted, with one line
/// that names the problem and the fix: an arm that does not exist, `--copies 0`, the guest's
/// KSM asked of an image whose kernel cannot give it, and the templated arm on a QEMU too old
/// for it (a stand-in `qemu-system-x86_64` first on PATH that
/// says it is 3.1 and records any start beyond `--version`).
#[test]
fn vm_compare_refuses_a_bad_arm_no_copies_and_a_qemu_without_the_templates_features() {
    use std::os::unix::fs::PermissionsExt;
    let scratch = std::env::temp_dir().join(format!("sharedos-bad-compare-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    let bin = scratch.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let started = scratch.join("qemu-started");
    let qemu = bin.join("qemu-system-x86_64");
    std::fs::write(
        &qemu,
        format!(
            "#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'QEMU emulator version 3.1.0 (Debian 1:3.1+dfsg-8)'; exit 0; fi\necho \"$@\" >>{}\nexit 1\n",
            started.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&qemu, std::fs::Permissions::from_mode(0o755)).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let cache = scratch.join("cache");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let run = |extra: &[&str]| {
        Command::new(common::xtask_binary())
            .arg("vm-compare")
            .arg("--images-dir")
            .arg(&images)
            .arg("--cache-dir")
            .arg(&cache)
            .args(["--image", "bookworm", "--accel", "tcg"])
            .args(extra)
            .env("PATH", &path)
            // A gate binary build would run this cargo and fail naming it.
            .env("CARGO", scratch.join("no-cargo-here"))
            .current_dir(&scratch)
            .output()
            .unwrap()
    };
    for (extra, says) in [
        (
            &["--arms", "criu,vms"][..],
            "invalid value 'vms' for '--arms <ARM,...>'",
        ),
        (&["--copies", "0"][..], "--copies 0: give 1 to"),
        (
            &["--copies", "3", "--max-copies", "2"][..],
            "--max-copies caps the search of --copies max, and this run asks for 3 copies",
        ),
        (
            &["--copies", "max", "--lie", "wrong-save"][..],
            "--lie puts its fault into a copy of a known count, and --copies max has none",
        ),
        (
            &["--arms", "criu", "--guest-ksm", "on"][..],
            "--guest-ksm on: the shared-OS guest's kernel (6.1.0-50-cloud-amd64, pinned by images/bookworm/packages.lock) has no PR_SET_MEMORY_MERGE",
        ),
        (
            &["--arms", "vm-template", "--copies", "2"][..],
            "--arms vm-template needs QEMU 4.0 or later",
        ),
    ] {
        let out = run(extra);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {stderr}");
        assert!(stderr.contains(says), "{extra:?}: {stderr}");
        assert!(
            stderr.contains("fix:") || stderr.contains("possible values: criu, vm, vm-template"),
            "{extra:?}: no fix: {stderr}"
        );
        assert!(
            !stderr.contains("no-cargo-here"),
            "built something: {stderr}"
        );
        assert!(
            !started.exists(),
            "{extra:?}: QEMU was started: {}",
            std::fs::read_to_string(&started).unwrap_or_default()
        );
        assert!(!cache.exists(), "{extra:?}: touched the cache");
        assert!(!scratch.join("reports").exists(), "{extra:?}: archived");
    }
    std::fs::remove_dir_all(&scratch).unwrap();
}
