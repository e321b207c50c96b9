//! A comparison (`compare.json`) as people read it: the two columns side by side, per copy and
//! per desktop, with the ratio between them and the accelerator that ran. [`text`] is what
//! vm-compare prints as it ends; `show` renders a comparison judged again from its reports
//! ([`show_text`], [`md`], [`html`] with two charts) and `diff` holds two of them figure by
//! figure ([`diff`]). Presentation only: the verdict, problems and warnings are the judge's.
//!
//! Every string that came from compare.json or a report (the image, the accelerator, labels,
//! problems, warnings, the column's descriptions) is escaped for its format; the charts carry
//! only fixed labels and numbers.

use crate::escape;
use crate::judge::compare::read::{Judged, HOST_RECORDED};
use crate::judge::compare::{Reading, Summary};
use sharedos_report::model::density::{median, p95};
use sharedos_report::report::{Status, Verdict};
use std::fmt::Write;

fn mib(kib: f64) -> String {
    format!("{:.1} MiB", kib / 1024.0)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |m| format!("{:.2} s", m / 1000.0))
}

/// `b` against `a` as "1:x".
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("1:{:.1}", b / a),
        _ => "n/a".into(),
    }
}

/// The mark of a figure only the host holds, or of one computed from such a figure: compare.json
/// is its only record, so a reader must be able to tell it from a report's figure in every form.
/// Every form shows it as itself (Markdown escapes it to stay literal).
pub const HOST_MARK: &str = "*";

/// `figure` marked as the host's; no figure ("n/a", nothing) is left as it is.
fn host(figure: String) -> String {
    if figure.is_empty() || figure == "n/a" {
        figure
    } else {
        format!("{figure} {HOST_MARK}")
    }
}

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
fn details(s: &Summary) -> Vec<String> {
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
struct Figures {
    so_pss: Vec<u64>,
    so_uss: Vec<u64>,
    vm_pss: Vec<u64>,
    vm_uss: Vec<u64>,
    so_med: Option<f64>,
    so_p95: Option<f64>,
    vm_med: Option<f64>,
    vm_p95: Option<f64>,
    /// The CRIU column's resets, as its reset gate timed them: median and p95.
    so_reset_med: Option<f64>,
    so_reset_p95: Option<f64>,
    /// The VM column's reset (a fresh QEMU resumed from the save), the host's: median and p95.
    reset_ms: Option<f64>,
    reset_p95: Option<f64>,
    idle_pss: Option<f64>,
    /// What a VM copy holds beyond the same guest before its tree: the desktop's own share.
    beyond: Option<f64>,
    /// The copies' QEMUs by what holds their memory (PSS, KiB): guest RAM, TCG's translation
    /// cache, QEMU's own.
    vm_ram: Vec<u64>,
    vm_tcg: Vec<u64>,
    vm_own: Vec<u64>,
}

impl Figures {
    fn of(s: &Summary) -> Figures {
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
struct Row {
    what: &'static str,
    so: String,
    vm: String,
    ratio: String,
}

fn rows(s: &Summary) -> Vec<Row> {
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
fn accel_note(s: &Summary) -> &'static str {
    if s.accel == "kvm" {
        "times are a KVM machine's"
    } else {
        "both columns emulated: the ratios are the result, not the times"
    }
}

/// The comparison in one sentence: what a desktop costs each way. Numbers only.
fn headline(s: &Summary) -> String {
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

const SO_HEAD: &str = "shared-OS (CRIU)";
const VM_HEAD: &str = "VM each";

/// The side-by-side table in plain text, as vm-compare prints it as it ends. The problems and
/// descriptions came partly from guests and compare.json: one line each, escaped.
pub fn text(s: &Summary) -> String {
    let rows: Vec<[String; 4]> = rows(s)
        .into_iter()
        .map(|r| {
            [
                r.what.to_string(),
                escape::line(&r.so),
                escape::line(&r.vm),
                r.ratio,
            ]
        })
        .collect();
    let mut out = format!(
        "vm-compare {}: {} copies each, under {} ({})\n",
        escape::line(&s.image),
        s.copies,
        escape::line(&s.accel),
        accel_note(s)
    );
    let width = |i: usize, head: &str| {
        rows.iter()
            .map(|r| r[i].chars().count())
            .max()
            .unwrap_or(0)
            .max(head.chars().count())
    };
    let (w0, w1, w2) = (width(0, ""), width(1, SO_HEAD), width(2, VM_HEAD));
    let _ = writeln!(out, "  {:w0$}  {SO_HEAD:w1$}  {VM_HEAD:w2$}  shared:VM", "");
    for [a, b, c, d] in &rows {
        let _ = writeln!(out, "  {a:w0$}  {b:w1$}  {c:w2$}  {d}");
    }
    let _ = writeln!(out, "  {}", headline(s));
    let _ = writeln!(out, "  {HOST_MARK} {HOST_RECORDED}");
    let _ = writeln!(
        out,
        "  memory: shared-OS from the guest's smaps_rollup of each copy's processes; VM each: {}",
        escape::line(&s.vm_each.memory_source)
    );
    for d in details(s) {
        let _ = writeln!(out, "  {}", escape::line(&d));
    }
    let _ = writeln!(out, "verdict: {}", s.verdict);
    for p in &s.problems {
        let _ = writeln!(out, "  problem: {}", escape::line(p));
    }
    out
}

fn meaning(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "both columns hold, every copy of each checked",
        _ => "a column does not hold: see the problems",
    }
}

/// `show` of a comparison judged again: the table, what is the host's record, the warnings
/// where compare.json said otherwise, and the re-judged verdict last.
pub fn show_text(j: &Judged) -> String {
    let s = &j.summary;
    let mut out = text(s);
    for w in &j.warnings {
        let _ = writeln!(out, "  warning: {}", escape::line(w));
    }
    let _ = writeln!(
        out,
        "judged again from its reports: {} (exit {}): {}",
        s.verdict,
        j.exit_code(),
        meaning(s.verdict)
    );
    out
}

/// The comparison for a pull request: the table, then the verdict, problems and warnings,
/// every string from compare.json or a report made inert.
pub fn md(j: &Judged) -> String {
    let s = &j.summary;
    let mut out = format!(
        "**vm-compare {}: {}** (exit {}: {}): {} copies each, under {} ({}).\n\n{}.\n\n",
        escape::markdown(&s.image),
        s.verdict,
        j.exit_code(),
        meaning(s.verdict),
        s.copies,
        escape::markdown(&s.accel),
        accel_note(s),
        escape::markdown(&headline(s))
    );
    let _ = writeln!(out, "| | {SO_HEAD} | {VM_HEAD} | shared:VM |");
    out.push_str("|---|---|---|---|\n");
    for r in rows(s) {
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} |",
            r.what,
            escape::markdown(&r.so),
            escape::markdown(&r.vm),
            escape::markdown(&r.ratio)
        );
    }
    let _ = writeln!(
        out,
        "\n{} {}.\n\nMemory: shared-OS from the guest's smaps_rollup of each copy's processes; VM \
         each: {}.",
        escape::markdown(HOST_MARK),
        escape::markdown(HOST_RECORDED),
        escape::markdown(&s.vm_each.memory_source)
    );
    for d in details(s) {
        let _ = writeln!(out, "\n{}", escape::markdown(&d));
    }
    for (head, list) in [("Problems", &s.problems), ("Warnings", &j.warnings)] {
        if !list.is_empty() {
            let _ = writeln!(out, "\n**{head}**\n");
            for p in list {
                let _ = writeln!(out, "- {}", escape::markdown(p));
            }
        }
    }
    out
}

/// One self-contained page: the verdict, the table, the two charts (inline SVG), the problems
/// and warnings, the reports judged. No script, no external resource, no clock.
pub fn html(j: &Judged) -> String {
    let mut out = String::new();
    // fmt::Write into a String cannot fail.
    let _ = write_page(&mut out, j);
    out
}

const STYLE: &str = "\
.chart{margin:.5em 0 1.5em;border:none;padding:0}
.chart svg{display:block;max-width:100%;height:auto}
.note{font-size:.9em;color:#57606a}
";

fn write_page(out: &mut String, j: &Judged) -> std::fmt::Result {
    use crate::escape::html as esc;
    let s = &j.summary;
    let v = s.verdict.as_str();
    writeln!(out, "<!DOCTYPE html>")?;
    writeln!(out, "<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">")?;
    writeln!(out, "<title>sharedos-rig comparison: {v}</title>")?;
    writeln!(
        out,
        "<style>\n{}{STYLE}</style>\n</head>\n<body>",
        super::html::STYLE
    )?;
    writeln!(
        out,
        "<h1>sharedos-rig comparison <span class=\"verdict s-{v}\">{v}</span></h1>"
    )?;
    writeln!(
        out,
        "<p>exit {}: {}, judged again from its reports.</p>",
        j.exit_code(),
        esc(meaning(s.verdict))
    )?;
    writeln!(
        out,
        "<p>image <code>{}</code>, {} copies each, under <code>{}</code> ({}).</p>",
        esc(&s.image),
        s.copies,
        esc(&s.accel),
        accel_note(s)
    )?;
    writeln!(out, "<p><strong>{}</strong></p>", esc(&headline(s)))?;
    for (head, list) in [("Problems", &s.problems), ("Warnings", &j.warnings)] {
        if !list.is_empty() {
            writeln!(out, "<h2>{head}</h2>\n<ul>")?;
            for p in list {
                writeln!(out, "<li class=\"problem\">{}</li>", esc(p))?;
            }
            writeln!(out, "</ul>")?;
        }
    }
    writeln!(out, "<h2>Side by side</h2>\n<table>")?;
    writeln!(
        out,
        "<tr><th></th><th>{SO_HEAD}</th><th>{VM_HEAD}</th><th>shared:VM</th></tr>"
    )?;
    for r in rows(s) {
        writeln!(
            out,
            "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td>\
             <td class=\"num\">{}</td></tr>",
            r.what,
            esc(&r.so),
            esc(&r.vm),
            esc(&r.ratio)
        )?;
    }
    writeln!(out, "</table>")?;
    writeln!(
        out,
        "<p class=\"note\">{HOST_MARK} {}.</p>",
        esc(HOST_RECORDED)
    )?;
    writeln!(
        out,
        "<p class=\"note\">Memory: shared-OS from the guest's smaps_rollup of each copy's \
         processes; VM each: {}.</p>",
        esc(&s.vm_each.memory_source)
    )?;
    for d in details(s) {
        writeln!(out, "<p class=\"note\">{}</p>", esc(&d))?;
    }
    writeln!(out, "<h2>Memory against the number of desktops</h2>")?;
    write_chart(out, chart::memory(s))?;
    writeln!(out, "<h2>Fork latency per copy</h2>")?;
    write_chart(out, chart::latency(s))?;
    writeln!(out, "<h2>Reports judged</h2>\n<ul>")?;
    writeln!(
        out,
        "<li>shared-OS: <code>{}/</code></li>",
        esc(&s.shared_os.report)
    )?;
    for c in s.vm_each.copies.iter().chain(&s.vm_each.reset) {
        writeln!(
            out,
            "<li>VM each, {}: <code>{}/</code>{}</li>",
            esc(&c.label),
            esc(&c.report),
            if c.problems.is_empty() {
                String::new()
            } else {
                format!(
                    " <span class=\"bad\">{} problem(s)</span>",
                    c.problems.len()
                )
            }
        )?;
    }
    writeln!(
        out,
        "<li>the VM fork's console: <code>{}/</code>, {} of state (sha256 <code>{}</code>), \
         saved in {}</li>\n</ul>",
        esc(&s.vm_each.fork),
        host(mib(s.vm_each.state_bytes as f64 / 1024.0)),
        esc(&s.vm_each.state_sha256),
        host(ms(Some(s.vm_each.save_ms as f64)))
    )?;
    writeln!(out, "</body>\n</html>")
}

fn write_chart(out: &mut String, svg: Result<String, String>) -> std::fmt::Result {
    match svg {
        Ok(svg) => writeln!(out, "<figure class=\"chart\">\n{svg}\n</figure>"),
        Err(e) => writeln!(
            out,
            "<p class=\"problem\">the chart could not be drawn: {}</p>",
            crate::escape::html(&e)
        ),
    }
}

/// The page's two charts, drawn with plotters into SVG. Only fixed labels and numbers reach
/// them, so nothing from compare.json is drawn as text.
pub mod chart {
    use super::Summary;
    use plotters::prelude::*;
    use sharedos_report::model::density::median;

    /// Each design's colour, the same in both charts; a test finds them on a screenshot.
    pub const SHARED_OS: RGBColor = RGBColor(0x09, 0x69, 0xda);
    pub const VM_EACH: RGBColor = RGBColor(0xbc, 0x4c, 0x00);
    pub const IDLE_VM: RGBColor = RGBColor(0x8c, 0x95, 0x9f);
    pub const VM_RESET: RGBColor = RGBColor(0x82, 0x50, 0xdf);
    pub const VM_KSM: RGBColor = RGBColor(0x1a, 0x7f, 0x37);
    pub const SHARED_OS_RESET: RGBColor = RGBColor(0x54, 0xae, 0xff);

    const SIZE: (u32, u32) = (760, 380);

    pub struct Series {
        pub label: &'static str,
        pub colour: RGBColor,
        pub points: Vec<(f64, f64)>,
    }

    /// The sums of the first k values, k = 1.., in MiB.
    fn running_mib(kib: impl Iterator<Item = Option<u64>>) -> Vec<(f64, f64)> {
        let mut sum = 0.0f64;
        let mut out = Vec::new();
        for (i, v) in kib.enumerate() {
            // A copy without a figure ends the line: a sum past it would undercount.
            let Some(v) = v else { break };
            sum += v as f64 / 1024.0;
            out.push(((i + 1) as f64, sum));
        }
        out
    }

    /// The series of the memory chart: for k desktops, the shared-OS copies' PSS summed, the
    /// VM copies' QEMU PSS summed, and k guests running nothing.
    pub fn memory_series(s: &Summary) -> Vec<Series> {
        let n = s.copies.max(1);
        let mut out = vec![
            Series {
                label: "shared-OS: sum of the copies' PSS",
                colour: SHARED_OS,
                points: running_mib(s.shared_os.per_copy.iter().map(|m| Some(m.pss_kib))),
            },
            Series {
                label: "VM each: sum of the QEMUs' PSS (host) *",
                colour: VM_EACH,
                points: running_mib(
                    s.vm_each
                        .copies
                        .iter()
                        .map(|c| c.host_mem.map(|m| m.pss_kib)),
                ),
            },
        ];
        // Only a reading taken of every copy is drawn: a partial one is no sum over k.
        let ksm = &s.vm_each.ksm;
        if ksm.status == sharedos_report::report::Status::Pass
            && ksm.per_copy.len() == s.vm_each.copies.len()
        {
            out.push(Series {
                label: "VM each, host KSM merging (host) *",
                colour: VM_KSM,
                points: running_mib(ksm.per_copy.iter().map(|m| Some(m.pss_kib))),
            });
        }
        if let Some(idle) = s.vm_each.idle_guest {
            out.push(Series {
                label: "VMs running nothing (idle guest's PSS, host) *",
                colour: IDLE_VM,
                points: running_mib((1..=n).map(|_| Some(idle.pss_kib))),
            });
        }
        out
    }

    /// The series of the latency chart: each copy's fork time in seconds, both designs, and each
    /// design's reset (its median) across the copies.
    pub fn latency_series(s: &Summary) -> Vec<Series> {
        let secs = |xs: &mut dyn Iterator<Item = u64>| -> Vec<(f64, f64)> {
            xs.enumerate()
                .map(|(i, v)| ((i + 1) as f64, v as f64 / 1000.0))
                .collect()
        };
        let mut out = vec![
            Series {
                label: "shared-OS: CRIU restore",
                colour: SHARED_OS,
                points: secs(&mut s.shared_os.restore_ms.iter().copied()),
            },
            Series {
                label: "VM each: resume to SSH (host) *",
                colour: VM_EACH,
                points: secs(&mut s.vm_each.copies.iter().map(|c| c.resume_ms)),
            },
        ];
        if let Some(r) = &s.vm_each.reset {
            let y = r.resume_ms as f64 / 1000.0;
            out.push(Series {
                label: "VM reset: a copy put back (host) *",
                colour: VM_RESET,
                points: vec![(1.0, y), (f64::from(s.copies.max(1)), y)],
            });
        }
        if let Some(ms) = median(&s.shared_os.reset_ms) {
            let y = ms / 1000.0;
            out.push(Series {
                label: "shared-OS reset: a copy restored again",
                colour: SHARED_OS_RESET,
                points: vec![(1.0, y), (f64::from(s.copies.max(1)), y)],
            });
        }
        out
    }

    pub fn memory(s: &Summary) -> Result<String, String> {
        draw(
            (
                "Memory for k desktops (* the host's)",
                "desktops (k)",
                "MiB",
            ),
            0,
            s.copies,
            &memory_series(s),
        )
    }

    pub fn latency(s: &Summary) -> Result<String, String> {
        draw(
            ("Fork latency per copy (* the host's)", "copy", "seconds"),
            1,
            s.copies,
            &latency_series(s),
        )
    }

    /// A chart of `series` over 1..=copies: its caption and axes' names, and the decimals of
    /// the y axis's labels.
    fn draw(
        (caption, x_desc, y_desc): (&'static str, &'static str, &'static str),
        y_places: usize,
        copies: u32,
        series: &[Series],
    ) -> Result<String, String> {
        let n = copies.max(1);
        let top = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1))
            .filter(|y| y.is_finite())
            .fold(0.0f64, f64::max);
        let top = if top > 0.0 { top * 1.15 } else { 1.0 };
        let mut svg = String::new();
        {
            let e = |e: DrawingAreaErrorKind<_>| format!("{e}");
            let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
            root.fill(&WHITE).map_err(e)?;
            let mut c = ChartBuilder::on(&root)
                .caption(caption, ("sans-serif", 26))
                .margin(12)
                .x_label_area_size(44)
                .y_label_area_size(64)
                .build_cartesian_2d(0.5f64..f64::from(n) + 0.5, 0f64..top)
                .map_err(e)?;
            c.configure_mesh()
                .x_desc(x_desc)
                .y_desc(y_desc)
                .label_style(("sans-serif", 16))
                .y_label_formatter(&|y| format!("{y:.y_places$}"))
                .x_labels(usize::try_from(n.min(16)).unwrap_or(16).saturating_add(1))
                .x_label_formatter(&|x| {
                    if x.fract().abs() < 1e-9 {
                        format!("{x:.0}")
                    } else {
                        String::new()
                    }
                })
                .draw()
                .map_err(e)?;
            for s in series {
                let colour = s.colour;
                c.draw_series(LineSeries::new(
                    s.points.iter().copied(),
                    colour.stroke_width(3),
                ))
                .map_err(e)?
                .label(s.label)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
                });
                c.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                    .map_err(e)?;
            }
            c.configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.85))
                .border_style(BLACK)
                .label_font(("sans-serif", 16))
                .draw()
                .map_err(e)?;
            root.present().map_err(e)?;
        }
        // Inline in HTML an svg element is in the SVG namespace already: the page names no
        // address, not even the namespace's.
        Ok(svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1))
    }
}

/// One figure of a diff: what, A's and B's values, how each is shown, and whether it is the
/// host's (its values and their change are then marked).
type Figure = (
    &'static str,
    Option<f64>,
    Option<f64>,
    fn(Option<f64>) -> String,
    bool,
);

/// Two comparisons figure by figure, A against B, each judged again from its reports.
pub fn diff(a: &Judged, b: &Judged, a_label: &str, b_label: &str) -> String {
    let (sa, sb) = (&a.summary, &b.summary);
    let (fa, fb) = (Figures::of(sa), Figures::of(sb));
    let mut out = format!("A: {a_label}\nB: {b_label}\n");
    let mut rows: Vec<[String; 4]> = vec![[
        "figure".into(),
        "A".into(),
        "B".into(),
        "B against A".into(),
    ]];
    let word = |x: &str, y: &str| {
        if x == y {
            "same".to_string()
        } else {
            "differs".to_string()
        }
    };
    for (what, x, y) in [
        ("image", escape::line(&sa.image), escape::line(&sb.image)),
        (
            "accelerator",
            escape::line(&sa.accel),
            escape::line(&sb.accel),
        ),
        ("copies", sa.copies.to_string(), sb.copies.to_string()),
        (
            "verdict (judged again)",
            sa.verdict.to_string(),
            sb.verdict.to_string(),
        ),
        (
            "problems",
            sa.problems.len().to_string(),
            sb.problems.len().to_string(),
        ),
        (
            "warnings",
            a.warnings.len().to_string(),
            b.warnings.len().to_string(),
        ),
    ] {
        let change = word(&x, &y);
        rows.push([what.into(), x, y, change]);
    }
    let kib = |v: Option<f64>| v.map_or("n/a".into(), mib);
    let figures: [Figure; 15] = [
        ("shared-OS fork: median", fa.so_med, fb.so_med, ms, false),
        ("shared-OS fork: p95", fa.so_p95, fb.so_p95, ms, false),
        ("VM-each fork: median", fa.vm_med, fb.vm_med, ms, true),
        ("VM-each fork: p95", fa.vm_p95, fb.vm_p95, ms, true),
        (
            "shared-OS reset: median",
            fa.so_reset_med,
            fb.so_reset_med,
            ms,
            false,
        ),
        (
            "shared-OS reset: p95",
            fa.so_reset_p95,
            fb.so_reset_p95,
            ms,
            false,
        ),
        ("VM reset", fa.reset_ms, fb.reset_ms, ms, true),
        (
            "shared-OS PSS per desktop",
            median(&fa.so_pss),
            median(&fb.so_pss),
            kib,
            false,
        ),
        (
            "shared-OS USS per desktop",
            median(&fa.so_uss),
            median(&fb.so_uss),
            kib,
            false,
        ),
        (
            "VM-each PSS per desktop",
            median(&fa.vm_pss),
            median(&fb.vm_pss),
            kib,
            true,
        ),
        (
            "VM-each USS per desktop",
            median(&fa.vm_uss),
            median(&fb.vm_uss),
            kib,
            true,
        ),
        ("idle VM PSS", fa.idle_pss, fb.idle_pss, kib, true),
        ("VM PSS beyond idle", fa.beyond, fb.beyond, kib, true),
        (
            "VM fork state",
            Some(sa.vm_each.state_bytes as f64 / 1024.0),
            Some(sb.vm_each.state_bytes as f64 / 1024.0),
            kib,
            true,
        ),
        (
            "VM fork save",
            Some(sa.vm_each.save_ms as f64),
            Some(sb.vm_each.save_ms as f64),
            ms,
            true,
        ),
    ];
    for (what, x, y, unit, is_host) in figures {
        let change = match (x, y) {
            (Some(x), Some(y)) if x == y => "same".into(),
            (Some(x), Some(y)) if x > 0.0 => format!("{:+.1}%", (y - x) / x * 100.0),
            (None, None) => "same".into(),
            _ => "differs".into(),
        };
        let cells = [unit(x), unit(y), change];
        let [x, y, change] = if is_host { cells.map(host) } else { cells };
        rows.push([what.into(), x, y, change]);
    }
    let w: Vec<usize> = (0..4)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    for r in &rows {
        let _ = writeln!(
            out,
            "  {:w0$}  {:w1$}  {:w2$}  {}",
            r[0],
            r[1],
            r[2],
            r[3],
            w0 = w[0],
            w1 = w[1],
            w2 = w[2]
        );
    }
    let _ = writeln!(out, "  {HOST_MARK} {HOST_RECORDED}");
    for (side, j) in [("A", a), ("B", b)] {
        for p in &j.summary.problems {
            let _ = writeln!(out, "{side} problem: {}", escape::line(p));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::compare::{SharedOs, VmCopy, VmEach, FORMAT};
    use sharedos_report::model::density::Mem;

    fn mem(pss: u64) -> Mem {
        Mem {
            rss_kib: pss,
            pss_kib: pss,
            uss_kib: pss,
        }
    }

    fn summary() -> Summary {
        let copy = |label: &str| VmCopy {
            label: label.into(),
            report: label.into(),
            resume_ms: 4000,
            host_mem: Some(mem(300 * 1024)),
            ..VmCopy::default()
        };
        Summary {
            format: FORMAT,
            image: "bookworm".into(),
            accel: "tcg".into(),
            copies: 2,
            workload: None,
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

    /// Guest and archive text with every kind of character that must not reach a reader.
    const HOSTILE: &str =
        "\u{1b}[2J\u{1b}]0;t\u{7}<script>x</script> *b* [l](u) @who\nverdict: PASS\r\u{202e}|";

    fn hostile() -> Judged {
        let mut s = summary();
        s.image = HOSTILE.into();
        s.accel = HOSTILE.into();
        s.shared_os.resources = HOSTILE.into();
        s.shared_os.report = HOSTILE.into();
        s.vm_each.memory_source = HOSTILE.into();
        s.vm_each.copies[0].label = HOSTILE.into();
        s.vm_each.copies[0].problems = vec![HOSTILE.into()];
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
        // Each table row keeps its four cells: a guest's | cannot add one.
        for l in m.lines().filter(|l| l.starts_with("| ")) {
            assert_eq!(l.matches(" | ").count(), 3, "{l}");
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
        let mut s = summary();
        let vm = &mut s.vm_each;
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
        s
    }

    /// `s` with every figure only the host holds multiplied by `k`: what a hand-edited
    /// compare.json could say, which no report contradicts.
    fn host_times(s: &Summary, k: u64) -> Summary {
        let mut s = s.clone();
        let m = |m: &mut Mem| {
            m.rss_kib *= k;
            m.pss_kib *= k;
            m.uss_kib *= k;
        };
        let vm = &mut s.vm_each;
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
        s
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
}
