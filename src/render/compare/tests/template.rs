//! The templated arm's column in every form, and the arms a comparison did not run.

use super::*;

fn judged(s: Summary) -> Judged {
    Judged {
        summary: s,
        warnings: vec![],
    }
}

/// The line of `t` that starts with `what`, its spaces made one.
fn line(t: &str, what: &str) -> String {
    t.lines()
        .find(|l| l.trim_start().starts_with(what))
        .unwrap_or_else(|| panic!("no {what}: {t}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
fn the_template_column_has_its_rows_and_its_ratio_against_criu() {
    let s = three_arms();
    let t = text(&s);
    assert_eq!(line(&t, "copies"), "copies 2 2 2", "a column per arm: {t}");
    assert!(
        t.lines()
            .any(|l| l.split("  ").filter(|c| !c.is_empty()).count() == 5
                && l.contains("shared-OS (CRIU)")
                && l.contains("VM each")
                && l.contains("VM template")
                && l.contains("shared:VM each")
                && l.contains("shared:VM template")),
        "{t}"
    );
    // 27 MiB a CRIU copy; 300 MiB a VM-each copy; 100 MiB a clone.
    assert_eq!(
        line(&t, "PSS per desktop: median"),
        "PSS per desktop: median 27.0 MiB 300.0 MiB * 100.0 MiB * 1:11.1 * 1:3.7 *"
    );
    assert_eq!(
        line(&t, "fork: median"),
        "fork: median 3.20 s 4.00 s * 1.00 s * 1:1.2 * 1:0.3 *"
    );
    assert_eq!(
        line(&t, "template RAM file (shared)"),
        "template RAM file (shared) 200.0 MiB *"
    );
    // (100 + 100 + 200) / 2 MiB: the clones' private pages and the template's resident ones.
    assert_eq!(
        line(&t, "host memory per desktop, template included"),
        "host memory per desktop, template included 200.0 MiB * 1:7.4 *"
    );
    assert!(
        t.contains(
            "per desktop: 27.0 MiB against VM each 300.0 MiB *, 1:11.1 * (100.0 MiB * beyond an \
             idle VM, 1:3.7 *) and VM template 100.0 MiB *, 1:3.7 * (200.0 MiB * of the host's \
             with the template's RAM, 1:7.4 *)"
        ),
        "{t}"
    );
    for said in [
        "VM template RAM file: 1024.0 MiB * of which 200.0 MiB * resident: a tmpfs file, mapped \
         private",
        "VM template QEMU features: x-ignore-shared, memory-backend-file",
        "VM template kept off: free page reporting: it would free the template's pages",
    ] {
        assert!(t.contains(said), "{said}: {t}");
    }
    assert!(!t.contains("not run"), "{t}");
    let j = judged(s);
    let m = md(&j);
    assert!(
        m.contains(
            "| host memory per desktop, template included |  |  | 200.0 MiB \\* |  | 1:7.4 \\* |"
        ),
        "{m}"
    );
    assert!(
        m.contains("VM template QEMU features: x-ignore-shared"),
        "{m}"
    );
    let h = html(&j);
    assert!(
        h.contains("<th>VM template</th><th>shared:VM each</th><th>shared:VM template</th>"),
        "{h}"
    );
    assert!(h.contains("<li>VM template, template-reset: <code>template-reset/</code></li>"));
    assert!(h.contains("the VM template fork's console: <code>vm-template-fork/</code>"));
}

#[test]
fn the_template_s_words_are_escaped_in_every_form() {
    let j = hostile();
    let (esc_line, esc_md, esc_html) = (
        escape::line(HOSTILE),
        escape::markdown(HOSTILE),
        escape::html(HOSTILE),
    );
    let t = show_text(&j);
    for said in ["RAM file: ", "QEMU features: ", "kept off: "] {
        assert!(t.contains(&format!("VM template {said}")), "{said}: {t}");
    }
    assert!(
        t.contains(&format!("VM template kept off: {esc_line}")),
        "{t}"
    );
    assert!(t.contains(&format!("VM template QEMU features: {esc_line}")));
    assert!(
        md(&j).contains(&format!("VM template kept off: {esc_md}")),
        "{}",
        md(&j)
    );
    let h = html(&j);
    assert!(
        h.contains(&format!("VM template kept off: {esc_html}")),
        "{h}"
    );
    assert!(h.contains(&format!("<li>VM template, {esc_html}: ")), "{h}");
}

#[test]
fn an_arm_not_run_has_no_column_and_is_said_in_every_form() {
    let mut s = three_arms();
    s.arms = vec![Arm::Criu, Arm::Vm];
    let t = text(&s);
    assert!(t.contains("  not run (--arms): VM template\n"), "{t}");
    assert_eq!(
        (
            t.matches("VM template").count(),
            t.matches("template-").count()
        ),
        (1, 0),
        "nothing of the template shown but that it was not run: {t}"
    );
    let j = judged(s.clone());
    assert!(md(&j).contains("\nnot run (--arms): VM template.\n"));
    assert!(!md(&j).contains("shared:VM template"));
    let h = html(&j);
    assert!(h.contains("<p class=\"note\">not run (--arms): VM template.</p>"));
    assert!(
        !h.contains("template-1") && !h.contains("<th>VM template</th>"),
        "{h}"
    );
    assert!(!chart::memory_series(&s)
        .iter()
        .chain(&chart::latency_series(&s))
        .any(|x| x.label.contains("template")));
    // Run, with no column of it: said, and not as not run.
    let mut s = three_arms();
    s.vm_template = None;
    let t = text(&s);
    assert!(
        t.contains("  run, with no column recorded: VM template\n"),
        "{t}"
    );
    assert!(!t.contains("not run"), "{t}");

    // No CRIU arm: no CRIU column, and so no ratio against it.
    let mut s = three_arms();
    s.arms = vec![Arm::Vm, Arm::VmTemplate];
    let t = text(&s);
    assert!(t.contains("not run (--arms): shared-OS (CRIU)"), "{t}");
    assert!(!t.contains("shared:") && !t.contains("1:"), "{t}");
    assert_eq!(
        line(&t, "PSS per desktop: median"),
        "PSS per desktop: median 300.0 MiB * 100.0 MiB *"
    );
    assert!(
        t.contains(
            "per desktop: VM each 300.0 MiB * (100.0 MiB * beyond an idle VM) and VM template \
             100.0 MiB * (200.0 MiB * of the host's with the template's RAM)"
        ),
        "{t}"
    );
    assert!(!chart::memory_series(&s)
        .iter()
        .chain(&chart::latency_series(&s))
        .any(|x| x.label.starts_with("shared-OS")));
    // The CRIU arm alone: its column, and no VM row left empty.
    let mut s = three_arms();
    s.arms = vec![Arm::Criu];
    let t = text(&s);
    assert!(t.contains("not run (--arms): VM each, VM template"), "{t}");
    assert!(!t.contains("of it QEMU's own"), "{t}");
    assert!(
        t.contains("per desktop: 27.0 MiB (shared-OS), no VM arm run"),
        "{t}"
    );
}

#[test]
fn the_charts_draw_the_template_column() {
    let s = three_arms();
    let memory = chart::memory_series(&s);
    let find = |series: &[chart::Series], label: &str| {
        series
            .iter()
            .find(|x| x.label.starts_with(label))
            .unwrap_or_else(|| panic!("no {label}"))
            .points
            .clone()
    };
    assert_eq!(
        find(&memory, "VM template: sum of the QEMUs' PSS"),
        [(1.0, 100.0), (2.0, 200.0)]
    );
    // The template's 200 MiB from the first clone on, each clone's 100 MiB on top.
    assert_eq!(
        find(
            &memory,
            "VM template: the QEMUs' USS and the template's RAM"
        ),
        [(1.0, 300.0), (2.0, 400.0)]
    );
    let latency = chart::latency_series(&s);
    assert_eq!(
        find(&latency, "VM template: clone resumed"),
        [(1.0, 1.0), (2.0, 1.0)]
    );
    assert_eq!(
        find(&latency, "VM template reset"),
        [(1.0, 0.9), (2.0, 0.9)]
    );
    let h = html(&judged(s));
    let charts = svgs(&h);
    assert_eq!(charts.len(), 2);
    for (svg, colour) in charts
        .iter()
        .zip([chart::VM_TEMPLATE_HOST, chart::VM_TEMPLATE])
    {
        assert!(
            svg.to_lowercase().contains(&hex(colour).to_lowercase()),
            "{svg}"
        );
    }
}

#[test]
fn a_diff_holds_the_template_s_figures_and_the_arms() {
    let a = judged(summary());
    let b = judged(three_arms());
    let d = diff(&a, &b, "a", "b");
    assert!(
        line(&d, "arms").ends_with("criu,vm criu,vm,vm-template differs"),
        "{d}"
    );
    assert_eq!(
        line(&d, "VM-template host memory per desktop"),
        "VM-template host memory per desktop, template included n/a 200.0 MiB * differs *"
    );
    assert_eq!(
        line(&d, "VM-template PSS per desktop"),
        "VM-template PSS per desktop n/a 100.0 MiB * differs *"
    );
    // An arm neither side ran has no rows.
    assert!(!diff(&a, &a, "a", "b").contains("VM-template"));
}
