//! Plain text for a terminal.

use super::{
    cause_quote, density, dir_arg, duration, provenance, short_cause, total_duration, value_str,
};
use crate::escape::line as one_line;
use crate::judge::review::ReviewState;
use crate::judge::verdict::{verdict_meaning, Outcome};
use sharedos_report::report::{Report, Status, Verdict};
use std::fmt::Write;

pub fn render(o: &Outcome) -> String {
    let mut s = String::new();
    // fmt::Write into a String cannot fail; the results are ignored for that reason only.
    let _ = write_all(&mut s, o);
    s
}

fn write_all(s: &mut String, o: &Outcome) -> std::fmt::Result {
    write_head(s, o)?;
    write_gates(s, o)?;
    write_density(s, &o.report)?;
    write_where(s, &o.report)?;
    write_tail(s, &o.report)
}

/// The verdict, the review and what to do next, and the problems.
fn write_head(s: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(
        s,
        "verdict: {} (exit {}): {}",
        o.verdict,
        o.exit_code,
        verdict_meaning(o)
    )?;
    if let Some(d) = &o.dir {
        writeln!(s, "report:  {}", one_line(&d.display().to_string()))?;
    }
    writeln!(s, "review:  {}", one_line(&o.review.describe()))?;
    if o.review == ReviewState::None && o.gates_verdict == Verdict::ReviewRequired {
        let d = dir_arg(o);
        writeln!(
            s,
            "         look: sharedos-rig show {d} --format html > page.html\n         \
             then: sharedos-rig review {d} --decision pass|fail --reviewer NAME"
        )?;
    }
    let problems = o.problems();
    if !problems.is_empty() {
        writeln!(s, "\nproblems:")?;
        for p in &problems {
            writeln!(s, "  - {}", one_line(p))?;
        }
    }
    Ok(())
}

/// Each gate with its duration and reason, the checks that did not pass, and the total.
fn write_gates(s: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(s, "\ngates:")?;
    let width = o
        .gates
        .iter()
        .map(|g| g.name.as_str().len())
        .max()
        .unwrap_or(0);
    for g in &o.gates {
        writeln!(
            s,
            "  {:<15} {:<width$}  {:>12}  {}",
            g.status.as_str(),
            g.name.as_str(),
            duration(g.duration_ms),
            one_line(&g.reason),
        )?;
        if let (Some(short), Some((from, lines))) = (short_cause(g), cause_quote(g)) {
            writeln!(
                s,
                "  {:<15} {:<width$}    cause: {}",
                "",
                "",
                one_line(&short)
            )?;
            writeln!(
                s,
                "  {:<15} {:<width$}      from {}:",
                "",
                "",
                one_line(&from)
            )?;
            for l in lines {
                writeln!(s, "  {:<15} {:<width$}      {}", "", "", one_line(&l))?;
            }
        }
        for c in &g.checks {
            // PASS gates list only their failed checks: the evidence is in the other formats.
            if g.status == Status::Pass && c.passed {
                continue;
            }
            writeln!(
                s,
                "  {:<15} {:<width$}    [{}] {} = {}{}",
                "",
                "",
                if c.passed { "ok" } else { "FAILED" },
                one_line(&c.name),
                one_line(&value_str(&c.value)),
                if c.expected.is_empty() {
                    String::new()
                } else {
                    format!(" (expected {})", one_line(&c.expected))
                }
            )?;
        }
    }
    writeln!(
        s,
        "  {:<15} {:<width$}  {:>12}",
        "",
        "total",
        total_duration(&o.gates)
    )?;
    Ok(())
}

fn write_density(s: &mut String, r: &Report) -> std::fmt::Result {
    if let Some(rows) = density(r) {
        writeln!(s, "\ndensity:")?;
        let kw = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
        for (k, v) in rows {
            writeln!(s, "  {:<kw$}  {}", one_line(&k), one_line(&v))?;
        }
    }
    Ok(())
}

fn write_where(s: &mut String, r: &Report) -> std::fmt::Result {
    writeln!(s, "\nwhere it ran:")?;
    let rows = provenance(r);
    let kw = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    for (k, v) in rows {
        writeln!(s, "  {k:<kw$}  {}", one_line(&v))?;
    }
    Ok(())
}

/// Phase timings, fidelity differences and the images' hashes.
fn write_tail(s: &mut String, r: &Report) -> std::fmt::Result {
    if let Some(vm) = &r.vm {
        writeln!(s, "\nphase timings:")?;
        let pw = vm.phases.iter().map(|p| p.name.len()).max().unwrap_or(0);
        for p in &vm.phases {
            writeln!(
                s,
                "  {:<pw$}  {:>12}",
                one_line(&p.name),
                duration(p.duration_ms)
            )?;
        }
    }

    if !r.fidelity_differences.is_empty() {
        writeln!(s, "\nfidelity differences:")?;
        for f in &r.fidelity_differences {
            writeln!(s, "  - {}: {}", f.key, one_line(&f.to_string()))?;
        }
    }

    let pngs: Vec<_> = r.png_artifacts().collect();
    if !pngs.is_empty() {
        writeln!(s, "\nimages:")?;
        for a in pngs {
            writeln!(s, "  {}  sha256 {}", one_line(&a.path), one_line(&a.sha256))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::review::tests::{fresh_report, review_for};
    use crate::judge::verdict::evaluate_report;
    use crate::render::tests::rich_report;
    use sharedos_report::report::ReviewDecision;

    #[test]
    fn shows_verdict_gates_provenance_and_timings() {
        let r = rich_report();
        let t = render(&evaluate_report(&r, None));
        assert!(t.starts_with("verdict: FAIL (exit 1)"), "{t}");
        assert!(t.contains("FAIL            dump"), "{t}");
        assert!(t.contains("NOT_RUN         restore_live_process"), "{t}");
        assert!(t.contains("1.500 s"), "{t}");
        assert!(t.contains("6.1.0-28-amd64"));
        assert!(t.contains("b00t"));
        assert!(t.contains("2026-11-30T20:15:00.000Z"));
        assert!(t.contains("tcg (/dev/kvm absent)"));
        assert!(t.contains("QEMU emulator version 7.2.15"));
        assert!(t.contains(&"9".repeat(64)));
        assert!(t.contains("boot_to_ssh"));
        assert!(t.contains("5 min 0.5 s"));
    }

    #[test]
    fn takes_the_review_into_account() {
        let r = fresh_report();
        let t = render(&evaluate_report(&r, None));
        assert!(t.starts_with("verdict: REVIEW_REQUIRED (exit 3)"), "{t}");
        assert!(t.contains("sharedos-rig review REPORT_DIR"), "{t}");
        let rv = review_for(&r, ReviewDecision::Pass);
        let t = render(&evaluate_report(&r, Some(&rv)));
        assert!(t.starts_with("verdict: PASS (exit 0)"), "{t}");
        assert!(t.contains("reviewed by alice"), "{t}");
    }

    #[test]
    fn guest_text_cannot_drive_the_terminal_or_fake_a_line() {
        let mut r = fresh_report();
        r.gates[0].status = Status::Fail;
        r.gates[0].reason =
            "\u{1b}[2J\u{1b}]0;title\u{7}ok\rverdict: PASS (exit 0)\u{202e}x".into();
        r.gates[0].checks.push(sharedos_report::report::Check {
            name: "n\u{1b}[31m".into(),
            passed: false,
            value: serde_json::json!("v\u{9b}1m"),
            expected: "e\nverdict: PASS".into(),
        });
        r.fidelity_differences[0].detail = "f\u{1b}[0m".into();
        r.seal();
        let t = render(&evaluate_report(&r, None));
        assert!(
            !t.chars().any(|c| c.is_control() && c != '\n'),
            "a control character reached the terminal: {t:?}"
        );
        assert!(!t.contains('\u{202e}'));
        assert!(
            t.contains("\\u{1b}[2J\\u{1b}]0;title\\u{7}ok verdict: PASS (exit 0)\\u{202e}x"),
            "{t}"
        );
        assert!(
            t.contains("n\\u{1b}[31m = v\\u{9b}1m (expected e verdict: PASS)"),
            "{t}"
        );
        assert_eq!(
            t.lines().filter(|l| l.starts_with("verdict:")).count(),
            1,
            "{t}"
        );
    }

    #[test]
    fn multi_line_reasons_stay_on_one_line() {
        let mut r = fresh_report();
        r.gates[0].reason = "a\nb".into();
        let t = render(&evaluate_report(&r, None));
        assert!(t.contains("a b"));
    }
}
