//! Two comparisons figure by figure.

use super::table::Figures;
use super::{host, mib, ms, HOST_MARK};
use crate::escape;
use crate::judge::compare::read::{Judged, HOST_RECORDED};
use sharedos_report::model::density::median;
use std::fmt::Write;

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
