//! reset: a copy is changed (its app's state and a mark drawn on its screen), the change is
//! observed, the copy is killed as a whole, and a new restore from the dump is back at the
//! dump-time state. Without a change of its own, a reset would only prove that a second
//! restore works.

use super::copies::{kill_step, only_when, restore_steps};
use super::state::{change_copy, check_app_state, check_x_state, obs_value};
use super::step::Step;
use super::{fidelity, workload, Config, Ctx, GateBuilder};
use crate::probe;
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::model::tree::Observation;
use sharedos_report::report::{Gate, GateName, RESET_RESTORE_MS};
use std::collections::BTreeSet;

/// What this gate runs: the changed copy (copy a, restored again first when it no longer runs)
/// killed as a whole, and a new restore.
pub fn plan(cfg: &Config) -> Vec<Step> {
    let criu = cfg.planned_criu();
    let mut v = only_when(
        "the copy a restore_live_process left no longer runs",
        restore_steps(cfg, &criu, "a", "restore copy a again, to change it"),
    );
    v.push(kill_step(
        "the changed copy",
        "SIGKILL to the changed copy's PID 1 (kill(2)): its whole pid namespace ends; then wait until no process is left in it",
    ));
    v.extend(restore_steps(cfg, &criu, "reset", "restore copy reset"));
    v
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Reset);
    let Some(snap) = ctx.snapshot.clone() else {
        g.problem("no dump-time state");
        return g.finish("");
    };
    let (target, ev) = ctx.copy_a();
    g.evidence_opt(ev);
    let target = match target {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!(
                "restoring the copy to change: {e:#} (log: criu/restore-a.log)"
            ));
            return g.finish("");
        }
    };
    g.data("changed_copy_pid", json!(target));
    let typed = change_and_look(ctx, &mut g, target, &snap);
    kill_changed(ctx, &mut g, target);
    let (pid, ev) = ctx.restore("reset");
    let ev_ms = ev.duration_ms;
    g.evidence(ev);
    let pid = match pid {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!(
                "restoring again: {e:#} (log: criu/restore-reset.log)"
            ));
            g.cause(ctx.cfg.restore_cause("reset"));
            return g.finish("");
        }
    };
    g.data("copy_pid", json!(pid));
    // The reset's own time, for a comparison to set beside a VM's reset.
    g.data(RESET_RESTORE_MS, json!(ev_ms));
    let change = typed.as_ref().map(|(_, c)| c.as_str());
    check_reset_copy(ctx, &mut g, pid, &snap, change);
    g.finish("a change of app state and pixels was seen, the changed copy killed as a whole, and the new restore has the dump-time token, counter, window and pixels")
}

/// Our own change of the copy, then a look at it: without it a reset would only prove that a
/// second restore works.
fn change_and_look(
    ctx: &Ctx,
    g: &mut GateBuilder,
    target: i32,
    snap: &Observation,
) -> Option<(String, String)> {
    let mutated = change_copy(ctx, g, target, "the copy");
    let typed = workload::change_editor(ctx, g, target, "the copy", snap);
    if ctx.cfg.options.cow_root {
        fidelity::check_write(
            ctx,
            g,
            target,
            "copy-a",
            "reset-change",
            "cow_change_written",
            &snap.app.token,
        );
    }
    match ctx.observe(target, "reset-changed") {
        Ok(o) => {
            g.check(compare::copy_changed(
                "change_seen",
                mutated.as_ref(),
                &o,
                snap,
            ));
            let name = workload::text_check(ctx.cfg.options.workload, "change_seen");
            workload::check_changed(g, &name, &o, typed.as_ref(), ctx.cfg.options.workload);
        }
        Err(e) => g.problem(format!("reading the changed copy: {e:#}")),
    }
    typed
}

/// Kills the changed copy as a whole and sees it gone: PID 1 and every process of its pid
/// namespace.
fn kill_changed(ctx: &mut Ctx, g: &mut GateBuilder, target: i32) {
    let rec = ctx.tree_record(target).cloned();
    let ns: BTreeSet<String> = rec.iter().filter_map(|r| r.pidns.clone()).collect();
    let before = probe::members(&ns).len();
    let killed = ctx.kill_tree(target);
    ctx.copies.retain(|_, p| *p != target);
    let left = probe::members(&ns);
    g.check(check(
        "copy_killed",
        killed.is_ok() && !ns.is_empty() && left.is_empty(),
        json!({"pid": target, "pidns": rec.and_then(|r| r.pidns), "processes_before": before,
               "left": left, "error": killed.err().map(|e| format!("{e:#}"))}),
        "the changed copy's PID 1 is gone and its pid namespace is empty",
    ));
}

/// The new restore is a new tree, back at the dump-time state, without the change.
fn check_reset_copy(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    snap: &Observation,
    typed_before_reset: Option<&str>,
) {
    match ctx.tree_record(pid).cloned() {
        Some(rec) => g.check(compare::fresh_copy(
            "new_copy",
            &rec,
            &ctx.other_running_trees(),
        )),
        None => g.check(check(
            "new_copy",
            false,
            json!({"pid": pid}),
            "a registered new tree",
        )),
    };
    fidelity::check_tree(ctx, g, pid, "copy-reset", "");
    if ctx.cfg.options.cow_root {
        fidelity::check_absent(
            ctx,
            g,
            pid,
            "reset-change",
            "cow_file_discarded",
            &snap.app.token,
        );
    }
    g.check(ctx.check_x_server_in_tree("x_server_in_copy", pid));
    check_app_state(ctx, g, pid, snap, "");
    workload::check_copy_state(ctx, g, pid, snap, "", typed_before_reset);
    match ctx.observe(pid, "reset") {
        Ok(now) => {
            check_x_state(g, &now, snap, "");
            g.check(check(
                "no_mark",
                !now.mark_drawn,
                json!({"mark_drawn": now.mark_drawn, "png": now.png}),
                "the reset copy does not show the mark drawn before the reset",
            ));
            g.data("reset_state", obs_value(&now));
        }
        Err(e) => g.problem(format!("reading the reset copy: {e:#}")),
    }
}
