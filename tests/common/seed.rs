//! Images built once and copied into every sandbox that only runs them. An image build takes
//! minutes under this project's machines; the VM tests test running, not building (tests/image.rs
//! builds from scratch on purpose), so each of them taking its own build of bookworm was most of
//! the test suite's time.
//!
//! The seed is an ordinary image cache in the temp dir, owned by the test user. Its entries are
//! keyed and verified by the rig exactly as a user's are, so an entry of another definition is
//! never taken for this one: `xtask image` on the seed either finds the entry this tree's images
//! give or builds it. A copy in the sandbox is checked again (hashes, manifest) when the test's
//! run uses it.

use super::{last_line, Sandbox};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The seed cache, shared by every test binary of one machine.
pub fn cache_dir() -> PathBuf {
    std::env::temp_dir()
        .join("sharedos-test-seed")
        .join("cache")
}

/// The seed's root, made and owned by the test user.
fn ensure_root(sb: &Sandbox) -> PathBuf {
    let cache = cache_dir();
    std::fs::create_dir_all(&cache).unwrap();
    let root = cache.parent().unwrap();
    let st = Command::new("chown")
        .arg(format!("{}:{}", sb.uid, sb.gid))
        .arg(root)
        .arg(&cache)
        .status()
        .unwrap();
    assert!(st.success(), "chown of the seed cache");
    cache
}

/// Copies `image`'s entry into the sandbox's `cache`, building it into the seed first (in
/// `mode`) when the seed does not hold the one this tree's definition gives. Returns the entry's
/// directory in the sandbox.
pub fn seed(sb: &Sandbox, cache: &str, image: &str, mode: &str) -> PathBuf {
    let seed = ensure_root(sb);
    let out = sb.run_as_user(
        &sb.xtask,
        &[
            "image",
            "--image",
            image,
            "--images-dir",
            sb.images.to_str().unwrap(),
            "--cache-dir",
            seed.to_str().unwrap(),
            "--mode",
            mode,
        ],
    );
    assert!(
        out.status.success(),
        "building {image} into the seed cache failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let entry = PathBuf::from(last_line(&out));
    let rel = entry
        .strip_prefix(&seed)
        .unwrap_or_else(|_| panic!("{} is not in the seed cache", entry.display()));
    let copied = sb.dir.join(cache).join(rel);
    copy_entry(sb, &entry, &copied);
    eprintln!("seeded {image} from {}", entry.display());
    // Its snapshots too: the rig checks each against its record (QEMU, image, QEMU line, file
    // hashes) before it resumes one, exactly as a user's.
    let store = sb.dir.join(cache).join("snapshots");
    for snap in snapshots_of(&seed.join("snapshots"), image) {
        let to = store.join(snap.file_name().unwrap());
        if !to.exists() {
            copy_entry(sb, &snap, &to);
            eprintln!("seeded the snapshot {}", snap.display());
        }
    }
    copied
}

/// The snapshots of `image` in a store: `<image>-<16 hex>` (and not those of an image whose
/// name only starts with it).
fn snapshots_of(store: &Path, image: &str) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(store) else {
        return Vec::new();
    };
    rd.flatten()
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.strip_prefix(image)
                .and_then(|r| r.strip_prefix('-'))
                .is_some_and(|k| k.len() == 16 && k.chars().all(|c| c.is_ascii_hexdigit()))
        })
        .collect()
}

/// Offers the snapshots a test's runs made to the seed (the sandbox's end calls this), so that
/// later tests resume them instead of making their own. One the seed has is left as it is.
pub fn publish_snapshots(sb: &Sandbox, cache: &str) {
    let Ok(rd) = std::fs::read_dir(sb.dir.join(cache).join("snapshots")) else {
        return;
    };
    let seed = ensure_root(sb).join("snapshots");
    for snap in rd.flatten().map(|e| e.path()) {
        let name = snap.file_name().unwrap().to_owned();
        // Half-made ones start with a dot; only whole ones have their record.
        if name.to_string_lossy().starts_with('.') || !snap.join("snapshot.json").is_file() {
            continue;
        }
        if !seed.join(&name).exists() {
            copy_entry(sb, &snap, &seed.join(&name));
            eprintln!("published the snapshot {} to the seed", snap.display());
        }
    }
}

/// Offers an entry a test built (and checked) to the seed, so that later tests take it instead
/// of building it again. An entry the seed already has is left as it is.
pub fn publish(sb: &Sandbox, entry: &Path, cache: &Path) {
    let seed = ensure_root(sb);
    let rel = entry.strip_prefix(cache).unwrap();
    let dst = seed.join(rel);
    if dst.exists() {
        return;
    }
    copy_entry(sb, entry, &dst);
    eprintln!("published {} to the seed cache", entry.display());
}

/// Copies an entry whole, as the test user owns it, through a temporary name so that no reader
/// sees half of it.
fn copy_entry(sb: &Sandbox, from: &Path, to: &Path) {
    let parent = to.parent().unwrap();
    std::fs::create_dir_all(parent).unwrap();
    let tmp = parent.join(format!(
        ".seeding-{}-{}",
        std::process::id(),
        to.file_name().unwrap().to_string_lossy()
    ));
    let _ = std::fs::remove_dir_all(&tmp);
    let st = Command::new("cp")
        .args(["-a", "--reflink=auto"])
        .arg(from)
        .arg(&tmp)
        .status()
        .unwrap();
    assert!(st.success(), "copying {} failed", from.display());
    if let Err(e) = std::fs::rename(&tmp, to) {
        let _ = std::fs::remove_dir_all(&tmp);
        // Another test binary put the same entry there first.
        assert!(to.is_dir(), "renaming into {}: {e}", to.display());
    }
    let st = Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", sb.uid, sb.gid))
        .arg(parent)
        .status()
        .unwrap();
    assert!(st.success());
}
