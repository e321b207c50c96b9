//! A checkpoint carried from one guest to another (`diagnose --migrate-dump` and
//! `diagnose --migrate-restore DIR`): the sequence split in two phases of the one gate sequence.
//!
//! The dump side runs the gates up to and including the dump, then keeps the CRIU images and the
//! dump-time state in its report directory (`checkpoint/`), where they are artifacts like any
//! other: listed with their sha256, fetched and checked by the host. The restore side, in a guest
//! booted from another image, takes them from the directory the host sent (files named by a
//! manifest the host wrote from the dump side's verified artifacts), checks each against it, and
//! runs the restore, X-state, isolation and reset gates on them as a whole run would.

use crate::diagnose::Phase;
use crate::gates::{launch, Ctx, GateBuilder};
use anyhow::{bail, Context, Result};
use serde_json::json;
use sharedos_report::checkpoint::{
    parse_manifest, CarriedState, CHECKPOINT_DIR, DUMP_TIME_PNG, IMAGES_DIR, MANIFEST_FILE,
    MAX_SMALL_FILE, PNG_FILE, STATE_FILE,
};
use sharedos_report::compare::check;
use sharedos_report::digest::sha256_file;
use sharedos_report::model::tree::Observation;
use sharedos_report::report::{Gate, GateName};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Why neither guest of a migration runs the pixel review: the restores are held to the
/// dump-time pixels by the checks, and no human waits on a migration.
const NO_PIXEL_REVIEW: &str =
    "gui_pixel_review is not part of a migration: it waits for a human, and the restore side's checks hold each copy to the dump-time pixels";

/// The dump side: prerequisites, launch, live state probe, dump (which keeps the checkpoint),
/// cleanup; the rest runs in the other guest.
pub struct DumpSide;

impl Phase for DumpSide {
    fn elsewhere(&self, name: GateName) -> Option<String> {
        match name {
            GateName::Prerequisites
            | GateName::Launch
            | GateName::LiveStateProbe
            | GateName::Dump
            | GateName::Cleanup => None,
            GateName::GuiPixelReview => Some(NO_PIXEL_REVIEW.to_string()),
            _ => Some(format!(
                "{name} runs in the migration's other guest, on this dump"
            )),
        }
    }

    fn after(&self, ctx: &mut Ctx, gate: &mut Gate) {
        if gate.name != GateName::Dump || gate.status != sharedos_report::report::Status::Pass {
            return;
        }
        let kept = keep_checkpoint(ctx);
        let c = check(
            "checkpoint_kept",
            kept.is_ok(),
            json!(kept.as_ref().map_err(|e| format!("{e:#}"))),
            "the CRIU images and the dump-time state copied into the report's checkpoint/ for the other guest",
        );
        if let Err(e) = &kept {
            gate.status = sharedos_report::report::Status::Fail;
            gate.reason = format!("keeping the checkpoint for the other guest failed: {e:#}");
        }
        gate.checks.push(c);
    }
}

/// Copies the dump directory's files and the dump-time state into the report's checkpoint/.
fn keep_checkpoint(ctx: &Ctx) -> Result<usize> {
    let snap = ctx
        .snapshot
        .as_ref()
        .context("the dump gate kept no dump-time state")?;
    let dir = ctx.cfg.report_dir().join(CHECKPOINT_DIR);
    let images = dir.join(IMAGES_DIR);
    std::fs::create_dir_all(&images).with_context(|| format!("mkdir {}", images.display()))?;
    let mut n = 0;
    for e in std::fs::read_dir(ctx.cfg.dump_dir()).context("listing the dump directory")? {
        let e = e?;
        let meta = std::fs::symlink_metadata(e.path())?;
        if !meta.is_file() {
            bail!(
                "{} in the dump directory is not a regular file",
                e.path().display()
            );
        }
        std::fs::copy(e.path(), images.join(e.file_name()))
            .with_context(|| format!("copying {}", e.path().display()))?;
        n += 1;
    }
    let text = serde_json::to_string_pretty(&CarriedState::of(snap))?;
    std::fs::write(dir.join(STATE_FILE), text + "\n").context("writing the dump-time state")?;
    Ok(n)
}

/// The restore side: prerequisites, then the dump gate takes the checkpoint the host sent from
/// `from` instead of dumping, then the restore gates and cleanup as in a whole run. The launch
/// and the live state probe ran in the other guest; the pixel review looks at a live tree this
/// guest never had.
pub struct RestoreSide {
    pub from: PathBuf,
    /// An upper bound, measured by the host, of the time since the dump-time app query.
    pub since_dump: Duration,
}

impl Phase for RestoreSide {
    fn elsewhere(&self, name: GateName) -> Option<String> {
        match name {
            GateName::Launch | GateName::LiveStateProbe => Some(format!(
                "{name} ran in the migration's other guest, which made the dump"
            )),
            GateName::GuiPixelReview => Some(NO_PIXEL_REVIEW.to_string()),
            _ => None,
        }
    }

    fn instead(&self, name: GateName, ctx: &mut Ctx) -> Option<Gate> {
        (name == GateName::Dump).then(|| self.take_checkpoint(ctx))
    }
}

impl RestoreSide {
    /// The dump gate of the restore side: the checkpoint arrived whole (every file the manifest
    /// names, with its sha256, and nothing else), its dump-time state reads, and the tree's
    /// root is ready for the restores.
    fn take_checkpoint(&self, ctx: &mut Ctx) -> Gate {
        let mut g = GateBuilder::new(GateName::Dump);
        if ctx.criu.is_none() {
            g.problem("no usable criu: see prerequisites");
            return g.finish("");
        }
        g.data("from", json!(self.from.display().to_string()));
        g.data("since_dump_ms", json!(self.since_dump.as_millis() as u64));
        let arrived = verify_manifest(&self.from);
        let whole = g.check(check(
            "checkpoint_matches_manifest",
            arrived.is_ok(),
            json!(arrived.as_ref().map_err(|e| format!("{e:#}"))),
            "every file the host sent has the sha256 and size the dump side's report gave it, and no other file came",
        ));
        if !whole {
            return g.finish("");
        }
        match self.install(ctx) {
            Ok(state) => {
                g.data("dump_time_state", crate::gates::state::obs_value(&state));
                ctx.snapshot = Some(state);
                g.check(check(
                    "dump_time_state_read",
                    true,
                    json!(STATE_FILE),
                    "the dump side's dump-time state",
                ));
            }
            Err(e) => g.problem(format!("taking the checkpoint: {e:#}")),
        }
        if let Err(e) = launch::make_root_bind(ctx) {
            g.problem(format!("cannot prepare the tree's root: {e:#}"));
        }
        g.finish("the dump side's checkpoint arrived whole and its dump-time state reads")
    }

    /// Puts the images where the restores look for them, the dump-time frame where the checks
    /// name it, and reads the dump-time state.
    fn install(&self, ctx: &Ctx) -> Result<Observation> {
        let dump = ctx.cfg.dump_dir();
        std::fs::create_dir_all(&dump).with_context(|| format!("mkdir {}", dump.display()))?;
        for e in std::fs::read_dir(self.from.join(IMAGES_DIR)).context("listing the images")? {
            let e = e?;
            std::fs::copy(e.path(), dump.join(e.file_name()))
                .with_context(|| format!("copying {}", e.path().display()))?;
        }
        let png = ctx.cfg.report_dir().join(DUMP_TIME_PNG);
        if let Some(p) = png.parent() {
            std::fs::create_dir_all(p)?;
        }
        std::fs::copy(self.from.join(PNG_FILE), &png).context("placing the dump-time frame")?;
        let text = read_small(&self.from.join(STATE_FILE))?;
        let carried: CarriedState =
            serde_json::from_str(&text).context("the dump-time state is not one")?;
        if carried.png != DUMP_TIME_PNG {
            bail!(
                "the dump-time state names its frame {:?}, not {DUMP_TIME_PNG}",
                carried.png
            );
        }
        carried.observation(self.since_dump).with_context(|| {
            format!(
                "this machine has not run for the {} ms since the dump",
                self.since_dump.as_millis()
            )
        })
    }
}

fn read_small(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut s = String::new();
    f.take(MAX_SMALL_FILE + 1)
        .read_to_string(&mut s)
        .with_context(|| format!("reading {}", path.display()))?;
    if s.len() as u64 > MAX_SMALL_FILE {
        bail!("{} is larger than {MAX_SMALL_FILE} bytes", path.display());
    }
    Ok(s)
}

/// Every file under `dir` is a regular file the manifest names, with its size and sha256, and
/// every file it names is there.
fn verify_manifest(dir: &Path) -> Result<usize> {
    let entries = parse_manifest(&read_small(&dir.join(MANIFEST_FILE))?)?;
    let mut seen = Vec::new();
    for top in std::fs::read_dir(dir).context("listing the checkpoint")? {
        let top = top?;
        let name = top.file_name().to_string_lossy().into_owned();
        let meta = std::fs::symlink_metadata(top.path())?;
        if name == IMAGES_DIR && meta.is_dir() {
            for e in std::fs::read_dir(top.path())? {
                let e = e?;
                seen.push((
                    format!("images/{}", e.file_name().to_string_lossy()),
                    e.path(),
                ));
            }
        } else if name != MANIFEST_FILE {
            seen.push((name, top.path()));
        }
    }
    for (name, path) in &seen {
        let Some(want) = entries.iter().find(|e| &e.name == name) else {
            bail!("{name} came with the checkpoint but the manifest does not name it");
        };
        if !std::fs::symlink_metadata(path)?.is_file() {
            bail!("{name} is not a regular file");
        }
        let (sha, n) = sha256_file(path)?;
        if sha != want.sha256 || n != want.bytes {
            bail!(
                "{name} has sha256 {sha} ({n} bytes), the dump side's report gives {} ({} bytes)",
                want.sha256,
                want.bytes
            );
        }
    }
    if let Some(missing) = entries
        .iter()
        .find(|e| !seen.iter().any(|(n, _)| n == &e.name))
    {
        bail!("{} is in the manifest but did not arrive", missing.name);
    }
    Ok(entries.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tampered_or_extra_file_is_refused() {
        let dir = std::env::temp_dir().join(format!("migrate-manifest-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("images")).unwrap();
        std::fs::write(dir.join("images/core.img"), b"core").unwrap();
        std::fs::write(dir.join("state.json"), b"{}").unwrap();
        let line = |name: &str| {
            let (h, n) = sha256_file(&dir.join(name)).unwrap();
            format!("{h}  {n}  {name}\n")
        };
        let manifest = line("images/core.img") + &line("state.json");
        std::fs::write(dir.join(MANIFEST_FILE), &manifest).unwrap();
        assert_eq!(verify_manifest(&dir).unwrap(), 2);
        std::fs::write(dir.join("images/core.img"), b"corE").unwrap();
        let e = format!("{:#}", verify_manifest(&dir).unwrap_err());
        assert!(e.contains("images/core.img has sha256"), "{e}");
        std::fs::write(dir.join("images/core.img"), b"core").unwrap();
        std::fs::write(dir.join("images/extra.img"), b"x").unwrap();
        let e = format!("{:#}", verify_manifest(&dir).unwrap_err());
        assert!(e.contains("manifest does not name it"), "{e}");
        std::fs::remove_file(dir.join("images/extra.img")).unwrap();
        std::fs::remove_file(dir.join("state.json")).unwrap();
        let e = format!("{:#}", verify_manifest(&dir).unwrap_err());
        assert!(e.contains("did not arrive"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_restore_side_leaves_launch_and_probe_to_the_dump_side() {
        let r = RestoreSide {
            from: PathBuf::from("/c"),
            since_dump: Duration::from_secs(1),
        };
        let d = DumpSide;
        for n in GateName::ALL {
            let here = |p: &dyn Phase| p.elsewhere(n).is_none();
            // Prerequisites, cleanup and the dump (taken in, on the restore side) run in both
            // guests, every other gate in exactly one, but the pixel review, which needs the
            // live tree and a human.
            match n {
                GateName::Prerequisites | GateName::Dump | GateName::Cleanup => {
                    assert!(here(&r) && here(&d))
                }
                GateName::GuiPixelReview => assert!(!here(&r) && !here(&d)),
                _ => assert!(here(&r) != here(&d), "{n}"),
            }
        }
    }
}
