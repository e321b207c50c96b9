//! The resume path: whether a start can be a resume, the image's snapshot for these settings
//! found and checked (or made first), the layer over it that holds the spec's file, the resume
//! itself, and what the resumed guest is told first (its clock, entropy, key and the nonce).

use super::boot::{booting, cold, new_key, public_key_text, with_qemu_said, Up};
use super::make::{make, make_layer};
use super::{
    bounds, free_port, kernel_append, qemu_cmd, GuestMedia, Instance, Opened, SessionSpec,
};
use crate::cmd;
use crate::image::contract;
use crate::vm::accel::{self, Logs};
use crate::vm::event::{Event, Sink};
use crate::vm::qemu::{self, Accel};
use crate::vm::snapshot::{self, Record};
use crate::vm::ssh::{self, Guest};
use anyhow::{bail, Context, Result};
use sharedos_report::report::{GuestStart, SnapshotRef};
use sharedos_report::signals;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The resume's QEMU line with placeholders for what differs per run: the snapshot's key.
pub(super) fn key_argv(spec: &SessionSpec, accel: Accel, sandbox: bool) -> Vec<String> {
    let ph = PathBuf::from;
    let spec = SessionSpec {
        name: "<name>".into(),
        logs: ph("<logs>"),
        ram: None,
        ..spec.clone()
    };
    let media = GuestMedia {
        kernel: ph("<kernel>"),
        initrd: ph("<initrd>"),
        disk: ph("<disk>"),
    };
    let inst = Instance {
        overlay: ph("<overlay>"),
        qmp: ph("<qmp>"),
        port: 0,
        sandbox,
        incoming: Some(ph("<incoming>")),
        tb_size_mib: None,
        ..Instance::resume(
            Path::new("<run dir>"),
            kernel_append(&format!("{}<snapshot key>", contract::AUTHORIZED_KEY)),
        )
    };
    qemu_cmd(&spec, &media, &inst, accel).argv
}

/// Only the tests set this: the resumed guest is never let go, so its resume never answers.
const TEST_RESUME_STOPPED: &str = "SHAREDOS_RIG_TEST_RESUME_STOPPED";

/// Whether the snapshot for this session's settings is in its store, told before anything
/// boots (its files are hashed only when it is resumed). An accelerator `auto` that has not
/// settled before its first boot has none to look for yet. Whether one could be made instead is
/// asked once, by the caller, before it asks this.
pub fn snapshot_found(spec: &SessionSpec) -> bool {
    let Some(spot) = &spec.snapshot else {
        return false;
    };
    let settled = accel::settled(spec.accel, spec.accel_cache.as_ref());
    let (Ok(version), Some((accel, _))) = (crate::vm::qemu_version(), settled) else {
        return false;
    };
    let key = spot.key(
        &version,
        key_argv(spec, accel, crate::vm::sandbox_available()),
    );
    matches!(snapshot::load(&spot.dir(&key)), Ok(Some(r)) if r.key.differs(&key).is_none())
}

/// Resumes the image's snapshot for these settings; makes it first when there is none or the
/// one there fails its check; boots cold, saying why, when a resume fails.
pub(super) fn resume_or_cold(
    spec: &SessionSpec,
    media: &GuestMedia,
    run_dir: &Path,
    sink: Sink,
) -> Result<Opened> {
    match try_resume(spec, media, run_dir, sink)? {
        Ok(o) => Ok(o),
        Err(reason) => cold(spec, media, run_dir, &reason, sink),
    }
}

/// A resume, or why this run must boot cold instead (the inner error). The outer error is a
/// failure no cold boot would mend: an interrupt, or the snapshot's own boot failing.
fn try_resume(
    spec: &SessionSpec,
    media: &GuestMedia,
    run_dir: &Path,
    sink: Sink,
) -> Result<std::result::Result<Opened, String>> {
    let Some(spot) = &spec.snapshot else {
        return Ok(Err("this image has no snapshot store".into()));
    };
    let version = crate::vm::qemu_version()?;
    let sandbox = crate::vm::sandbox_available();
    // The base found and checked (with the accelerator's reason, and held), or why there is
    // none to resume, so that one is made.
    type Base = (PathBuf, Record, String, Option<snapshot::Hold>);
    let mut base: std::result::Result<Base, String> =
        match accel::settled(spec.accel, spec.accel_cache.as_ref()) {
            None => Err("the accelerator was not decided yet".to_string()),
            Some((accel, reason)) => {
                let key = spot.key(&version, key_argv(spec, accel, sandbox));
                let dir = spot.dir(&key);
                match snapshot::load(&dir) {
                    Ok(None) => {
                        Err("there was no snapshot for this image and these settings".into())
                    }
                    Err(e) => {
                        snapshot::discard(&dir);
                        Err(format!("the snapshot could not be read ({e:#})"))
                    }
                    // Held before its check, so that no other rig removes it between the check
                    // and the end of this session.
                    Ok(Some(r)) => match snapshot::hold(&dir) {
                        Err(e) => Err(format!("the snapshot could not be held ({e:#})")),
                        Ok(held) => match snapshot::check(&dir, &r, &key) {
                            Err(bad) => {
                                drop(held);
                                snapshot::discard(&dir);
                                Err(format!("the snapshot was {bad}"))
                            }
                            Ok(()) => Ok((dir, r, reason, held)),
                        },
                    },
                }
            }
        };
    // A state is hashed as it is fed, so a damaged one is found by the resume itself, with a
    // guest that never ran: it is thrown away and made again, once, whether the base's or the
    // layer's over it.
    let mut layer_damaged: Option<String> = None;
    let mut retried = false;
    loop {
        let made = base.as_ref().err().cloned();
        let (base_dir, base_r, reason, base_hold) = match base {
            Ok(b) => b,
            Err(why) => match make(spec, media, spot, &version, sandbox, run_dir, sink)? {
                Ok((dir, r, held)) => {
                    let reason = r.accel_reason.clone();
                    (dir, r, reason, held)
                }
                Err(e) => {
                    return Ok(Err(format!(
                        "{why}, and saving one failed, so this run booted cold: {e:#}"
                    )))
                }
            },
        };
        // With a layer asked for, the base found or made is resumed through its layer instead.
        let (dir, r, holds, note) = with_layer(
            spec,
            media,
            spot,
            run_dir,
            (base_dir.clone(), base_r.clone(), base_hold),
            layer_damaged.take(),
            sink,
        )?;
        // A resume that fails is told apart from one that was interrupted, which must end the
        // run.
        let e = match resume(spec, media, run_dir, &dir, &r, reason.clone(), None, sink) {
            Ok(mut o) => {
                o.hold = holds;
                o.start.reason = match (made, note) {
                    (Some(why), Some(note)) => format!("{why}: made one, then resumed it; {note}"),
                    (Some(why), None) => format!("{why}: made one, then resumed it"),
                    (None, Some(note)) => note,
                    (None, None) => o.start.reason,
                };
                return Ok(Ok(o));
            }
            Err(e) if signals::interrupted().is_some() => return Err(e),
            Err(e) => e,
        };
        let damaged = e
            .chain()
            .find_map(|c| c.downcast_ref::<snapshot::Damaged>())
            .cloned();
        match damaged {
            Some(bad) if !retried => {
                retried = true;
                drop(holds);
                snapshot::discard(&dir);
                if dir == base_dir {
                    base = Err(format!("the snapshot was {bad}"));
                } else {
                    layer_damaged = Some(bad.0);
                    base = match snapshot::hold(&base_dir) {
                        Ok(held) => Ok((base_dir, base_r, reason, held)),
                        Err(h) => Err(format!("the snapshot could not be held ({h:#})")),
                    };
                }
            }
            _ => {
                let failed = match made {
                    None => "the resume failed".to_string(),
                    Some(why) => format!("{why}; the one made now did not resume"),
                };
                return Ok(Err(format!("{failed}, so this run booted cold: {e:#}")));
            }
        }
    }
}

/// The snapshot a resume of the base `base` (its directory, record and hold) resumes: with no
/// layer asked for, the base; else the layer over it that holds the spec's file, checked as a
/// snapshot is (its key with the file's sha256, its files, its base still the one it was made
/// over), and made first when there is none, it fails a check, or its state was found
/// `damaged` as it was fed (that layer already thrown away). A layer that cannot be made leaves
/// the base, with why (the note). The outer error is an interrupt.
#[allow(clippy::type_complexity)]
fn with_layer(
    spec: &SessionSpec,
    media: &GuestMedia,
    spot: &snapshot::Spot,
    run_dir: &Path,
    base: (PathBuf, Record, Option<snapshot::Hold>),
    damaged: Option<String>,
    sink: Sink,
) -> Result<(PathBuf, Record, Vec<snapshot::Hold>, Option<String>)> {
    let (base_dir, base_r, base_hold) = base;
    let mut holds: Vec<snapshot::Hold> = base_hold.into_iter().collect();
    let Some(layer) = &spec.layer else {
        return Ok((base_dir, base_r, holds, None));
    };
    let base_name = base_dir
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let key = match &layer.warm_up {
        Some(w) => base_r.key.layer(&layer.sha256).warmed_by(w),
        None => base_r.key.layer(&layer.sha256),
    };
    let dir = spot.dir(&key);
    let found = match damaged {
        Some(bad) => Err(format!("was {bad}")),
        None => snapshot::load(&dir).map_err(|e| {
            snapshot::discard(&dir);
            format!("could not be read ({e:#})")
        }),
    };
    let why = match found {
        Err(bad) => format!("the snapshot layer holding this gate binary {bad}"),
        Ok(None) => "there was no snapshot layer holding this gate binary".to_string(),
        // Held before its check, as a base is.
        Ok(Some(r)) => match snapshot::hold(&dir) {
            Err(e) => {
                format!("the snapshot layer holding this gate binary could not be held ({e:#})")
            }
            Ok(held) => {
                let checked = snapshot::check(&dir, &r, &key).and_then(|()| match &r.base {
                    Some(b) if b.dir == base_name => snapshot::check_base(&dir, b),
                    _ => Err("damaged: it names no base, or another".to_string()),
                });
                match checked {
                    Ok(()) => {
                        holds.extend(held);
                        return Ok((dir, r, holds, None));
                    }
                    Err(bad) => {
                        drop(held);
                        snapshot::discard(&dir);
                        format!("the snapshot layer holding this gate binary was {bad}")
                    }
                }
            }
        },
    };
    sink(&Event::LayerMaking {
        base: base_dir.clone(),
        why: why.clone(),
        warmed: layer.warm_up.is_some(),
    });
    let since = Instant::now();
    match make_layer(
        spec,
        media,
        spot,
        run_dir,
        (&base_dir, &base_r),
        &key,
        layer,
        sink,
    ) {
        Ok((dir, r, held)) => {
            sink(&Event::Stage {
                name: "layer_make",
                took: since.elapsed(),
            });
            holds.extend(held);
            Ok((
                dir,
                r,
                holds,
                Some(format!("{why}: made it over the snapshot, then resumed it")),
            ))
        }
        Err(e) if signals::interrupted().is_some() => Err(e),
        Err(e) => Ok((
            base_dir,
            base_r,
            holds,
            Some(format!(
                "{why}, and making it failed, so the plain snapshot was resumed: {e:#}"
            )),
        )),
    }
}

/// Resumes the snapshot in `dir`, already checked: a new overlay on its disk and a new QEMU
/// fed its state; then, logged in with the snapshot's key, the guest's clock is set, this
/// run's own key replaces the snapshot's, and the guest echoes this run's nonce; then the
/// session logs in again with its own key. `into`: a layer being made there, whose overlay
/// (its disk) is made in it, naming the snapshot's disk relatively, instead of the run's.
#[allow(clippy::too_many_arguments)]
pub(super) fn resume(
    spec: &SessionSpec,
    media: &GuestMedia,
    run_dir: &Path,
    dir: &Path,
    r: &Record,
    reason: String,
    into: Option<&Path>,
    sink: Sink,
) -> Result<Opened> {
    let public = new_key(run_dir)?;
    let (overlay, backing) = match (into, dir.file_name()) {
        (Some(making), Some(name)) => (
            making.join(snapshot::DISK),
            Path::new("..").join(name).join(snapshot::DISK),
        ),
        _ => (run_dir.join("overlay.qcow2"), dir.join(snapshot::DISK)),
    };
    cmd::capture(&qemu::overlay_on_cmd(&backing, "qcow2", &overlay))
        .context("making the run's overlay on the snapshot's disk")?;
    let accel = match r.accel.as_str() {
        "kvm" => Accel::Kvm,
        _ => Accel::Tcg,
    };
    let inst = Instance {
        overlay,
        port: free_port()?,
        ..Instance::resume(run_dir, r.append.clone())
    };
    let incoming = inst
        .incoming
        .clone()
        .context("a resume's QEMU line names no socket for the state")?;
    let since = Instant::now();
    let (serial_log, qemu_log) = (spec.serial_log(), spec.qemu_log());
    // The guest's console so far is the saved boot's.
    let _ = std::fs::remove_file(&serial_log);
    std::fs::copy(dir.join(snapshot::CONSOLE), &serial_log).with_context(|| {
        format!(
            "copying the snapshot's boot console to {}",
            serial_log.display()
        )
    })?;
    let logs = Logs {
        serial: &serial_log,
        qemu: &qemu_log,
    };
    let mut started = accel::start_as(
        accel,
        reason,
        &|a| qemu_cmd(spec, media, &inst, a),
        logs,
        spec.keep,
        sink,
    )?;
    booting(&started, inst.port, sink);
    let b = bounds(accel);
    let mut stage = Instant::now();
    let mut lap = |name: &'static str, sink: Sink| {
        sink(&Event::Stage {
            name,
            took: stage.elapsed(),
        });
        stage = Instant::now();
    };
    let deferred = spec
        .ram
        .as_ref()
        .is_some_and(qemu::RamFile::deferred_incoming);
    load(
        &inst.qmp,
        &incoming,
        (&dir.join(snapshot::STATE), &r.state_sha256),
        deferred,
        std::env::var_os(TEST_RESUME_STOPPED).is_none(),
        b.ssh,
    )
    .map_err(|e| with_qemu_said(e, &qemu_log))?;
    lap("resume_load", sink);
    // A resumed guest answers within a few of its seconds; one that does not is not waited on
    // as long as a boot.
    let answer = b.ssh / 3;
    let nonce = sharedos_report::random::random_hex(16)?;
    let entropy = sharedos_report::random::random_hex(32)?;
    let clock_set_to = sharedos_report::clock::now_rfc3339();
    let line = agent_setup_line(&public, &nonce, &entropy, std::time::SystemTime::now())?;
    let agent_socket = inst.qmp.with_file_name(qemu::AGENT_SOCKET);
    // The agent sets the guest up while the SSH handshake goes on; the login, with the run's
    // key, waits for the agent to have made it the one sshd accepts. The host key is the one
    // the snapshot's boot announced.
    let (first, setup_took) = std::thread::scope(|s| {
        let (tx, rx) = std::sync::mpsc::channel();
        s.spawn(move || {
            let t = Instant::now();
            let done = agent_setup(&agent_socket, &line, answer).map_err(|e| format!("{e:#}"));
            let _ = tx.send((done, t.elapsed()));
        });
        let seen: std::cell::RefCell<Option<(std::result::Result<String, String>, _)>> =
            std::cell::RefCell::new(None);
        let ready = || -> Result<()> {
            let mut got = seen.borrow_mut();
            if got.is_none() {
                *got = Some(
                    rx.recv()
                        .map_err(|_| anyhow::anyhow!("the thread setting up the guest ended"))?,
                );
            }
            match got.as_ref().map(|(done, _)| done) {
                Some(Ok(echo)) if *echo == nonce => Ok(()),
                Some(Ok(echo)) => bail!(
                    "the resumed guest did not echo this run's nonce (it said {:?})",
                    sharedos_report::text::tail(&crate::escape::line(echo), 1, 300)
                ),
                Some(Err(e)) => bail!("{e}"),
                None => bail!("the guest's setup said nothing"),
            }
        };
        let first = Guest::connect_when(
            inst.port,
            &r.host_key,
            &super::key_path(run_dir),
            answer,
            &ready,
        );
        // A login that failed before it waited for the setup still has the setup's word.
        let setup = ready();
        let (echo, took) = match seen.borrow().as_ref() {
            Some((Ok(echo), t)) => (echo.clone(), Some(*t)),
            Some((Err(_), t)) => (String::new(), Some(*t)),
            None => (String::new(), None),
        };
        (setup.and(first).map(|g| (g, echo)), took)
    });
    let (first, echo) = first
        .map_err(|e| with_qemu_said(e, &qemu_log))
        .context("the resumed guest did not answer its setup and a login with the run's key")?;
    if let Some(took) = setup_took {
        sink(&Event::Stage {
            name: "resume_setup",
            took,
        });
    }
    lap("resume_answer", sink);
    if let Some(how) = started.qemu.exited() {
        bail!("QEMU exited ({how}) after the resume");
    }
    let up = Up {
        started,
        port: inst.port,
        host_key: r.host_key.clone(),
        since,
    };
    // From the setup on, sshd accepts only the run's key for any login, as `--keep-vm` hands
    // it out.
    let guest = first;
    guest.set_timeout(ssh::SESSION_TIMEOUT);
    sink(&Event::LoggedIn {
        after: up.since.elapsed(),
    });
    let start = GuestStart {
        how: "resumed".into(),
        reason: match &r.key.gate_sha256 {
            None => "the snapshot for this image and these settings passed its checks".into(),
            Some(_) => format!(
                "the layer holding this gate binary over the snapshot for this image and these settings passed its checks{}",
                if r.key.warm_up_sha256.is_some() {
                    " (the layer's guest ran the gates once, their report thrown away, before it was saved)"
                } else {
                    ""
                }
            ),
        },
        snapshot: Some(SnapshotRef {
            state_sha256: r.state_sha256.clone(),
            disk_sha256: r.disk_sha256.clone(),
            key_sha256: r.key_sha256.clone(),
            made_at: r.made_at.clone(),
            boot_host_key: r.host_key.clone(),
            gate_sha256: r.key.gate_sha256.clone(),
            base_state_sha256: r.base.as_ref().map(|b| b.state_sha256.clone()),
        }),
        client_key: public_key_text(&public),
        nonce: Some(nonce),
        nonce_echo: Some(echo),
        clock_set_to: Some(clock_set_to),
        rng_reseeded: true,
    };
    Ok(Opened {
        up,
        guest,
        start,
        resumed_from: Some(r.clone()),
        hold: Vec::new(),
    })
}

/// Feeds the saved state (its path and recorded sha256) to QEMU, started stopped, and lets the
/// guest go (`cont`, unless `go` is false) only once the state hashed as recorded: a damaged
/// state ends in [`snapshot::Damaged`] with a guest that never ran. The hashing overlaps QEMU's
/// load instead of preceding QEMU's start. `cont` while QEMU still takes the state in has it
/// run the guest when the state is in. The QMP connection is let go after, since QEMU serves
/// one client at a time and the save of a fork needs it later.
fn load(
    qmp: &Path,
    incoming: &Path,
    state: (&Path, &str),
    deferred: bool,
    go: bool,
    timeout: std::time::Duration,
) -> Result<()> {
    let mut q = crate::vm::qmp::Qmp::connect(qmp, timeout)?;
    if deferred {
        deferred_incoming(&mut q, incoming)?;
    }
    snapshot::feed(state.0, incoming, state.1, timeout)?;
    if go {
        q.execute("cont", None)
            .context("letting the resumed guest run")?;
    }
    Ok(())
}

/// A clone's incoming: its state was saved leaving the template's RAM file out, so QEMU is told
/// to expect that (the capability must match on both ends), then to listen on `incoming`.
fn deferred_incoming(q: &mut crate::vm::qmp::Qmp, incoming: &Path) -> Result<()> {
    q.migration_capability_on(qemu::IGNORE_SHARED)
        .with_context(|| {
            format!(
                "QEMU refused the migration capability {}\nfix: this arm needs QEMU 4.0 or later",
                qemu::IGNORE_SHARED
            )
        })?;
    q.execute(
        "migrate-incoming",
        Some(serde_json::json!({ "uri": format!("unix:{}", incoming.display()) })),
    )
    .context("starting the clone's deferred incoming")?;
    Ok(())
}

/// What the resumed guest is told first, as one line to its agent (`qemu::agent_args`; the agent
/// is `sharedos-init`'s, started at boot and blocked on its port in every snapshot): its clock
/// from the host's (it stood still while saved); fresh entropy from the host, credited, and its
/// CRNG reseeded from it (every resume starts from the same generator state, and Debian's cloud
/// kernels have no vmgenid driver to notice the new generation ID); the run's key as the only
/// one sshd accepts; and the nonce to echo. The agent answers `ok NONCE` only when every step
/// succeeded. `setup SECS NANOS ENTROPY_HEX KEY_TYPE KEY_BASE64 NONCE`.
pub fn agent_setup_line(
    public: &str,
    nonce: &str,
    entropy: &str,
    now: std::time::SystemTime,
) -> Result<String> {
    let param = contract::authorized_key_param(public)?;
    // The parameter's characters are checked (alphanumerics, `+/=,-`), and its one space is a
    // comma: the line's words are the agent's fields.
    let key = param
        .strip_prefix(contract::AUTHORIZED_KEY)
        .unwrap_or(&param)
        .replacen(',', " ", 1);
    if ![nonce, entropy]
        .iter()
        .all(|h| !h.is_empty() && h.len() % 2 == 0 && h.chars().all(|c| c.is_ascii_hexdigit()))
    {
        bail!("the nonce and the entropy must be hex");
    }
    let t = now
        .duration_since(std::time::UNIX_EPOCH)
        .context("the host clock is before 1970")?;
    Ok(format!(
        "setup {} {} {entropy} {key} {nonce}\n",
        t.as_secs(),
        t.subsec_nanos()
    ))
}

/// The most the agent's answer may hold before it is refused: a line of its own words.
const MAX_AGENT_LINE: usize = 512;

/// What one line from the agent says: `ready` (it waits for the host; read on), `ok NONCE` (the
/// setup done: the nonce it echoes), or why the setup failed.
pub fn agent_answer(line: &str) -> Result<Option<String>> {
    let line = line.trim_end_matches('\r');
    if line == "ready" {
        return Ok(None);
    }
    if let Some(echo) = line.strip_prefix("ok ") {
        return Ok(Some(echo.to_string()));
    }
    match line.strip_prefix("error ") {
        Some(why) => bail!(
            "the resumed guest's agent could not set it up: {}",
            crate::escape::line(why)
        ),
        None => bail!(
            "the resumed guest's agent answered {:?}, not one of its answers (ready, ok NONCE, error WHY)",
            sharedos_report::text::tail(&crate::escape::line(line), 1, 200)
        ),
    }
}

/// Sends `line` to the agent on `socket` and returns the nonce it echoes, within `timeout`: the
/// guest is not trusted to answer at all, nor to answer in bounds.
fn agent_setup(socket: &Path, line: &str, timeout: std::time::Duration) -> Result<String> {
    use std::io::{Read, Write};
    let since = Instant::now();
    let mut conn = crate::vm::qmp::connect_when_listening(socket, timeout, "the agent's socket")?;
    conn.set_write_timeout(Some(timeout))?;
    conn.write_all(line.as_bytes())
        .context("writing to the resumed guest's agent")?;
    let mut got: Vec<u8> = Vec::new();
    loop {
        while let Some(at) = got.iter().position(|b| *b == b'\n') {
            let one: Vec<u8> = got.drain(..=at).collect();
            if let Some(echo) = agent_answer(&String::from_utf8_lossy(&one[..at]))? {
                return Ok(echo);
            }
        }
        if got.len() > MAX_AGENT_LINE {
            bail!("the resumed guest's agent sent a line of more than {MAX_AGENT_LINE} bytes");
        }
        let left = timeout.saturating_sub(since.elapsed());
        if left.is_zero() {
            bail!(
                "the resumed guest did not answer on its agent's port within {} s",
                timeout.as_secs()
            );
        }
        if let Some(sig) = signals::interrupted() {
            bail!("interrupted by {sig} while setting up the resumed guest");
        }
        // Woken at least every second, for an interrupt.
        conn.set_read_timeout(Some(left.min(std::time::Duration::from_secs(1))))?;
        let mut buf = [0u8; 256];
        match conn.read(&mut buf) {
            Ok(0) => bail!("the resumed guest's agent closed its port before it answered"),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock
                        | std::io::ErrorKind::TimedOut
                        | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e).context("reading the resumed guest's agent"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_agent_is_told_only_checked_words() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::new(1_700_000_000, 5);
        let l = agent_setup_line("ssh-ed25519 AAAAC3Nz+/= me@h\n", "ab12", "00ff", t).unwrap();
        assert_eq!(l, "setup 1700000000 5 00ff ssh-ed25519 AAAAC3Nz+/= ab12\n");
        assert!(agent_setup_line("ssh-ed25519 AA'x", "ab", "00", t).is_err());
        assert!(agent_setup_line("ssh-ed25519 AA", "ab;reboot", "00", t).is_err());
        assert!(agent_setup_line("ssh-ed25519 AA", "ab", "0", t).is_err());
        assert!(agent_setup_line("ssh-ed25519 AA", "ab", "00 11", t).is_err());
    }

    #[test]
    fn the_agent_s_answer_is_read_for_the_nonce_and_nothing_else() {
        assert_eq!(agent_answer("ready").unwrap(), None);
        assert_eq!(agent_answer("ok ab12").unwrap().as_deref(), Some("ab12"));
        assert_eq!(agent_answer("ok ab12\r").unwrap().as_deref(), Some("ab12"));
        let e = format!(
            "{:#}",
            agent_answer("error RNDADDENTROPY: bad\x1b[2J").unwrap_err()
        );
        assert!(
            e.contains("could not set it up: RNDADDENTROPY: bad") && !e.contains('\x1b'),
            "{e}"
        );
        let e = format!("{:#}", agent_answer("hello").unwrap_err());
        assert!(e.contains("not one of its answers"), "{e}");
    }
}
