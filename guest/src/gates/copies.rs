//! Restoring a copy of the dumped tree and ending a tree as a whole: what restore_live_process,
//! isolation, reset, density and cleanup share.

use super::step::{Kind, Step};
use super::{fidelity, Config, Ctx};
use crate::criu::{self, NetNs};
use crate::netns;
use crate::probe::{self, TreeRecordExt};
use anyhow::{Context, Result};
use sharedos_report::model::tree::TreeRecord;
use sharedos_report::report::Evidence;
use sharedos_report::wait;
use std::path::Path;
use std::time::Duration;

impl Ctx {
    /// `criu restore` of the dump as copy `label`; on success the copy is registered.
    pub fn restore(&mut self, label: &str) -> (Result<i32>, Evidence) {
        let Some(criu_path) = self.criu.clone() else {
            return (Err(anyhow::anyhow!("no usable criu")), Evidence::default());
        };
        let pidfile = self.cfg.pidfile(label);
        // An existing pidfile makes CRIU kill what it restored.
        let _ = std::fs::remove_file(&pidfile);
        if self.cfg.options.cow_root {
            let (made, mut ev) =
                fidelity::make_cow_root(self, &format!("copy-{label}"), Some("tree"));
            if let Err(e) = made {
                let ev = ev.pop().unwrap_or_default();
                return (Err(e.context("making the copy's writable root")), ev);
            }
        }
        if let Some(l) = self.cfg.options.cgroup {
            let group = format!("copy-{label}");
            if let Err(e) = fidelity::make_tree_group(&self.cfg.marker, &group, &l) {
                return (
                    Err(e.context("making the copy's cgroup")),
                    Evidence::default(),
                );
            }
        }
        let net = if netns::dumped_empty(&self.cfg.dump_dir()) {
            NetNs::New
        } else {
            NetNs::Saved
        };
        let step = criu_restore_step(&self.cfg, &criu_path, label, "", net);
        let out = self.run(&step);
        let pid = std::fs::read_to_string(&pidfile)
            .with_context(|| format!("reading {}", pidfile.display()))
            .and_then(|s| {
                s.trim()
                    .parse::<i32>()
                    .with_context(|| format!("pidfile {} holds {s:?}", pidfile.display()))
            })
            .and_then(heads_own_pid_namespace);
        if !out.success() {
            // A restore cut short (a timeout, a signal) may already have written the pidfile of
            // a tree that runs: remembered, so cleanup ends it as a whole.
            if let Ok(p) = pid {
                self.register_tree(&format!("copy {label} (restore cut short)"), p);
            }
            return (Err(anyhow::anyhow!("{}", out.summary())), out.evidence);
        }
        if let Ok(p) = pid {
            self.copies.insert(label.to_string(), p);
            self.register_tree(&format!("copy {label}"), p);
        }
        (pid, out.evidence)
    }

    /// Copy A as restore_live_process left it when it still runs, else a fresh restore of it
    /// (with that restore's evidence): isolation and reset do not depend on what the gates
    /// before them managed to do.
    pub fn copy_a(&mut self) -> (Result<i32>, Option<Evidence>) {
        if let Some(p) = self.copies.get("a").copied().filter(|p| probe::is_live(*p)) {
            return (Ok(p), None);
        }
        let (pid, ev) = self.restore("a");
        (pid, Some(ev))
    }

    /// Ends one tree: SIGKILL to its PID 1 takes the whole pid namespace down; then waits until
    /// no process is left in that namespace.
    pub fn kill_tree(&mut self, pid: i32) -> Result<()> {
        let rec = self
            .tree_record(pid)
            .cloned()
            .with_context(|| format!("pid {pid} is not a running tree of this run"))?;
        kill_tree_pid1(&rec)?;
        wait_tree_gone(&rec, self.cfg.step_timeout, false)?;
        self.mark_ended(pid);
        Ok(())
    }
}

/// `criu restore` of the dump as copy `label`, with what the options add; `what` is the plan's
/// account of it. `net` follows the dump: a namespace it left out is made new.
pub fn criu_restore_step(cfg: &Config, criu: &Path, label: &str, what: &str, net: NetNs) -> Step {
    Step::new(
        Kind::CriuRestore,
        &format!("criu restore of copy {label}"),
        what,
        criu::restore_argv(
            criu,
            &cfg.dump_dir(),
            &cfg.tree_root(&format!("copy-{label}")),
            &cfg.pidfile(label),
            &cfg.criu_log(&format!("restore-{label}")),
            net,
            &cfg.restore_extra(label),
        ),
    )
}

/// Everything `Ctx::restore` does for copy `label`, in its order: with `--cow-root` the copy's
/// writable root, with `--cgroup` its group, then `criu restore`.
pub fn restore_steps(cfg: &Config, criu: &Path, label: &str, what: &str) -> Vec<Step> {
    let tree = format!("copy-{label}");
    let mut v = Vec::new();
    if cfg.options.cow_root {
        v.push(fidelity::carry_layer_step(cfg, &tree, "tree"));
        v.push(fidelity::overlay_step(cfg, &tree));
    }
    if let Some(l) = cfg.options.cgroup {
        v.push(fidelity::group_step(cfg, &tree, &l));
    }
    v.extend(only_when(
        "the dump left the network namespace out: a new one",
        vec![criu_restore_step(cfg, criu, label, what, NetNs::New)],
    ));
    v.extend(only_when(
        "the dump saved it",
        vec![criu_restore_step(cfg, criu, label, what, NetNs::Saved)],
    ));
    v
}

/// Steps the run takes only `when` something holds, saying so in the plan.
pub fn only_when(when: &str, steps: Vec<Step>) -> Vec<Step> {
    steps
        .into_iter()
        .map(|mut s| {
            s.what = format!("only when {when}: {}", s.what);
            s
        })
        .collect()
}

/// What `Ctx::kill_tree` does to the tree `whose` names, for the plan.
pub fn kill_step(whose: &str, what: &str) -> Step {
    Step::described(
        Kind::KillTree,
        what,
        vec!["kill".into(), "-KILL".into(), format!("<PID 1 of {whose}>")],
    )
}

/// A restored copy's PID 1 is PID 1 of a pid namespace other than ours. Anything else named by a
/// pidfile is refused: signals meant for a copy must never reach another process.
pub fn heads_own_pid_namespace(pid: i32) -> Result<i32> {
    let ns = probe::pidns_of(pid).with_context(|| format!("pid {pid} from the pidfile"))?;
    let mine = probe::pidns_of(std::process::id() as i32).context("our own pid namespace")?;
    let inner = probe::ns_pid_of(pid);
    if ns == mine || inner != Some(1) {
        anyhow::bail!(
            "the pidfile names pid {pid}, which is not PID 1 of a pid namespace of its own (its pid there: {inner:?}, its namespace {ns}, ours {mine})"
        );
    }
    Ok(pid)
}

/// SIGKILL to a tree's PID 1, if it still runs; a PID 1 that already exited is not an error.
pub fn kill_tree_pid1(rec: &TreeRecord) -> Result<()> {
    use nix::sys::signal::{kill, Signal};
    if !rec.pid1_running() {
        return Ok(());
    }
    match kill(nix::unistd::Pid::from_raw(rec.pid), Signal::SIGKILL) {
        Ok(()) | Err(nix::errno::Errno::ESRCH) => Ok(()),
        Err(e) => Err(anyhow::anyhow!(
            "SIGKILL to PID 1 ({}) of {}: {e}",
            rec.pid,
            rec.label
        )),
    }
}

/// Waits until a tree's PID 1 is gone and no process is left in its pid namespace, reaping
/// what we inherited as subreaper. With `through_signals`, an interruption of the run does not
/// cut the wait short: cleanup runs because of the signal and must still see the end.
pub fn wait_tree_gone(
    rec: &TreeRecord,
    timeout: Duration,
    through_signals: bool,
) -> Result<(), wait::WaitError> {
    let ns: std::collections::BTreeSet<String> = rec.pidns.iter().cloned().collect();
    let what = format!(
        "{} (PID 1 {}) and its pid namespace to be gone",
        rec.label, rec.pid
    );
    let gone = || {
        reap_children();
        (!rec.pid1_running() && probe::members(&ns).is_empty()).then_some(())
    };
    if through_signals {
        wait::until_through_signals(&what, timeout, gone)
    } else {
        wait::until(&what, timeout, gone)
    }
}

/// Collects every zombie child we inherited as subreaper (tree roots reparented to us).
/// Only called when no command of ours is running, so no other exit status is taken.
pub fn reap_children() {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    while let Ok(s) = waitpid(None::<nix::unistd::Pid>, Some(WaitPidFlag::WNOHANG)) {
        if s == WaitStatus::StillAlive {
            break;
        }
    }
}
