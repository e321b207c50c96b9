//! The migration rows as a reader gets them: plain text, Markdown, HTML and JUnit, guest text
//! escaped in each.

use super::super::render::{aligned, html_end, html_headings, md_notes, md_row, md_rows, or_dash};
use super::{Pair, PairOutcome, Pairs};
use crate::escape::{html as html_esc, line as one_line, xml as xml_esc};
use sharedos_report::report::{Verdict, RIG_FAILURE_EXIT};
use std::fmt::Write;

fn meaning(code: i32) -> &'static str {
    match code {
        0 => "every checkpoint was restored and held in the other guest",
        1 => "a migration failed",
        _ => "the rig failed for a migration",
    }
}

fn headings() -> Vec<String> {
    [
        "from",
        "kernel",
        "criu",
        "to",
        "kernel",
        "criu",
        "verdict",
        "cause",
        "migration",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// A row's cells, each escaped for one terminal line, in column order.
fn row(p: &Pair) -> Vec<String> {
    vec![
        or_dash(&p.from.image),
        or_dash(&p.from.kernel),
        or_dash(&p.from.criu),
        or_dash(&p.to.image),
        or_dash(&p.to.kernel),
        or_dash(&p.to.criu),
        p.word().to_string(),
        or_dash(&p.cause),
        or_dash(&p.label),
    ]
}

/// Notes under the table, one escaped line each.
fn notes(m: &Pairs) -> Vec<String> {
    let mut out = Vec::new();
    for p in &m.pairs {
        let label = one_line(&p.label);
        if let PairOutcome::RigFailed(why) = &p.outcome {
            out.push(format!("{label}: {}", one_line(why)));
        }
        for n in &p.notes {
            out.push(format!("{label}: {}", one_line(n)));
        }
    }
    out
}

pub fn text(m: &Pairs) -> String {
    let mut rows = vec![headings()];
    rows.extend(m.pairs.iter().map(row));
    let mut s = format!(
        "pairs: {} migration(s), exit {}: {}\n",
        m.pairs.len(),
        m.exit_code,
        meaning(m.exit_code)
    );
    s.push_str(&aligned(&rows, &notes(m)));
    s
}

pub fn md(m: &Pairs) -> String {
    let mut s = format!(
        "**Migrations: exit {}** ({}), {} pair(s).\n\n",
        m.exit_code,
        meaning(m.exit_code),
        m.pairs.len()
    );
    let h = headings();
    s.push_str(&md_row(&h));
    s.push_str(&md_row(&vec!["---"; h.len()]));
    s.push_str(&md_rows(m.pairs.iter().map(row)));
    s.push_str(&md_notes(&notes(m)));
    s
}

fn colour(p: &Pair) -> &'static str {
    match &p.outcome {
        PairOutcome::Judged(Verdict::Pass) => "#1a7f37",
        _ => "#cf222e",
    }
}

pub fn html(m: &Pairs) -> String {
    let mut s = format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>sharedos-rig migrations</title>\
         <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:3px 6px}}</style>\
         </head><body>\n<h1>sharedos-rig migrations: exit {}</h1>\n<p>{}; {} pair(s).</p>\n\
         <table>\n<tr>",
        m.exit_code,
        html_esc(meaning(m.exit_code)),
        m.pairs.len()
    );
    s.push_str(&html_headings(&headings()));
    s.push_str("</tr>\n");
    for p in &m.pairs {
        s.push_str("<tr>");
        for (i, x) in row(p).iter().enumerate() {
            let style = if i == 6 {
                format!(" style=\"color:{};font-weight:bold\"", colour(p))
            } else {
                String::new()
            };
            let _ = write!(s, "<td{style}>{}</td>", html_esc(x));
        }
        s.push_str("</tr>\n");
    }
    s.push_str(&html_end(&notes(m)));
    s
}

/// One test suite, one test case per migration: FAIL a failure, a rig failure an error, each
/// with the row's cause.
pub fn junit(m: &Pairs) -> String {
    let failures = m.pairs.iter().filter(|p| p.exit_code() == 1).count();
    let errors = m
        .pairs
        .iter()
        .filter(|p| p.exit_code() == RIG_FAILURE_EXIT)
        .count();
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        s,
        "<testsuites name=\"sharedos-rig-migrations\">\n  <testsuite name=\"migrations\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">",
        m.pairs.len()
    );
    for p in &m.pairs {
        let name = xml_esc(&format!(
            "{} ({}, criu {}) -> {} ({}, criu {}) [{}]",
            p.from.image, p.from.kernel, p.from.criu, p.to.image, p.to.kernel, p.to.criu, p.label
        ));
        let _ = write!(s, "    <testcase classname=\"migrations\" name=\"{name}\"");
        let body = xml_esc(&p.notes.join("\n"));
        let _ = match (&p.outcome, xml_esc(&p.cause)) {
            (PairOutcome::Judged(Verdict::Pass), _) => writeln!(s, "/>"),
            (PairOutcome::RigFailed(_), cause) => writeln!(
                s,
                "><error message=\"rig failure: {cause}\">{body}</error></testcase>"
            ),
            (PairOutcome::Judged(v), cause) => writeln!(
                s,
                "><failure message=\"{v}: {cause}\">{body}</failure></testcase>"
            ),
        };
    }
    s.push_str("  </testsuite>\n</testsuites>\n");
    s
}
