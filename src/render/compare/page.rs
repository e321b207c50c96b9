//! The comparison as one self-contained HTML page, with its two charts.

use super::chart;
use super::table::{accel_note, details, head, headline, heads, memory_sources, not_run, rows};
use super::text::meaning;
use super::{host, mib, ms, HOST_MARK};
use crate::judge::compare::read::{Judged, HOST_RECORDED};
use crate::judge::compare::Arm;
use std::fmt::Write;

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
table.side td:first-child{white-space:nowrap}
table.side td.words{white-space:normal;max-width:16em}
";

/// A cell longer than this is words (a reason, how resources were chosen), not a figure: it
/// wraps, so that a column of three arms still fits the page beside its labels.
const FIGURE_CHARS: usize = 24;

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
        crate::render::html::STYLE
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
        "<p>image <code>{}</code>, {}, under <code>{}</code> ({}).</p>",
        esc(&s.image),
        s.copies_said(),
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
    writeln!(out, "<h2>Side by side</h2>\n<table class=\"side\">")?;
    write!(out, "<tr><th></th>")?;
    for h in heads(s) {
        write!(out, "<th>{h}</th>")?;
    }
    writeln!(out, "</tr>")?;
    for r in rows(s) {
        write!(out, "<tr><td>{}</td>", r.what)?;
        for c in &r.cells {
            let class = if c.chars().count() > FIGURE_CHARS {
                "num words"
            } else {
                "num"
            };
            write!(out, "<td class=\"{class}\">{}</td>", esc(c))?;
        }
        writeln!(out, "</tr>")?;
    }
    writeln!(out, "</table>")?;
    if let Some(n) = not_run(s) {
        writeln!(out, "<p class=\"note\">{n}.</p>")?;
    }
    writeln!(
        out,
        "<p class=\"note\">{HOST_MARK} {}.</p>",
        esc(HOST_RECORDED)
    )?;
    let sources: Vec<String> = memory_sources(s)
        .into_iter()
        .map(|(who, said)| {
            if said.is_empty() {
                who.to_string()
            } else {
                format!("{who}: {}", esc(&said))
            }
        })
        .collect();
    writeln!(out, "<p class=\"note\">Memory: {}.</p>", sources.join("; "))?;
    for d in details(s) {
        writeln!(out, "<p class=\"note\">{}</p>", esc(&d))?;
    }
    writeln!(out, "<h2>Memory against the number of desktops</h2>")?;
    write_chart(out, chart::memory(s))?;
    writeln!(out, "<h2>Fork latency per copy</h2>")?;
    write_chart(out, chart::latency(s))?;
    writeln!(out, "<h2>Reports judged</h2>\n<ul>")?;
    if s.ran(Arm::Criu) {
        writeln!(
            out,
            "<li>shared-OS: <code>{}/</code></li>",
            esc(&s.shared_os.report)
        )?;
    }
    for (arm, vm) in s.vm_columns() {
        for c in vm.copies.iter().chain(&vm.reset) {
            writeln!(
                out,
                "<li>{}, {}: <code>{}/</code>{}</li>",
                head(arm),
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
            "<li>the {} fork's console: <code>{}/</code>, {} of state (sha256 <code>{}</code>), \
             saved in {}</li>",
            match arm {
                Arm::Vm => "VM",
                _ => head(arm),
            },
            esc(&vm.fork),
            host(mib(vm.state_bytes as f64 / 1024.0)),
            esc(&vm.state_sha256),
            host(ms(Some(vm.save_ms as f64)))
        )?;
    }
    writeln!(out, "</ul>")?;
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
