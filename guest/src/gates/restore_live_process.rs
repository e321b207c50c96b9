//! restore_live_process: a copy restored from the dump has the app's token, and its counter
//! continues from the dump-time value.

use super::{Ctx, GateBuilder};
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::model::tree::Observation;
use sharedos_report::report::{Gate, GateName};

/// Checks that a copy's app holds the dump-time state: same token, counter continuing (not
/// restarted, not jumped) and still advancing under the same token. `prefix` names the copy in
/// the check names when a gate looks at more than one.
pub fn check_app_state(ctx: &Ctx, g: &mut GateBuilder, pid: i32, snap: &Observation, prefix: &str) {
    let first = match ctx.app(pid, "get") {
        Ok(s) => s,
        Err(e) => {
            g.problem(format!("the restored app did not answer: {e:#}"));
            return;
        }
    };
    g.check(compare::same_token(
        &format!("{prefix}same_token"),
        &snap.app.token,
        &first.token,
    ));
    g.check(compare::counter_continues(
        &format!("{prefix}counter_continues"),
        snap.app.counter,
        snap.app_asked_at.elapsed(),
        first.counter,
    ));
    let next = ctx.counter_above(pid, first.counter);
    g.check(compare::counter_advances(
        &format!("{prefix}counter_advances"),
        &first,
        next.as_ref().map_err(|e| e.to_string()),
    ));
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::RestoreLiveProcess);
    let Some(snap) = ctx.snapshot.clone() else {
        g.problem("no dump-time state");
        return g.finish("");
    };
    let (pid, ev) = ctx.restore("a");
    let ok = pid.is_ok();
    g.data("restore_ms", json!(ev.duration_ms));
    g.require(
        check(
            "criu_restore_succeeded",
            ok,
            json!({"exit_code": ev.exit_code, "copy_pid": pid.as_ref().map_err(|e| format!("{e:#}"))}),
            "exit 0 and a pidfile naming PID 1 of a new pid namespace",
        ),
        || match &pid {
            Err(e) => format!(
                "criu_restore_succeeded failed: criu restore of copy a gave no running copy: {e:#} (log: criu/restore-a.log)"
            ),
            Ok(_) => String::new(),
        },
    );
    g.evidence(ev);
    let Ok(pid) = pid else {
        return g.finish("");
    };
    g.data("copy_pid", json!(pid));
    check_app_state(ctx, &mut g, pid, &snap, "");
    super::check_no_network_lock_left(ctx, &mut g, pid);
    g.finish("the restored app has the dump-time token and its counter continues from the dump-time value; no CRIU network lock left behind")
}
