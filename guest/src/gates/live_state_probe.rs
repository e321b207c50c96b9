//! live_state_probe: the eight live-state checks of the SPEC, all made from outside the tree.

use super::{check, Ctx, GateBuilder};
use crate::probe::{self, MarkedProcess};
use crate::report::{Gate, GateName};
use crate::stateapp::is_token;
use crate::tree::XTERM_TITLE;
use serde_json::json;

fn pids(ps: &[&MarkedProcess]) -> serde_json::Value {
    json!(ps
        .iter()
        .map(|p| json!({"pid": p.pid, "cmdline": p.cmdline, "marker_in": p.marker_in}))
        .collect::<Vec<_>>())
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::LiveStateProbe);
    let Some(pid) = ctx.tree else {
        g.problem("no tree to probe");
        return g.finish("");
    };

    match ctx.app(pid, "get") {
        Ok(first) => {
            g.check(check(
                "token_is_32_hex",
                is_token(&first.token),
                json!(first.token),
                "32 lowercase hex digits",
            ));
            let second = ctx.counter_above(pid, first.counter);
            let c2 = second.as_ref().map(|s| s.counter).ok();
            g.check(check(
                "counter_advances",
                c2.is_some(),
                json!({"first": first.counter, "second": c2}),
                "a second query returns a larger counter",
            ));
        }
        Err(e) => {
            g.problem(format!("the app did not answer: {e:#}"));
        }
    }

    let frames = ctx.x(pid, "two framebuffer grabs", |c| {
        let a = c.grab()?;
        let b = c.grab()?;
        let windows = c.mapped_toplevels()?;
        Ok((a, b, windows))
    });
    match frames {
        Ok((a, b, windows)) => {
            let rel = "png/live.png";
            let written = a.write_png(&ctx.cfg.report_dir().join(rel));
            let bytes = std::fs::metadata(ctx.cfg.report_dir().join(rel))
                .map(|m| m.len())
                .unwrap_or(0);
            g.check(check(
                "raw_png_captured",
                written.is_ok() && bytes > 0,
                json!({"path": rel, "bytes": bytes, "width": a.width, "height": a.height,
                       "pixel_sha256": a.sha256(), "error": written.err().map(|e| format!("{e:#}"))}),
                "a PNG of the framebuffer read with GetImage",
            ));
            g.check(check(
                "framebuffer_stable_when_idle",
                a.sha256() == b.sha256(),
                json!({"first": a.sha256(), "second": b.sha256()}),
                "two grabs of the idle screen have equal pixels",
            ));
            let titled: Vec<_> = windows.iter().filter(|w| w.title == XTERM_TITLE).collect();
            g.check(check(
                "one_mapped_window_titled",
                titled.len() == 1,
                json!({"mapped_toplevels": windows}),
                &format!("exactly one mapped top-level window titled {XTERM_TITLE}"),
            ));
        }
        Err(e) => g.problem(format!("the X server did not answer: {e:#}")),
    }

    let procs = probe::scan(&ctx.cfg.marker);
    let display = format!(":{}", ctx.cfg.display);
    let xvfb: Vec<_> = procs
        .iter()
        .filter(|p| p.program() == "Xvfb" && p.cmdline.contains(&display))
        .collect();
    g.check(check(
        "xvfb_process",
        !xvfb.is_empty(),
        pids(&xvfb),
        &format!("an Xvfb process for {display} carrying the marker"),
    ));
    let xterm: Vec<_> = procs
        .iter()
        .filter(|p| {
            p.program() == "xterm"
                && p.cmdline
                    .windows(2)
                    .any(|w| w[0] == "-T" && w[1] == XTERM_TITLE)
        })
        .collect();
    g.check(check(
        "xterm_process",
        !xterm.is_empty(),
        pids(&xterm),
        &format!("an xterm titled {XTERM_TITLE} carrying the marker"),
    ));
    let app: Vec<_> = procs
        .iter()
        .filter(|p| p.cmdline.get(1).map(String::as_str) == Some("stateapp"))
        .collect();
    g.check(check(
        "stateapp_process",
        !app.is_empty(),
        pids(&app),
        "the probe app carrying the marker",
    ));
    g.data(
        "marked_processes",
        json!(procs
            .iter()
            .map(|p| json!({"pid": p.pid, "program": p.program()}))
            .collect::<Vec<_>>()),
    );
    g.finish("all 8 live-state checks hold")
}
