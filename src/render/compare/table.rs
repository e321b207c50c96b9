//! The comparison's table model: its rows, figures and the one-sentence headline, shared by
//! every form.

use super::{host, mib, ms, ratio};
use crate::judge::compare::{Reading, Summary};
use sharedos_report::model::density::{median, p95};
use sharedos_report::report::Status;
use std::fmt::Write;

/// A row of a further reading of the VM copies: its median PSS against a CRIU copy's, or its
/// status and why.
fn reading_row(what: &'static str, so_pss: &[u64], r: &Reading) -> Row {
    let pss: Vec<u64> = r.per_copy.iter().map(|m| m.pss_kib).collect();
    let (vm, against) = match (r.status, median(&pss)) {
        (Status::Pass, Some(v)) => (host(mib(v)), host(ratio(median(so_pss), Some(v)))),
        (st, _) => (format!("{st}: {}", r.reason), String::new()),
    };
    Row {
        what,
        so: String::new(),
        vm,
        ratio: against,
    }
}

/// What the table's cells cannot hold: how the VMs' resources were chosen, and what was done
/// for each further reading, with what was seen. Not escaped here.
pub(super) fn details(s: &Summary) -> Vec<String> {
    let vm = &s.vm_each;
    let mut d = Vec::new();
    if let Some(w) = &s.workload {
        d.push(format!("workload in both columns: {w}"));
    }
    if !vm.resources.is_empty() {
        d.push(format!("VM resources: {}", vm.resources));
    }
    for (name, r) in [("KSM", &vm.ksm), ("memory given back", &vm.reclaim)] {
        if r.status != Status::NotRun {
            d.push(format!(
                "{name}: {} in {}: {}",
                r.status,
                host(format!("{:.1} s", r.took_ms as f64 / 1000.0)),
                r.how
            ));
            // What the host saw while it read (KSM's counters): its words and figures only.
            d.extend(
                r.notes
                    .iter()
                    .map(|n| format!("{name}: {}", host(n.clone()))),
            );
        }
    }
    if let Some(lie) = &vm.lie {
        d.push(format!("lie: {lie}"));
    }
    d
}

/// The figures every form shows, from one summary.
pub(super) struct Figures {
    pub(super) so_pss: Vec<u64>,
    pub(super) so_uss: Vec<u64>,
    pub(super) vm_pss: Vec<u64>,
    pub(super) vm_uss: Vec<u64>,
    pub(super) so_med: Option<f64>,
    pub(super) so_p95: Option<f64>,
    pub(super) vm_med: Option<f64>,
    pub(super) vm_p95: Option<f64>,
    /// The CRIU column's resets, as its reset gate timed them: median and p95.
    pub(super) so_reset_med: Option<f64>,
    pub(super) so_reset_p95: Option<f64>,
    /// The VM column's reset (a fresh QEMU resumed from the save), the host's: median and p95.
    pub(super) reset_ms: Option<f64>,
    pub(super) reset_p95: Option<f64>,
    pub(super) idle_pss: Option<f64>,
    /// What a VM copy holds beyond the same guest before its tree: the desktop's own share.
    pub(super) beyond: Option<f64>,
    /// The copies' QEMUs by what holds their memory (PSS, KiB): guest RAM, TCG's translation
    /// cache, QEMU's own.
    pub(super) vm_ram: Vec<u64>,
    pub(super) vm_tcg: Vec<u64>,
    pub(super) vm_own: Vec<u64>,
}

impl Figures {
    pub(super) fn of(s: &Summary) -> Figures {
        let so = &s.shared_os;
        let vm = &s.vm_each;
        let vm_resume: Vec<u64> = vm.copies.iter().map(|c| c.resume_ms).collect();
        let vm_reset: Vec<u64> = vm.reset.iter().map(|c| c.resume_ms).collect();
        let host = |f: fn(&sharedos_report::model::density::Mem) -> u64| -> Vec<u64> {
            vm.copies
                .iter()
                .filter_map(|c| c.host_mem.as_ref().map(f))
                .collect()
        };
        let vm_pss = host(|m| m.pss_kib);
        let split = |f: fn(&sharedos_report::procfs::QemuMem) -> u64| -> Vec<u64> {
            vm.copies
                .iter()
                .filter_map(|c| c.host_split.as_ref().map(f))
                .collect()
        };
        let idle_pss = vm.idle_guest.map(|m| m.pss_kib as f64);
        Figures {
            so_pss: so.per_copy.iter().map(|m| m.pss_kib).collect(),
            so_uss: so.per_copy.iter().map(|m| m.uss_kib).collect(),
            vm_uss: host(|m| m.uss_kib),
            so_med: median(&so.restore_ms),
            so_p95: p95(&so.restore_ms).map(|v| v as f64),
            vm_med: median(&vm_resume),
            vm_p95: p95(&vm_resume).map(|v| v as f64),
            so_reset_med: median(&so.reset_ms),
            so_reset_p95: p95(&so.reset_ms).map(|v| v as f64),
            reset_ms: median(&vm_reset),
            reset_p95: p95(&vm_reset).map(|v| v as f64),
            beyond: median(&vm_pss)
                .zip(idle_pss)
                .map(|(m, idle)| (m - idle).max(0.0)),
            idle_pss,
            vm_pss,
            vm_ram: split(|q| q.guest_ram.pss_kib),
            vm_tcg: split(|q| q.translation_cache.pss_kib),
            vm_own: split(|q| q.qemu_own.pss_kib),
        }
    }
}

/// One line of the side-by-side table: what, shared-OS, VM each, shared:VM. A figure of the
/// host's, and a ratio drawn from one, carries [`HOST_MARK`] in its cell. Cells not escaped here.
pub(super) struct Row {
    pub(super) what: &'static str,
    pub(super) so: String,
    pub(super) vm: String,
    pub(super) ratio: String,
}

pub(super) fn rows(s: &Summary) -> Vec<Row> {
    let f = Figures::of(s);
    let so = &s.shared_os;
    let vm = &s.vm_each;
    let med_kib = |xs: &[u64]| median(xs).map_or("n/a".into(), mib);
    // `recorded`: the VM figure is the host's, and so is the ratio drawn from it.
    let row = |what, so: String, vm: String, ratio: String, recorded: bool| Row {
        what,
        so,
        vm: if recorded { host(vm) } else { vm },
        ratio: if recorded { host(ratio) } else { ratio },
    };
    vec![
        row(
            "copies",
            so.per_copy.len().to_string(),
            vm.copies.len().to_string(),
            String::new(),
            false,
        ),
        row(
            "fork: median",
            ms(f.so_med),
            ms(f.vm_med),
            ratio(f.so_med, f.vm_med),
            true,
        ),
        row("fork: p95", ms(f.so_p95), ms(f.vm_p95), String::new(), true),
        row(
            "reset: median",
            ms(f.so_reset_med),
            ms(f.reset_ms),
            ratio(f.so_reset_med, f.reset_ms),
            true,
        ),
        row(
            "reset: p95",
            ms(f.so_reset_p95),
            ms(f.reset_p95),
            String::new(),
            true,
        ),
        row(
            "PSS per desktop: median",
            med_kib(&f.so_pss),
            med_kib(&f.vm_pss),
            ratio(median(&f.so_pss), median(&f.vm_pss)),
            true,
        ),
        row(
            "  of it the guest's RAM",
            String::new(),
            med_kib(&f.vm_ram),
            ratio(median(&f.so_pss), median(&f.vm_ram)),
            true,
        ),
        row(
            "  of it TCG's translation cache",
            String::new(),
            med_kib(&f.vm_tcg),
            String::new(),
            true,
        ),
        row(
            "  of it QEMU's own",
            String::new(),
            med_kib(&f.vm_own),
            String::new(),
            true,
        ),
        row(
            "USS per desktop: median",
            med_kib(&f.so_uss),
            med_kib(&f.vm_uss),
            ratio(median(&f.so_uss), median(&f.vm_uss)),
            true,
        ),
        row(
            "PSS of a guest running nothing",
            String::new(),
            f.idle_pss.map_or("n/a".into(), mib),
            String::new(),
            true,
        ),
        row(
            "PSS per desktop beyond it",
            med_kib(&f.so_pss),
            f.beyond.map_or("n/a".into(), mib),
            ratio(median(&f.so_pss), f.beyond),
            true,
        ),
        reading_row("PSS per desktop, host KSM merging", &f.so_pss, &vm.ksm),
        reading_row(
            "PSS per desktop, guest gave memory back",
            &f.so_pss,
            &vm.reclaim,
        ),
        row(
            "resources per desktop",
            so.resources.clone(),
            format!(
                "{}, {} each",
                host(format!("{} MiB", vm.memory_mib)),
                host(format!("{} CPUs", vm.cpus))
            ),
            String::new(),
            false,
        ),
    ]
}

/// What the accelerator means for the figures.
pub(super) fn accel_note(s: &Summary) -> &'static str {
    if s.accel == "kvm" {
        "times are a KVM machine's"
    } else {
        "both columns emulated: the ratios are the result, not the times"
    }
}

/// The comparison in one sentence: what a desktop costs each way. Numbers only.
pub(super) fn headline(s: &Summary) -> String {
    let f = Figures::of(s);
    let (so, vm) = (median(&f.so_pss), median(&f.vm_pss));
    let mut h = format!(
        "per desktop: {} against {}, {}",
        so.map_or("n/a".into(), mib),
        host(vm.map_or("n/a".into(), mib)),
        host(ratio(so, vm))
    );
    if let Some(b) = f.beyond {
        let _ = write!(
            h,
            " ({} beyond an idle VM, {})",
            host(mib(b)),
            host(ratio(so, Some(b)))
        );
    }
    h.push_str(" (PSS: shared-OS from the guest, VM each the host's reading of its QEMU)");
    h
}

pub(super) const SO_HEAD: &str = "shared-OS (CRIU)";
pub(super) const VM_HEAD: &str = "VM each";
