//! A comparison directory as vm-compare leaves it, judged again from its reports by show and
//! diff.

use super::{code, rig, stderr, stdout, write_report};
use crate::common::scratch::Scratch;
use sharedos_report::report;
use std::path::Path;

/// A comparison directory as vm-compare leaves it, but for its copies' reports, which are plain
/// vm-run reports and no copies of a VM fork: compare.json says PASS over them.
fn write_comparison(dir: &Path) {
    use sharedos_report::model::density::Mem;
    use sharedos_rig::judge::compare::{self, SharedOs, Summary, TemplateRam, VmCopy, VmEach};
    let mem = |pss| Mem {
        rss_kib: pss,
        pss_kib: pss,
        uss_kib: pss,
    };
    for d in [
        "shared-os",
        "copy-1",
        "copy-2",
        "reset",
        "template-1",
        "template-2",
        "template-reset",
    ] {
        write_report(&dir.join(d), "2026-12-02T09:00:00Z", |_| {});
    }
    std::fs::create_dir_all(dir.join("vm-each-fork")).unwrap();
    std::fs::create_dir_all(dir.join("vm-template-fork")).unwrap();
    let copy = |label: &str| VmCopy {
        label: label.into(),
        report: label.into(),
        nonce: format!("{label:0>32}"),
        mac: String::new(),
        resume_ms: 1700,
        host_mem: Some(mem(380_000)),
        host_split: None,
        problems: vec![],
    };
    let s = Summary {
        format: compare::FORMAT,
        image: "bookworm".into(),
        accel: "tcg".into(),
        copies: 2,
        max: false,
        workload: None,
        arms: compare::Arm::ALL.to_vec(),
        vm_template: Some(VmEach {
            fork: "vm-template-fork".into(),
            copies: vec![copy("template-1"), copy("template-2")],
            reset: Some(copy("template-reset")),
            memory_mib: 1024,
            cpus: 2,
            template: Some(TemplateRam {
                bytes: 1 << 30,
                resident_bytes: 300 << 20,
                how: "a tmpfs file each clone maps private".into(),
                features: vec!["x-ignore-shared".into()],
                off: vec!["free page reporting".into()],
            }),
            ..VmEach::default()
        }),
        shared_os: SharedOs {
            report: "shared-os".into(),
            restore_ms: vec![1900, 1800],
            per_copy: vec![mem(27_000), mem(27_000)],
            ..SharedOs::default()
        },
        vm_each: VmEach {
            fork: "vm-each-fork".into(),
            copies: vec![copy("copy-1"), copy("copy-2")],
            reset: Some(copy("reset")),
            idle_guest: Some(mem(260_000)),
            memory_mib: 1024,
            cpus: 2,
            ..VmEach::default()
        },
        verdict: report::Verdict::Pass,
        problems: vec![],
    };
    std::fs::write(
        dir.join(compare::COMPARE_FILE),
        serde_json::to_string_pretty(&s).unwrap(),
    )
    .unwrap();
}

#[test]
fn show_and_diff_judge_a_comparison_again_from_its_reports() {
    let s = Scratch::new("compare");
    let c = s.0.join("compare");
    write_comparison(&c);
    let cs = c.to_str().unwrap();

    // compare.json says PASS; its copies' reports are no VM copies: FAIL, exit 1, and it is said.
    let o = rig(&["show", cs]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let t = stdout(&o);
    assert!(
        t.contains("shared-OS (CRIU)") && t.contains("per desktop:"),
        "{t}"
    );
    assert!(
        t.contains("warning: compare.json says PASS, its reports judged again give FAIL"),
        "{t}"
    );
    assert!(t.contains("problem: VM-each copy-1: "), "{t}");
    // The templated arm's column, judged again as the VM-each one is.
    assert!(
        t.contains("VM template") && t.contains("template RAM file (shared)"),
        "{t}"
    );
    assert!(t.contains("problem: VM-template template-1: "), "{t}");
    assert!(
        t.lines()
            .last()
            .unwrap()
            .starts_with("judged again from its reports: FAIL (exit 1)"),
        "{t}"
    );
    let o = rig(&["show", cs, "--format", "md"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("**vm-compare bookworm: FAIL**"));
    let o = rig(&["show", cs, "--format", "html"]);
    assert_eq!(code(&o), 1);
    assert_eq!(stdout(&o).matches("<svg").count(), 2);
    let o = rig(&["show", cs, "--format", "junit"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("fix: give --format text, md or html"));

    let o = rig(&["diff", cs, cs]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(
        stdout(&o).contains("VM-each fork: median")
            && stdout(&o).contains("VM-template fork: median"),
        "{}",
        stdout(&o)
    );
    // A comparison against a report: a usage error, which says what to give.
    let report = c.join("copy-1");
    for (a, b) in [
        (cs, report.to_str().unwrap()),
        (report.to_str().unwrap(), cs),
    ] {
        let o = rig(&["diff", a, b]);
        assert_eq!(code(&o), 2);
        assert!(
            stderr(&o).contains(
                "is a comparison directory (from `cargo xtask vm-compare`) and the other is not"
            ),
            "{}",
            stderr(&o)
        );
    }
    // A clone of the template named as a VM-each copy's report: one report, two columns,
    // refused, exit 2.
    let said = std::fs::read_to_string(c.join("compare.json")).unwrap();
    let text = said.replace("\"report\": \"template-1\"", "\"report\": \"copy-1\"");
    assert_ne!(text, said);
    std::fs::write(c.join("compare.json"), text).unwrap();
    let o = rig(&["show", cs]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("as VM-template template-1's report and as another's"),
        "{}",
        stderr(&o)
    );
    std::fs::write(c.join("compare.json"), said).unwrap();
    // A report named outside the directory: refused, exit 2.
    let text = std::fs::read_to_string(c.join("compare.json"))
        .unwrap()
        .replace("\"report\": \"copy-2\"", "\"report\": \"../copy-2\"");
    std::fs::write(c.join("compare.json"), text).unwrap();
    let o = rig(&["show", cs]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("one plain name"), "{}", stderr(&o));
}
