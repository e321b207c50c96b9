use super::*;
use crate::judge::compare::TemplateRam;
use crate::judge::reader::tests::Scratch;
use crate::judge::review::tests::fresh_report;
use sharedos_report::model::density::Mem;
use sharedos_report::report::{
    GateName, GuestStart, Report, SnapshotRef, Status, Verdict, VmProvenance, RESET_RESTORE_MS,
};
use std::os::unix::fs::symlink;

/// The fork's state hash every copy of the fixture resumed from.
pub(crate) const STATE: &str = "abababababababababababababababababababababababababababababababab";
/// The template's state hash every clone of the fixture's templated arm resumed from.
pub(crate) const TEMPLATE_STATE: &str =
    "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef";
/// The templated arm's copies and reset, as vm-compare names their report directories.
const TEMPLATE_COPIES: [&str; 3] = ["template-1", "template-2", "template-reset"];

fn vm_report() -> Report {
    let mut r = fresh_report();
    r.artifacts.clear();
    r.vm = Some(VmProvenance {
        image_name: "bookworm".into(),
        accel: "tcg".into(),
        memory_mib: 1024,
        cpus: 2,
        ..Default::default()
    });
    r
}

/// `r` archived in `dir` as vm-run archives it, with the guest's PNGs and honest checks;
/// `after` changes it once those are in.
fn write(dir: &Path, r: Report, after: impl FnOnce(&mut Report)) {
    std::fs::create_dir_all(dir).unwrap();
    let mut r = r;
    hostile_gate::honest::add_to(&mut r, dir).unwrap();
    after(&mut r);
    r.seal();
    std::fs::write(
        dir.join(REPORT_FILE),
        serde_json::to_string_pretty(&r).unwrap(),
    )
    .unwrap();
}

const DENSITY: &str = r#"{"copies": 2, "ended_before": [], "limits": {"cap": 2, "deadline": null, "reserve_kib": null}, "mem_total_kib": 995356, "mem_used_before_kib": 167072, "mem_used_with_copies_kib": 221000, "per_copy": [{"label": "density-1", "mem": {"pss_kib": 26870, "rss_kib": 28468, "uss_kib": 26464}, "pid": 339, "processes": 5}, {"label": "density-2", "mem": {"pss_kib": 26900, "rss_kib": 28468, "uss_kib": 26464}, "pid": 340, "processes": 5}], "requested": {"count": 2}, "restore_ms": [1922, 1773], "restore_ms_median": 1847.5, "restore_ms_p95": 1922, "stop_detail": "2 copies restored as asked", "stopped_by": "count", "total": {"pss_kib": 53770, "rss_kib": 56936, "uss_kib": 52928}}"#;

/// A vm-run with `--copies 2`: its density gate, after reset, with the figures.
fn shared_os_report(dir: &Path) {
    shared_os_report_of(dir, DENSITY)
}

/// [`shared_os_report`] with the density gate's figures `density`.
fn shared_os_report_of(dir: &Path, density: &str) {
    shared_os_report_with(dir, density, |_| {})
}

/// The CRIU reset the fixture's reset gate timed (ms).
const CRIU_RESET_MS: u64 = 2100;

/// [`shared_os_report_of`], its reset gate having timed its restore, changed by `after`.
fn shared_os_report_with(dir: &Path, density: &str, after: impl FnOnce(&mut Report)) {
    let mut r = vm_report();
    r.gate_mut(GateName::Reset)
        .unwrap()
        .data
        .insert(RESET_RESTORE_MS.into(), CRIU_RESET_MS.into());
    r.options.copies = Some(serde_json::from_value(serde_json::json!({"count": 2})).unwrap());
    let at = r
        .gates
        .iter()
        .position(|g| g.name == GateName::Reset)
        .unwrap()
        + 1;
    let mut g = r.gates[at - 1].clone();
    g.name = GateName::Density;
    g.data
        .insert("density".into(), serde_json::from_str(density).unwrap());
    r.gates.insert(at, g);
    write(dir, r, after);
}

/// The nonce the host gave the resume of the copy `label` in the fixture.
pub(crate) fn nonce_of(label: &str) -> String {
    let hex: String = label.bytes().map(|b| format!("{b:02x}")).collect();
    format!("{hex:0>32}")
}

/// The MAC the host gave the copy `label` in the fixture.
pub(crate) fn mac_of(label: &str) -> String {
    use sha2::{Digest, Sha256};
    let h = Sha256::digest(label.as_bytes());
    format!("52:54:{:02x}:{:02x}:{:02x}:{:02x}", h[0], h[1], h[2], h[3])
}

/// The MAC every copy of a save comes up with, QEMU's default.
pub(crate) const SAVED_MAC: &str = "52:54:00:12:34:56";

/// A copy of a VM fork whose live probe held it, resumed from the fork `state`, its resume's
/// nonce and its MAC the ones the fixture gives its directory's name.
pub(crate) fn vm_copy_report(dir: &Path, state: &str, after: impl FnOnce(&mut Report)) {
    let label = dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let nonce = nonce_of(&label);
    write(dir, vm_report(), |r| {
        r.gate_mut(GateName::LiveStateProbe).unwrap().checks.push(
            sharedos_report::compare::own_mac("fork_own_mac", SAVED_MAC, &mac_of(&label)),
        );
        for ((name, _), (gate, from)) in crate::judge::recheck::FORK_CHECKS.iter().zip([
            (GateName::RestoreLiveProcess, "same_token"),
            (GateName::RestoreLiveProcess, "counter_continues"),
            (GateName::RestoreXState, "same_windows"),
            (GateName::RestoreXState, "same_framebuffer"),
        ]) {
            let g = r.gate(gate).unwrap();
            let mut c = g.check(from).unwrap().clone();
            c.name = name.to_string();
            r.gate_mut(GateName::LiveStateProbe).unwrap().checks.push(c);
        }
        if let Some(vm) = r.vm.as_mut() {
            vm.start = Some(GuestStart {
                how: "resumed".into(),
                reason: "a copy of a VM fork".into(),
                snapshot: Some(SnapshotRef {
                    state_sha256: state.into(),
                    disk_sha256: String::new(),
                    key_sha256: String::new(),
                    made_at: String::new(),
                    boot_host_key: String::new(),
                    ..SnapshotRef::default()
                }),
                client_key: String::new(),
                nonce: Some(nonce.clone()),
                nonce_echo: Some(nonce),
                clock_set_to: None,
                rng_reseeded: true,
            });
        }
        after(r);
    });
}

pub(crate) fn mem(pss: u64) -> Mem {
    Mem {
        rss_kib: pss + 1000,
        pss_kib: pss,
        uss_kib: pss - 1000,
    }
}

fn copy(label: &str, pss: u64) -> VmCopy {
    VmCopy {
        label: label.into(),
        report: label.into(),
        nonce: nonce_of(label),
        mac: mac_of(label),
        resume_ms: 1600,
        host_mem: Some(mem(pss)),
        host_split: None,
        problems: vec![],
    }
}

/// compare.json as vm-compare writes it for the fixture's reports.
fn summary() -> Summary {
    let d: sharedos_report::model::density::DensityData = serde_json::from_str(DENSITY).unwrap();
    let mut s = Summary {
        format: FORMAT,
        image: "bookworm".into(),
        accel: "tcg".into(),
        copies: 2,
        max: false,
        workload: None,
        arms: Arm::ALL.to_vec(),
        vm_template: Some(VmEach {
            fork: "vm-template-fork".into(),
            state_bytes: 1 << 30,
            state_sha256: TEMPLATE_STATE.into(),
            fork_token: hostile_gate::honest::TOKEN.into(),
            save_ms: 2100,
            copies: vec![copy("template-1", 120_000), copy("template-2", 118_000)],
            reset: Some(copy("template-reset", 110_000)),
            memory_mib: 1024,
            cpus: 2,
            idle_guest: Some(mem(262_000)),
            memory_source: "the host's smaps_rollup".into(),
            template: Some(TemplateRam {
                bytes: 1 << 30,
                resident_bytes: 280 << 20,
                how: "a file on the host's tmpfs, mapped private by every clone".into(),
                features: vec!["x-ignore-shared".into()],
                off: vec!["free page reporting".into()],
            }),
            ..VmEach::default()
        }),
        shared_os: SharedOs {
            report: "shared-os".into(),
            restore_ms: d.restore_ms.clone(),
            per_copy: d.per_copy.iter().map(|c| c.mem).collect(),
            guest_used_before_kib: d.mem_used_before_kib,
            guest_used_with_copies_kib: d.mem_used_with_copies_kib,
            reset_ms: vec![CRIU_RESET_MS],
            resources: "the guest's memory and CPUs, shared by every copy (no --cgroup)".into(),
            ksm: crate::judge::compare::Reading::not_run(
                "not asked for (the density gate ran without --guest-ksm)",
            ),
            search: None,
            problems: vec![],
        },
        vm_each: VmEach {
            fork: "vm-each-fork".into(),
            state_bytes: 247_802_652,
            state_sha256: STATE.into(),
            fork_token: hostile_gate::honest::TOKEN.into(),
            save_ms: 1710,
            copies: vec![copy("copy-1", 390_000), copy("copy-2", 384_000)],
            reset: Some(copy("reset", 377_000)),
            memory_mib: 1024,
            cpus: 2,
            idle_guest: Some(mem(262_000)),
            memory_source: "the host's smaps_rollup".into(),
            ..VmEach::default()
        },
        verdict: Verdict::Fail,
        problems: vec![],
    };
    judge(&mut s);
    s
}

fn put(dir: &Path, s: &Summary) {
    std::fs::write(
        dir.join(COMPARE_FILE),
        serde_json::to_string_pretty(s).unwrap(),
    )
    .unwrap();
}

/// A comparison of two copies as vm-compare leaves it, every arm run and every column holding.
pub(crate) fn fixture(name: &str) -> Scratch {
    let sc = Scratch::new(&format!("compare-{name}"));
    let d = &sc.0;
    shared_os_report(&d.join("shared-os"));
    for c in ["copy-1", "copy-2", "reset"] {
        vm_copy_report(&d.join(c), STATE, |_| {});
    }
    std::fs::create_dir_all(d.join("vm-each-fork")).unwrap();
    for c in TEMPLATE_COPIES {
        vm_copy_report(&d.join(c), TEMPLATE_STATE, |_| {});
    }
    std::fs::create_dir_all(d.join("vm-template-fork")).unwrap();
    put(d, &summary());
    sc
}

fn err(dir: &Path) -> String {
    format!("{:#}", read(dir, None).unwrap_err())
}

#[test]
fn a_comparison_as_written_judges_again_to_the_same_verdict() {
    let f = fixture("same");
    assert!(is_compare_dir(&f.0));
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.problems, Vec::<String>::new());
    assert_eq!(j.summary.verdict, Verdict::Pass);
    assert_eq!(j.exit_code(), 0);
    assert_eq!(j.warnings, Vec::<String>::new());
    assert_eq!(j.summary, summary());
}

#[test]
fn a_compare_json_that_says_pass_over_a_failing_copy_judges_again_to_fail() {
    let f = fixture("tampered");
    vm_copy_report(&f.0.join("copy-2"), STATE, |r| {
        r.gate_mut(GateName::Cleanup).unwrap().status = Status::Fail;
    });
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    assert_eq!(j.exit_code(), 1);
    assert!(
        j.summary
            .problems
            .iter()
            .any(|p| p.starts_with("VM-each copy-2: cleanup is FAIL")),
        "{:?}",
        j.summary.problems
    );
    assert!(
        j.warnings.iter().any(|w| w
            == "compare.json says PASS, its reports judged again give FAIL; showing the \
                re-judged verdict"),
        "{:?}",
        j.warnings
    );
    assert!(
        j.warnings
            .iter()
            .any(|w| w.contains("a problem compare.json does not name: VM-each copy-2")),
        "{:?}",
        j.warnings
    );
}

#[test]
fn figures_and_problems_come_from_the_reports_not_compare_json() {
    let f = fixture("figures");
    let mut s = summary();
    s.shared_os.per_copy[0].pss_kib = 1;
    s.vm_each.copies[0].problems.push("forged".into());
    s.accel = "kvm".into();
    judge(&mut s);
    put(&f.0, &s);
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.shared_os.per_copy[0].pss_kib, 26870);
    assert_eq!(j.summary.accel, "tcg");
    assert_eq!(j.summary.verdict, Verdict::Pass);
    let w = j.warnings.join("\n");
    assert!(
        w.contains("figures are not those of its report's density"),
        "{w}"
    );
    assert!(w.contains("accelerator is kvm"), "{w}");
    assert!(w.contains("compare.json says FAIL"), "{w}");
    assert!(w.contains("do not show: VM-each copy-1: forged"), "{w}");
    // The host's own figures are kept as recorded.
    assert_eq!(j.summary.vm_each.copies[0].host_mem, Some(mem(390_000)));
}

#[test]
fn the_vms_memory_and_cpus_are_checked_against_each_copy_s_report() {
    let f = fixture("resources");
    // A VM made to cost what a CRIU copy is given.
    let mut s = summary();
    s.vm_each.memory_mib = 64;
    s.vm_each.cpus = 1;
    put(&f.0, &s);
    let j = read(&f.0, None).unwrap();
    let w = j.warnings.join("\n");
    for c in ["copy-1", "copy-2", "reset"] {
        assert!(
            w.contains(&format!(
                "VM-each {c}: compare.json says each VM had 64 MiB and 1 CPUs, its report \
                 says 1024 MiB and 2 CPUs"
            )),
            "{w}"
        );
    }
    assert_eq!(
        (j.summary.vm_each.memory_mib, j.summary.vm_each.cpus),
        (1024, 2),
        "the reports' figures are shown"
    );
    // Copies whose reports disagree among themselves: compare.json's figure stays, warned.
    vm_copy_report(&f.0.join("copy-2"), STATE, |r| {
        r.vm.as_mut().unwrap().memory_mib = 2048;
    });
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.vm_each.memory_mib, 64);
    assert!(
        j.warnings
            .iter()
            .any(|w| w.contains("copy-2") && w.contains("its report says 2048 MiB")),
        "{:?}",
        j.warnings
    );
}

#[test]
fn a_report_compare_json_does_not_name_fails_the_comparison() {
    let f = fixture("unnamed");
    vm_copy_report(&f.0.join("copy-3"), STATE, |r| {
        r.gate_mut(GateName::Cleanup).unwrap().status = Status::Fail;
    });
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    assert!(
        j.summary.problems.iter().any(|p| p
            == "VM-each: the comparison's directory holds a report compare.json does not \
                name: copy-3/ (a copy left out of the count?)"),
        "{:?}",
        j.summary.problems
    );
    // A directory without a report is no copy.
    let f = fixture("unnamed-empty");
    std::fs::create_dir(f.0.join("notes")).unwrap();
    assert_eq!(read(&f.0, None).unwrap().summary.verdict, Verdict::Pass);
}

/// `from`'s files, byte for byte, in place of `to`'s.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::remove_dir_all(to).ok();
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

#[test]
fn one_copy_s_report_counted_twice_fails_naming_both_places() {
    for twice in ["copy-2", "reset"] {
        let f = fixture(&format!("twice-{twice}"));
        copy_dir(&f.0.join("copy-1"), &f.0.join(twice));
        let j = read(&f.0, None).unwrap();
        assert_eq!(j.summary.verdict, Verdict::Fail, "{twice}");
        let p = j.summary.problems.join("\n");
        assert!(
            p.contains(&format!(
                "VM-each {twice}: its report is the same resume as copy-1's (copy-1/): both \
                 carry the nonce {}",
                nonce_of("copy-1")
            )),
            "{twice}: {p}"
        );
        assert!(
            p.contains(&format!(
                "VM-each {twice}: its report is of the resume with nonce {}, not the one the \
                 host recorded for it ({})",
                nonce_of("copy-1"),
                nonce_of(twice)
            )),
            "{twice}: {p}"
        );
        // compare.json edited to match does not help: the reports still repeat one resume,
        // and compare.json then records one resume twice.
        let mut s = summary();
        match twice {
            "reset" => s.vm_each.reset.as_mut().unwrap().nonce = nonce_of("copy-1"),
            _ => s.vm_each.copies[1].nonce = nonce_of("copy-1"),
        }
        put(&f.0, &s);
        let j = read(&f.0, None).unwrap();
        assert_eq!(j.summary.verdict, Verdict::Fail, "{twice}");
        let p = j.summary.problems.join("\n");
        assert!(
            p.contains("its report is the same resume as copy-1's (copy-1/)"),
            "{twice}: {p}"
        );
        assert!(
            p.contains(&format!(
                "VM-each copy-1 and {twice}: compare.json records one resume twice (nonce {})",
                nonce_of("copy-1")
            )),
            "{twice}: {p}"
        );
    }
}

#[test]
fn the_criu_reset_is_the_reset_gate_s_and_counts_only_when_that_gate_passes() {
    let f = fixture("criu-reset");
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.shared_os.reset_ms, [CRIU_RESET_MS]);
    // compare.json's figure is not taken on its word.
    let mut s = summary();
    s.shared_os.reset_ms = vec![10];
    put(&f.0, &s);
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.shared_os.reset_ms, [CRIU_RESET_MS]);
    assert!(
        j.warnings
            .iter()
            .any(|w| w.contains("figures are not those of its report's density")),
        "{:?}",
        j.warnings
    );
    put(&f.0, &summary());
    for (what, edit) in [
        (
            "shared-OS: reset is FAIL: forged",
            (|r: &mut Report| {
                let g = r.gate_mut(GateName::Reset).unwrap();
                g.status = Status::Fail;
                g.reason = "forged".into();
            }) as fn(&mut Report),
        ),
        (
            "shared-OS: the reset gate recorded no restore time",
            |r: &mut Report| {
                r.gate_mut(GateName::Reset)
                    .unwrap()
                    .data
                    .remove(RESET_RESTORE_MS);
            },
        ),
    ] {
        shared_os_report_with(&f.0.join("shared-os"), DENSITY, edit);
        let j = read(&f.0, None).unwrap();
        assert_eq!(j.summary.verdict, Verdict::Fail, "{what}");
        assert!(
            j.summary.problems.iter().any(|p| p == what),
            "{what}: {:?}",
            j.summary.problems
        );
        assert!(j.summary.shared_os.reset_ms.is_empty(), "{what}");
    }
}

#[test]
fn one_criu_copy_counted_twice_fails_the_shared_os_column() {
    let f = fixture("criu-twice");
    for (edit, said) in [
        (
            ("\"pid\": 340", "\"pid\": 339"),
            "shared-OS: density-1 and density-2 are one process (pid 339): one restore \
             counted twice",
        ),
        (
            ("\"label\": \"density-2\"", "\"label\": \"density-1\""),
            "shared-OS: two copies are labelled density-1",
        ),
        (
            ("\"pid\": 340", "\"pid\": 0"),
            "shared-OS: density-2's pid is 0, no process",
        ),
        (
            ("\"restore_ms\": [1922, 1773]", "\"restore_ms\": [1922]"),
            "shared-OS: the density gate timed 1 restores for 2 copies",
        ),
    ] {
        shared_os_report_of(&f.0.join("shared-os"), &DENSITY.replace(edit.0, edit.1));
        let j = read(&f.0, None).unwrap();
        assert_eq!(j.summary.verdict, Verdict::Fail, "{said}");
        assert!(
            j.summary.problems.iter().any(|p| p == said),
            "{said}: {:?}",
            j.summary.problems
        );
    }
}

#[test]
fn a_copy_not_bound_to_a_resume_the_host_recorded_does_not_count() {
    let f = fixture("unbound");
    // No host record of the resume.
    let mut s = summary();
    s.vm_each.copies[0].nonce.clear();
    put(&f.0, &s);
    let p = read(&f.0, None).unwrap().summary.problems.join("\n");
    assert!(
        p.contains("VM-each copy-1: compare.json records no nonce for its resume"),
        "{p}"
    );
    // A report with no nonce, or one its guest did not echo.
    put(&f.0, &summary());
    vm_copy_report(&f.0.join("copy-2"), STATE, |r| {
        let start = r.vm.as_mut().unwrap().start.as_mut().unwrap();
        start.nonce = None;
    });
    vm_copy_report(&f.0.join("reset"), STATE, |r| {
        let start = r.vm.as_mut().unwrap().start.as_mut().unwrap();
        start.nonce_echo = Some("0".repeat(32));
    });
    let p = read(&f.0, None).unwrap().summary.problems.join("\n");
    assert!(
        p.contains("VM-each copy-2: its report records no nonce of its resume"),
        "{p}"
    );
    assert!(
        p.contains(&format!(
            "VM-each reset: its guest echoed {}, not the nonce its host gave ({})",
            "0".repeat(32),
            nonce_of("reset")
        )),
        "{p}"
    );
}

/// The copy's report says its card had `seen` at its go.
fn saw_mac(r: &mut Report, seen: &str) {
    let c = r
        .gate_mut(GateName::LiveStateProbe)
        .unwrap()
        .checks
        .iter_mut()
        .find(|c| c.name == "fork_own_mac")
        .unwrap();
    *c = sharedos_report::compare::own_mac("fork_own_mac", SAVED_MAC, seen);
}

#[test]
fn a_copy_without_a_mac_of_its_own_does_not_count() {
    let f = fixture("macs");
    // The copy kept the saved guest's MAC: its own check fails, and the host judges it again.
    vm_copy_report(&f.0.join("copy-1"), STATE, |r| saw_mac(r, SAVED_MAC));
    // Another copy's report says it saw a MAC the host did not give it.
    vm_copy_report(&f.0.join("copy-2"), STATE, |r| {
        saw_mac(r, &mac_of("copy-9"))
    });
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    let p = j.summary.problems.join("\n");
    assert!(
        p.contains("VM-each copy-1: live_state_probe failed its check fork_own_mac"),
        "{p}"
    );
    assert!(
        p.contains(&format!(
            "VM-each copy-2: its card's MAC is {}, not the {} the host gave it",
            mac_of("copy-9"),
            mac_of("copy-2")
        )),
        "{p}"
    );
    // The host's record gives two copies one MAC.
    let f = fixture("macs-twice");
    let mut s = summary();
    s.vm_each.reset.as_mut().unwrap().mac = mac_of("copy-1");
    put(&f.0, &s);
    vm_copy_report(&f.0.join("reset"), STATE, |r| saw_mac(r, &mac_of("copy-1")));
    let p = read(&f.0, None).unwrap().summary.problems.join("\n");
    assert!(
        p.contains(&format!(
            "VM-each reset: the host's record gives it the MAC {} of copy-1 too",
            mac_of("copy-1")
        )),
        "{p}"
    );
}

#[test]
fn a_copy_resumed_from_another_fork_does_not_count() {
    let f = fixture("origin");
    vm_copy_report(&f.0.join("copy-1"), &"cd".repeat(32), |_| {});
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    assert!(
        j.summary
            .problems
            .iter()
            .any(|p| p.contains("copy-1: its report says it resumed from the save cdcd")),
        "{:?}",
        j.summary.problems
    );
}

#[test]
fn a_report_that_is_not_one_plain_name_is_refused() {
    let f = fixture("names");
    for bad in ["../x", "a/b", "", "..", "/etc", ".hidden"] {
        let mut s = summary();
        s.vm_each.copies[1].report = bad.into();
        put(&f.0, &s);
        let e = err(&f.0);
        assert!(
            e.contains(&format!("names {bad:?} as VM-each copy-2's report"))
                && e.contains("one plain name")
                && e.contains("fix:"),
            "{bad}: {e}"
        );
        let mut s = summary();
        s.shared_os.report = bad.into();
        put(&f.0, &s);
        assert!(err(&f.0).contains("as the shared-OS report"), "{bad}");
        let mut s = summary();
        s.vm_each.fork = bad.into();
        put(&f.0, &s);
        assert!(err(&f.0).contains("as the VM fork"), "{bad}");
    }
    // One good report named twice is not two copies.
    let mut s = summary();
    s.vm_each.copies[1].report = "copy-1".into();
    put(&f.0, &s);
    assert!(err(&f.0).contains("a report of its own"), "{}", err(&f.0));
}

#[test]
fn another_format_or_no_compare_json_at_all_is_refused() {
    let f = fixture("format");
    let mut v = serde_json::to_value(summary()).unwrap();
    v["format"] = 1.into();
    std::fs::write(f.0.join(COMPARE_FILE), v.to_string()).unwrap();
    let e = err(&f.0);
    assert!(
        e.contains("has format 1, this rig reads 5 (and 3 and 4)"),
        "{e}"
    );
    v.as_object_mut().unwrap().remove("format");
    std::fs::write(f.0.join(COMPARE_FILE), v.to_string()).unwrap();
    assert!(err(&f.0).contains("names no format"));
    std::fs::write(f.0.join(COMPARE_FILE), format!("{{\"format\": {FORMAT}}}")).unwrap();
    assert!(err(&f.0).contains("is not a compare.json"));
    let mut s = summary();
    s.copies = 0;
    put(&f.0, &s);
    assert!(err(&f.0).contains("says 0 copies"));
}

#[test]
fn a_compare_json_over_the_cap_is_refused_unread() {
    let f = fixture("cap");
    let mut text = serde_json::to_string(&summary()).unwrap();
    text.push_str(&" ".repeat(MAX_COMPARE_BYTES as usize));
    std::fs::write(f.0.join(COMPARE_FILE), text).unwrap();
    let e = err(&f.0);
    assert!(e.contains("more than the 1048576 this rig reads"), "{e}");
}

#[test]
fn a_linked_compare_json_or_copy_is_refused() {
    let f = fixture("links");
    let elsewhere = Scratch::new("compare-links-elsewhere");
    std::fs::rename(f.0.join(COMPARE_FILE), elsewhere.0.join(COMPARE_FILE)).unwrap();
    symlink(elsewhere.0.join(COMPARE_FILE), f.0.join(COMPARE_FILE)).unwrap();
    assert!(
        is_compare_dir(&f.0),
        "so that show refuses it, with a reason"
    );
    let e = err(&f.0);
    assert!(e.contains("compare.json is a symbolic link"), "{e}");

    let f = fixture("link-copy");
    std::fs::rename(f.0.join("copy-2"), elsewhere.0.join("copy-2")).unwrap();
    symlink(elsewhere.0.join("copy-2"), f.0.join("copy-2")).unwrap();
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    assert!(
        j.summary
            .problems
            .iter()
            .any(|p| p.contains("copy-2: its report does not read back")
                && p.contains("symbolic link")),
        "{:?}",
        j.summary.problems
    );
    std::fs::remove_file(f.0.join("vm-each-fork")).ok();
    std::fs::remove_dir(f.0.join("vm-each-fork")).unwrap();
    symlink(elsewhere.0.join("copy-2"), f.0.join("vm-each-fork")).unwrap();
    let j = read(&f.0, None).unwrap();
    assert!(j
        .summary
        .problems
        .iter()
        .any(|p| p.contains("vm-each-fork is a symbolic link")));
}

mod template;

#[test]
fn the_criu_reset_over_the_copies_is_the_density_gate_s_each_copy_reset() {
    let f = fixture("criu-reset-each");
    let with = |resets: &str| {
        DENSITY.replace(
            "\"requested\"",
            &format!("\"reset_ms\": {resets}, \"requested\""),
        )
    };
    shared_os_report_with(&f.0.join("shared-os"), &with("[2800, 3100]"), |_| {});
    let j = read(&f.0, None).unwrap();
    // Each copy's reset, not the reset gate's one.
    assert_eq!(j.summary.shared_os.reset_ms, [2800, 3100]);
    // Fewer resets than copies: one copy's reset is missing, and the column does not count.
    shared_os_report_with(&f.0.join("shared-os"), &with("[2800]"), |_| {});
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    assert!(
        j.summary
            .problems
            .iter()
            .any(|p| p == "shared-OS: the density gate timed 1 resets of its 2 copies"),
        "{:?}",
        j.summary.problems
    );
}

#[test]
fn the_guest_ksm_reading_is_the_density_gate_s_and_a_failed_or_short_one_fails_the_column() {
    let f = fixture("guest-ksm");
    let copy = |label: &str, pss: u64| {
        format!(
            r#"{{"label": "{label}", "mem": {{"pss_kib": {pss}, "rss_kib": 28468, "uss_kib": 10000}}, "pid": 339, "processes": 5}}"#
        )
    };
    let with = |status: &str, copies: &[String]| {
        DENSITY.replace(
            "\"requested\"",
            &format!(
                r#""guest_ksm": {{"status": "{status}", "reason": "r", "per_copy": [{}], "pages_shared": 900, "pages_sharing": 2100, "full_scans": 3, "took_ms": 8000, "steady": true}}, "requested""#,
                copies.join(", ")
            ),
        )
    };
    let two = [copy("density-1", 15000), copy("density-2", 15100)];
    shared_os_report_with(&f.0.join("shared-os"), &with("PASS", &two), |_| {});
    let j = read(&f.0, None).unwrap();
    let k = &j.summary.shared_os.ksm;
    assert_eq!(k.status, Status::Pass, "{k:?}");
    assert_eq!(
        k.per_copy.iter().map(|m| m.pss_kib).collect::<Vec<_>>(),
        [15000, 15100]
    );
    assert!(k.notes[0].contains("900 pages shared"), "{:?}", k.notes);
    for (density, what) in [
        (
            with("PASS", &two[..1]),
            "shared-OS: the guest KSM reading has 1 copies, not 2",
        ),
        (
            with("FAIL", &[]),
            "shared-OS: the guest KSM reading is FAIL: r",
        ),
    ] {
        shared_os_report_with(&f.0.join("shared-os"), &density, |_| {});
        let j = read(&f.0, None).unwrap();
        assert_eq!(j.summary.verdict, Verdict::Fail, "{what}");
        assert!(
            j.summary.problems.iter().any(|p| p == what),
            "{what}: {:?}",
            j.summary.problems
        );
    }
    // Not asked for: said, and no failure.
    shared_os_report_with(&f.0.join("shared-os"), DENSITY, |_| {});
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.shared_os.ksm.status, Status::NotRun);
}

#[test]
fn a_criu_search_is_read_from_its_density_gate_and_a_count_is_no_search() {
    let f = fixture("criu-max");
    let searched = DENSITY
        .replace("\"requested\": {\"count\": 2}", "\"requested\": \"max\"")
        .replace("\"stopped_by\": \"count\"", "\"stopped_by\": \"cap\"")
        .replace(
            "\"ended_before\": []",
            "\"ended_before\": [], \"steps\": [{\"copies_up\": 0, \"elapsed_ms\": 0, \"mem_available_kib\": 800000, \"last_copy_ms\": 0}, {\"copies_up\": 1, \"elapsed_ms\": 1922, \"mem_available_kib\": 770000, \"last_copy_ms\": 1922}, {\"copies_up\": 2, \"elapsed_ms\": 3695, \"mem_available_kib\": 745000, \"last_copy_ms\": 1773}]",
        );
    let mut s = summary();
    s.arms = vec![Arm::Criu];
    s.max = true;
    put(&f.0, &s);
    shared_os_report_of(&f.0.join("shared-os"), &searched);
    let j = read(&f.0, None).unwrap();
    let search = j.summary.shared_os.search.as_ref().expect("the search");
    assert_eq!(search.steps.len(), 3);
    assert_eq!(
        search.stopped_by,
        sharedos_report::model::density::Stop::Cap
    );
    assert!(
        !j.summary
            .problems
            .iter()
            .any(|p| p.contains("search") || p.contains("density")),
        "{:?}",
        j.summary.problems
    );
    // A density gate that ran a count is no search, however the comparison names itself.
    shared_os_report_of(&f.0.join("shared-os"), DENSITY);
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    assert!(
        j.summary
            .problems
            .iter()
            .any(|p| p.contains("for --copies 2, not --copies max")),
        "{:?}",
        j.summary.problems
    );
}
