//! `xtask vm-run` end to end, as an unprivileged user: the pinned image built (or found) in the
//! user's cache, QEMU under whatever accelerator `auto` gets through to (TCG on hosted runners and
//! on this project's machines), one SSH session, the real gates inside the guest.
//!
//! Minutes each, so `#[ignore]`d in a plain `cargo test`; the README's test command and CI run
//! them with `--include-ignored`.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use common::{gate_binary, read_report, vm_exec};

use common::{last_line, processes_mentioning, vm_run_args, Sandbox};
use sharedos_report::report::{GateName, Status};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The `[STEP ACCEL]` line of a plan (`qemu` for a cold boot, `resume` for a resume), split
/// back into its words (shell_words quotes with ').
fn planned_qemu(plan: &str, step: &str, accel: &str) -> Vec<String> {
    let mut lines = plan.lines();
    lines
        .find(|l| l.starts_with(&format!("[{step} {accel}]")))
        .unwrap_or_else(|| panic!("no [{step} {accel}] in the plan:\n{plan}"));
    let line = lines.next().expect("the QEMU line").trim();
    let (mut words, mut cur, mut quoted, mut any) = (Vec::new(), String::new(), false, false);
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                any = true;
            }
            ' ' if !quoted => {
                if any || !cur.is_empty() {
                    words.push(std::mem::take(&mut cur));
                }
                any = false;
            }
            c => cur.push(c),
        }
    }
    if any || !cur.is_empty() {
        words.push(cur);
    }
    words
}

/// Both runs share one sandbox, so the image is built once, in the first run's image phase.
#[test]
#[ignore = "boots VMs: minutes; run with --include-ignored"]
fn vm_run_end_to_end_as_an_unprivileged_user() {
    let Some(sb) = Sandbox::new_or_skip("vmrun") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    full_run_archives_an_identified_report_that_verify_agrees_with(&sb, &gate);
    density_of_three_copies_is_measured_and_verified(&sb, &gate);
    two_resumes_of_one_snapshot_share_nothing_of_their_own(&sb);
    damage_the_snapshots_state(&sb);
    fidelity_options_all_at_once(&sb, &gate);
    vm_exec_runs_one_command_and_exits_with_its_code(&sb);
    lying_criu_suite_in_the_guest(&sb, &gate, CI_TIER_LIES);
    interrupted_during_the_gates_exits_2_with_a_partial_report_and_nothing_left(
        &sb,
        &gate,
        Interrupt::KillQemu,
    );
    interrupted_during_the_gates_exits_2_with_a_partial_report_and_nothing_left(
        &sb,
        &gate,
        Interrupt::SigtermTheRig,
    );
    interrupted_during_the_gates_exits_2_with_a_partial_report_and_nothing_left(
        &sb,
        &gate,
        Interrupt::SigtermTheRigKeepingTheVm,
    );
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Interrupt {
    /// QEMU dies under the run (a guest crash, as the rig sees it).
    KillQemu,
    /// The user stops the run.
    SigtermTheRig,
    /// The same under `--keep-vm`: a run that did not reach its end keeps nothing.
    SigtermTheRigKeepingTheVm,
}

fn full_run_archives_an_identified_report_that_verify_agrees_with(sb: &Sandbox, gate: &Path) {
    let out_dir = sb.dir.join("reports/run");
    let mut args = vm_run_args(sb, gate, &out_dir, "auto");
    // The run signs its report with the user's own key.
    let key = sb.dir.join("home/signing-key");
    let made = sb.run_as_user(
        Path::new("ssh-keygen"),
        &[
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            "ci",
            "-f",
            key.to_str().unwrap(),
        ],
    );
    assert!(made.status.success());
    args.extend(["--sign-key".into(), key.display().to_string()]);
    let out = sb.run_as_user(&sb.xtask, &strs(&args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let code = out.status.code().unwrap();
    assert_ne!(code, 2, "the rig failed:\n{stderr}");
    assert_eq!(
        PathBuf::from(last_line(&out)),
        out_dir,
        "last line names the report dir"
    );

    let r = read_report(&out_dir);
    let vm = r.vm.as_ref().expect("vm provenance");
    // Where, on what, when.
    assert_eq!(
        r.environment.kernel_release, vm.kernel_release_pinned,
        "guest kernel is the locked one"
    );
    assert!(!vm.kernel_release_pinned.is_empty());
    assert_eq!(r.environment.hostname, "sharedos-guest");
    assert_eq!(r.environment.boot_id.len(), 36);
    assert!(r.environment.started_at.ends_with('Z') && r.environment.finished_at.ends_with('Z'));
    assert!(
        ["kvm", "tcg"].contains(&vm.accel.as_str()),
        "accel {:?}",
        vm.accel
    );
    assert!(!vm.accel_reason.is_empty());
    assert!(vm.qemu_version.starts_with("QEMU emulator version"));
    assert_eq!(vm.image_sha256.len(), 64);
    assert_eq!(vm.image_builder_mode, "fakechroot");
    assert_eq!(vm.gate_binary_sha256.len(), 64);
    assert!(vm.guest_mem_used_mib.unwrap_or(0) > 0);
    // This run resumed the snapshot its sandbox's first run made (seeded or made here), through
    // the layer that holds this gate binary (made here first unless the seed had it: then the
    // phase layer_make comes first): its boot is the resume's three stages, the agent's setup
    // ending before the login that waits for it.
    let phases: Vec<&str> = vm
        .phases
        .iter()
        .map(|p| p.name.as_str())
        .filter(|p| *p != "layer_make")
        .collect();
    assert_eq!(
        phases,
        [
            "image",
            "resume_load",
            "resume_setup",
            "resume_answer",
            "boot_to_ssh",
            "copy",
            "gates",
            "fetch"
        ]
    );

    // Every gate ran: nothing is NOT_RUN for want of a tool, and cleanup proved the tree gone.
    for g in &r.gates {
        assert_ne!(
            g.status,
            Status::NotRun,
            "{} did not run: {}",
            g.name,
            g.reason
        );
    }
    let cleanup = r.gate(GateName::Cleanup).unwrap();
    assert_eq!(cleanup.status, Status::Pass, "{}", cleanup.reason);
    assert!(r.environment.criu_version.is_some());

    // Every artifact verifies, the serial console log among them.
    let files = sharedos_rig::judge::ReportDir::open(&out_dir).unwrap();
    assert!(sharedos_rig::judge::artifacts::check(&files, &r.artifacts, true).is_empty());
    for want in [
        "serial.log",
        "guest/report.json",
        "guest/png/live.png",
        "guest/criu/dump.log",
    ] {
        assert!(
            r.artifacts.iter().any(|a| a.path == want),
            "{want} not archived"
        );
    }
    let serial = std::fs::read_to_string(out_dir.join("serial.log")).unwrap();
    assert!(serial.contains("SHAREDOS-READY"));

    // The plan prints the QEMU line the run started, from the same builder: token for token,
    // but for the values that exist only once a run is under way.
    let mut plan_args = args.clone();
    plan_args.push("--plan".into());
    let plan = sb.run_as_user(&sb.xtask, &strs(&plan_args));
    assert!(plan.status.success());
    // This run resumed the snapshot the first run of the sandbox made.
    let step = match vm.start.as_ref().map(|s| s.how.as_str()) {
        Some("resumed") => "resume",
        _ => "qemu",
    };
    let planned = planned_qemu(&String::from_utf8_lossy(&plan.stdout), step, &vm.accel);
    assert_eq!(
        planned.len(),
        vm.qemu_argv.len(),
        "plan {planned:?}\nrun {:?}",
        vm.qemu_argv
    );
    for (p, r) in planned.iter().zip(&vm.qemu_argv) {
        assert!(
            p == r || p.contains('<') || p.contains("hostfwd=tcp:127.0.0.1:0-:22"),
            "the plan says {p:?} where the run had {r:?}"
        );
    }

    // `sharedos-rig verify` agrees with the run's exit code.
    verify_exits(&out_dir, code);
    // In the pinned guest the CRIU gates must pass: only the human review is left.
    assert_eq!(
        code,
        3,
        "gates:\n{}",
        r.gates
            .iter()
            .map(|g| format!("{} {} {}\n", g.name, g.status, g.reason))
            .collect::<String>()
    );
    assert!(
        processes_mentioning(out_dir.to_str().unwrap()).is_empty(),
        "a process outlived the run"
    );

    // The signed report verifies against the key, and fails once one byte of it changes.
    let allowed = sb.dir.join("allowed_signers");
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    std::fs::write(&allowed, format!("ci@example {public}")).unwrap();
    let verify_signed = || {
        Command::new(env!("CARGO_BIN_EXE_sharedos-rig"))
            .arg("verify")
            .arg(&out_dir)
            .arg("--allowed-signers")
            .arg(&allowed)
            .output()
            .unwrap()
    };
    let signed = verify_signed();
    assert_eq!(
        signed.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&signed.stdout)
    );
    let mut bytes = std::fs::read(out_dir.join("report.json")).unwrap();
    let at = bytes
        .iter()
        .position(|b| *b == b'6')
        .expect("a digit to change");
    bytes[at] = b'7';
    std::fs::write(out_dir.join("report.json"), bytes).unwrap();
    let changed = verify_signed();
    assert_eq!(changed.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&changed.stdout)
        .contains("report.json changed after it was signed"));
}

/// `vm-run -- --copies 3 --guest-ksm`: the density gate runs after reset, restores three copies
/// at once, records their latency and memory, resets each, and the host verifies and labels the
/// figures. bookworm's kernel (6.1) has no PR_SET_MEMORY_MERGE: the guest KSM reading is
/// NOT_RUN, saying so.
fn density_of_three_copies_is_measured_and_verified(sb: &Sandbox, gate: &Path) {
    use sharedos_report::model::density::{DensityData, Stop};
    use sharedos_report::report::Copies;
    let out_dir = sb.dir.join("reports/density");
    let mut args = vm_run_args(sb, gate, &out_dir, "auto");
    args.extend(["--", "--copies", "3", "--guest-ksm"].map(String::from));
    let out = sb.run_as_user(&sb.xtask, &strs(&args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    let r = read_report(&out_dir);
    let gates = || {
        r.gates
            .iter()
            .map(|g| format!("{} {} {}\n", g.name, g.status, g.reason))
            .collect::<String>()
    };
    assert_eq!(out.status.code(), Some(3), "{stderr}\ngates:\n{}", gates());
    // The second run with one gate binary resumed the layer the first one left, which holds
    // it: the binary was not copied again, and was still checked against the host's sha256.
    let vm = r.vm.as_ref().expect("vm provenance");
    let snap = vm.start.as_ref().and_then(|s| s.snapshot.as_ref());
    assert_eq!(
        snap.and_then(|s| s.gate_sha256.as_deref()),
        Some(vm.gate_binary_sha256.as_str()),
        "{stderr}"
    );
    assert!(snap.is_some_and(|s| s.base_state_sha256.is_some()));
    assert!(
        !vm.phases.iter().any(|p| p.name == "layer_make"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "gate binary not copied again: the guest was resumed from the snapshot layer that holds it; sha256 checked in the guest: {}",
            vm.gate_binary_sha256
        )),
        "{stderr}"
    );
    assert!(!stderr.contains("gate binary copied in"), "{stderr}");
    assert_eq!(r.options.copies, Some(Copies::Count(3)));
    let names: Vec<GateName> = r.gates.iter().map(|g| g.name).collect();
    assert_eq!(names, GateName::sequence(true));
    let g = r.gate(GateName::Density).unwrap();
    assert_eq!(g.status, Status::Pass, "{}", g.reason);
    let d: DensityData = serde_json::from_value(g.data["density"].clone()).unwrap();
    assert_eq!((d.copies, d.stopped_by), (3, Stop::Count));
    assert_eq!(d.restore_ms.len(), 3);
    assert!(d.restore_ms.iter().all(|ms| *ms > 0), "{:?}", d.restore_ms);
    assert!(d.restore_ms_p95 >= d.restore_ms_median.map(|m| m as u64));
    assert_eq!(d.per_copy.len(), 3);
    for c in &d.per_copy {
        // Xvfb, xterm, the app and the tree's PID 1 at least.
        assert!(c.processes >= 4, "{c:?}");
        assert!(c.errors.is_empty(), "{c:?}");
        assert!(c.mem.pss_kib > 0 && c.mem.uss_kib <= c.mem.rss_kib, "{c:?}");
    }
    assert_eq!(
        d.total.pss_kib,
        d.per_copy.iter().map(|c| c.mem.pss_kib).sum::<u64>()
    );
    assert!(d.mem_used_with_copies_kib > d.mem_used_before_kib, "{d:?}");
    // Each copy reset in turn: ended, restored again, and back at the dump-time state.
    assert_eq!(d.reset_ms.len(), 3, "{d:?}");
    let k = d.guest_ksm.as_ref().expect("the guest KSM reading");
    assert_eq!(k.status, Status::NotRun, "{k:?}");
    assert!(
        k.reason.contains("6.1.0") && k.reason.contains("no PR_SET_MEMORY_MERGE"),
        "{k:?}"
    );
    for check in [
        "all_same_token",
        "all_counters_continue",
        "all_x_servers_in_copy",
        "all_reset",
        "copies_killed",
    ] {
        let c = g.check(check).unwrap_or_else(|| panic!("no {check}"));
        assert!(
            c.passed && c.value["failed"].as_array().map_or(true, |f| f.is_empty()),
            "{c:?}"
        );
    }
    assert_eq!(r.gate(GateName::Cleanup).unwrap().status, Status::Pass);
    assert!(processes_mentioning(out_dir.to_str().unwrap()).is_empty());

    // verify agrees, and the host labels the figures with the accelerator it recorded.
    let rig = |cmd: &str| {
        Command::new(env!("CARGO_BIN_EXE_sharedos-rig"))
            .arg(cmd)
            .arg(&out_dir)
            .output()
            .unwrap()
    };
    verify_exits(&out_dir, 3);
    let show = rig("show");
    let text = String::from_utf8_lossy(&show.stdout);
    let accel = &r.vm.as_ref().unwrap().accel;
    assert!(
        text.contains(&format!("restore ms per copy [{accel}]"))
            && text.contains(&format!("copies per GiB [{accel}], by PSS")),
        "{text}"
    );
}

/// The full run and the density run resumed one snapshot (the first run made it): the same
/// machine up to the moment it was saved. Nothing each run drew after the resume may repeat:
/// the tokens its apps made, its client key, its nonce.
fn two_resumes_of_one_snapshot_share_nothing_of_their_own(sb: &Sandbox) {
    let [a, b] = ["run", "density"].map(|n| read_report(&sb.dir.join("reports").join(n)));
    let [sa, sb_] = [&a, &b].map(|r| {
        r.vm.as_ref()
            .and_then(|v| v.start.clone())
            .expect("the report says how the guest came up")
    });
    for s in [&sa, &sb_] {
        assert_eq!(s.how, "resumed", "{s:?}");
        assert!(s.rng_reseeded, "{s:?}");
        assert_eq!(s.nonce, s.nonce_echo, "{s:?}");
        assert!(s.client_key.starts_with("ssh-ed25519 "), "{s:?}");
    }
    assert_eq!(
        sa.snapshot.as_ref().unwrap().state_sha256,
        sb_.snapshot.as_ref().unwrap().state_sha256
    );
    assert_ne!(sa.nonce, sb_.nonce);
    assert_ne!(sa.client_key, sb_.client_key);
    // The snapshot's key is on the resumed QEMU's command line; the run's own is not.
    let argv = a.vm.as_ref().unwrap().qemu_argv.join(" ");
    let own = sa.client_key.split(' ').nth(1).unwrap();
    assert!(!argv.contains(own), "{argv}");
    let (ta, tb) = (app_tokens(&a), app_tokens(&b));
    assert!(!ta.is_empty() && !tb.is_empty());
    assert!(
        ta.is_disjoint(&tb),
        "tokens repeated across resumes: {ta:?} {tb:?}"
    );
}

/// Every state-app token a report holds.
fn app_tokens(r: &sharedos_report::report::Report) -> std::collections::BTreeSet<String> {
    let text = serde_json::to_string(&r.gates).unwrap();
    text.split("\"token\":\"")
        .skip(1)
        .filter_map(|rest| rest.get(..32))
        .filter(|t| t.chars().all(|c| c.is_ascii_hexdigit()))
        .map(str::to_string)
        .collect()
}

/// The next run (the fidelity options) must find the damage before QEMU loads the state, make
/// the snapshot again, and say why in its report. The snapshot these runs resume is the layer
/// that holds their gate binary (its key_sha256 names its directory).
fn damage_the_snapshots_state(sb: &Sandbox) {
    let r = read_report(&sb.dir.join("reports/run"));
    let key = r.vm.unwrap().start.unwrap().snapshot.unwrap().key_sha256;
    let state = sb
        .dir
        .join(format!("cache/snapshots/bookworm-{}", &key[..16]))
        .join("state");
    let mut bytes = std::fs::read(&state).unwrap();
    let at = bytes.len() / 3;
    bytes[at] ^= 0xff;
    std::fs::write(&state, bytes).unwrap();
}

/// `--userns --cgroup cpu=1,memory=512M --cow-root` in one run on bookworm. Measured there
/// (criu 3.17.1, kernel 6.1): CRIU dumps the tree in its user namespace (its /dev binds named
/// external), restores each copy into a user namespace of its own with the same map, into the
/// cgroup made for it (`--cgroup-root`), onto a writable root of its own (`--root` an overlay);
/// so every option check must pass and the report's fidelity list must name none of the three
/// differences, while the four the options do not touch stay. A FAIL here is a regression, not
/// an honest finding: on this image the combination holds.
fn fidelity_options_all_at_once(sb: &Sandbox, gate: &Path) {
    let out_dir = sb.dir.join("reports/options");
    let mut args = vm_run_args(sb, gate, &out_dir, "auto");
    args.push("--".into());
    args.extend(common::ALL_FIDELITY_OPTIONS.map(String::from));
    let out = sb.run_as_user(&sb.xtask, &strs(&args));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(2), "the rig failed:\n{stderr}");
    let r = read_report(&out_dir);
    // The state of the layer holding the gate binary was damaged just before this run: it
    // was refused and made again over the snapshot, which passed its checks.
    let start = r.vm.as_ref().unwrap().start.clone().unwrap();
    assert_eq!(start.how, "resumed");
    assert!(
        start.reason.starts_with(
            "the snapshot layer holding this gate binary was damaged: state has sha256"
        ),
        "{start:?}"
    );
    assert!(
        start
            .reason
            .ends_with("made it over the snapshot, then resumed it"),
        "{start:?}"
    );
    assert!(r
        .vm
        .as_ref()
        .unwrap()
        .phases
        .iter()
        .any(|p| p.name == "layer_make"));
    let summary: String = r
        .gates
        .iter()
        .map(|g| format!("{} {} {}\n", g.name, g.status, g.reason))
        .collect();
    assert_eq!(out.status.code(), Some(3), "gates:\n{summary}");
    common::assert_all_fidelity_options_held(&r);
    verify_exits(&out_dir, 3);
}

/// `sharedos-rig verify` of a report directory exits with `code`.
fn verify_exits(dir: &Path, code: i32) {
    let verify = Command::new(env!("CARGO_BIN_EXE_sharedos-rig"))
        .arg("verify")
        .arg(dir)
        .output()
        .unwrap();
    assert_eq!(
        verify.status.code(),
        Some(code),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

fn vm_exec_runs_one_command_and_exits_with_its_code(sb: &Sandbox) {
    let out = vm_exec(sb, &["--", "uname -r; echo to-stderr >&2; exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    // Standard error is merged in; sshd may interleave the two streams in either order.
    assert!(
        lines.iter().any(|l| l.ends_with("-cloud-amd64")),
        "{stdout}"
    );
    assert!(lines.contains(&"to-stderr"), "{stdout}");
    // Its QEMU names the sandbox's cache; other users' runs on this machine do not.
    let left = processes_mentioning(sb.dir.to_str().unwrap());
    assert!(left.is_empty(), "vm-exec left {left:?}");
}

/// Each lie of a lying criu is caught by the gate that looks at what it breaks, in the pinned
/// guest, where CRIU works.
/// The lies the ci tier runs: one or more for each gate a lie targets, so that every kind of
/// check is shown failing in every run of `.ci/run`; the whole suite (every lie of the default
/// workload, each turning its own check false) is the extended tier's, as
/// `the_whole_lying_criu_suite_in_the_guest` below.
const CI_TIER_LIES: &[&str] = &[
    "dump-writes-nothing",
    "dump-drops-a-process",
    "restore-a-restores-nothing",
    "restore-a-wrong-pixels",
    "restore-b-is-copy-a",
    "restore-reset-is-copy-b",
    "restore-b-without-cgroup-limits",
    "density-copy-wrong-token",
];

/// The ci tier's lies are lies of the suite, of the default workload, and cover every gate a
/// lie targets: checked without a VM, so a renamed lie fails here at once.
#[test]
fn the_ci_tier_lies_are_the_suite_s_and_cover_every_target() {
    let names: Vec<String> = CI_TIER_LIES.iter().map(|n| n.to_string()).collect();
    let chosen =
        sharedos_gate::lies::chosen_lies(&names, sharedos_report::report::Workload::Xterm).unwrap();
    assert_eq!(chosen.len(), CI_TIER_LIES.len());
    let default =
        sharedos_gate::lies::chosen_lies(&[], sharedos_report::report::Workload::Xterm).unwrap();
    for l in &chosen {
        assert!(
            default.iter().any(|d| d.name == l.name),
            "{} is not a lie of the default workload",
            l.name
        );
    }
    for target in sharedos_gate::lies::LIES.iter().map(|l| l.target) {
        assert!(
            chosen.iter().any(|l| l.target == target),
            "no ci-tier lie targets {target}"
        );
    }
}

/// Every lie of the default workload, in a guest resumed from the seed's snapshot: each caught
/// by the check it targets. Minutes (a gate run per lie), so the extended tier's.
#[test]
#[ignore = "runs every lie of the suite in one guest (~5 min under TCG); the extended tier's: cargo xtask test --tier extended"]
fn the_whole_lying_criu_suite_in_the_guest() {
    let Some(sb) = Sandbox::new_or_skip("lies") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    lying_criu_suite_in_the_guest(&sb, &gate, &[]);
}

/// `lie-suite` in the guest with `only` (every lie of the default workload when empty): each
/// one chosen must be caught.
fn lying_criu_suite_in_the_guest(sb: &Sandbox, gate: &Path, only: &[&str]) {
    let mut command =
        String::from("/usr/local/bin/sharedos-gate lie-suite --out /root/lies --step-timeout 180");
    for name in only {
        command.push_str(" --lie ");
        command.push_str(name);
    }
    let out = vm_exec(
        sb,
        &[
            "--timeout",
            "1800",
            "--gate-binary",
            gate.to_str().unwrap(),
            "--",
            &command,
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}");
    // The default suite runs the lies of the default workload; the desktop's run in an image
    // that holds its programs (`lie-suite --workload desktop`, docs/running.md).
    let all = sharedos_gate::lies::chosen_lies(&[], sharedos_report::report::Workload::Xterm)
        .unwrap()
        .len();
    assert!(all >= 8, "the issue asks for at least eight lies");
    let n = if only.is_empty() { all } else { only.len() };
    assert!(
        stdout.contains(&format!("{n} of {n} lies caught")),
        "{stdout}"
    );
    for target in [
        "dump",
        "restore_live_process",
        "restore_x_state",
        "isolation",
        "reset",
        "density",
    ] {
        assert!(
            sharedos_gate::lies::LIES
                .iter()
                .filter(|l| only.is_empty() || only.contains(&l.name))
                .any(|l| l.target.as_str() == target),
            "no lie chosen targets {target}"
        );
    }
}

fn interrupted_during_the_gates_exits_2_with_a_partial_report_and_nothing_left(
    sb: &Sandbox,
    gate: &Path,
    how: Interrupt,
) {
    let out_dir = sb.dir.join(format!("reports/{how:?}"));
    let mut args = vm_run_args(sb, gate, &out_dir, "tcg");
    if how == Interrupt::SigtermTheRigKeepingTheVm {
        args.push("--keep-vm".into());
    }
    let mut child = sb
        .command_as_user(&sb.xtask, &strs(&args))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait for the gates to be under way, then interrupt.
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let mut seen = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(1200);
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| panic!("vm-run ended before the gates ran:\n{}", seen.join("\n")))
            .unwrap();
        seen.push(line.clone());
        if line.contains("gate 2/10") {
            break;
        }
        assert!(Instant::now() < deadline, "the gates never started");
    }
    let qemu = processes_mentioning(&out_dir.join("serial.log").display().to_string());
    let qemu: Vec<_> = qemu
        .into_iter()
        .filter(|(_, c)| c.starts_with("qemu-system"))
        .collect();
    assert_eq!(qemu.len(), 1, "{qemu:?}");
    // setpriv and env exec the rig, so the child's pid is the rig's.
    let (pid, signal) = match how {
        Interrupt::KillQemu => (qemu[0].0, nix::sys::signal::Signal::SIGKILL),
        Interrupt::SigtermTheRig | Interrupt::SigtermTheRigKeepingTheVm => {
            (child.id() as i32, nix::sys::signal::Signal::SIGTERM)
        }
    };
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal).unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    let stdout = {
        use std::io::Read;
        let mut s = String::new();
        child.stdout.take().unwrap().read_to_string(&mut s).unwrap();
        s
    };
    assert_eq!(
        status.code(),
        Some(2),
        "stderr:\n{}\n{}",
        seen.join("\n"),
        rest.join("\n")
    );
    assert_eq!(
        stdout.lines().last().map(PathBuf::from),
        Some(out_dir.clone())
    );
    let r = read_report(&out_dir);
    assert_eq!(r.exit_code, 2);
    assert!(!r.all_gates_pass);
    let vm = r.vm.as_ref().unwrap();
    let rig_error = vm.rig_error.as_deref().unwrap_or("");
    assert!(rig_error.len() > 10, "{rig_error:?}");
    if how != Interrupt::KillQemu {
        assert!(
            rig_error.contains("interrupted by SIGTERM"),
            "{rig_error:?}"
        );
    }
    assert!(
        r.artifacts.iter().any(|a| a.path == "serial.log"),
        "the serial log is archived"
    );
    let files = sharedos_rig::judge::ReportDir::open(&out_dir).unwrap();
    assert!(sharedos_rig::judge::artifacts::check(&files, &r.artifacts, true).is_empty());
    // What the gates said before the interruption is kept, the rest is NOT_RUN.
    assert_eq!(
        r.gate(GateName::Prerequisites).unwrap().status,
        Status::Pass
    );
    assert_eq!(r.gate(GateName::Cleanup).unwrap().status, Status::NotRun);
    assert!(
        processes_mentioning(out_dir.to_str().unwrap()).is_empty(),
        "a process outlived the run"
    );
    assert!(processes_mentioning(gate.to_str().unwrap()).is_empty());
    // The run's private key and overlay went with it.
    let prefix = format!("sharedos-rig-run-{}-", child.id());
    let left: Vec<_> = std::fs::read_dir("/tmp")
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "{how:?} left {left:?}");
}

#[test]
fn plan_starts_nothing() {
    let dir = std::env::temp_dir().join(format!("vmrun-plan-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_sharedos-rig"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(out.status.success());
    let xtask = common::xtask_binary();
    let out = Command::new(xtask)
        .args([
            "vm-run",
            "--plan",
            "--gate-binary",
            "/nonexistent/gate",
            "--out",
        ])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "qemu-system-x86_64",
        "-accel tcg,tb-size=256 -cpu max",
        "restrict=on",
        "qemu-img create",
        "ssh-keygen",
        "sha256sum",
        "diagnose --work",
    ] {
        assert!(text.contains(needle), "plan lacks {needle}:\n{text}");
    }
    assert!(!dir.exists(), "plan created the report directory");
    assert!(processes_mentioning(&dir.display().to_string()).is_empty());
}

/// The plans whose QEMU lines must not change unless a change means them to: each case's
/// arguments, and the file under tests/data/plan/ that holds what it printed from `[keys]` on.
/// The image's section before it is left out: it names this process and this checkout.
const PLAN_CASES: &[(&str, &[&str])] = &[
    (
        "vm-run-tcg",
        &[
            "vm-run",
            "--accel",
            "tcg",
            "--gate-binary",
            "/nonexistent/gate",
        ],
    ),
    (
        "vm-run-auto-keep",
        &[
            "vm-run",
            "--accel",
            "auto",
            "--keep-vm",
            "--gate-binary",
            "/nonexistent/gate",
        ],
    ),
    (
        "vm-run-kvm-cold-small",
        &[
            "vm-run",
            "--accel",
            "kvm",
            "--cold",
            "--memory",
            "512",
            "--cpus",
            "1",
            "--gate-binary",
            "/nonexistent/gate",
            "--",
            "--copies",
            "3",
        ],
    ),
    (
        "vm-run-desktop",
        &[
            "vm-run",
            "--accel",
            "tcg",
            "--image",
            "bookworm-desktop",
            "--gate-binary",
            "/nonexistent/gate",
            "--",
            "--workload",
            "desktop",
        ],
    ),
    (
        "vm-exec-tcg",
        &["vm-exec", "--accel", "tcg", "--", "uname", "-r"],
    ),
    (
        "vm-exec-gate",
        &[
            "vm-exec",
            "--accel",
            "tcg",
            "--gate-binary",
            "/nonexistent/gate",
            "--",
            "true",
        ],
    ),
    (
        "vm-exec-gate-cold",
        &[
            "vm-exec",
            "--accel",
            "tcg",
            "--cold",
            "--memory",
            "2048",
            "--cpus",
            "4",
            "--gate-binary",
            "/nonexistent/gate",
            "--",
            "criu",
            "check",
        ],
    ),
];

/// A plan from `[keys]` on, without what depends on this host's QEMU (whether it was built with
/// seccomp, which adds `-sandbox` or a note saying it has none).
fn plan_from_keys(plan: &str) -> String {
    let mut out = String::new();
    for line in plan.lines().skip_while(|l| !l.starts_with("[keys]")) {
        if line.contains("(this QEMU has no -sandbox") {
            continue;
        }
        let line = line.replace(
            " -sandbox on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
            "",
        );
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// `--plan` prints the same QEMU lines (and the steps around them) for the same arguments as
/// tests/data/plan/ holds: a refactor below the command changes none of them. Nothing is
/// started. SHAREDOS_RIG_BLESS_PLANS=1 writes the files anew, for a change that means it.
#[test]
fn plans_print_what_tests_data_plan_holds() {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/plan");
    let bless = std::env::var_os("SHAREDOS_RIG_BLESS_PLANS").is_some();
    let xtask = common::xtask_binary();
    for (name, args) in PLAN_CASES {
        let (command, rest) = args.split_first().expect("a command");
        let mut cmd = Command::new(&xtask);
        cmd.args([*command, "--plan", "--cache-dir", "/nonexistent/plan-cache"]);
        if *command == "vm-run" {
            cmd.args(["--out", "/nonexistent/plan-report"]);
        }
        let out = cmd.args(rest).output().unwrap();
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let got = plan_from_keys(&String::from_utf8_lossy(&out.stdout));
        assert!(
            got.contains("qemu-system-x86_64"),
            "{name}: no QEMU line:\n{got}"
        );
        let file = data.join(format!("{name}.txt"));
        if bless {
            std::fs::create_dir_all(&data).unwrap();
            std::fs::write(&file, &got).unwrap();
            continue;
        }
        let want =
            std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            assert_eq!(
                g,
                w,
                "{name}: line {} differs from {}",
                i + 1,
                file.display()
            );
        }
        assert_eq!(got, want, "{name}: differs from {}", file.display());
    }
}

/// `--accel auto` decides once per host boot, QEMU and guest kernel: the first `vm-exec -- true`
/// probes KVM and keeps its verdict in the image cache, the second boots on that verdict
/// without probing and says so, with the verdict's time, in the accelerator's reason. Run as
/// root: /dev/kvm is root's alone on this project's machines, and a user who cannot open it
/// gets TCG at once, with no probe to remember.
#[test]
#[ignore = "boots VMs: minutes; run with --include-ignored"]
fn accel_auto_probes_once_and_then_boots_on_its_cached_verdict() {
    const NAME: &str = "accel_auto_probes_once_and_then_boots_on_its_cached_verdict";
    let Some(sb) = Sandbox::new_or_skip("accelcache") else {
        return;
    };
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    let cache = sb.dir.join("cache");
    let exec = |accel: &str| {
        let out = Command::new(&sb.xtask)
            .args(["vm-exec", "--images-dir", "images", "--cache-dir"])
            .arg(&cache)
            .args(["--mode", "fakechroot", "--accel", accel, "--", "true"])
            .current_dir(&sb.dir)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        eprintln!(
            "--- vm-exec --accel {accel} -- true ({}):\n{stderr}",
            out.status
        );
        assert_eq!(out.status.code(), Some(0), "{stderr}");
        stderr
    };
    let accel_line = |stderr: &str| -> String {
        stderr
            .lines()
            .find_map(|l| l.split_once("] accelerator: ").map(|(_, a)| a.to_string()))
            .unwrap_or_else(|| panic!("no accelerator line:\n{stderr}"))
    };
    let verdicts = || -> Vec<PathBuf> {
        std::fs::read_dir(cache.join("accel"))
            .map(|d| d.flatten().map(|e| e.path()).collect())
            .unwrap_or_default()
    };

    let first = exec("auto");
    if let Err(why) = sharedos_rig::vm::accel::kvm_openable() {
        // Nothing to probe, so nothing to remember: said, and nothing kept.
        assert!(
            accel_line(&first).starts_with("tcg (auto: /dev/kvm"),
            "{first}"
        );
        assert!(!first.contains("verdict"), "{first}");
        assert!(verdicts().is_empty(), "{:?}", verdicts());
        common::skip::cannot_run(NAME, &format!("no KVM probe runs here: {why}"));
        return;
    }
    assert!(
        first.contains("auto: no verdict cached yet: probing KVM"),
        "{first}"
    );
    let first_accel = accel_line(&first);
    assert!(!first_accel.contains("cached verdict"), "{first_accel}");
    let kept = verdicts();
    assert_eq!(kept.len(), 1, "{kept:?}");
    let record: sharedos_rig::vm::accel_cache::Record =
        serde_json::from_slice(&std::fs::read(&kept[0]).unwrap()).unwrap();
    assert!(
        first_accel.starts_with(&format!("{} (", record.accel)),
        "{first_accel} vs {record:?}"
    );
    assert!(
        first.contains(&format!("auto: verdict {} cached", record.accel)),
        "{first}"
    );

    let second = exec("auto");
    let second_accel = accel_line(&second);
    assert!(
        second_accel.starts_with(&format!(
            "{} (auto: cached verdict of {}",
            record.accel, record.decided_at
        )),
        "{second_accel}"
    );
    assert!(!second.contains("probing KVM"), "{second}");

    // A forced accelerator neither reads nor writes the verdict.
    let forced = exec("tcg");
    assert!(
        accel_line(&forced).starts_with("tcg (forced with --accel tcg)"),
        "{forced}"
    );
    assert!(!forced.contains("verdict"), "{forced}");
    assert_eq!(verdicts(), kept);
    let left = processes_mentioning(sb.dir.to_str().unwrap());
    assert!(left.is_empty(), "vm-exec left {left:?}");
}
