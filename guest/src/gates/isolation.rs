//! isolation: two copies from one dump run at once in their own namespaces; changing the app and
//! the screen of one leaves the other at the dump-time state.

use super::{all_differ, check, namespaces_of, obs_value, Ctx, GateBuilder};
use crate::report::{Gate, GateName};
use serde_json::json;
use x11rb::protocol::xproto::Rectangle;

/// Drawn into copy A's root window, outside the xterm.
const MARK: Rectangle = Rectangle {
    x: 560,
    y: 400,
    width: 60,
    height: 60,
};

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Isolation);
    let Some(snap) = ctx.snapshot.clone() else {
        g.problem("no dump-time state");
        return g.finish("");
    };
    let a = match ctx.copies.get("a").copied().filter(|p| super::alive(*p)) {
        Some(p) => p,
        None => {
            let (pid, ev) = ctx.restore("a");
            g.evidence(ev);
            match pid {
                Ok(p) => p,
                Err(e) => {
                    g.problem(format!("restoring copy A: {e:#}"));
                    return g.finish("");
                }
            }
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
            return g.finish("");
        }
    };
    g.data("copy_a_pid", json!(a));
    g.data("copy_b_pid", json!(b));
    g.check(check(
        "two_copies_running",
        a != b && super::alive(a) && super::alive(b),
        json!({"a": a, "b": b}),
        "both copies alive at once",
    ));
    let (na, nb) = (namespaces_of(&a.to_string()), namespaces_of(&b.to_string()));
    g.check(check(
        "own_namespaces",
        all_differ(&na, &nb),
        json!({"a": na, "b": nb}),
        "no namespace shared between the copies",
    ));

    let mutated = ctx.app(a, "mutate");
    let drawn = ctx.x(a, "drawing into copy A", |c| c.fill_rect(MARK, 0x00ff_0000));
    if let Err(e) = &mutated {
        g.problem(format!("changing copy A's app: {e:#}"));
    }
    if let Err(e) = &drawn {
        g.problem(format!("drawing into copy A: {e:#}"));
    }
    let oa = ctx.observe(a, "isolation-a");
    let ob = ctx.observe(b, "isolation-b");
    match (oa, ob) {
        (Ok(oa), Ok(ob)) => {
            g.check(check(
                "both_x_answer",
                true,
                json!({"a": crate::x11::socket_path(a, ctx.cfg.display), "b": crate::x11::socket_path(b, ctx.cfg.display)}),
                "each copy's X server answers on its own socket",
            ));
            g.check(check(
                "a_changed",
                oa.app.token != snap.app.token && oa.frame_sha256 != snap.frame_sha256,
                obs_value(&oa),
                "copy A shows the new token and the painted rectangle",
            ));
            g.check(check(
                "b_unchanged",
                ob.app.token == snap.app.token
                    && ob.app.counter < snap.app.counter + 1_000_000
                    && ob.frame_sha256 == snap.frame_sha256,
                json!({"b": obs_value(&ob), "dump_time_token": snap.app.token,
                       "dump_time_framebuffer_sha256": snap.frame_sha256}),
                "copy B keeps the dump-time token, counter range and pixels",
            ));
        }
        (oa, ob) => {
            g.check(check(
                "both_x_answer",
                false,
                json!({"a": oa.err().map(|e| format!("{e:#}")), "b": ob.err().map(|e| format!("{e:#}"))}),
                "each copy's X server and app answer",
            ));
        }
    }
    g.finish(
        "two copies ran at once in separate namespaces; changing A left B at the dump-time state",
    )
}
