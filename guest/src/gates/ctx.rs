//! What every gate is handed: the run's configuration and the state shared along the gate
//! sequence (the trees of the run, the dump-time observation), with the ways a gate reads a
//! running tree from outside: its app, its X server, its framebuffer.

use super::fidelity;
use super::step::{Kind, Step};
use crate::criu::{self, NetworkLock};
use crate::exec;
use crate::probe::{self, TreeRecordExt};
use crate::stateapp;
use crate::tree::{self, TreeSpec};
use crate::x11::{self, FrameExt, XConn};
use anyhow::Result;
use sharedos_report::compare;

/// `criu dump --ghost-limit` for Chromium, in bytes: the largest unlinked file CRIU copies
/// whole into the images (its default is 1 MiB).
pub const CHROMIUM_GHOST_LIMIT: u64 = 64 << 20;
use sharedos_report::model::app::AppState;
use sharedos_report::model::tree::{Observation, TreeRecord};
use sharedos_report::report::{Check, Environment, GateName, RunOptions};
use sharedos_report::wait;
use sharedos_report::which::find_program;
use std::collections::{BTreeMap, BTreeSet};
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
    /// Where a long gate says how far it is (the density search's each copy): the binary's
    /// printer, given from above, since gates print nothing themselves.
    pub progress: fn(&str),
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
    /// Overlayfs's own work directory for tree `label`'s root.
    pub fn cow_work(&self, label: &str) -> PathBuf {
        self.cow_dir().join(label).join("work")
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
    /// What CRIU's log of the restore of copy `label` says went wrong, when it says.
    pub fn restore_cause(&self, label: &str) -> Option<sharedos_report::cause::Cause> {
        let name = format!("restore-{label}");
        crate::criu::cause(&self.criu_log(&name), "criu restore", &name)
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
            workload: self.options.workload,
            exe: tree::exe_in_tree(&self.exe),
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
        let mut v = if self.options.userns {
            criu::external_dev_dump_args(&tree::dev_node_names())
        } else {
            Vec::new()
        };
        v.extend(self.workload_criu_args());
        if self.options.workload.is_chromium() {
            // Chromium's shared memory is unlinked 2 MiB files in the tree's /tmp, over CRIU's
            // 1 MiB default for a file it must copy whole ("Can't dump ghost file
            // /tmp/.org.chromium.Chromium.XXXXXX of 2097152 size, increase limit").
            v.extend([
                "--ghost-limit".to_string(),
                CHROMIUM_GHOST_LIMIT.to_string(),
            ]);
        }
        v
    }
    /// A browser holds file locks on its profile (`.parentlock`, SQLite's): CRIU dumps and
    /// restores them only when told to, and refuses the dump otherwise ("Some file locks are
    /// hold by dumping tasks").
    fn workload_criu_args(&self) -> Vec<String> {
        if self.options.workload.is_browser() {
            vec!["--file-locks".into()]
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
        v.extend(self.workload_criu_args());
        v
    }
    /// The criu the plan names: the run's when it can be found, else the name looked up on PATH.
    pub fn planned_criu(&self) -> PathBuf {
        self.criu_path().unwrap_or_else(|| PathBuf::from("criu"))
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
    /// Whether this CRIU can lock the network with nftables (`criu check --feature`).
    pub nft_lock: bool,
    /// Host pid of the original tree's PID 1.
    pub tree: Option<i32>,
    /// The state the dump captured.
    pub snapshot: Option<Observation>,
    /// Restored copies by label, host pid of each copy's PID 1.
    pub copies: BTreeMap<String, i32>,
    /// Every tree of the run, ended or not.
    pub trees: Vec<TreeRecord>,
    /// With `--workload desktop`: the token the live probe typed into the editor.
    pub typed: Option<String>,
    /// The gate now running and the kinds of command its plan lists: it may run no other.
    now: Option<(GateName, BTreeSet<Kind>)>,
}

impl Ctx {
    pub fn new(cfg: Config, env: Environment) -> Self {
        Ctx {
            cfg,
            env,
            criu: None,
            lock: NetworkLock::Iptables,
            nft_lock: false,
            tree: None,
            snapshot: None,
            copies: BTreeMap::new(),
            trees: Vec::new(),
            typed: None,
            now: None,
        }
    }

    /// Starts gate `gate`, whose plan is `plan`: from now on only the kinds of command the plan
    /// lists may run.
    pub fn begin(&mut self, gate: GateName, plan: &[Step]) {
        self.now = Some((gate, plan.iter().map(|s| s.kind).collect()));
    }

    /// Whether the running gate may execute `step`: only a kind of command its plan lists.
    pub fn may_run(&self, step: &Step) -> Result<(), String> {
        match &self.now {
            Some((_, kinds)) if kinds.contains(&step.kind) => Ok(()),
            Some((gate, _)) => Err(format!(
                "{gate}'s plan lists no {:?} step, so it may not run one; list it in the gate's plan",
                step.kind
            )),
            None => Err("no gate is running".into()),
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

    /// Runs a step the running gate's plan lists (see `may_run`), bounded by the step timeout.
    pub fn run(&self, step: &Step) -> exec::Outcome {
        self.run_with(step, |_| {})
    }

    /// As `run`, with a hook that adjusts the command first (environment, a pre-exec step).
    pub fn run_with(
        &self,
        step: &Step,
        configure: impl FnOnce(&mut std::process::Command),
    ) -> exec::Outcome {
        if let Err(why) = self.may_run(step) {
            return exec::Outcome::refused(&step.label, &step.argv, &why);
        }
        exec::run_with(
            &step.label,
            &step.argv,
            self.cfg.step_timeout,
            &self.cfg.scratch(),
            configure,
        )
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
        // Read before the frame: reading the editor selects its text, as it did at the dump.
        let extra = super::workload::observe_extra(self, tree_pid)?;
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
            editor_text: extra.editor_text,
            page: extra.page,
            workspace: extra.workspace,
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
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::gates::step::argv;
    use crate::gates::{dump, restore_live_process};

    /// A configuration for tests of pure logic; nothing of it exists.
    pub(crate) fn config() -> Config {
        Config {
            work: PathBuf::from("/w"),
            out: PathBuf::from("/r/report.json"),
            display: 170,
            marker: "spike-abc".into(),
            criu: Some(PathBuf::from("/opt/criu")),
            step_timeout: Duration::from_secs(60),
            exe: PathBuf::from("/bin/sharedos-gate"),
            argv: vec![],
            options: RunOptions::default(),
            progress: |_| {},
        }
    }

    #[test]
    fn only_a_browser_dumps_and_restores_file_locks() {
        use sharedos_report::report::Workload;
        let mut cfg = config();
        for w in Workload::ALL {
            cfg.options.workload = w;
            let locks = |v: Vec<String>| v.contains(&"--file-locks".to_string());
            assert_eq!(locks(cfg.dump_extra()), w.is_browser(), "{w}");
            assert_eq!(locks(cfg.restore_extra("a")), w.is_browser(), "{w}");
        }
    }

    #[test]
    fn only_chromium_dumps_with_a_raised_ghost_limit() {
        use sharedos_report::report::Workload;
        let mut cfg = config();
        for w in Workload::ALL {
            cfg.options.workload = w;
            let ghost = |v: Vec<String>| v.contains(&"--ghost-limit".to_string());
            assert_eq!(ghost(cfg.dump_extra()), w.is_chromium(), "{w}");
            assert!(!ghost(cfg.restore_extra("a")), "{w}");
        }
    }

    #[test]
    fn a_gate_may_run_only_the_kinds_of_command_its_plan_lists() {
        let dir = std::env::temp_dir().join(format!("ctx-may-run-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("cmd")).unwrap();
        let mut cfg = config();
        cfg.work = dir.clone();
        let mut ctx = Ctx::new(cfg.clone(), Environment::default());
        let touched = dir.join("touched");
        let sneak = |kind| {
            Step::new(
                kind,
                "sneak",
                "",
                argv(&["touch", &touched.display().to_string()]),
            )
        };
        assert!(ctx.may_run(&sneak(Kind::CriuDump)).is_err(), "no gate runs");
        ctx.begin(GateName::Dump, &dump::plan(&cfg));
        let criu = cfg.planned_criu();
        let dump = dump::dump_step(
            &cfg,
            &criu,
            4242,
            NetworkLock::Iptables,
            crate::criu::NetNs::Saved,
        );
        assert_eq!(ctx.may_run(&dump), Ok(()));
        let why = ctx.may_run(&sneak(Kind::FirewallList)).unwrap_err();
        assert!(
            why.contains("dump's plan lists no FirewallList step"),
            "{why}"
        );
        let out = ctx.run(&sneak(Kind::FirewallList));
        assert!(!out.success());
        assert!(
            out.summary().contains("not run: dump's plan"),
            "{}",
            out.summary()
        );
        assert!(!touched.exists(), "a refused step ran");
        // The gate whose plan lists it may.
        ctx.begin(
            GateName::RestoreLiveProcess,
            &restore_live_process::plan(&cfg),
        );
        assert!(ctx.run(&sneak(Kind::FirewallList)).success());
        assert!(touched.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
