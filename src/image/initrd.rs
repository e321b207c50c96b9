//! The small initrd: static busybox, the virtio modules the cloud kernel lacks built in, and our
//! /init. Written as a newc cpio here rather than by the host's cpio so every header field
//! (owner, mtime, inode numbers) is ours and the bytes are the same on every host.

use anyhow::{bail, Context, Result};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Modules the guest needs before it can mount root and reach the network.
pub const WANTED_MODULES: [&str; 4] = ["virtio_pci", "virtio_blk", "virtio_net", "ext4"];

fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.split(".ko").next().unwrap_or(base);
    stem.replace('-', "_")
}

/// Load order (dependencies first) of `wanted` and everything they need, as paths relative to
/// the modules directory. Built-in modules are skipped; anything else unknown is an error.
pub fn module_closure(
    modules_dep: &str,
    modules_builtin: &str,
    wanted: &[&str],
) -> Result<Vec<String>> {
    let mut deps: BTreeMap<String, (String, Vec<String>)> = BTreeMap::new();
    for line in modules_dep.lines() {
        if let Some((m, rest)) = line.split_once(':') {
            let ds = rest.split_whitespace().map(str::to_string).collect();
            deps.insert(module_name(m), (m.to_string(), ds));
        }
    }
    let builtin: BTreeSet<String> = modules_builtin.lines().map(module_name).collect();
    let mut order = Vec::new();
    let mut seen = BTreeSet::new();
    fn visit(
        name: &str,
        deps: &BTreeMap<String, (String, Vec<String>)>,
        seen: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) -> Result<()> {
        if !seen.insert(name.to_string()) {
            return Ok(());
        }
        let (path, ds) = deps
            .get(name)
            .with_context(|| format!("module {name} is neither in modules.dep nor built in"))?;
        for d in ds {
            visit(&module_name(d), deps, seen, order)?;
        }
        order.push(path.clone());
        Ok(())
    }
    for w in wanted {
        let w = w.replace('-', "_");
        if builtin.contains(&w) {
            continue;
        }
        visit(&w, &deps, &mut seen, &mut order)?;
    }
    Ok(order)
}

/// One member of the archive.
#[derive(Debug, Clone)]
pub enum Entry {
    Dir {
        path: String,
    },
    File {
        path: String,
        mode: u32,
        data: Vec<u8>,
    },
    Symlink {
        path: String,
        target: String,
    },
    CharDev {
        path: String,
        major: u32,
        minor: u32,
    },
}

impl Entry {
    fn path(&self) -> &str {
        match self {
            Entry::Dir { path }
            | Entry::File { path, .. }
            | Entry::Symlink { path, .. }
            | Entry::CharDev { path, .. } => path,
        }
    }
}

/// A newc archive with every entry root-owned, stamped `mtime`, sorted by path, inodes numbered
/// in that order.
pub fn write_newc(entries: &[Entry], mtime: u64) -> Result<Vec<u8>> {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| a.path().cmp(b.path()));
    let mut out = Vec::new();
    for (i, e) in sorted.iter().enumerate() {
        let path = e.path();
        if path.is_empty() || path.starts_with('/') || path.contains("..") {
            bail!("initrd path {path:?} must be relative and inside the archive");
        }
        let (mode, data, rmaj, rmin): (u32, &[u8], u32, u32) = match e {
            Entry::Dir { .. } => (0o040755, &[], 0, 0),
            Entry::File { mode, data, .. } => (0o100000 | (mode & 0o7777), data, 0, 0),
            Entry::Symlink { target, .. } => (0o120777, target.as_bytes(), 0, 0),
            Entry::CharDev { major, minor, .. } => (0o020600, &[], *major, *minor),
        };
        let nlink = if matches!(e, Entry::Dir { .. }) { 2 } else { 1 };
        header(
            &mut out,
            i as u32 + 1,
            mode,
            nlink,
            mtime,
            data.len(),
            rmaj,
            rmin,
            path,
        )?;
        out.extend_from_slice(data);
        pad4(&mut out);
    }
    header(&mut out, 0, 0, 1, 0, 0, 0, 0, "TRAILER!!!")?;
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
fn header(
    out: &mut Vec<u8>,
    ino: u32,
    mode: u32,
    nlink: u32,
    mtime: u64,
    size: usize,
    rmaj: u32,
    rmin: u32,
    name: &str,
) -> Result<()> {
    let size = u32::try_from(size).context("initrd member larger than 4 GiB")?;
    let mtime = u32::try_from(mtime).context("mtime beyond 2106")?;
    let fields = [
        ino,
        mode,
        0,
        0,
        nlink,
        mtime,
        size,
        0,
        0,
        rmaj,
        rmin,
        name.len() as u32 + 1,
        0,
    ];
    out.extend_from_slice(b"070701");
    for f in fields {
        out.extend_from_slice(format!("{f:08x}").as_bytes());
    }
    out.extend_from_slice(name.as_bytes());
    out.push(0);
    pad4(out);
    Ok(())
}

fn pad4(out: &mut Vec<u8>) {
    while out.len() % 4 != 0 {
        out.push(0);
    }
}

/// Adds `path`'s parent directories (not `path` itself) to `dirs`.
pub fn parents(path: &str, dirs: &mut BTreeSet<String>) {
    let mut acc = String::new();
    let parts: Vec<&str> = path.split('/').collect();
    for p in &parts[..parts.len().saturating_sub(1)] {
        if !acc.is_empty() {
            acc.push('/');
        }
        acc.push_str(p);
        dirs.insert(acc.clone());
    }
}

/// busybox-static's binary inside the (merged-/usr) tarball.
pub const BUSYBOX_IN_TAR: &str = "./usr/bin/busybox";

/// The initrd from what the first tar extraction produced (busybox, module lists) and the
/// module files themselves.
pub fn build_initrd(
    extract: &Path,
    release: &str,
    init_script: &[u8],
    module_order: &[String],
    mtime: u64,
) -> Result<Vec<u8>> {
    let mut entries = Vec::new();
    let mut dirs: BTreeSet<String> = ["bin", "dev", "proc", "sys", "newroot", "sbin"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let busybox =
        std::fs::read(extract.join(BUSYBOX_IN_TAR)).context("reading busybox from the tarball")?;
    entries.push(Entry::File {
        path: "bin/busybox".into(),
        mode: 0o755,
        data: busybox,
    });
    entries.push(Entry::File {
        path: "init".into(),
        mode: 0o755,
        data: init_script.to_vec(),
    });
    // Without /dev/console in the archive the kernel starts /init with no stdio at all.
    entries.push(Entry::CharDev {
        path: "dev/console".into(),
        major: 5,
        minor: 1,
    });
    let mut order = String::new();
    for m in module_order {
        let rel = format!("lib/modules/{release}/{m}");
        let src = extract.join("usr").join(&rel);
        let data =
            std::fs::read(&src).with_context(|| format!("reading module {}", src.display()))?;
        parents(&rel, &mut dirs);
        entries.push(Entry::File {
            path: rel.clone(),
            mode: 0o644,
            data,
        });
        order.push_str(&rel);
        order.push('\n');
    }
    entries.push(Entry::File {
        path: "modules.order".into(),
        mode: 0o644,
        data: order.into_bytes(),
    });
    entries.extend(dirs.into_iter().map(|path| Entry::Dir { path }));
    write_newc(&entries, mtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "kernel/drivers/virtio/virtio.ko:\n\
        kernel/drivers/virtio/virtio_ring.ko:\n\
        kernel/drivers/virtio/virtio_pci_modern_dev.ko:\n\
        kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko\n\
        kernel/drivers/block/virtio_blk.ko: kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko\n\
        kernel/net/core/failover.ko:\n\
        kernel/drivers/net/net_failover.ko: kernel/net/core/failover.ko\n\
        kernel/drivers/net/virtio_net.ko: kernel/drivers/net/net_failover.ko kernel/net/core/failover.ko kernel/drivers/virtio/virtio_ring.ko kernel/drivers/virtio/virtio.ko\n";

    #[test]
    fn closure_puts_dependencies_first_and_skips_builtins() {
        let o = module_closure(DEP, "kernel/fs/ext4/ext4.ko\n", &WANTED_MODULES).unwrap();
        let pos = |m: &str| {
            o.iter()
                .position(|p| p.ends_with(&format!("/{m}.ko")))
                .unwrap()
        };
        assert_eq!(o.len(), 8, "{o:?}");
        assert!(pos("virtio") < pos("virtio_pci"));
        assert!(pos("virtio_pci_modern_dev") < pos("virtio_pci"));
        assert!(pos("failover") < pos("net_failover"));
        assert!(pos("net_failover") < pos("virtio_net"));
        let e = module_closure(DEP, "", &WANTED_MODULES).unwrap_err();
        assert!(e.to_string().contains("ext4"), "{e}");
    }

    #[test]
    fn newc_layout_is_exact_and_sorted() {
        let a = write_newc(
            &[
                Entry::File {
                    path: "init".into(),
                    mode: 0o755,
                    data: b"#!x\n".to_vec(),
                },
                Entry::Dir { path: "bin".into() },
            ],
            1_700_000_000,
        )
        .unwrap();
        let s = String::from_utf8_lossy(&a);
        assert!(s.starts_with("07070100000001000041ed"), "{s}");
        // mtime field of the first entry
        assert_eq!(&s[6 + 5 * 8..6 + 6 * 8], "6553f100");
        let bin = s.find("bin\0").unwrap();
        let init = s.find("init\0").unwrap();
        assert!(bin < init);
        assert!(s.contains("TRAILER!!!"));
        assert_eq!(a.len() % 4, 0);
        let b = write_newc(
            &[
                Entry::Dir { path: "bin".into() },
                Entry::File {
                    path: "init".into(),
                    mode: 0o755,
                    data: b"#!x\n".to_vec(),
                },
            ],
            1_700_000_000,
        )
        .unwrap();
        assert_eq!(a, b, "input order must not matter");
        assert!(write_newc(
            &[Entry::Dir {
                path: "/abs".into()
            }],
            0
        )
        .is_err());
    }

    #[test]
    fn parents_lists_each_prefix() {
        let mut d = BTreeSet::new();
        parents("lib/modules/6.1/kernel/x.ko", &mut d);
        assert_eq!(
            d.into_iter().collect::<Vec<_>>(),
            [
                "lib",
                "lib/modules",
                "lib/modules/6.1",
                "lib/modules/6.1/kernel"
            ]
        );
    }
}
