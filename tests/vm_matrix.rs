//! `xtask vm-matrix` end to end, as an unprivileged user: bookworm (criu 3.17.1) plain and trixie
//! (criu 4.x) with all three fidelity options as a variant row, built in the user's cache and
//! run by one command, then the merged table that
//! `sharedos-rig show` renders from the matrix directory held against each image's own
//! report.json. A third row, `stale` (bookworm with one pin the mirror does not have), must
//! be NOT_RUN naming the pin and the command that refreshes its lock while the other two run;
//! and `sharedos-rig matrix merge` over the per-image report directories (stale's from a vm-run
//! of its own, as a CI job would make it) must give the same table.
//!
//! Minutes, so `#[ignore]`d in a plain `cargo test`; CI runs it with `--include-ignored`.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use common::read_report;

use common::{last_line, Sandbox};
use sharedos_report::report::{GateName, Status};
use sharedos_rig::matrix::{self, CellOutcome, Matrix};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The rows that run, and the image each one runs.
const ROWS: [(&str, &str); 2] = [
    ("bookworm", "bookworm"),
    ("trixie+userns+cgroup+cowroot", "trixie"),
];
/// A copy of bookworm whose lock pins criu at a version no mirror has.
const STALE: &str = "stale";
const STALE_PIN: (&str, &str) = ("criu 3.17.1-2+deb12u2 ", "criu 3.17.1-2+deb12u99 ");

/// images/stale: bookworm with one pin the mirror does not have.
fn add_stale_image(sb: &Sandbox) {
    let st = Command::new("cp")
        .arg("-r")
        .arg(sb.images.join("bookworm"))
        .arg(sb.images.join(STALE))
        .status()
        .unwrap();
    assert!(st.success());
    let lock = sb.images.join(STALE).join("packages.lock");
    let text = std::fs::read_to_string(&lock).unwrap();
    assert!(
        text.contains(STALE_PIN.0),
        "bookworm's lock pins criu as the test expects"
    );
    std::fs::write(&lock, text.replace(STALE_PIN.0, STALE_PIN.1)).unwrap();
    // Still the user's, as the sandbox made everything else.
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", sb.uid, sb.gid))
        .arg(sb.images.join(STALE))
        .status()
        .unwrap();
    assert!(st.success());
}

/// The table and notes of `show --format md`, without the first line (it says how many runs
/// went at once, which a merge of separate jobs words differently), and with the process id in
/// a failed build's log name (`<key>.<pid>/build.log`) left out: each process that tries the
/// build names its own log.
fn md_body(md: &str) -> String {
    without_build_pid(&md.lines().skip(1).collect::<Vec<_>>().join("\n"))
}

fn without_build_pid(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find("/build.log") {
        let head = &rest[..i];
        let kept = head.trim_end_matches(|c: char| c.is_ascii_digit());
        out.push_str(kept);
        if kept.len() < head.len() {
            out.push_str("<pid>");
        }
        out.push_str("/build.log");
        rest = &rest[i + "/build.log".len()..];
    }
    out.push_str(rest);
    out
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
    add_stale_image(&sb);
    // bookworm's seed is the fakechroot build every VM test takes; trixie needs unshare mode.
    common::seed::seed(&sb, "cache", ROWS[0].1, "fakechroot");
    common::seed::seed(&sb, "cache", ROWS[1].1, "unshare");
    let reports = sb.dir.join("reports");
    let cache = sb.dir.join("cache");
    let labels: Vec<&str> = ROWS.iter().map(|(label, _)| *label).collect();
    let rows = format!("{},{STALE}", labels.join(","));
    let args: Vec<String> = vec![
        "vm-matrix".into(),
        "--images".into(),
        rows,
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
    // 2: an image would not build (stale), which is the rig's failure for that row.
    assert_eq!(
        code,
        2,
        "the stale row makes the matrix exit 2:\n{}",
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
    let (loaded, problems) = matrix::load(&dir, Some(&sb.images), None).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    assert_eq!(loaded, m, "matrix.json agrees with the per-image reports");
    let names: Vec<&str> = m.cells.iter().map(|c| c.image.as_str()).collect();
    assert_eq!(names, [ROWS[0].0, ROWS[1].0, STALE]);

    // The stale row did not run, says which pin and how to refresh the lock; nothing archived.
    let stale = &m.cells[2];
    assert_eq!(stale.outcome, CellOutcome::NotRun, "{stale:?}");
    assert!(
        stale.reason.contains("criu 3.17.1-2+deb12u99"),
        "{}",
        stale.reason
    );
    assert!(
        stale
            .reason
            .contains("cargo xtask image --image stale --update-lock")
            && stale
                .fix
                .contains("cargo xtask image --image stale --update-lock"),
        "{stale:?}"
    );
    assert!(stale.gates.iter().all(|g| g.status == Status::NotRun));
    assert!(!dir.join(STALE).exists());

    let text = show(&dir, "text");
    let md = show(&dir, "md");
    let html = show(&dir, "html");
    let junit = show(&dir, "junit");
    for (cell, (label, image)) in m.cells.iter().zip(ROWS) {
        assert_eq!(cell.outcome, CellOutcome::Ran, "{label}: {}", cell.reason);
        let r = read_report(&dir.join(label));
        let vm = r.vm.as_ref().expect("vm provenance");
        assert_eq!(vm.image_name, image);
        if label != image {
            // The variant row ran diagnose with the options its variants stand for.
            common::assert_all_fidelity_options_held(&r);
        }
        assert_eq!(cell.kernel_release, r.environment.kernel_release);
        assert_eq!(cell.kernel_release, vm.kernel_release_pinned);
        let criu = r.environment.criu_version.clone().unwrap_or_default();
        assert_eq!(cell.criu_version, criu);
        assert_eq!(cell.accelerator, vm.accel);
        // Each gate's cell is the report's status.
        for g in GateName::ALL {
            assert_eq!(cell.status(g), r.gate(g).unwrap().status, "{label} {g}");
        }
        // The row as shown: image, kernel, criu, accelerator, then the ten statuses in order.
        let row = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(label))
            .unwrap_or_else(|| panic!("no row for {label}:\n{text}"));
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
        assert_eq!(shown, want, "{label}: {row}");
        assert!(md.contains(&format!("| {label} | ")), "{md}");
        assert!(html.contains(&format!("<td>{label}</td>")), "{html}");
        assert!(
            junit.contains(&format!("<testsuite name=\"{label}\"")),
            "{junit}"
        );
        // vm-run's own verdict of the archived report, as the cell records it.
        let v = sharedos_rig::judge::judge(&dir.join(label), &sharedos_rig::judge::How::full(None))
            .unwrap();
        assert_eq!(cell.exit_code, Some(v.exit_code), "{label}");
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

    // What CI does (.github/workflows/vm-run.yml): one vm-run per image, then `sharedos-rig
    // matrix merge`. bookworm's and trixie's reports are the matrix's own; stale's comes from a
    // vm-run of its own, run as the workflow runs it (--accel auto, no --mode: the builder
    // chooses), which fails at the image (exit 2, no VM) and archives a report that says so.
    let stale_out = sb.dir.join("stale-report");
    let mut vr: Vec<String> = common::vm_run_args(&sb, &gate, &stale_out, "auto");
    let mode = vr.iter().position(|a| a == "--mode").unwrap();
    vr.drain(mode..mode + 2);
    vr.splice(1..1, ["--image".to_string(), STALE.to_string()]);
    let vr: Vec<&str> = vr.iter().map(String::as_str).collect();
    let o = sb.run_as_user(&sb.xtask, &vr);
    assert_eq!(o.status.code(), Some(2), "vm-run of the stale image");
    let merged = sb.dir.join("merged");
    let mut margs: Vec<String> = vec![
        "matrix".into(),
        "merge".into(),
        "--out".into(),
        merged.display().to_string(),
        "--images-dir".into(),
        "images".into(),
        "--images".into(),
        format!("{},{STALE}", labels.join(",")),
    ];
    margs.extend(labels.iter().map(|l| dir.join(l).display().to_string()));
    margs.push(stale_out.display().to_string());
    let margs: Vec<&str> = margs.iter().map(String::as_str).collect();
    let rig = sb.copy_in(
        Path::new(env!("CARGO_BIN_EXE_sharedos-rig")),
        "sharedos-rig",
    );
    let mo = sb.run_as_user(&rig, &margs);
    assert_eq!(
        mo.status.code(),
        Some(code),
        "merge exits as the matrix did"
    );
    assert_eq!(last_line(&mo), merged.display().to_string());
    assert_eq!(md_body(&show(&merged, "md")), md_body(&md));
    let (mm, problems) = matrix::load(&merged, Some(&sb.images), None).unwrap();
    assert!(problems.is_empty(), "{problems:?}");
    for (a, b) in mm.cells.iter().zip(&m.cells) {
        assert_eq!(
            (&a.image, a.outcome, &a.gates, &a.fix),
            (&b.image, b.outcome, &b.gates, &b.fix)
        );
        assert_eq!(without_build_pid(&a.reason), without_build_pid(&b.reason));
        assert_eq!(a.judgement(), b.judgement(), "{}", a.image);
    }

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
