//! Snapshot making: the image's snapshot (a cold boot saved once it is ready), a layer over it
//! that holds the spec's file, the save over QMP and QEMU's quit, and the sweep of the snapshots
//! a new one replaced.

use super::boot::{boot, new_key};
use super::resume::{key_argv, resume};
use super::{
    bounds, kernel_append, key_path, sha256_command, sha256_matches, short_id, GuestMedia,
    Instance, Layer, Opened, SessionSpec,
};
use crate::cmd;
use crate::image::contract;
use crate::vm::event::{Event, Sink};
use crate::vm::qemu::{self, Accel};
use crate::vm::snapshot::{self, Record};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Makes the layer of key `key` over the base snapshot `base`: the base resumed with the
/// layer's overlay in a fresh directory of the store (backed by the base's disk through a
/// relative name), the file put in and its sha256 checked in the guest, the layer's warm-up
/// run there when it has one, then the guest saved over QMP and QEMU quit, as a snapshot is
/// made; installed under `key`, held, and the layers
/// of the same base with another file removed unless a running rig holds them.
#[allow(clippy::too_many_arguments)]
pub(super) fn make_layer(
    spec: &SessionSpec,
    media: &GuestMedia,
    spot: &snapshot::Spot,
    run_dir: &Path,
    base: (&Path, &Record),
    key: &snapshot::Key,
    layer: &Layer,
    sink: Sink,
) -> Result<(PathBuf, Record, Option<snapshot::Hold>)> {
    let (base_dir, base_r) = base;
    let making = snapshot::making_dir(&spot.root, &short_id())?;
    let made = (|| {
        // The layer's console goes on from its base's, and stays with it.
        let lspec = SessionSpec {
            logs: making.clone(),
            keep: false,
            layer: None,
            ram: None,
            ..spec.clone()
        };
        // Only the resume of the layer that follows is this run's boot.
        let mut quiet = |e: &Event| {
            if !matches!(e, Event::Stage { .. } | Event::LoggedIn { .. }) {
                sink(e)
            }
        };
        let o = resume(
            &lspec,
            media,
            run_dir,
            base_dir,
            base_r,
            base_r.accel_reason.clone(),
            Some(&making),
            &mut quiet,
        )
        .context("resuming the base snapshot")?;
        let Opened { mut up, guest, .. } = o;
        let b = bounds(up.started.accel);
        guest.set_timeout(Duration::from_secs(60 * 4));
        guest
            .upload(&layer.file, &layer.guest_path, layer.mode)
            .with_context(|| format!("copying {} into the guest", layer.file.display()))?;
        guest.set_timeout(b.ssh);
        let out = guest.exec(&sha256_command(&layer.guest_path))?;
        if out.status != 0 || !sha256_matches(&out.output, &layer.sha256) {
            bail!(
                "{} arrived corrupted: sha256 on the host {}, in the guest {:?}",
                layer.guest_path,
                layer.sha256,
                crate::escape::line(&sharedos_report::text::tail(&out.output, 3, 300))
            );
        }
        if let Some(warm) = &layer.warm_up {
            // Its bound: a whole gate run under TCG takes about 25 s on a quiet 2-core host.
            guest.set_timeout(b.ssh * 4);
            guest
                .exec(warm)
                .context("warming the layer's guest (the command did not end in time)")?;
            guest.set_timeout(b.ssh);
        }
        // The saved guest accepts the key this resume put in.
        std::fs::copy(key_path(run_dir), making.join(snapshot::KEY))
            .context("keeping the key the saved guest accepts")?;
        drop(guest);
        let state = save_and_quit(
            &mut up.started.qemu,
            up.started.accel,
            run_dir,
            &making,
            spec.memory_mib,
            false,
        )?;
        let (disk_sha256, _) = sharedos_report::digest::sha256_file(&making.join(snapshot::DISK))?;
        let mut r = snapshot::record(
            key.clone(),
            up.started.accel,
            &base_r.accel_reason,
            &base_r.append,
            &base_r.host_key,
            state,
            disk_sha256,
        );
        r.base = Some(snapshot::BaseRef {
            dir: base_dir
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            state_sha256: base_r.state_sha256.clone(),
            disk_sha256: base_r.disk_sha256.clone(),
        });
        let dir = spot.dir(key);
        snapshot::install(&making, &dir, &r)?;
        // Another rig that made the same layer meanwhile won the rename: its record is the one
        // whose files are there.
        let r = match snapshot::load(&dir) {
            Ok(Some(there)) if there.key == r.key => there,
            _ => r,
        };
        Ok::<_, anyhow::Error>((dir, r))
    })();
    let (dir, r) = match made {
        Ok(m) => m,
        Err(e) => {
            snapshot::discard(&making);
            return Err(e.context(format!(
                "making the gate binary's layer over {}\nfix: nothing to do for this run (it goes on from the plain snapshot); if it recurs, `cargo xtask cache prune` or remove {}",
                base_dir.display(),
                spot.root.display()
            )));
        }
    };
    sink(&Event::SnapshotMade {
        dir: dir.clone(),
        state_bytes: r.state_bytes,
    });
    let held = snapshot::hold(&dir).ok().flatten();
    for swept in snapshot::remove_replaced_layers(spot, &dir, key) {
        sink(&swept_event(swept));
    }
    Ok((dir, r, held))
}

/// What a removal of a snapshot another one replaced did, as an event.
fn swept_event(swept: snapshot::Swept) -> Event {
    match swept.outcome {
        Ok(snapshot::Removal::Removed(bytes)) => Event::SnapshotRemoved {
            dir: swept.dir,
            why: swept.why,
            bytes,
        },
        Ok(snapshot::Removal::InUse) => Event::SnapshotLeft {
            dir: swept.dir,
            why: swept.why,
            left: "a running rig holds it".into(),
        },
        Err(e) => Event::SnapshotLeft {
            dir: swept.dir,
            why: swept.why,
            left: format!("removing it failed: {e}"),
        },
    }
}

/// Makes the snapshot: a cold boot to its ready line whose key, overlay and console go into a
/// fresh directory of the store, then QEMU migrates the guest out and quits. A boot that fails
/// is this run's failure (the outer error); a save that fails leaves the run to boot cold (the
/// inner one).
pub(super) fn make(
    spec: &SessionSpec,
    media: &GuestMedia,
    spot: &snapshot::Spot,
    version: &str,
    sandbox: bool,
    run_dir: &Path,
    sink: Sink,
) -> Result<Result<(PathBuf, Record, Option<snapshot::Hold>)>> {
    let making = match snapshot::making_dir(&spot.root, &short_id()) {
        Ok(d) => d,
        Err(e) => return Ok(Err(e)),
    };
    let made = (|| {
        let public = new_key(&making)?;
        let disk = making.join(snapshot::DISK);
        cmd::capture(&qemu::overlay_cmd(&spot.backing(&media.disk), &disk))
            .context("making the snapshot's overlay (qemu-img comes with qemu-utils)")?;
        let append = kernel_append(&contract::authorized_key_param(&public)?);
        let inst = Instance {
            overlay: disk.clone(),
            ..Instance::cold(run_dir, append.clone())
        };
        // The saved boot's console stays with the snapshot.
        let boot_spec = SessionSpec {
            logs: making.clone(),
            keep: false,
            ram: None,
            ..spec.clone()
        };
        let up = boot(&boot_spec, media, inst, sink)?;
        Ok::<_, anyhow::Error>((up, append, disk))
    })();
    let (mut up, append, disk) = match made {
        Ok(m) => m,
        Err(e) => {
            // A boot that failed is this run's failure: its console and QEMU's words go where
            // the run keeps its own, for the report, before the half-made snapshot goes.
            for f in [snapshot::CONSOLE, "qemu.log"] {
                let _ = std::fs::copy(making.join(f), spec.logs.join(f));
            }
            snapshot::discard(&making);
            return Err(e);
        }
    };
    let saved = (|| {
        let state = save_and_quit(
            &mut up.started.qemu,
            up.started.accel,
            run_dir,
            &making,
            spec.memory_mib,
            false,
        )?;
        let (disk_sha256, _) = sharedos_report::digest::sha256_file(&disk)?;
        let key = spot.key(version, key_argv(spec, up.started.accel, sandbox));
        let dir = spot.dir(&key);
        let r = snapshot::record(
            key,
            up.started.accel,
            &up.started.reason,
            &append,
            &up.host_key,
            state,
            disk_sha256,
        );
        snapshot::install(&making, &dir, &r)?;
        sink(&Event::SnapshotMade {
            dir: dir.clone(),
            state_bytes: r.state_bytes,
        });
        let held = snapshot::hold(&dir).ok().flatten();
        // The image's snapshots that no run can use any more go now, each unless a running
        // rig holds it: a changed key must not leave the old one behind for good.
        for swept in snapshot::remove_stale(spot, version, &dir) {
            sink(&swept_event(swept));
        }
        Ok((dir, r, held))
    })();
    up.started.qemu.stop();
    if saved.is_err() {
        snapshot::discard(&making);
    }
    Ok(saved)
}

/// Saves the running guest of the QEMU started in `run_dir` into `into/state` over QMP (see
/// `snapshot::save`), then has that QEMU quit, and waits for it. The state is bounded by the
/// guest's memory and room for its devices. Returns the state's sha256 and size.
pub(super) fn save_and_quit(
    qemu: &mut crate::vm::process::QemuProcess,
    accel: Accel,
    run_dir: &Path,
    into: &Path,
    memory_mib: u64,
    ignore_shared: bool,
) -> Result<(String, u64)> {
    let b = bounds(accel);
    let mut qmp = crate::vm::qmp::Qmp::connect(&run_dir.join("qmp.sock"), b.ssh)?;
    if ignore_shared {
        // A template's RAM is its file already: the state holds the devices only.
        qmp.migration_capability_on(crate::vm::qemu::IGNORE_SHARED)
            .context("asking QEMU to leave the template's RAM file out of its saved state")?;
    }
    let max = memory_mib.saturating_add(256).saturating_mul(1 << 20);
    let state = snapshot::save(&mut qmp, &run_dir.join("migrate.sock"), into, max, b.boot)?;
    let _ = qmp.execute("quit", None);
    // The bound runs from the quit: a guest saved after minutes of work is long past any
    // bound counted from QEMU's spawn, and would fail here whenever QEMU took a moment to exit.
    if qemu.wait_exit_from_now(b.ssh)?.is_none() {
        bail!(
            "QEMU did not quit within {:?} after saving the guest",
            b.ssh
        );
    }
    Ok(state)
}
