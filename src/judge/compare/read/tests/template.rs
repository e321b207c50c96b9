//! The templated arm's column read back: held to every check the VM-each column is, and no
//! report of one column counted in the other.

use super::*;
use crate::judge::compare::Arm;

fn template(s: &mut Summary) -> &mut VmEach {
    s.vm_template.as_mut().unwrap()
}

fn problems(dir: &Path) -> String {
    read(dir, None).unwrap().summary.problems.join("\n")
}

#[test]
fn a_failing_clone_fails_the_comparison_in_its_own_column() {
    let f = fixture("tpl-fail");
    vm_copy_report(&f.0.join("template-2"), TEMPLATE_STATE, |r| {
        r.gate_mut(GateName::Cleanup).unwrap().status = Status::Fail;
    });
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    let p = j.summary.problems.join("\n");
    assert!(p.contains("VM-template template-2: cleanup is FAIL"), "{p}");
    assert!(!p.contains("VM-each"), "{p}");
    assert!(
        j.warnings
            .iter()
            .any(|w| w.contains("a problem compare.json does not name: VM-template template-2")),
        "{:?}",
        j.warnings
    );
}

#[test]
fn a_clone_resumed_from_the_vm_each_save_does_not_count() {
    let f = fixture("tpl-origin");
    vm_copy_report(&f.0.join("template-1"), STATE, |_| {});
    let p = problems(&f.0);
    assert!(
        p.contains(&format!(
            "VM-template template-1: its report says it resumed from the save {STATE}, not the \
             column's fork {TEMPLATE_STATE}"
        )),
        "{p}"
    );
}

#[test]
fn a_vm_each_copy_s_report_put_in_the_template_column_fails_naming_both_places() {
    for twice in TEMPLATE_COPIES {
        let f = fixture(&format!("tpl-twice-{twice}"));
        copy_dir(&f.0.join("copy-1"), &f.0.join(twice));
        let p = problems(&f.0);
        assert!(
            p.contains(&format!(
                "VM-template {twice}: its report is the same resume as VM-each copy-1's \
                 (copy-1/): both carry the nonce {}: one resumed guest counted twice",
                nonce_of("copy-1")
            )),
            "{twice}: {p}"
        );
        // compare.json edited to record that resume for the clone: one resume, two columns.
        let mut s = summary();
        let t = template(&mut s);
        let c = t.copies.iter_mut().chain(t.reset.as_mut());
        c.filter(|c| c.label == twice)
            .for_each(|c| c.nonce = nonce_of("copy-1"));
        put(&f.0, &s);
        let p = problems(&f.0);
        assert!(
            p.contains(&format!(
                "VM-each copy-1 and VM-template {twice}: compare.json records one resume twice \
                 (nonce {})",
                nonce_of("copy-1")
            )),
            "{twice}: {p}"
        );
        assert!(p.contains("the same resume as VM-each copy-1's"), "{p}");
    }
}

#[test]
fn a_clone_naming_a_vm_each_copy_s_report_is_refused() {
    let f = fixture("tpl-names");
    let mut s = summary();
    template(&mut s).copies[0].report = "copy-1".into();
    put(&f.0, &s);
    let e = err(&f.0);
    assert!(
        e.contains("names \"copy-1\" as VM-template template-1's report and as another's"),
        "{e}"
    );
    let mut s = summary();
    template(&mut s).fork = "vm-each-fork".into();
    put(&f.0, &s);
    let e = err(&f.0);
    assert!(
        e.contains("names \"vm-each-fork\" as the VM-template fork and as another's"),
        "{e}"
    );
    for bad in ["../x", "a/b", "", "..", "/etc", ".hidden"] {
        let mut s = summary();
        template(&mut s).reset.as_mut().unwrap().report = bad.into();
        put(&f.0, &s);
        let e = err(&f.0);
        assert!(
            e.contains(&format!(
                "names {bad:?} as VM-template template-reset's report"
            )) && e.contains("one plain name"),
            "{bad}: {e}"
        );
        let mut s = summary();
        template(&mut s).fork = bad.into();
        put(&f.0, &s);
        assert!(err(&f.0).contains("as the VM-template fork"), "{bad}");
    }
    let mut s = summary();
    template(&mut s).copies.push(VmCopy::default());
    put(&f.0, &s);
    assert!(err(&f.0).contains("lists 3 VM copies for a comparison of 2"));
}

#[test]
fn a_linked_clone_or_template_fork_is_refused() {
    let f = fixture("tpl-links");
    let elsewhere = Scratch::new("compare-tpl-links-elsewhere");
    std::fs::rename(f.0.join("template-2"), elsewhere.0.join("template-2")).unwrap();
    symlink(elsewhere.0.join("template-2"), f.0.join("template-2")).unwrap();
    std::fs::remove_dir(f.0.join("vm-template-fork")).unwrap();
    symlink(elsewhere.0.join("template-2"), f.0.join("vm-template-fork")).unwrap();
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    let p = j.summary.problems.join("\n");
    assert!(
        p.contains("VM-template template-2: its report does not read back")
            && p.contains("symbolic link"),
        "{p}"
    );
    assert!(
        p.contains("VM-template: its fork's directory vm-template-fork is a symbolic link"),
        "{p}"
    );
}

#[test]
fn a_clone_s_report_unnamed_and_its_resources_are_checked_as_vm_each_s() {
    let f = fixture("tpl-unnamed");
    vm_copy_report(&f.0.join("template-3"), TEMPLATE_STATE, |_| {});
    let p = problems(&f.0);
    assert!(
        p.contains("holds a report compare.json does not name: template-3/"),
        "{p}"
    );
    let f = fixture("tpl-resources");
    let mut s = summary();
    template(&mut s).memory_mib = 64;
    put(&f.0, &s);
    let j = read(&f.0, None).unwrap();
    let w = j.warnings.join("\n");
    for c in TEMPLATE_COPIES {
        assert!(
            w.contains(&format!(
                "VM-template {c}: compare.json says each VM had 64 MiB and 2 CPUs, its report \
                 says 1024 MiB and 2 CPUs"
            )),
            "{w}"
        );
    }
    assert!(!w.contains("VM-each"), "{w}");
    assert_eq!(j.summary.vm_template.as_ref().unwrap().memory_mib, 1024);
}

#[test]
fn the_template_s_own_figures_are_kept_as_recorded_and_checked() {
    let f = fixture("tpl-ram");
    let mut s = summary();
    let t = template(&mut s).template.as_mut().unwrap();
    t.resident_bytes = t.bytes + 1;
    put(&f.0, &s);
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Fail);
    assert_eq!(j.summary.vm_template, s.vm_template);
    assert!(
        j.summary
            .problems
            .iter()
            .any(|p| p.starts_with("VM-template: its template RAM file holds")),
        "{:?}",
        j.summary.problems
    );
}

#[test]
fn an_arm_not_run_is_not_read_and_its_reports_do_not_hide() {
    // The template arm taken out of the list: its column is not read, and its reports, left
    // in the directory, fail the comparison as reports it does not name.
    let f = fixture("tpl-not-run");
    let mut s = summary();
    s.arms = vec![Arm::Criu, Arm::Vm];
    judge(&mut s);
    put(&f.0, &s);
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.vm_template, None);
    let p = j.summary.problems.join("\n");
    for c in TEMPLATE_COPIES {
        assert!(p.contains(&format!("does not name: {c}/")), "{p}");
    }
    // Run without it, the directory holds none: PASS, with nothing of the template shown.
    for c in TEMPLATE_COPIES {
        std::fs::remove_dir_all(f.0.join(c)).unwrap();
    }
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Pass, "{:?}", j.summary.problems);
    // Only VM arms: the shared-OS column is not read, named or not.
    let f = fixture("criu-not-run");
    std::fs::remove_dir_all(f.0.join("shared-os")).unwrap();
    let mut s = summary();
    s.arms = vec![Arm::Vm, Arm::VmTemplate];
    s.shared_os = SharedOs::default();
    judge(&mut s);
    put(&f.0, &s);
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.verdict, Verdict::Pass, "{:?}", j.summary.problems);
    assert_eq!(j.summary, s);
    // The template arm named but no column of it: FAIL.
    s.vm_template = None;
    put(&f.0, &s);
    assert!(problems(&f.0).contains("VM-template: the arm was run (--arms)"));
}

#[test]
fn a_format_3_comparison_reads_as_its_two_arms() {
    let f = fixture("format-3");
    for c in TEMPLATE_COPIES {
        std::fs::remove_dir_all(f.0.join(c)).unwrap();
    }
    let mut v = serde_json::to_value(summary()).unwrap();
    let o = v.as_object_mut().unwrap();
    o.remove("arms");
    o.remove("vm_template");
    o.insert("format".into(), 3.into());
    std::fs::write(f.0.join(COMPARE_FILE), v.to_string()).unwrap();
    let j = read(&f.0, None).unwrap();
    assert_eq!(j.summary.arms, [Arm::Criu, Arm::Vm]);
    assert_eq!(j.summary.verdict, Verdict::Pass, "{:?}", j.summary.problems);
}
