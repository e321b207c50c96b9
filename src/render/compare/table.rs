//! The comparison's table model: its columns (one per arm run), rows, figures and the
//! one-sentence headline, shared by every form.

use super::{host, mib, ms, ratio};
use crate::judge::compare::{Arm, Reading, Search, Summary, VmEach};
use sharedos_report::model::density::{median, p95, Mem};
use sharedos_report::report::Status;
use std::fmt::Write;

pub(super) const SO_HEAD: &str = "shared-OS (CRIU)";
pub(super) const VM_HEAD: &str = "VM each";
pub(super) const TEMPLATE_HEAD: &str = "VM template";

/// An arm's column head in the table, and the name its details and diff rows go by.
pub(super) fn head(arm: Arm) -> &'static str {
    match arm {
        Arm::Criu => SO_HEAD,
        Arm::Vm => VM_HEAD,
        Arm::VmTemplate => TEMPLATE_HEAD,
    }
}

/// The table's heads after its first, empty one: a column per arm run, then, when the CRIU arm
/// ran, a ratio against it per VM column.
pub(super) fn heads(s: &Summary) -> Vec<String> {
    let vms = s.vm_columns();
    let mut h: Vec<String> = Vec::new();
    if s.ran(Arm::Criu) {
        h.push(SO_HEAD.into());
    }
    h.extend(vms.iter().map(|&(a, _)| head(a).to_string()));
    if s.ran(Arm::Criu) {
        h.extend(vms.iter().map(|&(a, _)| format!("shared:{}", head(a))));
    }
    h
}

/// The arms the comparison has no column of, said once beside the table: those it did not run,
/// and an arm run whose column compare.json does not hold (a problem of the verdict's as well).
/// None: a column for every arm.
pub(super) fn not_run(s: &Summary) -> Option<String> {
    let heads = |f: &dyn Fn(Arm) -> bool| -> Vec<&str> {
        Arm::ALL.into_iter().filter(|&a| f(a)).map(head).collect()
    };
    let not_run = heads(&|a| !s.ran(a));
    let missing = heads(&|a| a == Arm::VmTemplate && s.ran(a) && s.vm_template.is_none());
    let mut said = Vec::new();
    if !not_run.is_empty() {
        said.push(format!("not run (--arms): {}", not_run.join(", ")));
    }
    if !missing.is_empty() {
        said.push(format!(
            "run, with no column recorded: {}",
            missing.join(", ")
        ));
    }
    (!said.is_empty()).then(|| said.join("; "))
}

/// What the table's cells cannot hold: how each VM column's resources were chosen, what was
/// done for each further reading, with what was seen, and the template the clones map. Not
/// escaped here.
pub(super) fn details(s: &Summary) -> Vec<String> {
    let mut d = Vec::new();
    if let Some(w) = &s.workload {
        d.push(format!("workload in every column: {w}"));
    }
    let k = &s.shared_os.ksm;
    if s.ran(Arm::Criu) {
        // The guest's own reading: its words and figures, not the host's.
        if k.status == Status::NotRun {
            d.push(format!("shared-OS KSM: {}: {}", k.status, k.reason));
        } else {
            d.push(format!(
                "shared-OS KSM: {} in {:.1} s: {}: {}",
                k.status,
                k.took_ms as f64 / 1000.0,
                k.reason,
                k.how
            ));
        }
        d.extend(k.notes.iter().map(|n| format!("shared-OS KSM: {n}")));
    }
    if s.ran(Arm::Criu) {
        d.extend(search_details(SO_HEAD, s.shared_os.search.as_ref(), false));
    }
    for (arm, vm) in s.vm_columns() {
        d.extend(search_details(head(arm), vm.search.as_ref(), true));
    }
    let vms = s.vm_columns();
    for &(arm, vm) in &vms {
        // The VM-each column alone, as before the template, is named as it always was.
        let name = match (arm, vms.len()) {
            (Arm::Vm, 1) => String::new(),
            _ => format!("{} ", head(arm)),
        };
        if !vm.resources.is_empty() {
            d.push(format!("{name}VM resources: {}", vm.resources));
        }
        for (what, r) in [("KSM", &vm.ksm), ("memory given back", &vm.reclaim)] {
            if r.status != Status::NotRun {
                d.push(format!(
                    "{name}{what}: {} in {}: {}",
                    r.status,
                    host(format!("{:.1} s", r.took_ms as f64 / 1000.0)),
                    r.how
                ));
                // What the host saw while it read (KSM's counters): its words and figures only.
                d.extend(
                    r.notes
                        .iter()
                        .map(|n| format!("{name}{what}: {}", host(n.clone()))),
                );
            }
        }
        if let Some(t) = &vm.template {
            d.push(format!(
                "{name}RAM file: {} of which {} resident: {}",
                host(mib(t.bytes as f64 / 1024.0)),
                host(mib(t.resident_bytes as f64 / 1024.0)),
                t.how
            ));
            if !t.features.is_empty() {
                d.push(format!("{name}QEMU features: {}", t.features.join(", ")));
            }
            d.extend(t.off.iter().map(|o| format!("{name}kept off: {o}")));
        }
        if let Some(lie) = &vm.lie {
            d.push(format!("{name}lie: {lie}"));
        }
    }
    d
}

/// An arm's search for the most copies (`max`): what stopped it, and each step, where
/// MemAvailable stood (the host's for a VM arm, `by_host`, and marked so; the guest's for the
/// CRIU copies) and what it had fallen per desktop since the first. Not escaped here.
fn search_details(name: &str, search: Option<&Search>, by_host: bool) -> Vec<String> {
    let mark = |f: String| if by_host { host(f) } else { f };
    let whose = if by_host { "the host's" } else { "the guest's" };
    let Some(x) = search else {
        return Vec::new();
    };
    let reached = x.steps.last().map_or(0, |st| st.copies_up);
    let mut d = vec![format!(
        "{name} search: {reached} copies, stopped by {} ({}){}",
        x.stopped_by.said(),
        x.detail,
        x.failed
            .as_ref()
            .map(|c| format!("; the copy that failed: {}/", c.report))
            .unwrap_or_default()
    )];
    let before = x.steps.first().map_or(0, |st| st.mem_available_kib);
    let steps: Vec<String> = x
        .steps
        .iter()
        .filter(|st| st.copies_up > 0)
        .map(|st| {
            let fell = before.saturating_sub(st.mem_available_kib) / u64::from(st.copies_up);
            format!(
                "{}: {} ({} each), {}",
                st.copies_up,
                mark(format!("{} MiB", st.mem_available_kib / 1024)),
                mark(format!("{} MiB", fell / 1024)),
                mark(format!("{:.1} s", st.last_copy_ms as f64 / 1000.0))
            )
        })
        .collect();
    if !steps.is_empty() {
        d.push(format!(
            "{name} search steps (copies up: {whose} MemAvailable, its fall per desktop, the last copy's time): {}",
            steps.join("; ")
        ));
    }
    d
}

/// Where each column's memory figures come from: (what says so, compare.json's words, to be
/// escaped by the form).
pub(super) fn memory_sources(s: &Summary) -> Vec<(&'static str, String)> {
    let mut v = Vec::new();
    if s.ran(Arm::Criu) {
        v.push((
            "shared-OS from the guest's smaps_rollup of each copy's processes",
            String::new(),
        ));
    }
    for (arm, vm) in s.vm_columns() {
        v.push((head(arm), vm.memory_source.clone()));
    }
    v
}

/// A VM column's figures, the host's all of them.
pub(super) struct VmFigures {
    pub(super) pss: Vec<u64>,
    pub(super) uss: Vec<u64>,
    /// Its copies' fork (resume) time: median and p95.
    pub(super) med: Option<f64>,
    pub(super) p95: Option<f64>,
    /// Its reset (a fresh QEMU resumed from the save): median and p95.
    pub(super) reset_med: Option<f64>,
    pub(super) reset_p95: Option<f64>,
    pub(super) idle_pss: Option<f64>,
    /// What a VM copy holds beyond the same guest before its tree: the desktop's own share.
    pub(super) beyond: Option<f64>,
    /// The copies' QEMUs by what holds their memory (PSS, KiB): guest RAM, TCG's translation
    /// cache, QEMU's own.
    pub(super) ram: Vec<u64>,
    pub(super) tcg: Vec<u64>,
    pub(super) own: Vec<u64>,
    /// The template RAM file's pages in the host's memory (KiB): none but the templated arm's.
    pub(super) template_kib: Option<f64>,
    /// What a desktop costs the host with the template counted (KiB): every clone's private
    /// pages (USS) and the template's resident pages, over the clones. Their PSS leaves out
    /// the template pages no clone maps yet, which the host holds all the same.
    pub(super) host_per_desktop: Option<f64>,
}

impl VmFigures {
    fn of(vm: &VmEach) -> VmFigures {
        let resume: Vec<u64> = vm.copies.iter().map(|c| c.resume_ms).collect();
        let reset: Vec<u64> = vm.reset.iter().map(|c| c.resume_ms).collect();
        let mem = |f: fn(&Mem) -> u64| -> Vec<u64> {
            vm.copies
                .iter()
                .filter_map(|c| c.host_mem.as_ref().map(f))
                .collect()
        };
        let split = |f: fn(&sharedos_report::procfs::QemuMem) -> u64| -> Vec<u64> {
            vm.copies
                .iter()
                .filter_map(|c| c.host_split.as_ref().map(f))
                .collect()
        };
        let pss = mem(|m| m.pss_kib);
        let uss = mem(|m| m.uss_kib);
        let idle_pss = vm.idle_guest.map(|m| m.pss_kib as f64);
        let template_kib = vm
            .template
            .as_ref()
            .map(|t| t.resident_bytes as f64 / 1024.0);
        // A clone without a figure would make the sum an undercount: then there is none.
        let host_per_desktop = template_kib
            .filter(|_| !vm.copies.is_empty() && uss.len() == vm.copies.len())
            .map(|t| (uss.iter().sum::<u64>() as f64 + t) / uss.len() as f64);
        VmFigures {
            med: median(&resume),
            p95: p95(&resume).map(|v| v as f64),
            reset_med: median(&reset),
            reset_p95: p95(&reset).map(|v| v as f64),
            beyond: median(&pss)
                .zip(idle_pss)
                .map(|(m, idle)| (m - idle).max(0.0)),
            idle_pss,
            pss,
            uss,
            ram: split(|q| q.guest_ram.pss_kib),
            tcg: split(|q| q.translation_cache.pss_kib),
            own: split(|q| q.qemu_own.pss_kib),
            template_kib,
            host_per_desktop,
        }
    }
}

/// The figures every form shows, from one summary: of the arms it ran only.
pub(super) struct Figures {
    pub(super) so_pss: Vec<u64>,
    pub(super) so_uss: Vec<u64>,
    pub(super) so_med: Option<f64>,
    pub(super) so_p95: Option<f64>,
    /// The CRIU column's resets, as its reset gate timed them: median and p95.
    pub(super) so_reset_med: Option<f64>,
    pub(super) so_reset_p95: Option<f64>,
    /// Each VM column run, in `Arm`'s order.
    pub(super) vms: Vec<(Arm, VmFigures)>,
}

impl Figures {
    pub(super) fn of(s: &Summary) -> Figures {
        let empty = Default::default();
        let so = if s.ran(Arm::Criu) {
            &s.shared_os
        } else {
            &empty
        };
        Figures {
            so_pss: so.per_copy.iter().map(|m| m.pss_kib).collect(),
            so_uss: so.per_copy.iter().map(|m| m.uss_kib).collect(),
            so_med: median(&so.restore_ms),
            so_p95: p95(&so.restore_ms).map(|v| v as f64),
            so_reset_med: median(&so.reset_ms),
            so_reset_p95: p95(&so.reset_ms).map(|v| v as f64),
            vms: s
                .vm_columns()
                .into_iter()
                .map(|(a, vm)| (a, VmFigures::of(vm)))
                .collect(),
        }
    }

    /// The figures of the VM column `arm` ran, when it ran.
    pub(super) fn vm(&self, arm: Arm) -> Option<&VmFigures> {
        self.vms.iter().find(|(a, _)| *a == arm).map(|(_, f)| f)
    }
}

/// One line of the side-by-side table: what, a cell per column run, a ratio per VM column
/// against the CRIU one. A figure of the host's, and a ratio drawn from one, carries
/// [`super::HOST_MARK`] in its cell. Cells not escaped here.
pub(super) struct Row {
    pub(super) what: &'static str,
    pub(super) cells: Vec<String>,
}

/// How one measure is shown in a VM column, and its ratio against the CRIU column's.
type VmCell<'a> = &'a dyn Fn(&VmEach, &VmFigures) -> String;

pub(super) fn rows(s: &Summary) -> Vec<Row> {
    let f = Figures::of(s);
    let criu = s.ran(Arm::Criu);
    let vms: Vec<(&VmEach, &VmFigures)> = s
        .vm_columns()
        .into_iter()
        .zip(&f.vms)
        .map(|((_, vm), (_, vf))| (vm, vf))
        .collect();
    let so_med = median(&f.so_pss);
    let med_kib = |xs: &[u64]| median(xs).map_or("n/a".into(), mib);
    // `recorded`: the VM figures are the host's, and so are the ratios drawn from them.
    let row = |what, so: String, vm: VmCell, against: VmCell, recorded: bool| {
        let mark = |x: String| if recorded { host(x) } else { x };
        let mut cells: Vec<String> = criu.then_some(so).into_iter().collect();
        cells.extend(vms.iter().map(|(c, vf)| mark(vm(c, vf))));
        if criu {
            cells.extend(vms.iter().map(|(c, vf)| mark(against(c, vf))));
        }
        Row { what, cells }
    };
    let none: VmCell = &|_, _| String::new();
    let against_pss = |v: Option<f64>| ratio(so_med, v);
    let mut rows = vec![
        row(
            "copies",
            f.so_pss.len().to_string(),
            &|c, _| c.copies.len().to_string(),
            none,
            false,
        ),
        row(
            "fork: median",
            ms(f.so_med),
            &|_, v| ms(v.med),
            &|_, v| ratio(f.so_med, v.med),
            true,
        ),
        row("fork: p95", ms(f.so_p95), &|_, v| ms(v.p95), none, true),
        row(
            "reset: median",
            ms(f.so_reset_med),
            &|_, v| ms(v.reset_med),
            &|_, v| ratio(f.so_reset_med, v.reset_med),
            true,
        ),
        row(
            "reset: p95",
            ms(f.so_reset_p95),
            &|_, v| ms(v.reset_p95),
            none,
            true,
        ),
        row(
            "PSS per desktop: median",
            med_kib(&f.so_pss),
            &|_, v| med_kib(&v.pss),
            &|_, v| against_pss(median(&v.pss)),
            true,
        ),
        row(
            "  of it the guest's RAM",
            String::new(),
            &|_, v| med_kib(&v.ram),
            &|_, v| against_pss(median(&v.ram)),
            true,
        ),
        row(
            "  of it TCG's translation cache",
            String::new(),
            &|_, v| med_kib(&v.tcg),
            none,
            true,
        ),
        row(
            "  of it QEMU's own",
            String::new(),
            &|_, v| med_kib(&v.own),
            none,
            true,
        ),
        row(
            "USS per desktop: median",
            med_kib(&f.so_uss),
            &|_, v| med_kib(&v.uss),
            &|_, v| ratio(median(&f.so_uss), median(&v.uss)),
            true,
        ),
        row(
            "PSS of a guest running nothing",
            String::new(),
            &|_, v| v.idle_pss.map_or("n/a".into(), mib),
            none,
            true,
        ),
        row(
            "PSS per desktop beyond it",
            med_kib(&f.so_pss),
            &|_, v| v.beyond.map_or("n/a".into(), mib),
            &|_, v| against_pss(v.beyond),
            true,
        ),
    ];
    if f.vm(Arm::VmTemplate).is_some() {
        // Figures of the templated arm alone: the other columns' cells stay empty.
        let templated = |c: &VmEach, x: String| {
            if c.template.is_some() {
                x
            } else {
                String::new()
            }
        };
        rows.push(row(
            "template RAM file (shared)",
            String::new(),
            &|c, v| templated(c, v.template_kib.map_or("n/a".into(), mib)),
            none,
            true,
        ));
        rows.push(row(
            "host memory per desktop, template included",
            String::new(),
            &|c, v| templated(c, v.host_per_desktop.map_or("n/a".into(), mib)),
            &|c, v| templated(c, against_pss(v.host_per_desktop)),
            true,
        ));
    }
    // KSM: the CRIU copies merged by their guest's KSM (the guest's figure), each VM by the
    // host's; the VMs' ratio against the CRIU copies merged, when they were.
    let so_ksm = &s.shared_os.ksm;
    let so_ksm_pss: Vec<u64> = so_ksm.per_copy.iter().map(|m| m.pss_kib).collect();
    let (so_ksm_cell, so_ksm_med) = match (so_ksm.status, median(&so_ksm_pss)) {
        (Status::Pass, Some(v)) => (mib(v), Some(v)),
        // Its reason, the guest's words, is said below the table: a cell holds the status.
        (st, _) => (format!("{st} (below)"), so_med),
    };
    for (what, so, so_ref, reading) in [
        (
            "PSS per desktop, KSM merging",
            so_ksm_cell,
            so_ksm_med,
            (|c: &VmEach| &c.ksm) as fn(&VmEach) -> &Reading,
        ),
        (
            "PSS per desktop, guest gave memory back",
            String::new(),
            so_med,
            |c| &c.reclaim,
        ),
    ] {
        rows.push(row(
            what,
            so,
            &|c, _| reading_cells(so_ref, reading(c)).0,
            &|c, _| reading_cells(so_ref, reading(c)).1,
            false,
        ));
    }
    rows.push(row(
        "resources per desktop",
        s.shared_os.resources.clone(),
        &|c, _| {
            format!(
                "{}, {} each",
                host(format!("{} MiB", c.memory_mib)),
                host(format!("{} CPUs", c.cpus))
            )
        },
        none,
        false,
    ));
    // A row with nothing in any column run (a VM figure when no VM arm ran) says nothing.
    rows.retain(|r| r.cells.iter().any(|c| !c.is_empty()));
    rows
}

/// A further reading of a VM column's copies: its median PSS and that against a CRIU copy's,
/// both the host's; or its status and why, and no ratio.
fn reading_cells(so_med: Option<f64>, r: &Reading) -> (String, String) {
    let pss: Vec<u64> = r.per_copy.iter().map(|m| m.pss_kib).collect();
    match (r.status, median(&pss)) {
        (Status::Pass, Some(v)) => (host(mib(v)), host(ratio(so_med, Some(v)))),
        (st, _) => (format!("{st}: {}", r.reason), String::new()),
    }
}

/// What the accelerator means for the figures.
pub(super) fn accel_note(s: &Summary) -> &'static str {
    if s.accel == "kvm" {
        "times are a KVM machine's"
    } else {
        "every column emulated: the ratios are the result, not the times"
    }
}

/// The comparison in one sentence: what a desktop costs each way. Numbers only.
pub(super) fn headline(s: &Summary) -> String {
    let f = Figures::of(s);
    let criu = s.ran(Arm::Criu);
    let so = median(&f.so_pss);
    let suffix = " (PSS: shared-OS from the guest, a VM the host's reading of its QEMU)";
    if f.vms.is_empty() {
        return format!(
            "per desktop: {} (shared-OS), no VM arm run{suffix}",
            so.map_or("n/a".into(), mib)
        );
    }
    let mut h = String::from("per desktop:");
    if criu {
        let _ = write!(h, " {} against", so.map_or("n/a".into(), mib));
    }
    // Against the CRIU figure when that arm ran; without it there is no ratio to give.
    let against = |v: Option<f64>| {
        if criu {
            format!(", {}", host(ratio(so, v)))
        } else {
            String::new()
        }
    };
    // The VM-each arm alone is not named, as before there was a second VM arm.
    let named = f.vms.len() > 1 || !criu;
    for (i, (arm, v)) in f.vms.iter().enumerate() {
        if i > 0 {
            h.push_str(" and");
        }
        if named || *arm == Arm::VmTemplate {
            let _ = write!(h, " {}", head(*arm));
        }
        let pss = median(&v.pss);
        let _ = write!(
            h,
            " {}{}",
            host(pss.map_or("n/a".into(), mib)),
            against(pss)
        );
        match arm {
            Arm::VmTemplate => {
                if let Some(t) = v.host_per_desktop {
                    let _ = write!(
                        h,
                        " ({} of the host's with the template's RAM{})",
                        host(mib(t)),
                        against(Some(t))
                    );
                }
            }
            _ => {
                if let Some(b) = v.beyond {
                    let _ = write!(
                        h,
                        " ({} beyond an idle VM{})",
                        host(mib(b)),
                        against(Some(b))
                    );
                }
            }
        }
    }
    h.push_str(suffix);
    h
}
