//! A VM arm's column: one guest saved with its tree up (the fork), N copies resumed from it at
//! once, each followed to its end and judged, then one copy put back to the save (the reset).

use super::readings::{host_mem, host_split, ksm_reading, reclaim_reading};
use super::search::HostSearch;
use super::{fork, ms, progress, template, workload_args, CompareOptions, Lie};
use crate::image;
use crate::judge::compare::{self as cmp, Arm, Reading, VmCopy, VmEach};
use crate::run::{self, gates, Observed, Resolved};
use crate::vm::qemu::RamFile;
use crate::vm::{self, Fork, GuestMedia, Session, SessionSpec};
use anyhow::{bail, Context, Result};
use sharedos_report::model::density::{Mem, Stop};
use sharedos_report::procfs::QemuMem;
use sharedos_report::report::Copies;
use std::path::Path;
use std::time::{Duration, Instant};

/// The two VM arms: their copies are made the same way, but a template's RAM is a file each
/// copy maps private.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    /// A VM each (`--arms vm`): each copy reads the whole saved RAM into memory of its own.
    Each,
    /// A VM each from a template (`--arms vm-template`).
    Template,
}

impl Kind {
    /// The saved guest's console and QEMU log, under the comparison's directory.
    pub(super) fn fork_dir(self) -> &'static str {
        match self {
            Kind::Each => "vm-each-fork",
            Kind::Template => "vm-template-fork",
        }
    }

    /// Copy `i`'s label, which is its report directory's name too.
    fn copy_label(self, i: u32) -> String {
        match self {
            Kind::Each => format!("copy-{i}"),
            Kind::Template => format!("template-{i}"),
        }
    }

    fn reset_label(self) -> &'static str {
        match self {
            Kind::Each => "reset",
            Kind::Template => "template-reset",
        }
    }

    pub(super) fn arm(self) -> Arm {
        match self {
            Kind::Each => Arm::Vm,
            Kind::Template => Arm::VmTemplate,
        }
    }

    /// As the progress lines name the arm.
    pub(super) fn name(self) -> &'static str {
        self.arm().column()
    }
}

/// The second saved guest's, made only for `--lie wrong-save`.
const OTHER_FORK_DIR: &str = "vm-each-fork-other";

/// A copy up and waiting for its go.
pub(super) struct Up {
    pub(super) label: String,
    obs: Observed,
    pub(super) session: Session,
    resume: Duration,
    /// The nonce the host gave this resume, as its session recorded it.
    nonce: String,
    /// The MAC the copy gets with its go; None keeps the saved guest's (`--lie same-mac`).
    mac: Option<String>,
    host_mem: Result<Mem, String>,
    /// The same QEMU's memory by what holds it, read with `host_mem`.
    split: Option<QemuMem>,
}

/// A VM arm's column into `col`. An error is the rig's: what was measured stays in `col`, and
/// each copy already up is archived as far as it got. Lies (`--lie`) are put into the VM-each
/// arm only.
pub(super) fn column(
    kind: Kind,
    opts: &CompareOptions,
    base: &Resolved,
    out: &Path,
    col: &mut VmEach,
    accel: &mut String,
) -> Result<()> {
    let fork_dir = out.join(kind.fork_dir());
    std::fs::create_dir(&fork_dir).with_context(|| format!("creating {}", fork_dir.display()))?;
    let mut obs = run::observe(&base.boot, &base.archiving, fork_dir);
    let entry = run::image_phase(&base.boot, &mut obs)?;
    let lies: &[Lie] = match kind {
        Kind::Each => &opts.lies,
        Kind::Template => &[],
    };
    // The template's RAM file is removed with its fork, and by this guard should the fork
    // never be made.
    let ram = match kind {
        Kind::Each => None,
        Kind::Template => Some(template::RamGuard::new(base.boot.memory_mib)?),
    };
    let made = make_fork(
        base,
        &entry,
        &mut obs,
        opts.workload.as_deref(),
        ram.as_ref().map(template::RamGuard::template),
    )?;
    *accel = made.accel.as_str().to_string();
    // What makes this comparison's copy MACs its own (`fork::copy_mac`).
    let salt = sharedos_report::random::random_hex(8)?;
    col.fork_token = made.token.clone();
    let saved = &made.fork;
    progress().note(&format!(
        "saved the guest with its tree up: {} MiB of state in {:.1} s",
        saved.record.state_bytes >> 20,
        saved.save_took.as_secs_f64()
    ));
    let sparsified = match (kind, &saved.ram) {
        (Kind::Template, Some(ram)) => {
            let punched = template::sparsify(ram).map_err(|e| format!("{e:#}"));
            if let Ok(b) = &punched {
                progress().note(&format!(
                    "the template's RAM file: {} MiB of zero pages punched out",
                    b >> 20
                ));
            }
            Some(punched)
        }
        // A template's QEMU mapped its whole RAM file: its idle reading is no VM's cost, and
        // only the VM-each arm has one.
        _ => {
            col.idle_guest = made.idle;
            None
        }
    };
    // What each copy is judged against: the save the column's copies must come from.
    let origin = cmp::Origin {
        token: &made.token,
        state_sha256: &saved.record.state_sha256,
    };
    let b = run::bounds(made.accel);
    col.state_bytes = saved.record.state_bytes;
    col.state_sha256 = saved.record.state_sha256.clone();
    col.save_ms = ms(saved.save_took);
    // Lies are refused with `max` before anything boots: a lie needs a count to aim at.
    let count = match opts.copies {
        Copies::Count(n) => n,
        Copies::Max => 0,
    };
    if !lies.is_empty() {
        let said: Vec<String> = lies.iter().map(|l| l.said(count)).collect();
        col.lie = Some(said.join("; "));
    }
    // The wrong save: the last copy is resumed from a second guest's save, made the same way.
    let other = if lies.contains(&Lie::WrongSave) {
        let dir = out.join(OTHER_FORK_DIR);
        std::fs::create_dir(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut obs = run::observe(&base.boot, &base.archiving, dir);
        Some(make_fork(base, &entry, &mut obs, opts.workload.as_deref(), None)?.fork)
    } else {
        None
    };
    let media = GuestMedia::of(&entry);
    let arm = kind.arm();
    let mut search = HostSearch::new(opts.copies, opts.max_copies)?;
    let mut up: Vec<Up> = Vec::new();
    let mut failed = None;
    let (stop, detail) = loop {
        if let Some(stop) = search.decide(up.len())? {
            break stop;
        }
        // The step just taken is on disk before the next copy is tried.
        if !search.count_mode() {
            search.archive(out, arm, None);
        }
        let i = u32::try_from(up.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        let from = match &other {
            Some(o) if i == count => o,
            _ => saved,
        };
        let label = kind.copy_label(i);
        match open_copy(base, &entry, &media, from, out, &label, &salt) {
            Ok(c) => {
                let pss = host_mem(c.session.qemu_pid()).ok().map(|m| m.pss_kib);
                search.up(c.resume, pss);
                if !search.count_mode() {
                    progress().note(&format!(
                        "{}: {i} up, the last resumed in {:.1} s at {} MiB; host MemAvailable {} MiB before it",
                        kind.name(),
                        c.resume.as_secs_f64(),
                        pss.unwrap_or(0) / 1024,
                        search.avail_mib()
                    ));
                }
                up.push(c);
            }
            Err(c) => {
                failed = Some(c);
                break (
                    Stop::RestoreFailed,
                    format!("{label} did not come up: see {label}/"),
                );
            }
        }
    };
    // A search an interrupt ended stopped at no limit of this host, whatever it then saw.
    if let Some(sig) = sharedos_report::signals::interrupted() {
        col.problems.push(format!(
            "interrupted by {sig} while its copies were being made: what stopped them is no limit"
        ));
    }
    if !search.count_mode() {
        let mut record = search.record(stop, &detail);
        // With `max`, a copy that does not come up is the limit the search names, not a
        // failure of the column: the copies already up are measured as ever.
        record.failed = failed.take().map(|c| *c);
        progress().note(&format!(
            "{}: the search stopped at {} copies: {} ({detail})",
            kind.name(),
            up.len(),
            stop.said()
        ));
        search.archive(out, arm, Some((stop, &detail)));
        col.search = Some(record);
        if up.is_empty() {
            bail!("no copy came up: see the search's record");
        }
    }
    for c in &mut up {
        c.host_mem = host_mem(c.session.qemu_pid());
        c.split = host_split(c.session.qemu_pid());
    }
    if let (Some(ram), Some(sparsified)) = (&saved.ram, &sparsified) {
        col.template = Some(template::reading(ram, base.boot.memory_mib, sparsified));
    }
    if failed.is_none() {
        let pids: Vec<u32> = up.iter().map(|c| c.session.qemu_pid()).collect();
        let n = u32::try_from(pids.len()).unwrap_or(u32::MAX);
        col.ksm = ksm_reading(opts.ksm, &pids, n);
        col.reclaim = match kind {
            Kind::Each => reclaim_reading(&up, b),
            Kind::Template => Reading::not_run(template::NO_RECLAIM),
        };
    }
    if let Some(c) = failed {
        // The copies up are told to go on, so that each run ends and its report is kept.
        col.copies
            .extend(up.into_iter().map(|c| finish_copy(c, b, true, origin)));
        col.copies.push(*c);
        bail!("a copy did not come up: see its report");
    }
    // The first copy runs to its end alone; then it is put back to the save while the others
    // still wait, so that the reset is timed among as many guests as the copies were.
    let mut rest = up.into_iter();
    if let Some(mut first) = rest.next() {
        if lies.contains(&Lie::SameMac) {
            first.mac = None;
        }
        if lies.contains(&Lie::RestartedApp) {
            // A lie that did not happen is said; the copies still end and are archived.
            match first.session.guest().exec(&fork::restart_app_command()) {
                Ok(r) if r.status == 0 => {}
                Ok(r) => col.problems.push(format!(
                    "--lie restarted-app: restarting the app in {} failed (exit {}): {}",
                    first.label,
                    r.status,
                    crate::escape::line(&r.output)
                )),
                Err(e) => col.problems.push(format!(
                    "--lie restarted-app: {}: {}",
                    first.label,
                    crate::escape::error_chain(&e)
                )),
            }
        }
        col.copies.push(finish_copy(first, b, true, origin));
    }
    match open_copy(base, &entry, &media, saved, out, kind.reset_label(), &salt) {
        Ok(mut r) => {
            r.host_mem = host_mem(r.session.qemu_pid());
            r.split = host_split(r.session.qemu_pid());
            let all: Vec<Up> = rest.chain([r]).collect();
            for c in &all {
                give_go(c);
            }
            let mut done: Vec<VmCopy> = all
                .into_iter()
                .map(|c| finish_copy(c, b, false, origin))
                .collect();
            col.reset = done.pop();
            col.copies.extend(done);
        }
        Err(r) => {
            col.copies
                .extend(rest.map(|c| finish_copy(c, b, true, origin)));
            col.reset = Some(*r);
        }
    }
    Ok(())
}

/// A guest with its tree up, saved: the fork its copies are resumed from.
struct Made {
    fork: Fork,
    accel: vm::qemu::Accel,
    /// The app's token at the fork, as the saved guest recorded it: what binds a copy to this
    /// save, since a copy of another save holds a fork-time state of its own.
    token: String,
    /// Its QEMU just after it resumed from the image's snapshot, before the tree started.
    idle: Option<Mem>,
}

/// A guest resumed from the image's snapshot runs `diagnose --vm-fork-go` up to its fork-time
/// state, and is saved there, its QEMU ended. Its console and QEMU log go to `obs`'s directory.
fn make_fork(
    base: &Resolved,
    entry: &image::ImageEntry,
    obs: &mut Observed,
    workload: Option<&str>,
    ram: Option<RamFile>,
) -> Result<Made> {
    let session = run::boot::open_to_fork(&base.boot, &base.gate.binary, entry, obs, ram)?;
    let accel = session.accel();
    let idle = host_mem(session.qemu_pid()).ok();
    gates::copy(session.guest(), Some(session.start()), &base.gate, obs)?;
    let b = run::bounds(accel);
    let mut args = fork::diagnose_args(b.gates);
    args.extend(workload_args(workload));
    let argv = gates::diagnose_argv(b.guest_step, &args);
    let started = session.guest().exec(&fork::start_command(&argv))?;
    if started.status != 0 {
        bail!(
            "starting the run in the guest failed: {}",
            crate::escape::line(&started.output)
        );
    }
    session.guest().set_timeout(b.gates);
    let ready = session.guest().exec(&fork::ready_command(b.gates))?;
    session.guest().set_timeout(b.ssh);
    if ready.status != 0 {
        let tail = session
            .guest()
            .exec(&fork::log_tail_command())
            .map(|r| r.output)
            .unwrap_or_default();
        bail!(
            "the guest's run did not reach its fork-time state (exit {}); its last lines:\n{}",
            ready.status,
            crate::escape::lines(&tail)
        );
    }
    let state = session.guest().exec(&fork::state_command())?;
    let token = fork::token_of_state(&state.output).context("reading the fork-time state")?;
    let save_dir = std::env::temp_dir().join(format!(
        "sharedos-rig-fork-{}-{}",
        std::process::id(),
        vm::session::short_id()
    ));
    let fork = session.save_fork(&save_dir)?;
    Ok(Made {
        fork,
        accel,
        token,
        idle,
    })
}

/// A copy of `saved` resumed into its own report directory `out/label`; on failure, its
/// partial report archived and the copy as the column records it.
fn open_copy(
    base: &Resolved,
    entry: &image::ImageEntry,
    media: &GuestMedia,
    saved: &Fork,
    out: &Path,
    label: &str,
    salt: &str,
) -> std::result::Result<Up, Box<VmCopy>> {
    let dir = out.join(label);
    let failed = |why: String| {
        Box::new(VmCopy {
            label: label.into(),
            report: label.into(),
            problems: vec![why],
            ..VmCopy::default()
        })
    };
    if let Err(e) = std::fs::create_dir(&dir) {
        return Err(failed(format!("creating {}: {e}", dir.display())));
    }
    let mut obs = run::observe(&base.boot, &base.archiving, dir.clone());
    run::provenance::image(&mut obs.vm, entry);
    // A template's copy maps the template's RAM file private: copy-on-write.
    let spec = SessionSpec {
        accel_cache: None,
        snapshot: None,
        ram: saved.ram.as_ref().map(|path| RamFile {
            path: path.clone(),
            share: false,
        }),
        ..run::boot::spec(&base.boot, &vm::session::short_id(), &dir)
    };
    let t = Instant::now();
    let opened = Session::open_fork(&spec, media, saved, &mut obs.vm_sink());
    match opened {
        Ok(session) => {
            let resume = t.elapsed();
            progress().note(&format!(
                "{label}: resumed in {:.2} s",
                resume.as_secs_f64()
            ));
            let nonce = session.start().nonce.clone().unwrap_or_default();
            Ok(Up {
                label: label.into(),
                obs,
                session,
                resume,
                nonce,
                mac: Some(fork::copy_mac(salt, label)),
                host_mem: Err("not read".into()),
                split: None,
            })
        }
        Err(e) => {
            obs.phase("boot_to_ssh", t);
            run::archive::finish(
                obs,
                Err(e.context(format!("resuming {label} of the VM fork"))),
                None,
            );
            Err(failed(format!("it did not come up (rig): see {label}/")))
        }
    }
}

/// Writes the copy's go, with its MAC; a failure shows when its run is followed, as a run that
/// never ends, or in the copy's `fork_own_mac`.
fn give_go(c: &Up) {
    if let Some(cmd) = fork::go_command(&c.label, c.mac.as_deref()) {
        let _ = c.session.guest().exec(&cmd);
    }
}

/// Gives the copy its go (unless given already), follows its run to the end, fetches its
/// report, ends its QEMU and archives the report; the copy as the column records it.
fn finish_copy(c: Up, b: run::Bounds, go_first: bool, origin: cmp::Origin) -> VmCopy {
    if go_first {
        give_go(&c);
    }
    let Up {
        label,
        mut obs,
        session,
        resume,
        nonce,
        mac,
        host_mem,
        split,
    } = c;
    let mac = mac.unwrap_or_default();
    let dir = obs.report_dir.clone();
    let result = (|| {
        // The run's exit code is not waited for (`tail --pid`): the judged report is the verdict.
        gates::follow(session.guest(), &fork::follow_command(), b, &mut obs)
            .context("following the copy's run")?;
        gates::read_guest_memory(session.guest(), b, &mut obs)?;
        run::fetch::fetch(session.guest(), b, &mut obs)
    })();
    run::boot::end(session, &mut obs);
    run::archive::finish(obs, result, None);
    let mut problems = cmp::vm_copy_problems(&dir, origin, &nonce, &mac);
    let host_mem = match host_mem {
        Ok(m) => Some(m),
        Err(e) => {
            problems.push(format!("its QEMU's memory could not be read: {e}"));
            None
        }
    };
    VmCopy {
        report: label.clone(),
        label,
        nonce,
        mac,
        resume_ms: ms(resume),
        host_mem,
        host_split: split,
        problems,
    }
}
