//! cleanup: ends every tree of the run as a whole (SIGKILL to its PID 1 takes its pid namespace
//! down), then anything else carrying the marker, and proves that no tree's PID 1, no process in
//! any tree's pid namespace and no marked process is left. Lists what was ended, what had to be
//! force-killed, what stayed, and every step that went wrong.

use super::copies::kill_step;
use super::copies::{kill_tree_pid1, reap_children, wait_tree_gone};
use super::step::{Kind, Step};
use super::{Config, Ctx, GateBuilder};
use crate::probe::{self, NsMember, TreeRecordExt};
use crate::tree;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::{json, Value};
use sharedos_report::compare::check;
use sharedos_report::model::tree::{MarkedProcess, TreeRecord};
use sharedos_report::report::{Gate, GateName};
use sharedos_report::wait;
use std::collections::BTreeSet;
use std::time::Duration;

fn listing(ps: &[MarkedProcess]) -> Value {
    json!(ps
        .iter()
        .map(|p| json!({"pid": p.pid, "program": p.program(), "cmdline": p.cmdline, "pidns": p.pidns}))
        .collect::<Vec<_>>())
}

fn members_listing(ms: &[NsMember]) -> Value {
    json!(ms
        .iter()
        .map(|m| json!({"pid": m.pid, "comm": m.comm, "state": m.state, "pidns": m.pidns}))
        .collect::<Vec<_>>())
}

/// Sends `sig`, keeping every failure but "no such process" (it ended on its own meanwhile).
fn signal(pid: i32, sig: Signal, failures: &mut Vec<String>) {
    match kill(Pid::from_raw(pid), sig) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
        Err(e) => failures.push(format!("{sig} to pid {pid}: {e}")),
    }
}

/// Waits, through any interruption of the run, until no marked process is left.
fn wait_unmarked(marker: &str, timeout: Duration) -> Vec<MarkedProcess> {
    let res = wait::until_through_signals("marked processes to exit", timeout, || {
        reap_children();
        probe::scan(marker).is_empty().then_some(())
    });
    reap_children();
    match res {
        Ok(()) => Vec::new(),
        Err(_) => probe::scan(marker),
    }
}

/// What the final look at the machine found; cleanup passes only when all of it is empty.
#[derive(Debug, Default)]
pub struct Leftovers {
    /// Trees whose PID 1 still heads its recorded namespace.
    pub pid1_running: Vec<TreeRecord>,
    /// Trees whose namespace was never read: nothing proves they are gone.
    pub pidns_unknown: Vec<TreeRecord>,
    pub in_tree_namespaces: Vec<NsMember>,
    pub marked: Vec<MarkedProcess>,
}

/// The cleanup checks from one final look; pure, so tests can feed it leftovers.
pub fn leftover_checks(
    trees: &[TreeRecord],
    left: &Leftovers,
    failures: &[String],
) -> Vec<sharedos_report::report::Check> {
    let running: Vec<Value> = left
        .pid1_running
        .iter()
        .chain(left.pidns_unknown.iter())
        .map(|t| json!({"label": t.label, "pid": t.pid, "pidns": t.pidns}))
        .collect();
    vec![
        check(
            "every_tree_pid1_gone",
            left.pid1_running.is_empty() && left.pidns_unknown.is_empty(),
            json!({"trees": trees, "still_running_or_unproven": running}),
            &format!(
                "none of the {} trees' PID 1 runs, and each one's pid namespace was recorded",
                trees.len()
            ),
        ),
        check(
            "tree_namespaces_empty",
            left.in_tree_namespaces.is_empty(),
            members_listing(&left.in_tree_namespaces),
            "no process in any tree's pid namespace",
        ),
        check(
            "no_marker_process_left",
            left.marked.is_empty(),
            listing(&left.marked),
            "no process carrying the marker",
        ),
        check(
            "no_cleanup_failures",
            failures.is_empty(),
            json!(failures),
            "every signal delivered and every process's command line and environment readable",
        ),
    ]
}

/// What this gate does: every tree ended through its PID 1, then whatever else carries the
/// marker. All in-process (kill(2)); the plan shows the equivalent commands.
pub fn plan(cfg: &Config) -> Vec<Step> {
    vec![
        kill_step(
            "each tree",
            "SIGKILL to each tree's PID 1 (kill(2)): its whole pid namespace ends; then wait until no process is left in it",
        ),
        Step::described(
            Kind::KillMarked,
            "then SIGTERM, then SIGKILL, to any other process whose cmdline or environ carries the marker (kill(2))",
            vec![
                "kill".into(),
                "-TERM".into(),
                format!("<pids marked {}>", cfg.marker),
            ],
        ),
    ]
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Cleanup);
    let bound = ctx.cfg.step_timeout.min(Duration::from_secs(20));
    let mut failures: Vec<String> = Vec::new();
    // Keep the programs' own logs before their private /tmp goes away.
    let spec = ctx.cfg.spec();
    for t in ctx.trees.iter().filter(|t| !t.ended && t.pid1_running()) {
        for mut e in tree::log_evidence(&spec, t.pid) {
            e.step = format!("{} ({})", e.step, t.label);
            g.evidence(e);
        }
    }
    let (running, already_ended) = end_trees(ctx, &mut g, bound, &mut failures);
    let (terminated, force_killed) = end_marked(&ctx.cfg.marker, bound, &mut failures);
    let left = final_look(ctx, &mut g, &running, &mut failures);
    ctx.tree = None;
    ctx.copies.clear();
    if ctx.cfg.options.cgroup.is_some() {
        remove_groups(ctx, &mut g, bound, &mut failures);
    }
    g.data("terminated", listing(&terminated));
    g.data("force_killed", listing(&force_killed));
    g.data("left", listing(&left.marked));
    let trees = ctx.trees.clone();
    for c in leftover_checks(&trees, &left, &failures) {
        g.check(c);
    }
    if ctx.cfg.root_bind().exists() {
        let _ = nix::mount::umount2(&ctx.cfg.root_bind(), nix::mount::MntFlags::MNT_DETACH);
    }
    let (n, e, t, k) = (
        running.len(),
        already_ended,
        terminated.len(),
        force_killed.len(),
    );
    g.finish(&format!(
        "{n} trees ended here through their PID 1 and their pid namespaces are empty ({e} more were seen gone earlier in the run); no marked process left ({t} other ended on SIGTERM, {k} needed SIGKILL)"
    ))
}

/// Ends each tree still running as a whole: what its namespace held, SIGKILL to its PID 1 (all
/// of them first, so no wait holds up another tree's end), then the wait until its namespace is
/// empty. Trees already seen gone during the run are listed, not looked for. Returns the trees
/// that were running, and how many were already gone.
fn end_trees(
    ctx: &mut Ctx,
    g: &mut GateBuilder,
    bound: Duration,
    failures: &mut Vec<String>,
) -> (Vec<TreeRecord>, usize) {
    let (already_ended, running): (Vec<TreeRecord>, Vec<TreeRecord>) =
        ctx.trees.iter().cloned().partition(|t| t.ended);
    let mut ended = Vec::new();
    for t in &running {
        let ns: BTreeSet<String> = t.pidns.iter().cloned().collect();
        let before = probe::members(&ns);
        let was_running = t.pid1_running();
        if was_running {
            if let Err(e) = kill_tree_pid1(t) {
                failures.push(format!("{e:#}"));
            }
        }
        ended.push(json!({"label": t.label, "pid": t.pid, "pidns": t.pidns,
                          "was_running": was_running, "processes": members_listing(&before)}));
    }
    for t in &running {
        match wait_tree_gone(t, bound, true) {
            Ok(()) => ctx.mark_ended(t.pid),
            Err(e) => failures.push(e.to_string()),
        }
    }
    g.data("trees_killed", json!(ended));
    g.data("trees_ended_before_cleanup", json!(already_ended));
    (running, already_ended.len())
}

/// Anything else with the marker (outside every tree, as a half-started spawn, or escaped):
/// SIGTERM, then SIGKILL to what stays. Returns what ended on SIGTERM and what needed SIGKILL.
fn end_marked(
    marker: &str,
    bound: Duration,
    failures: &mut Vec<String>,
) -> (Vec<MarkedProcess>, Vec<MarkedProcess>) {
    let found = probe::census(marker).marked;
    for p in &found {
        signal(p.pid, Signal::SIGTERM, failures);
    }
    let after_term = wait_unmarked(marker, bound);
    for p in &after_term {
        signal(p.pid, Signal::SIGKILL, failures);
    }
    let still = wait_unmarked(marker, bound);
    let terminated = found
        .iter()
        .filter(|p| !after_term.iter().any(|q| q.pid == p.pid))
        .cloned()
        .collect();
    let force_killed = after_term
        .iter()
        .filter(|p| !still.iter().any(|q| q.pid == p.pid))
        .cloned()
        .collect();
    (terminated, force_killed)
}

/// The final look, on its own: nothing before it is trusted to have worked.
fn final_look(
    ctx: &Ctx,
    g: &mut GateBuilder,
    running: &[TreeRecord],
    failures: &mut Vec<String>,
) -> Leftovers {
    reap_children();
    let all_ns: BTreeSet<String> = running.iter().filter_map(|t| t.pidns.clone()).collect();
    let last = probe::census(&ctx.cfg.marker);
    let left = Leftovers {
        pid1_running: running
            .iter()
            .filter(|t| t.pidns.is_some() && t.pid1_running())
            .cloned()
            .collect(),
        pidns_unknown: running
            .iter()
            .filter(|t| t.pidns.is_none() && t.pid1_running())
            .cloned()
            .collect(),
        in_tree_namespaces: probe::members(&all_ns),
        marked: last.marked,
    };
    if nix::unistd::geteuid().is_root() {
        failures.extend(last.unreadable);
    } else {
        // Without root other users' environments are closed to us; no tree can have started
        // either (launch needs root), so nothing of this run can hide there.
        g.data("unreadable_without_root", json!(last.unreadable.len()));
    }
    left
}

/// A group empties a moment after its last process is reaped: removal is retried until it
/// succeeds or the bound passes, and what stays is a cleanup failure.
fn remove_groups(ctx: &Ctx, g: &mut GateBuilder, bound: Duration, failures: &mut Vec<String>) {
    let mut left_groups = Vec::new();
    let removed = wait::until_through_signals("the run's cgroups to be removed", bound, || {
        left_groups = super::fidelity::remove_run_groups(&ctx.cfg.marker);
        left_groups.is_empty().then_some(())
    });
    if removed.is_err() {
        failures.extend(left_groups.iter().cloned());
    }
    g.data("cgroups_not_removed", json!(left_groups));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(label: &str, pidns: Option<&str>) -> TreeRecord {
        TreeRecord {
            label: label.into(),
            pid: 4242,
            pidns: pidns.map(str::to_string),
            ended: false,
        }
    }

    fn verdicts(left: &Leftovers, failures: &[String]) -> Vec<(String, bool)> {
        leftover_checks(&[tree("original", Some("pid:[1]"))], left, failures)
            .into_iter()
            .map(|c| (c.name, c.passed))
            .collect()
    }

    fn failed(left: &Leftovers, failures: &[String]) -> Vec<String> {
        verdicts(left, failures)
            .into_iter()
            .filter(|(_, ok)| !ok)
            .map(|(n, _)| n)
            .collect()
    }

    #[test]
    fn nothing_left_passes_every_check() {
        assert!(failed(&Leftovers::default(), &[]).is_empty());
    }

    #[test]
    fn a_running_pid1_fails() {
        let left = Leftovers {
            pid1_running: vec![tree("copy a", Some("pid:[2]"))],
            ..Default::default()
        };
        assert_eq!(failed(&left, &[]), ["every_tree_pid1_gone"]);
        let left = Leftovers {
            pidns_unknown: vec![tree("copy b", None)],
            ..Default::default()
        };
        assert_eq!(failed(&left, &[]), ["every_tree_pid1_gone"]);
    }

    #[test]
    fn an_unmarked_process_in_a_tree_namespace_fails() {
        let left = Leftovers {
            in_tree_namespaces: vec![NsMember {
                pid: 77,
                pidns: "pid:[1]".into(),
                comm: "sleep".into(),
                state: "S".into(),
            }],
            ..Default::default()
        };
        assert_eq!(failed(&left, &[]), ["tree_namespaces_empty"]);
    }

    #[test]
    fn a_marked_process_or_a_failure_fails() {
        let left = Leftovers {
            marked: vec![MarkedProcess {
                pid: 9,
                ppid: 1,
                comm: "xterm".into(),
                cmdline: vec!["xterm".into()],
                marker_in: vec!["environ".into()],
                pidns: None,
                ns_pid: None,
                pidns_parents: Vec::new(),
            }],
            ..Default::default()
        };
        assert_eq!(failed(&left, &[]), ["no_marker_process_left"]);
        assert_eq!(
            failed(
                &Leftovers::default(),
                &["/proc/9/environ: Permission denied".to_string()]
            ),
            ["no_cleanup_failures"]
        );
    }
}
