//! A hostile guest on the real vm-run path: the gate binary copied in is testing/hostile-gate,
//! built statically, which acts out one attack per run in a real VM (links out of and into the
//! report, a FIFO, a device node, a huge file, a never-ending line, a report claiming exit 0
//! beside a failing gate, a duplicated gate). For each one: nothing outside the report directory
//! changed, nothing hung, the exit code fits, and the rig's words name the cause. A kernel
//! panic is a RIG FAILURE that quotes the panic line; no other attack's run flags one.
//!
//! Minutes, so `#[ignore]`d in a plain `cargo test`; the README's test command runs it.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use common::{last_line, processes_mentioning, vm_run_args, Sandbox};
use sharedos_report::digest::sha256_file;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every entry under `dir` that is neither a regular file nor a directory.
fn odd_entries(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(odd_entries(&e.path()));
        } else if !t.is_file() {
            out.push(e.path());
        }
    }
    out
}

/// (path, sha256) of every regular file under `dir` but `skip`, to show nothing else changed.
fn snapshot(dir: &Path, skip: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.starts_with(skip) {
            continue;
        }
        let t = e.file_type().unwrap();
        if t.is_dir() {
            out.extend(snapshot(&p, skip));
        } else if t.is_file() {
            out.push((
                p.clone(),
                sha256_file(&p).map(|(h, _)| h).unwrap_or_default(),
            ));
        }
    }
    out.sort();
    out
}

struct Attack {
    name: &'static str,
    /// vm-run options the attack needs.
    options: &'static [&'static str],
    exit: i32,
    /// What the rig's stderr or the verify problems must say.
    says: &'static str,
}

const ATTACKS: &[Attack] = &[
    Attack {
        options: &[],
        name: "symlink-out",
        exit: 2,
        says: "png/x.png: a symbolic link",
    },
    Attack {
        options: &[],
        name: "symlink-in",
        exit: 2,
        says: "png/same.png: a symbolic link",
    },
    Attack {
        options: &[],
        name: "fifo",
        exit: 2,
        says: "logs/criu.log: a FIFO",
    },
    Attack {
        options: &[],
        name: "device",
        exit: 2,
        says: "logs/null: a character device",
    },
    Attack {
        options: &[],
        name: "huge-file",
        exit: 2,
        says: "the guest sent logs/huge.log of 314572800 bytes, over the",
    },
    Attack {
        options: &[],
        name: "endless-line",
        exit: 3,
        says: "[line cut at 65536 bytes]",
    },
    Attack {
        options: &[],
        name: "overwrite-host-evidence",
        exit: 3,
        says: "REVIEW_REQUIRED",
    },
    Attack {
        options: &[],
        name: "kernel-panic",
        exit: 2,
        // The panic line itself, as the console has it: the detection quotes what it saw.
        says: "the guest kernel panicked (Kernel panic - not syncing: sysrq triggered crash",
    },
    Attack {
        options: &[],
        name: "console-flood",
        exit: 2,
        says: "MiB to its serial console, so QEMU was stopped",
    },
    Attack {
        options: &["--gates-timeout", "40"],
        name: "slow-drip",
        exit: 2,
        says: "was still running at its deadline",
    },
    Attack {
        options: &[],
        name: "exit-0-beside-a-failing-gate",
        exit: 1,
        says: "guest/report.json, as the guest wrote it: report.json says exit_code=0, but its gates give FAIL",
    },
    Attack {
        options: &[],
        name: "duplicate-gate",
        exit: 1,
        says: "report.json has the dump gate 2 times",
    },
    Attack {
        options: &[],
        name: "forged-pixels",
        exit: 1,
        says: "report.json says restore_x_state.same_framebuffer passed, but the host's own comparison fails: the pixels of png/restored-a.png hash to",
    },
];

#[test]
#[ignore = "boots VMs: minutes; run with --include-ignored"]
fn a_hostile_guest_cannot_touch_the_host_or_the_verdict() {
    let Some(sb) = Sandbox::new_or_skip("hostile") else {
        return;
    };
    let built = sharedos_rig::gate_binary::build_static(
        Path::new(env!("CARGO_MANIFEST_DIR")),
        "hostile-gate",
    )
    .expect("building the static hostile-gate");
    let gate = sb.copy_in(&built, "hostile-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    let reports = sb.dir.join("reports");
    let passwd = sha256_file(Path::new("/etc/passwd")).unwrap();
    let mut failures = Vec::new();
    // `SHAREDOS_HOSTILE_ATTACKS=kernel-panic,fifo` runs only those: one attack is one boot.
    let only = std::env::var("SHAREDOS_HOSTILE_ATTACKS").unwrap_or_default();
    let chosen: Vec<&Attack> = ATTACKS
        .iter()
        .filter(|a| only.is_empty() || only.split(',').any(|n| n.trim() == a.name))
        .collect();
    assert!(
        !chosen.is_empty(),
        "SHAREDOS_HOSTILE_ATTACKS={only:?} names no attack"
    );
    for a in chosen {
        let out_dir = reports.join(a.name);
        // The image cache fills on the first run; nothing else outside the report may change.
        let before = snapshot(&sb.dir, &sb.dir.join("cache"));
        let mut args = vm_run_args(&sb, &gate, &out_dir, "tcg");
        args.extend(a.options.iter().map(|o| o.to_string()));
        args.extend(["--".into(), "--attack".into(), a.name.into()]);
        let started = Instant::now();
        let out = sb.run_as_user(
            Path::new("timeout"),
            &[
                &["900", sb.xtask.to_str().unwrap()][..],
                &common_strs(&args)[..],
            ]
            .concat(),
        );
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let code = out.status.code().unwrap_or(-1);
        let verify = std::process::Command::new(env!("CARGO_BIN_EXE_sharedos-rig"))
            .arg("verify")
            .arg(&out_dir)
            .output()
            .unwrap();
        let verify_out = String::from_utf8_lossy(&verify.stdout).into_owned();
        let transcript =
            std::fs::read_to_string(out_dir.join("diagnose-transcript.log")).unwrap_or_default();
        let said = format!("{stderr}\n{verify_out}\n{transcript}");
        let mut after = snapshot(&sb.dir, &sb.dir.join("cache"));
        after.retain(|(p, _)| !p.starts_with(&out_dir));
        let mut problems = Vec::new();
        if code == 124 || took > Duration::from_secs(900) {
            problems.push(format!("hung ({took:?})"));
        }
        if code != a.exit {
            problems.push(format!("exit {code}, wanted {}", a.exit));
        }
        if !said.contains(a.says) {
            problems.push(format!("nothing says {:?}", a.says));
        }
        if Path::new(&last_line(&out)) != out_dir {
            problems.push("the last line is not the report directory".into());
        }
        let odd = odd_entries(&out_dir);
        if !odd.is_empty() {
            problems.push(format!("the report holds non-regular entries: {odd:?}"));
        }
        if after != before {
            problems.push("files outside the report directory changed".into());
        }
        if sha256_file(Path::new("/etc/passwd")).unwrap() != passwd {
            problems.push("/etc/passwd changed".into());
        }
        // Panic detection, both ways: the panic is the matrix row's RIG FAILURE and its reason
        // quotes the panic line; every other attack's console has no panic or oops to flag.
        let report = std::fs::read(out_dir.join("report.json"))
            .ok()
            .and_then(|b| sharedos_rig::judge::verdict::parse_report(&b).ok());
        match (&report, a.name) {
            (None, _) => problems.push("report.json does not read back".into()),
            (Some(r), "kernel-panic") => {
                let cell = sharedos_rig::matrix::cell_from_report(a.name, r, code);
                if cell.outcome != sharedos_rig::matrix::CellOutcome::RigFailed
                    || !cell.reason.contains("sysrq triggered crash")
                {
                    problems.push(format!(
                        "the matrix cell is {:?}, its reason {:?}: not a RIG FAILURE quoting the panic",
                        cell.outcome, cell.reason
                    ));
                }
            }
            (Some(r), _) => {
                let vm = r.vm.as_ref();
                let err = vm.and_then(|v| v.rig_error.as_deref()).unwrap_or_default();
                if err.contains("panicked") || vm.is_some_and(|v| v.kernel_oops.is_some()) {
                    problems.push(format!("a panic or oops flagged without one: {err}"));
                }
            }
        }
        if a.name == "overwrite-host-evidence" {
            let serial = std::fs::read_to_string(out_dir.join("serial.log")).unwrap_or_default();
            let forged =
                std::fs::read_to_string(out_dir.join("guest/serial.log")).unwrap_or_default();
            if !serial.contains("SHAREDOS-READY") || forged != "SHAREDOS-FORGED\n" {
                problems.push("the guest's serial.log replaced the host's".into());
            }
            if out_dir.join("report.json.sig").exists() || transcript.contains("SHAREDOS-FORGED") {
                problems.push("a guest file landed beside the host's evidence".into());
            }
        }
        let console = std::fs::metadata(out_dir.join("serial.log")).map_or(0, |m| m.len());
        // The watchdog looks every 100 ms; a TCG guest writes well under 1 MiB in that time.
        if console > sharedos_rig::vm::watchdog::CONSOLE_CAP + (4 << 20) {
            problems.push(format!("serial.log grew to {console} bytes, past the cap"));
        }
        if transcript.lines().any(|l| l.len() > 70_000) {
            problems.push("a transcript line passed the cap".into());
        }
        if !processes_mentioning(out_dir.to_str().unwrap()).is_empty() {
            problems.push("a process outlived the run".into());
        }
        if !problems.is_empty() {
            failures.push(format!(
                "{}: {}\n--- stderr tail:\n{}\n--- verify:\n{verify_out}",
                a.name,
                problems.join("; "),
                stderr
                    .lines()
                    .rev()
                    .take(15)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect::<Vec<_>>()
                    .join("\n")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn common_strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}
