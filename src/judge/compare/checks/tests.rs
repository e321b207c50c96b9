use super::*;
use crate::judge::compare::{Reading, SharedOs, FORMAT};
use sharedos_report::model::density::Mem;

fn copy(label: &str) -> VmCopy {
    VmCopy {
        label: label.into(),
        report: label.into(),
        nonce: format!("{label:0>32}"),
        mac: String::new(),
        resume_ms: 3000,
        host_mem: Some(Mem {
            rss_kib: 400_000,
            pss_kib: 390_000,
            uss_kib: 380_000,
        }),
        host_split: None,
        problems: vec![],
    }
}

fn summary() -> Summary {
    Summary {
        format: FORMAT,
        image: "bookworm".into(),
        accel: "tcg".into(),
        copies: 2,
        max: false,
        workload: None,
        arms: vec![Arm::Criu, Arm::Vm],
        vm_template: None,
        shared_os: SharedOs::default(),
        vm_each: VmEach {
            copies: vec![copy("copy-1"), copy("copy-2")],
            reset: Some(copy("reset")),
            ..VmEach::default()
        },
        verdict: Verdict::Fail,
        problems: vec![],
    }
}

#[test]
fn both_columns_checked_pass() {
    let mut s = summary();
    judge(&mut s);
    assert_eq!(s.verdict, Verdict::Pass, "{:?}", s.problems);
    // A reading not taken is said, and is no failure; one taken of every copy passes.
    s.vm_each.ksm = Reading::not_run("not root");
    s.vm_each.reclaim = Reading {
        status: Status::Pass,
        per_copy: vec![Mem::default(); 2],
        ..Reading::default()
    };
    judge(&mut s);
    assert_eq!(s.verdict, Verdict::Pass, "{:?}", s.problems);
}

#[test]
fn a_copy_that_did_not_hold_its_state_fails_the_comparison() {
    let mut s = summary();
    s.vm_each.copies[1]
        .problems
        .push("live_state_probe failed its check fork_token_kept".into());
    judge(&mut s);
    assert_eq!(s.verdict, Verdict::Fail);
    assert!(s.problems[0].contains("copy-2") && s.problems[0].contains("fork_token_kept"));
}

#[test]
fn missing_copies_memory_or_reset_fail_the_comparison() {
    for (what, f) in [
        (
            "came up",
            (|s: &mut Summary| {
                s.vm_each.copies.pop();
            }) as fn(&mut Summary),
        ),
        ("memory", |s| s.vm_each.copies[0].host_mem = None),
        ("reset", |s| s.vm_each.reset = None),
        (
            "VM-each copy-1 and reset: compare.json records one resume twice (nonce \
             00000000000000000000000000copy-1)",
            |s| s.vm_each.reset.as_mut().unwrap().nonce = s.vm_each.copies[0].nonce.clone(),
        ),
        (
            "copy-2: compare.json records no nonce for its resume",
            |s| s.vm_each.copies[1].nonce.clear(),
        ),
        ("KSM reading is FAIL", |s| {
            s.vm_each.ksm = Reading::failed("ksmd", "ksmd's second full scan: timed out")
        }),
        ("memory given back reading has 1 copies", |s| {
            s.vm_each.reclaim = Reading {
                status: Status::Pass,
                per_copy: vec![Mem::default()],
                ..Reading::default()
            }
        }),
        ("shared-OS", |s| {
            s.shared_os.problems.push("density is FAIL".into())
        }),
    ] {
        let mut s = summary();
        f(&mut s);
        judge(&mut s);
        assert_eq!(s.verdict, Verdict::Fail, "{what}");
        assert!(
            s.problems.iter().any(|p| p.contains(what)),
            "{what}: {:?}",
            s.problems
        );
    }
}

/// The templated arm's column as vm-compare writes it: its own clones, their own nonces, and
/// the template's RAM file.
fn template_column() -> VmEach {
    VmEach {
        copies: vec![copy("template-1"), copy("template-2")],
        reset: Some(copy("template-reset")),
        template: Some(TemplateRam {
            bytes: 1 << 30,
            resident_bytes: 300 << 20,
            how: "tmpfs file, mapped private by each clone".into(),
            features: vec!["x-ignore-shared".into()],
            off: vec!["free page reporting: it would drop the shared pages".into()],
        }),
        ..VmEach::default()
    }
}

/// [`summary`] with all three arms run.
fn three_arms() -> Summary {
    let mut s = summary();
    s.arms = Arm::ALL.to_vec();
    s.vm_template = Some(template_column());
    s
}

fn problems_of(mut s: Summary) -> Vec<String> {
    judge(&mut s);
    assert_eq!(
        s.verdict == Verdict::Pass,
        s.problems.is_empty(),
        "{:?}",
        s.problems
    );
    s.problems
}

#[test]
fn three_arms_checked_pass() {
    assert_eq!(problems_of(three_arms()), Vec::<String>::new());
}

#[test]
fn an_arm_not_run_is_not_judged() {
    // Each column left failing: only the arms run count.
    let mut s = three_arms();
    s.shared_os.problems.push("density is FAIL".into());
    s.vm_each.copies.clear();
    s.vm_template.as_mut().unwrap().reset = None;
    for (arms, left) in [
        (vec![Arm::Criu], "shared-OS: density is FAIL"),
        (vec![Arm::Vm], "VM-each: 0 copies came up, not 2"),
        (vec![Arm::VmTemplate], "VM-template: no reset was measured"),
    ] {
        let mut s = s.clone();
        s.arms = arms.clone();
        assert_eq!(problems_of(s), [left], "{arms:?}");
    }
    // A template column of an arm not run is not judged either.
    let mut s = summary();
    s.vm_template = Some(VmEach::default());
    assert_eq!(problems_of(s), Vec::<String>::new());
}

#[test]
fn the_template_column_is_held_to_every_check_of_the_vm_each_column() {
    let t = |f: fn(&mut VmEach)| {
        let mut s = three_arms();
        f(s.vm_template.as_mut().unwrap());
        problems_of(s)
    };
    for (want, f) in [
        (
            "VM-template: 1 copies came up, not 2",
            (|c: &mut VmEach| {
                c.copies.pop();
            }) as fn(&mut VmEach),
        ),
        ("VM-template template-1: no host memory figure", |c| {
            c.copies[0].host_mem = None
        }),
        ("VM-template: no reset was measured", |c| c.reset = None),
        ("VM-template template-2: forged", |c| {
            c.copies[1].problems.push("forged".into())
        }),
        ("VM-template: interrupted", |c| {
            c.problems.push("interrupted".into())
        }),
        (
            "VM-template: a lie run, not a measurement: wrong-save",
            |c| c.lie = Some("wrong-save".into()),
        ),
        ("VM-template: the KSM reading is FAIL: timed out", |c| {
            c.ksm = Reading::failed("ksmd", "timed out")
        }),
        (
            "VM-template template-reset: compare.json records no nonce for its resume",
            |c| c.reset.as_mut().unwrap().nonce.clear(),
        ),
        (
            "VM-template template-1 and template-2: compare.json records one resume twice",
            |c| c.copies[1].nonce = c.copies[0].nonce.clone(),
        ),
    ] {
        let p = t(f);
        assert!(p.iter().any(|p| p.starts_with(want)), "{want}: {p:?}");
        assert!(
            p.iter().all(|p| p.starts_with("VM-template")),
            "{want}: {p:?}"
        );
    }
}

#[test]
fn a_template_arm_run_without_its_column_or_its_template_fails() {
    let mut s = three_arms();
    s.vm_template = None;
    assert_eq!(
        problems_of(s),
        ["VM-template: the arm was run (--arms) and compare.json has no column of it"]
    );
    let mut s = three_arms();
    s.vm_template.as_mut().unwrap().template = None;
    assert_eq!(
        problems_of(s),
        [
            "VM-template: compare.json records no template RAM file: without it a desktop's \
             share of the host's memory cannot be told"
        ]
    );
}

#[test]
fn a_template_holding_more_than_its_file_or_nothing_fails() {
    let edit = |f: fn(&mut TemplateRam)| {
        let mut s = three_arms();
        f(s.vm_template.as_mut().unwrap().template.as_mut().unwrap());
        problems_of(s)
    };
    // All of it resident is the most it can be.
    assert_eq!(edit(|t| t.resident_bytes = t.bytes), Vec::<String>::new());
    assert_eq!(
        edit(|t| t.resident_bytes = t.bytes + 1),
        [format!(
            "VM-template: its template RAM file holds {} bytes in memory, more than its {} \
             bytes: the figures are not the host's reading of one file",
            (1u64 << 30) + 1,
            1u64 << 30
        )]
    );
    assert_eq!(
        edit(|t| (t.bytes, t.resident_bytes) = (0, 0)),
        ["VM-template: its template RAM file is recorded as 0 bytes: no guest's memory"]
    );
}

#[test]
fn a_template_recorded_in_the_vm_each_column_fails() {
    let mut s = three_arms();
    s.vm_each.template = template_column().template;
    assert_eq!(
        problems_of(s),
        [
            "VM-each: compare.json records a template RAM file, which only the templated arm's \
             clones map"
        ]
    );
}

#[test]
fn one_resume_recorded_in_both_vm_columns_fails_naming_both() {
    for (i, twice) in ["template-1", "template-reset"].into_iter().enumerate() {
        let mut s = three_arms();
        let t = s.vm_template.as_mut().unwrap();
        let c = t
            .copies
            .iter_mut()
            .chain(t.reset.as_mut())
            .nth(i * 2)
            .unwrap();
        assert_eq!(c.label, twice);
        c.nonce = s.vm_each.copies[1].nonce.clone();
        assert_eq!(
            problems_of(s),
            [format!(
                "VM-each copy-2 and VM-template {twice}: compare.json records one resume twice \
                 (nonce {:0>32}): one resumed guest cannot be two copies",
                "copy-2"
            )]
        );
    }
}

#[test]
fn no_arm_or_an_arm_named_twice_fails() {
    let mut s = summary();
    s.arms.clear();
    assert_eq!(
        problems_of(s),
        ["compare.json names no arm run: a comparison of nothing measures nothing"]
    );
    let mut s = three_arms();
    s.arms = vec![Arm::Criu, Arm::Vm, Arm::Vm, Arm::Vm, Arm::VmTemplate];
    assert_eq!(
        problems_of(s),
        ["compare.json names the arm vm more than once: each arm is run once"]
    );
}

/// A comparison that searched (`--copies max`): the VM-each arm reached two copies, stopped by
/// the memory floor, its steps one per copy.
fn searched() -> Summary {
    use crate::judge::compare::Search;
    use sharedos_report::model::density::{Limits, SearchStep, Stop};
    use sharedos_report::report::Copies;
    let mut s = summary();
    s.max = true;
    s.copies = 64;
    s.arms = vec![Arm::Vm];
    let step = |n: u32| SearchStep {
        copies_up: n,
        elapsed_ms: u64::from(n) * 3000,
        mem_available_kib: 20 << 20,
        last_copy_ms: 3000,
    };
    s.vm_each.search = Some(Search {
        limits: Limits::for_request(Copies::Max, 24 << 20, None),
        stopped_by: Stop::MemoryFloor,
        detail: "2 copies up, MemAvailable 3000 MiB".into(),
        steps: vec![step(0), step(1), step(2)],
        failed: None,
    });
    s
}

#[test]
fn a_search_is_judged_by_what_it_reached_and_each_of_its_records_can_fail_it() {
    use sharedos_report::model::density::Stop;
    let mut s = searched();
    judge(&mut s);
    assert_eq!(s.verdict, Verdict::Pass, "{:?}", s.problems);
    type Fault = fn(&mut Summary);
    let cases: [(&str, Fault); 9] = [
        ("no record of its search", |s| s.vm_each.search = None),
        ("in a comparison of 64 copies", |s| s.max = false),
        ("not one per copy", |s| {
            if let Some(x) = &mut s.vm_each.search {
                x.steps.swap(0, 1);
            }
        }),
        ("last step has 1 copies up", |s| {
            if let Some(x) = &mut s.vm_each.search {
                x.steps.pop();
            }
        }),
        ("past its search's cap", |s| {
            if let Some(x) = &mut s.vm_each.search {
                x.limits.cap = 1;
            }
        }),
        ("stopped at a count", |s| {
            if let Some(x) = &mut s.vm_each.search {
                x.stopped_by = Stop::Count;
            }
        }),
        ("records no copy that did", |s| {
            if let Some(x) = &mut s.vm_each.search {
                x.stopped_by = Stop::RestoreFailed;
            }
        }),
        ("records a failed copy, and did not stop at one", |s| {
            if let Some(x) = &mut s.vm_each.search {
                x.failed = Some(copy("copy-3"));
            }
        }),
        ("does not say what it saw", |s| {
            if let Some(x) = &mut s.vm_each.search {
                x.detail = " ".into();
            }
        }),
    ];
    for (want, fault) in cases {
        let mut s = searched();
        fault(&mut s);
        judge(&mut s);
        assert_eq!(s.verdict, Verdict::Fail, "{want}");
        assert!(
            s.problems.iter().any(|p| p.contains(want)),
            "{want}: {:?}",
            s.problems
        );
    }
    // A clone that failed is a limit the search may name, its copy recorded.
    let mut s = searched();
    if let Some(x) = &mut s.vm_each.search {
        x.stopped_by = Stop::RestoreFailed;
        x.failed = Some(copy("copy-3"));
    }
    judge(&mut s);
    assert_eq!(s.verdict, Verdict::Pass, "{:?}", s.problems);
    // The column holds fewer copies than the search reached.
    let mut s = searched();
    s.vm_each.copies.pop();
    judge(&mut s);
    assert!(
        s.problems
            .iter()
            .any(|p| p.contains("1 copies came up, not 2")),
        "{:?}",
        s.problems
    );
}
