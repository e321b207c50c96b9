//! Turning a judged report into text for a terminal, Markdown for a pull request, one
//! self-contained HTML page, or JUnit XML for CI. Every format is a pure function of the
//! `Outcome` (html also reads the PNGs it embeds), with no clock and no randomness, so the same
//! report renders to the same bytes.

use crate::report::{Report, Review};
use crate::verify::{self, Outcome};

pub mod html;
pub mod junit;
pub mod md;
pub mod pixels;
pub mod text;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Text,
    Md,
    Html,
    Junit,
}

/// Renders a judged report (from `verify::verify_dir` or `verify::load_dir`).
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
    render(&verify::evaluate_report(report, review), format)
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
    ];
    match &r.vm {
        Some(vm) => {
            rows.extend([
                ("accelerator", format!("{} ({})", vm.accel, vm.accel_reason)),
                ("qemu version", vm.qemu_version.clone()),
                ("qemu machine", vm.machine_type.clone()),
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
        }
        None => rows.push((
            "vm",
            "none: ran directly on this host, not via vm-run".into(),
        )),
    }
    rows
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
    use crate::report::{Check, Phase, ReviewDecision, Status, VmProvenance};
    use crate::review::tests::{fresh_report, review_for};

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
}
