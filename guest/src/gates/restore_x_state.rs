//! restore_x_state: the restored X server answers, lists the same mapped window with the same
//! title, and its framebuffer has the dump-time pixels.

use super::{obs_value, Ctx, GateBuilder};
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::model::tree::Observation;
use sharedos_report::report::{Gate, GateName, Status};

/// Compares a copy's X state with the dump-time one. `prefix` names the copy in the check names
/// when a gate looks at more than one.
pub fn check_x_state(g: &mut GateBuilder, now: &Observation, snap: &Observation, prefix: &str) {
    g.check(compare::same_windows(
        &format!("{prefix}same_windows"),
        &snap.windows,
        &now.windows,
    ));
    g.check(compare::same_framebuffer(
        &format!("{prefix}same_framebuffer"),
        (&snap.frame_sha256, &snap.png),
        (&now.frame_sha256, &now.png),
        "the dump-time pixels",
    ));
}

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
