//! Reads an X server over the X wire: its mapped top-level windows with their titles, and its
//! framebuffer through GetImage (pixel data only, so grabs of an unchanged screen compare equal).

use anyhow::{bail, Context, Result};
use sharedos_report::model::screen::{Frame, Window};
use std::io::BufWriter;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use x11rb::connection::Connection;
use x11rb::protocol::xproto::{
    AtomEnum, ChangeGCAux, ConnectionExt, CreateGCAux, ImageFormat, MapState, Rectangle,
};
use x11rb::rust_connection::{DefaultStream, RustConnection};

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
    /// window manager these are exactly the top-level windows.
    pub fn mapped_toplevels(&self) -> Result<Vec<Window>> {
        let tree = self.conn.query_tree(self.root)?.reply()?;
        let net_wm_name = self.conn.intern_atom(false, b"_NET_WM_NAME")?.reply()?.atom;
        let mut out = Vec::new();
        for w in tree.children {
            let attrs = self.conn.get_window_attributes(w)?.reply()?;
            if attrs.map_state != MapState::VIEWABLE {
                continue;
            }
            let geo = self.conn.get_geometry(w)?.reply()?;
            let mut title = self.text_property(w, AtomEnum::WM_NAME.into())?;
            if title.is_empty() {
                title = self.text_property(w, net_wm_name)?;
            }
            out.push(Window {
                id: w,
                title,
                x: geo.x,
                y: geo.y,
                width: geo.width,
                height: geo.height,
            });
        }
        Ok(out)
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
