//! `xtask vm-compare` end to end, as an unprivileged user on bookworm with N = 4, all three
//! arms: the shared-OS column (four CRIU copies of one dump in one guest), the VM-each column
//! (one guest saved with its tree up, resumed four times at once, then once more as a reset)
//! and the VM-template column (the same, its copies clones mapping the template's RAM file
//! copy-on-write), each checked, side by side in compare.json. And the cheap part: an N that
//! cannot fit is refused before anything boots.
//!
//! Minutes, so `#[ignore]`d in a plain `cargo test` but for the bad-input test.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use common::{gate_binary, last_line, processes_mentioning, read_report, Sandbox};
use serde_json::Value;
use sharedos_report::report::{GateName, Status};
use std::path::Path;
use std::process::Command;

#[test]
#[ignore = "boots twelve VMs: minutes; run with --include-ignored"]
fn vm_compare_bookworm_four_copies_every_arm_checked() {
    let Some(sb) = Sandbox::new_or_skip("vmcompare") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    let out_dir = sb.dir.join("reports/compare");
    let args = compare_args(&sb, &gate, &out_dir, &["--copies", "4"]);
    refused_before_booting(&sb, &args, &out_dir);
    let (code, s, said) = run_compare(&sb, &args, &out_dir, false);
    assert_eq!(code, 0, "{said}\n{s:#}");
    assert_eq!(s["verdict"], "PASS", "{s:#}");
    assert_eq!(s["accel"], "tcg");

    // The shared-OS column: four copies, each measured.
    assert_eq!(
        s["shared_os"]["per_copy"].as_array().unwrap().len(),
        4,
        "{s:#}"
    );
    assert_eq!(
        s["shared_os"]["restore_ms"].as_array().unwrap().len(),
        4,
        "{s:#}"
    );
    // Its resets, each copy's, as its density gate timed them.
    let reset = s["shared_os"]["reset_ms"].as_array().unwrap();
    assert!(
        reset.len() == 4 && reset.iter().all(|r| r.as_u64().unwrap_or(0) > 0),
        "{s:#}"
    );
    // The guest's KSM was asked for (--guest-ksm auto), and bookworm's 6.1 cannot give it.
    let k = &s["shared_os"]["ksm"];
    assert_eq!(k["status"], "NOT_RUN", "{k:#}");
    assert!(
        k["reason"]
            .as_str()
            .unwrap()
            .contains("no PR_SET_MEMORY_MERGE"),
        "{k:#}"
    );

    // Both VM arms: four copies and a reset each, each a QEMU the host measured, each a report
    // whose live probe held the copy to the fork-time state.
    let mut nonces = Vec::new();
    let each = vm_column_checked(&s, "vm_each", &out_dir, &mut nonces);
    let template = vm_column_checked(&s, "vm_template", &out_dir, &mut nonces);
    // Every copy of an arm holds the one token the app had when its guest was saved; the two
    // arms saved two guests.
    assert_ne!(each, template);
    // A clone maps the template's RAM copy-on-write: it holds privately only what it wrote,
    // far less of the guest's RAM than a VM that read the whole save into memory of its own.
    let ram_uss = |col: &str| {
        s[col]["copies"].as_array().unwrap()[0]["host_split"]["guest_ram"]["uss_kib"]
            .as_u64()
            .unwrap()
    };
    assert!(
        ram_uss("vm_template") < ram_uss("vm_each") / 2,
        "{} KiB against {} KiB",
        ram_uss("vm_template"),
        ram_uss("vm_each")
    );
    let t = &s["vm_template"]["template"];
    assert_eq!(t["bytes"].as_u64(), Some(1024 << 20), "{t:#}");
    let resident = t["resident_bytes"].as_u64().unwrap();
    assert!(resident > 0 && resident < 1024 << 20, "{t:#}");
    assert_eq!(s["vm_template"]["reclaim"]["status"], "NOT_RUN");
    // No template RAM file is left on the host's tmpfs.
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .starts_with("sharedos-rig-template-")
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
    // KSM is the host's, and this user may not turn it on: NOT_RUN, saying why. The guests gave
    // memory back, each read again.
    assert_eq!(s["vm_each"]["ksm"]["status"], "NOT_RUN", "{s:#}");
    assert!(
        s["vm_each"]["ksm"]["reason"]
            .as_str()
            .unwrap()
            .contains("not writable by this user"),
        "{s:#}"
    );
    assert_eq!(s["vm_each"]["reclaim"]["status"], "PASS", "{s:#}");
    assert_eq!(
        s["vm_each"]["reclaim"]["per_copy"]
            .as_array()
            .unwrap()
            .len(),
        4
    );
    // Each copy a resume of its own, across both arms.
    nonces.sort();
    nonces.dedup();
    assert_eq!(nonces.len(), 10, "{nonces:?}");
    // The table says which design is which, and the accelerator.
    assert!(
        said.contains("shared-OS (CRIU)")
            && said.contains("VM each")
            && said.contains("VM template"),
        "{said}"
    );
    assert!(said.contains("the ratios are the result"), "{said}");
    // No QEMU of the comparison outlives it.
    assert!(processes_mentioning(out_dir.to_str().unwrap()).is_empty());

    // Read back: `show` judges it again from its reports, to the same verdict and no warning;
    // `diff` of it with itself runs; the html page draws both charts.
    let rig = Path::new(env!("CARGO_BIN_EXE_sharedos-rig"));
    let shown = Command::new(rig)
        .arg("show")
        .arg(&out_dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(
        shown.status.code(),
        Some(0),
        "{text}\n{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        text.lines()
            .last()
            .is_some_and(|l| l.starts_with("judged again from its reports: PASS (exit 0)")),
        "{text}"
    );
    assert!(!text.contains("warning:"), "{text}");
    let diffed = Command::new(rig)
        .arg("diff")
        .arg(&out_dir)
        .arg(&out_dir)
        .output()
        .unwrap();
    let d = String::from_utf8_lossy(&diffed.stdout);
    assert_eq!(
        diffed.status.code(),
        Some(0),
        "{d}\n{}",
        String::from_utf8_lossy(&diffed.stderr)
    );
    assert!(
        d.contains("verdict (judged again)") && !d.contains("differs"),
        "{d}"
    );
    common::chromium::check_compare_page(rig, &out_dir, &sb.dir.join("chromium"));
}

/// One VM arm's column (`vm_each` or `vm_template`): four copies and a reset, each a QEMU the
/// host measured, each a report whose live probe held the copy to the fork-time state, and
/// each resumed from that arm's save with a nonce of its own (pushed to `nonces`). Returns the
/// one fork-time token every copy of the arm holds.
fn vm_column_checked(
    s: &serde_json::Value,
    col: &str,
    out_dir: &Path,
    nonces: &mut Vec<Option<String>>,
) -> serde_json::Value {
    let copies = s[col]["copies"].as_array().unwrap();
    assert_eq!(copies.len(), 4, "{s:#}");
    let mut tokens = Vec::new();
    let mut macs = Vec::new();
    for c in copies.iter().chain([&s[col]["reset"]]) {
        let pss = c["host_mem"]["pss_kib"].as_u64().unwrap_or(0);
        // A guest of 1024 MiB with a tree up: its QEMU holds far more than the tree alone,
        // even a clone that shares the template's pages.
        assert!(pss > 60 * 1024, "{c:#}");
        // The same QEMU by what holds its memory: the guest's RAM, and under TCG a translation
        // cache; the parts add up to about the whole (read a moment apart).
        let part = |p: &str| c["host_split"][p]["pss_kib"].as_u64().unwrap_or(0);
        let (ram, tcg, own) = (
            part("guest_ram"),
            part("translation_cache"),
            part("qemu_own"),
        );
        // A VM-each copy holds its guest's RAM of its own; a clone only what it wrote, plus its
        // share of the template's pages it maps, which can be a few MiB.
        let ram_floor = if col == "vm_each" { 50 * 1024 } else { 0 };
        assert!(ram > ram_floor && tcg > 0 && own > 0, "{c:#}");
        let sum = ram + tcg + own;
        assert!(
            sum.abs_diff(pss) < pss / 10,
            "{sum} KiB in parts, {pss} whole: {c:#}"
        );
        assert!(c["resume_ms"].as_u64().unwrap_or(0) > 0, "{c:#}");
        let r = read_report(&out_dir.join(c["report"].as_str().unwrap()));
        let probe = r.gate(GateName::LiveStateProbe).unwrap();
        assert_eq!(probe.status, Status::Pass, "{}", probe.reason);
        for check in [
            "fork_token_kept",
            "fork_counter_continues",
            "fork_same_windows",
            "fork_same_framebuffer",
            "fork_own_mac",
        ] {
            assert!(probe.check(check).is_some_and(|c| c.passed), "{check}");
        }
        tokens.push(probe.check("fork_token_kept").unwrap().value["seen"].clone());
        // Its card took the MAC the host gave it with its go, each copy's its own.
        let mac = probe.check("fork_own_mac").unwrap().value["seen"].clone();
        assert_eq!(mac, c["mac"], "{c:#}");
        assert!(!macs.contains(&mac), "{mac} twice: {s:#}");
        macs.push(mac);
        // CRIU's gates did not run, and say why.
        let dump = r.gate(GateName::Dump).unwrap();
        assert_eq!(dump.status, Status::NotRun);
        assert!(dump.reason.contains("VM fork"), "{}", dump.reason);
        // Each copy came up with its own key and nonce, from the fork this run saved, and
        // compare.json records that nonce for it.
        let start = r.vm.as_ref().unwrap().start.clone().unwrap();
        assert_eq!(start.how, "resumed");
        assert_eq!(start.nonce.as_deref(), c["nonce"].as_str(), "{c:#}");
        assert_eq!(start.nonce, start.nonce_echo);
        nonces.push(start.nonce.clone());
        assert_eq!(
            start.snapshot.as_ref().unwrap().state_sha256,
            s[col]["state_sha256"].as_str().unwrap()
        );
    }
    tokens.dedup();
    assert_eq!(tokens.len(), 1, "{col}: {tokens:?}");
    tokens.remove(0)
}

/// `xtask vm-compare` on the sandbox's cache and gate binary, under TCG, into `out_dir`, with
/// `extra` after the boot options.
fn compare_args(sb: &Sandbox, gate: &Path, out_dir: &Path, extra: &[&str]) -> Vec<String> {
    let mut args = common::vm_run_args(sb, gate, out_dir, "tcg");
    args[0] = "vm-compare".into();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

/// Runs `args` as the test user (or as root), and reads the compare.json it wrote: its exit
/// code, compare.json, and what it said (stderr and its last line).
fn run_compare(
    sb: &Sandbox,
    args: &[String],
    out_dir: &Path,
    as_root: bool,
) -> (i32, Value, String) {
    let out = if as_root {
        Command::new(&sb.xtask)
            .args(args)
            .current_dir(&sb.dir)
            .output()
            .unwrap()
    } else {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        sb.run_as_user(&sb.xtask, &a)
    };
    let said = String::from_utf8_lossy(&out.stderr).into_owned() + &last_line(&out);
    let text = std::fs::read_to_string(out_dir.join("compare.json"))
        .unwrap_or_else(|e| panic!("no compare.json ({e}):\n{said}"));
    let s: Value = serde_json::from_str(&text).unwrap();
    (out.status.code().unwrap_or(-1), s, said)
}

/// What the host can tell before booting is refused there, with nothing archived: KSM asked
/// for where this user cannot turn it on, and an image whose snapshot cannot be made (no
/// snapshot for these settings, and a store this user cannot write).
fn refused_before_booting(sb: &Sandbox, args: &[String], out_dir: &Path) {
    let run = |extra: &[&str]| {
        let mut a: Vec<&str> = args.iter().map(String::as_str).collect();
        a.extend(extra);
        let out = sb.run_as_user(&sb.xtask, &a);
        assert!(!out_dir.exists(), "nothing archived");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stderr) = run(&["--ksm", "on"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("--ksm on") && stderr.contains("not writable by this user"),
        "{stderr}"
    );

    // The seed may hold no snapshot yet (this test may be the suite's first to resume
    // bookworm): then there is no store to put aside.
    let store = sb.dir.join("cache/snapshots");
    let aside = sb.dir.join("cache/snapshots.aside");
    let had_store = store.exists();
    if had_store {
        std::fs::rename(&store, &aside).unwrap();
    }
    // Root's, so the user can read it and write nothing in it.
    std::fs::create_dir(&store).unwrap();
    let (code, stderr) = run(&[]);
    std::fs::remove_dir(&store).unwrap();
    if had_store {
        std::fs::rename(&aside, &store).unwrap();
    }
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("none can be made") && stderr.contains("fix:"),
        "{stderr}"
    );
}

/// As root, where the rig may turn the host's KSM on: every copy read again with KSM merging,
/// less than without it, and the host's settings as they were found afterwards. With
/// `--cgroup`: each CRIU copy restored into a cgroup of those limits, each VM given the same
/// memory and CPUs, as each side's own report records.
#[test]
#[ignore = "boots four VMs: minutes; run with --include-ignored; the extended tier's: cargo xtask test --tier extended"]
fn vm_compare_as_root_measures_ksm_and_puts_the_host_s_settings_back() {
    let Some(sb) = Sandbox::new_or_skip("vmcompareksm") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    let ksm = Path::new("/sys/kernel/mm/ksm");
    let settings = || {
        ["run", "pages_to_scan", "sleep_millisecs"].map(|f| {
            std::fs::read_to_string(ksm.join(f))
                .unwrap_or_else(|e| panic!("this host has no KSM to measure ({f}: {e})"))
        })
    };
    let before = settings();
    let out_dir = sb.dir.join("reports/compare-ksm");
    let args = compare_args(
        &sb,
        &gate,
        &out_dir,
        &[
            "--copies",
            "2",
            "--ksm",
            "on",
            "--cgroup",
            "cpu=1,memory=512M",
        ],
    );
    let (code, s, said) = run_compare(&sb, &args, &out_dir, true);
    assert_eq!(code, 0, "{said}\n{s:#}");
    assert_eq!(settings(), before, "the host's KSM settings were put back");
    let k = &s["vm_each"]["ksm"];
    assert_eq!(k["status"], "PASS", "{s:#}");
    let pss = |v: &Value| v["pss_kib"].as_u64().unwrap();
    let plain: u64 = s["vm_each"]["copies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| pss(&c["host_mem"]))
        .sum();
    let merged: u64 = k["per_copy"].as_array().unwrap().iter().map(pss).sum();
    // Two copies of one saved guest share most of their pages once merged.
    assert!(
        merged < plain,
        "{merged} KiB with KSM, {plain} without: {s:#}"
    );
    assert!(k["notes"].to_string().contains("pages shared"), "{k:#}");
    assert!(said.contains("host KSM merging"), "{said}");
    // The same resources on both sides, as each side's report has them.
    let so = read_report(&out_dir.join("shared-os"));
    let l = so
        .options
        .cgroup
        .expect("the shared-OS run's cgroup limits");
    assert_eq!((l.cpu_quota_us, l.memory_max_bytes), (100_000, 512 << 20));
    for c in s["vm_each"]["copies"].as_array().unwrap() {
        let r = read_report(&out_dir.join(c["report"].as_str().unwrap()));
        let vm = r.vm.as_ref().unwrap();
        assert_eq!((vm.memory_mib, vm.cpus), (512, 1), "{}", c["label"]);
    }
    assert!(processes_mentioning(out_dir.to_str().unwrap()).is_empty());
}

/// The baseline's lies, each failing a named check: copy-1's app restarted before its go (its
/// guest sees a new token and a counter from zero: `fork_token_kept` and
/// `fork_counter_continues` fail) and its go given without a MAC of its own (`fork_own_mac`
/// fails: it kept the saved guest's), and copy-2 resumed from another guest's save (its guest
/// finds nothing wrong, its fork-time state being its own save's; the host fails it on
/// `fork_token_kept`: the token is not the one the comparison's saved guest recorded).
#[test]
#[ignore = "boots five VMs: minutes; run with --include-ignored"]
fn vm_compare_lies_fail_named_checks() {
    let Some(sb) = Sandbox::new_or_skip("vmcomparelie") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    let out_dir = sb.dir.join("reports/compare-lie");
    let args = compare_args(
        &sb,
        &gate,
        &out_dir,
        &[
            "--copies",
            "2",
            "--lie",
            "restarted-app",
            "--lie",
            "wrong-save",
            "--lie",
            "same-mac",
        ],
    );
    let (code, s, said) = run_compare(&sb, &args, &out_dir, false);
    assert_eq!(code, 1, "{said}\n{s:#}");
    assert_eq!(s["verdict"], "FAIL");
    let lie = s["vm_each"]["lie"].as_str().unwrap();
    assert!(
        lie.contains("wrong-save") && lie.contains("restarted-app") && lie.contains("same-mac"),
        "{lie}"
    );
    let problems = |i: usize| s["vm_each"]["copies"][i]["problems"].to_string();

    // copy-1: its own guest saw the app restarted.
    assert!(
        problems(0).contains("failed its check fork_token_kept"),
        "{s:#}"
    );
    let r = read_report(&out_dir.join("copy-1"));
    let probe = r.gate(GateName::LiveStateProbe).unwrap();
    assert_eq!(probe.status, Status::Fail);
    for check in ["fork_token_kept", "fork_counter_continues", "fork_own_mac"] {
        assert!(probe.check(check).is_some_and(|c| !c.passed), "{check}");
    }
    assert!(
        problems(0).contains("failed its check fork_own_mac")
            && problems(0).contains("the host's record gives it no MAC of its own"),
        "{s:#}"
    );
    let own = probe.check("fork_own_mac").unwrap();
    assert_eq!(own.value["seen"], own.value["fork_time"], "{own:?}");

    // copy-2: the guest saw its fork-time state kept: only the host can tell.
    assert!(
        problems(1).contains("fork_token_kept on the host") && problems(1).contains("another save"),
        "{s:#}"
    );
    let r = read_report(&out_dir.join("copy-2"));
    let probe = r.gate(GateName::LiveStateProbe).unwrap();
    assert!(probe.check("fork_token_kept").is_some_and(|c| c.passed));
    assert_ne!(
        r.vm.as_ref()
            .unwrap()
            .start
            .as_ref()
            .unwrap()
            .snapshot
            .as_ref()
            .unwrap()
            .state_sha256,
        s["vm_each"]["state_sha256"].as_str().unwrap()
    );
    // The reset, a copy of the right save with its app untouched, holds.
    assert_eq!(
        s["vm_each"]["reset"]["problems"].as_array().unwrap().len(),
        0,
        "{s:#}"
    );
    assert!(processes_mentioning(out_dir.to_str().unwrap()).is_empty());
}

/// The desktop workload in both columns: mousepad with a token typed into it, held in each VM
/// copy as in each CRIU copy (`fork_editor_same_text`).
#[test]
#[ignore = "boots four VMs: minutes; run with --include-ignored; the extended tier's: cargo xtask test --tier extended"]
fn vm_compare_desktop_workload_both_columns_checked() {
    let Some(sb) = Sandbox::new_or_skip("vmcomparedesktop") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    // Built in the seed in unshare mode, as tests/workloads.rs has it.
    common::seed::seed(&sb, "cache", "bookworm-desktop", "unshare");
    let out_dir = sb.dir.join("reports/compare-desktop");
    let mut args = compare_args(
        &sb,
        &gate,
        &out_dir,
        &[
            "--image",
            "bookworm-desktop",
            "--workload",
            "desktop",
            "--copies",
            "2",
        ],
    );
    let mode = args.iter().position(|a| a == "--mode").unwrap();
    args[mode + 1] = "unshare".into();
    let (code, s, said) = run_compare(&sb, &args, &out_dir, false);
    assert_eq!(code, 0, "{said}\n{s:#}");
    assert_eq!(s["workload"], "desktop", "{s:#}");
    let so = read_report(&out_dir.join("shared-os"));
    assert_eq!(so.options.workload.as_str(), "desktop");
    for c in s["vm_each"]["copies"]
        .as_array()
        .unwrap()
        .iter()
        .chain([&s["vm_each"]["reset"]])
    {
        let r = read_report(&out_dir.join(c["report"].as_str().unwrap()));
        let probe = r.gate(GateName::LiveStateProbe).unwrap();
        let text = probe
            .check("fork_editor_same_text")
            .unwrap_or_else(|| panic!("{}: no fork_editor_same_text", c["label"]));
        assert!(text.passed, "{:?}", text);
        assert!(
            probe
                .check("fork_session_bus_answers")
                .is_some_and(|c| c.passed),
            "{}",
            c["label"]
        );
    }
    assert!(processes_mentioning(out_dir.to_str().unwrap()).is_empty());
}

/// `--copies max`: each arm adds one copy at a time, every one kept up, until its first limit,
/// and names it. Here the limit is the cap (`--max-copies 2`), so that the run fits the suite's
/// budget; the other limits are the one rule's, each shown stopping a search in its unit tests.
/// Every step of a VM arm is archived beside compare.json as it is taken, and `show` judges
/// the comparison again from its reports.
#[test]
#[ignore = "boots four VMs: minutes; run with --include-ignored"]
fn vm_compare_max_searches_each_arm_to_its_first_limit_and_archives_each_step() {
    let Some(sb) = Sandbox::new_or_skip("vmcomparemax") else {
        return;
    };
    let gate = sb.copy_in(&gate_binary(), "sharedos-gate");
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    let out_dir = sb.dir.join("reports/max");
    let args = compare_args(
        &sb,
        &gate,
        &out_dir,
        &[
            "--copies",
            "max",
            "--max-copies",
            "2",
            "--arms",
            "criu,vm-template",
            // The image's snapshot, shared with the suite's other runs: `auto` would size the
            // guest to this host, a snapshot of its own.
            "--guest-memory",
            "1024",
            "--ksm",
            "off",
        ],
    );
    let (code, s, said) = run_compare(&sb, &args, &out_dir, false);
    assert_eq!(code, 0, "{said}\n{s:#}");
    assert_eq!(s["verdict"], "PASS", "{s:#}");
    assert_eq!(s["max"], true, "{s:#}");
    for col in ["shared_os", "vm_template"] {
        let x = &s[col]["search"];
        assert_eq!(x["stopped_by"], "cap", "{col}: {x:#}");
        assert_eq!(x["limits"]["cap"], 2, "{col}: {x:#}");
        let up: Vec<u64> = x["steps"]
            .as_array()
            .unwrap()
            .iter()
            .map(|st| st["copies_up"].as_u64().unwrap())
            .collect();
        assert_eq!(up, [0, 1, 2], "{col}: {x:#}");
        assert!(!x["detail"].as_str().unwrap().is_empty(), "{col}");
    }
    assert_eq!(s["shared_os"]["per_copy"].as_array().unwrap().len(), 2);
    assert_eq!(s["vm_template"]["copies"].as_array().unwrap().len(), 2);
    // The step file a stopped run would have kept, here finished.
    let steps: Value = serde_json::from_str(
        &std::fs::read_to_string(out_dir.join("vm-template-search.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(steps["finished"], true, "{steps:#}");
    assert_eq!(steps["stopped_by"], "cap", "{steps:#}");
    assert_eq!(steps["steps"].as_array().unwrap().len(), 3, "{steps:#}");
    let rig = Path::new(env!("CARGO_BIN_EXE_sharedos-rig"));
    let shown = Command::new(rig)
        .arg("show")
        .arg(&out_dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&shown.stdout);
    assert_eq!(shown.status.code(), Some(0), "{text}");
    assert!(
        text.contains("VM template search: 2 copies, stopped by the cap on copies")
            && text.contains("shared-OS (CRIU) search: 2 copies, stopped by the cap on copies"),
        "{text}"
    );
    assert!(processes_mentioning(out_dir.to_str().unwrap()).is_empty());
}

#[test]
fn vm_compare_refuses_an_n_that_cannot_fit_before_booting() {
    let scratch =
        std::env::temp_dir().join(format!("sharedos-compare-input-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let out_dir = scratch.join("out");
    let xtask = common::xtask_binary();
    for (copies, memory, says) in [
        ("64", "65536", "this host has"),
        ("0", "1024", "give 1 to 64"),
    ] {
        let out = Command::new(&xtask)
            .args(["vm-compare", "--copies", copies, "--memory", memory])
            .arg("--images-dir")
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
        assert!(stderr.contains(says), "{stderr}");
        assert!(!out_dir.exists(), "nothing archived");
    }
    let _ = std::fs::remove_dir_all(&scratch);
}
