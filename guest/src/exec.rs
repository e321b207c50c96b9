//! Runs one external command with a timeout and turns what happened into report evidence.

use sharedos_report::report::Evidence;
use sharedos_report::signals;
use sharedos_report::text::tail;
use std::fs::File;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// What a command printed, in full, beside the evidence that keeps only the tails.
pub struct Outcome {
    pub evidence: Evidence,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn success(&self) -> bool {
        self.evidence.exit_code == Some(0) && !self.evidence.timed_out
    }

    /// A command that was not started because `why`: evidence that says so, and no success.
    pub fn refused(step: &str, argv: &[String], why: &str) -> Outcome {
        Outcome {
            evidence: Evidence {
                step: step.to_string(),
                argv: argv.to_vec(),
                note: format!("not run: {why}"),
                ..Evidence::default()
            },
            stdout: String::new(),
            stderr: String::new(),
        }
    }

    /// A one-line account for gate reasons.
    pub fn summary(&self) -> String {
        let e = &self.evidence;
        let how = if e.timed_out {
            format!("timed out after {} ms", e.duration_ms)
        } else if let Some(c) = e.exit_code {
            format!("exited {c}")
        } else if let Some(s) = e.signal {
            format!("killed by signal {s}")
        } else {
            e.note.clone()
        };
        let last = last_line(&self.stderr).or_else(|| last_line(&self.stdout));
        match last {
            Some(l) => format!("`{}` {how}: {l}", e.argv.join(" ")),
            None => format!("`{}` {how}", e.argv.join(" ")),
        }
    }
}

fn last_line(s: &str) -> Option<String> {
    s.lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .map(|l| l.trim().to_string())
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// Runs `argv` with stdin closed and its output captured in `scratch`. Never panics and never
/// returns early without the evidence: a command that cannot start is evidence too.
pub fn run(step: &str, argv: &[String], timeout: Duration, scratch: &Path) -> Outcome {
    run_with(step, argv, timeout, scratch, |_| {})
}

/// As `run`, with a hook that adjusts the command first (environment, a pre-exec step).
pub fn run_with(
    step: &str,
    argv: &[String],
    timeout: Duration,
    scratch: &Path,
    configure: impl FnOnce(&mut Command),
) -> Outcome {
    let start = Instant::now();
    let mut ev = Evidence {
        step: step.to_string(),
        argv: argv.to_vec(),
        ..Evidence::default()
    };
    let n = SEQ.fetch_add(1, Ordering::SeqCst);
    let out_path = scratch.join(format!("cmd-{n:03}.out"));
    let err_path = scratch.join(format!("cmd-{n:03}.err"));
    let result = spawn_and_wait(argv, timeout, &out_path, &err_path, &mut ev, configure);
    ev.duration_ms = start.elapsed().as_millis() as u64;
    if let Err(e) = result {
        ev.note = e;
    }
    let stdout = read_lossy(&out_path);
    let stderr = read_lossy(&err_path);
    ev.stdout_tail = tail(&stdout, 20, 4000);
    ev.stderr_tail = tail(&stderr, 20, 4000);
    Outcome {
        evidence: ev,
        stdout,
        stderr,
    }
}

fn read_lossy(p: &PathBuf) -> String {
    std::fs::read(p)
        .map(|b| String::from_utf8_lossy(&b).into_owned())
        .unwrap_or_default()
}

/// The one place the gate binary makes a `Command` (clippy.toml disallows it elsewhere): the
/// evidence-recording runner above uses it, and so do the few callers that must exec or pass a
/// call through as it is (the tree's PID 1, the lying criu wrapper).
#[allow(clippy::disallowed_methods)]
pub fn command(program: impl AsRef<std::ffi::OsStr>) -> Command {
    Command::new(program)
}

fn spawn_and_wait(
    argv: &[String],
    timeout: Duration,
    out_path: &Path,
    err_path: &Path,
    ev: &mut Evidence,
    configure: impl FnOnce(&mut Command),
) -> Result<(), String> {
    let (prog, args) = argv.split_first().ok_or("empty command line")?;
    let out =
        File::create(out_path).map_err(|e| format!("cannot create {}: {e}", out_path.display()))?;
    let err =
        File::create(err_path).map_err(|e| format!("cannot create {}: {e}", err_path.display()))?;
    let mut cmd = command(prog);
    cmd.args(args)
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        // Its own process group, so a timeout can kill what it started too, and the terminal's
        // Ctrl-C reaches only us: we decide what to stop.
        .process_group(0);
    configure(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("could not start {prog}: {e}"))?;
    let start = Instant::now();
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                ev.exit_code = status.code();
                ev.signal = status.signal();
                return Ok(());
            }
            Ok(None) => {}
            Err(e) => return Err(format!("waiting for {prog}: {e}")),
        }
        let interrupted = signals::interrupted();
        if start.elapsed() >= timeout || interrupted.is_some() {
            let pgid = nix::unistd::Pid::from_raw(-(child.id() as i32));
            let _ = nix::sys::signal::kill(pgid, nix::sys::signal::Signal::SIGKILL);
            let status = child.wait().map_err(|e| format!("reaping {prog}: {e}"))?;
            ev.signal = status.signal();
            ev.timed_out = interrupted.is_none();
            return Err(match interrupted {
                Some(s) => format!("interrupted by {s}; {prog} was killed"),
                None => format!(
                    "no exit within {:.1} s; {prog} was killed",
                    timeout.as_secs_f64()
                ),
            });
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch() -> PathBuf {
        let d = std::env::temp_dir().join(format!("exec-test-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn sv(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn captures_exit_code_and_output() {
        let o = run(
            "t",
            &sv(&["sh", "-c", "echo out; echo err >&2; exit 7"]),
            Duration::from_secs(10),
            &scratch(),
        );
        assert_eq!(o.evidence.exit_code, Some(7));
        assert_eq!(o.stdout.trim(), "out");
        assert_eq!(o.evidence.stderr_tail, "err");
        assert!(!o.success());
        assert!(o.summary().contains("exited 7: err"), "{}", o.summary());
    }

    #[test]
    fn times_out_and_kills() {
        let o = run(
            "t",
            &sv(&["sleep", "30"]),
            Duration::from_millis(200),
            &scratch(),
        );
        assert!(o.evidence.timed_out);
        assert_eq!(o.evidence.signal, Some(9));
        assert!(o.evidence.duration_ms < 30_000);
    }

    #[test]
    fn missing_program_is_evidence() {
        let o = run(
            "t",
            &sv(&["/nonexistent/criu", "check"]),
            Duration::from_secs(1),
            &scratch(),
        );
        assert_eq!(o.evidence.exit_code, None);
        assert!(
            o.evidence.note.contains("could not start"),
            "{:?}",
            o.evidence
        );
    }
}
