//! Boot: the run's session, as its options describe it, opened with the run's events recorded.
//! The session ends QEMU on every path: a failure drops it, and a signal ends it through the
//! watchdog even under `--keep-vm`; only a run that reached its end keeps it.

use super::{Boot, Observed, GUEST_GATE};
use crate::image::ImageEntry;
use crate::vm::accel_cache::Spot;
use crate::vm::qemu::Network;
use crate::vm::session::short_id;
use crate::vm::session::Layer;
use crate::vm::snapshot;
use crate::vm::{GuestMedia, Session, SessionSpec, Start};
use anyhow::{Context, Result};
use sharedos_report::digest;
use std::path::Path;
use std::time::Instant;

/// The run's session: the restricted network, the run's accelerator, memory and CPUs, its
/// console and QEMU log into `logs`.
pub fn spec(boot: &Boot, name: &str, logs: &Path) -> SessionSpec {
    SessionSpec {
        name: format!("sharedos-rig-{name}"),
        accel: boot.accel,
        accel_cache: None,
        memory_mib: boot.memory_mib,
        cpus: boot.cpus,
        network: Network::Restricted,
        logs: logs.to_path_buf(),
        keep: boot.keep_vm,
        start: if boot.cold {
            Start::Cold
        } else {
            Start::Resume
        },
        snapshot: None,
        layer: None,
        ram: None,
    }
}

/// Boots the image and logs in; its logs go to the report directory. `boot_to_ssh` is timed by
/// the session, or here when it fails. A resumed guest resumes the layer that holds
/// `gate_binary` (none when it is empty), warmed by a gate run ([`warm_up_command`]).
pub fn open(
    boot: &Boot,
    gate_binary: &Path,
    entry: &ImageEntry,
    obs: &mut Observed,
) -> Result<Session> {
    open_as(boot, gate_binary, entry, obs, None, true)
}

/// [`open`] for a guest that `vm-compare`'s VM arms save and resume copies of, its RAM in `ram`
/// (a template's file) when given. Its layer is not warmed: a copy then holds what the guest of
/// a deployment would, not the caches of a gate run it never made.
pub fn open_to_fork(
    boot: &Boot,
    gate_binary: &Path,
    entry: &ImageEntry,
    obs: &mut Observed,
    ram: Option<crate::vm::qemu::RamFile>,
) -> Result<Session> {
    open_as(boot, gate_binary, entry, obs, ram, false)
}

fn open_as(
    boot: &Boot,
    gate_binary: &Path,
    entry: &ImageEntry,
    obs: &mut Observed,
    ram: Option<crate::vm::qemu::RamFile>,
    warm: bool,
) -> Result<Session> {
    let t = Instant::now();
    let spec = SessionSpec {
        accel_cache: Spot::of_image(entry),
        snapshot: snapshot::Spot::of_image(entry),
        layer: gate_layer(boot, gate_binary, warm)?,
        ram,
        ..spec(boot, &short_id(), &obs.report_dir)
    };
    let session = Session::open(&spec, &GuestMedia::of(entry), &mut obs.vm_sink());
    if session.is_err() {
        obs.phase("boot_to_ssh", t);
    }
    session
}

/// The layer a resumed run with a gate binary resumes: the one over the image's snapshot that
/// holds this binary (by its sha256) at [`GUEST_GATE`], warmed when `warm`. None when booting
/// cold or without one.
pub fn gate_layer(boot: &Boot, gate_binary: &Path, warm: bool) -> Result<Option<Layer>> {
    if boot.cold || gate_binary.as_os_str().is_empty() {
        return Ok(None);
    }
    let (sha256, _) = digest::sha256_file(gate_binary).with_context(|| {
        format!(
            "hashing the gate binary {}\nfix: build it again (`cargo xtask vm-run` builds it) or give a readable one with --gate-binary",
            gate_binary.display()
        )
    })?;
    Ok(Some(Layer {
        file: gate_binary.to_path_buf(),
        sha256,
        guest_path: GUEST_GATE.into(),
        mode: 0o755,
        warm_up: warm.then(warm_up_command),
    }))
}

/// What the layer's guest runs before it is saved: the gates once, on a tmpfs, their report
/// thrown away. A resumed guest otherwise reads criu, Xvfb, the xterm, their libraries, fonts
/// and keymaps from its disk, and loads the kernel modules criu asks for, inside the gates it
/// times: under TCG that cost a warm run about 5 s of its 20. Only caches are left by it: its
/// cleanup gate ends every tree it started, and its files are removed.
pub fn warm_up_command() -> String {
    let work = "/tmp/sharedos-warm-up";
    format!(
        "{GUEST_GATE} diagnose --work {work} --out {work}/report/report.json --step-timeout 180 >/dev/null 2>&1; rm -rf {work}"
    )
}

/// Why this run's guest could not be resumed from a snapshot, told before anything boots, or
/// None: its store can make one, or holds the one for these settings already. Only a store this
/// user cannot write is looked into (the image's entry is then verified, which hashes its disk).
pub fn why_no_resume(boot: &Boot) -> Result<Option<String>> {
    let root = crate::image::root_of(&boot.image)?.join(snapshot::DIR);
    let Some(why) = snapshot::why_cannot_make(&root) else {
        return Ok(None);
    };
    let Some(entry) = crate::image::cached_entry(&boot.image)? else {
        return Ok(Some(format!(
            "the image is not built yet, and its snapshot cannot be made: {why}"
        )));
    };
    let spec = SessionSpec {
        accel_cache: Spot::of_image(&entry),
        snapshot: snapshot::Spot::of_image(&entry),
        ..spec(boot, "preflight", Path::new("."))
    };
    // The entry's store is `root` above, so `why` is still its reason.
    Ok(if spec.snapshot.is_none() {
        Some("this image has no snapshot store".into())
    } else if crate::vm::session::snapshot_found(&spec) {
        None
    } else {
        Some(format!(
            "there is no snapshot for this image and these settings, and none can be made: {why}"
        ))
    })
}

/// The run reached its end: `--keep-vm` keeps QEMU (and says how to reach it), unless a signal
/// arrived; otherwise QEMU is ended.
pub fn end(session: Session, obs: &mut Observed) {
    session.end(&mut obs.vm_sink());
}
