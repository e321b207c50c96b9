//! Everything the gate binary prints, in one place; the modules below hand it values. The host
//! reads the progress of `diagnose` from standard error: each line starting with `gate ` is one
//! finished gate, `gate N/TOTAL NAME STATUS MSms: REASON`.

// The one place this crate prints (clippy.toml disallows the print macros elsewhere).
#![allow(clippy::disallowed_macros)]

use crate::gates::Config;
use crate::lies::{Lie, LieOutcome, SuiteResult};
use anyhow::{Context, Result};
use sharedos_report::report::{Gate, Report};
use std::path::Path;

/// The line of one finished gate, the `n`th of `total`.
pub fn gate_line(n: usize, total: usize, g: &Gate) -> String {
    format!(
        "gate {n}/{total} {} {} {}ms: {}",
        g.name, g.status, g.duration_ms, g.reason
    )
}

/// The last line of a run whose report was written to `out`.
pub fn verdict_line(report: &Report, out: &Path) -> String {
    format!(
        "verdict {} (exit {}); report {}",
        if report.exit_code == 3 {
            "REVIEW_REQUIRED"
        } else if report.all_gates_pass {
            "PASS"
        } else {
            "FAIL"
        },
        report.exit_code,
        out.display()
    )
}

pub fn lie_line(o: &LieOutcome) -> String {
    format!(
        "lie {}: {} -> {} {}; {}",
        o.lie.name,
        o.lie.does,
        o.lie.target,
        if o.problems.is_empty() {
            "caught".to_string()
        } else {
            format!("NOT CAUGHT AS REQUIRED: {}", o.problems.join("; "))
        },
        o.target_reason
    )
}

pub fn suite_line(r: &SuiteResult) -> String {
    format!(
        "lie-suite: {} of {} lies caught as they must be; summary {}",
        r.caught,
        r.lies,
        r.summary.display()
    )
}

/// What `diagnose` is about to do.
pub fn started(cfg: &Config) {
    eprintln!(
        "sharedos-gate: marker {}, work {}, report {}",
        cfg.marker,
        cfg.work.display(),
        cfg.out.display()
    );
}

pub fn gate(n: usize, total: usize, g: &Gate) {
    eprintln!("{}", gate_line(n, total, g));
}

pub fn verdict(report: &Report, out: &Path) {
    println!("{}", verdict_line(report, out));
}

/// The report could not be written: nothing is lost, it goes to standard output instead.
pub fn report_instead(e: &anyhow::Error, report: &Report) -> Result<()> {
    eprintln!("error: {e:#}; the report follows on standard output");
    println!(
        "{}",
        serde_json::to_string_pretty(report).context("serializing the report")?
    );
    Ok(())
}

/// A plan or a table, as it is.
pub fn text(s: &str) {
    print!("{s}");
}

pub fn lie(o: &LieOutcome) {
    eprintln!("{}", lie_line(o));
}

pub fn suite(r: &SuiteResult) {
    println!("{}", suite_line(r));
}

/// The lying criu is about to lie (its standard error is the CRIU call's evidence).
pub fn lie_told(l: &Lie) {
    eprintln!("lying-criu: {} ({})", l.name, l.does);
}

/// `tree-spawn` tells diagnose the pid of the tree's PID 1.
pub fn tree_pid(pid: i32) {
    println!("{}", crate::tree::pid_line(pid));
}

/// A line of the tree's PID 1 (its standard output is its log inside the tree).
pub fn tree_log(line: &str) {
    println!("{line}");
}

/// A long gate's progress (the density search's each copy), relayed by the host as it comes.
pub fn progress(what: &str) {
    println!("progress {what}");
}

pub fn error(e: &anyhow::Error) {
    eprintln!("error: {e:#}");
}

#[cfg(test)]
mod tests {
    use super::*;
    use sharedos_report::report::{GateName, Status};

    #[test]
    fn the_gate_line_is_the_one_the_host_reads() {
        let mut g = Gate::new(GateName::LiveStateProbe, Status::Pass, "all 8: fine");
        g.duration_ms = 123;
        assert_eq!(
            gate_line(3, 10, &g),
            "gate 3/10 live_state_probe PASS 123ms: all 8: fine"
        );
    }
}
