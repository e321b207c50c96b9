//! The comparison in plain text (vm-compare's ending, `show`) and in Markdown.

use super::table::{accel_note, details, headline, rows, SO_HEAD, VM_HEAD};
use super::HOST_MARK;
use crate::escape;
use crate::judge::compare::read::{Judged, HOST_RECORDED};
use crate::judge::compare::Summary;
use sharedos_report::report::Verdict;
use std::fmt::Write;

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

pub(super) fn meaning(v: Verdict) -> &'static str {
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
