//! The comparison in plain text (vm-compare's ending, `show`) and in Markdown: a column per arm
//! run, a ratio against the CRIU column per VM column.

use super::table::{accel_note, details, headline, heads, memory_sources, not_run, rows};
use super::HOST_MARK;
use crate::escape;
use crate::judge::compare::read::{Judged, HOST_RECORDED};
use crate::judge::compare::Summary;
use sharedos_report::report::Verdict;
use std::fmt::Write;

/// The side-by-side table in plain text, as vm-compare prints it as it ends. The problems and
/// descriptions came partly from guests and compare.json: one line each, escaped.
pub fn text(s: &Summary) -> String {
    let mut table: Vec<Vec<String>> =
        vec![std::iter::once(String::new()).chain(heads(s)).collect()];
    table.extend(rows(s).into_iter().map(|r| {
        std::iter::once(r.what.to_string())
            .chain(r.cells.iter().map(|c| escape::line(c)))
            .collect()
    }));
    let mut out = format!(
        "vm-compare {}: {}, under {} ({})\n",
        escape::line(&s.image),
        s.copies_said(),
        escape::line(&s.accel),
        accel_note(s)
    );
    let columns = table.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            table
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    for r in &table {
        let mut line = String::from(" ");
        for (i, (c, w)) in r.iter().zip(&widths).enumerate() {
            // The last column is not padded: a line ends with its last figure.
            let w = if i + 1 == columns { 0 } else { *w };
            let _ = write!(line, " {c:w$} ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
    if let Some(n) = not_run(s) {
        let _ = writeln!(out, "  {n}");
    }
    let _ = writeln!(out, "  {}", headline(s));
    let _ = writeln!(out, "  {HOST_MARK} {HOST_RECORDED}");
    let sources: Vec<String> = memory_sources(s)
        .into_iter()
        .map(|(who, said)| source(who, &escape::line(&said)))
        .collect();
    let _ = writeln!(out, "  memory: {}", sources.join("; "));
    for d in details(s) {
        let _ = writeln!(out, "  {}", escape::line(&d));
    }
    let _ = writeln!(out, "verdict: {}", s.verdict);
    for p in &s.problems {
        let _ = writeln!(out, "  problem: {}", escape::line(p));
    }
    out
}

/// One column's source of its memory figures, its words already escaped.
fn source(who: &str, said: &str) -> String {
    if said.is_empty() {
        who.to_string()
    } else {
        format!("{who}: {said}")
    }
}

pub(super) fn meaning(v: Verdict) -> &'static str {
    match v {
        Verdict::Pass => "every arm run holds, every copy of each checked",
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
        "**vm-compare {}: {}** (exit {}: {}): {}, under {} ({}).\n\n{}.\n\n",
        escape::markdown(&s.image),
        s.verdict,
        j.exit_code(),
        meaning(s.verdict),
        s.copies_said(),
        escape::markdown(&s.accel),
        accel_note(s),
        escape::markdown(&headline(s))
    );
    let heads = heads(s);
    let _ = writeln!(out, "| | {} |", heads.join(" | "));
    let _ = writeln!(out, "|---|{}", "---|".repeat(heads.len()));
    for r in rows(s) {
        let cells: Vec<String> = r.cells.iter().map(|c| escape::markdown(c)).collect();
        let _ = writeln!(out, "| {} | {} |", r.what, cells.join(" | "));
    }
    if let Some(n) = not_run(s) {
        let _ = writeln!(out, "\n{n}.");
    }
    let sources: Vec<String> = memory_sources(s)
        .into_iter()
        .map(|(who, said)| source(who, &escape::markdown(&said)))
        .collect();
    let _ = writeln!(
        out,
        "\n{} {}.\n\nMemory: {}.",
        escape::markdown(HOST_MARK),
        escape::markdown(HOST_RECORDED),
        sources.join("; ")
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
