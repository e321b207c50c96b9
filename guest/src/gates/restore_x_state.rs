//! restore_x_state: the restored X server answers, lists the same mapped window with the same
//! title, and its framebuffer has the dump-time pixels.

use super::state::{check_x_state, obs_value};
use super::{Ctx, GateBuilder};
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::report::{Gate, GateName, Status};

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::RestoreXState);
    let (Some(snap), Some(pid)) = (ctx.snapshot.clone(), ctx.copies.get("a").copied()) else {
        return Gate::new(
            GateName::RestoreXState,
            Status::NotRun,
            "no restored copy: the restore in restore_live_process did not succeed",
        );
    };
    let vendor = ctx.x(pid, "X handshake", |c| Ok(c.vendor()));
    g.check(check(
        "x_answers",
        vendor.is_ok(),
        json!(vendor.as_ref().map_err(|e| format!("{e:#}"))),
        "the restored X server completes a handshake",
    ));
    g.check(ctx.check_x_server_in_tree("x_server_in_copy", pid));
    match ctx.observe(pid, "restored-a") {
        Ok(now) => {
            check_x_state(&mut g, &now, &snap, "");
            g.data("restored_state", obs_value(&now));
        }
        Err(e) => g.problem(format!("reading the restored copy: {e:#}")),
    }
    g.finish("the restored X server lists the same window and shows the dump-time pixels")
}
