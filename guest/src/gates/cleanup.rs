//! cleanup: ends every process that carries the marker and proves none is left, listing what was
//! terminated, what had to be killed and what stayed.

use super::{check, launch::tree_logs, Ctx, GateBuilder};
use crate::probe::{self, MarkedProcess};
use crate::report::{Gate, GateName};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag};
use nix::unistd::Pid;
use serde_json::json;
use std::time::Duration;

/// Every zombie child we inherited as subreaper; no command is running during cleanup, so
/// nothing else's exit status is taken.
fn reap_all() {
    while let Ok(s) = waitpid(None::<Pid>, Some(WaitPidFlag::WNOHANG)) {
        if s == nix::sys::wait::WaitStatus::StillAlive {
            break;
        }
    }
}

fn listing(ps: &[MarkedProcess]) -> serde_json::Value {
    json!(ps
        .iter()
        .map(|p| json!({"pid": p.pid, "program": p.program(), "cmdline": p.cmdline}))
        .collect::<Vec<_>>())
}

fn wait_gone(marker: &str, timeout: Duration) -> Vec<MarkedProcess> {
    let res = crate::wait::until("marked processes to exit", timeout, || {
        reap_all();
        let left = probe::scan(marker);
        left.is_empty().then_some(())
    });
    reap_all();
    match res {
        Ok(()) => Vec::new(),
        Err(_) => probe::scan(marker),
    }
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Cleanup);
    // Keep the programs' own logs before their private /tmp goes away.
    let trees: Vec<(String, i32)> = ctx
        .tree
        .map(|p| ("original".to_string(), p))
        .into_iter()
        .chain(ctx.copies.iter().map(|(k, v)| (format!("copy {k}"), *v)))
        .collect();
    for (label, pid) in &trees {
        for mut e in tree_logs(*pid) {
            e.step = format!("{} ({label})", e.step);
            g.evidence(e);
        }
    }

    let found = probe::scan(&ctx.cfg.marker);
    for p in &found {
        let _ = kill(Pid::from_raw(p.pid), Signal::SIGTERM);
    }
    // Bounded by the step timeout at most, and short: SIGTERM ends PID 1 and so the namespace.
    let grace = ctx.cfg.step_timeout.min(Duration::from_secs(10));
    let after_term = wait_gone(&ctx.cfg.marker, grace);
    for p in &after_term {
        let _ = kill(Pid::from_raw(p.pid), Signal::SIGKILL);
    }
    let left = wait_gone(&ctx.cfg.marker, grace);
    let terminated: Vec<MarkedProcess> = found
        .iter()
        .filter(|p| !after_term.iter().any(|q| q.pid == p.pid))
        .cloned()
        .collect();
    let force_killed: Vec<MarkedProcess> = after_term
        .iter()
        .filter(|p| !left.iter().any(|q| q.pid == p.pid))
        .cloned()
        .collect();
    ctx.tree = None;
    ctx.copies.clear();

    g.data("terminated", listing(&terminated));
    g.data("force_killed", listing(&force_killed));
    g.data("left", listing(&left));
    g.check(check(
        "no_marker_process_left",
        left.is_empty(),
        listing(&left),
        "no process carrying the marker",
    ));
    if ctx.cfg.root_bind().exists() {
        let _ = nix::mount::umount2(&ctx.cfg.root_bind(), nix::mount::MntFlags::MNT_DETACH);
    }
    let (t, k) = (terminated.len(), force_killed.len());
    g.finish(&format!(
        "no marked process left: {t} ended on SIGTERM, {k} needed SIGKILL"
    ))
}
