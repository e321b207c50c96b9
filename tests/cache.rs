//! `cargo xtask cache list|prune` on a cache made here, with no VM and no root: snapshots laid
//! out by the rig's own store functions and records, one image entry named as the current
//! bookworm definition gives it (its manifest written by the rig's own type), and what a
//! prune must take or leave. The stale snapshots are stale on facts the fixture does not fake:
//! one names a QEMU that is not the installed one, the other an image build no entry holds.
//! Bad input (an unknown subcommand, a directory that is not a cache, a link out of the cache)
//! removes nothing.

// Tests start the binaries as a user would, and say what they skip: std's Command and print
// macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use sharedos_rig::image::manifest::{Manifest, MANIFEST_FILE, MANIFEST_VERSION};
use sharedos_rig::vm::{accel_cache, qemu::Accel, snapshot};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn images() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
}

fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("sharedos-cache-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The installed QEMU's version line, or None (and the test says it cannot run).
fn installed_qemu(test: &str) -> Option<String> {
    match sharedos_rig::vm::qemu_version() {
        Ok(v) => Some(v),
        Err(e) => {
            common::skip::cannot_run(test, &format!("no qemu-system-x86_64 here ({e:#})"));
            None
        }
    }
}

fn media(image: char) -> (String, String, String) {
    (image.to_string().repeat(64), "b".repeat(64), "c".repeat(64))
}

/// A snapshot as the rig makes one: a making directory of the store, its files, the record,
/// installed under the directory its key names.
fn snapshot_of(store: &Path, qemu: &str, image: char, memory: &str) -> PathBuf {
    let (image_sha256, kernel_sha256, initrd_sha256) = media(image);
    let spot = snapshot::Spot {
        root: store.to_path_buf(),
        image_name: "bookworm".into(),
        image_sha256,
        kernel_sha256,
        initrd_sha256,
    };
    let key = spot.key(
        qemu,
        vec!["qemu-system-x86_64".into(), "-m".into(), memory.into()],
    );
    let making = snapshot::making_dir(store, "test").unwrap();
    std::fs::write(making.join(snapshot::STATE), vec![7u8; 4096]).unwrap();
    std::fs::write(making.join(snapshot::DISK), vec![1u8; 1000]).unwrap();
    std::fs::write(making.join(snapshot::KEY), b"key").unwrap();
    std::fs::write(making.join(snapshot::CONSOLE), b"SHAREDOS-READY").unwrap();
    let state = sharedos_report::digest::sha256_file(&making.join(snapshot::STATE)).unwrap();
    let disk = sharedos_report::digest::sha256_file(&making.join(snapshot::DISK))
        .unwrap()
        .0;
    let r = snapshot::record(
        key.clone(),
        Accel::Tcg,
        "forced with --accel tcg",
        "console=ttyS0",
        "SHA256:x",
        state,
        disk,
    );
    let dir = spot.dir(&key);
    snapshot::install(&making, &dir, &r).unwrap();
    dir
}

fn entry(root: &Path, name: &str, image: char) -> PathBuf {
    let (image_sha256, kernel_sha256, initrd_sha256) = media(image);
    let dir = root.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("disk.img"), vec![0u8; 2048]).unwrap();
    Manifest {
        manifest_version: MANIFEST_VERSION,
        image_name: "bookworm".into(),
        key: name.into(),
        image_sha256,
        kernel_sha256,
        initrd_sha256,
        ..Manifest::default()
    }
    .write(&dir.join(MANIFEST_FILE))
    .unwrap();
    dir
}

/// Every path under `root` with its size: what "untouched" is compared by.
fn tree(root: &Path) -> BTreeMap<PathBuf, u64> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(p) = stack.pop() {
        let m = std::fs::symlink_metadata(&p).unwrap();
        out.insert(p.clone(), if m.is_dir() { 0 } else { m.len() });
        if m.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(e.unwrap().path());
            }
        }
    }
    out
}

fn xtask(args: &[&str]) -> Output {
    Command::new(common::xtask_binary())
        .args(args)
        .output()
        .expect("running xtask")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn name_of(p: &Path) -> String {
    format!(
        "snapshots/{}",
        p.file_name().unwrap().to_string_lossy().into_owned()
    )
}

/// The line of `out` about `name` (a line that names it, followed by a space or a comma).
fn line_of<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find(|l| {
            l.split_whitespace()
                .any(|w| w.trim_end_matches(',') == name)
        })
        .unwrap_or_else(|| panic!("no line about {name} in:\n{out}"))
}

#[test]
fn prune_removes_the_stale_keeps_the_current_and_leaves_what_a_run_holds() {
    const TEST: &str = "prune_removes_the_stale_keeps_the_current_and_leaves_what_a_run_holds";
    let Some(qemu) = installed_qemu(TEST) else {
        return;
    };
    let d = scratch("prune");
    let root = d.join("cache");
    let store = root.join(snapshot::DIR);
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join(".entries.lock"), b"").unwrap();
    let current_key = sharedos_rig::image::current_entry_key(&images(), "bookworm").unwrap();
    let current_entry = entry(&root, &current_key, 'a');
    let old_entry = entry(&root, "bookworm-00000000000000000000", 'f');

    let current = snapshot_of(&store, &qemu, 'a', "1024");
    let other_memory = snapshot_of(&store, &qemu, 'a', "2048");
    let other_qemu = snapshot_of(
        &store,
        "QEMU emulator version 0.0.1 (not installed)",
        'a',
        "1024",
    );
    let gone_build = snapshot_of(&store, &qemu, '9', "1024");
    let held = snapshot_of(
        &store,
        "QEMU emulator version 0.0.2 (not installed)",
        'a',
        "1024",
    );
    // The old entry's snapshot is stale with it.
    let old_entry_snapshot = snapshot_of(&store, &qemu, 'f', "1024");
    // Made last: making a snapshot sweeps a dead run's half-made one.
    let dead_making = store.join(".making-4294967294-x");
    std::fs::create_dir_all(&dead_making).unwrap();
    std::fs::write(dead_making.join(snapshot::STATE), b"half").unwrap();

    let verdict_path = root
        .join(accel_cache::DIR)
        .join("kernel-bbbbbbbbbbbbbbbb.json");
    let other_boot = accel_cache::Key {
        host_boot_id: "not-this-boot".into(),
        qemu_version: qemu.clone(),
        kernel_sha256: "b".repeat(64),
    };
    accel_cache::write(
        &verdict_path,
        &accel_cache::record(&other_boot, Accel::Kvm, "probed", "2026-12-02T12:00:00Z"),
    )
    .unwrap();
    std::fs::create_dir_all(root.join("peers")).unwrap();
    std::fs::write(root.join("peers/ready"), b"x").unwrap();

    let (cache_dir, images_dir) = (root.display().to_string(), images().display().to_string());
    let at = ["--cache-dir", &cache_dir, "--images-dir", &images_dir];

    // An unknown subcommand: non-zero, nothing touched.
    let before = tree(&root);
    let o = xtask(&[&["cache", "frobnicate"][..], &at[..]].concat());
    assert!(!o.status.success(), "{:?}", text(&o));
    assert_eq!(
        tree(&root),
        before,
        "an unknown subcommand touched the cache"
    );

    // A run holds this stale snapshot as a resumed session does.
    let hold = snapshot::hold(&held).unwrap().unwrap();

    let o = xtask(&[&["cache", "list"][..], &at[..]].concat());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(tree(&root), before, "list touched the cache");
    assert!(
        line_of(&out, &name_of(&current)).contains("current"),
        "{out}"
    );
    assert!(
        line_of(&out, &name_of(&other_memory)).contains("current"),
        "{out}"
    );
    assert!(
        line_of(&out, &name_of(&other_qemu)).contains("stale"),
        "{out}"
    );
    assert!(
        line_of(&out, &name_of(&other_qemu)).contains("0.0.1"),
        "{out}"
    );
    assert!(
        line_of(&out, &name_of(&gone_build)).contains("no longer in the cache"),
        "{out}"
    );
    assert!(line_of(&out, &name_of(&held)).contains("in use"), "{out}");
    assert!(line_of(&out, &current_key).contains("current"), "{out}");
    assert!(
        line_of(&out, "bookworm-00000000000000000000").contains("stale"),
        "{out}"
    );
    assert!(
        line_of(&out, "accel/kernel-bbbbbbbbbbbbbbbb.json").contains("another host boot"),
        "{out}"
    );
    assert!(line_of(&out, "peers").contains("kept"), "{out}");

    let stale: Vec<PathBuf> = vec![
        other_qemu.clone(),
        gone_build.clone(),
        dead_making.clone(),
        old_entry_snapshot.clone(),
        old_entry.clone(),
        verdict_path.clone(),
    ];
    let other_qemu_bytes = snapshot::tree_bytes(&other_qemu);
    let stale_bytes: u64 = stale.iter().map(|p| snapshot::tree_bytes(p)).sum();

    // A dry run says the same and removes nothing.
    let o = xtask(&[&["cache", "prune", "--dry-run"][..], &at[..]].concat());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(tree(&root), before, "a dry run touched the cache");
    assert!(
        out.contains(&format!(
            "would free {}",
            sharedos_rig::cache_inventory::human_bytes(stale_bytes)
        )),
        "{out}"
    );

    let o = xtask(&[&["cache", "prune"][..], &at[..]].concat());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    for p in &stale {
        assert!(!p.exists(), "{} was not removed:\n{out}", p.display());
    }
    for p in [&current, &other_memory, &held] {
        assert!(
            p.join(snapshot::RECORD).is_file(),
            "{} was removed:\n{out}",
            p.display()
        );
    }
    assert!(current_entry.join(MANIFEST_FILE).is_file());
    assert!(root.join("peers/ready").is_file());
    let removed = line_of(&out, &name_of(&other_qemu));
    assert!(
        removed.starts_with("removed ") && removed.contains(&format!("({other_qemu_bytes} bytes)")),
        "{out}"
    );
    assert!(
        line_of(&out, &name_of(&gone_build)).starts_with("removed "),
        "{out}"
    );
    let left = line_of(&out, &name_of(&held));
    assert!(
        left.starts_with("left ") && left.contains(&std::process::id().to_string()),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "freed {} ({stale_bytes} bytes)",
            sharedos_rig::cache_inventory::human_bytes(stale_bytes)
        )),
        "{out}"
    );

    // Released, the held one goes at the next prune; the current ones still stay.
    drop(hold);
    let o = xtask(&[&["cache", "prune"][..], &at[..]].concat());
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(!held.exists(), "{out}");
    assert!(
        current.join(snapshot::RECORD).is_file() && other_memory.is_dir(),
        "{out}"
    );
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_directory_that_is_not_a_cache_or_links_out_of_one_is_refused_and_left_alone() {
    const TEST: &str =
        "a_directory_that_is_not_a_cache_or_links_out_of_one_is_refused_and_left_alone";
    let Some(_qemu) = installed_qemu(TEST) else {
        return;
    };
    let d = scratch("refuse");
    let images_dir = images().display().to_string();

    // Not a cache: a home-like directory with a file and a directory in it.
    let home = d.join("home");
    std::fs::create_dir_all(home.join("projects")).unwrap();
    std::fs::write(home.join("notes.txt"), b"mine").unwrap();
    let before = tree(&home);
    for sub in ["list", "prune"] {
        let o = xtask(&[
            "cache",
            sub,
            "--cache-dir",
            &home.display().to_string(),
            "--images-dir",
            &images_dir,
        ]);
        let (out, err) = text(&o);
        assert!(!o.status.success(), "{sub}: {out}\n{err}");
        assert!(
            err.contains("does not look like a sharedos-rig cache") && err.contains("fix:"),
            "{err}"
        );
    }
    assert_eq!(tree(&home), before);

    // A cache with a stale snapshot and a link out of the root: prune refuses whole.
    let outside = d.join("outside");
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("precious"), b"keep me").unwrap();
    let root = d.join("cache");
    let store = root.join(snapshot::DIR);
    std::fs::create_dir_all(&store).unwrap();
    let stale = snapshot_of(
        &store,
        "QEMU emulator version 0.0.1 (not installed)",
        'a',
        "1024",
    );
    std::os::unix::fs::symlink(&outside, store.join("bookworm-0123456789abcdef")).unwrap();
    let cache_dir = root.display().to_string();
    let before = tree(&root);
    let o = xtask(&[
        "cache",
        "prune",
        "--cache-dir",
        &cache_dir,
        "--images-dir",
        &images_dir,
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("outside the cache root") && err.contains("fix:"),
        "{err}"
    );
    assert_eq!(tree(&root), before);
    assert!(stale.is_dir() && outside.join("precious").is_file());
    // list shows the link, and follows it nowhere.
    let o = xtask(&[
        "cache",
        "list",
        "--cache-dir",
        &cache_dir,
        "--images-dir",
        &images_dir,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        line_of(&out, "snapshots/bookworm-0123456789abcdef").contains("outside the cache root"),
        "{out}"
    );

    // A link inside a stale snapshot, pointing out: refused too.
    std::fs::remove_file(store.join("bookworm-0123456789abcdef")).unwrap();
    std::fs::remove_file(stale.join(snapshot::CONSOLE)).unwrap();
    std::os::unix::fs::symlink(outside.join("precious"), stale.join(snapshot::CONSOLE)).unwrap();
    let before = tree(&root);
    let o = xtask(&[
        "cache",
        "prune",
        "--cache-dir",
        &cache_dir,
        "--images-dir",
        &images_dir,
    ]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(err.contains("outside the cache root"), "{err}");
    assert_eq!(tree(&root), before);
    // Once the link points inside, the stale snapshot goes, as a link only.
    std::fs::remove_file(stale.join(snapshot::CONSOLE)).unwrap();
    std::os::unix::fs::symlink(stale.join(snapshot::KEY), stale.join(snapshot::CONSOLE)).unwrap();
    let o = xtask(&[
        "cache",
        "prune",
        "--cache-dir",
        &cache_dir,
        "--images-dir",
        &images_dir,
    ]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(!stale.exists(), "{out}");
    assert_eq!(std::fs::read(outside.join("precious")).unwrap(), b"keep me");
    std::fs::remove_dir_all(&d).unwrap();
}
