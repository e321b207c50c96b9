//! `vm-run`: the phases in order, one module each. The image comes from `crate::image`; then
//! `boot` (the run's `vm::Session`: QEMU up to a pinned SSH login), `gates` (copy, gates), `fetch`
//! (the guest's report as one tar stream), `archive` (the report directory, the verdict, the exit
//! code), with `provenance` recording where it all ran and `record` what the phases sent. `plan`
//! prints the steps those modules build, from the same builders. The options are split once
//! (`VmRunOptions::resolve`) into the part each phase reads, so that the plan printed and the
//! run executed start from one `Resolved`. A failure of the rig itself exits 2 and still
//! archives everything observed so far.

pub mod archive;
pub mod boot;
pub mod fetch;
pub mod gates;
pub mod plan;
pub mod provenance;
pub mod record;

pub use record::{Event, Observed};

use crate::image::{self, BuildOptions, ImageEntry};
use crate::progress::Progress;
use crate::vm::{self, qemu, AccelChoice, Session};
use anyhow::{Context, Result};
use sharedos_report::report::Report;
use sharedos_report::{clock, signals};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the gate binary, its work and its report live inside the guest.
pub const GUEST_GATE: &str = "/usr/local/bin/sharedos-gate";
pub const GUEST_WORK: &str = "/root/work";
pub const GUEST_REPORT_DIR: &str = "/root/report";

pub use sharedos_report::report::RIG_FAILURE_EXIT;

/// A command's options, as it parsed them. Only the command modules and the plan name this type
/// (ARCHITECTURE.md); the phases get its parts from [`VmRunOptions::resolve`].
#[derive(Debug, Clone)]
pub struct VmRunOptions {
    pub image: BuildOptions,
    pub accel: AccelChoice,
    /// Report directory; default `<reports_root>/<UTC stamp>-<id>`.
    pub out: Option<PathBuf>,
    pub reports_root: PathBuf,
    pub keep_vm: bool,
    /// `--cold`: boot the image's kernel instead of resuming its snapshot.
    pub cold: bool,
    pub plan: bool,
    pub memory_mib: u64,
    pub cpus: u32,
    /// The static `sharedos-gate` to copy in.
    pub gate_binary: PathBuf,
    /// Extra arguments for `sharedos-gate diagnose`.
    pub diagnose_args: Vec<String>,
    /// Sign report.json with this OpenSSH private key (report.json.sig).
    pub sign_key: Option<PathBuf>,
    /// The whole gate phase's bound, instead of the accelerator's default.
    pub gates_timeout: Option<Duration>,
    pub command_line: Vec<String>,
    /// Files sent into the guest after the gate binary, each to its absolute guest path (a
    /// checkpoint from another guest, for vm-migrate).
    pub upload: Vec<(PathBuf, String)>,
}

/// How the run's guest boots: what the boot phase, the image phase and the provenance read.
#[derive(Debug, Clone)]
pub struct Boot {
    pub image: BuildOptions,
    pub accel: AccelChoice,
    pub memory_mib: u64,
    pub cpus: u32,
    /// `--cold`: boot the image's kernel instead of resuming its snapshot.
    pub cold: bool,
    pub keep_vm: bool,
}

/// What the gate phase runs in the guest, and with what.
#[derive(Debug, Clone)]
pub struct GateCall {
    /// The static `sharedos-gate` to copy in; empty for none (vm-exec without one).
    pub binary: PathBuf,
    /// Extra arguments for `sharedos-gate diagnose`.
    pub diagnose_args: Vec<String>,
    /// The whole gate phase's bound, instead of the accelerator's default.
    pub gates_timeout: Option<Duration>,
    /// Files sent into the guest after the gate binary, each to its absolute guest path.
    pub upload: Vec<(PathBuf, String)>,
}

/// Where the run is archived, and what the archive records of how it was asked for.
#[derive(Debug, Clone)]
pub struct Archiving {
    /// Report directory; default `<reports_root>/<UTC stamp>-<id>`.
    pub out: Option<PathBuf>,
    pub reports_root: PathBuf,
    /// Sign report.json with this OpenSSH private key (report.json.sig).
    pub sign_key: Option<PathBuf>,
    pub command_line: Vec<String>,
}

/// A run's options as its phases receive them: each phase is handed the one part it reads, so
/// that no phase depends on (or resolves again) options that are not its own.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub boot: Boot,
    pub gate: GateCall,
    pub archiving: Archiving,
}

impl VmRunOptions {
    /// The one place the options are split into the parts the phases receive.
    pub fn resolve(&self) -> Resolved {
        Resolved {
            boot: Boot {
                image: self.image.clone(),
                accel: self.accel,
                memory_mib: self.memory_mib,
                cpus: self.cpus,
                cold: self.cold,
                keep_vm: self.keep_vm,
            },
            gate: GateCall {
                binary: self.gate_binary.clone(),
                diagnose_args: self.diagnose_args.clone(),
                gates_timeout: self.gates_timeout,
                upload: self.upload.clone(),
            },
            archiving: Archiving {
                out: self.out.clone(),
                reports_root: self.reports_root.clone(),
                sign_key: self.sign_key.clone(),
                command_line: self.command_line.clone(),
            },
        }
    }
}

/// The run's bounds over its session, which scale with the accelerator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Each blocking SSH call: the session's own bound.
    pub ssh: Duration,
    /// Passed to the guest as `--step-timeout`.
    pub guest_step: Duration,
    /// The whole gate phase, however the guest paces its output.
    pub gates: Duration,
    /// The whole fetch.
    pub fetch: Duration,
}

pub fn bounds(accel: qemu::Accel) -> Bounds {
    let k = u64::from(accel.slowdown());
    Bounds {
        ssh: vm::session::bounds(accel).ssh,
        guest_step: Duration::from_secs(45 * k),
        // Ten gates of a few steps each; a real run takes a tenth of this.
        gates: Duration::from_secs(450 * k),
        fetch: Duration::from_secs(60 * k),
    }
}

/// Every line vm-run and vm-exec tell the person waiting goes through this one progress.
pub(crate) fn progress() -> Progress {
    Progress::new("vm-run")
}

/// Runs the whole job; returns the exit code (0, 3, 1 as verify judges the archived report; 2
/// for the rig).
pub fn vm_run(opts: &VmRunOptions) -> i32 {
    let r = opts.resolve();
    match start(opts, &r) {
        Ok(Some(mut obs)) => {
            let result = run_phases(&r, &mut obs);
            archive::finish(obs, result, r.archiving.sign_key.as_deref())
        }
        Ok(None) => 0,
        Err(e) => {
            progress().error(&e);
            RIG_FAILURE_EXIT
        }
    }
}

/// Everything before the first phase: signals, `--plan`, the gate binary, the report directory.
/// None when only the plan was asked for.
fn start(opts: &VmRunOptions, r: &Resolved) -> Result<Option<Observed>> {
    signals::install().context("installing signal handlers")?;
    // Before the report directory: a name that is not an image, or an image without the
    // workload asked for, is bad input, not a run.
    image::require_image_for(&r.boot.image, &r.gate.diagnose_args)?;
    if opts.plan {
        progress().result(plan::plan(r)?.trim_end());
        return Ok(None);
    }
    if !r.gate.binary.is_file() {
        anyhow::bail!(
            "the gate binary {} does not exist: build it with `cargo xtask vm-run` (which builds it) or `{}`",
            r.gate.binary.display(),
            crate::gate_binary::gate_build_cmd("cargo").display()
        );
    }
    // Before the report directory, the image and the boot: a bad argument costs nothing.
    if !r.gate.diagnose_args.is_empty() {
        gates::check_diagnose_args(&r.gate)?;
    }
    if let Some(key) = &r.archiving.sign_key {
        crate::judge::sign::load_key(key).context("--sign-key")?;
    }
    let report_dir = archive::create_report_dir(&r.archiving)?;
    Ok(Some(observe(&r.boot, &r.archiving, report_dir)))
}

/// Nothing observed yet but where the run is and the host.
pub(crate) fn observe(boot: &Boot, archiving: &Archiving, report_dir: PathBuf) -> Observed {
    let mut vm = provenance::host(boot, &archiving.command_line);
    vm.started_at = clock::now_rfc3339();
    Observed::new(report_dir, vm)
}

fn run_phases(r: &Resolved, obs: &mut Observed) -> Result<Report> {
    let entry = image_phase(&r.boot, obs)?;
    let session = boot::open(&r.boot, &r.gate.binary, &entry, obs)?;
    let guest = session.guest();
    gates::copy(guest, Some(session.start()), &r.gate, obs)?;
    gates::send_files(guest, &r.gate.upload, obs)?;
    let b = bounds(session.accel());
    let gates_bound = Bounds {
        gates: r.gate.gates_timeout.unwrap_or(b.gates),
        ..b
    };
    gates::gates(guest, &r.gate, gates_bound, obs)?;
    let report = fetch::fetch(guest, b, obs)?;
    boot::end(session, obs);
    Ok(report)
}

/// `vm-exec`: boots the image as a run would, copies the gate binary in when one is given, runs
/// `command` (its words joined by spaces, for the guest's shell, as ssh does) over the pinned
/// session, streams its output, and returns its exit code. The way into the guest when a gate
/// fails. The boot's logs go to a scratch directory, kept and named only when the rig fails.
pub fn vm_exec(opts: &VmRunOptions, command: &[String], timeout: Duration) -> i32 {
    let r = opts.resolve();
    if opts.plan {
        progress().result(plan::plan_exec(&r, command).trim_end());
        return 0;
    }
    let scratch = std::env::temp_dir().join(format!(
        "sharedos-rig-exec-{}-{}",
        std::process::id(),
        vm::session::short_id()
    ));
    let result = signals::install()
        .context("installing signal handlers")
        .and_then(|()| {
            std::fs::create_dir(&scratch).with_context(|| format!("creating {}", scratch.display()))
        })
        .and_then(|()| exec_in_guest(&r, command, timeout, &scratch));
    match result {
        Ok(code) => {
            let _ = std::fs::remove_dir_all(&scratch);
            code
        }
        Err(e) => {
            progress().error(&e.context(format!(
                "vm-exec (the boot's serial console and QEMU log are kept in {})",
                scratch.display()
            )));
            RIG_FAILURE_EXIT
        }
    }
}

/// vm-exec's phases: the image, the session, the gate binary when given, the command.
fn exec_in_guest(
    r: &Resolved,
    command: &[String],
    timeout: Duration,
    scratch: &Path,
) -> Result<i32> {
    let mut obs = observe(&r.boot, &r.archiving, scratch.to_path_buf());
    let entry = image_phase(&r.boot, &mut obs)?;
    let session: Session = boot::open(&r.boot, &r.gate.binary, &entry, &mut obs)?;
    if !r.gate.binary.as_os_str().is_empty() {
        gates::copy(session.guest(), Some(session.start()), &r.gate, &mut obs)?;
    }
    let code = session.guest().exec_lines(
        &command.join(" "),
        Instant::now() + timeout,
        gates::MAX_LINE,
        &mut |line| progress().result(line),
    );
    boot::end(session, &mut obs);
    code
}

pub(crate) fn image_phase(boot: &Boot, obs: &mut Observed) -> Result<ImageEntry> {
    let t = Instant::now();
    obs.send(Event::ImageWanted {
        name: boot.image.image.clone(),
    });
    let entry = image::ensure_image(&boot.image);
    obs.phase("image", t);
    let entry = entry.context("ensuring the guest image")?;
    provenance::image(&mut obs.vm, &entry);
    obs.send(Event::Image {
        dir: entry.dir.clone(),
        sha256: entry.manifest.image_sha256.clone(),
    });
    Ok(entry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tcg_bounds_are_wider() {
        let (k, t) = (bounds(qemu::Accel::Kvm), bounds(qemu::Accel::Tcg));
        assert!(t.ssh > k.ssh && t.guest_step > k.guest_step);
        assert!(t.gates > k.gates && t.fetch > k.fetch);
    }
}
