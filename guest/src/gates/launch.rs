//! launch: the tree comes up in its own namespaces and becomes ready: the X server answers with
//! the xterm's window mapped, and the app answers.

use super::step::{Kind, Step};
use super::{fidelity, workload, Config, Ctx, GateBuilder};
use crate::probe::{all_differ, namespaces_of};
use crate::tree::{self, TreeSpec};
use anyhow::{Context, Result};
use nix::mount::MsFlags;
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::report::{Gate, GateName};
use sharedos_report::wait;
use std::path::Path;
use std::time::Instant;

/// A read-only bind of `/` for the tree's root and for CRIU's `--root`. Made in this process's
/// private mount namespace, so it disappears with the run however the run ends.
pub fn make_root_bind(ctx: &Ctx) -> Result<()> {
    let root = ctx.cfg.root_bind();
    std::fs::create_dir_all(&root).with_context(|| format!("mkdir {}", root.display()))?;
    tree::bind_with_flags(Path::new("/"), &root, MsFlags::MS_RDONLY)
}

/// The read-only bind of / that `make_root_bind` makes, as the equivalent command.
pub fn root_bind_step(cfg: &Config) -> Step {
    Step::described(
        Kind::RootBind,
        "read-only bind of / as the tree's root (mount(2) in diagnose's private mount namespace)",
        vec![
            "mount".into(),
            "--bind".into(),
            "-o".into(),
            "ro".into(),
            "/".into(),
            cfg.root_bind().display().to_string(),
        ],
    )
}

/// What diagnose runs to start the tree: tree-spawn, after unshare(2) of the namespaces.
pub fn spawn_step(cfg: &Config, spec: &TreeSpec) -> Step {
    Step::new(
        Kind::SpawnTree,
        "spawn the tree",
        "start the tree: unshare(2) of pid, mnt, net, ipc, uts, then exec (equivalent: the unshare command below)",
        tree::spawn_argv(&cfg.exe, spec),
    )
}

/// What this gate does, in its order: the tree's root (and, with the options, its writable
/// root and its cgroup), the spawn, and what the tree's PID 1 runs inside.
pub fn plan(cfg: &Config) -> Vec<Step> {
    let spec = cfg.spec();
    let mut v = vec![root_bind_step(cfg)];
    if cfg.options.cow_root {
        v.push(fidelity::cow_tmpfs_step(cfg));
        v.push(fidelity::overlay_step(cfg, "tree"));
    }
    if let Some(l) = cfg.options.cgroup {
        v.push(fidelity::group_step(cfg, "tree", &l));
    }
    v.push(spawn_step(cfg, &spec));
    v.push(Step::described(
        Kind::UnshareEquivalent,
        "equivalent util-linux command",
        tree::unshare_equivalent_argv(&cfg.exe, &spec),
    ));
    v.push(Step::described(
        Kind::InTree,
        "PID 1 of the tree, after pivot_root",
        tree::init_argv(&spec),
    ));
    for p in tree::workload(&spec).programs() {
        v.push(Step::described(
            Kind::InTree,
            "inside the tree",
            p.argv.clone(),
        ));
    }
    v
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Launch);
    if let Err(problem) = prepare_roots(ctx) {
        g.problem(problem);
        return g.finish("");
    }
    let Some(pid) = spawn(ctx, &mut g) else {
        return g.finish("");
    };
    let ready = wait_ready(ctx, &mut g, pid);
    if ready {
        if let Ok(v) = ctx.x(pid, "X server release", |c| Ok(c.server_version())) {
            ctx.env.xvfb_version = Some(v);
        }
    }
    fidelity::check_tree(ctx, &mut g, pid, "tree", "tree_");
    if ctx.cfg.options.cow_root && ready {
        write_dump_time_file(ctx, &mut g, pid);
    }
    let mine = namespaces_of("self");
    let theirs = namespaces_of(&pid.to_string());
    g.check(check(
        "own_namespaces",
        all_differ(&theirs, &mine),
        json!({"tree": theirs, "diagnose": mine}),
        "pid, mnt, net, ipc and uts namespaces all differ from the caller's",
    ));
    if ctx.cfg.options.workload == sharedos_report::report::Workload::Xterm {
        return g.finish("the tree runs in its own pid, mnt, net, ipc and uts namespaces; X, the xterm window and the app are up");
    }
    g.finish(&format!("the tree runs in its own pid, mnt, net, ipc and uts namespaces; X, the {} workload and the app are up", ctx.cfg.options.workload))
}

/// The tree's root, and with the options its writable root and its cgroup; what could not be
/// made, as the gate's problem.
fn prepare_roots(ctx: &Ctx) -> Result<(), String> {
    make_root_bind(ctx).map_err(|e| format!("cannot prepare the tree's root: {e:#}"))?;
    if ctx.cfg.options.cow_root {
        fidelity::mount_cow_tmpfs(&ctx.cfg)
            .and_then(|()| fidelity::make_cow_root(ctx, "tree", None).0)
            .map_err(|e| format!("cannot make the tree's writable root for --cow-root: {e:#}"))?;
    }
    if let Some(l) = ctx.cfg.options.cgroup {
        fidelity::prepare_run_group(&ctx.cfg.marker)
            .and_then(|()| fidelity::make_tree_group(&ctx.cfg.marker, "tree", &l))
            .map_err(|e| format!("cannot make the tree's cgroup for --cgroup: {e:#}"))?;
    }
    Ok(())
}

/// Starts the tree and registers it; its PID 1's host pid, once it heads a pid namespace of its
/// own (checked), or None when the tree did not start.
fn spawn(ctx: &mut Ctx, g: &mut GateBuilder) -> Option<i32> {
    let spec = ctx.cfg.spec();
    let out = ctx.run_with(&spawn_step(&ctx.cfg, &spec), tree::spawn_setup(&spec));
    let pid = tree::spawned_pid(&out);
    g.evidence(out.evidence);
    let pid = match pid {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!("the tree did not start: {e:#}"));
            return None;
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
    Some(pid)
}

/// Waits until the tree is ready (bounded); whether it became ready. A tree that does not
/// leaves its programs' logs as evidence.
fn wait_ready(ctx: &Ctx, g: &mut GateBuilder, pid: i32) -> bool {
    let started = Instant::now();
    let mut last = Vec::new();
    let bound = ctx.cfg.step_timeout * ctx.cfg.options.workload.ready_steps();
    let ready = wait::until("the tree to be ready", bound, || {
        last = workload::readiness(ctx, pid);
        last.iter().all(|c| c.holds).then_some(())
    });
    let ready_ms = started.elapsed().as_millis() as u64;
    g.data("ready_ms", json!(ready_ms));
    let ok = ready.is_ok();
    let conditions: serde_json::Map<String, serde_json::Value> = last
        .iter()
        .map(|c| (c.name.to_string(), json!(c.holds)))
        .collect();
    let expected = match ctx.cfg.options.workload {
        sharedos_report::report::Workload::Xterm => {
            "X answers with the xterm window mapped and the app answers".to_string()
        }
        w => format!(
            "every condition of the {w} workload holds: {}",
            last.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
        ),
    };
    g.require(
        check(
            "tree_ready",
            ok,
            json!({"conditions": conditions, "ms": ready_ms}),
            &expected,
        ),
        || {
            let not_up: Vec<String> = last
                .iter()
                .filter(|c| !c.holds)
                .map(|c| format!("{} ({})", c.process, c.name))
                .collect();
            match &ready {
                Err(e) => format!("{e}; not up: {}", not_up.join(", ")),
                Ok(()) => String::new(),
            }
        },
    );
    if !ok {
        for e in tree::log_evidence(&ctx.cfg.spec(), pid) {
            g.evidence(e);
        }
        g.evidence(windows_evidence(ctx, pid));
    }
    ok
}

/// What X showed when the tree was given up on: each viewable top level, its class and title,
/// and whether a window manager manages it (a client with `WM_STATE` below it). A program that
/// runs with its window missing or unmanaged is told apart by this alone.
fn windows_evidence(ctx: &Ctx, pid: i32) -> sharedos_report::report::Evidence {
    let note = match ctx.x(pid, "X top levels", |c| c.toplevels()) {
        Ok(tops) if tops.is_empty() => "no viewable top-level window".to_string(),
        Ok(tops) => tops
            .iter()
            .map(|t| {
                format!(
                    "0x{:x} class {:?} title {:?} {}x{}+{}+{}: {}",
                    t.window.id,
                    t.class,
                    t.window.title,
                    t.window.width,
                    t.window.height,
                    t.window.x,
                    t.window.y,
                    match t.client {
                        Some(c) => format!("managed, client 0x{c:x}"),
                        None => "no client with WM_STATE (not managed)".to_string(),
                    }
                )
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Err(e) => format!("X did not answer: {e:#}"),
    };
    sharedos_report::report::Evidence {
        step: "the X top levels when the wait ended".into(),
        note,
        ..Default::default()
    }
}

/// With `--cow-root`: the file every copy must find as the original left it. The app's token is
/// the dump-time one, since nothing changes the original's app before the dump.
fn write_dump_time_file(ctx: &Ctx, g: &mut GateBuilder, pid: i32) {
    match ctx.app(pid, "get") {
        Ok(s) => fidelity::check_write(
            ctx,
            g,
            pid,
            "tree",
            fidelity::DUMP_TIME_FILE,
            "tree_cow_file_written",
            &s.token,
        ),
        Err(e) => g.problem(format!("asking the app for its token: {e:#}")),
    }
}
