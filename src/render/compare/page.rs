//! The comparison as one self-contained HTML page, with its two charts.

use super::chart;
use super::table::{accel_note, details, headline, rows, SO_HEAD, VM_HEAD};
use super::text::meaning;
use super::{host, mib, ms, HOST_MARK};
use crate::judge::compare::read::{Judged, HOST_RECORDED};
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
