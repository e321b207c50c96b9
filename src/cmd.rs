//! The one command type of the host crate: every external program the rig starts (the image
//! builder's tools, QEMU, qemu-img, ssh-keygen, cargo) is described by a [`Cmd`] built by a pure
//! function, so `--plan` prints exactly what a run executes and unit tests assert it. A failure
//! names the command line, the exit status and the tail of the output.

use crate::progress::Stage;
use anyhow::{bail, Context, Result};
use sharedos_report::text::quote;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};

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

/// Runs `cmd`, logging all output to `log` and showing its latest line on the stage.
pub fn run(cmd: &Cmd, stage: &Stage, log: &Path, cwd: Option<&Path>) -> Result<()> {
    let mut logf = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening log {}", log.display()))?;
    writeln!(logf, "$ {}", cmd.display()).ok();
    let mut c = cmd.command();
    c.stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(d) = cwd {
        c.current_dir(d);
    }
    let mut child = c
        .spawn()
        .with_context(|| format!("starting `{}`", cmd.display()))?;
    let tail = Arc::new(Mutex::new(VecDeque::<String>::new()));
    let logf = Arc::new(Mutex::new(logf));
    let mut readers = Vec::new();
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out: Box<dyn std::io::Read + Send> = match child.stdout.take() {
        Some(s) => Box::new(s),
        None => bail!("no stdout pipe"),
    };
    let err: Box<dyn std::io::Read + Send> = match child.stderr.take() {
        Some(s) => Box::new(s),
        None => bail!("no stderr pipe"),
    };
    for stream in [out, err] {
        let tail = Arc::clone(&tail);
        let logf = Arc::clone(&logf);
        let tx = tx.clone();
        readers.push(std::thread::spawn(move || {
            for line in BufReader::new(stream).lines().map_while(|l| l.ok()) {
                if let Ok(mut f) = logf.lock() {
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
        }));
    }
    drop(tx);
    for line in rx {
        stage.message(&line);
    }
    for r in readers {
        let _ = r.join();
    }
    let status = child
        .wait()
        .with_context(|| format!("waiting for `{}`", cmd.display()))?;
    if !status.success() {
        let tail: Vec<String> = tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default();
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
