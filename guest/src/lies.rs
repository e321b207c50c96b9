//! The lying-CRIU suite: a criu stand-in that passes every call through to the real criu but
//! one, where it lies in one way; and the suite that runs the whole diagnostic once per lie and
//! checks that the gate which looks at the broken fact FAILs naming what it saw, that the gates
//! the lie does not touch still PASS, and that cleanup still PASSes with nothing left.
//!
//! Here: the lies, and how a report is judged against one; `wrapper`: the criu stand-in;
//! `suite`: the suite that runs them.

mod suite;
mod wrapper;

pub use suite::{chosen_lies, suite_main, LieOutcome, SuiteConfig, SuiteResult};
pub use wrapper::{hits, outside_userns_argv, restore_label, wrapper_main, wrapper_script};

use serde::Serialize;
use sharedos_report::report::{GateName, Report, Status, Workload};

/// One lie: the criu call it hits, what it does there, the gate that must catch it and the
/// checks of that gate at least one of which must fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Lie {
    pub name: &'static str,
    pub does: &'static str,
    pub target: GateName,
    pub caught_by: &'static [&'static str],
    /// Options of `diagnose` the run under this lie needs (a lie about a fidelity option).
    pub options: &'static [&'static str],
}

pub const LIES: [Lie; 22] = [
    Lie {
        name: "dump-writes-nothing",
        does: "`criu dump` exits 0 without dumping: no image, the tree keeps running",
        target: GateName::Dump,
        caught_by: &[
            "images_written",
            "pstree_matches_tree",
            "original_tree_ended",
        ],
        options: &[],
    },
    Lie {
        name: "dump-leaves-tree-running",
        does:
            "`criu dump` dumps with --leave-running: the images are there, the tree was never ended",
        target: GateName::Dump,
        caught_by: &["original_tree_ended"],
        options: &[],
    },
    Lie {
        name: "dump-drops-a-process",
        does: "`criu dump` succeeds, then the last process is cut out of pstree.img",
        target: GateName::Dump,
        caught_by: &["pstree_matches_tree"],
        options: &[],
    },
    Lie {
        name: "restore-a-restores-nothing",
        does: "the restore of copy a exits 0 without restoring anything",
        target: GateName::RestoreLiveProcess,
        caught_by: &["criu_restore_succeeded"],
        options: &[],
    },
    Lie {
        name: "restore-a-wrong-app-state",
        does: "copy a is restored, then its app is changed (new token, counter jumped)",
        target: GateName::RestoreLiveProcess,
        caught_by: &["same_token", "counter_continues"],
        options: &[],
    },
    Lie {
        name: "restore-a-wrong-pixels",
        does: "copy a is restored, then a blue rectangle is painted on its screen",
        target: GateName::RestoreXState,
        caught_by: &["same_framebuffer"],
        options: &[],
    },
    Lie {
        name: "restore-a-extra-window",
        does: "copy a is restored, then a window the dump never had is mapped on its screen",
        target: GateName::RestoreXState,
        caught_by: &["same_windows"],
        options: &[],
    },
    Lie {
        name: "restore-b-is-copy-a",
        does: "the restore of copy b exits 0 and hands back copy a's PID 1",
        target: GateName::Isolation,
        caught_by: &["two_copies_running", "own_namespaces"],
        options: &[],
    },
    Lie {
        name: "restore-b-wrong-app-state",
        does: "copy b is restored, then its app is changed: B does not hold the dump-time state",
        target: GateName::Isolation,
        caught_by: &["b_same_token", "b_counter_continues"],
        options: &[],
    },
    Lie {
        name: "restore-reset-is-copy-b",
        does: "the restore for reset exits 0 and hands back copy b, which still runs unchanged",
        target: GateName::Reset,
        caught_by: &["new_copy"],
        options: &[],
    },
    Lie {
        name: "restore-reset-wrong-app-state",
        does: "the reset copy is restored, then its app is changed",
        target: GateName::Reset,
        caught_by: &["same_token", "counter_continues"],
        options: &[],
    },
    Lie {
        name: "restore-b-without-cgroup-limits",
        does: "copy b is restored into its own cgroup, then the group's cpu.max and memory.max are lifted to max",
        target: GateName::Isolation,
        caught_by: &["b_cgroup_limits"],
        options: &["--cgroup", "cpu=1,memory=512M"],
    },
    Lie {
        name: "restore-b-shares-a-root",
        does: "copy b is restored onto copy a's writable root instead of its own: one upper layer for both",
        target: GateName::Isolation,
        caught_by: &["b_cow_file_absent"],
        options: &["--cow-root"],
    },
    Lie {
        name: "restore-b-process-outside-userns",
        does: "copy b is restored, then a process is started in its pid namespace but in the machine's user namespace, with root's whole map",
        target: GateName::Isolation,
        caught_by: &["b_userns_mapped"],
        options: &["--userns"],
    },
    Lie {
        name: "restore-b-editor-shows-typed-text",
        does: "copy b is restored, then text is typed at the end of its editor's text, as if what is typed into copy a reached it",
        target: GateName::Isolation,
        caught_by: &["b_editor_same_text"],
        options: &["--workload", "desktop"],
    },
    Lie {
        name: "restore-reset-editor-lost-text",
        does: "the reset copy is restored, then its editor's whole text is selected and deleted",
        target: GateName::Reset,
        caught_by: &["editor_same_text"],
        options: &["--workload", "desktop"],
    },
    Lie {
        name: "restore-b-workspace-switched",
        does: "copy b is restored, then its window manager is asked (as a pager asks) to show another workspace, as if copy a's switch reached it",
        target: GateName::Isolation,
        caught_by: &["b_workspace_same"],
        options: &["--workload", "session"],
    },
    Lie {
        name: "restore-reset-workspace-first",
        does: "the reset copy is restored, then its window manager is asked to show the first workspace, as a freshly started session would",
        target: GateName::Reset,
        caught_by: &["workspace_same"],
        options: &["--workload", "session"],
    },
    Lie {
        name: "restore-b-page-field-shows-typed-text",
        does: "copy b is restored, then text is typed at the end of its page's field, as if what is typed into copy a reached it",
        target: GateName::Isolation,
        caught_by: &["b_page_field_same_text"],
        options: &["--workload", "chromium-nosandbox"],
    },
    Lie {
        name: "density-copy-wrong-token",
        does: "the second density copy is restored, then its app is changed: one copy of the two answers another token",
        target: GateName::Density,
        caught_by: &["all_same_token", "all_counters_continue"],
        options: &["--copies", "2"],
    },
    Lie {
        name: "restore-b-office-shows-typed-text",
        does: "copy b is restored, then text is typed at the end of its Writer document, as if what is typed into copy a reached it",
        target: GateName::Isolation,
        caught_by: &["b_office_same_text"],
        options: &["--workload", "office"],
    },
    Lie {
        name: "restore-reset-office-lost-text",
        does: "the reset copy is restored, then its Writer document's whole text is selected and deleted",
        target: GateName::Reset,
        caught_by: &["office_same_text"],
        options: &["--workload", "office"],
    },
];

/// The lies as a Markdown table: the lie, the gate that catches it, and the checks it reports.
pub fn table_markdown() -> String {
    let mut t = String::from("| lie | what the wrapper does | caught by | failing check (one of) |\n| --- | --- | --- | --- |\n");
    for l in LIES {
        t.push_str(&format!(
            "| `{}` | {}{} | {} | {} |\n",
            l.name,
            l.does.replace('|', "\\|"),
            if l.options.is_empty() {
                String::new()
            } else {
                format!(" (diagnose runs with `{}`)", l.options.join(" "))
            },
            l.target,
            l.caught_by
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    t
}

/// The workload a lie's run needs (`--workload` among its options), the default otherwise.
pub fn lie_workload(lie: &Lie) -> Workload {
    lie.options
        .windows(2)
        .find(|w| w[0] == "--workload")
        .and_then(|w| Workload::parse(w[1]))
        .unwrap_or_default()
}

pub fn lie(name: &str) -> Option<Lie> {
    LIES.iter().copied().find(|l| l.name == name)
}

/// What every gate must end as when `lie` is told: the target FAILs; the gates before it PASS;
/// after a dump lie the restore gates cannot run; the review waits for a human; cleanup PASSes.
/// A lie about copy a's restore leaves restore_x_state without a copy when nothing came back.
pub fn expected_status(lie: &Lie, gate: GateName) -> Status {
    if gate == lie.target {
        return Status::Fail;
    }
    match gate {
        GateName::GuiPixelReview => Status::ReviewRequired,
        g if lie.target == GateName::Dump && g.needs_criu() => Status::NotRun,
        GateName::RestoreXState if lie.name == "restore-a-restores-nothing" => Status::NotRun,
        _ => Status::Pass,
    }
}

/// Everything wrong with a report of a run under `lie`; empty when the lie was caught as it
/// must be.
pub fn judge(lie: &Lie, r: &Report) -> Vec<String> {
    let mut problems = Vec::new();
    for name in GateName::sequence(lie.target == GateName::Density) {
        let want = expected_status(lie, name);
        match r.gate(name) {
            None => problems.push(format!("{name} is missing from the report")),
            Some(g) if g.status != want => problems.push(format!(
                "{name} is {} (expected {want}): {}",
                g.status, g.reason
            )),
            Some(_) => {}
        }
    }
    if let Some(g) = r.gate(lie.target) {
        let failed: Vec<&str> = g
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        if !failed.iter().any(|f| lie.caught_by.contains(f)) {
            problems.push(format!(
                "{} did not fail any of {:?} (failed: {failed:?})",
                lie.target, lie.caught_by
            ));
        }
        // The reason names the failed check; the check itself carries what was seen.
        let named = failed
            .iter()
            .any(|f| lie.caught_by.contains(f) && g.reason.contains(f));
        if !named {
            problems.push(format!(
                "{}'s reason does not name the failed check: {}",
                lie.target, g.reason
            ));
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;
    use sharedos_report::report::{Check, Gate};

    #[test]
    fn every_criu_gate_is_the_target_of_a_lie() {
        for g in GateName::ALL.iter().filter(|g| g.needs_criu()) {
            assert!(LIES.iter().any(|l| l.target == *g), "{g} has no lie");
        }
        assert!(LIES.len() >= 8);
        let mut names: Vec<&str> = LIES.iter().map(|l| l.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), LIES.len());
    }

    fn report_for(lie: &Lie, failed_check: &str) -> Report {
        let gates = GateName::ALL
            .iter()
            .map(|n| {
                let mut g = Gate::new(*n, expected_status(lie, *n), "fine");
                if *n == lie.target {
                    g.checks.push(Check {
                        name: failed_check.into(),
                        passed: false,
                        value: serde_json::json!(1),
                        expected: "2".into(),
                    });
                    g.reason = format!("{failed_check} failed: expected 2, saw 1");
                }
                g
            })
            .collect();
        Report {
            schema_version: sharedos_report::report::SCHEMA_VERSION,
            marker: "m".into(),
            all_gates_pass: false,
            exit_code: 1,
            gates,
            environment: Default::default(),
            artifacts: vec![],
            fidelity_differences: vec![],
            options: Default::default(),
            vm: None,
        }
    }

    #[test]
    fn judging_a_caught_lie_and_an_uncaught_one() {
        let lie = lie("restore-a-wrong-pixels").unwrap();
        assert!(judge(&lie, &report_for(&lie, "same_framebuffer")).is_empty());
        let wrong_check = judge(&lie, &report_for(&lie, "x_answers"));
        assert!(
            !wrong_check.is_empty(),
            "failing for another reason is not catching the lie"
        );
        let mut passed = report_for(&lie, "same_framebuffer");
        passed.gates[5].status = Status::Pass;
        passed.gates[5].checks.clear();
        assert!(judge(&lie, &passed).len() >= 2);
        let mut collateral = report_for(&lie, "same_framebuffer");
        collateral.gates[7].status = Status::Fail;
        let p = judge(&lie, &collateral);
        assert!(p.iter().any(|m| m.starts_with("reset is FAIL")), "{p:?}");
        let mut dirty = report_for(&lie, "same_framebuffer");
        dirty.gates[9].status = Status::Fail;
        assert!(judge(&lie, &dirty).iter().any(|m| m.starts_with("cleanup")));
    }

    #[test]
    fn the_table_has_a_row_per_lie() {
        let t = table_markdown();
        assert_eq!(t.lines().count(), LIES.len() + 2);
        assert!(t.contains("| `restore-reset-is-copy-b` |"));
        assert!(t.contains("| reset | `new_copy` |"));
        assert!(
            include_str!("../../docs/reports.md").contains(&t),
            "docs/reports.md's lie table is not the suite's: replace it with the output of \
             `cargo run -p sharedos-gate -- lie-suite --list`"
        );
    }

    #[test]
    fn the_chromium_field_lie_runs_chromium_nosandbox_and_is_caught_by_copy_b_s_field() {
        let lie = lie("restore-b-page-field-shows-typed-text").unwrap();
        assert_eq!(lie_workload(&lie), Workload::ChromiumNosandbox);
        assert_eq!(lie.target, GateName::Isolation);
        assert!(judge(&lie, &report_for(&lie, "b_page_field_same_text")).is_empty());
        assert!(!judge(&lie, &report_for(&lie, "b_page_same_token")).is_empty());
    }

    #[test]
    fn a_dump_lie_leaves_the_restore_gates_not_run() {
        let lie = lie("dump-writes-nothing").unwrap();
        assert_eq!(expected_status(&lie, GateName::Dump), Status::Fail);
        assert_eq!(expected_status(&lie, GateName::Reset), Status::NotRun);
        assert_eq!(
            expected_status(&lie, GateName::LiveStateProbe),
            Status::Pass
        );
        assert_eq!(expected_status(&lie, GateName::Cleanup), Status::Pass);
    }

    #[test]
    fn the_density_lie_runs_with_copies_and_is_judged_on_the_density_gate() {
        let lie = lie("density-copy-wrong-token").unwrap();
        assert_eq!(lie.options, ["--copies", "2"]);
        assert!(LIES
            .iter()
            .filter(|l| l.target != GateName::Density)
            .all(|l| !l.options.contains(&"--copies")));
        // A report of the ten gates lacks the density gate the lie is caught by.
        let p = judge(&lie, &report_for(&lie, "all_same_token"));
        assert!(
            p.iter().any(|m| m.starts_with("density is missing")),
            "{p:?}"
        );
        let with = |density: Gate| {
            let mut r = report_for(&lie, "all_same_token");
            r.insert_gate(density);
            r
        };
        let mut caught = Gate::new(GateName::Density, Status::Fail, "all_same_token failed: x");
        caught.checks.push(Check {
            name: "all_same_token".into(),
            passed: false,
            value: serde_json::json!({"failed": [{"copy": "density-2"}]}),
            expected: "the dump-time token".into(),
        });
        assert!(judge(&lie, &with(caught.clone())).is_empty());
        let mut missed = caught;
        missed.status = Status::Pass;
        missed.checks[0].passed = true;
        assert!(!judge(&lie, &with(missed)).is_empty());
    }
}
