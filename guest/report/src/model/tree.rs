//! The trees a run started or restored and the processes it found: as observed, as recorded
//! for cleanup, and as listed from /proc.

use super::app::{AppState, PageState};
use super::screen::Window;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The state of a tree at one moment, as seen from outside.
#[derive(Clone, Debug)]
pub struct Observation {
    pub app: AppState,
    /// Just before the app was asked: the anchor of every counter bound derived from `app`.
    pub app_asked_at: Instant,
    pub windows: Vec<Window>,
    pub frame_sha256: String,
    /// Whether the frame shows the drawn mark in full.
    pub mark_drawn: bool,
    /// Report-relative path of the PNG of that frame.
    pub png: String,
    /// With `--workload desktop`: the editor's whole text, read back over the X wire (selected
    /// and copied through XTEST, then the CLIPBOARD selection converted) before the frame.
    pub editor_text: Option<String>,
    /// With a browser workload: the page's state, read from its window's `_NET_WM_NAME`.
    pub page: Option<PageState>,
    /// With `--workload session`: the window manager's current workspace, the root's
    /// `_NET_CURRENT_DESKTOP`.
    pub workspace: Option<u32>,
}

/// A tree this run started or restored: its PID 1 as the host sees it and the pid namespace it
/// heads, read while it ran. Kept for the whole run, so cleanup can prove each one is gone.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TreeRecord {
    pub label: String,
    pub pid: i32,
    /// None when PID 1 was already gone when the tree was registered.
    pub pidns: Option<String>,
    /// Set once the tree was seen gone (PID 1 and its namespace). The kernel reuses the inode
    /// numbers of freed namespaces, so an ended tree's `pidns` may later name another tree's
    /// namespace, or a stranger's: it is never looked for again.
    pub ended: bool,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MarkedProcess {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    pub cmdline: Vec<String>,
    /// Where the marker was seen: "cmdline", "environ" or both.
    pub marker_in: Vec<String>,
    /// The pid namespace it runs in (`pid:[4026532301]`), None when it could not be read.
    #[serde(default)]
    pub pidns: Option<String>,
    /// Its pid inside its own (innermost) pid namespace: the pid CRIU records.
    #[serde(default)]
    pub ns_pid: Option<i32>,
    /// The pid namespaces above `pidns`, the nearest first: a sandbox (Chromium's) starts its
    /// processes in pid namespaces nested in the tree's, and they are the tree's processes too.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pidns_parents: Vec<String>,
}

impl MarkedProcess {
    /// Whether it runs in the pid namespace `ns` or in one nested in it.
    pub fn in_pidns(&self, ns: &str) -> bool {
        self.pidns.as_deref() == Some(ns) || self.pidns_parents.iter().any(|p| p == ns)
    }

    /// The program name: basename of argv[0], else the kernel's comm.
    pub fn program(&self) -> String {
        self.cmdline
            .first()
            .and_then(|a| a.rsplit('/').next())
            .filter(|s| !s.is_empty())
            .map(str::to_string)
            .unwrap_or_else(|| self.comm.clone())
    }
}
