//! The tree's network namespace at dump time, and whether CRIU must save it or may make a new one.
//!
//! The tree gets a network namespace of its own and nothing in it configures the network: its
//! one interface is loopback, down, with no address. A new network namespace is exactly that. So
//! CRIU need not save and replay it: with `--empty-ns net` it creates the namespace at restore
//! without restoring its properties. That spares each dump and each restore the `ip` and
//! `iptables` programs CRIU runs to save and replay addresses, routes, rules and firewall tables,
//! about half of each under TCG (measured in criu/dump.log and criu/restore-*.log: 0.6 of 1.7 s
//! a dump, 0.55 of 1.25 s a restore).
//!
//! The premise is read at every dump (`read`), and a namespace that does not hold it is dumped in
//! full, as before. The restore follows what the dump did, read from the images
//! (`dumped_empty`), so a checkpoint carried to another guest is restored the way it was made.

use anyhow::{Context, Result};
use nix::ifaddrs::getifaddrs;
use nix::net::if_::InterfaceFlags;
use nix::sched::{setns, CloneFlags};
use serde::Serialize;
use std::path::Path;

/// What the dump found in the tree's network namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Reading {
    /// The namespace of the tree's PID 1 (`net:[inode]`).
    pub netns: String,
    /// Processes of the tree in another network namespace (`pid netns`).
    pub elsewhere: Vec<String>,
    /// Every interface, with `up` after its name when it is up.
    pub interfaces: Vec<String>,
    /// Every IPv4 and IPv6 address, with its interface.
    pub addresses: Vec<String>,
}

impl Reading {
    /// Why a new network namespace would differ from this one; None when it would not.
    pub fn differs_from_new(&self) -> Option<String> {
        if !self.elsewhere.is_empty() {
            return Some(format!(
                "{} of the tree's processes are in another network namespace ({})",
                self.elsewhere.len(),
                self.elsewhere.join(", ")
            ));
        }
        if self.interfaces != ["lo"] {
            return Some(format!(
                "its interfaces are [{}], not a loopback that is down",
                self.interfaces.join(", ")
            ));
        }
        if !self.addresses.is_empty() {
            return Some(format!(
                "it holds addresses ({})",
                self.addresses.join(", ")
            ));
        }
        None
    }
}

fn ns_link(pid: i32) -> Result<String> {
    let p = format!("/proc/{pid}/ns/net");
    Ok(std::fs::read_link(&p)
        .with_context(|| format!("reading {p}"))?
        .to_string_lossy()
        .into_owned())
}

/// Reads the network namespace of the tree whose PID 1 is `pid1`; `tree` holds the host pids of
/// every process below it. A process gone meanwhile is skipped: the dump's pstree check is the
/// one that holds the tree's membership.
pub fn read(pid1: i32, tree: &[i32]) -> Result<Reading> {
    let netns = ns_link(pid1)?;
    let elsewhere = tree
        .iter()
        .filter_map(|&p| ns_link(p).ok().map(|l| (p, l)))
        .filter(|(_, l)| *l != netns)
        .map(|(p, l)| format!("{p} {l}"))
        .collect();
    let path = format!("/proc/{pid1}/ns/net");
    let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
    // The network namespace is a thread's own: a thread of ours enters it and lists what is
    // there, and the rest of the process never leaves its own.
    let (interfaces, addresses) = std::thread::scope(|s| {
        s.spawn(|| -> Result<(Vec<String>, Vec<String>)> {
            setns(&file, CloneFlags::CLONE_NEWNET)
                .context("entering the tree's network namespace")?;
            let mut interfaces = Vec::new();
            let mut addresses = Vec::new();
            for a in getifaddrs().context("listing the tree's interfaces")? {
                let name = a.interface_name.clone();
                let shown = if a.flags.contains(InterfaceFlags::IFF_UP) {
                    format!("{name} up")
                } else {
                    name.clone()
                };
                if !interfaces.contains(&shown) {
                    interfaces.push(shown);
                }
                if let Some(addr) = a.address {
                    if addr.as_sockaddr_in().is_some() || addr.as_sockaddr_in6().is_some() {
                        addresses.push(format!("{addr} on {name}"));
                    }
                }
            }
            interfaces.sort();
            Ok((interfaces, addresses))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread reading the tree's network namespace panicked"))?
    })?;
    Ok(Reading {
        netns,
        elsewhere,
        interfaces,
        addresses,
    })
}

/// Whether the dump in `dump_dir` left the network namespace out (`--empty-ns net`): CRIU then
/// writes no `netdev` image for it, where a full dump writes one even for loopback alone.
pub fn dumped_empty(dump_dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dump_dir) else {
        return false;
    };
    !entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("netdev-") && n.ends_with(".img"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading() -> Reading {
        Reading {
            netns: "net:[4026532300]".into(),
            elsewhere: vec![],
            interfaces: vec!["lo".into()],
            addresses: vec![],
        }
    }

    #[test]
    fn a_lone_loopback_that_is_down_is_a_new_namespace() {
        assert_eq!(reading().differs_from_new(), None);
    }

    #[test]
    fn anything_more_is_dumped_in_full() {
        let mut up = reading();
        up.interfaces = vec!["lo up".into()];
        assert!(up.differs_from_new().unwrap().contains("lo up"));
        let mut addr = reading();
        addr.addresses = vec!["127.0.0.1:0 on lo".into()];
        assert!(addr.differs_from_new().unwrap().contains("addresses"));
        let mut more = reading();
        more.interfaces = vec!["dummy0".into(), "lo".into()];
        assert!(more.differs_from_new().is_some());
        let mut nested = reading();
        nested.elsewhere = vec!["412 net:[4026532400]".into()];
        assert!(nested.differs_from_new().unwrap().contains("412"));
    }

    #[test]
    fn the_restore_follows_the_images() {
        let d = std::env::temp_dir().join(format!("netns-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("pstree.img"), b"x").unwrap();
        std::fs::write(d.join("netns-10.img"), b"x").unwrap();
        assert!(dumped_empty(&d));
        std::fs::write(d.join("netdev-10.img"), b"x").unwrap();
        assert!(!dumped_empty(&d));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
