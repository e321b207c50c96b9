//! A comparison (`compare.json`) as people read it: the two columns side by side, per copy and
//! per desktop, with the ratio between them and the accelerator that ran.

use crate::escape;
use crate::judge::compare::{Reading, Summary};
use sharedos_report::model::density::{median, p95};
use sharedos_report::report::Status;

fn mib(kib: f64) -> String {
    format!("{:.1} MiB", kib / 1024.0)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |m| format!("{:.2} s", m / 1000.0))
}

/// A row of a further reading of the VM copies: its median PSS, or why there is none.
fn reading_row(name: &str, so_pss: &[u64], r: &Reading) -> (String, String, String, String) {
    let pss: Vec<u64> = r.per_copy.iter().map(|m| m.pss_kib).collect();
    let (vm, ratio) = match (r.status, median(&pss), median(so_pss)) {
        (Status::Pass, Some(v), Some(so)) if so > 0.0 => (mib(v), format!("1:{:.1}", v / so)),
        (Status::Pass, Some(v), _) => (mib(v), String::new()),
        (st, _, _) => (format!("{st}: {}", escape::line(&r.reason)), String::new()),
    };
    (format!("{name}: median"), String::new(), vm, ratio)
}

/// The side-by-side table in plain text. The problems came partly from guests: one line each,
/// escaped.
pub fn text(s: &Summary) -> String {
    let so = &s.shared_os;
    let vm = &s.vm_each;
    let so_pss: Vec<u64> = so.per_copy.iter().map(|m| m.pss_kib).collect();
    let so_uss: Vec<u64> = so.per_copy.iter().map(|m| m.uss_kib).collect();
    let vm_pss: Vec<u64> = vm
        .copies
        .iter()
        .filter_map(|c| c.host_mem.map(|m| m.pss_kib))
        .collect();
    let vm_uss: Vec<u64> = vm
        .copies
        .iter()
        .filter_map(|c| c.host_mem.map(|m| m.uss_kib))
        .collect();
    let vm_resume: Vec<u64> = vm.copies.iter().map(|c| c.resume_ms).collect();
    let (so_med, so_p95) = (median(&so.restore_ms), p95(&so.restore_ms));
    let (vm_med, vm_p95) = (median(&vm_resume), p95(&vm_resume));
    let med_kib = |xs: &[u64]| median(xs).map_or("n/a".into(), mib);
    // What a VM copy holds beyond the same guest before its tree: the desktop's own share.
    let beyond = median(&vm_pss)
        .zip(vm.idle_guest)
        .map(|(m, idle)| (m - idle.pss_kib as f64).max(0.0));
    let ratio = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("1:{:.1}", b / a),
        _ => "n/a".into(),
    };
    let rows = [
        (
            "copies".to_string(),
            so.per_copy.len().to_string(),
            vm.copies.len().to_string(),
            String::new(),
        ),
        (
            "fork: median".into(),
            ms(so_med),
            ms(vm_med),
            ratio(so_med, vm_med),
        ),
        (
            "fork: p95".into(),
            ms(so_p95.map(|v| v as f64)),
            ms(vm_p95.map(|v| v as f64)),
            String::new(),
        ),
        (
            "reset".into(),
            "n/a (the density gate has no reset)".into(),
            vm.reset
                .as_ref()
                .map_or("n/a".into(), |r| ms(Some(r.resume_ms as f64))),
            String::new(),
        ),
        (
            "PSS per desktop: median".into(),
            med_kib(&so_pss),
            med_kib(&vm_pss),
            ratio(median(&so_pss), median(&vm_pss)),
        ),
        (
            "USS per desktop: median".into(),
            med_kib(&so_uss),
            med_kib(&vm_uss),
            ratio(median(&so_uss), median(&vm_uss)),
        ),
        (
            "PSS of a guest running nothing".into(),
            String::new(),
            vm.idle_guest
                .map_or("n/a".into(), |m| mib(m.pss_kib as f64)),
            String::new(),
        ),
        (
            "PSS per desktop beyond it".into(),
            med_kib(&so_pss),
            beyond.map_or("n/a".into(), mib),
            ratio(median(&so_pss), beyond),
        ),
        reading_row("PSS per desktop, host KSM merging", &so_pss, &vm.ksm),
        reading_row(
            "PSS per desktop, guest gave memory back",
            &so_pss,
            &vm.reclaim,
        ),
        (
            "resources per desktop".into(),
            so.resources.clone(),
            format!("{} MiB, {} CPUs each", vm.memory_mib, vm.cpus),
            String::new(),
        ),
    ];
    let mut out = format!(
        "vm-compare {}: {} copies each, under {} ({})\n",
        escape::line(&s.image),
        s.copies,
        escape::line(&s.accel),
        if s.accel == "kvm" {
            "times are a KVM machine's"
        } else {
            "both columns emulated: the ratios are the result, not the times"
        }
    );
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
    let w1 = rows
        .iter()
        .map(|r| r.1.len())
        .max()
        .unwrap_or(0)
        .max("shared-OS (CRIU)".len());
    let w2 = rows
        .iter()
        .map(|r| r.2.len())
        .max()
        .unwrap_or(0)
        .max("VM each".len());
    out += &format!(
        "  {:w0$}  {:w1$}  {:w2$}  shared:VM\n",
        "", "shared-OS (CRIU)", "VM each"
    );
    for (a, b, c, d) in &rows {
        out += &format!("  {a:w0$}  {b:w1$}  {c:w2$}  {d}\n");
    }
    out += &format!(
        "  memory: shared-OS from the guest's smaps_rollup of each copy's processes; VM each: {}\n",
        escape::line(&vm.memory_source)
    );
    if !vm.resources.is_empty() {
        out += &format!("  VM resources: {}\n", escape::line(&vm.resources));
    }
    for (name, r) in [("KSM", &vm.ksm), ("memory given back", &vm.reclaim)] {
        if r.status != Status::NotRun {
            out += &format!(
                "  {name}: {} in {:.1} s: {}\n",
                r.status,
                r.took_ms as f64 / 1000.0,
                escape::line(&r.how)
            );
            for n in &r.notes {
                out += &format!("    {}\n", escape::line(n));
            }
        }
    }
    out += &format!("verdict: {}\n", s.verdict);
    for p in &s.problems {
        out += &format!("  problem: {}\n", escape::line(p));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::compare::{SharedOs, VmCopy, VmEach, FORMAT};
    use sharedos_report::model::density::Mem;
    use sharedos_report::report::Verdict;

    #[test]
    fn the_table_shows_both_columns_their_ratio_and_escapes_guest_words() {
        let mem = |pss| Mem {
            rss_kib: pss,
            pss_kib: pss,
            uss_kib: pss,
        };
        let copy = |label: &str| VmCopy {
            label: label.into(),
            resume_ms: 4000,
            host_mem: Some(mem(300 * 1024)),
            ..VmCopy::default()
        };
        let s = Summary {
            format: FORMAT,
            image: "bookworm".into(),
            accel: "tcg".into(),
            copies: 2,
            shared_os: SharedOs {
                restore_ms: vec![3000, 3400],
                per_copy: vec![mem(27 * 1024), mem(27 * 1024)],
                ..SharedOs::default()
            },
            vm_each: VmEach {
                copies: vec![copy("copy-1"), copy("copy-2")],
                memory_mib: 1024,
                cpus: 2,
                idle_guest: Some(mem(200 * 1024)),
                ..VmEach::default()
            },
            verdict: Verdict::Fail,
            problems: vec!["VM-each copy-2: \u{1b}[2Jforged".into()],
        };
        let t = text(&s);
        assert!(
            t.contains("27.0 MiB") && t.contains("300.0 MiB") && t.contains("1:11.1"),
            "{t}"
        );
        // 300 MiB per VM copy, 200 of them the idle guest's: 100 MiB beyond it.
        assert!(t.contains("100.0 MiB") && t.contains("1:3.7"), "{t}");
        assert!(t.contains("the ratios are the result"), "{t}");
        assert!(!t.contains('\u{1b}'), "{t}");
        // Readings not taken say why.
        assert!(t.contains("NOT_RUN: not measured"), "{t}");
    }
}
