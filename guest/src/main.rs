use anyhow::{bail, Context, Result};
use clap::{Parser, Subcommand};
use sharedos_gate::gates::fidelity;
use sharedos_gate::gates::Config;
use sharedos_gate::tree::TreeSpec;
use sharedos_gate::{diagnose, lies, migrate, output, stateapp, tree, vmfork};
use sharedos_report::report::{CgroupLimits, Copies, Gate, RunOptions, Workload};
use std::path::PathBuf;
use std::time::Duration;

/// The sharedos gate diagnostic: launches a namespaced Xvfb + xterm + app tree, probes it,
/// checkpoints and restores it with CRIU, and reports ten gates.
#[derive(Parser)]
#[command(name = "sharedos-gate", version)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Run the ten gates on this machine (needs root) and write the report.
    Diagnose(DiagnoseArgs),
    /// Internal: started after unshare(2); forks the tree's PID 1.
    #[command(hide = true)]
    TreeSpawn {
        #[arg(long)]
        marker: String,
        #[arg(long, value_parser = parse_display)]
        display: u32,
        #[arg(long)]
        root: PathBuf,
        #[arg(long)]
        cgroup: Option<PathBuf>,
        #[arg(long)]
        userns: bool,
        #[arg(long, value_parser = parse_workload, default_value = "xterm")]
        workload: Workload,
        #[arg(long)]
        exe: PathBuf,
    },
    /// Internal: PID 1 of the tree.
    #[command(hide = true)]
    TreeInit {
        #[arg(long)]
        marker: String,
        #[arg(long, value_parser = parse_display)]
        display: u32,
        #[arg(long, value_parser = parse_workload, default_value = "xterm")]
        workload: Workload,
        #[arg(long)]
        exe: PathBuf,
    },
    /// Runs the diagnostic once per lie of a lying criu and checks each lie is caught by the
    /// gate that looks at what it breaks (needs root and a criu whose `criu check` succeeds).
    LieSuite {
        /// The real criu the lying wrapper passes calls through to.
        #[arg(long, default_value = "/usr/sbin/criu")]
        criu: PathBuf,
        /// Scratch directory, one subdirectory per lie.
        #[arg(long, default_value = "/tmp/sharedos-lie-suite")]
        work: PathBuf,
        /// Where each lie's report and the summary lies.json go.
        #[arg(long, required_unless_present = "list")]
        out: Option<PathBuf>,
        #[arg(long, default_value = ":172", value_parser = parse_display)]
        display: u32,
        #[arg(long, default_value_t = 60)]
        step_timeout: u64,
        /// Only these lies (by name); all of them when absent.
        #[arg(long)]
        lie: Vec<String>,
        /// Print the lies as a Markdown table and run nothing.
        #[arg(long)]
        list: bool,
        /// Without --lie: run the lies of this workload (the image must hold its programs).
        #[arg(long, value_parser = parse_workload, default_value = "xterm")]
        workload: Workload,
    },
    /// Internal: a criu that passes every call through to --real but the one its lie hits.
    #[command(hide = true)]
    LyingCriu {
        #[arg(long)]
        real: PathBuf,
        #[arg(long)]
        lie: String,
        #[arg(long)]
        state: PathBuf,
        #[arg(last = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Internal: the stateful probe app.
    #[command(hide = true)]
    Stateapp {
        #[arg(long)]
        marker: String,
        #[arg(long)]
        socket: PathBuf,
    },
}

#[derive(clap::Args)]
struct DiagnoseArgs {
    /// Print every command the run would execute, and execute nothing.
    #[arg(long)]
    plan: bool,
    /// Check the other arguments as a run would take them, and do nothing else: exit 0 when
    /// they are good, else say what is wrong and exit 2. The host runs this before it boots.
    #[arg(long)]
    check_args: bool,
    /// Scratch directory: CRIU images, the tree's root bind, command output.
    /// [default: /tmp/sharedos-gate-<marker>]
    #[arg(long)]
    work: Option<PathBuf>,
    /// Where the report goes; artifacts are written beside it. [default: <work>/report/report.json]
    #[arg(long)]
    out: Option<PathBuf>,
    /// X display number inside the tree.
    #[arg(long, default_value = ":170", value_parser = parse_display)]
    display: u32,
    /// Marker carried by every process of the tree. [default: spike-<12 random hex>]
    #[arg(long, value_parser = parse_marker)]
    marker: Option<String>,
    /// criu binary to use instead of the one on PATH.
    #[arg(long)]
    criu: Option<PathBuf>,
    /// Bound, in seconds, of any single step (one command, one wait). Raise it under emulation.
    #[arg(long, default_value_t = 60)]
    step_timeout: u64,
    /// Also run the density gate: restore N copies (1 to 64) of the dump at once, or search
    /// upward for the most that fit (`max`).
    #[arg(long, value_parser = parse_copies)]
    copies: Option<Copies>,
    /// With --copies max: stop the search at N copies (1 to 64) at most, a bound named like the
    /// others.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    max_copies: Option<u32>,
    /// Run the tree, and each restored copy, in a cgroup v2 group of its own with these limits,
    /// both required: cpu=N (N CPUs of quota) and memory=SIZE (memory.max), e.g.
    /// cpu=1,memory=512M.
    #[arg(long, value_parser = fidelity::parse_cgroup_limits, value_name = "cpu=N,memory=SIZE")]
    cgroup: Option<CgroupLimits>,
    /// Give the tree, and each restored copy, a writable overlay of its own over the read-only
    /// root; a copy's layer starts as the original's was at the dump.
    #[arg(long)]
    cow_root: bool,
    /// Run the tree in a user namespace of its own, root inside mapped to uids and gids
    /// 100000-165535 outside.
    #[arg(long)]
    userns: bool,
    /// What the tree runs beside Xvfb and the state app: `xterm` (the SPEC's tree), `desktop`
    /// (openbox, the GTK editor mousepad with a typed token, a D-Bus session bus), `browser`
    /// (Firefox ESR with its sandbox on, showing a local page), `browser-nosandbox` (the same
    /// browser with its sandboxes off), `session` (a full XFCE session: xfce4-session, xfwm4,
    /// xfce4-panel, xfsettingsd, xfconfd on its D-Bus session bus), `office` (openbox,
    /// LibreOffice Writer with a token typed into an unsaved document), `chromium` (Debian's
    /// Chromium with its sandbox on, as an unprivileged user, showing a page with a counter and
    /// a typed field) or `chromium-nosandbox` (the same with `--no-sandbox`). The image must hold
    /// the workload's programs.
    #[arg(long, value_parser = parse_workload, default_value = "xterm")]
    workload: Workload,
    /// With --copies N: the restored copies opt in to the guest's KSM (PR_SET_MEMORY_MERGE,
    /// Linux 6.4 and later), which then merges their pages at full pace, and every copy is read
    /// again once the readings hold steady. On an older kernel the reading is NOT_RUN, saying
    /// why.
    #[arg(long, requires = "copies")]
    guest_ksm: bool,
    /// The first half of a migration (`cargo xtask vm-migrate`): run the gates up to and
    /// including the dump, and keep the CRIU images and the dump-time state in the report's
    /// checkpoint/ for another guest.
    #[arg(long, conflicts_with_all = ["migrate_restore", "copies"])]
    migrate_dump: bool,
    /// The second half of a migration: take the checkpoint the host sent into DIR (its
    /// MANIFEST, images/, state.json, dump-time.png) and run the restore gates on it. Give the
    /// dump side's --marker and --display.
    #[arg(
        long,
        value_name = "DIR",
        requires = "since_dump_ms",
        conflicts_with = "copies"
    )]
    migrate_restore: Option<PathBuf>,
    /// With --migrate-restore: an upper bound, in milliseconds, of the time since the dump
    /// side's dump-time app query (the host measures it).
    #[arg(long, value_name = "MS", requires = "migrate_restore")]
    since_dump_ms: Option<u64>,
    /// A copy of the whole guest (`cargo xtask vm-compare`): after the live probe, record the
    /// tree's state, write <work>/fork-ready, and wait for PATH. The host saves the VM meanwhile
    /// and writes PATH in each copy it resumes; there the tree is checked against its fork-time
    /// state and cleaned up. CRIU's gates do not run.
    #[arg(
        long,
        value_name = "PATH",
        conflicts_with_all = ["migrate_dump", "migrate_restore", "copies"]
    )]
    vm_fork_go: Option<PathBuf>,
    /// With --vm-fork-go: how long to wait for PATH, in seconds.
    #[arg(
        long,
        value_name = "SECS",
        default_value_t = 1800,
        requires = "vm_fork_go"
    )]
    vm_fork_wait: u64,
}

fn parse_workload(s: &str) -> Result<Workload, String> {
    Workload::parse(s).ok_or_else(|| {
        format!(
            "`{s}` is not a workload: give one of {}",
            Workload::ALL.map(Workload::as_str).join(", ")
        )
    })
}

fn parse_copies(s: &str) -> Result<Copies, String> {
    use sharedos_report::model::density::MAX_COPIES;
    if s == "max" {
        return Ok(Copies::Max);
    }
    s.parse::<u32>()
        .ok()
        .filter(|n| (1..=MAX_COPIES).contains(n))
        .map(Copies::Count)
        .ok_or_else(|| format!("`{s}` is not a number of copies: give 1 to {MAX_COPIES}, or `max` to search for the most that fit"))
}

fn parse_display(s: &str) -> Result<u32, String> {
    s.trim_start_matches(':')
        .parse::<u32>()
        .ok()
        .filter(|n| *n < 65_000)
        .ok_or_else(|| format!("`{s}` is not a display: write it as :N, e.g. :170"))
}

fn parse_marker(s: &str) -> Result<String, String> {
    let ok = (6..=64).contains(&s.len())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(s.to_string())
    } else {
        Err(format!(
            "`{s}` is not a usable marker: use 6 to 64 letters, digits, '-' or '_' (it goes on command lines)"
        ))
    }
}

fn absolute(p: PathBuf) -> Result<PathBuf> {
    if p.is_absolute() {
        return Ok(p);
    }
    Ok(std::env::current_dir()
        .context("reading the current directory")?
        .join(p))
}

/// Every file beside the report is listed as an artifact of this run, so files of an earlier
/// run there would pass for this run's evidence.
fn refuse_non_empty_report_dir(out: &std::path::Path) -> Result<()> {
    let dir = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => return Ok(()),
    };
    let first = match std::fs::read_dir(dir) {
        Ok(mut rd) => rd.next().and_then(|e| e.ok()).map(|e| e.file_name()),
        Err(_) => None,
    };
    if let Some(name) = first {
        bail!(
            "the report directory {} is not empty (it holds {}): every file beside the report is listed as this run's artifact, so give --out a file in a new or empty directory",
            dir.display(),
            name.to_string_lossy()
        );
    }
    Ok(())
}

fn diagnose_main(a: DiagnoseArgs) -> Result<i32> {
    // Every check of the arguments is in their parsers, so parsing them was the whole check.
    if a.check_args {
        return Ok(0);
    }
    let marker = match a.marker {
        Some(m) => m,
        None => format!("spike-{}", sharedos_report::random::random_hex(6)?),
    };
    let work = absolute(
        a.work
            .unwrap_or_else(|| PathBuf::from(format!("/tmp/sharedos-gate-{marker}"))),
    )?;
    let out = absolute(a.out.unwrap_or_else(|| work.join("report/report.json")))?;
    if out.is_dir() {
        bail!(
            "--out {} is a directory: give the report's file name, e.g. {}/report.json",
            out.display(),
            out.display()
        );
    }
    if !a.plan {
        refuse_non_empty_report_dir(&out)?;
    }
    if a.max_copies.is_some() && a.copies != Some(Copies::Max) {
        anyhow::bail!(
            "--max-copies bounds the search of --copies max: give --copies max, or leave --max-copies out"
        );
    }
    let cfg = Config {
        work,
        out: out.clone(),
        display: a.display,
        marker,
        criu: a.criu.map(absolute).transpose()?,
        step_timeout: Duration::from_secs(a.step_timeout.max(1)),
        exe: std::env::current_exe().context("locating this binary")?,
        argv: std::env::args().collect(),
        options: RunOptions {
            copies: a.copies,
            max_copies: a.max_copies,
            cgroup: a.cgroup,
            cow_root: a.cow_root,
            userns: a.userns,
            workload: a.workload,
            guest_ksm: a.guest_ksm,
        },
        progress: output::progress,
    };
    if a.plan {
        output::text(&diagnose::render_plan(&cfg));
        return Ok(0);
    }
    output::started(&cfg);
    let total = cfg.options.gates().len();
    let mut n = 0;
    let restore_side;
    let fork;
    let phase: &dyn diagnose::Phase = match (a.vm_fork_go, a.migrate_dump, a.migrate_restore) {
        (Some(go), _, _) => {
            fork = vmfork::VmFork {
                go: absolute(go)?,
                wait: Duration::from_secs(a.vm_fork_wait),
            };
            &fork
        }
        (None, true, _) => &migrate::DumpSide,
        (None, false, Some(from)) => {
            restore_side = migrate::RestoreSide {
                from: absolute(from)?,
                since_dump: Duration::from_millis(a.since_dump_ms.unwrap_or(0)),
            };
            &restore_side
        }
        (None, false, None) => &diagnose::Whole,
    };
    let report = diagnose::run_phase(cfg, phase, &mut |g: &Gate| {
        n += 1;
        output::gate(n, total, g);
    });
    match diagnose::write_report(&report, &out) {
        Ok(()) => output::verdict(&report, &out),
        Err(e) => output::report_instead(&e, &report)?,
    }
    Ok(report.exit_code)
}

fn main() {
    let cli = Cli::parse();
    let result = match cli.command {
        Cmd::Diagnose(a) => diagnose_main(a),
        Cmd::TreeSpawn {
            marker,
            display,
            root,
            cgroup,
            userns,
            workload,
            exe,
        } => tree::spawn_main(&TreeSpec {
            marker,
            display,
            root,
            cgroup,
            userns,
            workload,
            exe,
        })
        .map(|pid| {
            pid.into_iter().for_each(output::tree_pid);
            0
        }),
        Cmd::TreeInit {
            marker,
            display,
            workload,
            exe,
        } => {
            let spec = TreeSpec {
                marker,
                display,
                root: PathBuf::from("/"),
                cgroup: None,
                userns: false,
                workload,
                exe,
            };
            tree::init_main(&spec, &mut output::tree_log).map(|()| 0)
        }
        Cmd::Stateapp { marker: _, socket } => stateapp::serve(&socket).map(|()| 0),
        Cmd::LyingCriu {
            real,
            lie,
            state,
            args,
        } => lies::wrapper_main(&real, &lie, &state, &args, &mut output::lie_told),
        Cmd::LieSuite { list: true, .. } => {
            output::text(&lies::table_markdown());
            Ok(0)
        }
        Cmd::LieSuite {
            criu,
            work,
            out,
            display,
            step_timeout,
            lie,
            list: false,
            workload,
        } => absolute(work).and_then(|work| {
            let cfg = lies::SuiteConfig {
                real_criu: absolute(criu)?,
                work,
                out: absolute(out.context("--out is required")?)?,
                display,
                step_timeout,
                only: lie,
                workload,
            };
            let result = lies::suite_main(&cfg, &mut output::lie)?;
            output::suite(&result);
            Ok(result.exit_code())
        }),
    };
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            output::error(&e);
            std::process::exit(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn diagnose(args: &[&str]) -> Result<DiagnoseArgs, clap::Error> {
        let argv = ["sharedos-gate", "diagnose", "--check-args"]
            .iter()
            .chain(args)
            .copied();
        match Cli::try_parse_from(argv)?.command {
            Cmd::Diagnose(a) => Ok(a),
            _ => unreachable!("diagnose parses as diagnose"),
        }
    }

    #[test]
    fn check_args_accepts_good_arguments() {
        let a = diagnose(&[
            "--work",
            "/root/work",
            "--userns",
            "--cgroup",
            "cpu=1,memory=512M",
            "--copies",
            "max",
            "--workload",
            "desktop",
        ])
        .unwrap();
        assert!(a.check_args);
        assert_eq!(diagnose_main(a).unwrap(), 0);
    }

    #[test]
    fn check_args_rejects_bad_arguments_with_the_parsers_message() {
        for (bad, says) in [
            (
                &["--cgroup", "memory=512M"][..],
                "gives no cpu=: it needs both",
            ),
            (
                &["--cgroup", "cpu=1"][..],
                "gives no memory=: it needs both",
            ),
            (&["--copies", "65"][..], "not a number of copies"),
            (&["--workload", "kde"][..], "not a workload"),
            (&["--no-such-flag"][..], "--no-such-flag"),
        ] {
            let e = diagnose(bad)
                .err()
                .unwrap_or_else(|| panic!("{bad:?} parsed"));
            assert_eq!(e.exit_code(), 2, "{bad:?}");
            let text = e.to_string();
            assert!(text.contains(says), "{bad:?}: {text}");
        }
    }
}
