//! Test support, never shipped: stands in for `sharedos-gate diagnose` in the guest and acts out
//! one attack on the host through its report directory, named by `--attack NAME`. Everything
//! else it writes is a well-formed report, so that the attack alone decides what the rig does.
//! tests/vm_hostile_guest.rs runs it through the real vm-run.

// A stand-in for the guest, whose printing is what it attacks with.
#![allow(clippy::disallowed_macros)]

use sharedos_report::digest;
use sharedos_report::report::{Check, Environment, Gate, GateName, Report, Status, SCHEMA_VERSION};
use std::path::{Path, PathBuf};

fn arg(args: &[String], flag: &str) -> Option<String> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).cloned()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    // vm-run asks the gate binary on the host whether the diagnose arguments parse before it
    // boots. The attacks are the guest's, so here the arguments pass and nothing else happens.
    if args.iter().any(|a| a == "--check-args") {
        std::process::exit(0);
    }
    let out =
        PathBuf::from(arg(&args, "--out").unwrap_or_else(|| "/root/report/report.json".into()));
    let attack = arg(&args, "--attack").unwrap_or_default();
    let dir = out
        .parent()
        .unwrap_or(Path::new("/root/report"))
        .to_path_buf();
    if let Err(e) = run(&dir, &attack) {
        eprintln!("hostile-gate: {e}");
        std::process::exit(99);
    }
    std::process::exit(3);
}

fn report(dir: &Path, tweak: impl FnOnce(&mut Report)) -> Report {
    let gates = GateName::ALL
        .iter()
        .map(|n| {
            let s = if *n == GateName::GuiPixelReview {
                Status::ReviewRequired
            } else {
                Status::Pass
            };
            let mut g = Gate::new(*n, s, "acted by hostile-gate");
            if s == Status::Pass {
                g.checks.push(Check {
                    name: "acted".into(),
                    passed: true,
                    value: serde_json::json!(true),
                    expected: "true".into(),
                });
            }
            g
        })
        .collect();
    let mut r = Report {
        schema_version: SCHEMA_VERSION,
        marker: "hostile".into(),
        all_gates_pass: false,
        exit_code: 3,
        gates,
        environment: Environment {
            hostname: "sharedos-guest".into(),
            started_at: "2026-12-01T00:00:00.000Z".into(),
            finished_at: "2026-12-01T00:00:01.000Z".into(),
            ..Environment::default()
        },
        artifacts: vec![digest::artifact(dir, "png/live.png", "png").expect("png/live.png")],
        // The differences of a plain run, as the guest's own function gives them.
        fidelity_differences: sharedos_report::fidelity::differences("", &Default::default(), &[]),
        options: Default::default(),
        vm: None,
    };
    // The checks the host judges for itself, so that only the attack differs from an honest run.
    hostile_gate::honest::add_to(&mut r, dir).expect("writing the honest checks' PNGs");
    r.seal();
    tweak(&mut r);
    r
}

fn write(dir: &Path, r: &Report) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(r).map_err(std::io::Error::other)?;
    std::fs::write(dir.join("report.json"), text)
}

fn run(dir: &Path, attack: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(dir.join("png"))?;
    std::fs::create_dir_all(dir.join("logs"))?;
    std::fs::write(dir.join("png/live.png"), b"not really a png")?;
    let plain = report(dir, |_| {});
    match attack {
        // A link out of the report, to a file the host has, as a PNG it would hash and embed.
        "symlink-out" => {
            std::os::unix::fs::symlink("/etc/passwd", dir.join("png/x.png"))?;
            write(dir, &plain)
        }
        // A link into the report itself: still a link, still refused.
        "symlink-in" => {
            std::os::unix::fs::symlink("live.png", dir.join("png/same.png"))?;
            write(dir, &plain)
        }
        "fifo" => {
            nix::unistd::mkfifo(&dir.join("logs/criu.log"), nix::sys::stat::Mode::S_IRUSR)
                .map_err(std::io::Error::from)?;
            write(dir, &plain)
        }
        "device" => {
            nix::sys::stat::mknod(
                &dir.join("logs/null"),
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::S_IRUSR,
                nix::sys::stat::makedev(1, 3),
            )
            .map_err(std::io::Error::from)?;
            write(dir, &plain)
        }
        // Sparse, so the guest makes it at once; the rig must refuse it from its tar header.
        "huge-file" => {
            let f = std::fs::File::create(dir.join("logs/huge.log"))?;
            f.set_len(300 << 20)?;
            write(dir, &plain)
        }
        // 64 MiB on one line, no newline until the end.
        "endless-line" => {
            use std::io::Write;
            let chunk = vec![b'x'; 1 << 20];
            let mut err = std::io::stderr().lock();
            for _ in 0..64 {
                err.write_all(&chunk)?;
            }
            err.write_all(b"\n")?;
            write(dir, &plain)
        }
        // Files named as the host's own evidence, to replace what the host saw.
        "overwrite-host-evidence" => {
            for f in [
                "serial.log",
                "qemu.log",
                "diagnose-transcript.log",
                "report.json.sig",
            ] {
                std::fs::write(dir.join(f), b"SHAREDOS-FORGED\n")?;
            }
            write(dir, &plain)
        }
        // The guest kernel dies under the session.
        "kernel-panic" => {
            std::fs::write("/proc/sysrq-trigger", b"c")?;
            write(dir, &plain)
        }
        // The UART, flat out, for ever: QEMU writes it into the report's serial.log.
        "console-flood" => {
            use std::io::Write;
            let mut tty = std::fs::OpenOptions::new().write(true).open("/dev/ttyS0")?;
            let chunk = vec![b'F'; 1 << 20];
            loop {
                tty.write_all(&chunk)?;
            }
        }
        // A line now and then, for ever: no per-read timeout ever fires.
        "slow-drip" => loop {
            eprintln!("still working");
            std::thread::sleep(std::time::Duration::from_secs(2));
        },
        "exit-0-beside-a-failing-gate" => {
            let r = report(dir, |r| {
                r.gates[3].status = Status::Fail;
                r.gates[3].reason = "criu dump failed".into();
                r.all_gates_pass = true;
                r.exit_code = 0;
            });
            write(dir, &r)
        }
        "duplicate-gate" => {
            let r = report(dir, |r| {
                let mut forged = r.gates[3].clone();
                r.gates[3].status = Status::Fail;
                forged.status = Status::Pass;
                r.gates.insert(3, forged);
            });
            write(dir, &r)
        }
        // Copy a's screen differs from the dump's, but the check claims the dump-time hash.
        // The artifact list names the forged file's own hash, so the fetch finds nothing amiss.
        "forged-pixels" => {
            let mut r = report(dir, |_| {});
            let mut other = hostile_gate::honest::frame();
            other.rgb[0] ^= 0xff;
            let rel = "png/restored-a.png";
            hostile_gate::honest::write_png(&other, &dir.join(rel))?;
            let forged = digest::artifact(dir, rel, "png")
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
            for a in r.artifacts.iter_mut().filter(|a| a.path == rel) {
                *a = forged.clone();
            }
            write(dir, &r)
        }
        other => Err(std::io::Error::other(format!("unknown --attack {other:?}"))),
    }
}
