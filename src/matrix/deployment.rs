//! The table a deployment reads (`sharedos-rig matrix table MATRIX_DIR`): per application
//! (workload) and CRIU version, whether it forks, the cause where it does not (the gate and
//! CRIU's words), what was turned off to make it fork, memory per copy and fork latency.
//!
//! It is made from a [`Matrix`] that `matrix::load` judged again from the rows' reports, never
//! from matrix.json's word, so README's copy (between [`BEGIN`] and [`END`]) cannot drift from
//! what was measured: [`check_readme`] holds it to the table rendered again.

use super::render::{aligned, md_row, md_rows};
use super::variant::row_workload;
use super::{Cell, CellOutcome, Matrix, CELL_CAUSE_CHARS};
use crate::escape::line as one_line;
use anyhow::{bail, Result};
use sharedos_report::cause::cut;
use sharedos_report::report::{GateName, Status};

/// What each workload turned off so that CRIU can fork it, keyed by workload name; a workload
/// not listed turned off nothing ([`turned_off`]).
pub const TURNED_OFF: &[(&str, &str)] = &[
    (
        "browser-nosandbox",
        "Firefox's sandboxes (content, GMP, RDD, socket process)",
    ),
    ("chromium-nosandbox", "Chromium's sandbox (--no-sandbox)"),
    // GLib watches the children it spawns through pidfds, which criu 3.17.1 cannot dump; the
    // session's tree refuses the call (ENOSYS), as a kernel before 5.3 would.
    (
        "session",
        "pidfd_open for xfce4-session and its clients (a seccomp filter: ENOSYS)",
    ),
];

/// What `workload` turned off to fork: [`TURNED_OFF`]'s entry, else "nothing".
pub fn turned_off(workload: &str) -> &'static str {
    TURNED_OFF
        .iter()
        .find(|(w, _)| *w == workload)
        .map_or("nothing", |(_, what)| what)
}

/// The gates a fork is: the tree dumped, restored live, its X state and isolation held, and a
/// reset to the dump.
pub const FORK_GATES: [GateName; 5] = [
    GateName::Dump,
    GateName::RestoreLiveProcess,
    GateName::RestoreXState,
    GateName::Isolation,
    GateName::Reset,
];

/// Whether a row forks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Forks {
    Yes,
    No,
    /// The row did not run, or the rig failed for it: nothing was measured.
    NotRun,
    /// The verdict found something wrong with its report: its statuses count for nothing.
    Rejected,
}

impl Forks {
    fn word(self) -> &'static str {
        match self {
            Forks::Yes => "yes",
            Forks::No => "no",
            Forks::NotRun => "NOT_RUN",
            Forks::Rejected => "REJECTED",
        }
    }
}

/// One line of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub workload: String,
    pub criu: String,
    pub image: String,
    pub forks: Forks,
    /// Where it does not fork: the failed gate and its cause (CRIU's words when the gate quoted
    /// them); why the row did not run; what the verdict found wrong. Empty where it forks.
    pub cause: String,
    pub turned_off: &'static str,
    /// The density gate's median PSS per copy (MiB).
    pub copy_mib: Option<f64>,
    /// Why there is no memory figure, when there is none.
    pub copy_why: String,
    /// CRIU's restore of the tree (restore_live_process's time), seconds.
    pub restore_s: Option<f64>,
    pub accel: String,
}

/// The table's line for one judged cell. `criu_of` gives the criu an image's lock installs, for
/// a row that never ran and so reports none.
pub fn entry(c: &Cell, criu_of: &dyn Fn(&str) -> Option<String>) -> Entry {
    let workload = row_workload(&c.variants).as_str().to_string();
    let fork_fail = FORK_GATES
        .iter()
        .find(|g| c.status(**g) != Status::Pass)
        .map(|g| format!("{g} {}", c.status(*g)));
    let (forks, cause) = match c.outcome {
        CellOutcome::NotRun | CellOutcome::RigFailed => (Forks::NotRun, c.reason.clone()),
        CellOutcome::Ran if !c.problems.is_empty() => (Forks::Rejected, c.problems[0].clone()),
        CellOutcome::Ran => match fork_fail {
            None => (Forks::Yes, String::new()),
            // The first failed gate's cause; a fork gate that did not pass without any failure
            // (a gate skipped) is named with its status.
            Some(g) if c.cause.is_empty() => (Forks::No, g),
            Some(_) => (Forks::No, c.cause.clone()),
        },
    };
    let criu = if c.criu_version.is_empty() {
        criu_of(c.base_image()).unwrap_or_default()
    } else {
        c.criu_version.clone()
    };
    let copy_why = match (c.copy_pss_mib, c.density) {
        (Some(_), _) => String::new(),
        _ if c.outcome != CellOutcome::Ran => "nothing ran".into(),
        (None, None) => "no density gate: its row has no copies<N>".into(),
        (None, Some(Status::Pass)) => "the density figures do not hold".into(),
        (None, Some(s)) => format!("density {s}"),
    };
    Entry {
        turned_off: turned_off(&workload),
        workload,
        criu,
        image: c.image.clone(),
        forks,
        cause: cut(&cause, CELL_CAUSE_CHARS),
        copy_mib: c.copy_pss_mib,
        copy_why,
        restore_s: c.restore_seconds,
        accel: c.accelerator.clone(),
    }
}

/// Every cell's line, in the matrix's order (`--workloads` writes workload by workload, line
/// by line).
pub fn entries(m: &Matrix, criu_of: &dyn Fn(&str) -> Option<String>) -> Vec<Entry> {
    m.cells.iter().map(|c| entry(c, criu_of)).collect()
}

fn headings() -> Vec<String> {
    [
        "application",
        "criu",
        "forks",
        "cause where not",
        "turned off to fork",
        "memory per copy",
        "fork latency",
        "row",
    ]
    .map(str::to_string)
    .to_vec()
}

/// The cells of one line, unescaped.
fn cells(e: &Entry) -> Vec<String> {
    let dash = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.to_string()
        }
    };
    vec![
        e.workload.clone(),
        dash(&e.criu),
        e.forks.word().to_string(),
        dash(&e.cause),
        e.turned_off.to_string(),
        match e.copy_mib {
            Some(m) => format!("{m:.1} MiB PSS"),
            None => format!("- ({})", e.copy_why),
        },
        match e.restore_s {
            Some(s) if e.accel.is_empty() => format!("{s:.2} s"),
            Some(s) => format!("{s:.2} s ({})", e.accel),
            None => "-".into(),
        },
        e.image.clone(),
    ]
}

/// The table as text, every cell escaped.
pub fn text(rows: &[Entry]) -> String {
    let mut t = vec![headings()];
    t.extend(
        rows.iter()
            .map(|e| cells(e).iter().map(|c| one_line(c)).collect()),
    );
    aligned(&t, &[])
}

/// The table as Markdown, every cell escaped: what README holds between the markers.
pub fn md(rows: &[Entry]) -> String {
    let h = headings();
    let mut s = md_row(&h);
    s.push_str(&md_row(&vec!["---"; h.len()]));
    s.push_str(&md_rows(rows.iter().map(cells)));
    s
}

/// The marker that opens README's table, followed by the matrix directory it was rendered from
/// (relative to README's own directory): `<!-- deployment-table:begin reports/matrix-X -->`.
pub const BEGIN: &str = "<!-- deployment-table:begin ";
/// The marker that closes it.
pub const END: &str = "<!-- deployment-table:end -->";

/// README's section: the matrix directory its begin marker names, and the text between the
/// markers (from the line after the begin marker to the end marker's line).
pub fn section(readme: &str) -> Result<(String, String)> {
    let Some(b) = readme.find(BEGIN) else {
        bail!("no `{BEGIN}MATRIX_DIR -->` marker\nfix: put the table between `{BEGIN}MATRIX_DIR -->` and `{END}`, each on a line of its own");
    };
    if readme[b + 1..].contains(BEGIN) {
        bail!("the begin marker is there twice\nfix: keep one table between one pair of markers");
    }
    let after = &readme[b + BEGIN.len()..];
    let Some((dir, rest)) = after.split_once("-->") else {
        bail!("the begin marker is not closed with `-->`");
    };
    let dir = dir.trim();
    if dir.is_empty() {
        bail!("the begin marker names no matrix directory\nfix: write `{BEGIN}reports/matrix-<UTC> -->`");
    }
    let Some(rest) = rest.strip_prefix('\n') else {
        bail!("the begin marker must end its line");
    };
    let Some(e) = rest.find(END) else {
        bail!("no `{END}` after the begin marker");
    };
    if !(e == 0 || rest[..e].ends_with('\n')) {
        bail!("the end marker must start its line");
    }
    Ok((dir.to_string(), rest[..e].to_string()))
}

/// README with its section's body replaced by `table`.
pub fn replace_section(readme: &str, table: &str) -> Result<String> {
    let (_, body) = section(readme)?;
    let b = readme.find(BEGIN).unwrap_or(0);
    let start = b + readme[b..].find('\n').map_or(0, |i| i + 1);
    Ok(format!(
        "{}{table}{}",
        &readme[..start],
        &readme[start + body.len()..]
    ))
}

/// Fails, naming the first line that differs and the command that writes it again, when
/// README's section is not `table`.
pub fn check_readme(readme: &str, table: &str, readme_name: &str) -> Result<()> {
    let (dir, body) = section(readme)?;
    if body == table {
        return Ok(());
    }
    let first = body
        .lines()
        .zip(table.lines())
        .position(|(a, b)| a != b)
        .unwrap_or_else(|| body.lines().count().min(table.lines().count()));
    bail!(
        "{readme_name}'s deployment table is not what {dir} renders (first difference at line {} \
         of the table)\nfix: `sharedos-rig matrix table --readme {readme_name} --write`, then \
         review and commit",
        first + 1
    )
}

#[cfg(test)]
mod tests {
    use super::super::tests::cell;
    use super::*;

    fn criu_of(_: &str) -> Option<String> {
        Some("4.1.1".into())
    }

    fn with_density(mut c: Cell, mib: Option<f64>, s: Status) -> Cell {
        c.density = Some(s);
        c.copy_pss_mib = mib;
        c
    }

    fn sample() -> Matrix {
        let mut ok = with_density(
            cell("bookworm+copies2", None, "6.1.0-50-cloud-amd64", "3.17.1"),
            Some(26.4),
            Status::Pass,
        );
        ok.variants = vec!["copies2".into()];
        let mut nested = cell(
            "bookworm-apps+browser+copies2",
            Some(GateName::Dump),
            "6.1.0-50-cloud-amd64",
            "3.17.1",
        );
        nested.cause = "dump: criu dump: Can't dump nested ipc namespace for 1234".into();
        nested.density = Some(Status::NotRun);
        let mut nosandbox = with_density(
            cell(
                "bookworm-apps+browser-nosandbox+copies2",
                None,
                "6.1.0-50-cloud-amd64",
                "3.17.1",
            ),
            None,
            Status::Fail,
        );
        nosandbox.restore_seconds = Some(12.9);
        let gap = super::super::not_run_cell(
            "trixie+browser+copies2",
            "no image on criu 4.1.1's line holds the browser workload's programs (firefox-esr)",
            "",
        );
        let mut rejected = cell("trixie+copies2", None, "6.12", "4.1.1");
        rejected.problems = vec!["a changed artifact: x.png".into()];
        Matrix {
            schema_version: super::super::MATRIX_SCHEMA_VERSION,
            started_at: String::new(),
            finished_at: String::new(),
            jobs: 1,
            jobs_reason: String::new(),
            command_line: vec![],
            exit_code: 2,
            cells: vec![ok, nested, nosandbox, gap, rejected],
        }
    }

    #[test]
    fn each_row_says_whether_it_forks_and_why_not_in_the_gates_words() {
        let e = entries(&sample(), &criu_of);
        assert_eq!(e[0].workload, "xterm");
        assert_eq!(e[0].forks, Forks::Yes);
        assert_eq!(e[0].cause, "");
        assert_eq!(e[0].turned_off, "nothing");
        assert_eq!(e[0].copy_mib, Some(26.4));
        assert_eq!(e[0].restore_s, Some(4.01));
        assert_eq!(e[1].workload, "browser");
        assert_eq!(e[1].forks, Forks::No);
        assert_eq!(
            e[1].cause,
            "dump: criu dump: Can't dump nested ipc namespace for 1234"
        );
        assert_eq!(e[1].copy_why, "density NOT_RUN");
        assert_eq!(e[2].workload, "browser-nosandbox");
        assert_eq!(e[2].forks, Forks::Yes);
        assert!(e[2].turned_off.starts_with("Firefox's sandboxes"));
        assert_eq!(e[2].copy_why, "density FAIL");
        assert_eq!(e[3].forks, Forks::NotRun);
        assert_eq!(e[3].criu, "4.1.1", "a gap's criu is its image's lock's");
        assert!(e[3].cause.starts_with("no image on criu 4.1.1's line"));
        assert_eq!(e[4].forks, Forks::Rejected);
        assert_eq!(e[4].cause, "a changed artifact: x.png");
        // A fork gate that did not pass, with no failed gate to quote, is named with its status.
        let mut skipped = cell("bookworm", None, "6.1", "3.17.1");
        skipped.gates[4].status = Status::NotRun;
        skipped.cause.clear();
        let e = entry(&skipped, &criu_of);
        assert_eq!(
            (e.forks, e.cause.as_str()),
            (Forks::No, "restore_live_process NOT_RUN")
        );
        assert_eq!(
            turned_off("chromium-nosandbox"),
            "Chromium's sandbox (--no-sandbox)"
        );
        assert_eq!(turned_off("office"), "nothing");
    }

    #[test]
    fn the_table_renders_every_row_escaped() {
        let mut m = sample();
        m.cells[1].cause = "dump: criu dump: a | b @someone\x1b[31m".into();
        let e = entries(&m, &criu_of);
        let md = md(&e);
        assert_eq!(md.lines().count(), 2 + 5, "{md}");
        assert!(md.starts_with(
            "| application | criu | forks | cause where not | turned off to fork | memory per copy | fork latency | row |\n"
        ));
        assert!(
            md.contains("| xterm | 3.17.1 | yes | - | nothing | 26.4 MiB PSS | 4.01 s (tcg) | bookworm+copies2 |"),
            "{md}"
        );
        assert!(
            md.contains("| browser | 3.17.1 | no | dump: criu dump: a \\| b @&#8203;someone"),
            "{md}"
        );
        assert!(!md.contains('\x1b'), "{md}");
        let t = text(&e);
        assert!(!t.contains('\x1b'), "{t}");
        assert!(t.lines().nth(4).unwrap().contains("NOT_RUN"), "{t}");
    }

    #[test]
    fn readmes_section_is_held_to_the_table_rendered_again() {
        let table = md(&entries(&sample(), &criu_of));
        let readme = format!("# x\n\n{BEGIN}reports/matrix-1 -->\n{table}{END}\n\nafter\n");
        assert_eq!(
            section(&readme).unwrap(),
            ("reports/matrix-1".into(), table.clone())
        );
        check_readme(&readme, &table, "README.md").unwrap();
        // One changed figure, and the check fails naming the line and the fix.
        let stale = readme.replace("26.4 MiB", "20.0 MiB");
        let e = check_readme(&stale, &table, "README.md")
            .unwrap_err()
            .to_string();
        assert!(e.contains("first difference at line 3"), "{e}");
        assert!(
            e.contains("fix: `sharedos-rig matrix table --readme README.md --write`"),
            "{e}"
        );
        assert_eq!(replace_section(&stale, &table).unwrap(), readme);
        for (bad, says) in [
            (
                "no markers\n".to_string(),
                "no `<!-- deployment-table:begin",
            ),
            (format!("{BEGIN} -->\n{END}\n"), "names no matrix directory"),
            (
                format!("{BEGIN}d -->\n| x |\n"),
                "no `<!-- deployment-table:end -->`",
            ),
            (format!("{BEGIN}d -->\n{BEGIN}e -->\n{END}\n"), "twice"),
            (format!("{BEGIN}d --> x\n{END}\n"), "must end its line"),
        ] {
            let e = section(&bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }
}
