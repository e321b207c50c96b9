//! The process table as seen from outside the tree: every process whose command line or
//! environment carries the run's marker, and every process inside a given pid namespace.

use serde::{Deserialize, Serialize};
use sharedos_report::model::tree::{MarkedProcess, TreeRecord};
use std::collections::{BTreeMap, BTreeSet, HashSet};

fn ppid_and_comm(pid: i32) -> Option<(i32, String)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&stat)
}

/// `pid (comm) state ppid ...`; comm may hold spaces and parentheses, so split at the last ')'.
fn parse_stat(stat: &str) -> Option<(i32, String)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let mut rest = stat.get(close + 1..)?.split_whitespace();
    let _state = rest.next()?;
    let ppid = rest.next()?.parse().ok()?;
    Some((ppid, comm))
}

/// Our own pid and our ancestors': they may carry the marker in their command line (the shell
/// that started us) and must never be counted or killed as part of the tree.
pub fn self_and_ancestors() -> HashSet<i32> {
    let mut set = HashSet::new();
    let mut pid = std::process::id() as i32;
    while pid > 0 && set.insert(pid) {
        match ppid_and_comm(pid) {
            Some((ppid, _)) => pid = ppid,
            None => break,
        }
    }
    set
}

/// Every process below `root` (its children, theirs, and so on) as the host sees them, whatever
/// pid namespace each is in: a sandbox's nested namespaces included. A process that exits while
/// /proc is read is simply gone.
pub fn descendants(root: i32) -> Vec<i32> {
    let mut children: BTreeMap<i32, Vec<i32>> = BTreeMap::new();
    for pid in proc_pids() {
        if let Some((ppid, _)) = ppid_and_comm(pid) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut out = Vec::new();
    let mut next = vec![root];
    while let Some(p) = next.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or_default() {
            // A pid seen twice would be a cycle in a /proc read while pids were reused.
            if c != root && !out.contains(&c) {
                out.push(c);
                next.push(c);
            }
        }
    }
    out
}

/// The pid namespace of a process as the kernel names it (`pid:[4026532301]`).
pub fn pidns_of(pid: i32) -> std::io::Result<String> {
    std::fs::read_link(format!("/proc/{pid}/ns/pid")).map(|l| l.display().to_string())
}

/// The pid namespaces above a process's own, the nearest first, up to the one this process
/// cannot see above (the kernel's initial one, from the guest's root); empty when its own
/// cannot be opened. The kernel nests pid namespaces at most 32 deep.
pub fn pidns_parents_of(pid: i32) -> Vec<String> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    // NS_GET_PARENT, _IO(0xb7, 0x2) in linux/nsfs.h.
    const NS_GET_PARENT: nix::libc::c_ulong = 0xb702;
    let mut out = Vec::new();
    let Ok(file) = std::fs::File::open(format!("/proc/{pid}/ns/pid")) else {
        return out;
    };
    let mut fd: OwnedFd = file.into();
    for _ in 0..32 {
        // SAFETY: the ioctl takes no argument and returns a new descriptor or -1; the new
        // descriptor is owned below and closed when replaced.
        let parent = unsafe { nix::libc::ioctl(fd.as_raw_fd(), NS_GET_PARENT as _) };
        if parent < 0 {
            break;
        }
        // SAFETY: `parent` is a descriptor the kernel just opened for us, owned by nothing else.
        fd = unsafe { OwnedFd::from_raw_fd(parent) };
        match std::fs::read_link(format!("/proc/self/fd/{parent}")) {
            Ok(l) => out.push(l.display().to_string()),
            Err(_) => break,
        }
    }
    out
}

/// The last field of `NSpid:` in /proc/PID/status: the pid in the innermost namespace.
pub fn ns_pid_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_ns_pid(&status)
}

fn parse_ns_pid(status: &str) -> Option<i32> {
    status
        .lines()
        .find_map(|l| l.strip_prefix("NSpid:"))
        .and_then(|rest| rest.split_whitespace().last())
        .and_then(|p| p.parse().ok())
}

/// Kept off the shared record: whether a tree still runs is read from this machine's /proc,
/// which only the guest can see.
pub trait TreeRecordExt {
    /// Whether the tree's PID 1 still runs: the pid is live and still heads the recorded
    /// namespace (a reused pid elsewhere is not our PID 1).
    fn pid1_running(&self) -> bool;
}

impl TreeRecordExt for TreeRecord {
    fn pid1_running(&self) -> bool {
        if !is_live(self.pid) {
            return false;
        }
        match &self.pidns {
            Some(ns) => pidns_of(self.pid).is_ok_and(|now| &now == ns),
            None => true,
        }
    }
}

/// A live (not zombie) process still listed in /proc.
pub fn is_live(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .map(|state| state != "Z" && state != "X")
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// The namespaces a process is in, as the kernel names them (`net:[4026531840]`).
pub fn namespaces_of(pid: &str) -> BTreeMap<String, String> {
    ["pid", "mnt", "net", "ipc", "uts"]
        .iter()
        .map(|ns| {
            let link = std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
                .map(|l| l.display().to_string())
                .unwrap_or_else(|e| format!("unreadable: {e}"));
            (ns.to_string(), link)
        })
        .collect()
}

/// True when every namespace of `a` differs from the same kind in `b`.
pub fn all_differ(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    !a.is_empty()
        && a.iter()
            .all(|(k, v)| !v.starts_with("unreadable") && b.get(k).is_some_and(|w| w != v))
}

const PF_KTHREAD: u64 = 0x0020_0000;

/// Kernel threads have no memory of their own: their environ cannot be read, and they carry
/// nothing of ours.
fn is_kernel_thread(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| stat_flags(&s))
        .is_some_and(|f| f & PF_KTHREAD != 0)
}

/// The `flags` field of /proc/PID/stat, the seventh after the comm.
fn stat_flags(stat: &str) -> Option<u64> {
    let close = stat.rfind(')')?;
    stat.get(close + 1..)?
        .split_whitespace()
        .nth(6)?
        .parse()
        .ok()
}

fn proc_pids() -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut pids: Vec<i32> = dir
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()))
        .collect();
    pids.sort_unstable();
    pids
}

/// One process found inside a watched pid namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct NsMember {
    pub pid: i32,
    pub pidns: String,
    pub comm: String,
    /// The kernel's state letter (R, S, Z, ...).
    pub state: String,
}

/// Every process listed in /proc whose pid namespace is one of `pidns`, zombies included (a
/// zombie still holds its namespace until it is reaped). Processes that vanish while being read
/// are gone, not members.
pub fn members(pidns: &BTreeSet<String>) -> Vec<NsMember> {
    if pidns.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    for pid in proc_pids() {
        let Ok(ns) = pidns_of(pid) else {
            continue;
        };
        if !pidns.contains(&ns) {
            continue;
        }
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let comm = parse_stat(&stat).map(|(_, c)| c).unwrap_or_default();
        let state = stat
            .rfind(')')
            .and_then(|i| stat[i + 1..].split_whitespace().next())
            .unwrap_or("?")
            .to_string();
        out.push(NsMember {
            pid,
            pidns: ns,
            comm,
            state,
        });
    }
    out
}

/// What one look at /proc found: the marked processes, and the processes whose command line or
/// environment could not be read, which might carry the marker unseen.
#[derive(Clone, Debug, Default)]
pub struct Census {
    pub marked: Vec<MarkedProcess>,
    pub unreadable: Vec<String>,
}

/// Reads a NUL-separated /proc file; an error counts only while the process is still live (a
/// process that exits between the listing and the read is simply gone).
fn read_live(pid: i32, what: &str, unreadable: &mut Vec<String>) -> Vec<String> {
    let path = format!("/proc/{pid}/{what}");
    match std::fs::read(&path) {
        Ok(b) => b
            .split(|c| *c == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
        Err(e) => {
            if is_live(pid) && !is_kernel_thread(pid) {
                unreadable.push(format!("{path}: {e}"));
            }
            Vec::new()
        }
    }
}

pub fn scan(marker: &str) -> Vec<MarkedProcess> {
    census(marker).marked
}

pub fn census(marker: &str) -> Census {
    let exclude = self_and_ancestors();
    let mut out = Vec::new();
    let mut unreadable = Vec::new();
    for pid in proc_pids() {
        if exclude.contains(&pid) {
            continue;
        }
        let cmdline = read_live(pid, "cmdline", &mut unreadable);
        let environ = read_live(pid, "environ", &mut unreadable);
        let mut marker_in = Vec::new();
        if cmdline.iter().any(|a| a.contains(marker)) {
            marker_in.push("cmdline".to_string());
        }
        if environ.iter().any(|a| a.contains(marker)) {
            marker_in.push("environ".to_string());
        }
        if marker_in.is_empty() {
            continue;
        }
        let Some((ppid, comm)) = ppid_and_comm(pid) else {
            continue;
        };
        out.push(MarkedProcess {
            pid,
            ppid,
            comm,
            cmdline,
            marker_in,
            pidns: pidns_of(pid).ok(),
            ns_pid: ns_pid_of(pid),
            pidns_parents: pidns_parents_of(pid),
        });
    }
    Census {
        marked: out,
        unreadable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn namespaces_differ_only_when_all_do() {
        let a: BTreeMap<String, String> = [("pid", "1"), ("net", "2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut b = a.clone();
        assert!(!all_differ(&a, &b));
        b.insert("pid".into(), "9".into());
        assert!(!all_differ(&a, &b), "net is still shared");
        b.insert("net".into(), "8".into());
        assert!(all_differ(&a, &b));
    }

    #[test]
    fn this_process_is_alive_and_in_its_own_namespaces() {
        assert!(is_live(std::process::id() as i32));
        let me = namespaces_of("self");
        assert_eq!(me.len(), 5);
        assert!(!all_differ(&me, &namespaces_of("self")));
    }

    #[test]
    fn stat_flags_and_nspid() {
        let kthread = "2 (kthreadd) S 0 0 0 0 -1 2129984 0 0";
        assert_eq!(stat_flags(kthread), Some(2129984));
        assert!(stat_flags(kthread).is_some_and(|f| f & PF_KTHREAD != 0));
        assert!(!stat_flags("9 (sh) S 1 9 9 0 -1 4194560 0").is_some_and(|f| f & PF_KTHREAD != 0));
        assert_eq!(parse_ns_pid("Name:\tx\nNSpid:\t4242\t1\n"), Some(1));
        assert_eq!(parse_ns_pid("NSpid:\t77\n"), Some(77));
        assert_eq!(parse_ns_pid("Name:\tx\n"), None);
    }

    #[test]
    fn stat_with_odd_comm() {
        assert_eq!(
            parse_stat("42 (a) b)) S 7 42 42 0"),
            Some((7, "a) b)".to_string()))
        );
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a bare child to find, not a step of the run
    fn finds_a_marked_child_and_not_itself() {
        let marker = format!("probe-test-{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("SHAREDOS_MARKER", &marker)
            .spawn()
            .unwrap();
        // Until the child has exec'd, its environ is still ours, without the marker.
        let found = sharedos_report::wait::until(
            "the child to show its marker",
            Duration::from_secs(30),
            || {
                let f = scan(&marker);
                (!f.is_empty()).then_some(f)
            },
        )
        .unwrap_or_default();
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].pid, child.id() as i32);
        assert_eq!(found[0].program(), "sleep");
        assert_eq!(found[0].marker_in, vec!["environ".to_string()]);
        assert!(scan(&marker).is_empty());
    }

    #[test]
    #[allow(clippy::disallowed_methods)] // a bare child to find, not a step of the run
    fn our_descendants_include_a_child_and_not_ourselves() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let me = std::process::id() as i32;
        let d = descendants(me);
        assert!(d.contains(&(child.id() as i32)), "{d:?}");
        assert!(!d.contains(&me));
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
