//! Runs the built `sharedos-rig` binary on report directories written here from constructed
//! reports: review, verify, show (all formats), diff and list, with their exit codes.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

// The shared test helpers, as the single-file tests take them with `mod common;`.
#[path = "../common/mod.rs"]
mod common;

mod compare;
mod matrix;
mod review;
mod show;
mod verify;

use sharedos_report::digest;
use sharedos_report::report::{
    self, Check, Environment, Gate, GateName, Phase, Report, Status, VmProvenance,
};
use std::path::Path;
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sharedos-rig");

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
