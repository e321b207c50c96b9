//! Two comparisons figure by figure.

use super::table::Figures;
use super::{host, mib, ms, HOST_MARK};
use crate::escape;
use crate::judge::compare::read::{Judged, HOST_RECORDED};
use crate::judge::compare::{Arm, Summary};
use sharedos_report::model::density::median;
use std::fmt::Write;

/// One figure of a diff: what, A's and B's values, how each is shown, and whether it is the
/// host's (its values and their change are then marked).
type Figure = (
    String,
    Option<f64>,
    Option<f64>,
    fn(Option<f64>) -> String,
    bool,
);

/// A figure of one column, before its column's name is put to it.
type Measure = (
    &'static str,
    Option<f64>,
    Option<f64>,
    fn(Option<f64>) -> String,
);

fn kib(v: Option<f64>) -> String {
    v.map_or("n/a".into(), mib)
}

/// The figures of the arms either side ran, A's beside B's: an arm one side did not run is
/// n/a on that side.
fn figures(sa: &Summary, sb: &Summary) -> Vec<Figure> {
    let (fa, fb) = (Figures::of(sa), Figures::of(sb));
    let mut v: Vec<Figure> = Vec::new();
    if sa.ran(Arm::Criu) || sb.ran(Arm::Criu) {
        let so: [Measure; 6] = [
            ("fork: median", fa.so_med, fb.so_med, ms),
            ("fork: p95", fa.so_p95, fb.so_p95, ms),
            ("reset: median", fa.so_reset_med, fb.so_reset_med, ms),
            ("reset: p95", fa.so_reset_p95, fb.so_reset_p95, ms),
            (
                "PSS per desktop",
                median(&fa.so_pss),
                median(&fb.so_pss),
                kib,
            ),
            (
                "USS per desktop",
                median(&fa.so_uss),
                median(&fb.so_uss),
                kib,
            ),
        ];
        v.extend(
            so.into_iter()
                .map(|(what, x, y, unit)| (format!("shared-OS {what}"), x, y, unit, false)),
        );
    }
    for arm in [Arm::Vm, Arm::VmTemplate] {
        let (va, vb) = (fa.vm(arm), fb.vm(arm));
        if va.is_none() && vb.is_none() {
            continue;
        }
        let column = |s: &Summary| {
            s.vm_columns()
                .into_iter()
                .find(|(a, _)| *a == arm)
                .map(|(_, c)| (c.state_bytes as f64 / 1024.0, c.save_ms as f64))
        };
        let (ca, cb) = (column(sa), column(sb));
        let mut each: Vec<Measure> = vec![
            (
                "fork: median",
                va.and_then(|f| f.med),
                vb.and_then(|f| f.med),
                ms,
            ),
            (
                "fork: p95",
                va.and_then(|f| f.p95),
                vb.and_then(|f| f.p95),
                ms,
            ),
            (
                "reset",
                va.and_then(|f| f.reset_med),
                vb.and_then(|f| f.reset_med),
                ms,
            ),
            (
                "PSS per desktop",
                va.and_then(|f| median(&f.pss)),
                vb.and_then(|f| median(&f.pss)),
                kib,
            ),
            (
                "USS per desktop",
                va.and_then(|f| median(&f.uss)),
                vb.and_then(|f| median(&f.uss)),
                kib,
            ),
            (
                "idle guest PSS",
                va.and_then(|f| f.idle_pss),
                vb.and_then(|f| f.idle_pss),
                kib,
            ),
            (
                "PSS beyond idle",
                va.and_then(|f| f.beyond),
                vb.and_then(|f| f.beyond),
                kib,
            ),
            ("fork state", ca.map(|c| c.0), cb.map(|c| c.0), kib),
            ("fork save", ca.map(|c| c.1), cb.map(|c| c.1), ms),
        ];
        if arm == Arm::VmTemplate {
            each.push((
                "template RAM resident",
                va.and_then(|f| f.template_kib),
                vb.and_then(|f| f.template_kib),
                kib,
            ));
            each.push((
                "host memory per desktop, template included",
                va.and_then(|f| f.host_per_desktop),
                vb.and_then(|f| f.host_per_desktop),
                kib,
            ));
        }
        v.extend(
            each.into_iter()
                .map(|(what, x, y, unit)| (format!("{} {what}", arm.column()), x, y, unit, true)),
        );
    }
    v
}

/// The arms a comparison ran, as `--arms` spells them.
fn arms(s: &Summary) -> String {
    let a: Vec<&str> = s.arms.iter().map(|a| a.as_str()).collect();
    a.join(",")
}

pub fn diff(a: &Judged, b: &Judged, a_label: &str, b_label: &str) -> String {
    let (sa, sb) = (&a.summary, &b.summary);
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
        ("copies", sa.copies_said(), sb.copies_said()),
        ("arms", arms(sa), arms(sb)),
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
    for (what, x, y, unit, is_host) in figures(sa, sb) {
        let change = match (x, y) {
            (Some(x), Some(y)) if x == y => "same".into(),
            (Some(x), Some(y)) if x > 0.0 => format!("{:+.1}%", (y - x) / x * 100.0),
            (None, None) => "same".into(),
            _ => "differs".into(),
        };
        let cells = [unit(x), unit(y), change];
        let [x, y, change] = if is_host { cells.map(host) } else { cells };
        rows.push([what, x, y, change]);
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
