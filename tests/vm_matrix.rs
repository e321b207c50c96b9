//! `xtask vm-matrix` end to end, as an unprivileged user: bookworm (criu 3.17.1) and trixie
//! (criu 4.x) built in the user's cache and run by one command, then the merged table that
//! `sharedos-rig show` renders from the matrix directory held against each image's own
//! report.json.
//!
//! Minutes, so `#[ignore]`d in a plain `cargo test`; CI runs it with `--include-ignored`.

mod common;

use common::{last_line, Sandbox};
use sharedos_rig::matrix::{self, CellOutcome, Matrix};
use sharedos_rig::report::{GateName, Report};
use std::path::{Path, PathBuf};
use std::process::Command;

const IMAGES: [&str; 2] = ["bookworm", "trixie"];

fn read_report(dir: &Path) -> Report {
    let text = std::fs::read_to_string(dir.join("report.json"))
        .unwrap_or_else(|e| panic!("no report.json in {}: {e}", dir.display()));
    serde_json::from_str(&text).unwrap()
}

fn show(dir: &Path, format: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sharedos-rig"))
        .args(["show", &dir.display().to_string(), "--format", format])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "show --format {format}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
#[ignore = "builds two images and boots two VMs: minutes; run with --include-ignored"]
fn vm_matrix_over_bookworm_and_trixie_merges_what_each_report_says() {
    let Some(sb) = Sandbox::new_or_skip("vmmatrix") else {
        return;
    };
    // trixie's userland is newer than a Debian 12 host's: fakechroot cannot run it, so the
    // build needs unshare mode and with it user namespaces for this user.
    let probe = sb.run_as_user(Path::new("unshare"), &["--user", "--map-root-user", "true"]);
    if !probe.status.success() {
        common::skip::cannot_run(
            "vm_matrix_over_bookworm_and_trixie_merges_what_each_report_says",
            "the trixie image needs unshare mode, and user namespaces are blocked here",
        );
        return;
    }
    let gate = sharedos_rig::gate_binary::build_gate_binary(Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("building the static gate binary");
    let gate = sb.copy_in(&gate, "sharedos-gate");
    let reports = sb.dir.join("reports");
    let cache = sb.dir.join("cache");
    let args: Vec<String> = vec![
        "vm-matrix".into(),
        "--images".into(),
        IMAGES.join(","),
        "--images-dir".into(),
        "images".into(),
        "--cache-dir".into(),
        cache.display().to_string(),
        "--mode".into(),
        "unshare".into(),
        "--gate-binary".into(),
        gate.display().to_string(),
        "--reports-root".into(),
        reports.display().to_string(),
    ];
    let argv: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = sb.run_as_user(&sb.xtask, &argv);
    let code = out.status.code().unwrap();
    assert_ne!(
        code,
        2,
        "the rig failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(last_line(&out));
    assert!(
        dir.starts_with(&reports)
            && dir
                .file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("matrix-"),
        "last line names the matrix dir: {}",
        dir.display()
    );

    let m: Matrix =
        serde_json::from_str(&std::fs::read_to_string(dir.join(matrix::MATRIX_FILE)).unwrap())
            .unwrap();
    assert_eq!(m.exit_code, code);
    let (loaded, problems) = matrix::load(&dir).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(loaded, m, "matrix.json agrees with the per-image reports");
    let names: Vec<&str> = m.cells.iter().map(|c| c.image.as_str()).collect();
    assert_eq!(names, IMAGES);

    let text = show(&dir, "text");
    let md = show(&dir, "md");
    let html = show(&dir, "html");
    let junit = show(&dir, "junit");
    for (cell, image) in m.cells.iter().zip(IMAGES) {
        assert_eq!(cell.outcome, CellOutcome::Ran, "{image}: {}", cell.reason);
        let r = read_report(&dir.join(image));
        let vm = r.vm.as_ref().expect("vm provenance");
        assert_eq!(vm.image_name, image);
        assert_eq!(cell.kernel_release, r.environment.kernel_release);
        assert_eq!(cell.kernel_release, vm.kernel_release_pinned);
        let criu = r.environment.criu_version.clone().unwrap_or_default();
        assert_eq!(cell.criu_version, criu);
        assert_eq!(cell.accelerator, vm.accel);
        // Each gate's cell is the report's status.
        for g in GateName::ALL {
            assert_eq!(cell.status(g), r.gate(g).unwrap().status, "{image} {g}");
        }
        // The row as shown: image, kernel, criu, accelerator, then the ten statuses in order.
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(image))
            .unwrap_or_else(|| panic!("no row for {image}:\n{text}"));
        let words: Vec<&str> = row.split_whitespace().collect();
        assert_eq!(&words[1..4], [&cell.kernel_release, &criu, &vm.accel]);
        let shown: Vec<&str> = words[4..14].to_vec();
        let want: Vec<&str> = GateName::ALL
            .iter()
            .map(|g| match r.gate(*g).unwrap().status.as_str() {
                "REVIEW_REQUIRED" => "REVIEW",
                s => s,
            })
            .collect();
        assert_eq!(shown, want, "{image}: {row}");
        assert!(md.contains(&format!("| {image} | ")), "{md}");
        assert!(html.contains(&format!("<td>{image}</td>")), "{html}");
        assert!(
            junit.contains(&format!("<testsuite name=\"{image}\"")),
            "{junit}"
        );
        // vm-run's own verdict of the archived report, as the cell records it.
        let v = sharedos_rig::verify::verify_dir(&dir.join(image)).unwrap();
        assert_eq!(cell.exit_code, Some(v.exit_code), "{image}");
    }
    // criu 3.x in one row, 4.x in the other: the point of the matrix.
    assert!(
        m.cells[0].criu_version.starts_with("3."),
        "{:?}",
        m.cells[0]
    );
    assert!(
        m.cells[1].criu_version.starts_with("4."),
        "{:?}",
        m.cells[1]
    );

    // The same matrix compared with itself: no differences in any cell.
    let d = Command::new(env!("CARGO_BIN_EXE_sharedos-rig"))
        .args([
            "diff",
            &dir.display().to_string(),
            &dir.display().to_string(),
        ])
        .output()
        .unwrap();
    assert!(d.status.success());
    assert!(String::from_utf8_lossy(&d.stdout).contains("no differences in any cell"));
}
