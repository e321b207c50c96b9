//! JUnit XML for CI: one testcase per gate, always ten (eleven with `--copies`, whose
//! density gate is one), in run order.
//!
//! FAIL is a <failure>, NOT_RUN and REVIEW_REQUIRED are <skipped>. When the report itself cannot
//! be trusted (an artifact hash mismatch, a rejected review, a report.json that contradicts its
//! gates) one more testcase, `report_integrity`, carries an <error>, so CI does not show such a
//! report as green or merely skipped.

use crate::escape::xml as esc;
use crate::judge::verdict::Outcome;
use sharedos_report::report::{Gate, GateName, Status};
use std::fmt::Write;

pub const SUITE: &str = "sharedos-rig";

pub fn render(o: &Outcome) -> String {
    let mut s = String::new();
    // fmt::Write into a String cannot fail.
    let _ = write_all(&mut s, o);
    s
}

fn seconds(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

fn write_all(s: &mut String, o: &Outcome) -> std::fmt::Result {
    // A gate named more than once is a failure of its own: taking either copy would let a
    // forged PASS hide a FAIL.
    let count = |n: GateName| o.gates.iter().filter(|g| g.name == n).count();
    // The cases are the gates the report's options call for: density only with `--copies`.
    let cases: Vec<(GateName, Option<&Gate>)> = o
        .report
        .options
        .gates()
        .iter()
        .map(|n| (*n, o.gates.iter().find(|g| g.name == *n)))
        .collect();
    let problems = o.problems();
    let failures = cases
        .iter()
        .filter(|(n, g)| count(*n) > 1 || !matches!(g, Some(g) if g.status != Status::Fail))
        .count();
    let skipped = cases
        .iter()
        .filter(|(_, g)| {
            g.is_some_and(|g| matches!(g.status, Status::NotRun | Status::ReviewRequired))
        })
        .count();
    let errors = usize::from(!problems.is_empty());
    // A total the guest's durations overflow is shown as the most a u64 holds: JUnit's time
    // is a number, and the report's verify names the problem.
    let total_ms = crate::judge::consistency::total_ms(&o.gates).unwrap_or(u64::MAX);

    writeln!(s, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>")?;
    writeln!(
        s,
        "<testsuites name=\"{SUITE}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{}\">",
        cases.len() + errors,
        seconds(total_ms)
    )?;
    writeln!(
        s,
        "  <testsuite name=\"{SUITE}\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\" time=\"{}\" timestamp=\"{}\" hostname=\"{}\">",
        cases.len() + errors,
        seconds(total_ms),
        esc(o.report.environment.started_at.trim_end_matches('Z')),
        esc(&o.report.environment.hostname)
    )?;
    writeln!(s, "    <properties>")?;
    writeln!(
        s,
        "      <property name=\"verdict\" value=\"{}\"/>",
        o.verdict
    )?;
    writeln!(
        s,
        "      <property name=\"exit_code\" value=\"{}\"/>",
        o.exit_code
    )?;
    writeln!(
        s,
        "      <property name=\"review\" value=\"{}\"/>",
        esc(&o.review.describe())
    )?;
    for (k, v) in super::provenance(&o.report) {
        writeln!(
            s,
            "      <property name=\"{}\" value=\"{}\"/>",
            esc(k),
            esc(&v)
        )?;
    }
    writeln!(s, "    </properties>")?;

    for (name, gate) in &cases {
        let ms = gate.map_or(0, |g| g.duration_ms);
        write!(
            s,
            "    <testcase classname=\"{SUITE}\" name=\"{name}\" time=\"{}\"",
            seconds(ms)
        )?;
        let Some(g) = gate else {
            writeln!(
                s,
                ">\n      <failure message=\"gate missing from report.json\" type=\"MISSING\"/>\n    </testcase>"
            )?;
            continue;
        };
        let copies = count(*name);
        if copies > 1 {
            writeln!(
                s,
                ">\n      <failure message=\"gate appears {copies} times in report.json\" type=\"DUPLICATE\"/>\n    </testcase>"
            )?;
            continue;
        }
        let element = match g.status {
            Status::Pass => None,
            Status::Fail => Some("failure"),
            Status::NotRun | Status::ReviewRequired => Some("skipped"),
        };
        let details = gate_details(g);
        match element {
            None if details.is_empty() => writeln!(s, "/>")?,
            None => writeln!(
                s,
                ">\n      <system-out>{}</system-out>\n    </testcase>",
                esc(&details)
            )?,
            Some(el) => {
                writeln!(
                    s,
                    ">\n      <{el} message=\"{}\" type=\"{}\">{}</{el}>\n    </testcase>",
                    esc(&g.reason),
                    g.status,
                    esc(&details)
                )?;
            }
        }
    }
    if !problems.is_empty() {
        writeln!(
            s,
            "    <testcase classname=\"{SUITE}\" name=\"report_integrity\" time=\"0.000\">\n      <error message=\"{}\" type=\"INTEGRITY\">{}</error>\n    </testcase>",
            esc(&problems[0]),
            esc(&problems.join("\n"))
        )?;
    }
    writeln!(s, "  </testsuite>\n</testsuites>")?;
    Ok(())
}

fn gate_details(g: &Gate) -> String {
    let mut out = String::new();
    for c in &g.checks {
        let _ = writeln!(
            out,
            "[{}] {} = {}{}",
            if c.passed { "ok" } else { "FAILED" },
            c.name,
            super::value_str(&c.value),
            if c.expected.is_empty() {
                String::new()
            } else {
                format!(" (expected {})", c.expected)
            }
        );
    }
    if let Some((from, lines)) = super::cause_quote(g) {
        let _ = writeln!(out, "cause, quoted from {from}:");
        for l in lines {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::review::tests::{fresh_report, review_for};
    use crate::judge::verdict::evaluate_report;
    use crate::render::tests::rich_report;
    use sharedos_report::report::{ReviewDecision, Status};

    #[test]
    fn one_testcase_per_gate_with_the_right_element() {
        let r = rich_report();
        let x = render(&evaluate_report(&r, None));
        assert_eq!(x.matches("<testcase ").count(), 10, "{x}");
        assert_eq!(x.matches("<failure ").count(), 1);
        // restore_live_process NOT_RUN + gui_pixel_review REVIEW_REQUIRED
        assert_eq!(x.matches("<skipped ").count(), 2);
        assert!(x.contains(
            "<failure message=\"criu dump said &lt;oops&gt; &amp; &quot;quit&quot; | &apos;x&apos;\" type=\"FAIL\">"
        ));
        assert!(x.contains("failures=\"1\" errors=\"0\" skipped=\"2\""));
        assert!(x.contains("name=\"dump\" time=\"1.500\""));
    }

    #[test]
    fn reviewed_report_has_no_skips() {
        let r = fresh_report();
        let rv = review_for(&r, ReviewDecision::Pass);
        let x = render(&evaluate_report(&r, Some(&rv)));
        assert!(!x.contains("<skipped"));
        assert!(!x.contains("<failure"));
        assert_eq!(x.matches("<testcase ").count(), 10);
    }

    #[test]
    fn missing_gate_is_a_failure_and_still_ten_cases() {
        let mut r = fresh_report();
        r.gates.retain(|g| g.name != GateName::Cleanup);
        let x = render(&evaluate_report(&r, None));
        assert_eq!(
            x.matches("<testcase ").count(),
            10 + 1,
            "plus report_integrity: {x}"
        );
        assert!(x.contains("name=\"cleanup\""));
        assert!(x.contains("gate missing from report.json"));
    }

    #[test]
    fn a_duplicate_gate_is_a_failure_whichever_copy_comes_first() {
        let mut r = fresh_report();
        let mut forged = r.gates[3].clone();
        r.gates[3].status = Status::Fail;
        forged.status = Status::Pass;
        r.gates.insert(3, forged);
        let x = render(&evaluate_report(&r, None));
        assert!(x.contains("gate appears 2 times in report.json"), "{x}");
        assert!(x.contains("report.json has the dump gate 2 times"), "{x}");
        assert!(x.contains("failures=\"1\" errors=\"1\""), "{x}");
    }

    #[test]
    fn rejected_review_adds_an_integrity_error() {
        let r = fresh_report();
        let mut rv = review_for(&r, ReviewDecision::Pass);
        rv.images.pop();
        let x = render(&evaluate_report(&r, Some(&rv)));
        assert!(x.contains("name=\"report_integrity\""));
        assert!(x.contains("errors=\"1\""));
        assert!(x.contains("review rejected"));
    }

    #[test]
    fn escapes_control_characters() {
        assert_eq!(esc("a\u{1}b\nc"), "a\\u{1}b&#10;c");
        let mut r = fresh_report();
        r.gates[0].status = Status::Fail;
        r.gates[0].reason = "bad\u{7}bell".into();
        let x = render(&evaluate_report(&r, None));
        assert!(!x.contains('\u{7}'));
    }

    #[test]
    fn a_failure_carries_its_quoted_cause_escaped() {
        let x = render(&evaluate_report(
            &crate::render::tests::caused_report(),
            None,
        ));
        assert!(
            x.contains("cause, quoted from criu dump, criu/dump.log:&#10;| (00.512301)"),
            "{x}"
        );
        assert!(
            x.contains("&gt; (00.512401) Error (criu/namespaces.c:463)"),
            "{x}"
        );
        assert!(!x.contains("<script>") && !x.contains('\u{1b}'), "{x}");
    }
}
