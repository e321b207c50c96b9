//! Random hex from the kernel, for the app's tokens and the names of markers and runs.

use anyhow::{Context, Result};
use std::io::Read;

pub fn random_hex(bytes: usize) -> Result<String> {
    let mut buf = vec![0u8; bytes];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut buf))
        .context("reading /dev/urandom")?;
    Ok(crate::digest::hex(&buf))
}
