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
