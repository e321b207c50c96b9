//! The suite: the whole diagnostic run once per lie with the lying wrapper as `--criu`, each
//! report judged, and a summary of every outcome.

use super::wrapper::wrapper_script;
use super::{judge, lie, lie_workload, Lie, LIES};
use anyhow::{bail, Context, Result};
use serde::Serialize;
use sharedos_report::report::{GateName, Report, Status, Workload};
use std::path::{Path, PathBuf};

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
        let session = names(Workload::Session);
        assert_eq!(
            session,
            [
                "restore-b-workspace-switched",
                "restore-reset-workspace-first"
            ]
        );
        let office = names(Workload::Office);
        assert_eq!(
            office,
            [
                "restore-b-office-shows-typed-text",
                "restore-reset-office-lost-text"
            ]
        );
        let chromium = names(Workload::ChromiumNosandbox);
        assert_eq!(chromium, ["restore-b-page-field-shows-typed-text"]);
        let xterm = names(Workload::Xterm);
        assert_eq!(
            xterm.len() + desktop.len() + session.len() + office.len() + chromium.len(),
            LIES.len()
        );
        assert!(!xterm.contains(&"restore-reset-editor-lost-text"));
        let named = chosen_lies(&["restore-reset-editor-lost-text".into()], Workload::Xterm);
        assert_eq!(named.unwrap().len(), 1);
    }
}
