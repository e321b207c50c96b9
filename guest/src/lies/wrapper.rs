//! The criu stand-in: the script put in place of criu, which calls this binary as
//! `lying-criu`; which call a lie hits; and what the lie does there (a wrong exit, a spoiled
//! restore, a process left outside the user namespace, a truncated pstree image).

use super::{lie, Lie};
use anyhow::{bail, Context, Result};
use sharedos_report::report::GateName;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

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
            crate::gates::workload::type_into_editor(
                &c,
                crate::tree::EDITOR_CLASS,
                " changed-by-a-lie",
            )?;
        }
        "restore-b-page-field-shows-typed-text" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            crate::gates::chromium::type_into_field(&c, "-changed-by-a-lie")?;
        }
        "restore-reset-editor-lost-text" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            crate::gates::workload::clear_editor(&c, crate::tree::EDITOR_CLASS)?;
        }
        "restore-b-office-shows-typed-text" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            crate::gates::workload::type_into_editor(
                &c,
                crate::tree::OFFICE_CLASS,
                " changed-by-a-lie",
            )?;
        }
        "restore-reset-office-lost-text" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            crate::gates::workload::clear_editor(&c, crate::tree::OFFICE_CLASS)?;
        }
        "restore-b-workspace-switched" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            let now = crate::gates::session::read_workspace(&c)?;
            crate::gates::session::switch_workspace(&c, if now == 1 { 2 } else { 1 })?;
        }
        "restore-reset-workspace-first" => {
            let c = crate::x11::XConn::connect(&x_socket(pid)?)?;
            crate::gates::session::switch_workspace(&c, 0)?;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lies::LIES;

    fn sv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
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
}
