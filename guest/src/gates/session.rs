//! What the `session` workload adds to the gates: the session's readiness (the window manager
//! announced as xfwm4, the panel's window mapped, the settings daemon owning its XSETTINGS
//! selection, the bus answering), and its application state: the window manager's current
//! workspace. The live probe moves it off the first workspace with a `_NET_CURRENT_DESKTOP`
//! client message to the root, as a pager does; xfwm4 takes it and publishes the new one on the
//! root, where every copy's is read over the X wire. A fresh session would show the first.

use super::workload::{bus_answers, bus_check, Condition};
use super::{Ctx, GateBuilder};
use crate::tree::{
    self, PANEL_CLASS, SESSION_WM_NAME, SETTINGS_NEEDLE, WORKSPACES, XSETTINGS_SELECTION,
};
use crate::x11::XConn;
use anyhow::{Context, Result};
use sharedos_report::compare::session as cmp;
use sharedos_report::model::screen::TopLevel;
use sharedos_report::model::tree::Observation;
use std::time::Duration;

/// The most bytes of the published XSETTINGS read.
const MAX_SETTINGS: u32 = 64 * 1024;

/// Bound of the wait for the window manager to show an asked workspace.
const SWITCH_WAIT: Duration = Duration::from_secs(20);

/// The session's readiness conditions, in start order; `tops` the mapped top levels.
pub fn readiness(ctx: &Ctx, pid: i32, x_socket: bool, tops: &[TopLevel]) -> Vec<Condition> {
    let c = |name, process, holds| Condition {
        name,
        process,
        holds,
    };
    let bus = tree::path_in_tree(pid, tree::BUS_SOCKET);
    let wm = x_socket
        && ctx
            .x(pid, "window manager", |c| c.window_manager_name())
            .is_ok_and(|n| n.as_deref() == Some(SESSION_WM_NAME));
    let settings = x_socket
        && settings_owner(ctx, pid).is_ok_and(|o| {
            o.is_some_and(|(_, b)| {
                b.windows(SETTINGS_NEEDLE.len())
                    .any(|w| w == SETTINGS_NEEDLE.as_bytes())
            })
        });
    vec![
        c("session_bus", "dbus-daemon", bus_answers(&bus).is_ok()),
        c("window_manager", "xfwm4", wm),
        c("settings_daemon", "xfsettingsd", settings),
        c(
            "panel_window",
            "xfce4-panel",
            tops.iter()
                .any(|t| t.class == PANEL_CLASS && t.client.is_some()),
        ),
    ]
}

/// The owner of the XSETTINGS selection and the settings it publishes (bounded).
fn settings_owner(ctx: &Ctx, pid: i32) -> Result<Option<(u32, Vec<u8>)>> {
    ctx.x(pid, "the XSETTINGS selection's owner", |c| {
        match c.selection_owner(XSETTINGS_SELECTION)? {
            Some(w) => Ok(Some((
                w,
                c.property_bytes(w, "_XSETTINGS_SETTINGS", MAX_SETTINGS)?,
            ))),
            None => Ok(None),
        }
    })
}

/// The window manager's current workspace, from the root's `_NET_CURRENT_DESKTOP`.
pub fn read_workspace(c: &XConn) -> Result<u32> {
    c.root_cardinal("_NET_CURRENT_DESKTOP")?
        .context("the root has no _NET_CURRENT_DESKTOP: no EWMH window manager keeps a workspace")
}

/// How many workspaces the window manager keeps, from the root's `_NET_NUMBER_OF_DESKTOPS`.
fn workspace_count(c: &XConn) -> Result<u32> {
    c.root_cardinal("_NET_NUMBER_OF_DESKTOPS")?
        .context("the root has no _NET_NUMBER_OF_DESKTOPS")
}

/// Asks for workspace `n` as a pager does and waits (bounded) until the root shows it; the
/// workspace the root shows last.
pub fn switch_workspace(c: &XConn, n: u32) -> Result<u32> {
    c.ask_workspace(n)?;
    let mut last = Err(anyhow::anyhow!("not read"));
    let shown = sharedos_report::wait::until(
        "the window manager to show the asked workspace",
        SWITCH_WAIT,
        || {
            last = read_workspace(c);
            last.as_ref().ok().filter(|w| **w == n).copied()
        },
    );
    match shown {
        Ok(w) => Ok(w),
        Err(e) => last.with_context(|| e.to_string()),
    }
}

/// A random workspace of `count` that is none of `avoid`, never the first: a copy that
/// restarted its window manager would show the first.
fn pick_workspace(count: u32, avoid: &[u32]) -> Result<u32> {
    let choices: Vec<u32> = (1..count.min(64)).filter(|w| !avoid.contains(w)).collect();
    anyhow::ensure!(
        !choices.is_empty(),
        "no workspace to switch to among {count} besides {avoid:?}"
    );
    let r = u32::from_str_radix(&sharedos_report::random::random_hex(4)?, 16)
        .context("reading a random number")?;
    let i = usize::try_from(r).unwrap_or(0) % choices.len();
    choices
        .get(i)
        .copied()
        .context("a random choice outside the choices")
}

/// The live probe's checks of the session, and the switch to a workspace other than the first,
/// whose effect every later gate reads.
pub fn live_checks(ctx: &Ctx, g: &mut GateBuilder, pid: i32) {
    super::workload::managed_window_checks(
        ctx,
        g,
        pid,
        SESSION_WM_NAME,
        ("panel_window", PANEL_CLASS),
    );
    g.check(cmp::owns_selection(
        "settings_daemon_owns_xsettings",
        XSETTINGS_SELECTION,
        settings_owner(ctx, pid).map_err(|e| format!("{e:#}")),
        SETTINGS_NEEDLE,
    ));
    let bus = tree::path_in_tree(pid, tree::BUS_SOCKET);
    g.check(bus_check("session_bus_answers", &bus));
    g.data(
        "pidfd_open",
        serde_json::json!("refused with ENOSYS to xfce4-session and the clients it starts (a seccomp filter): GLib then watches its children through SIGCHLD, not pidfds, which criu 3.17.1 cannot dump"),
    );
    let state = ctx.x(pid, "the workspaces", |c| {
        Ok((read_workspace(c)?, workspace_count(c)?))
    });
    let (before, count) = match state {
        Ok(s) => s,
        Err(e) => {
            g.problem(format!("reading the window manager's workspaces: {e:#}"));
            return;
        }
    };
    g.data(
        "workspaces",
        serde_json::json!({"count": count, "configured": WORKSPACES, "before": before}),
    );
    let asked = match pick_workspace(count, &[before]) {
        Ok(w) => w,
        Err(e) => {
            g.problem(format!("choosing a workspace to switch to: {e:#}"));
            return;
        }
    };
    let seen = ctx
        .x(pid, "switching the workspace", move |c| {
            switch_workspace(c, asked)
        })
        .map_err(|e| format!("{e:#}"));
    g.check(cmp::workspace_switched(
        "workspace_switched",
        before,
        asked,
        count,
        seen,
    ));
}

/// A copy's workspace against the dump-time one; `switched_elsewhere`, the workspace another
/// copy was switched to, in words as `change` returns it.
pub fn check_copy_state(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    snap: &Observation,
    prefix: &str,
    switched_elsewhere: Option<&str>,
) {
    let Some(dump) = snap.workspace else {
        g.problem("no dump-time workspace");
        return;
    };
    let elsewhere = match switched_elsewhere.map(str::parse::<u32>).transpose() {
        Ok(w) => w,
        Err(e) => {
            g.problem(format!(
                "the workspace another copy was switched to does not read: {e}"
            ));
            return;
        }
    };
    let seen = ctx
        .x(pid, "the current workspace", read_workspace)
        .map_err(|e| format!("{e:#}"));
    g.check(cmp::same_workspace(
        &format!("{prefix}workspace_same"),
        dump,
        seen,
        elsewhere,
    ));
    let bus = tree::path_in_tree(pid, tree::BUS_SOCKET);
    g.check(bus_check(&format!("{prefix}session_bus_answers"), &bus));
}

/// Switches a copy to a workspace other than the one it shows and the dump-time one. Returns
/// both, in words (the number), as the editor's change is returned.
pub fn change(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    name: &str,
    snap: &Observation,
) -> Option<(String, String)> {
    let dump = snap.workspace;
    let r = ctx.x(pid, &format!("switching {name}'s workspace"), move |c| {
        let before = read_workspace(c)?;
        let avoid: Vec<u32> = std::iter::once(before).chain(dump).collect();
        let asked = pick_workspace(workspace_count(c)?, &avoid)?;
        // Whether the manager shows it is the change check's to judge, on what it reads.
        let _shown = switch_workspace(c, asked);
        Ok((before, asked))
    });
    match r {
        Ok((before, asked)) => Some((before.to_string(), asked.to_string())),
        Err(e) => {
            g.problem(format!("switching {name}'s workspace: {e:#}"));
            None
        }
    }
}

/// A changed copy shows the workspace it was switched to.
pub fn check_changed(g: &mut GateBuilder, name: &str, o: &Observation, change: &(String, String)) {
    let parsed = change
        .0
        .parse::<u32>()
        .and_then(|b| Ok((b, change.1.parse::<u32>()?)));
    let Ok((before, asked)) = parsed else {
        g.problem(format!(
            "the change {change:?} is not two workspace numbers"
        ));
        return;
    };
    let seen = o
        .workspace
        .context("the observation has no workspace")
        .map_err(|e| format!("{e:#}"));
    g.check(cmp::workspace_changed(name, before, asked, seen));
}
