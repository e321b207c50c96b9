//! isolation: two copies from one dump run at once in their own namespaces; changing the app and
//! the screen of one leaves the other at the dump-time state.

use super::copies::{only_when, restore_steps};
use super::state::{change_copy, check_app_state, check_x_state, obs_value};
use super::step::Step;
use super::{fidelity, workload, Config, Ctx, GateBuilder};
use crate::probe::{all_differ, is_live, namespaces_of};
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::model::tree::Observation;
use sharedos_report::report::{Gate, GateName};

/// What this gate runs: copy b restored beside copy a (and copy a again first, when it no
/// longer runs).
pub fn plan(cfg: &Config) -> Vec<Step> {
    let criu = cfg.planned_criu();
    let mut v = only_when(
        "the copy a restore_live_process left no longer runs",
        restore_steps(cfg, &criu, "a", "restore copy a again"),
    );
    v.extend(restore_steps(cfg, &criu, "b", "restore copy b"));
    v
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Isolation);
    let Some(snap) = ctx.snapshot.clone() else {
        g.problem("no dump-time state");
        return g.finish("");
    };
    let (a, ev) = ctx.copy_a();
    g.evidence_opt(ev);
    let a = match a {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!("restoring copy A: {e:#}"));
            return g.finish("");
        }
    };
    let (b, ev) = ctx.restore("b");
    g.evidence(ev);
    let b = match b {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!(
                "restoring copy B beside A: {e:#} (log: criu/restore-b.log)"
            ));
            g.cause(ctx.cfg.restore_cause("b"));
            return g.finish("");
        }
    };
    g.data("copy_a_pid", json!(a));
    g.data("copy_b_pid", json!(b));
    check_apart(ctx, &mut g, a, b, &snap);
    let mutated = change_copy(ctx, &mut g, a, "copy A");
    let typed_into_a = workload::change_editor(ctx, &mut g, a, "copy A", &snap);
    g.check(ctx.check_x_server_in_tree("a_x_server_in_copy", a));
    g.check(ctx.check_x_server_in_tree("b_x_server_in_copy", b));
    match ctx.observe(a, "isolation-a") {
        Ok(oa) => {
            g.check(compare::copy_changed(
                "a_changed",
                mutated.as_ref(),
                &oa,
                &snap,
            ));
            let name = format!(
                "a_{}",
                workload::text_check(ctx.cfg.options.workload, "changed")
            );
            workload::check_changed(
                &mut g,
                &name,
                &oa,
                typed_into_a.as_ref(),
                ctx.cfg.options.workload,
            );
        }
        Err(e) => g.problem(format!("reading copy A after the change: {e:#}")),
    }
    let change = typed_into_a.as_ref().map(|(_, c)| c.as_str());
    check_b_unchanged(ctx, &mut g, b, &snap, change);
    g.finish(
        "two copies ran at once in separate namespaces; changing A left B at the dump-time state",
    )
}

/// Both copies run at once, each a tree of its own: its own namespaces and, with the options,
/// its own cgroup, user namespace and writable root.
fn check_apart(ctx: &Ctx, g: &mut GateBuilder, a: i32, b: i32, snap: &Observation) {
    g.check(check(
        "two_copies_running",
        a != b && is_live(a) && is_live(b),
        json!({"a": a, "b": b}),
        "both copies alive at once",
    ));
    let cg_a = fidelity::check_tree(ctx, g, a, "copy-a", "a_");
    let cg_b = fidelity::check_tree(ctx, g, b, "copy-b", "b_");
    if ctx.cfg.options.cgroup.is_some() {
        g.check(fidelity::own_cgroups_check(
            cg_a.as_deref(),
            cg_b.as_deref(),
        ));
    }
    if ctx.cfg.options.userns {
        g.check(fidelity::own_userns_check(a, b));
    }
    if ctx.cfg.options.cow_root {
        let t = &snap.app.token;
        fidelity::check_write(ctx, g, a, "copy-a", "copy-a", "a_cow_file_written", t);
        fidelity::check_absent(ctx, g, b, "copy-a", "b_cow_file_absent", t);
    }
    let (na, nb) = (namespaces_of(&a.to_string()), namespaces_of(&b.to_string()));
    g.check(check(
        "own_namespaces",
        all_differ(&na, &nb),
        json!({"a": na, "b": nb}),
        "no namespace shared between the copies",
    ));
}

/// Copy B, read after A changed, is compared in full with the dump-time state.
fn check_b_unchanged(
    ctx: &Ctx,
    g: &mut GateBuilder,
    b: i32,
    snap: &Observation,
    typed_into_a: Option<&str>,
) {
    check_app_state(ctx, g, b, snap, "b_");
    workload::check_copy_state(ctx, g, b, snap, "b_", typed_into_a);
    match ctx.observe(b, "isolation-b") {
        Ok(ob) => {
            check_x_state(g, &ob, snap, "b_");
            g.check(check(
                "b_no_mark",
                !ob.mark_drawn,
                json!({"mark_drawn": ob.mark_drawn, "png": ob.png}),
                "copy B does not show the mark drawn into A",
            ));
            g.data("b_state", obs_value(&ob));
        }
        Err(e) => g.problem(format!("reading copy B after A changed: {e:#}")),
    }
}
