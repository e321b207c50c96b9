//! The one command type of the host crate: every external program the rig starts (the image
//! builder's tools, QEMU, qemu-img, ssh-keygen, cargo) is described by a [`Cmd`] built by a pure
//! function, so `--plan` prints exactly what a run executes and unit tests assert it. A failure
//! names the command line, the exit status and the tail of the output.

use crate::progress::Stage;
use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sharedos_report::signals;
use sharedos_report::text::quote;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// One external command, fully described, so `--plan` can print it and tests can assert it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cmd {
    pub argv: Vec<String>,
    pub env: Vec<(String, String)>,
}

impl Cmd {
    pub fn new(argv: Vec<String>) -> Cmd {
        Cmd {
            argv,
            env: Vec::new(),
        }
    }

    pub fn env(mut self, k: &str, v: &str) -> Cmd {
        self.env.push((k.to_string(), v.to_string()));
        self
    }

    /// `std::process::Command` for it, stdin from /dev/null; the caller picks stdout and stderr.
    /// The one place the crate makes a `Command` (clippy.toml disallows it everywhere else).
    #[allow(clippy::disallowed_methods)]
    pub fn command(&self) -> Command {
        let mut c = Command::new(&self.argv[0]);
        c.args(&self.argv[1..]).stdin(Stdio::null());
        for (k, v) in &self.env {
            c.env(k, v);
        }
        c
    }

    /// A shell-pasteable rendering.
    pub fn display(&self) -> String {
        let mut parts: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| format!("{k}={}", quote(v)))
            .collect();
        parts.extend(self.argv.iter().map(|a| quote(a)));
        parts.join(" ")
    }
}

const TAIL_LINES: usize = 30;

/// How often a running command's wait looks for an interrupt.
const POLL: Duration = Duration::from_millis(200);

/// How long an ended process group gets between SIGTERM and SIGKILL.
pub const GRACE: Duration = Duration::from_secs(5);

/// Runs `cmd` in a process group of its own, logging all output to `log` and showing its latest
/// line on the stage. Ctrl-C and SIGTERM reach only the rig, which ends the whole group here and
/// fails with the signal's name, instead of waiting out a build.
pub fn run(cmd: &Cmd, stage: &Stage, log: &Path, cwd: Option<&Path>) -> Result<()> {
    let mut logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening log {}", log.display()))?;
    writeln!(logf, "$ {}", cmd.display()).ok();
    let mut c = cmd.command();
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let mut child = c
        .spawn()
        .with_context(|| format!("starting `{}`", cmd.display()))?;
    let output = Output::follow(&mut child, logf)?;
    if let Err(e) = output.show_until_closed(stage) {
        end_group(&mut child, GRACE);
        return Err(e.context(format!(
            "`{}` did not finish; its process group was ended",
            cmd.display()
        )));
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for `{}`", cmd.display()))?;
    if !status.success() {
        let tail = output.tail();
        stage.suspend_println(&format!("command failed: {}", cmd.display()));
        bail!(
            "`{}` failed ({status})\n--- last {} lines of its output (full log: {}) ---\n{}",
            cmd.display(),
            tail.len(),
            log.display(),
            tail.join("\n")
        );
    }
    Ok(())
}

/// A child's standard output and error, each read by a thread into the log, the last lines and
/// a channel of lines.
struct Output {
    lines: Receiver<String>,
    tail: Arc<Mutex<VecDeque<String>>>,
    readers: Vec<JoinHandle<()>>,
}

impl Output {
    fn follow(child: &mut Child, log: std::fs::File) -> Result<Output> {
        let out: Box<dyn Read + Send> = match child.stdout.take() {
            Some(s) => Box::new(s),
            None => bail!("no stdout pipe"),
        };
        let err: Box<dyn Read + Send> = match child.stderr.take() {
            Some(s) => Box::new(s),
            None => bail!("no stderr pipe"),
        };
        let tail = Arc::new(Mutex::new(VecDeque::<String>::new()));
        let log = Arc::new(Mutex::new(log));
        let (tx, lines) = std::sync::mpsc::channel::<String>();
        let readers = [out, err]
            .into_iter()
            .map(|stream| {
                let (tail, log, tx) = (Arc::clone(&tail), Arc::clone(&log), tx.clone());
                std::thread::spawn(move || {
                    for line in BufReader::new(stream).lines().map_while(|l| l.ok()) {
                        if let Ok(mut f) = log.lock() {
                            let _ = writeln!(f, "{line}");
                        }
                        if let Ok(mut t) = tail.lock() {
                            if t.len() == TAIL_LINES {
                                t.pop_front();
                            }
                            t.push_back(line.clone());
                        }
                        let _ = tx.send(line);
                    }
                })
            })
            .collect();
        Ok(Output {
            lines,
            tail,
            readers,
        })
    }

    /// Shows each line on the stage until both streams close; fails at once on an interrupt.
    /// The reader threads are joined only when the streams closed: after an interrupt a
    /// process that left the group may still hold them open.
    fn show_until_closed(&self, stage: &Stage) -> Result<()> {
        loop {
            match self.lines.recv_timeout(POLL) {
                Ok(line) => stage.message(&line),
                Err(RecvTimeoutError::Disconnected) => return Ok(()),
                Err(RecvTimeoutError::Timeout) => {
                    if let Some(sig) = signals::interrupted() {
                        bail!("interrupted by {sig}");
                    }
                }
            }
        }
    }

    fn tail(self) -> Vec<String> {
        for r in self.readers {
            let _ = r.join();
        }
        self.tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// Ends `child`'s process group (the child leads it, see `process_group(0)`): SIGTERM, up to
/// `grace` for the leader to exit, then SIGKILL to the group. The leader is always reaped.
pub fn end_group(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        // Reaped already: its id may name another process by now; its group may live on, but
        // without a leader to name it.
        return;
    }
    let group = Pid::from_raw(-(child.id() as i32));
    let _ = kill(group, Signal::SIGTERM);
    // The wait runs because of a signal, often: it must not end at once because of one.
    let gone =
        sharedos_report::wait::until_through_signals("the group's leader to exit", grace, || {
            child.try_wait().ok().flatten()
        });
    // What the leader left behind in its group goes too.
    let _ = kill(group, Signal::SIGKILL);
    if gone.is_err() {
        let _ = child.wait();
    }
}

/// Runs a short command and returns its stdout; used for probes, version strings and the
/// quick tools of a run (ssh-keygen, qemu-img).
pub fn capture(cmd: &Cmd) -> Result<String> {
    let out = cmd
        .command()
        .output()
        .with_context(|| format!("running `{}`", cmd.display()))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            cmd.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// What a bounded run of a command left: its exit code (None: ended by a signal) and the first
/// bytes of each stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Captured {
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs a short command in a process group of its own, keeping at most `max_bytes` of each
/// stream (the rest is read and dropped, so the command never blocks on a full pipe), and ends
/// the group when it runs past `timeout` or an interrupt arrives. For programs whose output
/// is not the rig's own (a gate binary given with --gate-binary): bounded in time and size.
pub fn capture_bounded(cmd: &Cmd, timeout: Duration, max_bytes: usize) -> Result<Captured> {
    let mut child = cmd
        .command()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .with_context(|| format!("starting `{}`", cmd.display()))?;
    let readers: Vec<JoinHandle<Vec<u8>>> = [
        child
            .stdout
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
        child
            .stderr
            .take()
            .map(|s| Box::new(s) as Box<dyn Read + Send>),
    ]
    .into_iter()
    .flatten()
    .map(|stream| {
        std::thread::spawn(move || {
            let mut kept = Vec::new();
            let mut stream = stream;
            let _ = (&mut stream).take(max_bytes as u64).read_to_end(&mut kept);
            let _ = std::io::copy(&mut stream, &mut std::io::sink());
            kept
        })
    })
    .collect();
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child
            .try_wait()
            .with_context(|| format!("waiting for `{}`", cmd.display()))?
        {
            break st;
        }
        if let Some(sig) = signals::interrupted() {
            end_group(&mut child, GRACE);
            bail!("interrupted by {sig} while running `{}`", cmd.display());
        }
        if std::time::Instant::now() >= deadline {
            end_group(&mut child, GRACE);
            bail!(
                "`{}` did not finish within {:.1} s; its process group was ended",
                cmd.display(),
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut streams = readers
        .into_iter()
        .map(|r| String::from_utf8_lossy(&r.join().unwrap_or_default()).into_owned());
    Ok(Captured {
        code: status.code(),
        stdout: streams.next().unwrap_or_default(),
        stderr: streams.next().unwrap_or_default(),
    })
}

/// Runs a short command with its output discarded and says whether it exited 0; a command
/// that cannot start counts as failing. For probes whose answer is only yes or no.
pub fn succeeds(cmd: &Cmd) -> bool {
    cmd.command()
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::progress::Progress;

    #[test]
    fn display_quotes_what_the_shell_would_split() {
        let c = Cmd::new(vec![
            "sh".into(),
            "-c".into(),
            "echo 'hi' $1".into(),
            "a=b".into(),
        ])
        .env("SOURCE_DATE_EPOCH", "1");
        assert_eq!(
            c.display(),
            r#"SOURCE_DATE_EPOCH=1 sh -c 'echo '\''hi'\'' $1' a=b"#
        );
    }

    #[test]
    fn failure_shows_argv_status_and_tail() {
        let dir = std::env::temp_dir().join(format!("exec-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("log");
        let c = Cmd::new(vec![
            "sh".into(),
            "-c".into(),
            "for i in $(seq 1 50); do echo line$i; done; echo oops >&2; exit 3".into(),
        ]);
        let e = run(&c, &Progress::plain("test").stage("t"), &log, None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("for i in"), "{e}");
        assert!(e.contains("exit status: 3"), "{e}");
        assert!(
            e.contains("oops") && e.contains("line50") && !e.contains("line10\n"),
            "{e}"
        );
        assert!(std::fs::read_to_string(&log).unwrap().contains("line1\n"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn capture_bounded_keeps_the_code_and_a_bounded_output_and_ends_a_hang() {
        let sh = |script: &str| Cmd::new(vec!["sh".into(), "-c".into(), script.into()]);
        let c = capture_bounded(
            &sh("echo out; head -c 100000 /dev/zero | tr '\\0' x >&2; exit 2"),
            Duration::from_secs(20),
            1000,
        )
        .unwrap();
        assert_eq!(c.code, Some(2));
        assert_eq!(c.stdout, "out\n");
        assert_eq!(c.stderr.len(), 1000);
        let e = capture_bounded(&sh("sleep 30"), Duration::from_millis(300), 1000)
            .unwrap_err()
            .to_string();
        assert!(e.contains("did not finish within 0.3 s"), "{e}");
    }

    #[test]
    fn succeeds_is_the_exit_status_and_false_for_a_missing_program() {
        assert!(succeeds(&Cmd::new(vec!["true".into()])));
        assert!(!succeeds(&Cmd::new(vec![
            "sh".into(),
            "-c".into(),
            "echo noise; echo more >&2; exit 1".into()
        ])));
        assert!(!succeeds(&Cmd::new(vec!["/nonexistent/probe".into()])));
    }
}
