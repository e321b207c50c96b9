//! Reads an X server over the X wire: its mapped top-level windows with their titles, and its
//! framebuffer through GetImage (pixel data only, so grabs of an unchanged screen compare equal).

use anyhow::{bail, Context, Result};
use sharedos_report::model::screen::{Frame, TopLevel, Window};
use std::io::BufWriter;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use x11rb::connection::{Connection, RequestConnection};
use x11rb::protocol::xproto::{
    AtomEnum, ChangeGCAux, ConnectionExt, CreateGCAux, ImageFormat, MapState, Rectangle,
};
use x11rb::protocol::xtest::ConnectionExt as _;
use x11rb::rust_connection::{DefaultStream, RustConnection};

/// Keysyms the gates press besides printable ASCII (whose keysym is its code).
pub mod keysym {
    pub const CONTROL_L: u32 = 0xffe3;
    pub const SHIFT_L: u32 = 0xffe1;
    pub const END: u32 = 0xff57;
    pub const BACKSPACE: u32 = 0xff08;
    pub const A: u32 = 0x61;
    pub const C: u32 = 0x63;
    pub const ESCAPE: u32 = 0xff1b;
    pub const F6: u32 = 0xffc3;
}

/// How deep below a top-level window the client with `WM_STATE` is looked for (a window
/// manager's frame holds it one or two levels down), and how many windows at most are read.
const CLIENT_SEARCH_DEPTH: usize = 3;
const CLIENT_SEARCH_WINDOWS: usize = 64;
/// The most text read back from the CLIPBOARD, in bytes.
pub const MAX_CLIPBOARD: u32 = 64 * 1024;

/// The display's socket as seen from outside the tree through the tree's root.
pub fn socket_path(tree_pid: i32, display: u32) -> PathBuf {
    PathBuf::from(format!("/proc/{tree_pid}/root/tmp/.X11-unix/X{display}"))
}

/// The guest's own work on a frame, kept off the shared type so that the shared crate needs
/// neither x11rb (for `Rectangle`) nor the PNG encoder.
pub trait FrameExt {
    /// Whether every pixel of `rect` has the colour `rgb` (0xRRGGBB); false when the rectangle
    /// is empty or reaches outside the frame.
    fn rect_is(&self, rect: Rectangle, rgb: u32) -> bool;
    fn write_png(&self, path: &Path) -> Result<()>;
}

impl FrameExt for Frame {
    fn rect_is(&self, rect: Rectangle, rgb: u32) -> bool {
        let (x0, y0) = (rect.x as i64, rect.y as i64);
        let (x1, y1) = (x0 + rect.width as i64, y0 + rect.height as i64);
        if rect.width == 0 || rect.height == 0 || x0 < 0 || y0 < 0 {
            return false;
        }
        if x1 > self.width as i64 || y1 > self.height as i64 {
            return false;
        }
        let want = [(rgb >> 16) as u8, (rgb >> 8) as u8, rgb as u8];
        (y0..y1).all(|y| {
            (x0..x1).all(|x| {
                let i = ((y * self.width as i64 + x) * 3) as usize;
                self.rgb.get(i..i + 3) == Some(&want[..])
            })
        })
    }

    fn write_png(&self, path: &Path) -> Result<()> {
        let f =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        let mut enc = png::Encoder::new(BufWriter::new(f), self.width.into(), self.height.into());
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut w = enc
            .write_header()
            .with_context(|| format!("writing the PNG header of {}", path.display()))?;
        w.write_image_data(&self.rgb)
            .with_context(|| format!("writing the pixels of {}", path.display()))?;
        w.finish()
            .with_context(|| format!("finishing {}", path.display()))?;
        Ok(())
    }
}

/// The process that answers on an X socket (SO_PEERCRED, as this process's pid namespace numbers
/// it) and the pid namespace it runs in.
pub fn server_peer(socket: &Path) -> Result<(i32, String)> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    let stream = UnixStream::connect(socket)
        .with_context(|| format!("connecting to the X socket {}", socket.display()))?;
    let cred = getsockopt(&stream, PeerCredentials)
        .with_context(|| format!("SO_PEERCRED on {}", socket.display()))?;
    let pid = cred.pid();
    let ns = crate::probe::pidns_of(pid)
        .with_context(|| format!("reading the pid namespace of the X server (pid {pid})"))?;
    Ok((pid, ns))
}

/// XTEST's delay before the press of a key typed twice in a row: see `XConn::type_text`.
const REPEAT_DELAY_MS: u32 = 2;

pub struct XConn {
    conn: RustConnection,
    root: u32,
    width: u16,
    height: u16,
}

impl XConn {
    /// Connects to the server behind a unix socket path. Xvfb without `-auth` accepts local
    /// clients, so no cookie is sent.
    pub fn connect(socket: &Path) -> Result<Self> {
        let stream = UnixStream::connect(socket)
            .with_context(|| format!("connecting to the X socket {}", socket.display()))?;
        let (stream, _peer) =
            DefaultStream::from_unix_stream(stream).context("wrapping the X socket")?;
        let conn = RustConnection::connect_to_stream(stream, 0)
            .with_context(|| format!("X handshake on {}", socket.display()))?;
        let screen = &conn.setup().roots[0];
        let (root, width, height) = (screen.root, screen.width_in_pixels, screen.height_in_pixels);
        Ok(XConn {
            conn,
            root,
            width,
            height,
        })
    }

    pub fn vendor(&self) -> String {
        String::from_utf8_lossy(&self.conn.setup().vendor).into_owned()
    }

    /// "X.Org X Server 1.21.1.7 (release 12101007)", read from the running server.
    pub fn server_version(&self) -> String {
        let r = self.conn.setup().release_number;
        format!(
            "{} {} (release {r}, read over the X wire)",
            self.vendor(),
            release_string(r)
        )
    }

    /// The root's children that are mapped, with WM_NAME (or _NET_WM_NAME) as title. Without a
    /// window manager these are exactly the top-level windows; with one they are its frames
    /// (titled by the client each holds) and its own windows.
    /// A page title is listed without its counter, which moves on by design.
    pub fn mapped_toplevels(&self) -> Result<Vec<Window>> {
        Ok(self
            .toplevels()?
            .into_iter()
            .map(|t| Window {
                title: sharedos_report::model::app::title_without_counter(&t.window.title),
                ..t.window
            })
            .collect())
    }

    /// The mapped children of the root, each with the client window it holds and that
    /// client's class. A top level without a name of its own (a frame) takes its client's.
    pub fn toplevels(&self) -> Result<Vec<TopLevel>> {
        let tree = self.conn.query_tree(self.root)?.reply()?;
        let mut out = Vec::new();
        for w in tree.children {
            let attrs = self.conn.get_window_attributes(w)?.reply()?;
            if attrs.map_state != MapState::VIEWABLE {
                continue;
            }
            let geo = self.conn.get_geometry(w)?.reply()?;
            let client = self.find_client(w)?;
            let mut title = self.title(w)?;
            if title.is_empty() {
                if let Some(c) = client.filter(|c| *c != w) {
                    title = self.title(c)?;
                }
            }
            // A page's title is read from _NET_WM_NAME, which the browser keeps current (its
            // WM_NAME was seen to lag at "Mozilla Firefox").
            let net = self.net_wm_name(client.unwrap_or(w))?;
            if sharedos_report::model::app::parse_page_title(&net).is_some() {
                title = net;
            }
            let class = self.wm_class(client.unwrap_or(w))?;
            out.push(TopLevel {
                window: Window {
                    id: w,
                    title,
                    x: geo.x,
                    y: geo.y,
                    width: geo.width,
                    height: geo.height,
                },
                client,
                class,
            });
        }
        Ok(out)
    }

    fn atom(&self, name: &str) -> Result<u32> {
        Ok(self.conn.intern_atom(false, name.as_bytes())?.reply()?.atom)
    }

    /// WM_NAME, else _NET_WM_NAME.
    fn title(&self, w: u32) -> Result<String> {
        let title = self.text_property(w, AtomEnum::WM_NAME.into())?;
        if !title.is_empty() {
            return Ok(title);
        }
        self.net_wm_name(w)
    }

    /// The window's `_NET_WM_NAME` (UTF-8), empty when it has none.
    pub fn net_wm_name(&self, w: u32) -> Result<String> {
        let a = self.atom("_NET_WM_NAME")?;
        self.text_property(w, a)
    }

    /// The class half of WM_CLASS (`instance\0class\0`), empty when unset.
    pub fn wm_class(&self, w: u32) -> Result<String> {
        let r = self
            .conn
            .get_property(false, w, AtomEnum::WM_CLASS, AtomEnum::STRING, 0, 256)?
            .reply()?;
        Ok(r.value
            .split(|b| *b == 0)
            .nth(1)
            .map(|c| String::from_utf8_lossy(c).into_owned())
            .unwrap_or_default())
    }

    /// The window at or below `top` that carries WM_STATE (breadth first, bounded), as
    /// ICCCM tools find a frame's client; None when there is none.
    fn find_client(&self, top: u32) -> Result<Option<u32>> {
        let wm_state = self.atom("WM_STATE")?;
        let mut level = vec![top];
        let mut read = 0;
        for _ in 0..=CLIENT_SEARCH_DEPTH {
            let mut next = Vec::new();
            for w in level {
                read += 1;
                if read > CLIENT_SEARCH_WINDOWS {
                    return Ok(None);
                }
                let p = self
                    .conn
                    .get_property(false, w, wm_state, AtomEnum::ANY, 0, 0)?
                    .reply()?;
                if p.type_ != u32::from(AtomEnum::NONE) {
                    return Ok(Some(w));
                }
                next.extend(self.conn.query_tree(w)?.reply()?.children);
            }
            level = next;
        }
        Ok(None)
    }

    /// The `_NET_WM_NAME` of the window the root's `_NET_SUPPORTING_WM_CHECK` names: the
    /// running window manager's name; None when no manager announces itself.
    pub fn window_manager_name(&self) -> Result<Option<String>> {
        let check = self.atom("_NET_SUPPORTING_WM_CHECK")?;
        let r = self
            .conn
            .get_property(false, self.root, check, AtomEnum::WINDOW, 0, 1)?
            .reply()?;
        let Some(w) = r.value32().and_then(|mut v| v.next()) else {
            return Ok(None);
        };
        Ok(Some(self.net_wm_name(w)?))
    }

    /// The first CARDINAL of the root's property `name` (`_NET_CURRENT_DESKTOP`,
    /// `_NET_NUMBER_OF_DESKTOPS`), None when the root has none.
    pub fn root_cardinal(&self, name: &str) -> Result<Option<u32>> {
        let a = self.atom(name)?;
        let r = self
            .conn
            .get_property(false, self.root, a, AtomEnum::CARDINAL, 0, 1)?
            .reply()?;
        Ok(r.value32().and_then(|mut v| v.next()))
    }

    /// Asks the window manager to show workspace `n`, as a pager does (EWMH): a
    /// `_NET_CURRENT_DESKTOP` client message to the root. A round trip ends it; the manager
    /// answers by setting the root's property.
    pub fn ask_workspace(&self, n: u32) -> Result<()> {
        use x11rb::protocol::xproto::{ClientMessageEvent, EventMask};
        let a = self.atom("_NET_CURRENT_DESKTOP")?;
        let ev = ClientMessageEvent::new(32, self.root, a, [n, x11rb::CURRENT_TIME, 0, 0, 0]);
        self.conn.send_event(
            false,
            self.root,
            EventMask::SUBSTRUCTURE_NOTIFY | EventMask::SUBSTRUCTURE_REDIRECT,
            ev,
        )?;
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    /// The bytes of window `w`'s property `name`, of any type, at most `max` of them; empty when
    /// it has none.
    pub fn property_bytes(&self, w: u32, name: &str, max: u32) -> Result<Vec<u8>> {
        let a = self.atom(name)?;
        let r = self
            .conn
            .get_property(false, w, a, AtomEnum::ANY, 0, max.div_ceil(4))?
            .reply()?;
        Ok(r.value)
    }

    /// The window that owns the selection `name`, None when nobody does.
    pub fn selection_owner(&self, name: &str) -> Result<Option<u32>> {
        let a = self.atom(name)?;
        let owner = self.conn.get_selection_owner(a)?.reply()?.owner;
        Ok((owner != x11rb::NONE).then_some(owner))
    }

    /// The keycode that yields `sym` and whether Shift is needed for it, from the server's
    /// keyboard mapping.
    fn keycode(&self, sym: u32) -> Result<(u8, bool)> {
        let setup = self.conn.setup();
        let (min, max) = (setup.min_keycode, setup.max_keycode);
        let count = max
            .checked_sub(min)
            .and_then(|d| d.checked_add(1))
            .with_context(|| format!("the server's keycode range {min}..={max} is not one"))?;
        let map = self.conn.get_keyboard_mapping(min, count)?.reply()?;
        let per = usize::from(map.keysyms_per_keycode).max(1);
        for (i, syms) in map.keysyms.chunks(per).enumerate() {
            for (level, s) in syms.iter().take(2).enumerate() {
                if *s == sym {
                    let code = u8::try_from(usize::from(min) + i)
                        .context("a keycode above 255 in the keyboard mapping")?;
                    return Ok((code, level == 1));
                }
            }
        }
        bail!("no key yields keysym 0x{sym:x} in the server's keyboard mapping")
    }

    /// A fake key event the server processes `delay_ms` after it arrives (XTEST's own delay).
    fn fake_key(&self, code: u8, press: bool, delay_ms: u32) -> Result<()> {
        use x11rb::protocol::xproto::{KEY_PRESS_EVENT, KEY_RELEASE_EVENT};
        let kind = if press {
            KEY_PRESS_EVENT
        } else {
            KEY_RELEASE_EVENT
        };
        self.conn
            .xtest_fake_input(kind, code, delay_ms, x11rb::NONE, 0, 0, 0)?;
        Ok(())
    }

    /// Presses `sym` with the modifiers `mods` held (all keysyms), through XTEST, as a user's
    /// keyboard would: to whichever window has the input focus. A round trip ends it.
    pub fn press(&self, mods: &[u32], sym: u32) -> Result<()> {
        self.press_after(mods, sym, 0)
    }

    /// `press`, the key's press processed `delay_ms` after the events before it.
    fn press_after(&self, mods: &[u32], sym: u32, delay_ms: u32) -> Result<()> {
        if self
            .conn
            .extension_information(x11rb::protocol::xtest::X11_EXTENSION_NAME)?
            .is_none()
        {
            bail!("the X server has no XTEST extension to type with");
        }
        let (code, shift) = self.keycode(sym)?;
        let mut held = Vec::new();
        for m in mods {
            held.push(self.keycode(*m)?.0);
        }
        if shift {
            held.push(self.keycode(keysym::SHIFT_L)?.0);
        }
        for m in &held {
            self.fake_key(*m, true, 0)?;
        }
        self.fake_key(code, true, delay_ms)?;
        self.fake_key(code, false, 0)?;
        for m in held.iter().rev() {
            self.fake_key(*m, false, 0)?;
        }
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    /// Types printable ASCII `text` through XTEST, one key at a time.
    /// A key typed again right after its release is held back by XTEST's delay of
    /// `REPEAT_DELAY_MS`, so that its press carries a later server time than the release:
    /// LibreOffice's X11 backend takes a release and a press of one key at one server time for
    /// the keyboard's autorepeat and dropped the second of two equal letters.
    pub fn type_text(&self, text: &str) -> Result<()> {
        let mut last = None;
        for ch in text.chars() {
            if !(' '..='~').contains(&ch) {
                bail!("{ch:?} cannot be typed: only printable ASCII is");
            }
            let delay = if last == Some(ch) { REPEAT_DELAY_MS } else { 0 };
            self.press_after(&[], u32::from(ch), delay)?;
            last = Some(ch);
        }
        Ok(())
    }

    /// Gives `w` the input focus unless it has it already (a restored copy keeps its focus).
    pub fn focus(&self, w: u32) -> Result<()> {
        use x11rb::protocol::xproto::InputFocus;
        if self.conn.get_input_focus()?.reply()?.focus != w {
            self.conn
                .set_input_focus(InputFocus::PARENT, w, x11rb::CURRENT_TIME)?;
            self.conn.get_input_focus()?.reply()?;
        }
        Ok(())
    }

    /// What the owner of the CLIPBOARD selection holds once `copy` made a new owner: this
    /// connection takes the selection first, so the text read is the one `copy` put there, not
    /// an older owner's; then converts it to UTF8_STRING on a window of its own and reads the
    /// property, bounded in time and size.
    pub fn copy_and_read_clipboard(
        &self,
        copy: impl FnOnce(&Self) -> Result<()>,
        timeout: std::time::Duration,
    ) -> Result<String> {
        use x11rb::protocol::xproto::{CreateWindowAux, EventMask, WindowClass};
        use x11rb::protocol::Event;
        let clipboard = self.atom("CLIPBOARD")?;
        let utf8 = self.atom("UTF8_STRING")?;
        let prop = self.atom("SHAREDOS_CLIPBOARD")?;
        let incr = self.atom("INCR")?;
        let w = self.conn.generate_id()?;
        self.conn.create_window(
            0,
            w,
            self.root,
            -10,
            -10,
            1,
            1,
            0,
            WindowClass::INPUT_ONLY,
            x11rb::COPY_FROM_PARENT,
            &CreateWindowAux::new().event_mask(EventMask::PROPERTY_CHANGE),
        )?;
        self.conn
            .set_selection_owner(w, clipboard, x11rb::CURRENT_TIME)?;
        if self.conn.get_selection_owner(clipboard)?.reply()?.owner != w {
            bail!("could not take the CLIPBOARD selection before the copy");
        }
        copy(self)?;
        sharedos_report::wait::until("the copy to take the CLIPBOARD", timeout, || {
            let owner = self
                .conn
                .get_selection_owner(clipboard)
                .ok()?
                .reply()
                .ok()?
                .owner;
            (owner != w && owner != x11rb::NONE).then_some(())
        })?;
        self.conn
            .convert_selection(w, clipboard, utf8, prop, x11rb::CURRENT_TIME)?;
        self.conn.flush()?;
        let notified =
            sharedos_report::wait::until("the CLIPBOARD owner to answer", timeout, || loop {
                match self.conn.poll_for_event() {
                    Ok(Some(Event::SelectionNotify(e))) if e.requestor == w => {
                        break Some(Ok(e.property));
                    }
                    Ok(Some(_)) => continue,
                    Ok(None) => break None,
                    Err(e) => break Some(Err(e)),
                }
            })??;
        if notified == x11rb::NONE {
            bail!("the CLIPBOARD owner refused to convert the selection to UTF8_STRING");
        }
        let r = self
            .conn
            .get_property(true, w, prop, AtomEnum::ANY, 0, MAX_CLIPBOARD / 4)?
            .reply()?;
        self.conn.destroy_window(w)?;
        self.conn.flush()?;
        if r.type_ == incr {
            bail!("the CLIPBOARD owner sent its text in INCR pieces: more than fits one property");
        }
        if r.bytes_after > 0 {
            bail!("the CLIPBOARD holds more than {MAX_CLIPBOARD} bytes");
        }
        String::from_utf8(r.value).context("the CLIPBOARD text is not UTF-8")
    }

    fn text_property(&self, w: u32, atom: u32) -> Result<String> {
        let r = self
            .conn
            .get_property(false, w, atom, AtomEnum::ANY, 0, 1024)?
            .reply()?;
        Ok(String::from_utf8_lossy(&r.value).into_owned())
    }

    pub fn grab(&self) -> Result<Frame> {
        let setup = self.conn.setup();
        let screen = &setup.roots[0];
        let visual = screen
            .allowed_depths
            .iter()
            .flat_map(|d| d.visuals.iter())
            .find(|v| v.visual_id == screen.root_visual)
            .context("the root visual is not listed by the server")?;
        let (rm, gm, bm) = (visual.red_mask, visual.green_mask, visual.blue_mask);
        let img = self
            .conn
            .get_image(
                ImageFormat::Z_PIXMAP,
                self.root,
                0,
                0,
                self.width,
                self.height,
                !0,
            )?
            .reply()
            .context("GetImage of the root window")?;
        let bpp = setup
            .pixmap_formats
            .iter()
            .find(|f| f.depth == img.depth)
            .map(|f| f.bits_per_pixel)
            .context("no pixmap format for the root depth")?;
        if bpp != 32 {
            bail!(
                "unsupported framebuffer format: depth {} at {bpp} bits per pixel (want 24/32)",
                img.depth
            );
        }
        let n = self.width as usize * self.height as usize;
        if img.data.len() < n * 4 {
            bail!("GetImage returned {} bytes for {n} pixels", img.data.len());
        }
        let mut rgb = Vec::with_capacity(n * 3);
        for px in img.data.chunks_exact(4).take(n) {
            let v = if setup.image_byte_order == x11rb::protocol::xproto::ImageOrder::LSB_FIRST {
                u32::from_le_bytes([px[0], px[1], px[2], px[3]])
            } else {
                u32::from_be_bytes([px[0], px[1], px[2], px[3]])
            };
            rgb.push(channel(v, rm));
            rgb.push(channel(v, gm));
            rgb.push(channel(v, bm));
        }
        Ok(Frame {
            width: self.width,
            height: self.height,
            rgb,
        })
    }

    /// Creates and maps a top-level window titled `title` that outlives this connection
    /// (close-down mode RetainPermanent): a window the dump never had.
    pub fn map_lasting_window(&self, title: &str, rect: Rectangle) -> Result<u32> {
        use x11rb::protocol::xproto::{CloseDown, CreateWindowAux, PropMode, WindowClass};
        use x11rb::wrapper::ConnectionExt as _;
        let w = self.conn.generate_id()?;
        self.conn.set_close_down_mode(CloseDown::RETAIN_PERMANENT)?;
        self.conn.create_window(
            x11rb::COPY_DEPTH_FROM_PARENT,
            w,
            self.root,
            rect.x,
            rect.y,
            rect.width,
            rect.height,
            0,
            WindowClass::INPUT_OUTPUT,
            x11rb::COPY_FROM_PARENT,
            &CreateWindowAux::new().background_pixel(0x0000_ff00),
        )?;
        self.conn.change_property8(
            PropMode::REPLACE,
            w,
            AtomEnum::WM_NAME,
            AtomEnum::STRING,
            title.as_bytes(),
        )?;
        self.conn.map_window(w)?;
        self.conn.get_input_focus()?.reply()?;
        Ok(w)
    }

    /// Takes the input focus from every window (focus None): a focused LibreOffice blinks its
    /// text cursor, an unfocused one hides it.
    pub fn unfocus(&self) -> Result<()> {
        use x11rb::protocol::xproto::InputFocus;
        self.conn
            .set_input_focus(InputFocus::NONE, x11rb::NONE, x11rb::CURRENT_TIME)?;
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    /// The focus window now.
    pub fn focused(&self) -> Result<u32> {
        Ok(self.conn.get_input_focus()?.reply()?.focus)
    }

    /// Asks the window manager, as a pager would (EWMH), to take `client` out of its maximised
    /// state and to put its client area at `rect`. The manager does it when it gets to it: the
    /// caller waits for the frame to show it.
    pub fn unmaximize_and_place(&self, client: u32, rect: Rectangle) -> Result<()> {
        use x11rb::protocol::xproto::{ClientMessageEvent, EventMask};
        let state = self.atom("_NET_WM_STATE")?;
        let vert = self.atom("_NET_WM_STATE_MAXIMIZED_VERT")?;
        let horz = self.atom("_NET_WM_STATE_MAXIMIZED_HORZ")?;
        let moveresize = self.atom("_NET_MOVERESIZE_WINDOW")?;
        let mask = EventMask::SUBSTRUCTURE_REDIRECT | EventMask::SUBSTRUCTURE_NOTIFY;
        // _NET_WM_STATE: action 0 removes; the last word, 2, says a pager asks.
        let remove = ClientMessageEvent::new(32, client, state, [0, vert, horz, 2, 0]);
        self.conn.send_event(false, self.root, mask, remove)?;
        // Gravity 1 (north-west), x, y, width and height given (bits 8-11), asked by a pager
        // (2 in bits 12-15).
        let flags: u32 = 1 | (0xf << 8) | (2 << 12);
        let coord = |v: i16| u32::from_ne_bytes(i32::from(v).to_ne_bytes());
        let place = ClientMessageEvent::new(
            32,
            client,
            moveresize,
            [
                flags,
                coord(rect.x),
                coord(rect.y),
                u32::from(rect.width),
                u32::from(rect.height),
            ],
        );
        self.conn.send_event(false, self.root, mask, place)?;
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }

    /// Paints a rectangle onto the root window: a change of X state that only this server sees.
    pub fn fill_rect(&self, rect: Rectangle, pixel: u32) -> Result<()> {
        let gc = self.conn.generate_id()?;
        self.conn
            .create_gc(gc, self.root, &CreateGCAux::new().foreground(pixel))?;
        self.conn.change_gc(
            gc,
            &ChangeGCAux::new().subwindow_mode(Some(
                x11rb::protocol::xproto::SubwindowMode::INCLUDE_INFERIORS,
            )),
        )?;
        self.conn.poly_fill_rectangle(self.root, gc, &[rect])?;
        self.conn.free_gc(gc)?;
        // A round trip makes sure the server has drawn before anyone grabs.
        self.conn.get_input_focus()?.reply()?;
        Ok(())
    }
}

/// X.Org encodes 1.21.1.7 as 12101007.
pub fn release_string(r: u32) -> String {
    format!(
        "{}.{}.{}.{}",
        r / 10_000_000,
        (r / 100_000) % 100,
        (r / 1000) % 100,
        r % 1000
    )
}

fn channel(v: u32, mask: u32) -> u8 {
    if mask == 0 {
        return 0;
    }
    let shift = mask.trailing_zeros();
    let bits = mask.count_ones();
    let c = (v & mask) >> shift;
    if bits >= 8 {
        (c >> (bits - 8)) as u8
    } else {
        ((c * 255) / ((1 << bits) - 1)) as u8
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rect_colour() {
        let mut f = Frame {
            width: 4,
            height: 3,
            rgb: vec![0; 4 * 3 * 3],
        };
        let r = Rectangle {
            x: 1,
            y: 1,
            width: 2,
            height: 2,
        };
        assert!(!f.rect_is(r, 0xff0000));
        for (x, y) in [(1, 1), (2, 1), (1, 2), (2, 2)] {
            let i = (y * 4 + x) * 3;
            f.rgb[i] = 0xff;
        }
        assert!(f.rect_is(r, 0xff0000));
        assert!(!f.rect_is(r, 0x00ff00));
        let wider = Rectangle { width: 3, ..r };
        assert!(!f.rect_is(wider, 0xff0000), "one pixel of it is black");
        let outside = Rectangle { x: 3, ..r };
        assert!(!f.rect_is(outside, 0xff0000));
        assert!(!f.rect_is(Rectangle { width: 0, ..r }, 0xff0000));
    }

    #[test]
    fn xorg_release() {
        assert_eq!(release_string(12101007), "1.21.1.7");
        assert_eq!(release_string(12013000), "1.20.13.0");
    }

    #[test]
    fn channels_from_masks() {
        let v = 0x00_12_34_56;
        assert_eq!(channel(v, 0xff0000), 0x12);
        assert_eq!(channel(v, 0x00ff00), 0x34);
        assert_eq!(channel(v, 0x0000ff), 0x56);
        assert_eq!(channel(0b11111, 0b11111), 255);
    }

    #[test]
    fn png_roundtrip_is_deterministic() {
        let f = Frame {
            width: 2,
            height: 1,
            rgb: vec![1, 2, 3, 4, 5, 6],
        };
        let d = std::env::temp_dir().join(format!("x11-png-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        f.write_png(&d.join("a.png")).unwrap();
        f.write_png(&d.join("b.png")).unwrap();
        let a = std::fs::read(d.join("a.png")).unwrap();
        assert_eq!(a, std::fs::read(d.join("b.png")).unwrap());
        let dec = png::Decoder::new(std::io::Cursor::new(a));
        let mut r = dec.read_info().unwrap();
        let mut buf = vec![0; r.output_buffer_size()];
        r.next_frame(&mut buf).unwrap();
        assert_eq!(&buf[..6], &[1, 2, 3, 4, 5, 6]);
    }
}
