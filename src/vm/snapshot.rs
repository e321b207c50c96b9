//! Snapshots of a booted, ready guest, kept in the image cache: the machine's state as QEMU
//! migrated it out, the disk overlay as it was at that moment (backed by the image's disk), the
//! client key the saved boot trusts, and `snapshot.json`, which says what decides the snapshot
//! and the sha256 of each file. A resume checks every one of those before QEMU starts; a
//! snapshot that fails a check is never used.
//!
//! The store is the rig's own cache, not the guest's output, but it lives on disk beside other
//! users' files: its record is read bounded and through no link, and its directories are 0700
//! because the key in them logs into every resume.
//!
//! Here: what decides a snapshot, its record, its checks and its install; `store`: the store's
//! housekeeping (holds, sweeps, removal); `state`: the guest's state saved from and fed to QEMU.

mod state;
mod store;

pub use state::{feed, save, Damaged};
pub use store::{
    discard, hold, image_of_dir, making_dir, making_pid, pid_runs, remove_replaced_layers,
    remove_stale, remove_unless_in_use, replaced_layer, tree_bytes, unusable, why_cannot_make,
    Media, Removal, Swept,
};

use store::open_in_use;

use super::accel_cache;
use super::qemu::Accel;
use crate::image::ImageEntry;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use sharedos_report::digest;
use std::path::{Path, PathBuf};

/// The snapshot store's directory under the image cache root.
pub const DIR: &str = "snapshots";
const FORMAT: u32 = 1;
pub const STATE: &str = "state";
pub const DISK: &str = "disk.qcow2";
pub const KEY: &str = "id_ed25519";
pub const RECORD: &str = "snapshot.json";
/// The saved boot's console, which a resumed run's console log goes on from.
pub const CONSOLE: &str = "serial.log";
/// A record holds one QEMU line and a few hashes.
const RECORD_MAX: u64 = 64 * 1024;
/// The lock a run holds shared on the snapshot it resumes, for its whole session. Whoever
/// removes a snapshot takes it exclusive without waiting, and leaves the snapshot alone when
/// it cannot: a snapshot in use is never removed.
pub const IN_USE: &str = "in-use.lock";

/// A shared hold on a snapshot ([`hold`]): released when dropped.
pub type Hold = nix::fcntl::Flock<std::fs::File>;

/// Everything that decides a snapshot: a resume under any other value would be another
/// machine, or one QEMU cannot load.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Key {
    pub qemu_version: String,
    pub image_sha256: String,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
    /// The resume's QEMU line with what differs per run (paths, port, name, key) as
    /// placeholders: the machine, CPU model, accelerator, memory, CPUs, kernel command line,
    /// devices and sandbox. The guest's init is in the image's sha256.
    pub argv: Vec<String>,
    /// A layer's: the sha256 of the gate binary it holds, on top of the snapshot of the same key
    /// without it (its base). None for a snapshot of a ready guest as it booted; left out of
    /// the record then, so that a base's key and directory are what they were before layers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_sha256: Option<String>,
    /// A warmed layer's: the sha256 of the command its guest ran before it was saved (see
    /// `Layer::warm_up`). A guest that ran it holds other caches than one that did not, so the
    /// two are other layers of the same binary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_up_sha256: Option<String>,
}

impl Key {
    pub fn sha256(&self) -> String {
        digest::sha256_hex(serde_json::to_string(self).unwrap_or_default().as_bytes())
    }

    /// The key of the layer over this snapshot that holds the gate binary of sha256 `gate`.
    pub fn layer(&self, gate: &str) -> Key {
        Key {
            gate_sha256: Some(gate.to_string()),
            warm_up_sha256: None,
            ..self.clone()
        }
    }

    /// The key of the layer of this key whose guest ran `command` before it was saved.
    pub fn warmed_by(&self, command: &str) -> Key {
        Key {
            warm_up_sha256: Some(digest::sha256_hex(command.as_bytes())),
            ..self.clone()
        }
    }

    /// The key of the snapshot a layer of this key is made over (itself for a base).
    pub fn base(&self) -> Key {
        Key {
            gate_sha256: None,
            warm_up_sha256: None,
            ..self.clone()
        }
    }

    /// The first field that differs from `want`, in words.
    pub fn differs(&self, want: &Key) -> Option<String> {
        if self.qemu_version != want.qemu_version {
            return Some(format!(
                "it was made by {:?}, and this is {:?}",
                self.qemu_version, want.qemu_version
            ));
        }
        if (&self.image_sha256, &self.kernel_sha256, &self.initrd_sha256)
            != (&want.image_sha256, &want.kernel_sha256, &want.initrd_sha256)
        {
            return Some("it was made from another build of the image".into());
        }
        if self.argv != want.argv {
            let at = self
                .argv
                .iter()
                .zip(&want.argv)
                .position(|(a, b)| a != b)
                .unwrap_or(self.argv.len().min(want.argv.len()));
            return Some(format!(
                "its QEMU line differs at argument {at} ({:?}, now {:?})",
                self.argv.get(at).map(String::as_str).unwrap_or(""),
                want.argv.get(at).map(String::as_str).unwrap_or("")
            ));
        }
        holds_other(
            &self.gate_sha256,
            &want.gate_sha256,
            "the gate binary of sha256",
            "no gate binary",
        )
        .or_else(|| {
            holds_other(
                &self.warm_up_sha256,
                &want.warm_up_sha256,
                "a guest warmed by the command of sha256",
                "a guest not warmed",
            )
        })
    }
}

/// How a layer's hash `have` differs from the `want`ed one, in words: `named` and the sha256, or
/// `none` for a layer without it. None when they agree.
fn holds_other(
    have: &Option<String>,
    want: &Option<String>,
    named: &str,
    none: &str,
) -> Option<String> {
    let says = |h: &Option<String>| match h {
        Some(sha) => format!("{named} {sha}"),
        None => none.to_string(),
    };
    (have != want).then(|| format!("it holds {}, and this run wants {}", says(have), says(want)))
}

/// A layer's record of the snapshot it was made over: its disk is that snapshot's disk, so a
/// layer is used only while its base is still the one it was made over.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct BaseRef {
    /// The base's directory name in the same store.
    pub dir: String,
    pub state_sha256: String,
    pub disk_sha256: String,
}

/// `snapshot.json`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Record {
    pub format: u32,
    pub key: Key,
    pub made_at: String,
    /// The accelerator the saved boot ran under, and why.
    pub accel: String,
    pub accel_reason: String,
    /// The kernel command line the saved boot had: a resume passes it again unchanged.
    pub append: String,
    /// The host key the saved boot's init announced; every resume presents it.
    pub host_key: String,
    pub state_sha256: String,
    pub state_bytes: u64,
    pub disk_sha256: String,
    pub key_sha256: String,
    /// A layer's base; None for a base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<BaseRef>,
}

/// Where an image's snapshots are kept, and the image's identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spot {
    pub root: PathBuf,
    pub image_name: String,
    pub image_sha256: String,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
}

impl Spot {
    /// In the cache root the image's entry is in.
    pub fn of_image(entry: &ImageEntry) -> Option<Spot> {
        Some(Spot {
            root: entry.dir.parent()?.join(DIR),
            image_name: entry.manifest.image_name.clone(),
            image_sha256: entry.manifest.image_sha256.clone(),
            kernel_sha256: entry.manifest.kernel_sha256.clone(),
            initrd_sha256: entry.manifest.initrd_sha256.clone(),
        })
    }

    pub fn key(&self, qemu_version: &str, argv: Vec<String>) -> Key {
        Key {
            qemu_version: qemu_version.to_string(),
            image_sha256: self.image_sha256.clone(),
            kernel_sha256: self.kernel_sha256.clone(),
            initrd_sha256: self.initrd_sha256.clone(),
            argv,
            gate_sha256: None,
            warm_up_sha256: None,
        }
    }

    /// The image's disk as a snapshot's overlay names it: relative when it is in the same cache
    /// (QEMU resolves a relative backing file from the overlay's own directory), so that a
    /// cache copied or moved whole keeps working snapshots.
    pub fn backing(&self, disk: &Path) -> PathBuf {
        match self.root.parent().map(|cache| disk.strip_prefix(cache)) {
            Some(Ok(rel)) => Path::new("../..").join(rel),
            _ => disk.to_path_buf(),
        }
    }

    /// One directory per key. The image's name is only for the reader of the cache: only
    /// characters safe in a file name are kept.
    pub fn dir(&self, key: &Key) -> PathBuf {
        self.root.join(format!(
            "{}-{}",
            self.dir_name_prefix(),
            &key.sha256()[..16]
        ))
    }

    /// The image's name as its snapshots' directory names begin with it.
    pub fn dir_name_prefix(&self) -> String {
        self.image_name
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
            .take(40)
            .collect()
    }
}

/// The record in `dir`: None when there is no snapshot there.
pub fn load(dir: &Path) -> Result<Option<Record>> {
    match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", dir.display())),
        Ok(m) if !m.is_dir() => bail!(
            "{} is not a directory (a link is not followed)",
            dir.display()
        ),
        Ok(_) => {}
    }
    let Some(bytes) = accel_cache::read_capped(&dir.join(RECORD), RECORD_MAX)? else {
        bail!("{} has no {RECORD}: an unfinished snapshot", dir.display());
    };
    let r: Record = serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a snapshot record", dir.join(RECORD).display()))?;
    if r.format != FORMAT {
        bail!(
            "{} is of format {}, this rig reads {FORMAT}",
            RECORD,
            r.format
        );
    }
    Ok(Some(r))
}

/// Whether the snapshot in `dir` is the one `want` asks for, with its files as they were made.
/// Its state is hashed as it is fed to QEMU, which runs nothing before that hash matched
/// ([`feed`]); here it need only be a regular file.
pub fn check(dir: &Path, r: &Record, want: &Key) -> Result<(), String> {
    if let Some(d) = r.key.differs(want) {
        return Err(format!("stale: {d}"));
    }
    for (name, sha) in [(DISK, Some(&r.disk_sha256)), (STATE, None)] {
        let path = dir.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_file() => {}
            Ok(_) => return Err(format!("damaged: {name} is not a regular file")),
            Err(e) => return Err(format!("damaged: {name}: {e}")),
        }
        let Some(sha) = sha else {
            continue;
        };
        match digest::sha256_file(&path) {
            Ok((got, _)) if &got == sha => {}
            Ok((got, _)) => {
                return Err(format!(
                    "damaged: {name} has sha256 {got}, its record says {sha}"
                ))
            }
            Err(e) => return Err(format!("damaged: {e:#}")),
        }
    }
    for name in [KEY, CONSOLE] {
        match std::fs::symlink_metadata(dir.join(name)) {
            Ok(m) if m.is_file() => {}
            _ => {
                return Err(format!(
                    "damaged: its {name} is missing or not a regular file"
                ))
            }
        }
    }
    Ok(())
}

/// Whether the base a layer in `dir` names (`base`) is still the snapshot it was made over: a
/// plain name beside it in the same store, its record's state and disk the ones the layer
/// recorded, its disk hashing as recorded (the layer's disk reads through it). Its state is
/// not hashed: a layer's resume loads its own.
pub fn check_base(dir: &Path, base: &BaseRef) -> Result<(), String> {
    if base.dir.contains('/') || base.dir.starts_with('.') || image_of_dir(&base.dir).is_none() {
        return Err(format!(
            "damaged: its base {:?} is not a snapshot's name",
            crate::escape::line(&base.dir)
        ));
    }
    let Some(root) = dir.parent() else {
        return Err("damaged: it is in no store".into());
    };
    let at = root.join(&base.dir);
    let r = match load(&at) {
        Ok(Some(r)) => r,
        Ok(None) => return Err(format!("stale: its base {} is gone", base.dir)),
        Err(e) => return Err(format!("stale: its base cannot be read ({e:#})")),
    };
    if (&r.state_sha256, &r.disk_sha256) != (&base.state_sha256, &base.disk_sha256) {
        return Err(format!("stale: its base {} was made again since", base.dir));
    }
    match digest::sha256_file(&at.join(DISK)) {
        Ok((got, _)) if got == base.disk_sha256 => Ok(()),
        Ok((got, _)) => Err(format!(
            "damaged: its base's {DISK} has sha256 {got}, recorded {}",
            base.disk_sha256
        )),
        Err(e) => Err(format!("damaged: its base's {DISK}: {e:#}")),
    }
}

/// Writes the record last, then renames the made directory into place. Another run that made
/// the same snapshot meanwhile wins: ours is removed and theirs is used.
pub fn install(making: &Path, dir: &Path, r: &Record) -> Result<()> {
    // Made now, so that a run that cannot write the store can still hold the snapshot.
    drop(
        open_in_use(making)
            .with_context(|| format!("creating {IN_USE} in {}", making.display()))?,
    );
    let bytes = serde_json::to_vec_pretty(r).context("encoding the snapshot record")?;
    digest::replace_in_report(making, RECORD, &bytes)?;
    if let Err(e) = std::fs::rename(making, dir) {
        discard(making);
        if !dir.is_dir() {
            return Err(e).with_context(|| format!("moving the snapshot into {}", dir.display()));
        }
    }
    Ok(())
}

/// The record of a snapshot just made.
#[allow(clippy::too_many_arguments)]
pub fn record(
    key: Key,
    accel: Accel,
    accel_reason: &str,
    append: &str,
    host_key: &str,
    state: (String, u64),
    disk_sha256: String,
) -> Record {
    let key_sha256 = key.sha256();
    Record {
        format: FORMAT,
        key,
        made_at: sharedos_report::clock::now_rfc3339(),
        accel: accel.as_str().into(),
        accel_reason: accel_reason.into(),
        append: append.into(),
        host_key: host_key.into(),
        state_sha256: state.0,
        state_bytes: state.1,
        disk_sha256,
        key_sha256,
        base: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) fn key() -> Key {
        Key {
            qemu_version: "QEMU emulator version 7.2.22".into(),
            image_sha256: "a".repeat(64),
            kernel_sha256: "b".repeat(64),
            initrd_sha256: "c".repeat(64),
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "1024".into()],
            gate_sha256: None,
            warm_up_sha256: None,
        }
    }

    pub(super) fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("snapshot-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    pub(super) fn made(dir: &Path) -> Record {
        std::fs::write(dir.join(STATE), b"machine state").unwrap();
        std::fs::write(dir.join(DISK), b"overlay").unwrap();
        std::fs::write(dir.join(KEY), b"key").unwrap();
        std::fs::write(dir.join(CONSOLE), b"SHAREDOS-READY").unwrap();
        record(
            key(),
            Accel::Tcg,
            "forced with --accel tcg",
            "console=ttyS0",
            "SHA256:x",
            digest::sha256_file(&dir.join(STATE)).unwrap(),
            digest::sha256_file(&dir.join(DISK)).unwrap().0,
        )
    }

    #[test]
    fn a_snapshot_names_its_cache_s_disk_relatively() {
        let spot = Spot {
            root: "/c/snapshots".into(),
            image_name: "bookworm".into(),
            image_sha256: String::new(),
            kernel_sha256: String::new(),
            initrd_sha256: String::new(),
        };
        assert_eq!(
            spot.backing(Path::new("/c/bookworm-1/disk.img")),
            Path::new("../../bookworm-1/disk.img")
        );
        assert_eq!(
            spot.backing(Path::new("/d/disk.img")),
            Path::new("/d/disk.img")
        );
        // Two levels up from a snapshot's directory (and from the one it is made in) is the
        // cache root.
        assert_eq!(
            spot.dir(&key()).parent().unwrap().parent().unwrap(),
            Path::new("/c")
        );
    }

    #[test]
    fn every_part_of_the_key_decides_it() {
        let k = key();
        assert_eq!(k.differs(&k), None);
        let other_qemu = Key {
            qemu_version: "QEMU emulator version 8.2.0".into(),
            ..key()
        };
        assert!(k.differs(&other_qemu).unwrap().contains("8.2.0"));
        let other_image = Key {
            kernel_sha256: "d".repeat(64),
            ..key()
        };
        assert!(k.differs(&other_image).unwrap().contains("another build"));
        let other_memory = Key {
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "2048".into()],
            ..key()
        };
        let d = k.differs(&other_memory).unwrap();
        assert!(d.contains("argument 2") && d.contains("2048"), "{d}");
        assert_ne!(k.sha256(), other_memory.sha256());
    }

    #[test]
    fn a_layer_s_key_is_its_base_s_with_the_gate_binary_s_sha256() {
        let base = key();
        let a = base.layer(&"1".repeat(64));
        let b = base.layer(&"2".repeat(64));
        // A base's record and key hash as they did before layers.
        let json = serde_json::to_string(&base).unwrap();
        assert!(!json.contains("gate_sha256"), "{json}");
        let old: Key = serde_json::from_str(&json).unwrap();
        assert_eq!(old, base);
        // The gate binary decides the layer: another binary is another key and directory.
        assert_ne!(a.sha256(), base.sha256());
        assert_ne!(a.sha256(), b.sha256());
        let d = a.differs(&b).unwrap();
        assert!(
            d.contains(&"1".repeat(64)) && d.contains(&"2".repeat(64)),
            "{d}"
        );
        assert!(base.differs(&a).unwrap().contains("no gate binary"));
        assert_eq!(a.base(), base);
        assert_eq!(a.differs(&a), None);
        // The layer it replaces: same base and settings, another binary; nothing else.
        assert!(replaced_layer(&a, &b));
        assert!(!replaced_layer(&a, &a));
        assert!(!replaced_layer(&base, &b));
        let other_memory = Key {
            argv: vec!["qemu-system-x86_64".into(), "-m".into(), "2048".into()],
            ..key()
        }
        .layer(&"1".repeat(64));
        assert!(!replaced_layer(&other_memory, &b));
    }

    #[test]
    fn a_warmed_layer_is_another_layer_of_the_same_binary_and_goes_with_it() {
        let base = key();
        let cold = base.layer(&"1".repeat(64));
        let warm = cold.warmed_by("sharedos-gate diagnose");
        // What a comparison's VM arm resumes is never a layer a gate run warmed, nor the reverse.
        assert_ne!(warm.sha256(), cold.sha256());
        assert!(
            cold.differs(&warm).unwrap().contains("not warmed"),
            "{:?}",
            cold.differs(&warm)
        );
        assert_ne!(warm.sha256(), cold.warmed_by("another command").sha256());
        assert!(!serde_json::to_string(&cold).unwrap().contains("warm_up"));
        // Both are layers of the same base; neither replaces the other, and a new binary
        // replaces both.
        assert_eq!(warm.base(), base);
        assert!(!replaced_layer(&warm, &cold) && !replaced_layer(&cold, &warm));
        let next = base.layer(&"2".repeat(64));
        assert!(replaced_layer(&warm, &next) && replaced_layer(&cold, &next));
        assert!(replaced_layer(
            &warm,
            &next.warmed_by("sharedos-gate diagnose")
        ));
    }

    #[test]
    fn a_layer_is_used_only_over_the_base_it_was_made_over() {
        let root = scratch("layer-base");
        let making = making_dir(&root, "t").unwrap();
        let r = made(&making);
        let base_dir = root.join("bookworm-0123456789abcdef");
        install(&making, &base_dir, &r).unwrap();
        let layer_dir = root.join("bookworm-fedcba9876543210");
        std::fs::create_dir(&layer_dir).unwrap();
        let base = BaseRef {
            dir: "bookworm-0123456789abcdef".into(),
            state_sha256: r.state_sha256.clone(),
            disk_sha256: r.disk_sha256.clone(),
        };
        assert_eq!(check_base(&layer_dir, &base), Ok(()));
        // Its base's disk written to: damaged.
        std::fs::write(base_dir.join(DISK), b"overlay, written to").unwrap();
        let e = check_base(&layer_dir, &base).unwrap_err();
        assert!(e.starts_with("damaged") && e.contains(DISK), "{e}");
        std::fs::write(base_dir.join(DISK), b"overlay").unwrap();
        // Its base made again: stale.
        let remade = BaseRef {
            state_sha256: "0".repeat(64),
            ..base.clone()
        };
        assert!(check_base(&layer_dir, &remade)
            .unwrap_err()
            .starts_with("stale"));
        // A name that is no snapshot's (a path out of the store), or a base that is gone.
        for dir in [
            "../etc",
            "bookworm-0123456789abcdef/../x",
            "x/bookworm-0123456789abcdef",
            "",
        ] {
            let b = BaseRef {
                dir: dir.into(),
                ..base.clone()
            };
            assert!(check_base(&layer_dir, &b).is_err(), "{dir}");
        }
        let gone = BaseRef {
            dir: "bookworm-aaaaaaaaaaaaaaaa".into(),
            ..base.clone()
        };
        assert!(check_base(&layer_dir, &gone).unwrap_err().contains("gone"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_snapshot_whose_files_changed_fails_its_check() {
        let root = scratch("check");
        let making = making_dir(&root, "t").unwrap();
        let r = made(&making);
        let dir = root.join("bookworm-x");
        install(&making, &dir, &r).unwrap();
        // A dead run's half-made snapshot goes when the next one is made; a live one's stays.
        let dead = root.join(".making-4294967294-x");
        std::fs::create_dir(&dead).unwrap();
        let live = making_dir(&root, "u").unwrap();
        assert!(!dead.exists() && live.exists());
        discard(&live);
        let loaded = load(&dir).unwrap().unwrap();
        assert_eq!(loaded, r);
        assert_eq!(check(&dir, &loaded, &key()), Ok(()));

        std::fs::write(dir.join(DISK), b"overlay, written to").unwrap();
        let e = check(&dir, &loaded, &key()).unwrap_err();
        assert!(e.starts_with("damaged: disk.qcow2"), "{e}");
        std::fs::write(dir.join(DISK), b"overlay").unwrap();

        // The state's hash is the feed's (state.rs); here it must be a regular file.
        std::fs::remove_file(dir.join(STATE)).unwrap();
        std::os::unix::fs::symlink(dir.join(KEY), dir.join(STATE)).unwrap();
        assert!(check(&dir, &loaded, &key())
            .unwrap_err()
            .contains("state is not a regular file"));
        std::fs::remove_file(dir.join(STATE)).unwrap();
        std::fs::write(dir.join(STATE), b"machine state").unwrap();

        std::fs::remove_file(dir.join(KEY)).unwrap();
        assert!(check(&dir, &loaded, &key()).unwrap_err().contains(KEY));

        let stale = Key {
            qemu_version: "QEMU emulator version 9".into(),
            ..key()
        };
        assert!(check(&dir, &loaded, &stale)
            .unwrap_err()
            .starts_with("stale"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_store_is_makeable_under_a_writable_directory_and_not_under_a_file() {
        let d = scratch("makeable");
        assert_eq!(why_cannot_make(&d.join("snapshots/deeper")), None);
        std::fs::write(d.join("file"), b"").unwrap();
        let why = why_cannot_make(&d.join("file")).unwrap();
        assert!(why.contains("is not a directory"), "{why}");
        let why = why_cannot_make(&d.join("file/snapshots")).unwrap();
        assert!(why.contains("file/snapshots"), "{why}");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn a_record_is_read_bounded_and_through_no_link() {
        let root = scratch("load");
        assert_eq!(load(&root.join("none")).unwrap(), None);
        let real = root.join("real");
        std::fs::create_dir_all(&real).unwrap();
        std::os::unix::fs::symlink(&real, root.join("link")).unwrap();
        assert!(load(&root.join("link")).is_err());
        assert!(load(&real).unwrap_err().to_string().contains("unfinished"));
        std::fs::write(real.join(RECORD), vec![b' '; RECORD_MAX as usize + 1]).unwrap();
        assert!(format!("{:#}", load(&real).unwrap_err()).contains("larger than"));
        std::fs::remove_file(real.join(RECORD)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", real.join(RECORD)).unwrap();
        assert!(load(&real).is_err());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
