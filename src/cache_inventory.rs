//! The image cache as a whole (`cargo xtask cache list|prune`): what each thing under its root
//! is (image entries, the snapshot store, the accelerator's verdicts, the bench's peers), its
//! size and age, what it refers to, and whether anything current still needs it; and the
//! removal of what nothing current refers to.
//!
//! Three steps, of which the middle one is pure: [`scan`] reads the cache (through no link:
//! a link is an item of its own, reported and never followed) and asks the host which of its
//! items running processes hold; [`classify`] decides each item from that listing and this
//! host's [`Facts`] (the installed QEMU, the host boot, the entries the current image
//! definitions give); [`prune`] removes what was found stale, each unless a running rig holds
//! it, and says what it did. Nothing here prints: the front end does.
//!
//! Here: the items, the facts and the verdicts, and how sizes and ages read; one file for each
//! step.

mod classify;
mod prune;
mod scan;

pub use classify::classify;
pub use prune::{prune, Done, Outcome};
pub use scan::scan;

use crate::image::Manifest;
use crate::vm::{accel_cache, snapshot};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

/// The peers' directory under the cache root (`cargo xtask bench --peers`).
pub const PEERS_DIR: &str = "peers";
/// The image builder's own directories under the cache root: apt lists and build scratch.
pub const BUILDER_DIRS: [&str; 2] = ["apt", "tmp"];

/// What an item of the cache is.
#[derive(Debug, Clone)]
pub enum What {
    /// An image entry: a directory holding `manifest.json`, and that manifest (or why it does
    /// not read).
    Entry(std::result::Result<Box<Manifest>, String>),
    /// A snapshot in the store, and its record (or why it does not read).
    Snapshot(std::result::Result<Box<snapshot::Record>, String>),
    /// `snapshots/.making-PID-*`: a snapshot being made, and whether that PID runs.
    Making { pid: u32, runs: bool },
    /// An accelerator verdict under `accel/`, and its record (or why it does not read).
    Accel(std::result::Result<Box<accel_cache::Record>, String>),
    /// `peers/`.
    Peers,
    /// The cache lock file.
    Lock,
    /// The image builder's apt lists or build scratch.
    Builder,
    /// A symbolic link, never followed: where it points, and whether that is inside the root.
    Link { target: PathBuf, inside: bool },
    /// Anything else: not the rig's.
    Other,
}

/// One thing under the cache root.
#[derive(Debug, Clone)]
pub struct Item {
    pub path: PathBuf,
    /// The path under the cache root, for people.
    pub name: String,
    pub what: What,
    /// The bytes of its files, links counted as links.
    pub bytes: u64,
    pub modified: Option<SystemTime>,
    /// Links inside the item whose target is outside the cache root.
    pub links_out: Vec<PathBuf>,
    /// The processes that hold it now: a snapshot's in-use lock, or one of its files open.
    pub held_by: Vec<u32>,
}

/// A cache root as [`scan`] found it.
#[derive(Debug, Clone)]
pub struct Listing {
    /// Resolved (the root named may itself be a link; nothing under it is followed).
    pub root: PathBuf,
    pub items: Vec<Item>,
}

/// What decides whether an item is current on this host.
#[derive(Debug, Clone, Default)]
pub struct Facts {
    /// The installed `qemu-system-x86_64 --version` line; None: no QEMU here, so a snapshot's
    /// or a verdict's QEMU is not held against it.
    pub qemu_version: Option<String>,
    /// This host boot's id; None: unknown, so a verdict's boot is not held against it.
    pub host_boot_id: Option<String>,
    /// Each image under images/ and the entry its current definition gives, or why that could
    /// not be computed. None: no image definitions were found, so no entry is judged.
    pub current: Option<BTreeMap<String, std::result::Result<String, String>>>,
}

/// Whether an item is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Something current refers to it.
    Current,
    /// Nothing current refers to it: prune removes it.
    Stale,
    /// Stale, but a running process holds it (or needs what it holds): left alone.
    InUse,
    /// Not the rig's to judge, or not judged (left alone).
    Kept,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Current => "current",
            Status::Stale => "stale",
            Status::InUse => "in use",
            Status::Kept => "kept",
        }
    }
}

/// One item's verdict: its status, and in words what it refers to and why it has that status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub status: Status,
    pub why: String,
}

/// A size for people: `512 B`, `1.5 KiB`, `2.0 GiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    format!("{v:.1} {}", UNITS[u])
}

/// An age for people: `40s`, `12m`, `5h`, `3d`.
pub fn human_age(modified: Option<SystemTime>, now: SystemTime) -> String {
    let Some(s) = modified
        .and_then(|m| now.duration_since(m).ok())
        .map(|d| d.as_secs())
    else {
        return "?".into();
    };
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_ages_read_for_people() {
        assert_eq!(human_bytes(512), "512 B");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(3 << 30), "3.0 GiB");
        let now = SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
        let ago = |s| Some(now - std::time::Duration::from_secs(s));
        assert_eq!(human_age(ago(5), now), "5s");
        assert_eq!(human_age(ago(7200), now), "2h");
        assert_eq!(human_age(ago(3 * 86400), now), "3d");
        assert_eq!(human_age(None, now), "?");
    }
}
