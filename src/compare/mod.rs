//! `vm-compare`: one desktop workload run two ways in one sitting, on one accelerator, each
//! column held to the same state checks, side by side in `compare.json`:
//!
//! - **shared-OS** (`shared-os/`): a vm-run with `--copies N`, whose density gate restores N
//!   CRIU copies of one dump in one guest and measures each;
//! - **VM each** (`vm-each-fork/`, `copy-1/` ... `copy-N/`, `reset/`): a guest whose run stops
//!   after its live probe, with the tree up, and is saved there over QMP (the fork); N QEMUs
//!   resumed from that save at once, each a copy whose run goes on and checks the tree against
//!   its fork-time state; their memory read by the host from each QEMU's smaps_rollup with
//!   every copy up; then a copy put back to the save (a fresh QEMU resumed from it), timed and
//!   checked as well.
//!
//! Each copy's report is archived and judged like any vm-run's; the comparison's verdict
//! (`judge::compare`) counts a column only when every copy of it held its state.

pub mod fork;

use crate::image;
use crate::judge::compare::{self as cmp, SharedOs, Summary, VmCopy, VmEach};
use crate::judge::verdict::{self, How};
use crate::progress::Progress;
use crate::run::{self, gates, Observed, VmRunOptions, RIG_FAILURE_EXIT};
use crate::vm::{self, Fork, GuestMedia, Session, SessionSpec};
use anyhow::{bail, Context, Result};
use sharedos_report::model::density::{Mem, MAX_COPIES};
use sharedos_report::{clock, digest, procfs};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct CompareOptions {
    /// Everything but the report directory and the diagnose arguments, as for vm-run.
    pub base: VmRunOptions,
    pub copies: u32,
}

fn progress() -> Progress {
    Progress::new("vm-compare")
}

/// Runs the comparison; returns its exit code (0 PASS, 1 FAIL, 2 the rig failed).
pub fn vm_compare(opts: &CompareOptions) -> i32 {
    match compare(opts) {
        Ok(code) => code,
        Err(e) => {
            progress().error(&e);
            RIG_FAILURE_EXIT
        }
    }
}

/// What each QEMU costs the host beyond the guest's memory: its own code, TCG's translation
/// cache, device state. Measured here at 100-250 MiB for an idle guest; the check is only to
/// refuse an N that cannot fit before anything boots.
const QEMU_OVERHEAD_MIB: u64 = 256;

/// Refuses, before anything boots, a number of copies the density gate would refuse or the
/// host's memory cannot hold as VMs.
pub fn check_copies(copies: u32, memory_mib: u64, host_available_kib: u64) -> Result<()> {
    if !(1..=MAX_COPIES).contains(&copies) {
        bail!("--copies {copies}: give 1 to {MAX_COPIES}");
    }
    let need_mib = u64::from(copies).saturating_mul(memory_mib.saturating_add(QEMU_OVERHEAD_MIB));
    let have_mib = host_available_kib / 1024;
    if need_mib > have_mib {
        bail!(
            "--copies {copies} needs {copies} VMs of {memory_mib} MiB at once, about {need_mib} MiB with QEMU's own, \
             and this host has {have_mib} MiB available; nothing was booted\n\
             fix: give fewer --copies, or less --memory"
        );
    }
    Ok(())
}

/// [`check_copies`] against this host's MemAvailable now.
pub fn check_copies_here(copies: u32, memory_mib: u64) -> Result<()> {
    let (_, available) = procfs::parse_meminfo(&procfs::read_proc("/proc/meminfo")?)?;
    check_copies(copies, memory_mib, available)
}

fn compare(opts: &CompareOptions) -> Result<i32> {
    sharedos_report::signals::install().context("installing signal handlers")?;
    image::require_image(&opts.base.image)?;
    check_copies_here(opts.copies, opts.base.memory_mib)?;
    crate::gate_binary::require(&opts.base.gate_binary)?;
    let out = create_out(opts)?;
    let n = opts.copies;

    progress().note(&format!(
        "shared-OS column: one guest, {n} CRIU copies of one dump (vm-run -- --copies {n})"
    ));
    let so_dir = out.join("shared-os");
    let mut so = opts.base.clone();
    so.out = Some(so_dir.clone());
    so.diagnose_args = vec!["--copies".into(), n.to_string()];
    so.keep_vm = false;
    let code = run::vm_run(&so);
    let mut rig_failed = code == RIG_FAILURE_EXIT;
    let mut accel = String::new();
    let shared_os = match verdict::judge(&so_dir, &How::full(None)) {
        Ok(o) => {
            if let Some(vm) = &o.report.vm {
                accel = vm.accel.clone();
            }
            cmp::shared_os_column(&o, n)
        }
        Err(e) => SharedOs {
            problems: vec![format!("its report does not read back: {e}")],
            ..SharedOs::default()
        },
    };
    let shared_os = SharedOs {
        report: "shared-os".into(),
        ..shared_os
    };

    progress().note(&format!(
        "VM-each column: one guest saved with its tree up, resumed {n} times at once"
    ));
    progress().note(
        "each copy's own report is FAIL by design (CRIU's gates do not run in a VM copy); the comparison's verdict comes last",
    );
    let mut vm_each = VmEach {
        fork: FORK_DIR.into(),
        memory_mib: opts.base.memory_mib,
        cpus: opts.base.cpus,
        memory_source: "the host's /proc/PID/smaps_rollup of each copy's QEMU process (a host figure, not the guest's word; under TCG it includes QEMU's translation cache), read with every copy up and its tree idle".into(),
        ..VmEach::default()
    };
    // An interrupt ends the comparison here: the second column is not started for nothing.
    let ran = match sharedos_report::signals::interrupted() {
        Some(sig) => Err(anyhow::anyhow!("interrupted by {sig}: not started")),
        None => vm_each_column(opts, &out, &mut vm_each, &mut accel),
    };
    if let Err(e) = ran {
        rig_failed = true;
        vm_each.problems.push(format!(
            "the column could not be run (rig): {}",
            crate::escape::error_chain(&e)
        ));
    }
    let mut s = Summary {
        format: cmp::FORMAT,
        image: opts.base.image.image.clone(),
        accel,
        copies: n,
        shared_os,
        vm_each,
        verdict: sharedos_report::report::Verdict::Fail,
        problems: Vec::new(),
    };
    cmp::judge(&mut s);
    let text = serde_json::to_string_pretty(&s)? + "\n";
    digest::replace_in_report(&out, cmp::COMPARE_FILE, text.as_bytes())?;
    progress().block(&crate::render::compare::text(&s));
    progress().result(&out.display().to_string());
    Ok(if rig_failed {
        RIG_FAILURE_EXIT
    } else {
        s.verdict.exit_code()
    })
}

/// The saved guest's console and QEMU log, under the comparison's directory.
const FORK_DIR: &str = "vm-each-fork";

/// The comparison's directory: `--out`, or `<reports root>/<UTC>-compare-IMAGE-N`; new or empty.
fn create_out(opts: &CompareOptions) -> Result<PathBuf> {
    let dir = match &opts.base.out {
        Some(d) => d.clone(),
        None => opts.base.reports_root.join(format!(
            "{}-compare-{}-{}",
            clock::compact_utc_now(),
            opts.base.image.image,
            opts.copies
        )),
    };
    run::archive::create_empty_dir(&dir, "comparison's directory", "")?;
    Ok(dir)
}

/// A copy up and waiting for its go.
struct Up {
    label: String,
    obs: Observed,
    session: Session,
    resume: Duration,
    host_mem: Result<Mem, String>,
}

/// The VM-each column into `col`. An error is the rig's: what was measured stays in `col`, and
/// each copy already up is archived as far as it got.
fn vm_each_column(
    opts: &CompareOptions,
    out: &Path,
    col: &mut VmEach,
    accel: &mut String,
) -> Result<()> {
    let base = &opts.base;
    let fork_dir = out.join(FORK_DIR);
    std::fs::create_dir(&fork_dir).with_context(|| format!("creating {}", fork_dir.display()))?;
    let mut obs = run::observe(base, fork_dir);
    let entry = run::image_phase(base, &mut obs)?;
    let session = run::boot::open(base, &entry, &mut obs)?;
    *accel = session.accel().as_str().to_string();
    col.idle_guest = host_mem(session.qemu_pid()).ok();
    gates::copy(session.guest(), base, &mut obs)?;
    let b = run::bounds(session.accel());
    let argv = gates::diagnose_argv(b.guest_step, &fork::diagnose_args(b.gates));
    let started = session.guest().exec(&fork::start_command(&argv))?;
    if started.status != 0 {
        bail!(
            "starting the run in the guest failed: {}",
            crate::escape::line(&started.output)
        );
    }
    session.guest().set_timeout(b.gates);
    let ready = session.guest().exec(&fork::ready_command(b.gates))?;
    if ready.status != 0 {
        session.guest().set_timeout(b.ssh);
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
    let save_dir = std::env::temp_dir().join(format!(
        "sharedos-rig-fork-{}-{}",
        std::process::id(),
        vm::session::short_id()
    ));
    let saved = session.save_fork(&save_dir)?;
    col.state_bytes = saved.record.state_bytes;
    col.state_sha256 = saved.record.state_sha256.clone();
    col.save_ms = ms(saved.save_took);
    progress().note(&format!(
        "saved the guest with its tree up: {} MiB of state in {:.1} s",
        saved.record.state_bytes >> 20,
        saved.save_took.as_secs_f64()
    ));
    let media = GuestMedia::of(&entry);
    let mut up: Vec<Up> = Vec::new();
    let mut failed = None;
    for i in 1..=opts.copies {
        match open_copy(base, &entry, &media, &saved, out, &format!("copy-{i}")) {
            Ok(c) => up.push(c),
            Err(c) => {
                failed = Some(c);
                break;
            }
        }
    }
    for c in &mut up {
        c.host_mem = host_mem(c.session.qemu_pid());
    }
    if let Some(c) = failed {
        // The copies up are told to go on, so that each run ends and its report is kept.
        col.copies
            .extend(up.into_iter().map(|c| finish_copy(c, b, true)));
        col.copies.push(c);
        bail!("a copy did not come up: see its report");
    }
    // The first copy runs to its end alone; then it is put back to the save while the others
    // still wait, so that the reset is timed among as many guests as the copies were.
    let mut rest = up.into_iter();
    if let Some(first) = rest.next() {
        col.copies.push(finish_copy(first, b, true));
    }
    match open_copy(base, &entry, &media, &saved, out, "reset") {
        Ok(mut r) => {
            r.host_mem = host_mem(r.session.qemu_pid());
            let all: Vec<Up> = rest.chain([r]).collect();
            for c in &all {
                give_go(&c.session, &c.label);
            }
            let mut done: Vec<VmCopy> = all.into_iter().map(|c| finish_copy(c, b, false)).collect();
            col.reset = done.pop();
            col.copies.extend(done);
        }
        Err(r) => {
            col.copies.extend(rest.map(|c| finish_copy(c, b, true)));
            col.reset = Some(r);
        }
    }
    Ok(())
}

/// A copy of `saved` resumed into its own report directory `out/label`; on failure, its
/// partial report archived and the copy as the column records it.
fn open_copy(
    base: &VmRunOptions,
    entry: &image::ImageEntry,
    media: &GuestMedia,
    saved: &Fork,
    out: &Path,
    label: &str,
) -> std::result::Result<Up, VmCopy> {
    let dir = out.join(label);
    let failed = |why: String| VmCopy {
        label: label.into(),
        report: label.into(),
        problems: vec![why],
        ..VmCopy::default()
    };
    if let Err(e) = std::fs::create_dir(&dir) {
        return Err(failed(format!("creating {}: {e}", dir.display())));
    }
    let mut obs = run::observe(base, dir.clone());
    run::provenance::image(&mut obs.vm, entry);
    let spec = SessionSpec {
        accel_cache: None,
        snapshot: None,
        ..run::boot::spec(base, &vm::session::short_id(), &dir)
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
            Ok(Up {
                label: label.into(),
                obs,
                session,
                resume,
                host_mem: Err("not read".into()),
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

/// The host's view of one QEMU's memory.
fn host_mem(pid: u32) -> Result<Mem, String> {
    procfs::read_proc(&format!("/proc/{pid}/smaps_rollup"))
        .and_then(|t| procfs::parse_smaps_rollup(&t))
        .map_err(|e| format!("{e:#}"))
}

/// Writes the copy's go; a failure shows when its run is followed, as a run that never ends.
fn give_go(session: &Session, label: &str) {
    if let Some(cmd) = fork::go_command(label) {
        let _ = session.guest().exec(&cmd);
    }
}

/// Gives the copy its go (unless given already), follows its run to the end, fetches its
/// report, ends its QEMU and archives the report; the copy as the column records it.
fn finish_copy(c: Up, b: run::Bounds, go_first: bool) -> VmCopy {
    let Up {
        label,
        mut obs,
        session,
        resume,
        host_mem,
    } = c;
    if go_first {
        give_go(&session, &label);
    }
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
    let mut problems = cmp::vm_copy_problems(&dir);
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
        resume_ms: ms(resume),
        host_mem,
        problems,
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_n_that_cannot_fit_is_refused_before_booting() {
        assert!(check_copies(4, 1024, 24 << 20).is_ok());
        let e = format!("{:#}", check_copies(16, 1024, 8 << 20).unwrap_err());
        assert!(
            e.contains("16 VMs of 1024 MiB") && e.contains("fix:"),
            "{e}"
        );
        assert!(check_copies(0, 1024, 24 << 20).is_err());
        assert!(check_copies(MAX_COPIES + 1, 64, u64::MAX).is_err());
    }
}
