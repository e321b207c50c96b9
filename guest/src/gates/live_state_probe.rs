//! live_state_probe: the eight live-state checks, all made from outside the tree,
//! and the census: every process carrying the marker runs inside the tree's pid namespace.

use super::{Ctx, GateBuilder};
use crate::probe;
use crate::tree::{expected_processes, XTERM_TITLE};
use crate::x11::FrameExt;
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::model::tree::MarkedProcess;
use sharedos_report::report::{Gate, GateName, Workload};

/// The three kinds of process the live-state checks look for, picked out of the marked ones.
pub fn xvfb<'a>(procs: &'a [MarkedProcess], display: &str) -> Vec<&'a MarkedProcess> {
    procs
        .iter()
        .filter(|p| p.program() == "Xvfb" && p.cmdline.iter().any(|a| a == display))
        .collect()
}

/// The marked processes running `program` (argv[0]'s basename).
pub fn running<'a>(procs: &'a [MarkedProcess], program: &str) -> Vec<&'a MarkedProcess> {
    procs.iter().filter(|p| p.program() == program).collect()
}

pub fn xterm(procs: &[MarkedProcess]) -> Vec<&MarkedProcess> {
    procs
        .iter()
        .filter(|p| {
            p.program() == "xterm"
                && p.cmdline
                    .windows(2)
                    .any(|w| w[0] == "-T" && w[1] == XTERM_TITLE)
        })
        .collect()
}

pub fn stateapp(procs: &[MarkedProcess]) -> Vec<&MarkedProcess> {
    procs
        .iter()
        .filter(|p| p.cmdline.get(1).map(String::as_str) == Some("stateapp"))
        .collect()
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::LiveStateProbe);
    let Some(pid) = ctx.tree else {
        g.problem("no tree to probe");
        return g.finish("");
    };
    let tree_pidns = ctx.tree_record(pid).and_then(|t| t.pidns.clone());
    // The workload's own checks first: typing into the editor changes the screen, which must
    // then settle before the grabs below.
    super::workload::live_checks(ctx, &mut g, pid);

    let mut last_counter = None;
    match ctx.app(pid, "get") {
        Ok(a) => {
            g.check(compare::token_is_32_hex(&a.token));
            let second = ctx.counter_above(pid, a.counter);
            if let Ok(s) = &second {
                last_counter = Some(s.counter);
            }
            g.check(compare::counter_advances(
                "counter_advances",
                &a,
                second.as_ref().map_err(|e| e.to_string()),
            ));
        }
        Err(e) => g.problem(format!("the app did not answer: {e:#}")),
    }

    // Two grabs on two connections with a counter tick between them must be equal. The xterm
    // may still be drawing its first lines when the tree reports ready, so pairs are taken
    // until one is equal (bounded): a screen that never settles fails.
    let grab = |what: &'static str| ctx.x(pid, what, |c| Ok((c.grab()?, c.mapped_toplevels()?)));
    let mut pairs = 0;
    let mut unequal = Vec::new();
    let settled = sharedos_report::wait::until(
        "two equal framebuffer grabs a counter tick apart",
        ctx.cfg.quick(),
        || {
            pairs += 1;
            let first = grab("first framebuffer grab");
            let tick = last_counter.map(|c| ctx.counter_above(pid, c));
            if let Some(Ok(s)) = &tick {
                last_counter = Some(s.counter);
            }
            let second = grab("second framebuffer grab");
            match (first, second) {
                (Ok((a, windows)), Ok((b, _))) => {
                    let equal = a.sha256() == b.sha256();
                    if !equal {
                        unequal.push(json!([a.sha256(), b.sha256()]));
                    }
                    (equal || pairs >= 50).then_some(Ok((a, b, windows)))
                }
                (a, b) => Some(Err([a.err(), b.err()]
                    .into_iter()
                    .flatten()
                    .map(|e| format!("{e:#}"))
                    .collect::<Vec<_>>()
                    .join("; "))),
            }
        },
    );
    g.data("grab_pairs", json!({"taken": pairs, "unequal": unequal}));
    match settled {
        Ok(Ok((a, b, windows))) => {
            let (rel_a, rel_b) = ("png/live.png", "png/live-idle-second.png");
            let dir = ctx.cfg.report_dir();
            let written_a = a.write_png(&dir.join(rel_a));
            let written_b = b.write_png(&dir.join(rel_b));
            let bytes = |rel: &str| {
                std::fs::metadata(dir.join(rel))
                    .map(|m| m.len())
                    .unwrap_or(0)
            };
            let (bytes_a, bytes_b) = (bytes(rel_a), bytes(rel_b));
            g.check(check(
                "raw_png_captured",
                written_a.is_ok() && written_b.is_ok() && bytes_a > 0 && bytes_b > 0,
                json!({"paths": [rel_a, rel_b], "bytes": [bytes_a, bytes_b], "width": a.width,
                       "height": a.height, "errors": [written_a.err().map(|e| format!("{e:#}")),
                       written_b.err().map(|e| format!("{e:#}"))]}),
                "PNGs of both framebuffer grabs (read with GetImage) written",
            ));
            g.check(compare::same_framebuffer(
                "framebuffer_stable_when_idle",
                (&a.sha256(), rel_a),
                (&b.sha256(), rel_b),
                "a second grab, on a new connection after the counter ticked, equal to the first",
            ));
            if ctx.cfg.options.workload == Workload::Xterm {
                g.check(compare::one_mapped_window_titled(&windows, XTERM_TITLE));
            }
        }
        Ok(Err(e)) => g.problem(format!("the X server did not answer: {e}")),
        Err(e) => {
            g.check(check(
                "framebuffer_stable_when_idle",
                false,
                json!({"error": e.to_string(), "unequal_pairs": unequal}),
                "a second grab, on a new connection after the counter ticked, equal to the first",
            ));
        }
    }

    let census = probe::census(&ctx.cfg.marker);
    let procs = census.marked;
    let display = format!(":{}", ctx.cfg.display);
    let ns = tree_pidns.as_deref();
    g.check(compare::processes_in_tree(
        "xvfb_process",
        &xvfb(&procs, &display),
        ns,
        &format!("an Xvfb for {display}"),
    ));
    for (program, name, what) in expected_processes(ctx.cfg.options.workload) {
        match program {
            "Xvfb" => {}
            "xterm" => {
                g.check(compare::processes_in_tree(
                    name,
                    &xterm(&procs),
                    ns,
                    &format!("an xterm titled {XTERM_TITLE}"),
                ));
            }
            _ => {
                g.check(compare::processes_in_tree(
                    name,
                    &running(&procs, program),
                    ns,
                    what,
                ));
            }
        }
    }
    g.check(compare::processes_in_tree(
        "stateapp_process",
        &stateapp(&procs),
        ns,
        "the probe app",
    ));
    g.check(compare::all_marked_in_tree(&procs, ns));
    g.data(
        "marked_processes",
        json!(procs
            .iter()
            .map(|p| json!({"pid": p.pid, "ns_pid": p.ns_pid, "program": p.program(), "pidns": p.pidns}))
            .collect::<Vec<_>>()),
    );
    if !census.unreadable.is_empty() {
        g.data("unreadable", json!(census.unreadable));
    }
    if ctx.cfg.options.workload == Workload::Xterm {
        return g.finish("the 8 live-state checks hold, and every marked process runs inside the tree's pid namespace");
    }
    g.finish(&format!("the live-state checks of the {} workload hold, and every marked process runs inside the tree's pid namespace", ctx.cfg.options.workload))
}
