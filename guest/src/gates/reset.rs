//! reset: killing a copy and restoring again brings back the dump-time state.

use super::restore_live_process::check_app_state;
use super::restore_x_state::check_x_state;
use super::{check, Ctx, GateBuilder};
use crate::report::{Gate, GateName};
use serde_json::json;

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Reset);
    let Some(snap) = ctx.snapshot.clone() else {
        g.problem("no dump-time state");
        return g.finish("");
    };
    // Copy A is the one isolation changed, so its reset shows the state really comes back.
    if let Some(a) = ctx.copies.remove("a") {
        let killed = ctx.kill_tree(a);
        g.check(check(
            "copy_killed",
            killed.is_ok(),
            json!({"pid": a, "error": killed.err().map(|e| e.to_string())}),
            "the changed copy's namespace is gone",
        ));
    }
    let (pid, ev) = ctx.restore("reset");
    g.evidence(ev);
    let pid = match pid {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!(
                "restoring again: {e:#} (log: criu/restore-reset.log)"
            ));
            return g.finish("");
        }
    };
    g.data("copy_pid", json!(pid));
    check_app_state(ctx, &mut g, pid, &snap);
    match ctx.observe(pid, "reset") {
        Ok(now) => check_x_state(&mut g, &now, &snap),
        Err(e) => g.problem(format!("reading the reset copy: {e:#}")),
    }
    g.finish("after kill and restore the token, counter, window and pixels are the dump-time ones")
}
