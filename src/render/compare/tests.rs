use super::*;
use crate::escape;
use crate::judge::compare::read::Judged;
use crate::judge::compare::{Arm, Reading, SharedOs, TemplateRam, VmCopy, VmEach, FORMAT};
use sharedos_report::model::density::Mem;
use sharedos_report::report::{Status, Verdict};

fn mem(pss: u64) -> Mem {
    Mem {
        rss_kib: pss,
        pss_kib: pss,
        uss_kib: pss,
    }
}

fn copy(label: &str, resume_ms: u64, mib: u64) -> VmCopy {
    VmCopy {
        label: label.into(),
        report: label.into(),
        resume_ms,
        host_mem: Some(mem(mib * 1024)),
        ..VmCopy::default()
    }
}

fn summary() -> Summary {
    let copy = |label: &str| copy(label, 4000, 300);
    Summary {
        format: FORMAT,
        image: "bookworm".into(),
        accel: "tcg".into(),
        copies: 2,
        max: false,
        workload: None,
        arms: vec![Arm::Criu, Arm::Vm],
        vm_template: None,
        shared_os: SharedOs {
            report: "shared-os".into(),
            restore_ms: vec![3000, 3400],
            reset_ms: vec![2500],
            per_copy: vec![mem(27 * 1024), mem(27 * 1024)],
            ..SharedOs::default()
        },
        vm_each: VmEach {
            fork: "vm-each-fork".into(),
            copies: vec![copy("copy-1"), copy("copy-2")],
            reset: Some(copy("reset")),
            memory_mib: 1024,
            cpus: 2,
            idle_guest: Some(mem(200 * 1024)),
            ..VmEach::default()
        },
        verdict: Verdict::Fail,
        problems: vec!["VM-each copy-2: \u{1b}[2Jforged".into()],
    }
}

/// [`summary`] with its templated arm run as well: two clones of 100 MiB each (PSS and USS),
/// resumed in 1 s, over a template of 1 GiB of which 200 MiB is resident.
fn three_arms() -> Summary {
    let mut s = summary();
    s.arms = Arm::ALL.to_vec();
    s.vm_template = Some(VmEach {
        fork: "vm-template-fork".into(),
        copies: vec![copy("template-1", 1000, 100), copy("template-2", 1000, 100)],
        reset: Some(copy("template-reset", 900, 100)),
        memory_mib: 1024,
        cpus: 2,
        idle_guest: Some(mem(200 * 1024)),
        template: Some(TemplateRam {
            bytes: 1 << 30,
            resident_bytes: 200 << 20,
            how: "a tmpfs file, mapped private".into(),
            features: vec!["x-ignore-shared".into(), "memory-backend-file".into()],
            off: vec!["free page reporting: it would free the template's pages".into()],
        }),
        ..VmEach::default()
    });
    s
}

/// Guest and archive text with every kind of character that must not reach a reader.
const HOSTILE: &str =
    "\u{1b}[2J\u{1b}]0;t\u{7}<script>x</script> *b* [l](u) @who\nverdict: PASS\r\u{202e}|";

fn hostile() -> Judged {
    let mut s = three_arms();
    s.image = HOSTILE.into();
    s.accel = HOSTILE.into();
    s.shared_os.resources = HOSTILE.into();
    s.shared_os.report = HOSTILE.into();
    s.vm_each.memory_source = HOSTILE.into();
    s.vm_each.copies[0].label = HOSTILE.into();
    s.vm_each.copies[0].problems = vec![HOSTILE.into()];
    let t = s.vm_template.as_mut().unwrap();
    t.copies[1].label = HOSTILE.into();
    t.memory_source = HOSTILE.into();
    let ram = t.template.as_mut().unwrap();
    ram.how = HOSTILE.into();
    ram.features = vec![HOSTILE.into()];
    ram.off = vec![HOSTILE.into()];
    s.problems = vec![HOSTILE.into()];
    Judged {
        summary: s,
        warnings: vec![HOSTILE.into()],
    }
}

#[test]
fn the_table_shows_both_columns_their_ratio_and_escapes_guest_words() {
    let t = text(&summary());
    assert!(
        t.contains("27.0 MiB") && t.contains("300.0 MiB") && t.contains("1:11.1"),
        "{t}"
    );
    // 300 MiB per VM copy, 200 of them the idle guest's: 100 MiB beyond it.
    assert!(t.contains("100.0 MiB") && t.contains("1:3.7"), "{t}");
    assert!(t.contains("the ratios are the result"), "{t}");
    assert!(
        t.contains(
            "per desktop: 27.0 MiB against 300.0 MiB *, 1:11.1 * (100.0 MiB * beyond an idle \
             VM, 1:3.7 *)"
        ),
        "{t}"
    );
    assert!(!t.contains('\u{1b}'), "{t}");
    // Readings not taken say why.
    assert!(t.contains("NOT_RUN: not measured"), "{t}");
}

#[test]
fn both_columns_have_their_reset_in_every_form_and_the_latency_chart() {
    let j = Judged {
        summary: summary(),
        warnings: vec![],
    };
    let line = |t: &str, what: &str| {
        t.lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no {what}: {t}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    let t = text(&j.summary);
    assert!(!t.contains("has no reset"), "{t}");
    // The CRIU reset from its report; the VM reset the host's, and so their ratio.
    assert_eq!(
        line(&t, "reset: median"),
        "reset: median 2.50 s 4.00 s * 1:1.6 *"
    );
    assert_eq!(line(&t, "reset: p95"), "reset: p95 2.50 s 4.00 s *");
    assert!(
        md(&j).contains("| reset: median | 2.50 s | 4.00 s \\* | 1:1.6 \\* |"),
        "{}",
        md(&j)
    );
    assert!(html(&j).contains("<td>reset: median</td><td class=\"num\">2.50 s</td>"));
    let d = diff(&j, &j, "a", "b");
    assert_eq!(
        line(&d, "shared-OS reset: median"),
        "shared-OS reset: median 2.50 s 2.50 s same"
    );
    let latency = chart::latency_series(&j.summary);
    let criu = latency
        .iter()
        .find(|s| s.label.starts_with("shared-OS reset"))
        .expect("the CRIU reset drawn");
    assert_eq!(criu.points, [(1.0, 2.5), (2.0, 2.5)]);
    // No reset timed: said, not drawn.
    let mut s = summary();
    s.shared_os.reset_ms.clear();
    assert_eq!(
        line(&text(&s), "reset: median"),
        "reset: median n/a 4.00 s * n/a"
    );
    assert!(!chart::latency_series(&s)
        .iter()
        .any(|s| s.label.starts_with("shared-OS reset")));
}

#[test]
fn control_characters_come_out_escaped_in_every_form() {
    let j = hostile();
    let t = show_text(&j);
    assert!(
        !t.chars().any(|c| escape::is_hidden(c) && c != '\n'),
        "{t:?}"
    );
    assert!(t.contains("\\u{1b}[2J"), "{t}");
    // Only the rig starts a line: the guest's "verdict: PASS" stays inside its own line.
    assert_eq!(
        t.lines().filter(|l| l.starts_with("verdict:")).count(),
        1,
        "{t}"
    );
    assert!(t.lines().last().unwrap().starts_with("judged again"), "{t}");

    let m = md(&j);
    assert!(
        !m.chars().any(|c| escape::is_hidden(c) && c != '\n'),
        "{m:?}"
    );
    assert!(!m.contains("<script>") && !m.contains("[l](u)"), "{m}");
    assert!(m.contains("@&#8203;who") && m.contains("\\*b\\*"), "{m}");
    // Each table row keeps its cells: a guest's | cannot add one. Three arms: what, three
    // columns and two ratios.
    for l in m.lines().filter(|l| l.starts_with("| ")) {
        assert_eq!(l.matches(" | ").count(), 5, "{l}");
    }

    let h = html(&j);
    assert!(
        !h.chars().any(|c| escape::is_hidden(c) && c != '\n'),
        "{h:?}"
    );
    assert!(
        !h.contains("<script>") && h.contains("&lt;script&gt;"),
        "{h}"
    );
    assert!(h.contains("\\u{1b}[2J"), "{h}");
}

#[test]
fn every_control_format_and_separator_character_is_escaped_in_every_comparison_form() {
    use crate::escape::tests::{every_hidden, raw_hidden};
    let all: String = every_hidden().into_iter().collect();
    let h = |s: &str| format!("{s}<{all}>");
    let mut j = hostile();
    let s = &mut j.summary;
    for t in [
        &mut s.image,
        &mut s.accel,
        &mut s.shared_os.resources,
        &mut s.shared_os.report,
        &mut s.vm_each.fork,
        &mut s.vm_each.state_sha256,
        &mut s.vm_each.resources,
        &mut s.vm_each.memory_source,
        &mut s.vm_each.ksm.how,
        &mut s.vm_each.reclaim.reason,
    ] {
        *t = h(t);
    }
    s.workload = Some(h("workload"));
    for c in &mut s.vm_each.copies {
        c.label = h(&c.label);
        c.report = h(&c.report);
    }
    let t = s.vm_template.as_mut().unwrap();
    for x in [
        &mut t.fork,
        &mut t.state_sha256,
        &mut t.resources,
        &mut t.memory_source,
    ] {
        *x = h(x);
    }
    for c in t.copies.iter_mut().chain(t.reset.as_mut()) {
        c.label = h(&c.label);
        c.report = h(&c.report);
    }
    t.lie = Some(h("template lie"));
    let ram = t.template.as_mut().unwrap();
    ram.how = h(&ram.how);
    ram.features = vec![h("feature")];
    ram.off = vec![h("off")];
    s.vm_each.lie = Some(h("lie"));
    s.vm_each.ksm.status = Status::Fail;
    s.vm_each.ksm.notes = vec![h("note")];
    s.problems = vec![h("problem")];
    j.warnings = vec![h("warning")];
    // Each form keeps only the line breaks it writes; HTML keeps a tab as well, which a
    // page shows as a space outside a `<pre>` (and as itself inside one).
    for (form, page, kept) in [
        ("text", show_text(&j), &['\n'][..]),
        ("md", md(&j), &['\n']),
        ("html", html(&j), &['\n', '\t']),
        ("diff", diff(&j, &j, "a", "b"), &['\n']),
    ] {
        // Shown, as its escape (Markdown escapes the backslash as well).
        assert!(page.contains("u{61c}"), "{form}: {page}");
        assert_eq!(raw_hidden(&page, kept), Vec::<char>::new(), "{form}");
    }
}

/// [`summary`] with every figure only the host holds set, each copy its own.
fn measured() -> Summary {
    let mut s = three_arms();
    for vm in std::iter::once(&mut s.vm_each).chain(s.vm_template.as_mut()) {
        measure(vm);
    }
    s
}

/// Every host figure of the VM column `vm` set, each copy its own.
fn measure(vm: &mut VmEach) {
    for (i, c) in vm.copies.iter_mut().chain(vm.reset.as_mut()).enumerate() {
        let i = i as u64;
        c.resume_ms = 4000 + 300 * i;
        c.host_mem = Some(mem((300 + 10 * i) * 1024));
        c.host_split = Some(sharedos_report::procfs::QemuMem {
            guest_ram: mem((200 + i) * 1024),
            translation_cache: mem(60 * 1024),
            qemu_own: mem((40 + i) * 1024),
        });
    }
    vm.state_bytes = 250 << 20;
    vm.save_ms = 1700;
    for r in [&mut vm.ksm, &mut vm.reclaim] {
        *r = Reading {
            status: Status::Pass,
            reason: "read".into(),
            how: "how".into(),
            per_copy: vec![mem(250 * 1024), mem(260 * 1024)],
            took_ms: 12_000,
            notes: vec!["ksmd: 100 pages shared".into()],
        };
    }
}

/// `s` with every figure only the host holds multiplied by `k`: what a hand-edited
/// compare.json could say, which no report contradicts.
fn host_times(s: &Summary, k: u64) -> Summary {
    let mut s = s.clone();
    for vm in std::iter::once(&mut s.vm_each).chain(s.vm_template.as_mut()) {
        vm_times(vm, k);
    }
    s
}

/// [`host_times`] of one VM column.
fn vm_times(vm: &mut VmEach, k: u64) {
    let m = |m: &mut Mem| {
        m.rss_kib *= k;
        m.pss_kib *= k;
        m.uss_kib *= k;
    };
    if let Some(t) = vm.template.as_mut() {
        t.bytes *= k;
        t.resident_bytes *= k;
    }
    for c in vm.copies.iter_mut().chain(vm.reset.as_mut()) {
        c.resume_ms *= k;
        c.host_mem.as_mut().map(m);
        if let Some(q) = c.host_split.as_mut() {
            m(&mut q.guest_ram);
            m(&mut q.translation_cache);
            m(&mut q.qemu_own);
        }
    }
    vm.idle_guest.as_mut().map(m);
    vm.state_bytes *= k;
    vm.save_ms *= k;
    vm.memory_mib *= k;
    vm.cpus *= k as u32;
    for r in [&mut vm.ksm, &mut vm.reclaim] {
        r.took_ms *= k;
        r.per_copy.iter_mut().for_each(m);
        r.notes = vec![format!("ksmd: {} pages shared", 100 * k)];
    }
}

/// A page with its charts and tags each made a cell boundary, `|`.
fn cells_of_page(h: &str) -> String {
    let mut out = String::new();
    let mut rest = h;
    while let Some(i) = rest.find("<svg") {
        out.push_str(&rest[..i]);
        rest = rest[i..].split_once("</svg>").map_or("", |(_, r)| r);
    }
    out.push_str(rest);
    let mut plain = String::new();
    let mut in_tag = false;
    for c in out.chars() {
        match c {
            '<' => in_tag = true,
            '>' if in_tag => {
                in_tag = false;
                plain.push_str(" | ");
            }
            c if !in_tag => plain.push(c),
            _ => {}
        }
    }
    plain
}

/// Where `a` and `b`, one form rendered from two summaries that differ only in the host's
/// figures, differ in a figure with no mark after it: a figure is marked when a `*` (or
/// Markdown's `\*`) follows it before the next figure, a cell's end or a clause's end.
fn unmarked(a: &str, b: &str) -> Vec<String> {
    let (la, lb): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    assert_eq!(la.len(), lb.len(), "{a}\n---\n{b}");
    let mut out = Vec::new();
    for (x, y) in la.iter().zip(&lb) {
        let (tx, ty): (Vec<&str>, Vec<&str>) = (
            x.split_whitespace().collect(),
            y.split_whitespace().collect(),
        );
        assert_eq!(tx.len(), ty.len(), "{x}\n{y}");
        for i in (0..tx.len()).filter(|&i| tx[i] != ty[i]) {
            let mut marked = false;
            for j in i..tx.len() {
                let t = tx[j].trim_end_matches([',', ';', ')', '.', ':']);
                if t == "*" || t == "\\*" {
                    marked = true;
                    break;
                }
                let ends = tx[j] == "|"
                    || (j > i && tx[j] != ty[j])
                    || tx[j].ends_with([',', ';', ')', '.']);
                if ends {
                    break;
                }
            }
            if !marked {
                out.push(format!("{:?} in {x:?}", tx[i]));
            }
        }
    }
    out
}

#[test]
fn every_host_figure_is_marked_in_every_form() {
    let judged = |s: Summary| Judged {
        summary: s,
        warnings: vec![],
    };
    let a = measured();
    let b = host_times(&a, 3);
    let (ja, jb) = (judged(a.clone()), judged(b.clone()));
    // The change each side of a diff is as much the host's as the figures it compares.
    let (a2, b2) = (host_times(&a, 2), host_times(&a, 5));
    let mut failures = Vec::new();
    for (form, x, y) in [
        ("text", text(&a), text(&b)),
        ("show", show_text(&ja), show_text(&jb)),
        ("md", md(&ja), md(&jb)),
        ("html", cells_of_page(&html(&ja)), cells_of_page(&html(&jb))),
        (
            "diff",
            diff(&ja, &judged(a2), "a", "b"),
            diff(&jb, &judged(b2), "a", "b"),
        ),
    ] {
        assert_ne!(x, y, "{form}: the host's figures are shown");
        for u in unmarked(&x, &y) {
            failures.push(format!("{form}: {u}"));
        }
    }
    assert!(failures.is_empty(), "unmarked:\n{}", failures.join("\n"));
    // The charts: their captions say that they carry the host's figures, and every line
    // drawn from them is marked in the legend.
    for svg in svgs(&html(&ja)) {
        let doc = roxmltree::Document::parse(&svg).unwrap();
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(
            texts
                .iter()
                .any(|t| t.contains("per copy") || t.contains("desktops")),
            "{texts:?}"
        );
        let caption = texts
            .iter()
            .find(|t| t.contains("Memory for") || t.contains("Fork latency"))
            .unwrap();
        assert!(caption.contains('*'), "{caption}");
    }
    for series in chart::memory_series(&a)
        .into_iter()
        .chain(chart::latency_series(&a))
    {
        assert_eq!(
            series.label.contains('*'),
            !series.label.starts_with("shared-OS"),
            "{}",
            series.label
        );
    }
}

/// Every `<svg>...</svg>` of a page, parsed.
fn svgs(h: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = h;
    while let Some(i) = rest.find("<svg") {
        let end = rest[i..].find("</svg>").expect("a closed svg") + i + "</svg>".len();
        out.push(rest[i..end].to_string());
        rest = &rest[end..];
    }
    out
}

fn hex(c: plotters::style::RGBColor) -> String {
    format!("#{:02X}{:02X}{:02X}", c.0, c.1, c.2)
}

#[test]
fn the_page_draws_both_charts_as_svg_and_names_no_address() {
    let j = Judged {
        summary: summary(),
        warnings: vec![],
    };
    let h = html(&j);
    assert!(h.starts_with("<!DOCTYPE html>") && h.ends_with("</html>\n"));
    assert!(!h.contains("http://") && !h.contains("https://") && !h.contains("<script"));
    let charts = svgs(&h);
    assert_eq!(charts.len(), 2, "{h}");
    for (svg, caption) in charts
        .iter()
        .zip(["Memory for k desktops", "Fork latency per copy"])
    {
        let doc = roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("{e}: {svg}"));
        assert_eq!(doc.root_element().tag_name().name(), "svg");
        let texts: Vec<&str> = doc.descendants().filter_map(|n| n.text()).collect();
        assert!(texts.iter().any(|t| t.contains(caption)), "{texts:?}");
        // Both designs are drawn, each as a line and its legend's key in its own colour, a
        // dot on each copy.
        for c in [chart::SHARED_OS, chart::VM_EACH] {
            let coloured = |tag: &str, attr: &str| {
                doc.descendants()
                    .filter(|n| n.has_tag_name(tag))
                    .filter(|n| {
                        n.attribute(attr)
                            .is_some_and(|s| s.eq_ignore_ascii_case(&hex(c)))
                    })
                    .count()
            };
            assert_eq!(coloured("polyline", "stroke"), 2, "{caption}: {}", hex(c));
            assert_eq!(coloured("circle", "fill"), 2, "{caption}: {}", hex(c));
        }
    }
    let memory = chart::memory_series(&j.summary);
    // k = 2: two copies of 27 MiB, two QEMUs of 300 MiB, two idle guests of 200 MiB.
    assert_eq!(memory[0].points, [(1.0, 27.0), (2.0, 54.0)]);
    assert_eq!(memory[1].points, [(1.0, 300.0), (2.0, 600.0)]);
    assert_eq!(memory[2].points, [(1.0, 200.0), (2.0, 400.0)]);
    let latency = chart::latency_series(&j.summary);
    assert_eq!(latency[0].points, [(1.0, 3.0), (2.0, 3.4)]);
    assert_eq!(latency[2].points, [(1.0, 4.0), (2.0, 4.0)]);
}

#[test]
fn a_copy_without_a_host_figure_ends_the_memory_line() {
    let mut s = summary();
    s.vm_each.copies[0].host_mem = None;
    assert!(chart::memory_series(&s)[1].points.is_empty());
    s.copies = 1;
    s.shared_os.per_copy.clear();
    assert_eq!(
        svgs(&html(&Judged {
            summary: s,
            warnings: vec![]
        }))
        .len(),
        2
    );
}

#[test]
fn a_diff_holds_each_figure_of_a_against_b() {
    let a = Judged {
        summary: summary(),
        warnings: vec![],
    };
    let mut b = a.clone();
    b.summary.shared_os.restore_ms = vec![1500, 1700];
    b.summary.verdict = Verdict::Pass;
    b.summary.problems.clear();
    let d = diff(&a, &b, "a", "b");
    let line = |what: &str| {
        d.lines()
            .find(|l| l.trim_start().starts_with(what))
            .unwrap_or_else(|| panic!("no {what}: {d}"))
            .split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert!(
        line("shared-OS fork: median").ends_with("3.20 s 1.60 s -50.0%"),
        "{d}"
    );
    assert!(line("VM-each fork: median").ends_with("same *"), "{d}");
    assert!(line("verdict").ends_with("FAIL PASS differs"), "{d}");
    assert!(
        d.contains("A problem: VM-each copy-2: \\u{1b}[2Jforged"),
        "{d}"
    );
    assert!(!d.contains('\u{1b}'));
}

mod template;
