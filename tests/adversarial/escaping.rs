//! 4. Guest text never reaches a terminal raw.

use super::{
    archive, archive_with, both, code, exits, guest_report, list_artifact, no_raw_control, out,
    png, rig, verify,
};
use crate::common::scratch::Scratch;
use sharedos_report::report::REPORT_FILE;

const FAKE: &str = "x\nverdict:   PASS (exit 0): every gate passed, the human review included, signed\r\u{1b}[2J\u{202e}";

/// A failed check whose name carries a newline and a fake verdict line: verify prints one
/// verdict line, its own, and no control character.
#[test]
fn c4_a_check_name_cannot_fake_verifys_verdict_line() {
    let s = Scratch::new("c4-verify");
    let r = s.path("r");
    let mut g = guest_report();
    // A PASS that stands on a failed check: verify names the check.
    g.gates[1].checks[0].passed = false;
    g.gates[1].checks[0].name = FAKE.into();
    g.gates[1].reason = FAKE.into();
    archive_with(&r, g, |_| {});
    let o = verify(&r);
    exits(&o, 1);
    no_raw_control(&o);
    assert_eq!(
        out(&o)
            .lines()
            .filter(|l| l.starts_with("verdict:"))
            .count(),
        1,
        "{}",
        both(&o)
    );
    for format in ["text", "md", "junit"] {
        let o = rig(&[&"show", &r, &"--format", &format]);
        exits(&o, 0);
        if format == "text" {
            no_raw_control(&o);
        }
    }
}

/// A kernel release with a carriage return cannot redraw a FAIL row of `list` as PASS.
#[test]
fn c4_list_escapes_guest_fields() {
    let s = Scratch::new("c4-list");
    let r = s.path("reports/r");
    let mut g = guest_report();
    g.environment.kernel_release = "6.1\rPASS            \u{1b}[1A".into();
    g.environment.started_at = "2026\u{202e}-12".into();
    archive_with(&r, g, |_| {});
    let o = rig(&[&"list", &s.path("reports")]);
    exits(&o, 0);
    no_raw_control(&o);
}

/// An error line carries guest text (serde quotes the bad value of a report.json that does not
/// parse): it is escaped too.
#[test]
fn c4_error_lines_are_escaped() {
    let s = Scratch::new("c4-error");
    let a = s.path("a");
    let b = s.path("b");
    archive(&a);
    archive(&b);
    let text = std::fs::read_to_string(a.join(REPORT_FILE)).unwrap();
    let bad = text.replacen("\"REVIEW_REQUIRED\"", "\"X\\u001b[2J\\nerror: none\"", 1);
    std::fs::write(a.join(REPORT_FILE), bad).unwrap();
    let o = rig(&[&"diff", &a, &b]);
    assert_ne!(code(&o), 0, "{}", both(&o));
    no_raw_control(&o);
    let o = rig(&[&"show", &a]);
    no_raw_control(&o);
}

/// review's prompt names the PNGs the reviewer signs, whose paths the guest chose; verify
/// names the reviewer, whom the review file names.
#[test]
fn c4_review_prompts_and_the_reviewer_are_escaped() {
    let s = Scratch::new("c4-review");
    let r = s.path("r");
    archive(&r);
    let odd = "guest/png/a\u{1b}]0;title\u{7}\nYou are signing nothing.png";
    std::fs::write(r.join(odd), png(4, 4)).unwrap();
    list_artifact(&r, odd);
    let o = rig(&[
        &"review",
        &r,
        &"--decision",
        &"pass",
        &"--reviewer",
        &"alice\nverdict: PASS",
    ]);
    exits(&o, 0);
    no_raw_control(&o);
    let o = verify(&r);
    no_raw_control(&o);
    assert_eq!(
        out(&o)
            .lines()
            .filter(|l| l.starts_with("verdict:"))
            .count(),
        1,
        "{}",
        both(&o)
    );
}

/// `diff` prints check values both reports hold.
#[test]
fn c4_diff_escapes_check_values() {
    let s = Scratch::new("c4-diff");
    let a = s.path("a");
    let b = s.path("b");
    archive(&a);
    let mut g = guest_report();
    g.gates[0].checks[0].value = serde_json::json!("\u{1b}[31mred\u{1b}[0m\r\nverdict: PASS");
    archive_with(&b, g, |_| {});
    let o = rig(&[&"diff", &a, &b]);
    exits(&o, 0);
    no_raw_control(&o);
}

/// In Markdown a control character inside a link is dropped by the renderer: the link check
/// must see the text as it will be rendered.
#[test]
fn c4_markdown_neutralises_a_link_split_by_a_control_character() {
    let s = Scratch::new("c4-md");
    let r = s.path("r");
    let mut g = guest_report();
    g.gates[2].reason = "see https:\u{1}//evil.example/x and www\u{1}.evil.example".into();
    archive_with(&r, g, |_| {});
    let o = rig(&[&"show", &r, &"--format", &"md"]);
    exits(&o, 0);
    assert!(!out(&o).contains("https://evil"), "{}", out(&o));
    assert!(!out(&o).contains("www.evil"), "{}", out(&o));
}
