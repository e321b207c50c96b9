//! GitHub-flavoured Markdown, fit to paste into a pull request.

use super::{
    cause_quote, density, dir_arg, duration, provenance, short_cause, total_duration, value_str,
};
use crate::escape::markdown as esc;
use crate::judge::review::ReviewState;
use crate::judge::verdict::{verdict_meaning, Outcome};
use sharedos_report::report::{Report, Status, Verdict};
use std::fmt::Write;

pub fn render(o: &Outcome) -> String {
    let mut s = String::new();
    // fmt::Write into a String cannot fail.
    let _ = write_all(&mut s, o);
    s
}

fn icon(s: Status) -> &'static str {
    match s {
        Status::Pass => "✅",
        Status::Fail => "❌",
        Status::NotRun => "⏭️",
        Status::ReviewRequired => "👀",
    }
}

fn write_all(s: &mut String, o: &Outcome) -> std::fmt::Result {
    write_head(s, o)?;
    write_gates(s, o)?;
    write_where(s, &o.report)?;
    write_tail(s, &o.report)
}

/// The verdict, the review and what to do next, and the problems.
fn write_head(s: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(s, "# sharedos-rig report: {}\n", o.verdict)?;
    writeln!(
        s,
        "**Verdict: {}** (exit {}): {}.\n",
        o.verdict,
        o.exit_code,
        verdict_meaning(o)
    )?;
    writeln!(s, "**Review:** {}\n", esc(&o.review.describe()))?;
    if o.review == ReviewState::None && o.gates_verdict == Verdict::ReviewRequired {
        let d = dir_arg(o);
        writeln!(
            s,
            "To review: `sharedos-rig show {d} --format html > page.html`, look at every image, then \
             `sharedos-rig review {d} --decision pass|fail --reviewer NAME`.\n"
        )?;
    }
    let problems = o.problems();
    if !problems.is_empty() {
        writeln!(s, "## Problems\n")?;
        for p in &problems {
            writeln!(s, "- {}", esc(p))?;
        }
        writeln!(s)?;
    }
    Ok(())
}

/// The gate table and each gate's checks.
fn write_gates(s: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(s, "## Gates\n")?;
    writeln!(s, "| gate | status | duration | reason |")?;
    writeln!(s, "| --- | --- | ---: | --- |")?;
    for g in &o.gates {
        writeln!(
            s,
            "| `{}` | {} {}{} | {} | {} |",
            g.name,
            icon(g.status),
            g.status,
            short_cause(g)
                .map(|c| format!(" ({})", esc(&c)))
                .unwrap_or_default(),
            duration(g.duration_ms),
            esc(&g.reason)
        )?;
    }
    writeln!(s, "| **total** | | {} | |\n", total_duration(&o.gates))?;
    for g in &o.gates {
        if let Some((from, lines)) = cause_quote(g) {
            writeln!(
                s,
                "**Cause of `{}`**, quoted from {}:\n",
                g.name,
                esc(&from)
            )?;
            for l in lines {
                writeln!(s, "- {}", esc(&l))?;
            }
            writeln!(s)?;
        }
    }

    if o.gates.iter().any(|g| !g.checks.is_empty()) {
        writeln!(s, "## Checks\n")?;
        for g in o.gates.iter().filter(|g| !g.checks.is_empty()) {
            let failed = g.checks.iter().filter(|c| !c.passed).count();
            writeln!(
                s,
                "<details><summary><code>{}</code>: {} checks, {} failed</summary>\n",
                g.name,
                g.checks.len(),
                failed
            )?;
            writeln!(s, "| check | result | value | expected |")?;
            writeln!(s, "| --- | --- | --- | --- |")?;
            for c in &g.checks {
                writeln!(
                    s,
                    "| {} | {} | {} | {} |",
                    esc(&c.name),
                    if c.passed { "✅ ok" } else { "❌ failed" },
                    esc(&value_str(&c.value)),
                    esc(&c.expected)
                )?;
            }
            writeln!(s, "\n</details>\n")?;
        }
    }
    Ok(())
}

/// The density figures, when there are any, and where it ran.
fn write_where(s: &mut String, r: &Report) -> std::fmt::Result {
    if let Some(rows) = density(r) {
        writeln!(s, "## Density\n")?;
        writeln!(s, "| | |")?;
        writeln!(s, "| --- | --- |")?;
        for (k, v) in rows {
            writeln!(s, "| {} | {} |", esc(&k), esc(&v))?;
        }
        writeln!(s)?;
    }

    writeln!(s, "## Where it ran\n")?;
    writeln!(s, "| | |")?;
    writeln!(s, "| --- | --- |")?;
    for (k, v) in provenance(r) {
        writeln!(s, "| {} | {} |", esc(k), esc(&v))?;
    }
    writeln!(s)?;
    Ok(())
}

/// Phase timings, the images' hashes and the fidelity differences.
fn write_tail(s: &mut String, r: &Report) -> std::fmt::Result {
    if let Some(vm) = &r.vm {
        writeln!(s, "## Phase timings\n")?;
        writeln!(s, "| phase | duration |")?;
        writeln!(s, "| --- | ---: |")?;
        for p in &vm.phases {
            writeln!(s, "| {} | {} |", esc(&p.name), duration(p.duration_ms))?;
        }
        writeln!(s)?;
    }

    let pngs: Vec<_> = r.png_artifacts().collect();
    if !pngs.is_empty() {
        writeln!(s, "## Images\n")?;
        writeln!(s, "| image | sha256 |")?;
        writeln!(s, "| --- | --- |")?;
        for a in pngs {
            writeln!(s, "| {} | `{}` |", esc(&a.path), esc(&a.sha256))?;
        }
        writeln!(s)?;
    }

    if !r.fidelity_differences.is_empty() {
        writeln!(s, "## Fidelity differences\n")?;
        for f in &r.fidelity_differences {
            writeln!(s, "- `{}`: {}", f.key, esc(&f.to_string()))?;
        }
        writeln!(s)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::verdict::evaluate_report;
    use crate::render::tests::rich_report;

    #[test]
    fn page_has_gates_checks_provenance_and_phases() {
        let m = render(&evaluate_report(&rich_report(), None));
        assert!(m.starts_with("# sharedos-rig report: FAIL"));
        assert!(m.contains("| `dump` | ❌ FAIL | 1.500 s | criu dump said &lt;oops&gt; &amp; \"quit\" \\| 'x' |"), "{m}");
        assert!(m.contains("token\\_is\\_32\\_hex"));
        assert!(m.contains("## Where it ran"));
        assert!(m.contains("| boot\\_to\\_ssh | 12.000 s |"), "{m}");
        assert!(m.contains(&format!("`{}`", "a".repeat(64))));
        // Every gate row has exactly five unescaped pipes.
        for line in m.lines().filter(|l| l.starts_with("| `")) {
            let pipes = line.matches('|').count() - line.matches("\\|").count();
            assert_eq!(pipes, 5, "{line}");
        }
    }
}
