//! A checkpoint carried from one guest to another (vm-migrate): where the dump side keeps it,
//! the dump-time state as it travels, and the manifest the host writes for the restore side
//! from the dump side's verified artifacts. Both sides parse names by the rules here.

use crate::model::app::{AppState, PageState};
use crate::model::screen::Window;
use crate::model::tree::Observation;
use anyhow::{bail, Result};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Where the dump side keeps the checkpoint, under its report directory.
pub const CHECKPOINT_DIR: &str = "checkpoint";
/// The CRIU image files, under [`CHECKPOINT_DIR`] (and under the directory the host sends).
pub const IMAGES_DIR: &str = "images";
/// The dump-time state, under [`CHECKPOINT_DIR`] (and in the directory the host sends).
pub const STATE_FILE: &str = "state.json";
/// In the directory the host sends: the dump-time frame, as the dump side's `png/dump-time.png`.
pub const PNG_FILE: &str = "dump-time.png";
/// In the directory the host sends: `<sha256>  <bytes>  <name>` for every other file in it.
pub const MANIFEST_FILE: &str = "MANIFEST";
/// The dump-time frame's place in a report directory, as `Ctx::observe` names it.
pub const DUMP_TIME_PNG: &str = "png/dump-time.png";

/// The dump-time observation as it travels: what `Ctx::observe` saw, but the instant of the app
/// query, which means nothing in another machine (the restore side is told how long ago it was).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CarriedState {
    pub app: AppState,
    pub windows: Vec<Window>,
    pub frame_sha256: String,
    pub mark_drawn: bool,
    pub png: String,
    #[serde(default)]
    pub editor_text: Option<String>,
    #[serde(default)]
    pub page: Option<PageState>,
    #[serde(default)]
    pub workspace: Option<u32>,
}

impl CarriedState {
    pub fn of(o: &Observation) -> CarriedState {
        CarriedState {
            app: o.app.clone(),
            windows: o.windows.clone(),
            frame_sha256: o.frame_sha256.clone(),
            mark_drawn: o.mark_drawn,
            png: o.png.clone(),
            editor_text: o.editor_text.clone(),
            page: o.page.clone(),
            workspace: o.workspace,
        }
    }

    /// The observation again, its app query `since` ago (an upper bound the host measured), or
    /// None when this machine's monotonic clock has not run that long.
    pub fn observation(self, since: Duration) -> Option<Observation> {
        Some(Observation {
            app: self.app,
            app_asked_at: Instant::now().checked_sub(since)?,
            windows: self.windows,
            frame_sha256: self.frame_sha256,
            mark_drawn: self.mark_drawn,
            png: self.png,
            editor_text: self.editor_text,
            page: self.page,
            workspace: self.workspace,
        })
    }
}

/// The largest state file or manifest read: a few KiB in a real run.
pub const MAX_SMALL_FILE: u64 = 1 << 20;
/// The most files the manifest may name: a CRIU dump of the tree is a few dozen.
pub const MAX_FILES: usize = 4096;

/// One line of the manifest: sha256, size and a name relative to the directory.
#[derive(Debug, PartialEq)]
pub struct Entry {
    pub sha256: String,
    pub bytes: u64,
    pub name: String,
}

/// The manifest's lines; an error names the first bad one.
pub fn parse_manifest(text: &str) -> Result<Vec<Entry>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let mut w = line.split_whitespace();
        let (Some(sha256), Some(bytes), Some(name), None) =
            (w.next(), w.next(), w.next(), w.next())
        else {
            bail!("manifest line {} is not `SHA256 BYTES NAME`", i + 1);
        };
        let hex = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
        let bytes: Option<u64> = bytes.parse().ok();
        let name_ok = name_allowed(name);
        match (hex, bytes, name_ok) {
            (true, Some(bytes), true) => out.push(Entry {
                sha256: sha256.to_ascii_lowercase(),
                bytes,
                name: name.to_string(),
            }),
            _ => bail!("manifest line {} is not `SHA256 BYTES NAME`", i + 1),
        }
        if out.len() > MAX_FILES {
            bail!("the manifest names more than {MAX_FILES} files");
        }
    }
    Ok(out)
}

/// `state.json`, `dump-time.png`, or `images/NAME` with a plain file name.
pub fn name_allowed(name: &str) -> bool {
    if name == STATE_FILE || name == PNG_FILE {
        return true;
    }
    name.strip_prefix("images/").is_some_and(|f| {
        !f.is_empty()
            && f != "."
            && f != ".."
            && f.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    })
}

/// The manifest line of one file.
pub fn manifest_line(sha256: &str, bytes: u64, name: &str) -> String {
    format!("{sha256}  {bytes}  {name}\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_lines_and_names() {
        let sha = "a".repeat(64);
        let ok = format!("{sha}  12  images/pages-1.img\n{sha} 3 state.json\n");
        let e = parse_manifest(&ok).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].bytes, 12);
        for bad in [
            format!("{sha}  12  images/../x"),
            format!("{sha}  12  /etc/passwd"),
            format!("{sha}  12  images/a/b"),
            format!("{sha}  -1  state.json"),
            format!("{}  1  state.json", "z".repeat(64)),
            format!("{sha}  1"),
            format!("{sha}  1  state.json extra"),
        ] {
            assert!(parse_manifest(&bad).is_err(), "{bad}");
        }
    }
}
