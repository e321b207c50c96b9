//! launch: the tree comes up in its own namespaces and becomes ready: the X server answers with
//! the xterm's window mapped, and the app answers.

use super::{Ctx, GateBuilder};
use crate::probe::{all_differ, namespaces_of};
use crate::tree::{self, XTERM_TITLE};
use anyhow::{Context, Result};
use nix::mount::{mount, MsFlags};
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::report::{Gate, GateName};
use sharedos_report::wait;
use std::time::Instant;

/// A read-only bind of `/` for the tree's root and for CRIU's `--root`. Made in this process's
/// private mount namespace, so it disappears with the run however the run ends.
pub fn make_root_bind(ctx: &Ctx) -> Result<()> {
    let root = ctx.cfg.root_bind();
    std::fs::create_dir_all(&root).with_context(|| format!("mkdir {}", root.display()))?;
    mount(
        Some("/"),
        &root,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .with_context(|| format!("bind-mounting / on {}", root.display()))?;
    mount(
        None::<&str>,
        &root,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY,
        None::<&str>,
    )
    .with_context(|| format!("remounting {} read-only", root.display()))?;
    Ok(())
}

/// Which readiness conditions hold for the tree now.
#[derive(Default, Debug, Clone, serde::Serialize)]
struct Readiness {
    init_alive: bool,
    x_socket: bool,
    window_mapped: bool,
    app_answers: bool,
}

impl Readiness {
    fn ready(&self) -> bool {
        self.init_alive && self.x_socket && self.window_mapped && self.app_answers
    }
}

fn readiness(ctx: &Ctx, pid: i32) -> Readiness {
    let mut r = Readiness {
        init_alive: crate::probe::is_live(pid),
        x_socket: crate::x11::socket_path(pid, ctx.cfg.display).exists(),
        ..Default::default()
    };
    if r.x_socket {
        r.window_mapped = ctx
            .x(pid, "X window list", |c| c.mapped_toplevels())
            .map(|ws| ws.iter().any(|w| w.title == XTERM_TITLE))
            .unwrap_or(false);
    }
    r.app_answers = ctx.app(pid, "get").is_ok();
    r
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Launch);
    if let Err(e) = make_root_bind(ctx) {
        g.problem(format!("cannot prepare the tree's root: {e:#}"));
        return g.finish("");
    }
    if ctx.cfg.options.cow_root {
        let made = super::fidelity::mount_cow_tmpfs(&ctx.cfg)
            .and_then(|()| super::fidelity::make_cow_root(ctx, "tree", None).0);
        if let Err(e) = made {
            g.problem(format!(
                "cannot make the tree's writable root for --cow-root: {e:#}"
            ));
            return g.finish("");
        }
    }
    if let Some(l) = ctx.cfg.options.cgroup {
        let made = super::fidelity::prepare_run_group(&ctx.cfg.marker)
            .and_then(|()| super::fidelity::make_tree_group(&ctx.cfg.marker, "tree", &l));
        if let Err(e) = made {
            g.problem(format!("cannot make the tree's cgroup for --cgroup: {e:#}"));
            return g.finish("");
        }
    }
    let spec = ctx.cfg.spec();
    let (pid, ev) = tree::launch(
        &ctx.cfg.exe,
        &spec,
        ctx.cfg.step_timeout,
        &ctx.cfg.scratch(),
    );
    g.evidence(ev);
    let pid = match pid {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!("the tree did not start: {e:#}"));
            return g.finish("");
        }
    };
    ctx.tree = Some(pid);
    let rec = ctx.register_tree("original", pid);
    g.data("init_pid", json!(pid));
    g.data("pidns", json!(rec.pidns));
    let inner = crate::probe::ns_pid_of(pid);
    g.check(check(
        "init_is_namespace_pid1",
        inner == Some(1) && rec.pidns.is_some(),
        json!({"host_pid": pid, "pid_in_namespace": inner, "pidns": rec.pidns}),
        "the recorded host pid is PID 1 of its own pid namespace",
    ));

    let started = Instant::now();
    let mut last = Readiness::default();
    let ready = wait::until("the tree to be ready", ctx.cfg.step_timeout, || {
        last = readiness(ctx, pid);
        last.ready().then_some(())
    });
    let ready_ms = started.elapsed().as_millis() as u64;
    g.data("ready_ms", json!(ready_ms));
    let ok = ready.is_ok();
    g.require(
        check(
            "tree_ready",
            ok,
            json!({"conditions": last, "ms": ready_ms}),
            "X answers with the xterm window mapped and the app answers",
        ),
        || match &ready {
            Err(e) => format!("{e}; conditions then: {last:?}"),
            Ok(()) => String::new(),
        },
    );
    if !ok {
        for e in tree::log_evidence(pid) {
            g.evidence(e);
        }
    }

    if ok {
        if let Ok(v) = ctx.x(pid, "X server release", |c| Ok(c.server_version())) {
            ctx.env.xvfb_version = Some(v);
        }
    }

    super::fidelity::check_tree(ctx, &mut g, pid, "tree", "tree_");
    if ctx.cfg.options.cow_root && ok {
        // The file every copy must find as the original left it; the app's token is the
        // dump-time one, since nothing changes the original's app before the dump.
        match ctx.app(pid, "get") {
            Ok(s) => super::fidelity::check_write(
                ctx,
                &mut g,
                pid,
                "tree",
                super::fidelity::DUMP_TIME_FILE,
                "tree_cow_file_written",
                &s.token,
            ),
            Err(e) => g.problem(format!("asking the app for its token: {e:#}")),
        }
    }
    let mine = namespaces_of("self");
    let theirs = namespaces_of(&pid.to_string());
    g.check(check(
        "own_namespaces",
        all_differ(&theirs, &mine),
        json!({"tree": theirs, "diagnose": mine}),
        "pid, mnt, net, ipc and uts namespaces all differ from the caller's",
    ));
    g.finish("the tree runs in its own pid, mnt, net, ipc and uts namespaces; X, the xterm window and the app are up")
}
