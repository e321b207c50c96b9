//! The one progress type of the host crate: what a long job (an image build, a vm-run, a
//! matrix) tells the person waiting. One spinner per stage on a terminal, plain `[scope] ...`
//! lines otherwise (stdout is for the result a caller captures, e.g. `dir=$(...)`). The phases
//! below it send typed events; their front ends turn each into a line and print it here.

// The one place this crate prints (clippy.toml disallows the print macros elsewhere).
#![allow(clippy::disallowed_macros)]

use indicatif::{ProgressBar, ProgressStyle};
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// Progress output for one job; `scope` names the job on every plain line.
#[derive(Clone, Copy, Debug)]
pub struct Progress {
    fancy: bool,
    scope: &'static str,
}

impl Progress {
    /// Spinners only when both stdout and stderr are a terminal: plain lines whenever the
    /// output is captured.
    pub fn new(scope: &'static str) -> Progress {
        Progress {
            fancy: std::io::stdout().is_terminal() && std::io::stderr().is_terminal(),
            scope,
        }
    }

    pub fn plain(scope: &'static str) -> Progress {
        Progress {
            fancy: false,
            scope,
        }
    }

    pub fn note(&self, msg: &str) {
        eprintln!("[{}] {msg}", self.scope);
    }

    /// A line of the job's result on stdout, for a caller to capture: the report directory, a
    /// plan, the output of a command run in the guest.
    pub fn result(&self, line: &str) {
        println!("{line}");
    }

    /// A block the person waiting reads whole (a table), on standard error like the notes.
    pub fn block(&self, text: &str) {
        eprint!("{text}");
    }

    /// The job's own failure, as the last word before its exit code, in the one format every
    /// command prints errors in (`escape::error_chain`: escaped, one `caused by:` per cause).
    pub fn error(&self, e: &anyhow::Error) {
        eprint!("{}", crate::escape::error_chain(e));
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
            self.note(&format!("{name} ..."));
            None
        };
        Stage {
            progress: *self,
            name: name.to_string(),
            bar,
            start: Instant::now(),
        }
    }
}

pub struct Stage {
    progress: Progress,
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
            None => self.progress.note(&line),
        }
        took
    }

    /// A line that must not be overwritten by the spinner.
    pub fn suspend_println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| self.progress.note(line)),
            None => self.progress.note(line),
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
