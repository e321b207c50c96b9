//! [`scan`]: the cache read through no link, and which of its items running processes hold
//! (their flocks in /proc/locks, their open files in /proc/PID/fd).

use super::{Item, Listing, What, BUILDER_DIRS, PEERS_DIR};
use crate::image::cache;
use crate::vm::{accel_cache, snapshot};
use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Component, Path, PathBuf};

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

pub(super) fn meta(path: &Path) -> Option<std::fs::Metadata> {
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
