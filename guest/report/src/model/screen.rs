//! What an X server showed: its mapped top-level windows and its framebuffer.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Window {
    pub id: u32,
    pub title: String,
    pub x: i16,
    pub y: i16,
    pub width: u16,
    pub height: u16,
}

/// A mapped top-level window with what a window manager's frame holds: the client window
/// below it (the one with `WM_STATE`, as ICCCM tools find it; the window itself without a
/// manager) and that client's `WM_CLASS` class.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct TopLevel {
    pub window: Window,
    /// The client window, when one with `WM_STATE` was found below (or at) the top level.
    pub client: Option<u32>,
    pub class: String,
}

/// One GetImage of the whole root window, as tightly packed RGB.
pub struct Frame {
    pub width: u16,
    pub height: u16,
    pub rgb: Vec<u8>,
}

impl Frame {
    pub fn sha256(&self) -> String {
        crate::digest::sha256_hex(&self.rgb)
    }
}
