//! The gate sequence and its rules: which gate may run after which, the plan, and the report.

use crate::gates::{self, prerequisites::TREE_CHECKS, Config, Ctx, Step};
use anyhow::{Context, Result};
use sharedos_report::fidelity::{self, Difference};
use sharedos_report::report::{
    Artifact, Gate, GateName, Report, RunOptions, Status, REPORT_FILE, REVIEW_FILE, SCHEMA_VERSION,
};
use sharedos_report::text::{artifact_kind, shell_words};
use sharedos_report::{digest, environment, signals};
use std::path::Path;
use std::time::Instant;

/// Why `name` cannot run given the gates before it, or None when it may run. The rule:
/// a gate whose prerequisite failed or did not run is NOT_RUN, never PASS.
pub fn blocked(name: GateName, done: &[Gate]) -> Option<String> {
    let status = |n: GateName| done.iter().find(|g| g.name == n).map(|g| g.status);
    let need = |n: GateName| -> Option<String> {
        match status(n) {
            Some(Status::Pass) => None,
            Some(s) => Some(format!("{n} is {s}")),
            None => Some(format!("{n} did not run")),
        }
    };
    match name {
        GateName::Prerequisites | GateName::Cleanup => None,
        GateName::Launch => {
            let pre = done.iter().find(|g| g.name == GateName::Prerequisites)?;
            let failed: Vec<&str> = pre
                .checks
                .iter()
                .filter(|c| !c.passed && TREE_CHECKS.contains(&c.name.as_str()))
                .map(|c| c.name.as_str())
                .collect();
            (!failed.is_empty()).then(|| {
                format!(
                    "the tree cannot start: prerequisites failed ({}): {}",
                    failed.join(", "),
                    pre.reason
                )
            })
        }
        GateName::LiveStateProbe => need(GateName::Launch),
        GateName::Dump => need(GateName::Prerequisites)
            .map(|r| format!("CRIU is not usable: {r}"))
            .or_else(|| need(GateName::LiveStateProbe)),
        GateName::RestoreLiveProcess
        | GateName::RestoreXState
        | GateName::Isolation
        | GateName::Reset
        | GateName::Density => need(GateName::Dump),
        GateName::GuiPixelReview => need(GateName::LiveStateProbe),
    }
}

/// The differences from the runtime the diagnostic stands in for, as they applied to this run,
/// by their keys (defined once in sharedos-report's `fidelity`, which the host holds a report
/// to). One an option can close leaves the list only when the option was requested and its
/// checks passed in the restored copies; otherwise it stays, saying why.
pub fn fidelity_differences(kernel: &str, options: &RunOptions, gates: &[Gate]) -> Vec<Difference> {
    fidelity::differences(kernel, options, gates)
}

/// Whether the process may set up namespaces and mounts; only root may.
fn is_root() -> bool {
    nix::unistd::geteuid().is_root()
}

/// Our own mount namespace: the read-only root bind and anything a crash leaves mounted vanish
/// with this process instead of lingering in the machine's mount table.
fn private_mounts() -> Result<()> {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).context("unshare(CLONE_NEWNS)")?;
    nix::mount::mount(
        None::<&str>,
        "/",
        None::<&str>,
        nix::mount::MsFlags::MS_REC | nix::mount::MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making / private")?;
    // Restored trees are reparented to us when criu exits, so we can reap them.
    nix::sys::prctl::set_child_subreaper(true).context("PR_SET_CHILD_SUBREAPER")?;
    Ok(())
}

/// What one run of the sequence covers: all of it, or one guest's half of a migration
/// (`crate::migrate`), which runs some gates its own way and leaves others to the other guest.
pub trait Phase {
    /// Why `name` runs in the other guest, or None when it runs here.
    fn elsewhere(&self, _name: GateName) -> Option<String> {
        None
    }
    /// The gate as this phase runs it instead of the registry's `run`, or None.
    fn instead(&self, _name: GateName, _ctx: &mut Ctx) -> Option<Gate> {
        None
    }
    /// Called with each gate this run ran, before it is reported.
    fn after(&self, _ctx: &mut Ctx, _gate: &mut Gate) {}
}

/// The whole sequence in one guest.
pub struct Whole;
impl Phase for Whole {}

/// Runs the ten gates (and density, when asked for) and returns the sealed report (already written to `cfg.out` when possible).
pub fn run(cfg: Config, progress: &mut dyn FnMut(&Gate)) -> Report {
    run_phase(cfg, &Whole, progress)
}

/// As `run`, for one phase of the sequence.
pub fn run_phase(cfg: Config, phase: &dyn Phase, progress: &mut dyn FnMut(&Gate)) -> Report {
    let _sched_hooks_on = hold_perf_sched_hooks();
    let env = environment::capture(cfg.argv.clone());
    let mut ctx = Ctx::new(cfg, env);
    let mut setup_error = None;
    if let Err(e) = signals::install() {
        setup_error = Some(format!("installing signal handlers: {e}"));
    }
    if is_root() {
        if let Err(e) = private_mounts() {
            setup_error = Some(format!("{e:#}"));
        }
    }
    let mut done: Vec<Gate> = Vec::new();
    let options = ctx.cfg.options.clone();
    for def in gates::selected(&options) {
        let name = def.name;
        let started = Instant::now();
        let run_gate = |ctx: &mut Ctx| {
            ctx.begin(name, &(def.plan)(&ctx.cfg));
            (def.run)(ctx)
        };
        let mut gate = if name == GateName::Cleanup {
            run_gate(&mut ctx)
        } else if let Some(why) = phase.elsewhere(name) {
            Gate::new(name, Status::NotRun, why)
        } else if let Some(sig) = signals::interrupted() {
            Gate::new(
                name,
                Status::NotRun,
                format!("the run was interrupted by {sig}"),
            )
        } else if let Some(g) = phase.instead(name, &mut ctx) {
            g
        } else if let Some(why) = blocked(name, &done) {
            Gate::new(name, Status::NotRun, why)
        } else {
            run_gate(&mut ctx)
        };
        if name == GateName::Prerequisites {
            if let Some(e) = &setup_error {
                gate.status = Status::Fail;
                gate.reason = format!("{e}; {}", gate.reason);
            }
        }
        if let Some(sig) = signals::interrupted() {
            if gate.status == Status::Pass && name != GateName::Cleanup {
                // A gate cut short by a signal proved nothing.
                gate.status = Status::Fail;
                gate.reason = format!("interrupted by {sig}: {}", gate.reason);
            }
        }
        if gate.status != Status::NotRun {
            phase.after(&mut ctx, &mut gate);
        }
        gate.duration_ms = started.elapsed().as_millis() as u64;
        progress(&gate);
        done.push(gate);
    }
    ctx.env.finished_at = sharedos_report::clock::now_rfc3339();
    let fidelity = fidelity_differences(&ctx.env.kernel_release, &options, &done);
    let report_dir = ctx.cfg.report_dir();
    let mut report = Report {
        schema_version: SCHEMA_VERSION,
        marker: ctx.cfg.marker.clone(),
        all_gates_pass: false,
        exit_code: 1,
        gates: done,
        environment: ctx.env,
        artifacts: collect_artifacts(&report_dir),
        fidelity_differences: fidelity,
        options,
        vm: None,
    };
    report.seal();
    report
}

/// Every file under the report directory but the report and its review.
pub fn collect_artifacts(dir: &Path) -> Vec<Artifact> {
    let mut files = Vec::new();
    walk(dir, dir, &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|rel| rel != REPORT_FILE && rel != REVIEW_FILE)
        .filter_map(|rel| {
            let kind = artifact_kind(&rel);
            digest::artifact(dir, &rel, kind).ok()
        })
        .collect()
}

fn walk(base: &Path, dir: &Path, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            walk(base, &p, out);
        } else if let Ok(rel) = p.strip_prefix(base) {
            out.push(rel.to_string_lossy().into_owned());
        }
    }
}

/// Writes the report as pretty JSON. When that fails nothing is lost: the caller prints it.
pub fn write_report(report: &Report, out: &Path) -> Result<()> {
    let text = serde_json::to_string_pretty(report).context("serializing the report")?;
    std::fs::write(out, text + "\n").with_context(|| format!("writing {}", out.display()))
}

/// One step of the plan: what a gate would run.
pub struct PlanStep {
    pub gate: GateName,
    pub step: Step,
}

/// Every command the run would execute: each selected gate's plan in the registry's order,
/// built by the functions the gates run.
pub fn plan(cfg: &Config) -> Vec<PlanStep> {
    gates::selected(&cfg.options)
        .into_iter()
        .flat_map(|d| {
            (d.plan)(cfg)
                .into_iter()
                .map(|step| PlanStep { gate: d.name, step })
        })
        .collect()
}

pub fn render_plan(cfg: &Config) -> String {
    let mut s = format!(
        "plan: sharedos-gate diagnose (nothing is executed)\n  marker  {}\n  display :{}\n  work    {}\n  report  {}\n",
        cfg.marker,
        cfg.display,
        cfg.work.display(),
        cfg.out.display()
    );
    for p in plan(cfg) {
        s.push_str(&format!(
            "[{}] {}\n    {}\n",
            p.gate,
            p.step.what,
            shell_words(&p.step.argv)
        ));
    }
    s
}

/// Opens a disabled software perf event on this process and holds it for the run, so that the
/// kernel's scheduler hooks for perf stay patched in from the start to the end.
///
/// Why: every `criu restore` on newer kernels sets a hardware breakpoint through ptrace, which
/// creates a perf event; the first such event patches the scheduler's code in (a static key,
/// written with int3 breakpoints while the other CPUs run), and the last one's release patches
/// it out again. A guest with two vCPUs under QEMU's multi-threaded TCG can run a stale
/// translation of that code and take the int3 as an oops (seen on trixie's 6.12 in
/// `__schedule`, from criu's `ptrace_set_breakpoint_addr`). Held here, the count never drops to
/// zero during the run: the code is patched once, before the tree starts, instead of at every
/// restore. Nothing the gates measure depends on it. None when the kernel refuses the event;
/// the run goes on as before then.
fn hold_perf_sched_hooks() -> Option<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // `struct perf_event_attr` as its first published size (PERF_ATTR_SIZE_VER0, 64 bytes):
    // type, size, config, then at byte 40 the flag bits, of which bit 0 is `disabled`.
    let mut attr = [0u8; 64];
    attr[0..4].copy_from_slice(&1u32.to_ne_bytes()); // PERF_TYPE_SOFTWARE
    attr[4..8].copy_from_slice(&64u32.to_ne_bytes());
    attr[8..16].copy_from_slice(&9u64.to_ne_bytes()); // PERF_COUNT_SW_DUMMY
    attr[40..48].copy_from_slice(&1u64.to_ne_bytes());
    // SAFETY: perf_event_open(2) reads `attr`'s 64 bytes, which live across the call; pid 0 is
    // this process, cpu -1 any, no group, and the flag is PERF_FLAG_FD_CLOEXEC.
    let fd = unsafe {
        nix::libc::syscall(
            nix::libc::SYS_perf_event_open,
            attr.as_ptr(),
            0 as nix::libc::pid_t,
            -1 as nix::libc::c_int,
            -1 as nix::libc::c_int,
            8 as nix::libc::c_ulong,
        )
    };
    let fd = i32::try_from(fd).ok().filter(|fd| *fd >= 0)?;
    // SAFETY: the kernel just returned this descriptor, and nothing else owns it.
    Some(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sharedos_report::report::{Check, Copies};

    fn gate(n: GateName, s: Status) -> Gate {
        Gate::new(n, s, "r")
    }

    fn prereq(failed: &[&str]) -> Gate {
        let mut g = gate(
            GateName::Prerequisites,
            if failed.is_empty() {
                Status::Pass
            } else {
                Status::Fail
            },
        );
        for name in TREE_CHECKS
            .iter()
            .chain(["criu_present", "criu_check"].iter())
        {
            g.checks.push(Check {
                name: name.to_string(),
                passed: !failed.contains(name),
                value: serde_json::Value::Null,
                expected: String::new(),
            });
        }
        g
    }

    #[test]
    fn criu_failure_still_launches_but_blocks_criu_gates() {
        let mut done = vec![prereq(&["criu_check"])];
        assert_eq!(blocked(GateName::Launch, &done), None);
        done.push(gate(GateName::Launch, Status::Pass));
        assert_eq!(blocked(GateName::LiveStateProbe, &done), None);
        done.push(gate(GateName::LiveStateProbe, Status::Pass));
        let why = blocked(GateName::Dump, &done).unwrap();
        assert!(why.contains("CRIU is not usable"), "{why}");
        done.push(Gate::new(GateName::Dump, Status::NotRun, why));
        for n in [
            GateName::RestoreLiveProcess,
            GateName::RestoreXState,
            GateName::Isolation,
            GateName::Reset,
            GateName::Density,
        ] {
            assert_eq!(blocked(n, &done).unwrap(), "dump is NOT_RUN");
        }
        assert_eq!(blocked(GateName::GuiPixelReview, &done), None);
        assert_eq!(blocked(GateName::Cleanup, &done), None);
    }

    #[test]
    fn not_root_blocks_launch_and_everything_after() {
        let done = vec![prereq(&["root", "criu_check"])];
        let why = blocked(GateName::Launch, &done).unwrap();
        assert!(why.contains("root"), "{why}");
        let done = vec![
            prereq(&["root"]),
            Gate::new(GateName::Launch, Status::NotRun, why),
        ];
        assert!(blocked(GateName::LiveStateProbe, &done).is_some());
        assert!(blocked(GateName::GuiPixelReview, &done).is_some());
        assert!(blocked(GateName::Cleanup, &done).is_none());
    }

    #[test]
    fn failed_live_probe_blocks_dump_even_with_criu() {
        let done = vec![
            prereq(&[]),
            gate(GateName::Launch, Status::Pass),
            gate(GateName::LiveStateProbe, Status::Fail),
        ];
        assert_eq!(
            blocked(GateName::Dump, &done).unwrap(),
            "live_state_probe is FAIL"
        );
    }

    #[test]
    fn everything_passing_blocks_nothing() {
        let mut done = vec![prereq(&[])];
        for n in GateName::ALL.iter().skip(1) {
            assert_eq!(blocked(*n, &done), None, "{n}");
            done.push(gate(*n, Status::Pass));
        }
    }

    #[test]
    fn plan_covers_every_command_kind() {
        let cfg = gates::ctx::tests::config();
        let text = render_plan(&cfg);
        for needle in [
            "/opt/criu check",
            "/opt/criu dump -t PID -D /w/dump -o /r/criu/dump.log",
            "/opt/criu restore -D /w/dump -d --root /w/root --pidfile /w/restore-a.pid",
            "--pidfile /w/restore-b.pid",
            "--pidfile /w/restore-reset.pid",
            "Xvfb :170 -screen 0 640x480x24 -nolisten tcp -noreset",
            "unshare --pid --fork --mount-proc --mount --net --ipc --uts --propagation private",
            "xterm -ut -T sharedos-spike",
            "nsenter --net=/proc/PID/ns/net -- nft list ruleset",
        ] {
            assert!(text.contains(needle), "plan lacks {needle}:\n{text}");
        }
        assert!(!text.contains("density"), "a plain run has no density step");
        let mut dense = cfg.clone();
        dense.options.copies = Some(Copies::Max);
        let text = render_plan(&dense);
        assert!(
            text.contains("restore copy density-1")
                && text.contains("--pidfile /w/restore-density-1.pid")
                && text.contains("--copies max"),
            "{text}"
        );
        assert!(!text.contains("cgroup"), "{text}");
        let mut with = cfg.clone();
        with.options.cgroup = crate::gates::fidelity::parse_cgroup_limits("cpu=2,memory=1G").ok();
        let text = render_plan(&with);
        for needle in [
            "--root /w/root --cgroup /sys/fs/cgroup/sharedos-spike-abc/tree",
            "--pidfile /w/restore-b.pid -o /r/criu/restore-b.log -v4 --cgroup-root /sharedos-spike-abc/copy-b",
            "cpu.max=200000 100000",
            "memory.max=1073741824",
        ] {
            assert!(text.contains(needle), "plan lacks {needle}:\n{text}");
        }
        with.options.cow_root = true;
        let text = render_plan(&with);
        for needle in [
            "--root /w/root-tree --cgroup",
            "mount -t overlay overlay -o lowerdir=/w/root,upperdir=/w/cow/tree/upper,workdir=/w/cow/tree/work /w/root-tree",
            "cp -a -- /w/cow/tree/upper/. /w/cow/copy-b/upper",
            "--root /w/root-copy-b --pidfile /w/restore-b.pid",
        ] {
            assert!(text.contains(needle), "plan lacks {needle}:\n{text}");
        }
    }

    #[test]
    fn the_plan_is_every_selected_gates_steps_in_registry_order() {
        let mut cfg = gates::ctx::tests::config();
        for options in [
            RunOptions::default(),
            RunOptions {
                copies: Some(Copies::Count(2)),
                max_copies: None,
                cgroup: crate::gates::fidelity::parse_cgroup_limits("cpu=1,memory=512M").ok(),
                cow_root: true,
                userns: true,
                workload: sharedos_report::report::Workload::Xterm,
                guest_ksm: true,
            },
        ] {
            cfg.options = options;
            let want: Vec<(GateName, Step)> = gates::GATES
                .iter()
                .filter(|d| cfg.options.gates().contains(&d.name))
                .flat_map(|d| (d.plan)(&cfg).into_iter().map(|s| (d.name, s)))
                .collect();
            let got: Vec<(GateName, Step)> =
                plan(&cfg).into_iter().map(|p| (p.gate, p.step)).collect();
            assert_eq!(got, want);
            let text = render_plan(&cfg);
            for (gate, step) in &want {
                let line = format!("[{gate}] {}\n    {}\n", step.what, shell_words(&step.argv));
                assert!(text.contains(&line), "plan lacks {line}:\n{text}");
            }
        }
    }

    fn gate_with(name: GateName, checks: &[(&str, bool)]) -> Gate {
        let mut g = gate(name, Status::Pass);
        for (n, passed) in checks {
            g.checks.push(Check {
                name: n.to_string(),
                passed: *passed,
                value: serde_json::Value::Null,
                expected: String::new(),
            });
        }
        g
    }

    #[test]
    fn a_difference_leaves_only_with_the_option_and_its_passing_checks() {
        let has = |v: &[Difference]| {
            v.iter()
                .find(|f| f.key == fidelity::Key::NoCgroupLimits)
                .map(|f| f.detail.clone())
        };
        let passing = vec![
            gate_with(
                GateName::Isolation,
                &[
                    ("a_cgroup_limits", true),
                    ("b_cgroup_limits", true),
                    ("copies_own_cgroups", true),
                ],
            ),
            gate_with(GateName::Reset, &[("cgroup_limits", true)]),
        ];
        let none = RunOptions::default();
        let f = fidelity_differences("k", &none, &passing);
        assert!(has(&f).unwrap().contains("--cgroup was not requested"));
        let opts = RunOptions {
            cgroup: crate::gates::fidelity::parse_cgroup_limits("cpu=1,memory=512M").ok(),
            ..RunOptions::default()
        };
        assert_eq!(has(&fidelity_differences("k", &opts, &passing)), None);
        let mut failing = passing.clone();
        failing[0].checks[1].passed = false;
        let kept = has(&fidelity_differences("k", &opts, &failing)).unwrap();
        assert!(kept.contains("isolation.b_cgroup_limits failed"), "{kept}");
        let kept = has(&fidelity_differences("k", &opts, &passing[..1])).unwrap();
        assert!(kept.contains("reset.cgroup_limits did not run"), "{kept}");
        // The other closable differences stay: nothing closed them.
        assert_eq!(
            fidelity_differences("k", &opts, &passing).len(),
            fidelity::Key::ALL.len() - 1
        );
    }
}
