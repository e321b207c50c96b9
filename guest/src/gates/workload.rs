//! What a workload adds to the gates (`--workload`): its readiness conditions, the live checks
//! of its programs, and the reading and changing of its application state from outside the
//! tree, over the X wire.
//!
//! - `desktop`: the editor's state is text a user typed. It is typed through XTEST (fake key
//!   events, keycodes from the server's own keyboard mapping) and read back the way a user
//!   would take it out: select all and copy (Ctrl+A, Ctrl+C through XTEST), then the CLIPBOARD
//!   selection is converted to UTF8_STRING on a window of our own and the property read,
//!   bounded. Selecting all again leaves the screen as it was, so reading is done before every
//!   frame grab and the dump-time frame already shows the selection.
//! - `office`: the same, in LibreOffice Writer's document (see `office`).
//! - `browser`: the page's script keeps a token and a counter and shows them in the document
//!   title; the browser window's `_NET_WM_NAME` is read.
//!
//! Which top-level windows are compared (same_windows): the mapped children of the root. With
//! the window manager these are its frames, each titled by the client it holds, and its own
//! mapped 1x1 window (openbox's `_NET_SUPPORTING_WM_CHECK` window, titled "Openbox"); the
//! browser's title is compared up to its counter, which moves on by design.

use super::{Ctx, GateBuilder};
pub use crate::tree::OFFICE_CLASS;
use crate::tree::{self, EDITOR_CLASS, WM_NAME};
use crate::x11::{keysym, XConn};
use anyhow::{Context, Result};
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::model::app::{parse_page_title, PageState};
use sharedos_report::model::screen::TopLevel;
use sharedos_report::model::tree::Observation;
use sharedos_report::report::Workload;
use std::time::Duration;

/// Bound of one read of the editor (the copy taking the selection, the owner answering).
const EDITOR_READ: Duration = Duration::from_secs(20);

/// One readiness condition of a tree: its name, the process it waits for, and whether it holds.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Condition {
    pub name: &'static str,
    pub process: &'static str,
    pub holds: bool,
}

/// The conditions of `ctx`'s workload for the tree whose PID 1 is `pid`, in start order.
pub fn readiness(ctx: &Ctx, pid: i32) -> Vec<Condition> {
    let c = |name, process, holds| Condition {
        name,
        process,
        holds,
    };
    let x_socket = crate::x11::socket_path(pid, ctx.cfg.display).exists();
    let mut v = vec![
        c("init_alive", "the tree's PID 1", crate::probe::is_live(pid)),
        c("x_socket", "Xvfb", x_socket),
    ];
    let tops = if x_socket {
        ctx.x(pid, "X window list", |c| c.toplevels()).ok()
    } else {
        None
    };
    let tops = tops.unwrap_or_default();
    match ctx.cfg.options.workload {
        Workload::Xterm => v.push(c(
            "window_mapped",
            "xterm",
            tops.iter().any(|t| t.window.title == tree::XTERM_TITLE),
        )),
        Workload::Desktop => {
            let bus = tree::path_in_tree(pid, tree::BUS_SOCKET);
            v.push(c("session_bus", "dbus-daemon", bus_answers(&bus).is_ok()));
            v.extend(openbox_and_window(
                ctx,
                pid,
                x_socket,
                &tops,
                ("editor_window", "mousepad", EDITOR_CLASS),
            ));
        }
        Workload::Browser | Workload::BrowserNosandbox => v.push(c(
            "page_shown",
            "firefox-esr",
            x_socket && ctx.x(pid, "page title", page_state).is_ok(),
        )),
        Workload::Session => v.extend(super::session::readiness(ctx, pid, x_socket, &tops)),
        Workload::Office => v.extend(openbox_and_window(
            ctx,
            pid,
            x_socket,
            &tops,
            ("office_window", "soffice.bin", OFFICE_CLASS),
        )),
        Workload::Chromium | Workload::ChromiumNosandbox => v.push(c(
            "page_shown",
            "chromium",
            x_socket && ctx.x(pid, "page title", page_state).is_ok(),
        )),
    }
    v.push(c("app_answers", "stateapp", ctx.app(pid, "get").is_ok()));
    v
}

/// The readiness of openbox announced on the display and of one managed window of `window`'s
/// class (its condition's name, the process it waits for, the class): the desktop's and
/// office's trees.
fn openbox_and_window(
    ctx: &Ctx,
    pid: i32,
    x_socket: bool,
    tops: &[TopLevel],
    window: (&'static str, &'static str, &str),
) -> [Condition; 2] {
    let wm = x_socket
        && ctx
            .x(pid, "window manager", |c| c.window_manager_name())
            .is_ok_and(|n| n.as_deref() == Some(WM_NAME));
    let (name, process, class) = window;
    [
        Condition {
            name: "window_manager",
            process: "openbox",
            holds: wm,
        },
        Condition {
            name,
            process,
            holds: tops.iter().any(|t| t.class == class && t.client.is_some()),
        },
    ]
}

/// What a restored or original tree's session bus answers: the D-Bus handshake's first step
/// (`AUTH EXTERNAL` with our uid), bounded. Ok with the server's GUID line.
pub fn bus_answers(socket: &std::path::Path) -> Result<String> {
    use std::io::{Read, Write};
    let mut s = std::os::unix::net::UnixStream::connect(socket)
        .with_context(|| format!("connecting to the session bus at {}", socket.display()))?;
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let uid: String = nix::unistd::getuid()
        .as_raw()
        .to_string()
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    s.write_all(format!("\0AUTH EXTERNAL {uid}\r\n").as_bytes())?;
    let mut buf = [0u8; 256];
    let n = s.read(&mut buf).context("reading the bus's answer")?;
    let line = String::from_utf8_lossy(&buf[..n]).trim().to_string();
    if !line.starts_with("OK ") {
        anyhow::bail!("the session bus answered {line:?} instead of OK");
    }
    let _ = s.write_all(b"BEGIN\r\n");
    Ok(line)
}

/// The class of the window of the workload's editor, for the workloads whose state is text
/// typed into one: mousepad's, or LibreOffice Writer's.
pub fn editor_class(w: Workload) -> Option<&'static str> {
    match w {
        Workload::Desktop => Some(EDITOR_CLASS),
        Workload::Office => Some(OFFICE_CLASS),
        Workload::Xterm
        | Workload::Browser
        | Workload::BrowserNosandbox
        | Workload::Session
        | Workload::Chromium
        | Workload::ChromiumNosandbox => None,
    }
}

/// The name of a check of the typed text: `{word}_{what}`, the word being the workload's
/// (`editor` for the desktop, `office` for LibreOffice).
pub fn text_check(w: Workload, what: &str) -> String {
    format!("{}_{what}", w.typed_text_word().unwrap_or("editor"))
}

/// The editor's client window: the one top level holding a managed client of class `class`.
fn editor_client(c: &XConn, class: &str) -> Result<u32> {
    let tops = c.toplevels()?;
    let mut editors = tops
        .iter()
        .filter(|t| t.class == class)
        .filter_map(|t| t.client);
    let first = editors
        .next()
        .with_context(|| format!("no mapped window of the editor (class {class})"))?;
    if editors.next().is_some() {
        anyhow::bail!("more than one editor window is mapped");
    }
    Ok(first)
}

/// The editor's whole text: focus it (unless it has the focus), select all and copy through
/// XTEST, and read the CLIPBOARD. Writer's copy of its one paragraph was seen to put exactly
/// the typed text there, with no line break or paragraph mark after it.
pub fn read_editor(c: &XConn, class: &str) -> Result<String> {
    let client = editor_client(c, class)?;
    c.focus(client)?;
    if class == OFFICE_CLASS {
        super::office::to_document(c)?;
    }
    let text = c.copy_and_read_clipboard(
        |c| {
            c.press(&[keysym::CONTROL_L], keysym::A)?;
            c.press(&[keysym::CONTROL_L], keysym::C)
        },
        EDITOR_READ,
    )?;
    if class == OFFICE_CLASS {
        super::office::leave_still(c)?;
    }
    Ok(text)
}

/// Types `text` at the end of the editor's text (Ctrl+End first: the read before left all of
/// it selected, and typing would replace it).
pub fn type_into_editor(c: &XConn, class: &str, text: &str) -> Result<()> {
    let client = editor_client(c, class)?;
    c.focus(client)?;
    if class == OFFICE_CLASS {
        super::office::to_document(c)?;
    }
    c.press(&[keysym::CONTROL_L], keysym::END)?;
    c.type_text(text)?;
    if class == OFFICE_CLASS {
        super::office::leave_still(c)?;
    }
    Ok(())
}

/// Selects the editor's whole text and deletes it.
pub fn clear_editor(c: &XConn, class: &str) -> Result<()> {
    let client = editor_client(c, class)?;
    c.focus(client)?;
    if class == OFFICE_CLASS {
        super::office::to_document(c)?;
    }
    c.press(&[keysym::CONTROL_L], keysym::A)?;
    c.press(&[], keysym::BACKSPACE)
}

/// The page's state from the browser window's `_NET_WM_NAME`: exactly one top level (or the
/// client it holds) must show it.
pub fn page_state(c: &XConn) -> Result<PageState> {
    let mut found = Vec::new();
    for t in c.toplevels()? {
        let title = c.net_wm_name(t.client.unwrap_or(t.window.id))?;
        if let Some(p) = parse_page_title(&title) {
            found.push(p);
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => anyhow::bail!("no window's _NET_WM_NAME shows the page's token and counter"),
        n => anyhow::bail!("{n} windows show a page's token and counter"),
    }
}

/// What `observe` adds for the workload, read before the frame is grabbed.
#[derive(Default)]
pub struct Extra {
    pub editor_text: Option<String>,
    pub page: Option<PageState>,
    pub workspace: Option<u32>,
}

/// What `observe` adds for the workload, read before the frame is grabbed.
pub fn observe_extra(ctx: &Ctx, pid: i32) -> Result<Extra> {
    Ok(match ctx.cfg.options.workload {
        Workload::Xterm => Extra::default(),
        Workload::Desktop | Workload::Office => {
            let class = editor_class(ctx.cfg.options.workload).unwrap_or(EDITOR_CLASS);
            Extra {
                editor_text: Some(ctx.x(pid, "the editor's text", move |c| read_editor(c, class))?),
                ..Extra::default()
            }
        }
        Workload::Browser | Workload::BrowserNosandbox => Extra {
            page: Some(ctx.x(pid, "the page's title", page_state)?),
            ..Extra::default()
        },
        Workload::Chromium | Workload::ChromiumNosandbox => Extra {
            page: Some(ctx.x(pid, "the page's title", page_state)?),
            ..Extra::default()
        },
        Workload::Session => Extra {
            workspace: Some(ctx.x(pid, "the current workspace", super::session::read_workspace)?),
            ..Extra::default()
        },
    })
}

/// The live probe's checks of the workload's window and, for the desktop, the token typed
/// into the editor (kept in `ctx.typed` for every later gate).
pub fn live_checks(ctx: &mut Ctx, g: &mut GateBuilder, pid: i32) {
    match ctx.cfg.options.workload {
        Workload::Xterm => {}
        Workload::Desktop => {
            managed_window_checks(ctx, g, pid, WM_NAME, ("editor_window", EDITOR_CLASS));
            let bus = tree::path_in_tree(pid, tree::BUS_SOCKET);
            g.check(bus_check("session_bus_answers", &bus));
            type_token(ctx, g, pid);
        }
        Workload::Browser | Workload::BrowserNosandbox => page_live_checks(ctx, g, pid),
        Workload::Chromium | Workload::ChromiumNosandbox => {
            page_live_checks(ctx, g, pid);
            super::chromium::type_token(ctx, g, pid);
            g.data("chromium_sandbox", super::chromium::sandbox_data(pid));
        }
        Workload::Session => super::session::live_checks(ctx, g, pid),
        Workload::Office => super::office::live_checks(ctx, g, pid),
    }
}

/// The browsers' page, live: one window shows it, its token's shape, its counter moving on.
fn page_live_checks(ctx: &Ctx, g: &mut GateBuilder, pid: i32) {
    match ctx.x(pid, "X top levels", |c| c.toplevels()) {
        Ok(tops) => g.check(compare::one_window_showing_page("browser_window", &tops)),
        Err(e) => {
            g.problem(format!("listing the top-level windows: {e:#}"));
            false
        }
    };
    match ctx.x(pid, "the page's title", page_state) {
        Ok(first) => {
            let mut shape = compare::token_is_32_hex(&first.token);
            shape.name = "page_token_is_32_hex".into();
            g.check(shape);
            let next = next_page(ctx, pid, first.counter).map(|p| p.as_app());
            g.check(compare::counter_advances(
                "page_counter_advances",
                &first.as_app(),
                next.as_ref().map_err(|e| e.clone()),
            ));
        }
        Err(e) => g.problem(format!("reading the page's title: {e:#}")),
    }
}

/// The window manager announced as `wm_name` (`window_manager_running`), and exactly one
/// managed window of `class` (the check named `window.0`): the desktop's, office's and the
/// session's live probes.
pub fn managed_window_checks(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    wm_name: &str,
    window: (&str, &str),
) {
    let wm = ctx
        .x(pid, "window manager", |c| c.window_manager_name())
        .map_err(|e| format!("{e:#}"));
    g.check(compare::window_manager_running(
        "window_manager_running",
        wm,
        wm_name,
    ));
    match ctx.x(pid, "X top levels", |c| c.toplevels()) {
        Ok(tops) => {
            g.check(compare::one_managed_window_of_class(
                window.0, &tops, window.1,
            ));
        }
        Err(e) => g.problem(format!("listing the top-level windows: {e:#}")),
    }
}

/// The session bus answers the first step of its handshake.
pub fn bus_check(name: &str, socket: &std::path::Path) -> sharedos_report::report::Check {
    let r = bus_answers(socket).map_err(|e| format!("{e:#}"));
    check(
        name,
        r.is_ok(),
        json!({"socket": socket, "answer": r}),
        "the session bus inside the tree answers AUTH EXTERNAL with OK",
    )
}

/// `bytes` random bytes in hex, to be typed as `what` (a token, a change); None, with the
/// gate's problem said, when the system's generator fails.
pub fn random_to_type(g: &mut GateBuilder, bytes: usize, what: &str) -> Option<String> {
    match sharedos_report::random::random_hex(bytes) {
        Ok(t) => Some(t),
        Err(e) => {
            g.problem(format!("making {what} to type: {e:#}"));
            None
        }
    }
}

/// Types a random token into the editor and reads the whole text back.
pub fn type_token(ctx: &mut Ctx, g: &mut GateBuilder, pid: i32) {
    let w = ctx.cfg.options.workload;
    let class = editor_class(w).unwrap_or(EDITOR_CLASS);
    let Some(token) = random_to_type(g, 16, "a token") else {
        return;
    };
    let typed = {
        let t = token.clone();
        ctx.x(pid, "typing into the editor", move |c| {
            type_into_editor(c, class, &t)
        })
    };
    if let Err(e) = typed {
        g.problem(format!("typing into the editor through XTEST: {e:#}"));
        return;
    }
    let read = ctx
        .x(pid, "the editor's text", move |c| read_editor(c, class))
        .map_err(|e| format!("{e:#}"));
    g.check(compare::editor_holds_typed(
        &text_check(w, "holds_typed_text"),
        &token,
        read.as_deref().map_err(|e| e.clone()),
    ));
    ctx.typed = Some(token);
}

/// The page's state once its counter passed `above`, bounded by the step timeout: a restored
/// Firefox under TCG was seen to hold its counter for more than 20 s before its timers ran
/// again, and a stall is told apart from slowness only by waiting the whole bound.
fn next_page(ctx: &Ctx, pid: i32, above: u64) -> Result<PageState, String> {
    sharedos_report::wait::until(
        "the page's counter to advance",
        ctx.cfg.step_timeout,
        || {
            ctx.x(pid, "the page's title", page_state)
                .ok()
                .filter(|p| p.counter > above)
        },
    )
    .map_err(|e| e.to_string())
}

/// Checks that a copy holds the workload's dump-time application state: the editor's text
/// (without `typed_elsewhere`, what was typed into another copy), or the page's token and
/// counter. `prefix` names the copy in the check names.
pub fn check_copy_state(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    snap: &Observation,
    prefix: &str,
    typed_elsewhere: Option<&str>,
) {
    match ctx.cfg.options.workload {
        Workload::Xterm => {}
        Workload::Desktop => {
            check_copy_text(ctx, g, pid, snap, prefix, typed_elsewhere);
            let bus = tree::path_in_tree(pid, tree::BUS_SOCKET);
            g.check(bus_check(&format!("{prefix}session_bus_answers"), &bus));
        }
        Workload::Browser | Workload::BrowserNosandbox => {
            page_copy_checks(ctx, g, pid, snap, prefix)
        }
        Workload::Chromium | Workload::ChromiumNosandbox => {
            page_copy_checks(ctx, g, pid, snap, prefix);
            super::chromium::check_copy_field(ctx, g, pid, snap, prefix, typed_elsewhere);
        }
        Workload::Session => {
            super::session::check_copy_state(ctx, g, pid, snap, prefix, typed_elsewhere)
        }
        Workload::Office => check_copy_text(ctx, g, pid, snap, prefix, typed_elsewhere),
    }
}

/// The copy's editor holds the dump-time text (`{prefix}editor_same_text`, or office_ for
/// LibreOffice), without `typed_elsewhere`.
fn check_copy_text(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    snap: &Observation,
    prefix: &str,
    typed_elsewhere: Option<&str>,
) {
    let w = ctx.cfg.options.workload;
    let class = editor_class(w).unwrap_or(EDITOR_CLASS);
    let dump = snap.editor_text.clone().unwrap_or_default();
    let seen = ctx
        .x(pid, "the editor's text", move |c| read_editor(c, class))
        .map_err(|e| format!("{e:#}"));
    g.check(compare::editor_same_text(
        &format!("{prefix}{}", text_check(w, "same_text")),
        &dump,
        seen.as_deref().map_err(|e| e.clone()),
        typed_elsewhere,
    ));
}

/// A restored copy's page: the dump-time token, a counter that continues from the dump's and
/// moves on.
fn page_copy_checks(ctx: &Ctx, g: &mut GateBuilder, pid: i32, snap: &Observation, prefix: &str) {
    let Some(dump) = &snap.page else {
        g.problem("no dump-time page state");
        return;
    };
    let first = match ctx.x(pid, "the page's title", page_state) {
        Ok(p) => p,
        Err(e) => {
            g.problem(format!("the restored page's title: {e:#}"));
            return;
        }
    };
    g.check(compare::same_token(
        &format!("{prefix}page_same_token"),
        &dump.token,
        &first.token,
    ));
    g.check(compare::counter_continues(
        &format!("{prefix}page_counter_continues"),
        dump.counter,
        snap.app_asked_at.elapsed(),
        first.counter,
    ));
    let next = next_page(ctx, pid, first.counter).map(|p| p.as_app());
    g.check(compare::counter_advances(
        &format!("{prefix}page_counter_advances"),
        &first.as_app(),
        next.as_ref().map_err(|e| e.clone()),
    ));
}

/// A change typed at the end of a copy's editor text, different per call: isolation and reset
/// type one into copy A (which may hold an earlier gate's change already). Returns the text the
/// editor held before and the change; None for a workload without an editor. The session's
/// change is a switch to another workspace than the copy's and the dump-time one (`snap`'s),
/// returned as the two workspace numbers in words.
pub fn change_editor(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    name: &str,
    snap: &Observation,
) -> Option<(String, String)> {
    if ctx.cfg.options.workload == Workload::Session {
        return super::session::change(ctx, g, pid, name, snap);
    }
    if ctx.cfg.options.workload.is_chromium() {
        return super::chromium::change_field(ctx, g, pid, name);
    }
    let class = editor_class(ctx.cfg.options.workload)?;
    let suffix = random_to_type(g, 4, "the change")?;
    let change = format!(" changed-{suffix}");
    let t = change.clone();
    let typed = ctx.x(pid, &format!("typing into {name}'s editor"), move |c| {
        let before = read_editor(c, class)?;
        type_into_editor(c, class, &t)?;
        Ok(before)
    });
    match typed {
        Ok(before) => Some((before, change)),
        Err(e) => {
            g.problem(format!("typing into {name}'s editor: {e:#}"));
            None
        }
    }
}

/// The editor of a changed copy shows the text it held before with the change at its end; a
/// changed session shows the workspace it was switched to (the check named with `workspace`
/// for `editor`).
pub fn check_changed(
    g: &mut GateBuilder,
    name: &str,
    o: &Observation,
    change: Option<&(String, String)>,
    workload: Workload,
) {
    if o.page.as_ref().is_some_and(|p| p.field.is_some()) {
        // The page's field stands in for the editor: `a_page_field_changed`,
        // `page_field_change_seen`.
        let name = name.replacen("editor", "page_field", 1);
        return super::chromium::check_field_changed(g, &name, o, change);
    }
    let Some((before, change)) = change else {
        return;
    };
    if workload == Workload::Session {
        let name = name.replace("editor", "workspace");
        return super::session::check_changed(g, &name, o, &(before.clone(), change.clone()));
    }
    let seen = o
        .editor_text
        .as_deref()
        .context("the observation has no editor text")
        .map_err(|e| format!("{e:#}"));
    g.check(compare::editor_changed(name, before, change, seen));
}
