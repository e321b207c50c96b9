//! A matrix as one table: rows are images (kernel release, CRIU version, accelerator), columns
//! are the ten gates, then dump and restore seconds and the CRIU image size. Text for a
//! terminal, Markdown, one HTML page, JUnit XML with one test suite per image, and the
//! cell-by-cell difference of two matrices. Pure functions of the [`Matrix`].

use super::{Cell, CellOutcome, Matrix, CELL_CAUSE_CHARS};
use crate::escape::{html as html_esc, line as one_line, markdown as md_esc, xml as xml_esc};
use sharedos_report::cause::cut;
use sharedos_report::report::{GateName, Status};
use std::fmt::Write;

/// Short column headings, in gate order.
pub fn gate_heading(g: GateName) -> &'static str {
    match g {
        GateName::Prerequisites => "prereq",
        GateName::Launch => "launch",
        GateName::LiveStateProbe => "probe",
        GateName::Dump => "dump",
        GateName::RestoreLiveProcess => "restore",
        GateName::RestoreXState => "x_state",
        GateName::Isolation => "isolation",
        GateName::Reset => "reset",
        GateName::Density => "density",
        GateName::GuiPixelReview => "gui_review",
        GateName::Cleanup => "cleanup",
    }
}

fn short(s: Status) -> &'static str {
    match s {
        Status::Pass => "PASS",
        Status::Fail => "FAIL",
        Status::NotRun => "NOT_RUN",
        Status::ReviewRequired => "REVIEW",
    }
}

fn num(v: Option<f64>, places: usize) -> String {
    v.map(|x| format!("{x:.places$}"))
        .unwrap_or_else(|| "-".into())
}

pub(super) fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        one_line(s)
    }
}

fn verdict_word(code: i32) -> &'static str {
    match code {
        0 => "every cell as expected (or passed)",
        1 => "a cell's report was rejected, differs from its expectation, or failed",
        3 => "every gate passed; the GUI review is outstanding",
        _ => "the rig failed for a cell",
    }
}

/// Cells of one row, as strings, in column order.
fn row(c: &Cell) -> Vec<String> {
    let mut r = vec![
        one_line(&c.image),
        or_dash(&c.kernel_release),
        or_dash(&c.criu_version),
        or_dash(&c.accelerator),
    ];
    r.extend(c.gates.iter().map(|g| short(g.status).to_string()));
    r.extend([
        num(c.dump_seconds, 2),
        num(c.restore_seconds, 2),
        num(c.image_mb, 1),
        one_line(&cell_word(c)),
    ]);
    r
}

/// The cell's last column: how it ended, then in brackets why when it is not a plain pass: the
/// first failed gate's cause (CRIU's own words when the gate quoted them), else why the row did
/// not run, what the verdict found wrong with its report, or what differs from its
/// expectations; then any kernel oops (`as expected (dump: criu dump: ...)`, `exit 0, kernel
/// oops: RIP f+0x1`). Each part cut to [`CELL_CAUSE_CHARS`]. Not escaped: [`row`] escapes it.
pub(super) fn cell_word(c: &Cell) -> String {
    let word = match (c.outcome, &c.expected) {
        (CellOutcome::NotRun, _) => "NOT_RUN".into(),
        (CellOutcome::RigFailed, _) => "RIG FAILURE".into(),
        // The verdict found something wrong with the report: whatever its statuses say.
        (CellOutcome::Ran, _) if !c.problems.is_empty() => "REJECTED".into(),
        (CellOutcome::Ran, Some(_)) if c.differences.is_empty() => "as expected".into(),
        (CellOutcome::Ran, Some(_)) => "DIFFERS".into(),
        (CellOutcome::Ran, None) => format!("exit {}", c.exit_code.unwrap_or(2)),
    };
    let first = |v: &[String]| v.first().cloned().unwrap_or_default();
    let cause = match c.outcome {
        CellOutcome::Ran if !c.problems.is_empty() => first(&c.problems),
        CellOutcome::Ran if c.cause.is_empty() => first(&c.differences),
        CellOutcome::Ran => c.cause.clone(),
        // The gates of a row that did not run say nothing; its reason is why.
        _ => c.reason.clone(),
    };
    let cause = cut(&cause, CELL_CAUSE_CHARS);
    match (cause.as_str(), c.kernel_oops.as_str()) {
        ("", "") => word,
        (cause, "") => format!("{word} ({cause})"),
        ("", oops) => format!("{word}, {oops}"),
        (cause, oops) => format!("{word} ({cause}), {oops}"),
    }
}

fn headings() -> Vec<String> {
    let mut h: Vec<String> = ["image", "kernel", "criu", "accel"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    h.extend(GateName::ALL.iter().map(|g| gate_heading(*g).to_string()));
    h.extend(
        ["dump s", "restore s", "image MB", "cell"]
            .iter()
            .map(|s| s.to_string()),
    );
    h
}

/// Notes under the table: why a cell did not run, how to fix it, what the verdict found wrong
/// with its report, and what differs from its expectations; every note escaped.
fn notes(m: &Matrix) -> Vec<String> {
    let mut out = Vec::new();
    for c in &m.cells {
        let image = one_line(&c.image);
        if !c.reason.is_empty() {
            out.push(format!("{image}: {}", one_line(&c.reason)));
        }
        if !c.fix.is_empty() {
            out.push(format!("{image}: to fix: {}", one_line(&c.fix)));
        }
        for p in &c.problems {
            out.push(format!("{image}: report rejected: {}", one_line(p)));
        }
        for d in &c.differences {
            out.push(format!("{image}: {}", one_line(d)));
        }
        if !c.kernel_oops.is_empty() {
            out.push(format!(
                "{image}: the guest kernel oopsed ({}); its serial.log has the whole report",
                one_line(&c.kernel_oops)
            ));
        }
    }
    out
}

pub fn text(m: &Matrix) -> String {
    let mut rows = vec![headings()];
    rows.extend(m.cells.iter().map(row));
    let mut s = String::new();
    let _ = writeln!(
        s,
        "matrix: {} image(s), exit {}: {}",
        m.cells.len(),
        m.exit_code,
        verdict_word(m.exit_code)
    );
    s.push_str(&aligned(&rows, &notes(m)));
    s
}

/// The text table under a heading line, shared by the matrix and its migration pairs: rows
/// padded to their columns' widths, counted in chars since that is what a terminal shows, two
/// spaces apart with nothing trailing, then the notes, one line each. Cells and notes come
/// already escaped.
pub(super) fn aligned(rows: &[Vec<String>], notes: &[String]) -> String {
    let cols = rows.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..cols)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut s = String::new();
    for r in rows {
        let line: Vec<String> = r
            .iter()
            .zip(&widths)
            .map(|(c, w)| format!("{c:<w$}"))
            .collect();
        let _ = writeln!(s, "{}", line.join("  ").trim_end());
    }
    for n in notes {
        let _ = writeln!(s, "{n}");
    }
    s
}

/// One Markdown table row. Headings and alignment markers go in as they are; guest cells must
/// come through [`md_esc`] first, as [`md_rows`] does.
pub(super) fn md_row<S: AsRef<str>>(cells: &[S]) -> String {
    let cells: Vec<&str> = cells.iter().map(AsRef::as_ref).collect();
    format!("| {} |\n", cells.join(" | "))
}

/// Body rows of a Markdown table, every cell escaped.
pub(super) fn md_rows(rows: impl IntoIterator<Item = Vec<String>>) -> String {
    rows.into_iter()
        .map(|r| md_row(&r.iter().map(|x| md_esc(x)).collect::<Vec<_>>()))
        .collect()
}

/// Notes under a Markdown table as an escaped list after a blank line; nothing without notes.
pub(super) fn md_notes(notes: &[String]) -> String {
    if notes.is_empty() {
        return String::new();
    }
    let mut s = String::from("\n");
    for x in notes {
        let _ = writeln!(s, "- {}", md_esc(x));
    }
    s
}

/// An HTML table's heading cells, escaped.
pub(super) fn html_headings(headings: &[String]) -> String {
    headings
        .iter()
        .map(|h| format!("<th>{}</th>", html_esc(h)))
        .collect()
}

/// The end of an HTML page: the table closed, the notes as an escaped list, the document closed.
pub(super) fn html_end(notes: &[String]) -> String {
    let mut s = String::from("</table>\n");
    if !notes.is_empty() {
        s.push_str("<ul>\n");
        for x in notes {
            let _ = writeln!(s, "<li>{}</li>", html_esc(x));
        }
        s.push_str("</ul>\n");
    }
    s.push_str("</body></html>\n");
    s
}

pub fn md(m: &Matrix) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "**Matrix: exit {}** ({}), {} image(s), {} at a time.\n",
        m.exit_code,
        verdict_word(m.exit_code),
        m.cells.len(),
        m.jobs
    );
    let h = headings();
    s.push_str(&md_row(&h));
    let align: Vec<&str> = h
        .iter()
        .enumerate()
        .map(|(i, _)| if (14..17).contains(&i) { "---:" } else { "---" })
        .collect();
    s.push_str(&md_row(&align));
    s.push_str(&md_rows(m.cells.iter().map(row)));
    s.push_str(&md_notes(&notes(m)));
    s
}

fn colour(s: &str) -> &'static str {
    // The cell's word, without the cause and oops after it.
    let word = s.split(" (").next().unwrap_or(s);
    match word.split(", ").next().unwrap_or(word) {
        "PASS" | "as expected" => "#1a7f37",
        "FAIL" | "DIFFERS" | "REJECTED" | "RIG FAILURE" => "#cf222e",
        "REVIEW" => "#9a6700",
        "NOT_RUN" => "#6e7781",
        _ => "inherit",
    }
}

pub fn html(m: &Matrix) -> String {
    let mut s = String::new();
    let _ = write!(
        s,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>sharedos-rig matrix</title>\
         <style>body{{font-family:sans-serif}}table{{border-collapse:collapse}}\
         td,th{{border:1px solid #ccc;padding:3px 6px}}td.n{{text-align:right}}</style>\
         </head><body>\n<h1>sharedos-rig matrix: exit {}</h1>\n<p>{}; {} image(s), {} at a time; \
         {} to {}.</p>\n<table>\n<tr>",
        m.exit_code,
        html_esc(verdict_word(m.exit_code)),
        m.cells.len(),
        m.jobs,
        html_esc(&m.started_at),
        html_esc(&m.finished_at)
    );
    s.push_str(&html_headings(&headings()));
    s.push_str("</tr>\n");
    for c in &m.cells {
        s.push_str("<tr>");
        for (i, x) in row(c).iter().enumerate() {
            let class = if (14..17).contains(&i) {
                " class=\"n\""
            } else {
                ""
            };
            let style = match colour(x) {
                "inherit" => String::new(),
                col => format!(" style=\"color:{col};font-weight:bold\""),
            };
            let _ = write!(s, "<td{class}{style}>{}</td>", html_esc(x));
        }
        s.push_str("</tr>\n");
    }
    s.push_str(&html_end(&notes(m)));
    s
}

/// One test suite per image, one test case per gate: FAIL is a failure, NOT_RUN and
/// REVIEW_REQUIRED are skipped; a cell that did not run or whose rig failed also carries an
/// error case, a cell whose report the verdict rejects a failing `verdict` case, and a cell that
/// differs from its expectation a failing `expectations` case.
pub fn junit(m: &Matrix) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(s, "<testsuites name=\"sharedos-rig-matrix\">");
    for c in &m.cells {
        s.push_str(&junit_suite(c));
    }
    s.push_str("</testsuites>\n");
    s
}

/// One cell's test suite: its gates, then its run, verdict and expectations cases.
fn junit_suite(c: &Cell) -> String {
    let mut s = String::new();
    let rejected = c.outcome == CellOutcome::Ran && !c.problems.is_empty();
    let failures = c.gates.iter().filter(|g| g.status == Status::Fail).count()
        + usize::from(!c.differences.is_empty())
        + usize::from(rejected);
    let skipped = c
        .gates
        .iter()
        .filter(|g| matches!(g.status, Status::NotRun | Status::ReviewRequired))
        .count();
    let errors = usize::from(c.outcome != CellOutcome::Ran);
    let tests = c.gates.len() + errors + usize::from(c.expected.is_some()) + usize::from(rejected);
    let image = xml_esc(&c.image);
    let _ = writeln!(
        s,
        "  <testsuite name=\"{image}\" tests=\"{tests}\" failures=\"{failures}\" errors=\"{errors}\" skipped=\"{skipped}\">"
    );
    let _ = writeln!(
        s,
        "    <properties><property name=\"kernel_release\" value=\"{}\"/><property name=\"criu_version\" value=\"{}\"/><property name=\"accelerator\" value=\"{}\"/></properties>",
        xml_esc(&c.kernel_release),
        xml_esc(&c.criu_version),
        xml_esc(&c.accelerator)
    );
    for g in &c.gates {
        let name = xml_esc(&format!("{}.{}", c.image, g.name));
        let _ = write!(s, "    <testcase classname=\"{image}\" name=\"{name}\"");
        let _ = match g.status {
            Status::Pass => writeln!(s, "/>"),
            Status::Fail => {
                // The cell's cause, where it is this gate's.
                let cause = c
                    .cause
                    .strip_prefix(&format!("{}: ", g.name))
                    .map(|why| format!(" ({})", xml_esc(why)))
                    .unwrap_or_default();
                writeln!(
                    s,
                    "><failure message=\"{} FAIL{cause}\"/></testcase>",
                    g.name
                )
            }
            Status::NotRun | Status::ReviewRequired => {
                writeln!(s, "><skipped message=\"{}\"/></testcase>", g.status)
            }
        };
    }
    if errors > 0 {
        let _ = writeln!(
            s,
            "    <testcase classname=\"{image}\" name=\"{image}.run\"><error message=\"{}\">{}</error></testcase>",
            if c.outcome == CellOutcome::NotRun { "NOT_RUN" } else { "rig failure" },
            xml_esc(&format!("{} {}", one_line(&c.reason), one_line(&c.fix)))
        );
    }
    if rejected {
        let _ = writeln!(
            s,
            "    <testcase classname=\"{image}\" name=\"{image}.verdict\"><failure message=\"the report fails verify\">{}</failure></testcase>",
            xml_esc(&c.problems.join("\n"))
        );
    }
    if c.expected.is_some() {
        let _ = write!(
            s,
            "    <testcase classname=\"{image}\" name=\"{image}.expectations\""
        );
        let _ = if c.differences.is_empty() {
            writeln!(s, "/>")
        } else {
            writeln!(
                s,
                "><failure message=\"differs from expected-gates\">{}</failure></testcase>",
                xml_esc(&c.differences.join("; "))
            )
        };
    }
    s.push_str("  </testsuite>\n");
    s
}

/// Cell by cell, what changed from matrix A to matrix B: images only in one, and for each image
/// in both, its kernel, criu and every gate whose status changed.
pub fn diff(a: &Matrix, b: &Matrix, a_label: &str, b_label: &str) -> String {
    let mut s = format!("A: {a_label}\nB: {b_label}\n");
    let mut changes = 0;
    for ca in &a.cells {
        let name = one_line(&ca.image);
        let Some(cb) = b.cells.iter().find(|c| c.image == ca.image) else {
            let _ = writeln!(s, "{name}: only in A");
            changes += 1;
            continue;
        };
        let mut lines = Vec::new();
        if ca.outcome != cb.outcome {
            lines.push(format!("cell: {:?} -> {:?}", ca.outcome, cb.outcome));
        }
        for (what, x, y) in [
            ("kernel", &ca.kernel_release, &cb.kernel_release),
            ("criu", &ca.criu_version, &cb.criu_version),
            ("accel", &ca.accelerator, &cb.accelerator),
        ] {
            if x != y {
                lines.push(format!("{what}: {} -> {}", or_dash(x), or_dash(y)));
            }
        }
        for g in GateName::ALL {
            let (x, y) = (ca.status(g), cb.status(g));
            if x != y {
                lines.push(format!("{g}: {x} -> {y}"));
            }
        }
        if ca.problems != cb.problems {
            lines.push(format!(
                "report problems: {} -> {}",
                ca.problems.len(),
                cb.problems.len()
            ));
        }
        if lines.is_empty() {
            let _ = writeln!(s, "{name}: same gate statuses");
        } else {
            changes += lines.len();
            let _ = writeln!(s, "{name}:");
            for l in lines {
                let _ = writeln!(s, "  {l}");
            }
        }
    }
    for cb in &b.cells {
        if !a.cells.iter().any(|c| c.image == cb.image) {
            let _ = writeln!(s, "{}: only in B", one_line(&cb.image));
            changes += 1;
        }
    }
    if a.exit_code != b.exit_code {
        let _ = writeln!(s, "exit: {} -> {}", a.exit_code, b.exit_code);
    }
    if changes == 0 {
        s.push_str("no differences in any cell\n");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::super::tests::cell;
    use super::super::*;
    use super::*;

    fn matrix() -> Matrix {
        let a = cell("bookworm", None, "6.1.0-50-cloud-amd64", "3.17.1");
        let mut b = cell(
            "bookworm-bpo",
            Some(GateName::Prerequisites),
            "6.12.48+bpo-cloud-amd64",
            "3.17.1",
        );
        b.expected = Some(b.gates.clone());
        compare(&mut b);
        let c = not_run_cell(
            "forky",
            "the image could not be built: criu 4.2.1-1 is not on the mirror",
            "7.2.12-cloud-amd64",
        );
        let cells = vec![a, b, c];
        Matrix {
            schema_version: MATRIX_SCHEMA_VERSION,
            started_at: "2026-12-01T06:00:00Z".into(),
            finished_at: "2026-12-01T06:05:00Z".into(),
            jobs: 1,
            jobs_reason: "2 host cores / 2 vCPUs per guest, at least 1".into(),
            command_line: vec![],
            exit_code: exit_code(&cells),
            cells,
        }
    }

    #[test]
    fn a_cell_shows_its_cause_and_a_kernel_oops_beside_its_word() {
        use super::super::tests::report;
        use crate::judge::verdict::evaluate_report;
        use sharedos_report::cause::{Cause, KernelOops};
        // trixie-bpo: CRIU's first error beside the expected FAIL.
        let mut r = report(
            &[(GateName::Dump, Status::Fail)],
            "7.3.4+bpo-cloud-amd64",
            "4.1.1",
        );
        r.gate_mut(GateName::Dump).unwrap().cause = Some(Cause {
            source: "criu dump".into(),
            log: "criu/dump.log".into(),
            error: "(00.046702) Error (criu/sockets.c:885): sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2".into(),
            before: vec![],
        });
        let mut c = cell_from_report("trixie-bpo", &r, evaluate_report(&r, None).exit_code);
        c.expected = Some(c.gates.clone());
        compare(&mut c);
        assert_eq!(
            cell_word(&c),
            "as expected (dump: criu dump: sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2)"
        );
        // forky: an oops the guest kept going after, in a run that got to its end.
        let mut p = report(&[], "7.2.12-cloud-amd64", "4.2.1");
        p.vm.as_mut().unwrap().kernel_oops = Some(KernelOops {
            first: "[  301.44] BUG: kernel NULL pointer dereference, address: 0000000000000008"
                .into(),
            rip: "[  301.45] RIP: 0010:mnt_ns_tree_add+0x3c/0x120".into(),
            panic: String::new(),
        });
        let code = evaluate_report(&p, None).exit_code;
        let fk = cell_from_report("forky", &p, code);
        assert_eq!(
            cell_word(&fk),
            format!("exit {code}, kernel oops: RIP mnt_ns_tree_add+0x3c/0x120")
        );
        // bookworm-bpo: the panic's rig failure, its reason cut and its oops beside it, the
        // panic whole in the notes.
        let mut f = report(&[], "", "");
        let vm = f.vm.as_mut().unwrap();
        vm.rig_error = Some("reading the gate's output: the guest kernel panicked (Kernel panic - not syncing: Fatal exception in interrupt; after traps: PANIC: double fault, error_code: 0x0; RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0)".into());
        vm.kernel_oops = Some(KernelOops {
            first: "[ 2.703542] traps: PANIC: double fault, error_code: 0x0".into(),
            rip: "[ 2.703570] RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0".into(),
            panic: "[ 2.704001] Kernel panic - not syncing: Fatal exception in interrupt".into(),
        });
        let bpo = cell_from_report("bookworm-bpo", &f, 2);
        assert_eq!(
            cell_word(&bpo),
            "RIG FAILURE (reading the gate's output: the guest kernel panicked (Kernel panic - not \
             syncing: Fatal exception in interrupt; after...), kernel oops: RIP \
             kmem_cache_alloc_noprof+0x9d/0x2f0"
        );
        // A hostile cause reaches no table unescaped.
        let mut h = r.clone();
        h.gate_mut(GateName::Dump)
            .unwrap()
            .cause
            .as_mut()
            .unwrap()
            .error = "Error (x.c:1): \u{1b}[2J<img src=x> | *boom*".into();
        let hc = cell_from_report("hostile", &h, 1);
        let mut m = matrix();
        m.cells = vec![c, fk, bpo, hc];
        let t = text(&m);
        assert!(
            t.contains("Kernel panic - not syncing: Fatal exception"),
            "{t}"
        );
        assert!(t.contains("forky: the guest kernel oopsed"), "{t}");
        assert!(!t.contains('\u{1b}'), "{t}");
        let page = html(&m);
        assert!(
            !page.contains("<img") && page.contains("as expected (dump: criu dump"),
            "{page}"
        );
        assert!(
            page.contains("color:#1a7f37;font-weight:bold\">as expected ("),
            "the word keeps its colour"
        );
        let md_page = md(&m);
        assert!(!md_page.contains("| *boom*"), "{md_page}");
        let x = junit(&m);
        assert!(
            x.contains("<failure message=\"dump FAIL (criu dump: sockets: Sockects collect"),
            "{x}"
        );
        assert!(!x.contains("<img"), "{x}");
    }

    #[test]
    fn a_cell_that_is_not_a_plain_pass_says_why() {
        // PASS: nothing beside the word.
        let ok = cell("bookworm", None, "6.1", "3.17.1");
        assert_eq!(cell_word(&ok), "exit 3");
        // A failed gate: the gate and its reason.
        let f = cell("trixie", Some(GateName::Dump), "6.12", "4.1.1");
        assert!(
            cell_word(&f).starts_with("exit 1 (dump: "),
            "{}",
            cell_word(&f)
        );
        // No gate failed, one was skipped: the skipped gate, its status and reason.
        let mut r =
            super::super::tests::report(&[(GateName::Reset, Status::NotRun)], "6.1", "3.17.1");
        r.gate_mut(GateName::Reset).unwrap().reason = "the restore left nothing to reset".into();
        let skipped = cell_from_report("bookworm", &r, 1);
        assert_eq!(
            cell_word(&skipped),
            "exit 1 (reset NOT_RUN: the restore left nothing to reset)"
        );
        // NOT_RUN: its reason, cut.
        let long = format!("no image on criu 4.1.1's line holds it {}", "x".repeat(300));
        let nr = not_run_cell("trixie+office+copies2", &long, "");
        let w = cell_word(&nr);
        assert!(
            w.starts_with("NOT_RUN (no image on criu 4.1.1's line"),
            "{w}"
        );
        assert!(w.chars().count() < CELL_CAUSE_CHARS + 20, "{w}");
        // REJECTED: what the verdict found wrong, whatever the gates say.
        let mut rej = ok.clone();
        rej.problems = vec!["png/live.png changed".into()];
        assert_eq!(cell_word(&rej), "REJECTED (png/live.png changed)");
        // DIFFERS with no failed gate: the first difference.
        let mut d = ok.clone();
        d.expected = Some(d.gates.clone());
        d.differences = vec!["dump: expected FAIL, got PASS".into()];
        assert_eq!(cell_word(&d), "DIFFERS (dump: expected FAIL, got PASS)");
    }

    #[test]
    fn text_has_one_row_per_image_and_a_column_per_gate() {
        let m = matrix();
        let t = text(&m);
        let lines: Vec<&str> = t.lines().collect();
        assert!(lines[0].contains("exit 2"), "{t}");
        for g in GateName::ALL {
            assert!(lines[1].contains(gate_heading(g)), "{t}");
        }
        assert!(
            lines[1].contains("dump s") && lines[1].contains("image MB"),
            "{t}"
        );
        let bw = lines.iter().find(|l| l.starts_with("bookworm ")).unwrap();
        assert!(bw.contains("6.1.0-50-cloud-amd64") && bw.contains("3.17.1") && bw.contains("tcg"));
        assert!(
            bw.contains("6.54") && bw.contains("4.01") && bw.contains("27.4"),
            "{bw}"
        );
        assert!(bw.contains("exit 3"), "{bw}");
        let bpo = lines
            .iter()
            .find(|l| l.starts_with("bookworm-bpo"))
            .unwrap();
        assert!(bpo.contains("FAIL") && bpo.contains("as expected"), "{bpo}");
        let fk = lines.iter().find(|l| l.starts_with("forky")).unwrap();
        assert_eq!(fk.matches("NOT_RUN").count(), 11, "{fk}");
        assert!(t.contains("forky: to fix: refresh its lock with `cargo xtask image --image forky --update-lock`"), "{t}");
        assert!(t.contains("criu 4.2.1-1 is not on the mirror"), "{t}");
    }

    #[test]
    fn md_and_html_carry_the_same_rows_escaped() {
        let mut m = matrix();
        m.cells[0].criu_version = "<b>3|17</b>".into();
        let md = md(&m);
        assert_eq!(md.lines().filter(|l| l.starts_with("| ")).count(), 2 + 3);
        assert!(md.contains("&lt;b&gt;3\\|17&lt;/b&gt;"), "{md}");
        let h = html(&m);
        assert!(!h.contains("<b>3|17</b>"));
        assert!(h.contains("&lt;b&gt;3|17&lt;/b&gt;"), "{h}");
        assert_eq!(h.matches("<tr>").count(), 4);
        assert_eq!(h.matches("<th>").count(), 18);
    }

    #[test]
    fn junit_has_one_suite_per_image_and_parses() {
        let m = matrix();
        let x = junit(&m);
        let doc = roxmltree::Document::parse(&x).unwrap();
        let suites: Vec<_> = doc
            .descendants()
            .filter(|n| n.has_tag_name("testsuite"))
            .collect();
        assert_eq!(suites.len(), 3);
        assert_eq!(suites[0].attribute("name"), Some("bookworm"));
        assert_eq!(suites[1].attribute("failures"), Some("1"));
        assert_eq!(suites[2].attribute("errors"), Some("1"));
        let forky_cases = suites[2]
            .children()
            .filter(|n| n.has_tag_name("testcase"))
            .count();
        assert_eq!(forky_cases, 11);
        assert!(x.contains("forky.run"));
    }

    #[test]
    fn diff_names_each_changed_cell() {
        let a = matrix();
        let mut b = matrix();
        b.cells[0].gates[3].status = Status::Fail;
        b.cells[0].kernel_release = "6.1.0-51-cloud-amd64".into();
        b.cells.remove(2);
        let d = diff(&a, &b, "A", "B");
        assert!(d.contains("bookworm:\n  kernel: 6.1.0-50-cloud-amd64 -> 6.1.0-51-cloud-amd64\n  dump: PASS -> FAIL"), "{d}");
        assert!(d.contains("bookworm-bpo: same gate statuses"), "{d}");
        assert!(d.contains("forky: only in A"), "{d}");
        assert!(diff(&a, &a, "A", "A").contains("no differences in any cell"));
    }
}
