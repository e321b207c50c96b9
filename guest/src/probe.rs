//! The process table as seen from outside the tree: every process whose command line or
//! environment carries the run's marker.

use serde::{Deserialize, Serialize};
use std::collections::HashSet;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct MarkedProcess {
    pub pid: i32,
    pub ppid: i32,
    pub comm: String,
    pub cmdline: Vec<String>,
    /// Where the marker was seen: "cmdline", "environ" or both.
    pub marker_in: Vec<String>,
}

impl MarkedProcess {
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

fn read_nul_list(path: &str) -> Option<Vec<String>> {
    let b = std::fs::read(path).ok()?;
    Some(
        b.split(|c| *c == 0)
            .filter(|s| !s.is_empty())
            .map(|s| String::from_utf8_lossy(s).into_owned())
            .collect(),
    )
}

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

pub fn scan(marker: &str) -> Vec<MarkedProcess> {
    let exclude = self_and_ancestors();
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for e in dir.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if exclude.contains(&pid) {
            continue;
        }
        let cmdline = read_nul_list(&format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let environ = read_nul_list(&format!("/proc/{pid}/environ")).unwrap_or_default();
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
        });
    }
    out.sort_by_key(|p| p.pid);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn stat_with_odd_comm() {
        assert_eq!(
            parse_stat("42 (a) b)) S 7 42 42 0"),
            Some((7, "a) b)".to_string()))
        );
    }

    #[test]
    fn finds_a_marked_child_and_not_itself() {
        let marker = format!("probe-test-{}", std::process::id());
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .env("SHAREDOS_MARKER", &marker)
            .spawn()
            .unwrap();
        // Until the child has exec'd, its environ is still ours, without the marker.
        let found = crate::wait::until(
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
}
