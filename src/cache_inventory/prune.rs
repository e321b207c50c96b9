//! [`prune`]: the removal of what was found stale, each unless a running rig holds it.

use super::scan::meta;
use super::{Item, Listing, Status, Verdict, What};
use crate::image::cache;
use crate::vm::snapshot;
use anyhow::{bail, Result};
use std::path::{Path, PathBuf};

/// What [`prune`] did with one item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Removed,
    /// `--dry-run`: it would be removed.
    WouldRemove,
    /// Left alone, and why (held by a running rig, the cache lock taken).
    Skipped(String),
    Failed(String),
}

/// One stale item and what prune did with it.
#[derive(Debug, Clone)]
pub struct Done {
    pub name: String,
    pub bytes: u64,
    pub why: String,
    pub outcome: Outcome,
}

/// Removes every item `verdicts` found stale: snapshots first (each unless a run holds it now),
/// then half-made snapshots whose maker still does not run, then image entries (under the
/// cache lock, taken without waiting: when another process holds it, every entry is left),
/// then verdicts. An entry whose snapshot turned out to be held stays too. Refuses, removing
/// nothing, when a link at the cache's top levels, or inside anything to be removed, points
/// outside the cache root. Items in use are reported as skipped.
pub fn prune(listing: &Listing, verdicts: &[Verdict], dry_run: bool) -> Result<Vec<Done>> {
    let outside: Vec<String> = listing
        .items
        .iter()
        .zip(verdicts)
        .flat_map(|(i, v)| {
            let mut o: Vec<PathBuf> = Vec::new();
            if let What::Link { inside: false, .. } = i.what {
                o.push(i.path.clone());
            }
            if matches!(v.status, Status::Stale | Status::InUse) {
                o.extend(i.links_out.iter().cloned());
            }
            o
        })
        .map(|p| p.display().to_string())
        .collect();
    if !outside.is_empty() {
        bail!(
            "refusing to prune {}: {} resolve{} outside the cache root, so nothing was removed\n\
             fix: look at {} and remove {} yourself if it is not meant to be there, then run \
             prune again",
            listing.root.display(),
            outside.join(", "),
            if outside.len() == 1 { "s" } else { "" },
            if outside.len() == 1 { "it" } else { "them" },
            if outside.len() == 1 {
                "the link"
            } else {
                "the links"
            }
        );
    }
    let mut done = Vec::new();
    let mut skipped_media: Vec<snapshot::Media> = Vec::new();
    let stale = |pick: fn(&What) -> bool| {
        listing.items.iter().zip(verdicts).filter(move |(i, v)| {
            pick(&i.what) && matches!(v.status, Status::Stale | Status::InUse)
        })
    };
    let record = |i: &Item, v: &Verdict, outcome: Outcome| Done {
        name: i.name.clone(),
        bytes: i.bytes,
        why: v.why.clone(),
        outcome,
    };
    for (i, v) in stale(|w| matches!(w, What::Snapshot(_))) {
        let outcome = if v.status == Status::InUse {
            Outcome::Skipped("left alone".into())
        } else if dry_run {
            Outcome::WouldRemove
        } else {
            match snapshot::remove_unless_in_use(&i.path) {
                Ok(snapshot::Removal::Removed(_)) => Outcome::Removed,
                Ok(snapshot::Removal::InUse) => Outcome::Skipped("a running rig holds it".into()),
                Err(e) => Outcome::Failed(format!("{e:#}")),
            }
        };
        if let (Outcome::Skipped(_) | Outcome::Failed(_), What::Snapshot(Ok(r))) =
            (&outcome, &i.what)
        {
            skipped_media.push(snapshot::Media::of_key(&r.key));
        }
        done.push(record(i, v, outcome));
    }
    for (i, v) in stale(|w| matches!(w, What::Making { .. })) {
        let outcome = match &i.what {
            _ if v.status == Status::InUse => Outcome::Skipped("left alone".into()),
            What::Making { pid, .. } if snapshot::pid_runs(*pid) => {
                Outcome::Skipped(format!("PID {pid} runs again"))
            }
            _ if dry_run => Outcome::WouldRemove,
            _ => remove_dir(&i.path),
        };
        done.push(record(i, v, outcome));
    }
    let entries: Vec<(&Item, &Verdict)> = stale(|w| matches!(w, What::Entry(_))).collect();
    if !entries.is_empty() {
        let lock = if dry_run {
            Ok(None)
        } else {
            cache::try_lock(&listing.root)
        };
        for (i, v) in entries {
            let needed = matches!(&i.what, What::Entry(Ok(m)) if skipped_media.contains(&snapshot::Media::of(m)));
            let outcome = match &lock {
                _ if v.status == Status::InUse => Outcome::Skipped("left alone".into()),
                _ if needed => Outcome::Skipped("a snapshot left in use is made from it".into()),
                _ if dry_run => Outcome::WouldRemove,
                Err(e) => Outcome::Skipped(format!("the cache lock could not be taken: {e:#}")),
                Ok(None) => Outcome::Skipped(
                    "another process holds the cache lock (a build checking its entry)".into(),
                ),
                Ok(Some(_)) => remove_dir(&i.path),
            };
            done.push(record(i, v, outcome));
        }
    }
    for (i, v) in stale(|w| matches!(w, What::Accel(_))) {
        let outcome = if v.status == Status::InUse {
            Outcome::Skipped("left alone".into())
        } else if dry_run {
            Outcome::WouldRemove
        } else {
            match meta(&i.path) {
                Some(m) if m.is_file() => match std::fs::remove_file(&i.path) {
                    Ok(()) => Outcome::Removed,
                    Err(e) => Outcome::Failed(format!("removing {}: {e}", i.path.display())),
                },
                _ => Outcome::Skipped("no longer a regular file".into()),
            }
        };
        done.push(record(i, v, outcome));
    }
    Ok(done)
}

/// Removes a directory that is still one (a link in its place is left); links inside it go as
/// links.
fn remove_dir(path: &Path) -> Outcome {
    match meta(path) {
        Some(m) if m.is_dir() => match std::fs::remove_dir_all(path) {
            Ok(()) => Outcome::Removed,
            Err(e) => Outcome::Failed(format!("removing {}: {e}", path.display())),
        },
        _ => Outcome::Skipped("no longer a directory".into()),
    }
}
