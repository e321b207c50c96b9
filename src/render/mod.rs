//! Presentation only (layer L5): a judged report as text for a terminal, Markdown for a pull
//! request, one self-contained HTML page, or JUnit XML for CI; what changed between two
//! reports (`diff`); the reports of a directory (`list`). Every format is a pure function of
//! the judge's `Outcome` (html also embeds the PNGs the judgement read), with no clock and no
//! randomness, so the same report renders to the same bytes. Nothing here judges: the verdict
//! is `judge::verdict`'s, and every string a guest wrote is escaped by `crate::escape`.

use crate::judge::verdict::{self, Outcome};
use sharedos_report::cause::cut;
use sharedos_report::report::{Gate, GateName, Report, Review, Status};

pub mod compare;
pub mod diff;
pub mod html;
pub mod junit;
pub mod list;
pub mod md;
pub mod text;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Md,
    Html,
    Junit,
}

/// Renders a judged report (from `judge::judge`).
pub fn render(o: &Outcome, format: Format) -> String {
    match format {
        Format::Text => text::render(o),
        Format::Md => md::render(o),
        Format::Html => html::render(o),
        Format::Junit => junit::render(o),
    }
}

/// Renders a report held in memory with an optional review; nothing is re-hashed and html shows
/// no images, since there is no directory to read them from.
pub fn render_report(report: &Report, review: Option<&Review>, format: Format) -> String {
    render(&verdict::evaluate_report(report, review), format)
}

/// The gates' total duration in the unit a reader expects; a sum that overflows (the guest
/// wrote the durations) is said, not wrapped.
pub fn total_duration(gates: &[Gate]) -> String {
    match crate::judge::consistency::total_ms(gates) {
        Some(ms) => duration(ms),
        None => "more than a u64 of milliseconds: not a real total".to_string(),
    }
}

/// Milliseconds in the unit a reader expects.
pub fn duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 120_000 {
        format!("{:.3} s", ms as f64 / 1000.0)
    } else {
        format!("{} min {:.1} s", ms / 60_000, (ms % 60_000) as f64 / 1000.0)
    }
}

/// The most characters a cause takes beside a status; the whole quote is shown apart.
pub const CAUSE_WIDTH: usize = 100;

/// A gate's cause in a few words, for beside its status (`criu dump: Can't dump nested ipc
/// namespace for 1234`); None when the gate passed or quotes none. Guest text: not escaped
/// here, every format escapes it.
pub fn short_cause(g: &Gate) -> Option<String> {
    if g.status == Status::Pass {
        return None;
    }
    g.cause.as_ref().map(|c| cut(&c.headline(), CAUSE_WIDTH))
}

/// A failed gate's quoted cause: where it was quoted from, then its lines oldest first, the
/// error last: `| ` before each line that led to it, `> ` before the error. Not escaped.
pub fn cause_quote(g: &Gate) -> Option<(String, Vec<String>)> {
    if g.status == Status::Pass {
        return None;
    }
    let c = g.cause.as_ref()?;
    let from = if c.log.is_empty() {
        c.source.clone()
    } else {
        format!("{}, {}", c.source, c.log)
    };
    let mut lines: Vec<String> = c.before.iter().map(|l| format!("| {l}")).collect();
    lines.push(format!("> {}", c.error));
    Some((from, lines))
}

/// A kernel oops the host read on the console, in words: its first line, its RIP line, and
/// the panic or that the guest kept going. Not escaped.
pub fn oops_words(o: &sharedos_report::cause::KernelOops) -> String {
    use sharedos_report::cause::kernel_message as k;
    let mut parts = vec![k(&o.first).to_string()];
    if !o.rip.is_empty() {
        parts.push(k(&o.rip).to_string());
    }
    parts.push(if o.panic.is_empty() {
        "no panic: the guest kept going".to_string()
    } else {
        k(&o.panic).to_string()
    });
    parts.join("; ")
}

fn opt(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "unknown".to_string())
}

/// Where the run happened, as label/value rows shared by every format.
pub fn provenance(r: &Report) -> Vec<(&'static str, String)> {
    let e = &r.environment;
    let mut rows = vec![
        ("kernel release", e.kernel_release.clone()),
        ("kernel version", e.kernel_version.clone()),
        ("hostname", e.hostname.clone()),
        ("boot id", e.boot_id.clone()),
        ("os", e.os.clone()),
        ("machine", e.machine.clone()),
        ("started (UTC)", e.started_at.clone()),
        ("finished (UTC)", e.finished_at.clone()),
        ("criu", opt(&e.criu_version)),
        ("Xvfb", opt(&e.xvfb_version)),
        ("xterm", opt(&e.xterm_version)),
        ("gate version", e.gate_version.clone()),
        ("gate command", e.command_line.join(" ")),
        ("marker", r.marker.clone()),
        (
            "options",
            if r.options.is_plain() {
                "none".into()
            } else {
                r.options.args().join(" ")
            },
        ),
    ];
    match &r.vm {
        Some(vm) => {
            rows.extend([
                ("accelerator", format!("{} ({})", vm.accel, vm.accel_reason)),
                ("qemu version", vm.qemu_version.clone()),
                ("qemu machine", vm.machine_type.clone()),
                (
                    "tcg translation cache bound",
                    match (vm.tcg_tb_size_mib, vm.accel.as_str()) {
                        (Some(m), _) => format!("{m} MiB"),
                        (None, "kvm") => "none: KVM runs the guest's code as it is".into(),
                        (None, _) => "none given (QEMU's default)".into(),
                    },
                ),
                ("cpu model", vm.cpu_model.clone()),
                (
                    "vm memory / cpus",
                    format!("{} MiB / {}", vm.memory_mib, vm.cpus),
                ),
                ("image", vm.image_name.clone()),
                ("image sha256", vm.image_sha256.clone()),
                ("image lock sha256", vm.image_lock_sha256.clone()),
                ("pinned kernel", vm.kernel_release_pinned.clone()),
                ("image builder", vm.image_builder_mode.clone()),
                ("gate binary sha256", vm.gate_binary_sha256.clone()),
                ("rig", format!("{} ({})", vm.rig_version, vm.rig_git_commit)),
                ("rig command", vm.command_line.join(" ")),
                (
                    "host",
                    format!("{} {} ({})", vm.host_os, vm.host_kernel, vm.host_hostname),
                ),
                ("vm started (UTC)", vm.started_at.clone()),
                ("vm finished (UTC)", vm.finished_at.clone()),
            ]);
            if let (Some(u), Some(t)) = (vm.guest_mem_used_mib, vm.guest_mem_total_mib) {
                rows.push(("guest memory used", format!("{u} of {t} MiB")));
            }
            if let Some(err) = &vm.rig_error {
                rows.push(("rig error", err.clone()));
            }
            if let Some(o) = &vm.kernel_oops {
                rows.push(("kernel oops", oops_words(o)));
            }
        }
        None => rows.push((
            "vm",
            "none: ran directly on this host, not via vm-run".into(),
        )),
    }
    rows
}

/// The density gate's figures as label/value rows shared by every format; None when the report
/// has no density gate. The guest records raw numbers only; the figures are computed here and
/// labelled with the accelerator the host recorded, since under TCG they say little about KVM.
pub fn density(r: &Report) -> Option<Vec<(String, String)>> {
    use sharedos_report::model::density::{median, p95, DensityData, MAX_COPIES};
    let g = r.gate(GateName::Density)?;
    let accel = match &r.vm {
        Some(vm) => vm.accel.clone(),
        None => "accelerator unknown: not run by vm-run".to_string(),
    };
    let mut rows = vec![
        ("density gate".to_string(), g.status.to_string()),
        ("accelerator".to_string(), accel.clone()),
    ];
    let d = match g
        .data
        .get("density")
        .map(|v| serde_json::from_value::<DensityData>(v.clone()))
    {
        Some(Ok(d)) if d.restore_ms.len() <= MAX_COPIES as usize + 1 => d,
        Some(Ok(d)) => {
            rows.push((
                "figures".into(),
                format!(
                    "refused: {} restores recorded, more than the cap of {MAX_COPIES} allows",
                    d.restore_ms.len()
                ),
            ));
            return Some(rows);
        }
        Some(Err(e)) => {
            rows.push(("figures".into(), format!("unreadable: {e}")));
            return Some(rows);
        }
        None => {
            rows.push(("figures".into(), "none recorded".into()));
            return Some(rows);
        }
    };
    const GIB_KIB: f64 = 1024.0 * 1024.0;
    let mib = |kib: u64| format!("{:.1} MiB", kib as f64 / 1024.0);
    let per_gib = |kib: u64| {
        if d.copies == 0 || kib == 0 {
            "n/a".to_string()
        } else {
            format!("{:.1}", f64::from(d.copies) * GIB_KIB / kib as f64)
        }
    };
    let grown = d
        .mem_used_with_copies_kib
        .saturating_sub(d.mem_used_before_kib);
    let n = u64::from(d.copies.max(1));
    rows.extend([
        ("copies requested".to_string(), d.requested.to_string()),
        (
            "copies up at once".to_string(),
            format!(
                "{} (stopped by {}: {})",
                d.copies,
                value_str(&serde_json::json!(d.stopped_by)),
                d.stop_detail
            ),
        ),
        (
            format!("copies per GiB [{accel}], by guest memory in use"),
            format!(
                "{} ({} more in use with the copies up)",
                per_gib(grown),
                mib(grown)
            ),
        ),
        (
            format!("copies per GiB [{accel}], by PSS"),
            format!(
                "{} ({} PSS over all copies)",
                per_gib(d.total.pss_kib),
                mib(d.total.pss_kib)
            ),
        ),
        (
            format!("restore ms per copy [{accel}]"),
            match (median(&d.restore_ms), p95(&d.restore_ms)) {
                (Some(m), Some(p)) => format!(
                    "median {m:.0}, p95 {p}, over {} restores",
                    d.restore_ms.len()
                ),
                _ => "n/a: no restore".into(),
            },
        ),
        (
            "memory per copy (mean)".to_string(),
            format!(
                "RSS {}, PSS {}, USS {}",
                mib(d.total.rss_kib / n),
                mib(d.total.pss_kib / n),
                mib(d.total.uss_kib / n)
            ),
        ),
        (
            "guest memory in use".to_string(),
            format!(
                "{} before, {} with the copies up, of {} (MemTotal){}",
                mib(d.mem_used_before_kib),
                mib(d.mem_used_with_copies_kib),
                mib(d.mem_total_kib),
                r.vm.as_ref()
                    .filter(|vm| vm.memory_mib > 0)
                    .map(|vm| format!("; QEMU -m {} MiB", vm.memory_mib))
                    .unwrap_or_default()
            ),
        ),
    ]);
    Some(rows)
}

/// A JSON value on one line, strings without their quotes.
pub fn value_str(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The report's directory as a command argument, for the hints a page prints.
pub fn dir_arg(o: &Outcome) -> String {
    o.dir
        .as_ref()
        .map(|d| d.display().to_string())
        .unwrap_or_else(|| "REPORT_DIR".to_string())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::judge::review::tests::{fresh_report, review_for};
    use sharedos_report::report::{Check, Phase, ReviewDecision, Status, VmProvenance};

    /// A report with every kind of content the renderers must carry, hostile text included.
    pub(crate) fn rich_report() -> Report {
        let mut r = fresh_report();
        r.gates[2].checks.push(Check {
            name: "token_is_32_hex".into(),
            passed: true,
            value: serde_json::json!("0123456789abcdef0123456789abcdef"),
            expected: "32 hex digits".into(),
        });
        r.gates[3].status = Status::Fail;
        r.gates[3].reason = "criu dump said <oops> & \"quit\" | 'x'".into();
        r.gates[3].duration_ms = 1500;
        r.gates[4].status = Status::NotRun;
        r.gates[4].reason = "dump did not pass".into();
        r.vm = Some(VmProvenance {
            accel: "tcg".into(),
            accel_reason: "/dev/kvm absent".into(),
            qemu_version: "QEMU emulator version 7.2.15".into(),
            image_sha256: "9".repeat(64),
            phases: vec![
                Phase {
                    name: "boot_to_ssh".into(),
                    duration_ms: 12_000,
                },
                Phase {
                    name: "gates".into(),
                    duration_ms: 300_500,
                },
            ],
            ..Default::default()
        });
        r.seal();
        r
    }

    /// rich_report whose failed dump quotes CRIU (hostile bytes in one line) and whose guest
    /// kernel oopsed without panicking.
    pub(crate) fn caused_report() -> Report {
        let mut r = rich_report();
        r.gates[3].cause = Some(sharedos_report::cause::Cause {
            source: "criu dump".into(),
            log: "criu/dump.log".into(),
            error: "(00.512401) Error (criu/namespaces.c:463): Can't dump nested ipc namespace for 1234".into(),
            before: vec![
                "(00.512301) Dumping pid 1234 namespaces".into(),
                "(00.512388) \u{1b}]0;owned\u{7}<script>x</script> | `y`".into(),
            ],
        });
        r.vm.as_mut().unwrap().kernel_oops = Some(sharedos_report::cause::KernelOops {
            first: "[  301.44] BUG: kernel NULL pointer dereference, address: 0000000000000008"
                .into(),
            rip: "[  301.45] RIP: 0010:mnt_ns_tree_add+0x3c/0x120".into(),
            panic: String::new(),
        });
        r
    }

    #[test]
    fn a_failed_gate_shows_its_cause_beside_its_status_escaped() {
        let r = caused_report();
        let short = "criu dump: Can't dump nested ipc namespace for 1234";
        assert_eq!(short_cause(&r.gates[3]).as_deref(), Some(short));
        let text = render_report(&r, None, Format::Text);
        assert!(text.contains(&format!("cause: {short}")), "{text}");
        assert!(
            text.contains("> (00.512401) Error (criu/namespaces.c:463)"),
            "{text}"
        );
        assert!(text.contains("kernel oops") && text.contains("no panic: the guest kept going"));
        let md = render_report(&r, None, Format::Md);
        assert!(md.contains("FAIL (criu dump: Can"), "{md}");
        let html = render_report(&r, None, Format::Html);
        assert!(
            html.contains("<span class=\"cause\">(criu dump: Can"),
            "{html}"
        );
        assert!(html.contains("RIP: 0010:mnt_ns_tree_add"), "{html}");
        for page in [&text, &md, &html] {
            assert!(!page.contains('\u{1b}') && !page.contains('\u{7}'));
        }
        for page in [&md, &html] {
            assert!(!page.contains("<script>"), "{page}");
        }
        // A passing gate shows no cause, whatever it carries.
        let mut passed = r.gates[3].clone();
        passed.status = Status::Pass;
        assert_eq!(short_cause(&passed), None);
        assert_eq!(cause_quote(&passed), None);
        // No cause quoted, none shown.
        let plain = render_report(&rich_report(), None, Format::Text);
        assert!(!plain.contains("cause:") && !plain.contains("kernel oops"));
    }

    #[test]
    fn every_control_format_and_separator_character_is_escaped_in_every_report_form() {
        use crate::escape::tests::{every_hidden, raw_hidden};
        let all: String = every_hidden().into_iter().collect();
        let hostile = |s: &str| format!("{s}<{all}>");
        let mut r = caused_report();
        r.gates[0].reason = hostile("reason");
        r.gates[3].reason = hostile("failed");
        r.gates[2].checks.push(Check {
            name: hostile("check"),
            passed: false,
            value: serde_json::json!(hostile("value")),
            expected: hostile("expected"),
        });
        if let Some(c) = r.gates[3].cause.as_mut() {
            c.error = hostile("error");
            c.before.push(hostile("before"));
        }
        r.fidelity_differences[0].detail = hostile("fidelity");
        if let Some(vm) = r.vm.as_mut() {
            vm.qemu_version = hostile("qemu");
            vm.host_os = hostile("os");
            vm.image_name = hostile("image");
            vm.command_line = vec![hostile("argv")];
            if let Some(o) = vm.kernel_oops.as_mut() {
                o.first = hostile("oops");
            }
        }
        r.seal();
        // Each form keeps only the line breaks (and, in a page's `<pre>`, the tabs) it writes.
        for (format, kept) in [
            (Format::Text, &['\n'][..]),
            (Format::Md, &['\n']),
            (Format::Html, &['\n', '\t']),
            (Format::Junit, &['\n']),
        ] {
            let page = render_report(&r, None, format);
            assert_eq!(raw_hidden(&page, kept), Vec::<char>::new(), "{format:?}");
        }
        let d = diff::diff(&fresh_report(), &r).to_string();
        assert!(d.contains("failed<"), "{d}");
        assert_eq!(raw_hidden(&d, &['\n']), Vec::<char>::new(), "diff");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(12), "12 ms");
        assert_eq!(duration(1500), "1.500 s");
        assert_eq!(duration(300_500), "5 min 0.5 s");
    }

    #[test]
    fn provenance_names_the_vm_when_present() {
        let r = rich_report();
        let rows = provenance(&r);
        assert!(rows
            .iter()
            .any(|(k, v)| *k == "accelerator" && v.starts_with("tcg")));
        let rows = provenance(&fresh_report());
        assert!(rows.iter().any(|(k, _)| *k == "vm"));
        assert!(rows.contains(&("options", "none".into())));
        let rows = provenance(&dense_report());
        assert!(rows.contains(&("options", "--copies max".into())));
    }

    #[test]
    fn every_format_is_deterministic() {
        let r = rich_report();
        let rv = review_for(&r, ReviewDecision::Pass);
        for f in [Format::Text, Format::Md, Format::Html, Format::Junit] {
            assert_eq!(
                render_report(&r, Some(&rv), f),
                render_report(&r, Some(&rv), f)
            );
        }
    }

    /// rich_report with a density gate of 4 copies: 64 MiB more in use, 32 MiB PSS in all.
    pub(crate) fn dense_report() -> Report {
        let mut r = rich_report();
        r.options.copies = Some(sharedos_report::report::Copies::Max);
        let mut g = sharedos_report::report::Gate::new(GateName::Density, Status::Pass, "4 copies");
        g.data.insert(
            "density".into(),
            serde_json::json!({
                "requested": "max", "copies": 4, "stopped_by": "memory_floor",
                "stop_detail": "4 copies up", "restore_ms": [3000, 3400, 2900, 5000],
                "restore_ms_median": 3200.0, "restore_ms_p95": 5000,
                "limits": {"cap": 64, "reserve_kib": 131072, "deadline": 480},
                "per_copy": [], "total": {"rss_kib": 65536, "pss_kib": 32768, "uss_kib": 16384},
                "mem_total_kib": 1000000, "mem_used_before_kib": 200000,
                "mem_used_with_copies_kib": 265536, "ended_before": ["b"]
            }),
        );
        r.insert_gate(g);
        r.vm.as_mut().unwrap().memory_mib = 1024;
        r.seal();
        r
    }

    #[test]
    fn density_figures_are_computed_and_labelled_with_the_accelerator() {
        let rows = density(&dense_report()).unwrap();
        let get = |k: &str| {
            rows.iter()
                .find(|(l, _)| l == k)
                .map(|(_, v)| v.clone())
                .unwrap_or_else(|| panic!("no {k} in {rows:?}"))
        };
        assert_eq!(
            get("copies per GiB [tcg], by guest memory in use"),
            "64.0 (64.0 MiB more in use with the copies up)"
        );
        assert_eq!(
            get("copies per GiB [tcg], by PSS"),
            "128.0 (32.0 MiB PSS over all copies)"
        );
        assert_eq!(
            get("restore ms per copy [tcg]"),
            "median 3200, p95 5000, over 4 restores"
        );
        assert!(get("copies up at once").starts_with("4 (stopped by memory_floor"));
        assert!(get("guest memory in use").ends_with("QEMU -m 1024 MiB"));
        for f in [Format::Text, Format::Md, Format::Html] {
            let page = render_report(&dense_report(), None, f);
            assert!(
                page.contains("Density") || page.contains("density:"),
                "{f:?}"
            );
            assert!(
                page.contains("restore ms per copy") && page.contains("tcg"),
                "{f:?}"
            );
        }
        let junit = render_report(&dense_report(), None, Format::Junit);
        assert!(
            junit.contains("tests=\"12\""),
            "ten, density and the integrity case: {junit}"
        );
        assert!(junit.contains("name=\"density\""), "{junit}");
        assert!(density(&rich_report()).is_none());
        assert!(!render_report(&rich_report(), None, Format::Text).contains("density:"));
    }

    #[test]
    fn density_figures_the_guest_garbled_are_named_not_rendered() {
        let mut r = dense_report();
        let g = r.gate_mut(GateName::Density).unwrap();
        g.data
            .insert("density".into(), serde_json::json!({"copies": "lots"}));
        let rows = density(&r).unwrap();
        assert!(
            rows.iter()
                .any(|(k, v)| k == "figures" && v.starts_with("unreadable")),
            "{rows:?}"
        );
        let mut d = dense_report().gate(GateName::Density).unwrap().data["density"].clone();
        d["restore_ms"] = serde_json::json!(vec![1; 500]);
        r.gate_mut(GateName::Density)
            .unwrap()
            .data
            .insert("density".into(), d);
        let rows = density(&r).unwrap();
        assert!(
            rows.iter()
                .any(|(k, v)| k == "figures" && v.starts_with("refused")),
            "{rows:?}"
        );
    }
}
