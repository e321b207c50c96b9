//! Running the build's external commands: one spinner per stage on a terminal, plain lines
//! otherwise; a failure names the argv, the exit status and the tail of the output.

use anyhow::{bail, Context, Result};
use indicatif::{ProgressBar, ProgressStyle};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, IsTerminal, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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

pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// Progress output for one build.
pub struct Progress {
    fancy: bool,
}

impl Progress {
    pub fn new() -> Progress {
        // The issue asks for plain lines whenever stdout is not a terminal, e.g. `dir=$(...)`.
        Progress {
            fancy: std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
        }
    }

    pub fn plain() -> Progress {
        Progress { fancy: false }
    }

    pub fn note(&self, msg: &str) {
        eprintln!("[image] {msg}");
    }

    pub fn stage(&self, name: &str) -> Stage {
        let bar = if self.fancy {
            let b = ProgressBar::new_spinner();
            b.set_style(
                ProgressStyle::with_template("{spinner} [{elapsed:>4}] {prefix}: {wide_msg}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            b.set_prefix(name.to_string());
            b.enable_steady_tick(Duration::from_millis(120));
            Some(b)
        } else {
            eprintln!("[image] {name} ...");
            None
        };
        Stage {
            name: name.to_string(),
            bar,
            start: Instant::now(),
        }
    }
}

impl Default for Progress {
    fn default() -> Self {
        Progress::new()
    }
}

pub struct Stage {
    name: String,
    bar: Option<ProgressBar>,
    start: Instant,
}

impl Stage {
    pub fn message(&self, msg: &str) {
        if let Some(b) = &self.bar {
            b.set_message(msg.to_string());
        }
    }

    pub fn finish(self) -> Duration {
        let took = self.start.elapsed();
        let line = format!("{} done in {:.1} s", self.name, took.as_secs_f64());
        match &self.bar {
            Some(b) => b.finish_with_message(format!("done in {:.1} s", took.as_secs_f64())),
            None => eprintln!("[image] {line}"),
        }
        took
    }

    fn suspend_println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }
}

impl Drop for Stage {
    fn drop(&mut self) {
        if let Some(b) = &self.bar {
            if !b.is_finished() {
                b.abandon();
            }
        }
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
    let mut c = Command::new(&cmd.argv[0]);
    c.args(&cmd.argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in &cmd.env {
        c.env(k, v);
    }
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
        stage.suspend_println(&format!("[image] command failed: {}", cmd.display()));
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

/// Runs a short command and returns its stdout; used for probes and version strings.
pub fn capture(argv: &[&str]) -> Result<String> {
    let out = Command::new(argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running `{}`", argv.join(" ")))?;
    if !out.status.success() {
        bail!(
            "`{}` failed ({}): {}",
            argv.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Host tools and the Debian/Ubuntu package that provides each.
pub const TOOL_PACKAGES: &[(&str, &str)] = &[
    ("mmdebstrap", "mmdebstrap"),
    ("genext2fs", "genext2fs"),
    ("tar", "tar"),
    ("apt-get", "apt"),
    ("dpkg", "dpkg"),
    ("gpgv", "gpgv"),
    ("unshare", "util-linux"),
    ("newuidmap", "uidmap"),
    ("newgidmap", "uidmap"),
    ("fakechroot", "fakechroot"),
    ("fakeroot", "fakeroot"),
];

/// Names every missing tool with the package to install.
pub fn missing_tools(tools: &[&str]) -> Vec<String> {
    tools
        .iter()
        .filter(|t| sharedos_gate::gates::find_program(t).is_none())
        .map(|t| {
            let pkg = TOOL_PACKAGES
                .iter()
                .find(|(n, _)| n == t)
                .map(|(_, p)| *p)
                .unwrap_or(t);
            format!("{t} (apt install {pkg})")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let e = run(&c, &Progress::plain().stage("t"), &log, None)
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
    fn missing_tools_name_their_package() {
        let m = missing_tools(&["sh", "newuidmap-surely-absent", "genext2fs-nope"]);
        assert_eq!(m.len(), 2);
        assert!(m[0].contains("newuidmap-surely-absent"));
        let m = missing_tools(&["sh"]);
        assert!(m.is_empty());
        assert!(TOOL_PACKAGES.contains(&("newuidmap", "uidmap")));
    }
}
