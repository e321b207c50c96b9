//! The checks that a running copy holds the dump-time state: its app (token, counter) and its X
//! server (windows, pixels). restore_live_process and restore_x_state make them on copy A;
//! isolation and reset make them again on the copies they restore.

use super::{Ctx, GateBuilder, MARK, MARK_RGB};
use serde_json::{json, Value};
use sharedos_report::compare;
use sharedos_report::model::app::AppState;
use sharedos_report::model::tree::Observation;

/// Records an observation as a check value.
pub fn obs_value(o: &Observation) -> Value {
    let mut v = json!({
        "token": o.app.token,
        "counter": o.app.counter,
        "windows": o.windows,
        "framebuffer_sha256": o.frame_sha256,
        "mark_drawn": o.mark_drawn,
        "png": o.png,
    });
    if let Some(t) = &o.editor_text {
        v["editor_text"] = json!(t);
    }
    if let Some(p) = &o.page {
        v["page"] = json!(p);
    }
    v
}

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

/// Changes a copy the way isolation and reset do: its app's state (`mutate`) and a mark drawn on
/// its screen. `name` names the copy in the problems. Returns what the app answered.
pub fn change_copy(ctx: &Ctx, g: &mut GateBuilder, pid: i32, name: &str) -> Option<AppState> {
    let mutated = ctx.app(pid, "mutate");
    let drawn = ctx.x(pid, &format!("drawing into {name}"), |c| {
        c.fill_rect(MARK, MARK_RGB)
    });
    if let Err(e) = &mutated {
        g.problem(format!("changing {name}'s app: {e:#}"));
    }
    if let Err(e) = &drawn {
        g.problem(format!("drawing into {name}: {e:#}"));
    }
    mutated.ok()
}
