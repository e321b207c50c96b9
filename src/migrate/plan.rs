//! vm-migrate's pure part: the pair of images checked before anything boots, each guest's
//! diagnose arguments, and which files of the dump side's archive make the checkpoint the
//! restore side is sent, under which names.

use crate::image::{self, BuildOptions};
use anyhow::{bail, Result};
use sharedos_report::checkpoint::{
    manifest_line, name_allowed, CHECKPOINT_DIR, DUMP_TIME_PNG, IMAGES_DIR, MANIFEST_FILE,
    MAX_FILES, PNG_FILE, STATE_FILE,
};
use sharedos_report::report::{Artifact, GUEST_DIR};
use std::time::Duration;

/// Where the restore side's guest is sent the checkpoint.
pub const GUEST_CHECKPOINT: &str = "/root/checkpoint";

/// Both images exist (else the error names the ones that do). Returns a note when they are the
/// same image: allowed, but no test across kernels.
pub fn check_pair(base: &BuildOptions, from: &str, to: &str) -> Result<Option<String>> {
    for (flag, name) in [("--from", from), ("--to", to)] {
        let opts = BuildOptions {
            image: name.to_string(),
            ..base.clone()
        };
        image::require_image(&opts).map_err(|e| e.context(format!("{flag} {name}")))?;
    }
    Ok((from == to).then(|| {
        format!(
            "--from and --to are both {from}: the checkpoint moves between two guests of one \
             kernel, so this is not a test across kernels"
        )
    }))
}

/// The dump side's diagnose arguments.
pub fn dump_args(marker: &str) -> Vec<String> {
    vec!["--marker".into(), marker.into(), "--migrate-dump".into()]
}

/// The restore side's: the same marker (the restored tree's sockets and processes carry it),
/// the checkpoint's place, and the host's bound on the time since the dump-time query.
pub fn restore_args(marker: &str, since_dump: Duration) -> Vec<String> {
    vec![
        "--marker".into(),
        marker.into(),
        "--migrate-restore".into(),
        GUEST_CHECKPOINT.into(),
        "--since-dump-ms".into(),
        since_dump.as_millis().to_string(),
    ]
}

/// One file of the checkpoint: where it is in the dump side's archive, and its name in the
/// directory the restore side is sent, with the sha256 and size the archive's artifact list
/// gives it (which the judgement re-hashed).
#[derive(Clone, Debug, PartialEq)]
pub struct Carried {
    pub archived: String,
    pub name: String,
    pub sha256: String,
    pub bytes: u64,
}

/// The checkpoint's files among the dump side's artifacts: its CRIU images and dump-time state
/// (under `guest/checkpoint/`) and the dump-time frame. Fails when one is missing or a name is
/// not one the restore side takes.
pub fn checkpoint_files(artifacts: &[Artifact]) -> Result<Vec<Carried>> {
    let under = format!("{GUEST_DIR}/{CHECKPOINT_DIR}/");
    let png = format!("{GUEST_DIR}/{DUMP_TIME_PNG}");
    let mut out = Vec::new();
    for a in artifacts {
        let name = if a.path == png {
            PNG_FILE.to_string()
        } else if let Some(rel) = a.path.strip_prefix(&under) {
            rel.to_string()
        } else {
            continue;
        };
        if !name_allowed(&name) {
            bail!(
                "the dump side's checkpoint holds {:?}, which is no CRIU image or state file",
                a.path
            );
        }
        out.push(Carried {
            archived: a.path.clone(),
            name,
            sha256: a.sha256.clone(),
            bytes: a.bytes,
        });
    }
    if out.len() > MAX_FILES {
        bail!("the dump side's checkpoint has more than {MAX_FILES} files");
    }
    for want in [STATE_FILE, PNG_FILE] {
        if !out.iter().any(|c| c.name == want) {
            bail!("the dump side's archive has no {want} for the checkpoint");
        }
    }
    if !out
        .iter()
        .any(|c| c.name.starts_with(&format!("{IMAGES_DIR}/")))
    {
        bail!("the dump side's archive has no CRIU image under {CHECKPOINT_DIR}/{IMAGES_DIR}/");
    }
    Ok(out)
}

/// The manifest the restore side checks every file it was sent against.
pub fn manifest(files: &[Carried]) -> String {
    files
        .iter()
        .map(|c| manifest_line(&c.sha256, c.bytes, &c.name))
        .collect()
}

/// Where each file goes in the guest; the manifest last.
pub fn guest_path(name: &str) -> String {
    format!("{GUEST_CHECKPOINT}/{name}")
}

pub fn manifest_guest_path() -> String {
    guest_path(MANIFEST_FILE)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(path: &str) -> Artifact {
        Artifact {
            path: path.into(),
            sha256: "a".repeat(64),
            bytes: 7,
            kind: String::new(),
        }
    }

    #[test]
    fn the_checkpoint_is_the_images_the_state_and_the_frame() {
        let arts = [
            art("guest/checkpoint/images/pages-1.img"),
            art("guest/checkpoint/state.json"),
            art("guest/png/dump-time.png"),
            art("guest/png/live-1.png"),
            art("guest/criu/dump.log"),
            art("serial.log"),
        ];
        let files = checkpoint_files(&arts).unwrap();
        let names: Vec<&str> = files.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["images/pages-1.img", "state.json", "dump-time.png"]);
        let m = manifest(&files);
        assert!(m.starts_with(&format!("{}  7  images/pages-1.img\n", "a".repeat(64))));
        assert_eq!(
            sharedos_report::checkpoint::parse_manifest(&m)
                .unwrap()
                .len(),
            3
        );
    }

    #[test]
    fn a_checkpoint_missing_a_part_or_with_a_strange_name_is_refused() {
        let e = checkpoint_files(&[art("guest/checkpoint/state.json")]).unwrap_err();
        assert!(e.to_string().contains("no dump-time.png"), "{e}");
        let e = checkpoint_files(&[
            art("guest/checkpoint/state.json"),
            art("guest/png/dump-time.png"),
        ])
        .unwrap_err();
        assert!(e.to_string().contains("no CRIU image"), "{e}");
        let e = checkpoint_files(&[art("guest/checkpoint/images/a/../../x")]).unwrap_err();
        assert!(e.to_string().contains("no CRIU image or state file"), "{e}");
    }

    #[test]
    fn each_side_gets_the_one_marker() {
        let d = dump_args("spike-abc123");
        let r = restore_args("spike-abc123", Duration::from_millis(1500));
        assert_eq!(d.join(" "), "--marker spike-abc123 --migrate-dump");
        assert_eq!(
            r.join(" "),
            "--marker spike-abc123 --migrate-restore /root/checkpoint --since-dump-ms 1500"
        );
    }

    #[test]
    fn unknown_images_are_named_and_the_same_image_twice_is_said() {
        let dir = std::env::temp_dir().join(format!("migrate-pair-{}", std::process::id()));
        for i in ["one", "two"] {
            std::fs::create_dir_all(dir.join(i)).unwrap();
            std::fs::write(dir.join(i).join("image.conf"), "").unwrap();
        }
        let mut base = BuildOptions::new("one");
        base.images_dir = Some(dir.clone());
        assert_eq!(check_pair(&base, "one", "two").unwrap(), None);
        let note = check_pair(&base, "one", "one").unwrap().unwrap();
        assert!(note.contains("not a test across kernels"), "{note}");
        let e = format!("{:#}", check_pair(&base, "one", "three").unwrap_err());
        assert!(e.contains("--to three") && e.contains("one, two"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
