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

use crate::image::{cache, Manifest};
use crate::vm::{accel_cache, snapshot};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};
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

fn verdict(status: Status, why: impl Into<String>) -> Verdict {
    Verdict {
        status,
        why: why.into(),
    }
}

fn held(item: &Item, stale: String) -> Verdict {
    if item.held_by.is_empty() {
        verdict(Status::Stale, stale)
    } else {
        verdict(
            Status::InUse,
            format!("{stale}; but held by PID {}", pids(&item.held_by)),
        )
    }
}

fn pids(p: &[u32]) -> String {
    p.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// Decides every item of `listing` from `facts`, in the listing's order. Pure.
///
/// - An image entry is current when it is the entry its image's current definition gives;
///   stale when another is, or its image is no longer under images/, or its manifest does not
///   read, unless a snapshot that stays needs it. With no definitions known, none is judged.
/// - A snapshot is current when the installed QEMU made it and the entry it was made from is
///   in the cache and current; stale otherwise (another QEMU, its entry gone or stale, its
///   record damaged).
/// - A verdict is current when it is of this host boot, this QEMU and a guest kernel of an
///   entry in the cache.
/// - A half-made snapshot is stale once its maker no longer runs.
/// - Anything stale that a running process holds is in use, and stays.
pub fn classify(listing: &Listing, facts: &Facts) -> Vec<Verdict> {
    // Image entries first, on their own.
    let mut out: Vec<Option<Verdict>> = listing
        .items
        .iter()
        .map(|item| match &item.what {
            What::Entry(m) => Some(entry_verdict(item, m, facts)),
            _ => None,
        })
        .collect();
    let entry_of = |media: &snapshot::Media| -> Option<(usize, &Item)> {
        listing.items.iter().enumerate().find(
            |(_, i)| matches!(&i.what, What::Entry(Ok(m)) if snapshot::Media::of(m) == *media),
        )
    };
    // Then snapshots, which need their entry.
    for (n, item) in listing.items.iter().enumerate() {
        if let What::Snapshot(r) = &item.what {
            let v = match r {
                Err(e) => held(item, format!("damaged: {e}")),
                Ok(r) => {
                    let made_by = crate::escape::line(&r.key.qemu_version);
                    let entry = entry_of(&snapshot::Media::of_key(&r.key));
                    let needs = match entry {
                        Some((_, e)) => format!("needs image entry {}", e.name),
                        None => format!(
                            "needs the image build {}",
                            &r.key.image_sha256.get(..16).unwrap_or("?")
                        ),
                    };
                    let qemu_stale = facts
                        .qemu_version
                        .as_ref()
                        .filter(|q| **q != r.key.qemu_version);
                    if let Some(q) = qemu_stale {
                        held(
                            item,
                            format!("{needs}; made by {made_by:?}, the installed QEMU is {q:?}"),
                        )
                    } else {
                        let qemu = match &facts.qemu_version {
                            Some(_) => "made by the installed QEMU".to_string(),
                            None => {
                                format!("made by {made_by:?} (no QEMU installed here to compare)")
                            }
                        };
                        match entry {
                            None => held(item, format!("{needs}, which is no longer in the cache")),
                            Some((k, _)) => match out[k].as_ref().map(|v| v.status) {
                                Some(Status::Stale) => {
                                    held(item, format!("{needs}, which is not current"))
                                }
                                Some(Status::Current) => verdict(
                                    Status::Current,
                                    format!("{needs} (present, current); {qemu}"),
                                ),
                                _ => verdict(
                                    Status::Kept,
                                    format!("{needs} (present, kept); {qemu}"),
                                ),
                            },
                        }
                    }
                }
            };
            out[n] = Some(v);
        }
    }
    // A layer reads its disk through its base's: a layer whose base is gone is stale, and a
    // stale base a layer in use was made over stays.
    let base_of = |r: &snapshot::Record| {
        r.base
            .as_ref()
            .map(|b| format!("{}/{}", snapshot::DIR, b.dir))
    };
    for (n, item) in listing.items.iter().enumerate() {
        let What::Snapshot(Ok(r)) = &item.what else {
            continue;
        };
        let Some(base) = base_of(r) else {
            continue;
        };
        let gate = r.key.gate_sha256.as_deref().unwrap_or("?");
        let layer = format!(
            "a layer holding the gate binary {} over {base}",
            gate.get(..16).unwrap_or(gate)
        );
        if listing.items.iter().any(|i| i.name == base) {
            if let Some(v) = out[n].as_mut() {
                v.why = format!("{layer}; {}", v.why);
            }
        } else {
            out[n] = Some(held(item, format!("{layer}, which is gone")));
        }
    }
    // A stale base a layer in use is made over stays; then a stale entry a staying snapshot
    // needs stays, its disk backing that snapshot's overlay.
    keep_for_snapshots_in_use(
        listing,
        &mut out,
        |i| matches!(&i.what, What::Snapshot(Ok(r)) if r.base.is_none()),
        |r, i| base_of(r).as_deref() == Some(i.name.as_str()),
        "made over it",
    );
    keep_for_snapshots_in_use(
        listing,
        &mut out,
        |i| matches!(&i.what, What::Entry(Ok(_))),
        |r, i| matches!(&i.what, What::Entry(Ok(m)) if snapshot::Media::of_key(&r.key) == snapshot::Media::of(m)),
        "made from it",
    );
    let kernels: BTreeSet<&str> = listing
        .items
        .iter()
        .filter_map(|i| match &i.what {
            What::Entry(Ok(m)) => Some(m.kernel_sha256.as_str()),
            _ => None,
        })
        .collect();
    listing
        .items
        .iter()
        .zip(out)
        .map(|(item, v)| match v {
            Some(v) => v,
            None => other_verdict(item, facts, &kernels),
        })
        .collect()
}

/// Each stale item `candidate` picks becomes in use when a snapshot in use `needs` it, naming
/// those snapshots (`how` they need it).
fn keep_for_snapshots_in_use(
    listing: &Listing,
    out: &mut [Option<Verdict>],
    candidate: impl Fn(&Item) -> bool,
    needs: impl Fn(&snapshot::Record, &Item) -> bool,
    how: &str,
) {
    for (n, item) in listing.items.iter().enumerate() {
        if !candidate(item) || out[n].as_ref().map(|v| v.status) != Some(Status::Stale) {
            continue;
        }
        let users: Vec<&str> = listing
            .items
            .iter()
            .zip(out.iter())
            .filter(|(i, v)| {
                matches!(&i.what, What::Snapshot(Ok(r)) if needs(r, item))
                    && v.as_ref().is_some_and(|v| v.status == Status::InUse)
            })
            .map(|(i, _)| i.name.as_str())
            .collect();
        if !users.is_empty() {
            let why = out[n].as_ref().map(|v| v.why.clone()).unwrap_or_default();
            out[n] = Some(verdict(
                Status::InUse,
                format!("{why}; but {} in use is {how}", users.join(", ")),
            ));
        }
    }
}

fn entry_verdict(
    item: &Item,
    m: &std::result::Result<Box<Manifest>, String>,
    facts: &Facts,
) -> Verdict {
    let m = match m {
        Ok(m) => m,
        Err(e) => return held(item, format!("its manifest does not read: {e}")),
    };
    let image = crate::escape::line(&m.image_name);
    let Some(current) = &facts.current else {
        return verdict(
            Status::Kept,
            format!("an entry of image {image:?}; no image definitions found, so not judged"),
        );
    };
    let entry = item.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match current.get(&m.image_name) {
        None => held(item, format!("no image {image:?} under images/ any more")),
        Some(Err(e)) => verdict(
            Status::Kept,
            format!("image {image:?}'s definition does not read ({e}), so not judged"),
        ),
        Some(Ok(key)) if key == entry => verdict(
            Status::Current,
            format!("the entry image {image:?}'s current definition gives"),
        ),
        Some(Ok(key)) => held(
            item,
            format!("image {image:?}'s current definition gives entry {key}"),
        ),
    }
}

fn other_verdict(item: &Item, facts: &Facts, kernels: &BTreeSet<&str>) -> Verdict {
    match &item.what {
        What::Making { pid, runs: true } => verdict(
            Status::Current,
            format!("being made by PID {pid}, which runs"),
        ),
        What::Making { pid, runs: false } => held(
            item,
            format!("half-made by PID {pid}, which no longer runs"),
        ),
        What::Accel(Err(e)) => held(item, format!("does not read: {e}")),
        What::Accel(Ok(r)) => {
            let boot = facts
                .host_boot_id
                .as_ref()
                .filter(|b| **b != r.key.host_boot_id)
                .map(|_| "of another host boot".to_string());
            let qemu = facts
                .qemu_version
                .as_ref()
                .filter(|q| **q != r.key.qemu_version)
                .map(|q| {
                    format!(
                        "of {:?}, the installed QEMU is {q:?}",
                        crate::escape::line(&r.key.qemu_version)
                    )
                });
            let kernel = (!kernels.contains(r.key.kernel_sha256.as_str()))
                .then(|| "its guest kernel is in no image entry of the cache".to_string());
            let stale: Vec<String> = [boot, qemu, kernel].into_iter().flatten().collect();
            if stale.is_empty() {
                verdict(
                    Status::Current,
                    format!(
                        "{} verdict of this host boot and QEMU, for a kernel in the cache",
                        crate::escape::line(&r.accel)
                    ),
                )
            } else {
                held(item, stale.join("; "))
            }
        }
        What::Peers => verdict(
            Status::Kept,
            "virtme-ng and virtiofsd, used by cargo xtask bench --peers",
        ),
        What::Lock => verdict(Status::Kept, "the cache lock"),
        What::Builder => verdict(
            Status::Kept,
            "the image builder's own (apt lists, build scratch)",
        ),
        What::Link { target, inside } => verdict(
            Status::Kept,
            format!(
                "a link to {}, not followed{}",
                target.display(),
                if *inside {
                    ""
                } else {
                    ": outside the cache root, so prune refuses this cache"
                }
            ),
        ),
        What::Other => verdict(Status::Kept, "not the rig's: left alone"),
        // Decided in `classify`.
        What::Entry(_) | What::Snapshot(_) => verdict(Status::Kept, ""),
    }
}

/// Reads the cache at `root`: every item at its top level, in `snapshots/` and in `accel/`,
/// following no link. Refuses a directory that is not a cache.
pub fn scan(root: &Path) -> Result<Listing> {
    let fix_root = "fix: pass the cache root with --cache-dir (default: $SHAREDOS_RIG_CACHE, \
                    else $XDG_CACHE_HOME/sharedos-rig, else ~/.cache/sharedos-rig)";
    let real = std::fs::canonicalize(root)
        .with_context(|| format!("{} cannot be read\n{fix_root}", root.display()))?;
    if !real.is_dir() {
        bail!("{} is not a directory\n{fix_root}", root.display());
    }
    let names = read_names(&real)?;
    let is_dir = |n: &str| {
        std::fs::symlink_metadata(real.join(n))
            .map(|m| m.is_dir())
            .unwrap_or(false)
    };
    let recognised = names.iter().any(|n| {
        n == cache::LOCK_FILE
            || (is_dir(n)
                && (n == snapshot::DIR
                    || n == accel_cache::DIR
                    || n == PEERS_DIR
                    || real
                        .join(n)
                        .join(crate::image::manifest::MANIFEST_FILE)
                        .is_file()))
    });
    if !recognised {
        bail!(
            "{} does not look like a sharedos-rig cache: it holds none of {}, {}/, {}/, {}/ or an \
             image entry (a directory with {}), so nothing in it is touched\n{fix_root}",
            root.display(),
            cache::LOCK_FILE,
            snapshot::DIR,
            accel_cache::DIR,
            PEERS_DIR,
            crate::image::manifest::MANIFEST_FILE
        );
    }
    let mut items = Vec::new();
    for n in &names {
        let path = real.join(n);
        let Some(m) = meta(&path) else { continue };
        if m.file_type().is_symlink() {
            items.push(item(&real, &path, link(&real, &path)));
        } else if m.is_dir() && (n == snapshot::DIR || n == accel_cache::DIR) {
            for c in read_names(&path)? {
                let p = path.join(&c);
                let Some(cm) = meta(&p) else { continue };
                let what = if cm.file_type().is_symlink() {
                    link(&real, &p)
                } else if n == snapshot::DIR {
                    match snapshot::making_pid(&c) {
                        Some(pid) if cm.is_dir() => What::Making {
                            pid,
                            runs: snapshot::pid_runs(pid),
                        },
                        _ if cm.is_dir() => What::Snapshot(match snapshot::load(&p) {
                            Ok(Some(r)) => Ok(Box::new(r)),
                            Ok(None) => Err("gone".into()),
                            Err(e) => Err(format!("{e:#}")),
                        }),
                        _ => What::Other,
                    }
                } else if cm.is_file() && c.starts_with("kernel-") && c.ends_with(".json") {
                    What::Accel(read_verdict(&p))
                } else {
                    What::Other
                };
                items.push(item(&real, &p, what));
            }
        } else if n == PEERS_DIR && m.is_dir() {
            items.push(item(&real, &path, What::Peers));
        } else if n == cache::LOCK_FILE && m.is_file() {
            items.push(item(&real, &path, What::Lock));
        } else if BUILDER_DIRS.contains(&n.as_str()) && m.is_dir() {
            items.push(item(&real, &path, What::Builder));
        } else if m.is_dir() && path.join(crate::image::manifest::MANIFEST_FILE).exists() {
            let manifest = cache::read_manifest(&path)
                .map(Box::new)
                .map_err(|e| format!("{e:#}"));
            items.push(item(&real, &path, What::Entry(manifest)));
        } else {
            items.push(item(&real, &path, What::Other));
        }
    }
    let holders = Holders::read(&real);
    for i in &mut items {
        i.held_by = holders.of(i);
    }
    Ok(Listing { root: real, items })
}

fn meta(path: &Path) -> Option<std::fs::Metadata> {
    std::fs::symlink_metadata(path).ok()
}

fn read_names(dir: &Path) -> Result<Vec<String>> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    Ok(names)
}

fn read_verdict(path: &Path) -> std::result::Result<Box<accel_cache::Record>, String> {
    match accel_cache::read(path) {
        Ok(Some(bytes)) => serde_json::from_slice(&bytes)
            .map(Box::new)
            .map_err(|e| format!("not a verdict ({e})")),
        Ok(None) => Err("gone".into()),
        Err(e) => Err(format!("{e:#}")),
    }
}

fn item(root: &Path, path: &Path, what: What) -> Item {
    let m = meta(path);
    let is_link = matches!(what, What::Link { .. });
    let mut links_out = Vec::new();
    if !is_link {
        links_out_of(root, path, &mut links_out);
    }
    Item {
        path: path.to_path_buf(),
        name: path
            .strip_prefix(root)
            .unwrap_or(path)
            .display()
            .to_string(),
        what,
        bytes: snapshot::tree_bytes(path),
        modified: m.and_then(|m| m.modified().ok()),
        links_out,
        held_by: Vec::new(),
    }
}

/// Where the link at `path` points, and whether that is inside `root` (resolved when it can
/// be, else taken as written).
fn link(root: &Path, path: &Path) -> What {
    let target = std::fs::read_link(path).unwrap_or_default();
    let inside = resolves_inside(root, path);
    What::Link { target, inside }
}

fn resolves_inside(root: &Path, link: &Path) -> bool {
    if let Ok(real) = std::fs::canonicalize(link) {
        return real.starts_with(root);
    }
    // Dangling: judged on its text, joined to where it is.
    let Ok(target) = std::fs::read_link(link) else {
        return false;
    };
    let joined = link.parent().unwrap_or(root).join(target);
    let mut out = PathBuf::new();
    for c in joined.components() {
        match c {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            c => out.push(c),
        }
    }
    out.starts_with(root)
}

/// Every link under `path` (not following any) whose target is outside `root`.
fn links_out_of(root: &Path, path: &Path, out: &mut Vec<PathBuf>) {
    let Some(m) = meta(path) else { return };
    if m.file_type().is_symlink() {
        if !resolves_inside(root, path) {
            out.push(path.to_path_buf());
        }
        return;
    }
    if !m.is_dir() {
        return;
    }
    if let Ok(rd) = std::fs::read_dir(path) {
        for e in rd.flatten() {
            links_out_of(root, &e.path(), out);
        }
    }
}

/// Which processes hold what under the cache root: the flocks in /proc/locks (by device and
/// inode) and the files open in /proc/PID/fd that this user may read.
struct Holders {
    locks: BTreeMap<(u64, u64), BTreeSet<u32>>,
    open: Vec<(PathBuf, u32)>,
}

impl Holders {
    fn read(root: &Path) -> Holders {
        let me = std::process::id();
        let mut locks: BTreeMap<(u64, u64), BTreeSet<u32>> = BTreeMap::new();
        if let Ok(text) = std::fs::read_to_string("/proc/locks") {
            for (pid, dev, ino) in text.lines().filter_map(parse_lock_line) {
                if pid != me {
                    locks.entry((dev, ino)).or_default().insert(pid);
                }
            }
        }
        let mut open = Vec::new();
        if let Ok(procs) = std::fs::read_dir("/proc") {
            for p in procs.flatten() {
                let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                    continue;
                };
                if pid == me {
                    continue;
                }
                let Ok(fds) = std::fs::read_dir(p.path().join("fd")) else {
                    continue;
                };
                for fd in fds.flatten() {
                    if let Ok(t) = std::fs::read_link(fd.path()) {
                        if t.starts_with(root) {
                            open.push((t, pid));
                        }
                    }
                }
            }
        }
        Holders { locks, open }
    }

    fn of(&self, item: &Item) -> Vec<u32> {
        use std::os::unix::fs::MetadataExt;
        let mut pids: BTreeSet<u32> = self
            .open
            .iter()
            .filter(|(p, _)| p.starts_with(&item.path))
            .map(|(_, pid)| *pid)
            .collect();
        if let What::Snapshot(_) = item.what {
            if let Some(m) = meta(&item.path.join(snapshot::IN_USE)) {
                if let Some(h) = self.locks.get(&(m.dev(), m.ino())) {
                    pids.extend(h);
                }
            }
        }
        pids.into_iter().collect()
    }
}

/// A line of /proc/locks: `1: FLOCK  ADVISORY  READ  1234 fd:01:5678 0 EOF` into (PID, device,
/// inode); a waiter's line (`->`), an OFD lock (PID -1) or anything else is None.
fn parse_lock_line(line: &str) -> Option<(u32, u64, u64)> {
    let f: Vec<&str> = line.split_whitespace().collect();
    if f.get(1) == Some(&"->") {
        return None;
    }
    let pid = f.get(4)?.parse::<u32>().ok()?;
    let mut dev = f.get(5)?.split(':');
    let major = u64::from_str_radix(dev.next()?, 16).ok()?;
    let minor = u64::from_str_radix(dev.next()?, 16).ok()?;
    let ino = dev.next()?.parse::<u64>().ok()?;
    Some((pid, nix::sys::stat::makedev(major, minor), ino))
}

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

    const QEMU: &str = "QEMU emulator version 7.2.22";

    fn key(qemu: &str, image: char) -> snapshot::Key {
        snapshot::Key {
            qemu_version: qemu.into(),
            image_sha256: image.to_string().repeat(64),
            kernel_sha256: "b".repeat(64),
            initrd_sha256: "c".repeat(64),
            argv: vec!["qemu-system-x86_64".into()],
            gate_sha256: None,
        }
    }

    fn record(k: snapshot::Key) -> snapshot::Record {
        snapshot::record(
            k,
            crate::vm::qemu::Accel::Tcg,
            "forced",
            "console=ttyS0",
            "SHA256:x",
            ("d".repeat(64), 1),
            "e".repeat(64),
        )
    }

    fn manifest(image: char) -> Manifest {
        Manifest {
            image_name: "bookworm".into(),
            image_sha256: image.to_string().repeat(64),
            kernel_sha256: "b".repeat(64),
            initrd_sha256: "c".repeat(64),
            ..Manifest::default()
        }
    }

    fn it(name: &str, what: What) -> Item {
        Item {
            path: Path::new("/c").join(name),
            name: name.into(),
            what,
            bytes: 10,
            modified: None,
            links_out: vec![],
            held_by: vec![],
        }
    }

    fn facts() -> Facts {
        Facts {
            qemu_version: Some(QEMU.into()),
            host_boot_id: Some("boot-1".into()),
            current: Some(BTreeMap::from([(
                "bookworm".to_string(),
                Ok("bookworm-current".to_string()),
            )])),
        }
    }

    fn status_of(l: &Listing, f: &Facts) -> Vec<(String, Status)> {
        l.items
            .iter()
            .zip(classify(l, f))
            .map(|(i, v)| (i.name.clone(), v.status))
            .collect()
    }

    #[test]
    fn a_layer_over_a_gone_base_is_stale_and_a_stale_base_under_a_layer_in_use_stays() {
        let layer_of = |k: snapshot::Key, base: &str| {
            let mut r = record(k.layer(&"9".repeat(64)));
            r.base = Some(snapshot::BaseRef {
                dir: base.into(),
                state_sha256: "d".repeat(64),
                disk_sha256: "e".repeat(64),
            });
            What::Snapshot(Ok(Box::new(r)))
        };
        let old = "QEMU emulator version 6.0";
        let mut held_layer = it(
            "snapshots/bookworm-2222222222222222",
            layer_of(key(old, 'a'), "bookworm-1111111111111111"),
        );
        held_layer.held_by = vec![4242];
        let l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-current", What::Entry(Ok(Box::new(manifest('a'))))),
                it(
                    "snapshots/bookworm-0000000000000000",
                    What::Snapshot(Ok(Box::new(record(key(QEMU, 'a'))))),
                ),
                it(
                    "snapshots/bookworm-3333333333333333",
                    layer_of(key(QEMU, 'a'), "bookworm-0000000000000000"),
                ),
                it(
                    "snapshots/bookworm-4444444444444444",
                    layer_of(key(QEMU, 'a'), "bookworm-5555555555555555"),
                ),
                // Made by another QEMU: stale, but its layer is in use.
                it(
                    "snapshots/bookworm-1111111111111111",
                    What::Snapshot(Ok(Box::new(record(key(old, 'a'))))),
                ),
                held_layer,
            ],
        };
        let v = classify(&l, &facts());
        let st: Vec<Status> = v.iter().map(|v| v.status).collect();
        assert_eq!(
            st,
            [
                Status::Current,
                Status::Current,
                Status::Current,
                Status::Stale,
                Status::InUse,
                Status::InUse
            ],
            "{v:?}"
        );
        assert!(
            v[2].why.starts_with("a layer holding the gate binary 9999"),
            "{}",
            v[2].why
        );
        assert!(v[3].why.contains("which is gone"), "{}", v[3].why);
        assert!(v[4].why.contains("in use is made over it"), "{}", v[4].why);
    }

    #[test]
    fn snapshots_of_another_qemu_or_of_a_gone_entry_are_stale_and_the_current_one_stays() {
        let mut held = it(
            "snapshots/bookworm-4444444444444444",
            What::Snapshot(Ok(Box::new(record(key("QEMU emulator version 6.0", 'a'))))),
        );
        held.held_by = vec![4242];
        let l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-current", What::Entry(Ok(Box::new(manifest('a'))))),
                it("bookworm-old", What::Entry(Ok(Box::new(manifest('f'))))),
                it(
                    "snapshots/bookworm-1111111111111111",
                    What::Snapshot(Ok(Box::new(record(key(QEMU, 'a'))))),
                ),
                it(
                    "snapshots/bookworm-2222222222222222",
                    What::Snapshot(Ok(Box::new(record(key("QEMU emulator version 9.0", 'a'))))),
                ),
                it(
                    "snapshots/bookworm-3333333333333333",
                    What::Snapshot(Ok(Box::new(record(key(QEMU, '9'))))),
                ),
                held,
                it(
                    "snapshots/bookworm-5555555555555555",
                    What::Snapshot(Err("damaged".into())),
                ),
                it("snapshots/.making-1-x", What::Making { pid: 1, runs: true }),
                it(
                    "snapshots/.making-4294967294-x",
                    What::Making {
                        pid: 4294967294,
                        runs: false,
                    },
                ),
                it(PEERS_DIR, What::Peers),
                it(cache::LOCK_FILE, What::Lock),
            ],
        };
        let got = status_of(&l, &facts());
        let want = [
            Status::Current,
            Status::Stale,
            Status::Current,
            Status::Stale,
            Status::Stale,
            Status::InUse,
            Status::Stale,
            Status::Current,
            Status::Stale,
            Status::Kept,
            Status::Kept,
        ];
        assert_eq!(
            got.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            want,
            "{got:?}"
        );
        let v = classify(&l, &facts());
        assert!(
            v[3].why.contains("9.0") && v[3].why.contains("7.2.22"),
            "{v:?}"
        );
        assert!(v[4].why.contains("no longer in the cache"), "{v:?}");
        assert!(v[5].why.contains("4242"), "{v:?}");
        assert!(
            v[2].why.contains("needs image entry bookworm-current"),
            "{v:?}"
        );
    }

    #[test]
    fn an_entry_not_current_goes_unless_a_snapshot_in_use_needs_it() {
        let mut held = it(
            "snapshots/bookworm-1111111111111111",
            What::Snapshot(Ok(Box::new(record(key(QEMU, 'f'))))),
        );
        let mut l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-old", What::Entry(Ok(Box::new(manifest('f'))))),
                held.clone(),
            ],
        };
        let v = classify(&l, &facts());
        assert_eq!((v[0].status, v[1].status), (Status::Stale, Status::Stale));
        assert!(v[1].why.contains("not current"), "{v:?}");
        held.held_by = vec![77];
        l.items[1] = held;
        let v = classify(&l, &facts());
        assert_eq!((v[0].status, v[1].status), (Status::InUse, Status::InUse));
        // No definitions known: no entry is judged, and so its snapshots stay.
        let f = Facts {
            current: None,
            ..facts()
        };
        l.items[1].held_by.clear();
        let v = classify(&l, &f);
        assert_eq!((v[0].status, v[1].status), (Status::Kept, Status::Kept));
        // An image gone from images/.
        let f = Facts {
            current: Some(BTreeMap::new()),
            ..facts()
        };
        assert!(classify(&l, &f)[0].why.contains("no image"));
    }

    #[test]
    fn a_verdict_of_another_boot_or_qemu_or_kernel_is_stale() {
        let verdict_of = |boot: &str, qemu: &str, kernel: char| {
            let k = accel_cache::Key {
                host_boot_id: boot.into(),
                qemu_version: qemu.into(),
                kernel_sha256: kernel.to_string().repeat(64),
            };
            What::Accel(Ok(Box::new(accel_cache::record(
                &k,
                crate::vm::qemu::Accel::Kvm,
                "probed",
                "2026-12-02T12:00:00Z",
            ))))
        };
        let l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-current", What::Entry(Ok(Box::new(manifest('a'))))),
                it("accel/kernel-1.json", verdict_of("boot-1", QEMU, 'b')),
                it("accel/kernel-2.json", verdict_of("boot-0", QEMU, 'b')),
                it("accel/kernel-3.json", verdict_of("boot-1", "QEMU 5", 'b')),
                it("accel/kernel-4.json", verdict_of("boot-1", QEMU, '7')),
                it(
                    "accel/kernel-5.json",
                    What::Accel(Err("not a verdict".into())),
                ),
            ],
        };
        let got: Vec<Status> = classify(&l, &facts()).iter().map(|v| v.status).collect();
        assert_eq!(
            got,
            [
                Status::Current,
                Status::Current,
                Status::Stale,
                Status::Stale,
                Status::Stale,
                Status::Stale
            ]
        );
    }

    #[test]
    fn a_lock_line_names_its_pid_device_and_inode() {
        assert_eq!(
            parse_lock_line("1: FLOCK  ADVISORY  READ  1234 fd:01:5678 0 EOF"),
            Some((1234, nix::sys::stat::makedev(0xfd, 1), 5678))
        );
        assert_eq!(
            parse_lock_line("1: OFDLCK ADVISORY  READ -1 fe:00:10010773 203 203"),
            None
        );
        assert_eq!(
            parse_lock_line("2: -> FLOCK  ADVISORY  WRITE 99 fd:01:5678 0 EOF"),
            None
        );
    }

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
