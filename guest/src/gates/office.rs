//! The office workload's live checks: LibreOffice Writer's state is the text typed into an
//! unsaved document, typed and read back as the desktop's editor is (see `workload`), in
//! Writer's window.
//!
//! Writer's window is moved clear of the mark first. VCL's X11 backend maximises a main window
//! on a screen as small as the tree's (640x480), whatever the profile says of its size, and
//! Writer repaints its status bar after each typed key (the word count): a mark that isolation
//! and reset draw at 560,400 over a maximised Writer was painted over at once, and copy A's
//! change looked absent (`a_changed`, first VM run). So the live probe asks openbox, as a pager
//! would, to take the window out of its maximised state and to put it at `WINDOW`, and waits
//! for the frame to show it before typing.

use super::workload::{type_token, OFFICE_CLASS};
use super::{Ctx, GateBuilder, MARK};
use crate::tree::WM_NAME;
use crate::x11::{keysym, XConn};
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::model::screen::TopLevel;
use x11rb::protocol::xproto::Rectangle;

/// Writer's client area once placed: the top left, 520x360 (the browser's size), its frame
/// clear of the mark.
pub const WINDOW: Rectangle = Rectangle {
    x: 0,
    y: 0,
    width: 520,
    height: 360,
};

/// Whether `t`'s frame stays clear of the mark (left of it or above it).
pub fn clear_of_mark(t: &TopLevel) -> bool {
    let right = i32::from(t.window.x) + i32::from(t.window.width);
    let bottom = i32::from(t.window.y) + i32::from(t.window.height);
    right <= i32::from(MARK.x) || bottom <= i32::from(MARK.y)
}

/// The window manager, Writer's one managed window, placed clear of the mark
/// (`office_window_clear_of_mark`), and a token typed into its document and read back
/// (`office_holds_typed_text`).
pub fn live_checks(ctx: &mut Ctx, g: &mut GateBuilder, pid: i32) {
    super::workload::managed_window_checks(ctx, g, pid, WM_NAME, ("office_window", OFFICE_CLASS));
    g.check(place_window(ctx, pid));
    type_token(ctx, g, pid);
}

/// Moves Writer's window to `WINDOW` and waits, bounded, for its frame to be clear of the mark.
fn place_window(ctx: &Ctx, pid: i32) -> sharedos_report::report::Check {
    let asked = ctx.x(pid, "placing Writer's window", |c| {
        let tops = c.toplevels()?;
        let client = tops
            .iter()
            .find(|t| t.class == OFFICE_CLASS)
            .and_then(|t| t.client)
            .ok_or_else(|| anyhow::anyhow!("no managed window of class {OFFICE_CLASS}"))?;
        c.unmaximize_and_place(client, WINDOW)
    });
    let placed = asked.and_then(|()| {
        sharedos_report::wait::until(
            "Writer's frame to be clear of the mark",
            ctx.cfg.step_timeout,
            || {
                ctx.x(pid, "X top levels", |c| c.toplevels())
                    .ok()?
                    .into_iter()
                    .find(|t| t.class == OFFICE_CLASS && clear_of_mark(t))
            },
        )
        .map_err(anyhow::Error::from)
    });
    let value = match &placed {
        Ok(t) => json!({"frame": t.window, "mark": [MARK.x, MARK.y]}),
        Err(e) => json!({"error": format!("{e:#}"), "mark": [MARK.x, MARK.y]}),
    };
    check(
        "office_window_clear_of_mark",
        placed.is_ok(),
        value,
        "Writer's frame lies clear of the mark that isolation and reset draw",
    )
}

/// Writer's text cursor blinks while its document has the focus (VCL's X11 backend sets a
/// blink time of its own, which no setting of the profile turns off), so two grabs of one state
/// differed by the cursor (`restore_x_state.same_framebuffer`, second VM run). Taking the X
/// focus away does not stop it: openbox gives it back at once. So after each read and each
/// typing F6 moves Writer's own focus from the document to its menu bar, which hides the
/// document's cursor, and the screen is waited for, bounded, until three grabs in a row are
/// equal: Writer handles the key in its own time. `to_document` (Escape) brings the focus back
/// before the next keys.
pub fn leave_still(c: &XConn) -> anyhow::Result<()> {
    c.press(&[], keysym::F6)?;
    let mut last = c.grab()?.sha256();
    let mut equal = 0;
    sharedos_report::wait::until("Writer's screen to be still", STILL_WITHIN, || {
        std::thread::sleep(GRAB_APART);
        let now = c.grab().ok()?.sha256();
        equal = if now == last { equal + 1 } else { 0 };
        last = now;
        (equal >= 2).then_some(())
    })?;
    Ok(())
}

/// Brings Writer's focus back from its menu bar to the document (see `leave_still`).
pub fn to_document(c: &XConn) -> anyhow::Result<()> {
    c.press(&[], keysym::ESCAPE)
}

/// Three grabs this far apart span 800 ms, more than one state of VCL's cursor blink (500 ms on,
/// 500 ms off): a blinking cursor never leaves all three equal.
const GRAB_APART: std::time::Duration = std::time::Duration::from_millis(400);
/// The bound of that wait.
const STILL_WITHIN: std::time::Duration = std::time::Duration::from_secs(15);

#[cfg(test)]
mod tests {
    use super::*;
    use sharedos_report::model::screen::Window;

    fn top(x: i16, y: i16, width: u16, height: u16) -> TopLevel {
        TopLevel {
            window: Window {
                id: 1,
                title: String::new(),
                x,
                y,
                width,
                height,
            },
            client: Some(2),
            class: OFFICE_CLASS.into(),
        }
    }

    #[test]
    fn a_frame_over_the_mark_is_not_clear_of_it() {
        assert!(clear_of_mark(&top(0, 0, 522, 381)));
        assert!(!clear_of_mark(&top(0, 0, 640, 480)), "maximised");
        assert!(!clear_of_mark(&top(100, 100, 500, 320)));
        assert!(clear_of_mark(&top(0, 0, 640, 400)));
    }
}
