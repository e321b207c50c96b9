//! The ten gates of the SPEC and the optional density gate, one file each, and what they share: the run's context, the
//! observation of a running tree, and restoring or killing a copy.

pub mod cleanup;
pub mod density;
pub mod dump;
pub mod fidelity;
pub mod gui_pixel_review;
pub mod isolation;
pub mod launch;
pub mod live_state_probe;
pub mod prerequisites;
pub mod reset;
pub mod restore_live_process;
pub mod restore_x_state;

use crate::criu::{self, NetworkLock};
use crate::exec;
use crate::probe::{self, TreeRecordExt};
use crate::stateapp;
use crate::tree::{self, TreeSpec};
use crate::x11::{self, FrameExt, XConn};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use sharedos_report::compare::{self, check};
use sharedos_report::model::app::AppState;
use sharedos_report::model::tree::{Observation, TreeRecord};
use sharedos_report::report::{Check, Environment, Evidence, Gate, GateName, RunOptions, Status};
use sharedos_report::wait;
use sharedos_report::which::find_program;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// What `diagnose` was asked to do.
#[derive(Clone, Debug)]
pub struct Config {
    pub work: PathBuf,
    pub out: PathBuf,
    pub display: u32,
    pub marker: String,
    pub criu: Option<PathBuf>,
    /// Bound of any single step (one command, one wait for a condition).
    pub step_timeout: Duration,
    /// This binary: the tree runs copies of it.
    pub exe: PathBuf,
    pub argv: Vec<String>,
    /// Options that add a gate (`--copies`) or change how the tree runs (`--cgroup`,
    /// `--cow-root`, `--userns`).
    pub options: RunOptions,
}

impl Config {
    pub fn report_dir(&self) -> PathBuf {
        match self.out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        }
    }
    pub fn root_bind(&self) -> PathBuf {
        self.work.join("root")
    }
    /// The tmpfs holding every tree's upper layer, with `--cow-root`.
    pub fn cow_dir(&self) -> PathBuf {
        self.work.join("cow")
    }
    pub fn cow_upper(&self, label: &str) -> PathBuf {
        self.cow_dir().join(label).join("upper")
    }
    /// The root of tree `label` (`tree` or `copy-LABEL`): the tree's `pivot_root` target, and
    /// CRIU's `--root` for a copy. With `--cow-root` an overlay of its own, else the one
    /// read-only bind of /.
    pub fn tree_root(&self, label: &str) -> PathBuf {
        if self.options.cow_root {
            self.work.join(format!("root-{label}"))
        } else {
            self.root_bind()
        }
    }
    pub fn dump_dir(&self) -> PathBuf {
        self.work.join("dump")
    }
    pub fn scratch(&self) -> PathBuf {
        self.work.join("cmd")
    }
    pub fn pidfile(&self, label: &str) -> PathBuf {
        self.work.join(format!("restore-{label}.pid"))
    }
    pub fn criu_log(&self, name: &str) -> PathBuf {
        self.report_dir().join("criu").join(format!("{name}.log"))
    }
    pub fn spec(&self) -> TreeSpec {
        TreeSpec {
            marker: self.marker.clone(),
            display: self.display,
            root: self.tree_root("tree"),
            cgroup: self
                .options
                .cgroup
                .map(|_| fidelity::group_dir(&fidelity::tree_group(&self.marker, "tree"))),
            userns: self.options.userns,
        }
    }
    /// The criu the run will use: `--criu`, else the first on PATH or in the sbin directories
    /// root's PATH usually has.
    pub fn criu_path(&self) -> Option<PathBuf> {
        match &self.criu {
            Some(p) => Some(p.clone()),
            None => find_program("criu"),
        }
    }
    /// What the options add to `criu dump`.
    pub fn dump_extra(&self) -> Vec<String> {
        if self.options.userns {
            criu::external_dev_dump_args(&tree::dev_node_names())
        } else {
            Vec::new()
        }
    }
    /// What the options add to the `criu restore` of copy `label`: its own cgroup with
    /// `--cgroup`, the machine's /dev nodes with `--userns`.
    pub fn restore_extra(&self, label: &str) -> Vec<String> {
        let mut v = Vec::new();
        if self.options.cgroup.is_some() {
            let group = fidelity::tree_group(&self.marker, &format!("copy-{label}"));
            v.extend(criu::cgroup_root_args(&group));
        }
        if self.options.userns {
            v.extend(criu::external_dev_restore_args(&tree::dev_node_names()));
        }
        v
    }
    pub fn quick(&self) -> Duration {
        self.step_timeout.min(Duration::from_secs(20))
    }
}

/// The rectangle isolation and reset draw into a copy's root window, outside the xterm, and its
/// colour (pure red: nothing else on the screen has it).
pub const MARK: x11rb::protocol::xproto::Rectangle = x11rb::protocol::xproto::Rectangle {
    x: 560,
    y: 400,
    width: 60,
    height: 60,
};
pub const MARK_RGB: u32 = 0x00ff_0000;

/// State shared along the gate sequence.
pub struct Ctx {
    pub cfg: Config,
    pub env: Environment,
    pub criu: Option<PathBuf>,
    pub lock: NetworkLock,
    /// Host pid of the original tree's PID 1.
    pub tree: Option<i32>,
    /// The state the dump captured.
    pub snapshot: Option<Observation>,
    /// Restored copies by label, host pid of each copy's PID 1.
    pub copies: BTreeMap<String, i32>,
    /// Every tree of the run, ended or not.
    pub trees: Vec<TreeRecord>,
}

impl Ctx {
    pub fn new(cfg: Config, env: Environment) -> Self {
        Ctx {
            cfg,
            env,
            criu: None,
            lock: NetworkLock::Iptables,
            tree: None,
            snapshot: None,
            copies: BTreeMap::new(),
            trees: Vec::new(),
        }
    }

    /// Remembers a tree the moment its PID 1 is known.
    pub fn register_tree(&mut self, label: &str, pid: i32) -> TreeRecord {
        let rec = TreeRecord {
            label: label.to_string(),
            pid,
            pidns: probe::pidns_of(pid).ok(),
            ended: false,
        };
        self.trees.push(rec.clone());
        rec
    }

    /// The live record of a tree by its PID 1 (ended trees' pids may have been reused).
    pub fn tree_record(&self, pid: i32) -> Option<&TreeRecord> {
        self.trees.iter().rev().find(|t| t.pid == pid && !t.ended)
    }

    /// Records that a tree was seen gone.
    pub fn mark_ended(&mut self, pid: i32) {
        // Every record of that pid: a lying restore may hand back one tree under two labels.
        for t in self.trees.iter_mut().filter(|t| t.pid == pid) {
            t.ended = true;
        }
    }

    /// The other trees still running beside the most recently registered one.
    pub fn other_running_trees(&self) -> Vec<TreeRecord> {
        let n = self.trees.len().saturating_sub(1);
        self.trees[..n]
            .iter()
            .filter(|t| !t.ended && t.pid1_running())
            .cloned()
            .collect()
    }

    pub fn run(&self, step: &str, argv: &[String]) -> exec::Outcome {
        exec::run(step, argv, self.cfg.step_timeout, &self.cfg.scratch())
    }

    /// Asks a tree's app, from outside.
    pub fn app(&self, tree_pid: i32, command: &str) -> Result<AppState> {
        let sock = tree::path_in_tree(tree_pid, stateapp::SOCKET);
        stateapp::query(&sock, command, self.cfg.quick())
    }

    /// Waits until the app of a tree reports a counter above `above`: the counter ticks on its own.
    pub fn counter_above(&self, tree_pid: i32, above: u64) -> Result<AppState, wait::WaitError> {
        wait::until(
            "the app's counter to advance",
            self.cfg.step_timeout.min(Duration::from_secs(10)),
            || self.app(tree_pid, "get").ok().filter(|s| s.counter > above),
        )
    }

    /// Connects to a tree's X server, bounded: a frozen server must not hang the run.
    pub fn x<T: Send + 'static>(
        &self,
        tree_pid: i32,
        what: &str,
        f: impl FnOnce(&XConn) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let sock = x11::socket_path(tree_pid, self.cfg.display);
        wait::bounded(what, self.cfg.step_timeout, move || {
            let c = XConn::connect(&sock)?;
            f(&c)
        })
    }

    /// Reads app, windows and framebuffer of a tree and keeps the frame as `png/<name>.png`.
    pub fn observe(&self, tree_pid: i32, name: &str) -> Result<Observation> {
        let app_asked_at = Instant::now();
        let app = self.app(tree_pid, "get")?;
        let (windows, frame) = self.x(tree_pid, "X windows and framebuffer", |c| {
            Ok((c.mapped_toplevels()?, c.grab()?))
        })?;
        let png = format!("png/{name}.png");
        frame.write_png(&self.cfg.report_dir().join(&png))?;
        Ok(Observation {
            app,
            app_asked_at,
            windows,
            frame_sha256: frame.sha256(),
            mark_drawn: frame.rect_is(MARK, MARK_RGB),
            png,
        })
    }

    /// Whether the X server answering on a tree's display socket runs inside that tree.
    pub fn check_x_server_in_tree(&self, name: &str, tree_pid: i32) -> Check {
        let sock = x11::socket_path(tree_pid, self.cfg.display);
        let peer = wait::bounded("X server peer", self.cfg.quick(), {
            let sock = sock.clone();
            move || x11::server_peer(&sock)
        })
        .map_err(|e| format!("{e:#}"));
        let want = self.tree_record(tree_pid).and_then(|t| t.pidns.clone());
        compare::x_server_in_tree(name, &sock.display().to_string(), peer, want.as_deref())
    }

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
        let argv = criu::restore_argv(
            &criu_path,
            &self.cfg.dump_dir(),
            &self.cfg.tree_root(&format!("copy-{label}")),
            &pidfile,
            &self.cfg.criu_log(&format!("restore-{label}")),
            &self.cfg.restore_extra(label),
        );
        let out = self.run(&format!("criu restore of copy {label}"), &argv);
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

/// A live, non-zombie process.
pub fn alive(pid: i32) -> bool {
    probe::is_live(pid)
}

/// The namespaces a process is in, as the kernel names them (`net:[4026531840]`).
pub fn namespaces_of(pid: &str) -> BTreeMap<String, String> {
    ["pid", "mnt", "net", "ipc", "uts"]
        .iter()
        .map(|ns| {
            let link = std::fs::read_link(format!("/proc/{pid}/ns/{ns}"))
                .map(|l| l.display().to_string())
                .unwrap_or_else(|e| format!("unreadable: {e}"));
            (ns.to_string(), link)
        })
        .collect()
}

/// True when every namespace of `a` differs from the same kind in `b`.
pub fn all_differ(a: &BTreeMap<String, String>, b: &BTreeMap<String, String>) -> bool {
    !a.is_empty()
        && a.iter()
            .all(|(k, v)| !v.starts_with("unreadable") && b.get(k).is_some_and(|w| w != v))
}

/// Builds a gate from its checks: PASS only when there are checks and all passed.
pub struct GateBuilder {
    pub gate: Gate,
    pub problems: Vec<String>,
}

impl GateBuilder {
    pub fn new(name: GateName) -> Self {
        GateBuilder {
            gate: Gate::new(name, Status::Fail, ""),
            problems: Vec::new(),
        }
    }

    pub fn check(&mut self, c: Check) -> bool {
        let ok = c.passed;
        if !ok {
            let why = if c.expected.is_empty() {
                format!("{} failed (saw {})", c.name, c.value)
            } else {
                format!(
                    "{} failed: expected {}, saw {}",
                    c.name, c.expected, c.value
                )
            };
            self.problems.push(why);
        }
        self.gate.checks.push(c);
        ok
    }

    /// As `check`, but a failure is explained by `fix` (what is wrong and how to go on).
    pub fn require(&mut self, c: Check, fix: impl FnOnce() -> String) -> bool {
        let ok = c.passed;
        if !ok {
            self.problems.push(fix());
        }
        self.gate.checks.push(c);
        ok
    }

    /// Records a check whose failure another problem of this gate already explains.
    pub fn record(&mut self, c: Check) {
        self.gate.checks.push(c);
    }

    pub fn evidence(&mut self, e: Evidence) {
        self.gate.evidence.push(e);
    }

    pub fn data(&mut self, k: &str, v: Value) {
        self.gate.data.insert(k.to_string(), v);
    }

    /// A step that could not be carried out at all: the gate fails with it.
    pub fn problem(&mut self, p: impl Into<String>) {
        self.problems.push(p.into());
    }

    pub fn finish(mut self, pass_reason: &str) -> Gate {
        let all_passed = self.gate.checks.iter().all(|c| c.passed);
        if self.problems.is_empty() && !self.gate.checks.is_empty() && all_passed {
            self.gate.status = Status::Pass;
            self.gate.reason = pass_reason.to_string();
        } else {
            self.gate.status = Status::Fail;
            if self.problems.is_empty() {
                let failed: Vec<&str> = self
                    .gate
                    .checks
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| c.name.as_str())
                    .collect();
                self.problems.push(if failed.is_empty() {
                    "no check was made".into()
                } else {
                    format!("failed checks: {}", failed.join(", "))
                });
            }
            self.gate.reason = self.problems.join("; ");
        }
        self.gate
    }
}

/// Records an observation as a check value.
pub fn obs_value(o: &Observation) -> Value {
    json!({
        "token": o.app.token,
        "counter": o.app.counter,
        "windows": o.windows,
        "framebuffer_sha256": o.frame_sha256,
        "mark_drawn": o.mark_drawn,
        "png": o.png,
    })
}

/// `inner` run inside a tree's network namespace.
pub fn in_netns_argv(pid: i32, inner: &[&str]) -> Vec<String> {
    let mut v = vec![
        "nsenter".to_string(),
        format!("--net=/proc/{pid}/ns/net"),
        "--".into(),
    ];
    v.extend(inner.iter().map(|s| s.to_string()));
    v
}

/// CRIU locks the network while it dumps; with criu 3.17.1 and the nftables lock the lock's
/// drop table outlives the restore (FIELD-NOTES). Checks a restored copy's firewall for anything
/// named after CRIU, with whichever of nft and iptables-save is installed.
pub fn check_no_network_lock_left(ctx: &Ctx, g: &mut GateBuilder, pid: i32) {
    let mut seen = Vec::new();
    let mut looked = 0;
    for (prog, argv) in [
        ("nft", vec!["nft", "list", "ruleset"]),
        ("iptables-save", vec!["iptables-save"]),
    ] {
        if find_program(prog).is_none() {
            continue;
        }
        looked += 1;
        let out = ctx.run(
            &format!("{prog} in the copy's network namespace"),
            &in_netns_argv(pid, &argv),
        );
        if out.success() {
            seen.extend(
                out.stdout
                    .lines()
                    .filter(|l| l.contains("CRIU"))
                    .map(|l| format!("{prog}: {}", l.trim())),
            );
        } else {
            seen.push(format!(
                "{prog} could not list the rules: {}",
                out.summary()
            ));
        }
        g.evidence(out.evidence);
    }
    g.check(check(
        "no_network_lock_left",
        looked > 0 && seen.is_empty(),
        json!({"tools_used": looked, "criu_rules": seen}),
        "no CRIU lock rule or table in the restored copy's firewall",
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespaces_differ_only_when_all_do() {
        let a: BTreeMap<String, String> = [("pid", "1"), ("net", "2")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut b = a.clone();
        assert!(!all_differ(&a, &b));
        b.insert("pid".into(), "9".into());
        assert!(!all_differ(&a, &b), "net is still shared");
        b.insert("net".into(), "8".into());
        assert!(all_differ(&a, &b));
    }

    #[test]
    fn gate_without_checks_is_not_pass() {
        let g = GateBuilder::new(GateName::Launch).finish("ok");
        assert_eq!(g.status, Status::Fail);
        let mut b = GateBuilder::new(GateName::Launch);
        b.check(check("a", true, json!(1), ""));
        assert_eq!(b.finish("ok").status, Status::Pass);
        let mut b = GateBuilder::new(GateName::Launch);
        b.check(check("a", true, json!(1), ""));
        b.check(check("b", false, json!(2), "3"));
        let g = b.finish("ok");
        assert_eq!(g.status, Status::Fail);
        assert!(
            g.reason.contains("b failed: expected 3, saw 2"),
            "{}",
            g.reason
        );
    }

    #[test]
    fn netns_command() {
        assert_eq!(
            in_netns_argv(42, &["nft", "list", "ruleset"]).join(" "),
            "nsenter --net=/proc/42/ns/net -- nft list ruleset"
        );
    }

    #[test]
    fn this_process_is_alive_and_in_its_own_namespaces() {
        assert!(alive(std::process::id() as i32));
        let me = namespaces_of("self");
        assert_eq!(me.len(), 5);
        assert!(!all_differ(&me, &namespaces_of("self")));
    }
}
