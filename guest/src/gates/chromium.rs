//! What the `chromium` workloads add to the browser's page checks: a text field typed into
//! through XTEST, whose text the page's script shows in the document title (`field=TEXT`), read
//! from the window's `_NET_WM_NAME` like the token and the counter. The live probe types a
//! random token into it; every restored copy must show it, and a change typed into one copy
//! (isolation's A, reset's changed copy) must stay in that copy.

use super::workload::{page_state, random_to_type};
use super::{Ctx, GateBuilder};
use crate::x11::{keysym, XConn};
use anyhow::{Context, Result};
use sharedos_report::compare;
use sharedos_report::model::app::parse_page_title;
use sharedos_report::model::tree::Observation;

/// The window whose `_NET_WM_NAME` shows the page (the client below a top level, if any).
fn page_window(c: &XConn) -> Result<u32> {
    let mut found = Vec::new();
    for t in c.toplevels()? {
        let w = t.client.unwrap_or(t.window.id);
        if parse_page_title(&c.net_wm_name(w)?).is_some() {
            found.push(w);
        }
    }
    match found[..] {
        [w] => Ok(w),
        [] => anyhow::bail!("no window's _NET_WM_NAME shows the page"),
        _ => anyhow::bail!("{} windows show a page", found.len()),
    }
}

/// Types `text` at the end of the page's field: the page window gets the input focus (the
/// field has the page's), End puts the caret after the text already there.
pub fn type_into_field(c: &XConn, text: &str) -> Result<()> {
    let w = page_window(c)?;
    c.focus(w)?;
    c.press(&[], keysym::END)?;
    c.type_text(text)
}

/// The field's text as the page's title shows it.
fn field_of(c: &XConn) -> Result<String> {
    page_state(c)?
        .field
        .context("the page's title shows no field= after its counter")
}

/// The field's text once it reads `want`, bounded by the step timeout (the page's script
/// retitles the window a moment after the keys arrive); else the last text read, or why none
/// could be.
fn field_once_it_reads(ctx: &Ctx, pid: i32, want: &str) -> Result<String, String> {
    let w = want.to_string();
    let waited = sharedos_report::wait::until(
        "the page's field to show the typed text",
        ctx.cfg.step_timeout,
        || {
            ctx.x(pid, "the page's field", field_of)
                .ok()
                .filter(|f| *f == w)
        },
    );
    match waited {
        Ok(f) => Ok(f),
        Err(_) => ctx
            .x(pid, "the page's field", field_of)
            .map_err(|e| format!("{e:#}")),
    }
}

/// The live probe: a random token typed into the field, then read back from the title; kept in
/// `ctx.typed`.
pub fn type_token(ctx: &mut Ctx, g: &mut GateBuilder, pid: i32) {
    let Some(token) = random_to_type(g, 8, "a token") else {
        return;
    };
    let before = match ctx.x(pid, "the page's field", field_of) {
        Ok(f) => f,
        Err(e) => {
            g.problem(format!("reading the page's field before typing: {e:#}"));
            return;
        }
    };
    let t = token.clone();
    if let Err(e) = ctx.x(pid, "typing into the page's field", move |c| {
        type_into_field(c, &t)
    }) {
        g.problem(format!("typing into the page's field through XTEST: {e:#}"));
        return;
    }
    let want = format!("{before}{token}");
    let read = field_once_it_reads(ctx, pid, &want);
    g.check(compare::page_field_holds_typed(
        "page_field_holds_typed_text",
        &want,
        read.as_deref().map_err(|e| e.clone()),
    ));
    ctx.typed = Some(want);
}

/// A copy's field holds the dump-time text, and nothing typed into another copy.
pub fn check_copy_field(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    snap: &Observation,
    prefix: &str,
    typed_elsewhere: Option<&str>,
) {
    let dump = snap
        .page
        .as_ref()
        .and_then(|p| p.field.clone())
        .unwrap_or_default();
    let seen = ctx
        .x(pid, "the page's field", field_of)
        .map_err(|e| format!("{e:#}"));
    g.check(compare::page_field_same_text(
        &format!("{prefix}page_field_same_text"),
        &dump,
        seen.as_deref().map_err(|e| e.clone()),
        typed_elsewhere,
    ));
}

/// A change typed at the end of a copy's field, different per call, once the title shows it.
/// Returns the text the field held before and the change.
pub fn change_field(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    name: &str,
) -> Option<(String, String)> {
    let suffix = random_to_type(g, 4, "the change")?;
    // No whitespace: the title shows the field's text as one word.
    let change = format!("-changed-{suffix}");
    let t = change.clone();
    let typed = ctx.x(pid, &format!("typing into {name}'s page field"), move |c| {
        let before = field_of(c)?;
        type_into_field(c, &t)?;
        Ok(before)
    });
    match typed {
        Ok(before) => {
            // Waited for, so that the observation that follows shows the change if it took.
            let _ = field_once_it_reads(ctx, pid, &format!("{before}{change}"));
            Some((before, change))
        }
        Err(e) => {
            g.problem(format!("typing into {name}'s page field: {e:#}"));
            None
        }
    }
}

/// The field of a changed copy shows the text it held before with the change at its end.
pub fn check_field_changed(
    g: &mut GateBuilder,
    name: &str,
    o: &Observation,
    change: Option<&(String, String)>,
) {
    let Some((before, change)) = change else {
        return;
    };
    let seen = o
        .page
        .as_ref()
        .and_then(|p| p.field.as_deref())
        .context("the observation shows no page field")
        .map_err(|e| format!("{e:#}"));
    g.check(compare::page_field_changed(name, before, change, seen));
}

/// The namespaces Chromium's sandbox makes for its processes.
const SANDBOX_NS: [&str; 3] = ["user", "pid", "net"];

/// Which sandbox Chromium runs with, read from its processes' namespaces (the tree's PID 1 is
/// `pid`): Debian ships no setuid helper, so a sandboxed Chromium puts its zygote and renderers
/// in user namespaces of their own (the namespace sandbox), and `--no-sandbox` puts them in
/// none. Recorded as the live probe's data, for the reader: nothing is judged on it.
pub fn sandbox_data(pid: i32) -> serde_json::Value {
    let ns_of = |p: i32| -> Vec<Option<std::path::PathBuf>> {
        SANDBOX_NS
            .iter()
            .map(|k| std::fs::read_link(format!("/proc/{p}/ns/{k}")).ok())
            .collect()
    };
    let tree = ns_of(pid);
    let mut procs = Vec::new();
    let mut own_userns = 0usize;
    // Bounded: a tree holds a few dozen processes; more is not Chromium's doing.
    for p in crate::probe::descendants(pid).into_iter().take(256) {
        let Ok(exe) = std::fs::read_link(format!("/proc/{p}/exe")) else {
            continue;
        };
        if exe.file_name().and_then(|n| n.to_str()) != Some("chromium") {
            continue;
        }
        let ns = ns_of(p);
        let differs: Vec<&str> = SANDBOX_NS
            .iter()
            .zip(ns.iter().zip(&tree))
            .filter(|(_, (a, b))| a != b)
            .map(|(k, _)| *k)
            .collect();
        if differs.contains(&"user") {
            own_userns += 1;
        }
        let kind = std::fs::read(format!("/proc/{p}/cmdline"))
            .ok()
            .and_then(|c| {
                // Chromium rewrites its argv into one string: split at spaces too.
                c.split(|b| *b == 0 || *b == b' ')
                    .filter_map(|a| std::str::from_utf8(a).ok())
                    .find_map(|a| a.strip_prefix("--type=").map(str::to_string))
            })
            .unwrap_or_else(|| "browser".into());
        procs.push(
            serde_json::json!({"pid": p, "type": kind, "namespaces_not_the_tree_s": differs}),
        );
    }
    let sandbox = if own_userns > 0 {
        "namespace sandbox: processes in user namespaces of their own"
    } else {
        "no namespace sandbox: every Chromium process in the tree's namespaces"
    };
    serde_json::json!({"sandbox": sandbox, "processes": procs})
}
