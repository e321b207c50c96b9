//! Archive: the report directory, the report written into it whole or not at all, and the exit
//! code, which is verify's judgement of what was archived. The guest's own verdict fields are
//! never taken: verify compares them with the gates, and a difference fails the run.

use super::fetch::GUEST_DIR;
use super::{Archiving, Observed};
use crate::escape::line as one_line;
use crate::judge::ledger::Ledger;
use crate::judge::verdict::{self, How};
use crate::vm::{session::short_id, watchdog};
use anyhow::{bail, Result};
use sharedos_report::report::{
    Artifact, Environment, Gate, GateName, Report, Status, REPORT_FILE, REVIEW_FILE,
    RIG_FAILURE_EXIT, SCHEMA_VERSION,
};
use sharedos_report::text::artifact_kind;
use sharedos_report::{clock, digest, signals};
use std::path::{Path, PathBuf};

pub fn report_dir_for(a: &Archiving) -> PathBuf {
    match &a.out {
        Some(d) => d.clone(),
        None => a
            .reports_root
            .join(format!("{}-{}", clock::compact_utc_now(), short_id())),
    }
}

/// A new or empty directory: two runs never mix, and an archived report is never overwritten.
pub fn create_report_dir(a: &Archiving) -> Result<PathBuf> {
    let dir = report_dir_for(a);
    create_empty_dir(
        &dir,
        "report directory",
        ", or leave --out out to get reports/<time>-<id>",
    )?;
    Ok(dir)
}

/// Creates `dir`, `what` a run archives into (a report directory, a migration's, a
/// comparison's), or takes it when it is empty; `or` ends the fix-it of a non-empty one.
pub fn create_empty_dir(dir: &Path, what: &str, or: &str) -> Result<()> {
    if std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some()) {
        bail!(
            "the {what} {} is not empty: pass --out with a new directory{or}",
            dir.display()
        );
    }
    if let Err(e) = std::fs::create_dir_all(dir) {
        bail!(
            "cannot create the {what} {}: {e}; pass --out DIR on a writable filesystem",
            dir.display()
        );
    }
    Ok(())
}

/// Writes the report (the guest's gates with the host's provenance, or a partial one after a
/// rig failure), prints the summary and the directory, and returns the exit code.
pub fn finish(mut obs: Observed, result: Result<Report>, sign_key: Option<&Path>) -> i32 {
    let result = result.map_err(signals::naming_interrupt);
    obs.vm.finished_at = clock::now_rfc3339();
    // An oops is recorded whether or not the run failed: a kernel that oopsed and kept going
    // may still have let every gate pass.
    let console = crate::vm::serial::read(&obs.report_dir.join("serial.log"));
    obs.vm.kernel_oops = console.oops.clone();
    let mut report = match result {
        Ok(report) => report,
        Err(e) => {
            // A guest kernel that panicked mid-session shows up first as a broken SSH read; the
            // console says what really happened.
            let e = match &console.panic {
                _ if watchdog::console_flooded() => e.context(format!(
                    "the guest wrote more than {} MiB to its serial console, so QEMU was stopped",
                    watchdog::CONSOLE_CAP >> 20
                )),
                Some(p) if !format!("{e:#}").contains("panicked") => e.context(format!(
                    "the guest kernel panicked ({}{})",
                    sharedos_report::cause::kernel_message(p),
                    crate::vm::serial::oops_said(&console)
                )),
                _ => e,
            };
            let msg = format!("{e:#}");
            super::progress().error(&anyhow::anyhow!("the rig failed: {msg}"));
            obs.vm.rig_error = Some(msg);
            partial_report(&obs)
        }
    };
    let rig_failed = obs.vm.rig_error.is_some();
    report.vm = Some(obs.vm.clone());
    report.artifacts = artifacts(&obs.report_dir);
    // The host's verdict fields, from the gates; the guest's stay in guest/report.json, where
    // verify holds them against the same gates.
    report.seal();
    if rig_failed {
        report.exit_code = RIG_FAILURE_EXIT;
    }
    let written = serde_json::to_string_pretty(&report)
        .map_err(anyhow::Error::from)
        .and_then(|text| {
            digest::replace_in_report(&obs.report_dir, REPORT_FILE, (text + "\n").as_bytes())
        });
    if let Err(e) = written {
        super::progress().error(&e.context("writing the report"));
        return RIG_FAILURE_EXIT;
    }
    if let Some(key) = sign_key {
        match crate::judge::sign::sign(&obs.report_dir, REPORT_FILE, key) {
            Ok(fp) => super::progress().note(&format!("signed report.json.sig with {fp}")),
            Err(e) => {
                super::progress().error(&e.context("signing the report"));
                super::progress().result(&obs.report_dir.display().to_string());
                return RIG_FAILURE_EXIT;
            }
        }
    }
    let code = if rig_failed {
        RIG_FAILURE_EXIT
    } else {
        judge(&obs.report_dir)
    };
    print_summary(&report, code);
    super::progress().result(&obs.report_dir.display().to_string());
    code
}

/// The one verdict on the archived report (what `sharedos-rig verify` says of it), its problems
/// printed.
fn judge(dir: &Path) -> i32 {
    let ledger = Ledger::from_env();
    match verdict::judge(dir, &How::full(ledger.as_ref())) {
        Ok(o) => {
            for p in o.problems() {
                super::progress().note(&format!("problem: {}", one_line(&p)));
            }
            o.exit_code
        }
        Err(e) => {
            super::progress().error(&anyhow::anyhow!(
                "the archived report does not read back: {e}"
            ));
            RIG_FAILURE_EXIT
        }
    }
}

/// Every regular file in the report directory but report.json and review.json, hashed. The
/// guest's files keep the kind their own name gives them.
pub fn artifacts(dir: &Path) -> Vec<Artifact> {
    let mut files = Vec::new();
    walk(dir, "", &mut files);
    files.sort();
    files
        .into_iter()
        .filter(|rel| rel != REPORT_FILE && rel != REVIEW_FILE)
        .filter_map(|rel| {
            let own = rel
                .strip_prefix(&format!("{GUEST_DIR}/"))
                .unwrap_or(&rel)
                .to_string();
            digest::artifact(dir, &rel, artifact_kind(&own)).ok()
        })
        .collect()
}

/// Regular files only, and no link followed: the report holds nothing else, by construction.
fn walk(base: &Path, rel: &str, out: &mut Vec<String>) {
    let Ok(rd) = std::fs::read_dir(base.join(rel)) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        match e.file_type() {
            Ok(t) if t.is_dir() => walk(base, &r, out),
            Ok(t) if t.is_file() => out.push(r),
            _ => {}
        }
    }
}

fn print_summary(r: &Report, code: i32) {
    let vm = r.vm.as_ref();
    let env = &r.environment;
    // A run that failed before the guest's report came back has no guest identity to show.
    let guest = if env.kernel_release.is_empty() && env.boot_id.is_empty() {
        "no guest identity (the guest's report did not come back)".to_string()
    } else {
        format!(
            "guest kernel {} on {} (boot id {})",
            one_line(&env.kernel_release),
            one_line(&env.hostname),
            one_line(&env.boot_id)
        )
    };
    super::progress().note(&format!(
        "{guest}, accelerator {}, image {}",
        vm.map(|v| v.accel.as_str()).unwrap_or("?"),
        vm.map(|v| v.image_sha256.get(..16).unwrap_or(""))
            .unwrap_or("?"),
    ));
    if let Some(v) = vm {
        let phases: Vec<String> = v
            .phases
            .iter()
            .map(|p| format!("{} {:.1} s", p.name, p.duration_ms as f64 / 1000.0))
            .collect();
        super::progress().note(&format!("phases: {}", phases.join(", ")));
    }
    let verdict = match code {
        0 => "PASS",
        3 => "REVIEW_REQUIRED (every gate passed; a human must review the PNGs)",
        RIG_FAILURE_EXIT => "RIG FAILURE (partial report archived)",
        _ => "FAIL",
    };
    super::progress().note(&format!("verdict: {verdict}, exit {code}"));
}

/// One line per gate from the guest's progress output: `gate 3/10 live_state_probe PASS 123ms: ...`.
pub fn parse_gate_line(line: &str) -> Option<Gate> {
    let rest = line.strip_prefix("gate ")?;
    let mut it = rest.splitn(4, ' ');
    let _n = it.next()?;
    let name: GateName =
        serde_json::from_value(serde_json::Value::String(it.next()?.into())).ok()?;
    let status: Status =
        serde_json::from_value(serde_json::Value::String(it.next()?.into())).ok()?;
    let tail = it.next()?;
    let (ms, reason) = tail.split_once(": ").unwrap_or((tail, ""));
    let mut g = Gate::new(name, status, reason);
    g.duration_ms = ms.trim_end_matches("ms").parse().ok()?;
    Some(g)
}

/// A report for a run whose rig failed: the guest's report if it arrived, else what the
/// diagnostic said as it went, the rest NOT_RUN.
fn partial_report(obs: &Observed) -> Report {
    if let Some(r) = &obs.guest_report {
        return r.clone();
    }
    let error = obs.vm.rig_error.clone().unwrap_or_default();
    let seen: Vec<Gate> = obs
        .transcript
        .iter()
        .filter_map(|l| parse_gate_line(l))
        .collect();
    let gates = GateName::ALL
        .iter()
        .map(|n| match seen.iter().find(|g| g.name == *n) {
            Some(g) => {
                let mut g = g.clone();
                g.reason = format!(
                    "{} (from the guest's progress line; its full report was not retrieved: see {})",
                    g.reason,
                    super::gates::TRANSCRIPT_FILE
                );
                g
            }
            None => Gate::new(
                *n,
                Status::NotRun,
                format!("the rig failed before this gate reported: {error}"),
            ),
        })
        .collect();
    let console = crate::vm::serial::read(&obs.report_dir.join("serial.log"));
    Report {
        schema_version: SCHEMA_VERSION,
        marker: String::new(),
        all_gates_pass: false,
        exit_code: RIG_FAILURE_EXIT,
        gates,
        environment: Environment {
            kernel_release: console.kernel_release.unwrap_or_default(),
            started_at: obs.started_at.clone(),
            finished_at: clock::now_rfc3339(),
            ..Environment::default()
        },
        artifacts: Vec::new(),
        fidelity_differences: Vec::new(),
        options: Default::default(),
        vm: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_lines_parse() {
        let g =
            parse_gate_line("gate 3/10 live_state_probe PASS 123ms: all 8 live-state checks hold")
                .unwrap();
        assert_eq!(g.name, GateName::LiveStateProbe);
        assert_eq!(g.status, Status::Pass);
        assert_eq!(g.duration_ms, 123);
        assert_eq!(g.reason, "all 8 live-state checks hold");
        let g = parse_gate_line("gate 4/10 dump NOT_RUN 0ms: CRIU is not usable: x").unwrap();
        assert_eq!(g.status, Status::NotRun);
        assert_eq!(g.reason, "CRIU is not usable: x");
        assert!(parse_gate_line("sharedos-gate: marker x").is_none());
        assert!(parse_gate_line("gate 1/10 bogus PASS 1ms: x").is_none());
    }

    /// The report a run archives, with `console` as its serial.log and the session's `result`.
    fn archived(name: &str, console: &str, result: Result<Report>) -> (i32, Report) {
        let d = std::env::temp_dir().join(format!("archive-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("serial.log"), console).unwrap();
        let obs = Observed::new(d.clone(), Default::default());
        let code = finish(obs, result, None);
        let bytes = std::fs::read(d.join(REPORT_FILE)).unwrap();
        std::fs::remove_dir_all(&d).unwrap();
        (code, crate::judge::verdict::parse_report(&bytes).unwrap())
    }

    #[test]
    fn a_kernel_oops_is_recorded_panic_or_not_and_a_panic_quotes_it() {
        let oops = "[  2.70] BUG: unable to handle page fault for address: ff11000000000000\n\
                    [  2.71] RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0\n";
        // The guest kept going and the run ended: the oops is in the provenance all the same.
        let (_, r) = archived(
            "oops",
            &format!("SHAREDOS-READY\n{oops}"),
            Ok(crate::judge::review::tests::fresh_report()),
        );
        let vm = r.vm.unwrap();
        let o = vm.kernel_oops.expect("the oops is recorded");
        assert_eq!(o.rip_function(), Some("kmem_cache_alloc_noprof+0x9d/0x2f0"));
        assert!(o.panic.is_empty() && vm.rig_error.is_none());
        // It panicked under the session: the rig error quotes the panic and the oops.
        let (code, r) = archived(
            "panic",
            &format!("{oops}[  2.72] Kernel panic - not syncing: Fatal exception\n"),
            Err(anyhow::anyhow!("transport read")),
        );
        assert_eq!(code, RIG_FAILURE_EXIT);
        let vm = r.vm.unwrap();
        assert_eq!(
            vm.rig_error.as_deref(),
            Some("the guest kernel panicked (Kernel panic - not syncing: Fatal exception; after BUG: unable to handle page fault for address: ff11000000000000; RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0): transport read")
        );
        assert!(vm
            .kernel_oops
            .is_some_and(|o| o.panic.contains("Fatal exception")));
        // A clean console: nothing recorded.
        let (_, r) = archived(
            "clean",
            "SHAREDOS-READY\n",
            Ok(crate::judge::review::tests::fresh_report()),
        );
        assert_eq!(r.vm.unwrap().kernel_oops, None);
    }

    #[test]
    fn artifacts_list_regular_files_with_the_guests_own_kinds() {
        let d = std::env::temp_dir().join(format!("archive-artifacts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("guest/criu")).unwrap();
        std::fs::create_dir_all(d.join("guest/png")).unwrap();
        for f in [
            "report.json",
            "serial.log",
            "guest/report.json",
            "guest/criu/dump.log",
            "guest/png/live.png",
        ] {
            std::fs::write(d.join(f), b"x").unwrap();
        }
        std::os::unix::fs::symlink("/etc/passwd", d.join("guest/link.log")).unwrap();
        let a: Vec<(String, String)> = artifacts(&d)
            .into_iter()
            .map(|a| (a.path, a.kind))
            .collect();
        let want: Vec<(String, String)> = [
            ("guest/criu/dump.log", "criu-log"),
            ("guest/png/live.png", "png"),
            ("guest/report.json", "file"),
            ("serial.log", "log"),
        ]
        .iter()
        .map(|(p, k)| (p.to_string(), k.to_string()))
        .collect();
        assert_eq!(a, want);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
