//! The lying-CRIU suite: a criu stand-in that passes every call through to the real criu but
//! one, where it lies in one way; and the suite that runs the whole diagnostic once per lie and
//! checks that the gate which looks at the broken fact FAILs naming what it saw, that the gates
//! the lie does not touch still PASS, and that cleanup still PASSes with nothing left.

use anyhow::{bail, Context, Result};
use serde::Serialize;
use sharedos_report::report::{GateName, Report, Status, Workload};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use std::time::Duration;

/// One lie: the criu call it hits, what it does there, the gate that must catch it and the
/// checks of that gate at least one of which must fail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Lie {
    pub name: &'static str,
    pub does: &'static str,
    pub target: GateName,
    pub caught_by: &'static [&'static str],
    /// Options of `diagnose` the run under this lie needs (a lie about a fidelity option).
    pub options: &'static [&'static str],
}

pub const LIES: [Lie; 17] = [
    Lie {
        name: "dump-writes-nothing",
        does: "`criu dump` exits 0 without dumping: no image, the tree keeps running",
        target: GateName::Dump,
        caught_by: &[
            "images_written",
            "pstree_matches_tree",
            "original_tree_ended",
        ],
        options: &[],
    },
    Lie {
        name: "dump-leaves-tree-running",
        does:
            "`criu dump` dumps with --leave-running: the images are there, the tree was never ended",
        target: GateName::Dump,
        caught_by: &["original_tree_ended"],
        options: &[],
    },
    Lie {
        name: "dump-drops-a-process",
        does: "`criu dump` succeeds, then the last process is cut out of pstree.img",
        target: GateName::Dump,
        caught_by: &["pstree_matches_tree"],
        options: &[],
    },
    Lie {
        name: "restore-a-restores-nothing",
        does: "the restore of copy a exits 0 without restoring anything",
        target: GateName::RestoreLiveProcess,
        caught_by: &["criu_restore_succeeded"],
        options: &[],
    },
    Lie {
        name: "restore-a-wrong-app-state",
        does: "copy a is restored, then its app is changed (new token, counter jumped)",
        target: GateName::RestoreLiveProcess,
        caught_by: &["same_token", "counter_continues"],
        options: &[],
    },
    Lie {
        name: "restore-a-wrong-pixels",
        does: "copy a is restored, then a blue rectangle is painted on its screen",
        target: GateName::RestoreXState,
        caught_by: &["same_framebuffer"],
        options: &[],
    },
    Lie {
        name: "restore-a-extra-window",
        does: "copy a is restored, then a window the dump never had is mapped on its screen",
        target: GateName::RestoreXState,
        caught_by: &["same_windows"],
        options: &[],
    },
    Lie {
        name: "restore-b-is-copy-a",
        does: "the restore of copy b exits 0 and hands back copy a's PID 1",
        target: GateName::Isolation,
        caught_by: &["two_copies_running", "own_namespaces"],
        options: &[],
    },
    Lie {
        name: "restore-b-wrong-app-state",
        does: "copy b is restored, then its app is changed: B does not hold the dump-time state",
        target: GateName::Isolation,
        caught_by: &["b_same_token", "b_counter_continues"],
        options: &[],
    },
    Lie {
        name: "restore-reset-is-copy-b",
        does: "the restore for reset exits 0 and hands back copy b, which still runs unchanged",
        target: GateName::Reset,
        caught_by: &["new_copy"],
        options: &[],
    },
    Lie {
        name: "restore-reset-wrong-app-state",
        does: "the reset copy is restored, then its app is changed",
        target: GateName::Reset,
        caught_by: &["same_token", "counter_continues"],
        options: &[],
    },
    Lie {
        name: "restore-b-without-cgroup-limits",
        does: "copy b is restored into its own cgroup, then the group's cpu.max and memory.max are lifted to max",
        target: GateName::Isolation,
        caught_by: &["b_cgroup_limits"],
        options: &["--cgroup", "cpu=1,memory=512M"],
    },
    Lie {
        name: "restore-b-shares-a-root",
        does: "copy b is restored onto copy a's writable root instead of its own: one upper layer for both",
        target: GateName::Isolation,
        caught_by: &["b_cow_file_absent"],
        options: &["--cow-root"],
    },
    Lie {
        name: "restore-b-process-outside-userns",
        does: "copy b is restored, then a process is started in its pid namespace but in the machine's user namespace, with root's whole map",
        target: GateName::Isolation,
        caught_by: &["b_userns_mapped"],
        options: &["--userns"],
    },
    Lie {
        name: "restore-b-editor-shows-typed-text",
        does: "copy b is restored, then text is typed at the end of its editor's text, as if what is typed into copy a reached it",
        target: GateName::Isolation,
        caught_by: &["b_editor_same_text"],
        options: &["--workload", "desktop"],
    },
    Lie {
        name: "restore-reset-editor-lost-text",
        does: "the reset copy is restored, then its editor's whole text is selected and deleted",
        target: GateName::Reset,
        caught_by: &["editor_same_text"],
        options: &["--workload", "desktop"],
    },
    Lie {
        name: "density-copy-wrong-token",
        does: "the second density copy is restored, then its app is changed: one copy of the two answers another token",
        target: GateName::Density,
        caught_by: &["all_same_token", "all_counters_continue"],
        options: &["--copies", "2"],
    },
];

/// The lies as a Markdown table: the lie, the gate that catches it, and the checks it reports.
pub fn table_markdown() -> String {
    let mut t = String::from("| lie | what the wrapper does | caught by | failing check (one of) |\n| --- | --- | --- | --- |\n");
    for l in LIES {
        t.push_str(&format!(
            "| `{}` | {}{} | {} | {} |\n",
            l.name,
            l.does.replace('|', "\\|"),
            if l.options.is_empty() {
                String::new()
            } else {
                format!(" (diagnose runs with `{}`)", l.options.join(" "))
            },
            l.target,
            l.caught_by
                .iter()
                .map(|c| format!("`{c}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    t
}

/// The workload a lie's run needs (`--workload` among its options), the default otherwise.
pub fn lie_workload(lie: &Lie) -> Workload {
    lie.options
        .windows(2)
        .find(|w| w[0] == "--workload")
        .and_then(|w| Workload::parse(w[1]))
        .unwrap_or_default()
}

pub fn lie(name: &str) -> Option<Lie> {
    LIES.iter().copied().find(|l| l.name == name)
}

/// What every gate must end as when `lie` is told: the target FAILs; the gates before it PASS;
/// after a dump lie the restore gates cannot run; the review waits for a human; cleanup PASSes.
/// A lie about copy a's restore leaves restore_x_state without a copy when nothing came back.
pub fn expected_status(lie: &Lie, gate: GateName) -> Status {
    if gate == lie.target {
        return Status::Fail;
    }
    match gate {
        GateName::GuiPixelReview => Status::ReviewRequired,
        g if lie.target == GateName::Dump && g.needs_criu() => Status::NotRun,
        GateName::RestoreXState if lie.name == "restore-a-restores-nothing" => Status::NotRun,
        _ => Status::Pass,
    }
}

/// Everything wrong with a report of a run under `lie`; empty when the lie was caught as it
/// must be.
pub fn judge(lie: &Lie, r: &Report) -> Vec<String> {
    let mut problems = Vec::new();
    for name in GateName::sequence(lie.target == GateName::Density) {
        let want = expected_status(lie, name);
        match r.gate(name) {
            None => problems.push(format!("{name} is missing from the report")),
            Some(g) if g.status != want => problems.push(format!(
                "{name} is {} (expected {want}): {}",
                g.status, g.reason
            )),
            Some(_) => {}
        }
    }
    if let Some(g) = r.gate(lie.target) {
        let failed: Vec<&str> = g
            .checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect();
        if !failed.iter().any(|f| lie.caught_by.contains(f)) {
            problems.push(format!(
                "{} did not fail any of {:?} (failed: {failed:?})",
                lie.target, lie.caught_by
            ));
        }
        // The reason names the failed check; the check itself carries what was seen.
        let named = failed
            .iter()
            .any(|f| lie.caught_by.contains(f) && g.reason.contains(f));
        if !named {
            problems.push(format!(
                "{}'s reason does not name the failed check: {}",
                lie.target, g.reason
            ));
        }
    }
    problems
}

/// The script put in place of criu for one lie.
pub fn wrapper_script(gate_exe: &Path, real: &Path, lie: &Lie, state: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.display().to_string().replace('\'', "'\\''"));
    format!(
        "#!/bin/sh\n# criu that lies once: {}\nexec {} lying-criu --real {} --lie {} --state {} -- \"$@\"\n",
        lie.does,
        q(gate_exe),
        q(real),
        lie.name,
        q(state)
    )
}

/// The copy label of a restore call, from its `--pidfile .../restore-LABEL.pid`.
pub fn restore_label(args: &[String]) -> Option<String> {
    let i = args.iter().position(|a| a == "--pidfile")?;
    let name = Path::new(args.get(i + 1)?).file_name()?.to_str()?;
    Some(
        name.strip_prefix("restore-")?
            .strip_suffix(".pid")?
            .to_string(),
    )
}

fn arg_after(args: &[String], flag: &str) -> Option<PathBuf> {
    let i = args.iter().position(|a| a == flag)?;
    args.get(i + 1).map(PathBuf::from)
}

/// Whether this call is the one `lie` hits.
pub fn hits(lie: &Lie, args: &[String]) -> bool {
    let sub = args.first().map(String::as_str);
    let label = restore_label(args);
    let restore_of = |l: &str| sub == Some("restore") && label.as_deref() == Some(l);
    match lie.target {
        GateName::Dump => sub == Some("dump"),
        GateName::RestoreLiveProcess | GateName::RestoreXState => restore_of("a"),
        GateName::Isolation => restore_of("b"),
        GateName::Reset => restore_of("reset"),
        GateName::Density => restore_of("density-2"),
        _ => false,
    }
}

fn run_real(real: &Path, args: &[String]) -> Result<i32> {
    let status = crate::exec::command(real)
        .args(args)
        .status()
        .with_context(|| format!("running {}", real.display()))?;
    Ok(status.code().unwrap_or(1))
}

fn pid_from(pidfile: &Path) -> Result<i32> {
    let s = std::fs::read_to_string(pidfile)
        .with_context(|| format!("reading {}", pidfile.display()))?;
    s.trim()
        .parse()
        .with_context(|| format!("{} holds {s:?}", pidfile.display()))
}

fn x_socket(pid: i32) -> Result<PathBuf> {
    let dir = PathBuf::from(format!("/proc/{pid}/root/tmp/.X11-unix"));
    std::fs::read_dir(&dir)
        .with_context(|| format!("listing {}", dir.display()))?
        .flatten()
        .map(|e| e.path())
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('X'))
        })
        .with_context(|| format!("no X socket in {}", dir.display()))
}

fn change_app(pid: i32) -> Result<()> {
    let sock = crate::tree::path_in_tree(pid, crate::stateapp::SOCKET);
    crate::stateapp::query(&sock, "mutate", Duration::from_secs(20)).map(|_| ())
}

/// `lying-criu`: passes the call through to `real`, except the one `lie` hits (once: a state
/// file remembers that it lied, so a later identical call is told the truth). `told` hears of
/// the lie before it is told.
pub fn wrapper_main(
    real: &Path,
    lie_name: &str,
    state: &Path,
    args: &[String],
    told: &mut dyn FnMut(&Lie),
) -> Result<i32> {
    let lie = lie(lie_name).with_context(|| format!("no lie named {lie_name}"))?;
    let lied = state.join(format!("{lie_name}.lied"));
    if !hits(&lie, args) || lied.exists() {
        let err = crate::exec::command(real).args(args).exec();
        bail!("exec {}: {err}", real.display());
    }
    std::fs::create_dir_all(state).with_context(|| format!("mkdir {}", state.display()))?;
    std::fs::write(&lied, args.join(" ")).with_context(|| format!("writing {}", lied.display()))?;
    told(&lie);
    tell(&lie, real, args)
}

/// Makes the call `lie` hits, lying as it does; the exit code to give.
fn tell(lie: &Lie, real: &Path, args: &[String]) -> Result<i32> {
    let pidfile = arg_after(args, "--pidfile");
    let sibling = |label: &str| -> Result<i32> {
        let p = pidfile.as_ref().context("no --pidfile")?;
        pid_from(&p.with_file_name(format!("restore-{label}.pid")))
    };
    let write_pid = |pid: i32| -> Result<()> {
        let p = pidfile.as_ref().context("no --pidfile")?;
        std::fs::write(p, format!("{pid}\n")).with_context(|| format!("writing {}", p.display()))
    };
    match lie.name {
        "dump-writes-nothing" | "restore-a-restores-nothing" => Ok(0),
        "dump-leaves-tree-running" => {
            let mut a = args.to_vec();
            a.push("--leave-running".into());
            run_real(real, &a)
        }
        "dump-drops-a-process" => {
            let code = run_real(real, args)?;
            if code == 0 {
                let dir = arg_after(args, "-D").context("no -D")?;
                drop_last_pstree_entry(&dir.join("pstree.img"))?;
            }
            Ok(code)
        }
        "restore-b-is-copy-a" => {
            write_pid(sibling("a")?)?;
            Ok(0)
        }
        "restore-b-shares-a-root" => {
            let mut a = args.to_vec();
            let i = a.iter().position(|x| x == "--root").context("no --root")?;
            let root = a.get_mut(i + 1).context("no value after --root")?;
            *root = root.replace("root-copy-b", "root-copy-a");
            run_real(real, &a)
        }
        "restore-reset-is-copy-b" => {
            write_pid(sibling("b")?)?;
            Ok(0)
        }
        _ => {
            let code = run_real(real, args)?;
            if code != 0 {
                return Ok(code);
            }
            spoil_restored(lie, pid_from(pidfile.as_ref().context("no --pidfile")?)?)?;
            Ok(0)
        }
    }
}

/// The lies told after a true restore: the copy whose PID 1 is `pid` is then spoiled.
fn spoil_restored(lie: &Lie, pid: i32) -> Result<()> {
    match lie.name {
        "restore-a-wrong-pixels" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            c.fill_rect(
                x11rb::protocol::xproto::Rectangle {
                    x: 20,
                    y: 400,
                    width: 80,
                    height: 40,
                },
                0x0000_00ff,
            )?;
        }
        "restore-a-extra-window" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            c.map_lasting_window(
                "intruder",
                x11rb::protocol::xproto::Rectangle {
                    x: 500,
                    y: 20,
                    width: 100,
                    height: 60,
                },
            )?;
        }
        "restore-b-process-outside-userns" => start_outside_userns(pid)?,
        "restore-b-editor-shows-typed-text" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            crate::gates::workload::type_into_editor(&c, " changed-by-a-lie")?;
        }
        "restore-reset-editor-lost-text" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            crate::gates::workload::clear_editor(&c)?;
        }
        "restore-b-without-cgroup-limits" => {
            let group = crate::gates::fidelity::cgroup_of(pid)?;
            let dir = crate::gates::fidelity::group_dir(&group);
            for (file, text) in [("cpu.max", "max"), ("memory.max", "max")] {
                std::fs::write(dir.join(file), text)
                    .with_context(|| format!("writing {}", dir.join(file).display()))?;
            }
        }
        _ => change_app(pid)?,
    }
    Ok(())
}

/// The argv that starts a process in a tree's pid namespace and nothing else of it: it stays
/// in the machine's user namespace.
pub fn outside_userns_argv(pid: i32) -> Vec<String> {
    [
        "nsenter",
        "--target",
        &pid.to_string(),
        "--pid",
        "--",
        "sleep",
        "600",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Starts that process and waits until it is seen in the tree: it ends with the tree's PID 1.
fn start_outside_userns(pid: i32) -> Result<()> {
    let argv = outside_userns_argv(pid);
    crate::exec::command(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("starting {}", argv.join(" ")))?;
    let ns: std::collections::BTreeSet<String> = crate::probe::pidns_of(pid).into_iter().collect();
    let mine = std::fs::read_link("/proc/self/ns/user").context("our user namespace")?;
    sharedos_report::wait::until(
        "the process outside the user namespace",
        Duration::from_secs(20),
        || {
            crate::probe::members(&ns)
                .iter()
                .any(|m| {
                    std::fs::read_link(format!("/proc/{}/ns/user", m.pid)).is_ok_and(|u| u == mine)
                })
                .then_some(())
        },
    )?;
    Ok(())
}

/// Cuts the last entry off a pstree image.
fn drop_last_pstree_entry(img: &Path) -> Result<()> {
    let b = std::fs::read(img).with_context(|| format!("reading {}", img.display()))?;
    let spans = crate::pstree::entry_spans(&b)?;
    let last = spans.last().context("pstree.img has no entry")?;
    std::fs::write(img, &b[..last.0]).with_context(|| format!("writing {}", img.display()))
}

/// The outcome of one lie in the suite.
#[derive(Serialize, Debug)]
pub struct LieOutcome {
    pub lie: Lie,
    pub exit_code: Option<i32>,
    pub statuses: Vec<(GateName, Status)>,
    pub target_reason: String,
    pub marked_left: usize,
    pub problems: Vec<String>,
}

pub struct SuiteConfig {
    pub real_criu: PathBuf,
    pub work: PathBuf,
    pub out: PathBuf,
    pub display: u32,
    pub step_timeout: u64,
    pub only: Vec<String>,
    /// Without `only`: the lies of this workload (the image must hold its programs).
    pub workload: Workload,
}

/// What the suite found: how many lies were caught as they must be, of how many, and where
/// the summary of every outcome is.
#[derive(Debug)]
pub struct SuiteResult {
    pub caught: usize,
    pub lies: usize,
    pub summary: PathBuf,
}

impl SuiteResult {
    pub fn exit_code(&self) -> i32 {
        if self.caught == self.lies && self.lies > 0 {
            0
        } else {
            1
        }
    }
}

/// Runs the diagnostic once per lie with the lying wrapper as `--criu` and judges each report.
pub fn suite_main(cfg: &SuiteConfig, progress: &mut dyn FnMut(&LieOutcome)) -> Result<SuiteResult> {
    let exe = std::env::current_exe().context("locating this binary")?;
    let chosen = chosen_lies(&cfg.only, cfg.workload)?;
    refuse_unusable(cfg)?;
    std::fs::create_dir_all(&cfg.out).with_context(|| format!("mkdir {}", cfg.out.display()))?;
    // A fresh scratch directory per suite run: a lie's state file left by an earlier run would
    // keep the wrapper from lying.
    let run_work = cfg
        .work
        .join(format!("suite-{}", sharedos_report::random::random_hex(4)?));
    let mut outcomes = Vec::new();
    for (i, lie) in chosen.into_iter().enumerate() {
        let outcome = run_under(&exe, cfg, &run_work.join(lie.name), i, lie)?;
        progress(&outcome);
        outcomes.push(outcome);
    }
    let summary = cfg.out.join("lies.json");
    std::fs::write(
        &summary,
        serde_json::to_string_pretty(&outcomes).context("serializing the suite's outcomes")?,
    )
    .with_context(|| format!("writing {}", summary.display()))?;
    Ok(SuiteResult {
        caught: outcomes.iter().filter(|o| o.problems.is_empty()).count(),
        lies: outcomes.len(),
        summary,
    })
}

/// The lies named in `only`; when it is empty, every lie of `workload`. An unknown name is
/// refused.
pub fn chosen_lies(only: &[String], workload: Workload) -> Result<Vec<&'static Lie>> {
    if let Some(unknown) = only.iter().find(|o| lie(o).is_none()) {
        bail!(
            "no lie named {unknown}; the lies: {}",
            LIES.map(|l| l.name).join(", ")
        );
    }
    Ok(LIES
        .iter()
        .filter(|l| match only.is_empty() {
            true => lie_workload(l) == workload,
            false => only.iter().any(|o| o == l.name),
        })
        .collect())
}

/// Refuses a run that could prove nothing: a used output directory, or a CRIU that does not
/// work here.
fn refuse_unusable(cfg: &SuiteConfig) -> Result<()> {
    // Reports of an earlier suite there would be judged as this one's.
    if std::fs::read_dir(&cfg.out).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "{} is not empty: give --out a new or empty directory",
            cfg.out.display()
        );
    }
    // Where CRIU itself does not work, every lie would go "uncaught" for want of a dump: say so
    // once instead.
    let check = crate::exec::command(&cfg.real_criu)
        .arg("check")
        .output()
        .with_context(|| format!("running {} check", cfg.real_criu.display()))?;
    if !check.status.success() {
        bail!(
            "`{} check` fails here ({}), and the lying-CRIU suite needs a CRIU that works; run it in the pinned guest: cargo xtask vm-exec --gate-binary GATE -- /usr/local/bin/sharedos-gate lie-suite --out /root/lies",
            cfg.real_criu.display(),
            sharedos_report::text::tail(&String::from_utf8_lossy(&check.stderr), 1, 300)
        );
    }
    Ok(())
}

/// Writes the lying wrapper for `lie` into `work` (its state beside it); returns its path.
fn install_wrapper(exe: &Path, real: &Path, work: &Path, lie: &Lie) -> Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::create_dir_all(work).with_context(|| format!("mkdir {}", work.display()))?;
    let wrapper = work.join("criu");
    std::fs::write(
        &wrapper,
        wrapper_script(exe, real, lie, &work.join("lie-state")),
    )
    .with_context(|| format!("writing {}", wrapper.display()))?;
    std::fs::set_permissions(&wrapper, std::fs::Permissions::from_mode(0o755))
        .with_context(|| format!("chmod {}", wrapper.display()))?;
    Ok(wrapper)
}

/// The whole diagnostic once, with the wrapper that tells `lie` as its criu, judged.
fn run_under(
    exe: &Path,
    cfg: &SuiteConfig,
    work: &Path,
    i: usize,
    lie: &Lie,
) -> Result<LieOutcome> {
    let wrapper = install_wrapper(exe, &cfg.real_criu, work, lie)?;
    let out = cfg.out.join(lie.name).join("report.json");
    let marker = format!("lie-{}-{}", i, sharedos_report::random::random_hex(4)?);
    let status = crate::exec::command(exe)
        .args(["diagnose", "--work"])
        .arg(work.join("run"))
        .arg("--out")
        .arg(&out)
        .args(["--marker", &marker, "--display"])
        .arg(format!(":{}", cfg.display))
        .args(["--step-timeout", &cfg.step_timeout.to_string(), "--criu"])
        .arg(&wrapper)
        .args(lie.options)
        .status()
        .with_context(|| format!("running diagnose under {}", lie.name))?;
    let left = crate::probe::scan(&marker);
    let mut problems = Vec::new();
    let report: Option<Report> = std::fs::read_to_string(&out)
        .map_err(|e| problems.push(format!("no report at {}: {e}", out.display())))
        .ok()
        .and_then(|t| {
            serde_json::from_str(&t)
                .map_err(|e| problems.push(format!("unreadable report: {e}")))
                .ok()
        });
    if let Some(r) = &report {
        problems.extend(judge(lie, r));
    }
    if !left.is_empty() {
        problems.push(format!(
            "{} marked processes left after the run",
            left.len()
        ));
    }
    Ok(LieOutcome {
        lie: *lie,
        exit_code: status.code(),
        statuses: report
            .as_ref()
            .map(|r| r.gates.iter().map(|g| (g.name, g.status)).collect())
            .unwrap_or_default(),
        target_reason: report
            .as_ref()
            .and_then(|r| r.gate(lie.target))
            .map(|g| g.reason.clone())
            .unwrap_or_default(),
        marked_left: left.len(),
        problems,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use sharedos_report::report::{Check, Gate};

    fn sv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn every_criu_gate_is_the_target_of_a_lie() {
        for g in GateName::ALL.iter().filter(|g| g.needs_criu()) {
            assert!(LIES.iter().any(|l| l.target == *g), "{g} has no lie");
        }
        assert!(LIES.len() >= 8);
        let mut names: Vec<&str> = LIES.iter().map(|l| l.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), LIES.len());
    }

    #[test]
    fn each_lie_hits_only_its_call() {
        let dump = sv(&["dump", "-t", "5", "-D", "/w/dump"]);
        let restore = |l: &str| {
            sv(&[
                "restore",
                "-D",
                "/w/dump",
                "--pidfile",
                &format!("/w/restore-{l}.pid"),
            ])
        };
        let check = sv(&["check"]);
        for l in LIES {
            let hit: Vec<bool> = [
                &dump,
                &restore("a"),
                &restore("b"),
                &restore("reset"),
                &restore("density-2"),
                &check,
            ]
            .iter()
            .map(|a| hits(&l, a))
            .collect();
            assert_eq!(hit.iter().filter(|h| **h).count(), 1, "{}: {hit:?}", l.name);
            assert!(!hits(&l, &check));
        }
        assert_eq!(restore_label(&restore("reset")).as_deref(), Some("reset"));
        assert_eq!(restore_label(&dump), None);
    }

    #[test]
    fn a_suite_runs_the_lies_of_its_workload() {
        let names = |w| -> Vec<&str> {
            chosen_lies(&[], w)
                .unwrap()
                .into_iter()
                .map(|l| l.name)
                .collect()
        };
        let desktop = names(Workload::Desktop);
        assert_eq!(
            desktop,
            [
                "restore-b-editor-shows-typed-text",
                "restore-reset-editor-lost-text"
            ]
        );
        let xterm = names(Workload::Xterm);
        assert_eq!(xterm.len() + desktop.len(), LIES.len());
        assert!(!xterm.contains(&"restore-reset-editor-lost-text"));
        let named = chosen_lies(&["restore-reset-editor-lost-text".into()], Workload::Xterm);
        assert_eq!(named.unwrap().len(), 1);
    }

    #[test]
    fn the_userns_lie_enters_only_the_pid_namespace() {
        assert_eq!(
            outside_userns_argv(42).join(" "),
            "nsenter --target 42 --pid -- sleep 600"
        );
        let l = lie("restore-b-process-outside-userns").unwrap();
        assert_eq!(l.options, ["--userns"]);
    }

    #[test]
    fn the_wrapper_script_passes_every_argument() {
        let s = wrapper_script(
            Path::new("/usr/local/bin/sharedos-gate"),
            Path::new("/usr/sbin/criu"),
            &LIES[0],
            Path::new("/w/it's"),
        );
        assert!(s.starts_with("#!/bin/sh\n"));
        assert!(s.contains("lying-criu --real '/usr/sbin/criu' --lie dump-writes-nothing"));
        assert!(s.contains("--state '/w/it'\\''s'"));
        assert!(s.trim_end().ends_with("-- \"$@\""));
    }

    fn report_for(lie: &Lie, failed_check: &str) -> Report {
        let gates = GateName::ALL
            .iter()
            .map(|n| {
                let mut g = Gate::new(*n, expected_status(lie, *n), "fine");
                if *n == lie.target {
                    g.checks.push(Check {
                        name: failed_check.into(),
                        passed: false,
                        value: serde_json::json!(1),
                        expected: "2".into(),
                    });
                    g.reason = format!("{failed_check} failed: expected 2, saw 1");
                }
                g
            })
            .collect();
        Report {
            schema_version: sharedos_report::report::SCHEMA_VERSION,
            marker: "m".into(),
            all_gates_pass: false,
            exit_code: 1,
            gates,
            environment: Default::default(),
            artifacts: vec![],
            fidelity_differences: vec![],
            options: Default::default(),
            vm: None,
        }
    }

    #[test]
    fn judging_a_caught_lie_and_an_uncaught_one() {
        let lie = lie("restore-a-wrong-pixels").unwrap();
        assert!(judge(&lie, &report_for(&lie, "same_framebuffer")).is_empty());
        let wrong_check = judge(&lie, &report_for(&lie, "x_answers"));
        assert!(
            !wrong_check.is_empty(),
            "failing for another reason is not catching the lie"
        );
        let mut passed = report_for(&lie, "same_framebuffer");
        passed.gates[5].status = Status::Pass;
        passed.gates[5].checks.clear();
        assert!(judge(&lie, &passed).len() >= 2);
        let mut collateral = report_for(&lie, "same_framebuffer");
        collateral.gates[7].status = Status::Fail;
        let p = judge(&lie, &collateral);
        assert!(p.iter().any(|m| m.starts_with("reset is FAIL")), "{p:?}");
        let mut dirty = report_for(&lie, "same_framebuffer");
        dirty.gates[9].status = Status::Fail;
        assert!(judge(&lie, &dirty).iter().any(|m| m.starts_with("cleanup")));
    }

    #[test]
    fn the_table_has_a_row_per_lie() {
        let t = table_markdown();
        assert_eq!(t.lines().count(), LIES.len() + 2);
        assert!(t.contains("| `restore-reset-is-copy-b` |"));
        assert!(t.contains("| reset | `new_copy` |"));
        assert!(
            include_str!("../../README.md").contains(&t),
            "README.md's lie table is not the suite's: replace it with the output of \
             `cargo run -p sharedos-gate -- lie-suite --list`"
        );
    }

    #[test]
    fn a_dump_lie_leaves_the_restore_gates_not_run() {
        let lie = lie("dump-writes-nothing").unwrap();
        assert_eq!(expected_status(&lie, GateName::Dump), Status::Fail);
        assert_eq!(expected_status(&lie, GateName::Reset), Status::NotRun);
        assert_eq!(
            expected_status(&lie, GateName::LiveStateProbe),
            Status::Pass
        );
        assert_eq!(expected_status(&lie, GateName::Cleanup), Status::Pass);
    }

    #[test]
    fn the_density_lie_runs_with_copies_and_is_judged_on_the_density_gate() {
        let lie = lie("density-copy-wrong-token").unwrap();
        assert_eq!(lie.options, ["--copies", "2"]);
        assert!(LIES
            .iter()
            .filter(|l| l.target != GateName::Density)
            .all(|l| !l.options.contains(&"--copies")));
        // A report of the ten gates lacks the density gate the lie is caught by.
        let p = judge(&lie, &report_for(&lie, "all_same_token"));
        assert!(
            p.iter().any(|m| m.starts_with("density is missing")),
            "{p:?}"
        );
        let with = |density: Gate| {
            let mut r = report_for(&lie, "all_same_token");
            r.insert_gate(density);
            r
        };
        let mut caught = Gate::new(GateName::Density, Status::Fail, "all_same_token failed: x");
        caught.checks.push(Check {
            name: "all_same_token".into(),
            passed: false,
            value: serde_json::json!({"failed": [{"copy": "density-2"}]}),
            expected: "the dump-time token".into(),
        });
        assert!(judge(&lie, &with(caught.clone())).is_empty());
        let mut missed = caught;
        missed.status = Status::Pass;
        missed.checks[0].passed = true;
        assert!(!judge(&lie, &with(missed)).is_empty());
    }
}
