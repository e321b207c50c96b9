//! The built `sharedos-rig` on directories of reports an archive editor rearranged: a report
//! copied byte for byte into another matrix row's place, a restore side copied in from another
//! migration, a migration copied under a second name. Each report passes its own checks where
//! it was put; `show` and `matrix pairs` say whose place it took. No VM: the reports are made
//! here.

// Tests start the binaries as a user would: std's Command is theirs to use, and tests/common's
// print macros.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use common::scratch::Scratch;
use sharedos_report::report::{
    self, Check, Environment, Gate, GateName, GuestStart, Report, Status, VmProvenance,
};
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sharedos-rig");

/// A vm-run's report of `image` as vm-run archives it: every gate in `not_here` NOT_RUN, the
/// others PASS on a check (the pixel review awaiting its human), the checks the host judges
/// again with the PNGs they name, the guest run with `marker`, a client key of its session's
/// own.
fn write_run(dir: &Path, image: &str, marker: &str, not_here: &[GateName]) {
    let gates = GateName::ALL
        .iter()
        .map(|n| {
            let status = match n {
                n if not_here.contains(n) => Status::NotRun,
                GateName::GuiPixelReview => Status::ReviewRequired,
                _ => Status::Pass,
            };
            let mut g = Gate::new(*n, status, format!("{n} did what it should"));
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
        marker: marker.into(),
        all_gates_pass: false,
        exit_code: 0,
        gates,
        environment: Environment {
            kernel_release: "6.1.0-50-cloud-amd64".into(),
            started_at: "2026-12-04T10:00:00.000Z".into(),
            finished_at: "2026-12-04T10:01:00.000Z".into(),
            criu_version: Some("3.17.1".into()),
            ..Default::default()
        },
        artifacts: vec![],
        fidelity_differences: sharedos_report::fidelity::differences(
            "6.1.0-50-cloud-amd64",
            &Default::default(),
            &[],
        ),
        options: Default::default(),
        vm: Some(VmProvenance {
            accel: "tcg".into(),
            image_name: image.into(),
            command_line: ["xtask", "vm-run", "--image", image]
                .map(String::from)
                .to_vec(),
            start: Some(GuestStart {
                how: "cold".into(),
                client_key: format!("ssh-ed25519 AAAA-{}", dir.display()),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    hostile_gate::honest::add_to(&mut r, dir).unwrap();
    r.seal();
    std::fs::write(
        dir.join(report::REPORT_FILE),
        serde_json::to_vec_pretty(&r).unwrap(),
    )
    .unwrap();
}

/// Copies a directory as an archive editor would: every byte the same.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to.join(e.file_name()));
        } else {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn rig(args: &[&str], state: &Path) -> Output {
    Command::new(BIN)
        .args(args)
        .env("SHAREDOS_RIG_STATE_DIR", state)
        .output()
        .unwrap()
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// bookworm's report copied into trixie's row, matrix.json written to agree with the copy:
/// `show` names the row the report is of, and the run it repeats.
#[test]
fn show_matrix_names_a_rows_report_copied_from_another_row() {
    let s = Scratch::new("matrix");
    let m = s.0.join("matrix");
    write_run(&m.join("bookworm"), "bookworm", "spike-bookworm", &[]);
    copy_dir(&m.join("bookworm"), &m.join("trixie"));
    let o = sharedos_rig::judge::judge(&m.join("trixie"), &sharedos_rig::judge::How::full(None))
        .unwrap();
    assert!(o.found().is_empty(), "the copy passes its own checks");
    // What an editor writes: trixie's cell as the copied report makes it, no problem named.
    let bookworm = sharedos_rig::matrix::cell_from_outcome("bookworm", &o);
    let mut trixie = bookworm.clone();
    trixie.image = "trixie".into();
    trixie.report_dir = Some("trixie".into());
    let cells = vec![bookworm, trixie];
    let matrix = sharedos_rig::matrix::Matrix {
        schema_version: sharedos_rig::matrix::MATRIX_SCHEMA_VERSION,
        started_at: "s".into(),
        finished_at: "f".into(),
        jobs: 1,
        jobs_reason: "r".into(),
        command_line: vec![],
        exit_code: sharedos_rig::matrix::exit_code(&cells),
        cells,
    };
    assert_eq!(matrix.exit_code, 3, "as written, only the reviews await");
    sharedos_rig::matrix::write_matrix(&m, &matrix).unwrap();

    let o = rig(
        &[
            "show",
            m.to_str().unwrap(),
            "--images-dir",
            s.0.to_str().unwrap(),
        ],
        &s.0,
    );
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(out.starts_with("matrix: 2 image(s), exit 1"), "{out}");
    assert!(
        out.contains("trixie: report rejected: its report is a run of row bookworm, not of trixie"),
        "{out}"
    );
    assert!(
        out.contains("its report is the same run as row bookworm's (bookworm/)"),
        "{out}"
    );
    assert!(
        err.contains("trixie: its report has a problem matrix.json does not name"),
        "{err}"
    );
}

fn write_migration(dir: &Path, marker: &str) {
    use GateName::*;
    let from = [
        RestoreLiveProcess,
        RestoreXState,
        Isolation,
        Reset,
        GuiPixelReview,
    ];
    write_run(&dir.join("from"), "bookworm", marker, &from);
    write_run(
        &dir.join("to"),
        "bookworm-bpo",
        marker,
        &[Launch, LiveStateProbe, GuiPixelReview],
    );
    std::fs::write(
        dir.join("migration.json"),
        format!(
            r#"{{"from": {{"image": "bookworm"}}, "to": {{"image": "bookworm-bpo"}}, "marker": "{marker}", "verdict": "PASS"}}"#
        ),
    )
    .unwrap();
}

/// Another migration's restore side in a migration's place, and a migration copied under a
/// second name: `matrix pairs` fails both rows, naming where each half came from.
#[test]
fn matrix_pairs_fails_a_half_taken_from_another_migration() {
    let s = Scratch::new("pairs");
    let reports = s.0.join("reports");
    let a = reports.join("20261204T100000Z-migrate-bookworm-bookworm-bpo");
    let b = reports.join("20261204T110000Z-migrate-bookworm-bookworm-bpo");
    write_migration(&a, "spike-aaaaaa");
    write_migration(&b, "spike-bbbbbb");
    let o = rig(&["matrix", "pairs", reports.to_str().unwrap()], &s.0);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");

    std::fs::remove_dir_all(a.join("to")).unwrap();
    copy_dir(&b.join("to"), &a.join("to"));
    let o = rig(&["show", a.to_str().unwrap()], &s.0);
    let (out, _) = text(&o);
    assert!(
        out.contains(
            "to: to/ is not of from/'s migration: its guest ran with the marker \
             \"spike-bbbbbb\", from/'s with \"spike-aaaaaa\""
        ),
        "{out}"
    );
    let o = rig(&["matrix", "pairs", a.to_str().unwrap()], &s.0);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o).0);

    let b2 = reports.join("20261204T120000Z-migrate-bookworm-bookworm-bpo");
    copy_dir(&b, &b2);
    let o = rig(
        &["matrix", "pairs", b.to_str().unwrap(), b2.to_str().unwrap()],
        &s.0,
    );
    let (out, _) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(
        out.contains(
            "20261204T120000Z-migrate-bookworm-bookworm-bpo: from/ is the same run as \
             20261204T110000Z-migrate-bookworm-bookworm-bpo's from/: both carry the report.json \
             sha256 "
        ),
        "{out}"
    );
}
