//! A copy of the whole guest (`diagnose --vm-fork-go PATH`, for `cargo xtask vm-compare`): the
//! VM-each design forks a desktop by saving the VM with the tree up and resuming that save N
//! times. This phase is the tree's side of it. After the live probe it records the tree's state
//! (the fork-time observation, `fork/state.json` and its frame), says so in
//! `<work>/fork-ready`, and waits for PATH. Meanwhile the host saves the VM and resumes copies
//! of it, and in each copy the host writes PATH. The run goes on there, inside that copy: the
//! tree is checked against its fork-time state, as a CRIU copy is against its dump-time state,
//! and then cleaned up. CRIU's gates do not run: the VM copy is the checkpoint.

use crate::diagnose::Phase;
use crate::gates::builder::GateBuilder;
use crate::gates::Ctx;
use anyhow::{bail, Context, Result};
use serde_json::json;
use sharedos_report::checkpoint::CarriedState;
use sharedos_report::compare;
use sharedos_report::model::tree::Observation;
use sharedos_report::report::{Check, Gate, GateName, Status};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the fork-time state goes under the report directory.
pub const FORK_STATE: &str = "fork/state.json";
/// The fork-time frame's name for `Ctx::observe` (it becomes `png/fork-time.png`).
const FORK_TIME: &str = "fork-time";
/// The frame each copy grabs (`png/fork-copy.png`).
const FORK_COPY: &str = "fork-copy";
/// Written under the work directory once the fork-time state is recorded: the host saves the
/// VM only after it sees this file.
pub const READY_FILE: &str = "fork-ready";
/// The most of the go file's text kept: the host writes a copy's label there.
const MAX_GO: u64 = 256;
/// The guest's one network card, as the image's init names it, and where its MAC is read.
const NIC_ADDRESS: &str = "/sys/class/net/eth0/address";

/// The network card's MAC, or empty when it cannot be read (the check then fails).
fn mac() -> String {
    let mut s = String::new();
    let read = std::fs::File::open(NIC_ADDRESS).and_then(|f| f.take(64).read_to_string(&mut s));
    match read {
        Ok(_) => s.trim().to_string(),
        Err(_) => String::new(),
    }
}

pub struct VmFork {
    /// The file the host writes in each copy; the run waits for it after the fork-time state.
    pub go: PathBuf,
    /// How long the run waits for it: the host saves the VM and resumes every copy meanwhile.
    pub wait: Duration,
}

impl Phase for VmFork {
    fn elsewhere(&self, name: GateName) -> Option<String> {
        match name {
            GateName::Prerequisites
            | GateName::Launch
            | GateName::LiveStateProbe
            | GateName::Cleanup => None,
            _ => Some(format!(
                "{name} is not part of a VM fork: the saved VM is the checkpoint, and this run continued in one of its copies"
            )),
        }
    }

    fn after(&self, ctx: &mut Ctx, gate: &mut Gate) {
        if gate.name != GateName::LiveStateProbe || gate.status != Status::Pass {
            return;
        }
        match self.fork(ctx) {
            Ok((label, checks)) => {
                gate.data.insert("fork_copy".into(), json!(label));
                let failed: Vec<String> = checks
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| c.name.clone())
                    .collect();
                gate.checks.extend(checks);
                if !failed.is_empty() {
                    gate.status = Status::Fail;
                    gate.reason = format!(
                        "the VM copy does not hold the fork-time state: {} failed",
                        failed.join(", ")
                    );
                }
            }
            Err(e) => {
                gate.status = Status::Fail;
                gate.reason = format!("the VM fork did not happen: {e:#}");
            }
        }
    }
}

impl VmFork {
    /// Records the fork-time state, waits for the host's go (in a copy), observes the tree
    /// again. Returns the copy's label and the checks.
    fn fork(&self, ctx: &mut Ctx) -> Result<(String, Vec<Check>)> {
        let pid = ctx.tree.context("no tree to fork")?;
        let at_fork = ctx.observe(pid, FORK_TIME)?;
        let state = ctx.cfg.report_dir().join(FORK_STATE);
        if let Some(dir) = state.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
        }
        let text = serde_json::to_string_pretty(&CarriedState::of(&at_fork))?;
        std::fs::write(&state, text + "\n")
            .with_context(|| format!("writing {}", state.display()))?;
        let mac_at_fork = mac();
        let ready = ctx.cfg.work.join(READY_FILE);
        std::fs::write(&ready, b"ready\n")
            .with_context(|| format!("writing {}", ready.display()))?;
        let label = sharedos_report::wait::until("the host's go in a VM copy", self.wait, || {
            read_go(&self.go).ok()
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        let seen = ctx.observe(pid, FORK_COPY)?;
        let mut checks = fork_checks(&at_fork, &seen);
        // The host gives each copy its MAC with its go.
        checks.push(compare::own_mac("fork_own_mac", &mac_at_fork, &mac()));
        // The workload's own state, as a CRIU copy is held to it: the editor's text, or the
        // page's token and counter (nothing more for the xterm).
        let mut g = GateBuilder::new(GateName::LiveStateProbe);
        crate::gates::workload::check_copy_state(ctx, &mut g, pid, &at_fork, "fork_", None);
        if !g.problems.is_empty() {
            bail!("the workload's state: {}", g.problems.join("; "));
        }
        checks.extend(g.gate.checks);
        Ok((label, checks))
    }
}

/// The go file's text, once it is there whole (the host renames it into place).
fn read_go(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path)?;
    let mut s = String::new();
    f.take(MAX_GO).read_to_string(&mut s)?;
    let label = s.trim().to_string();
    if label.is_empty() || !label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        bail!("the go file holds no copy label");
    }
    Ok(label)
}

/// A VM copy holds the tree's fork-time state: the token the app had, a counter that went on
/// from the fork-time value by no more than the guest's own time since (a copy's clock stood
/// still while the VM was saved), the same windows and the same pixels.
pub fn fork_checks(at_fork: &Observation, seen: &Observation) -> Vec<Check> {
    vec![
        compare::same_token("fork_token_kept", &at_fork.app.token, &seen.app.token),
        compare::counter_continues(
            "fork_counter_continues",
            at_fork.app.counter,
            at_fork.app_asked_at.elapsed(),
            seen.app.counter,
        ),
        compare::same_windows("fork_same_windows", &at_fork.windows, &seen.windows),
        compare::same_framebuffer(
            "fork_same_framebuffer",
            (&at_fork.frame_sha256, &at_fork.png),
            (&seen.frame_sha256, &seen.png),
            "the fork-time frame",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use sharedos_report::model::app::AppState;
    use sharedos_report::model::screen::Window;
    use std::time::Instant;

    fn obs(token: &str, counter: u64, frame: &str) -> Observation {
        Observation {
            app: AppState {
                token: token.into(),
                counter,
                pid: 7,
                file: None,
            },
            app_asked_at: Instant::now(),
            windows: vec![Window {
                id: 0x20_0001,
                title: "sharedos-xterm".into(),
                x: 0,
                y: 0,
                width: 400,
                height: 300,
            }],
            frame_sha256: frame.into(),
            mark_drawn: true,
            png: "png/x.png".into(),
            editor_text: None,
            page: None,
            workspace: None,
        }
    }

    fn failed(checks: &[Check]) -> Vec<&str> {
        checks
            .iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn a_copy_that_holds_the_state_passes() {
        let t = "a".repeat(32);
        assert!(failed(&fork_checks(&obs(&t, 40, "f"), &obs(&t, 41, "f"))).is_empty());
    }

    #[test]
    fn a_copy_of_another_save_fails_on_its_token() {
        let at = obs(&"a".repeat(32), 40, "f");
        let other = obs(&"b".repeat(32), 41, "f");
        assert_eq!(failed(&fork_checks(&at, &other)), ["fork_token_kept"]);
    }

    #[test]
    fn a_copy_whose_app_restarted_fails_on_token_and_counter() {
        let at = obs(&"a".repeat(32), 400, "f");
        let restarted = obs(&"c".repeat(32), 3, "f");
        assert_eq!(
            failed(&fork_checks(&at, &restarted)),
            ["fork_token_kept", "fork_counter_continues"]
        );
    }

    #[test]
    fn a_copy_showing_other_pixels_or_windows_fails() {
        let t = "a".repeat(32);
        let mut moved = obs(&t, 41, "g");
        moved.windows[0].x = 5;
        assert_eq!(
            failed(&fork_checks(&obs(&t, 40, "f"), &moved)),
            ["fork_same_windows", "fork_same_framebuffer"]
        );
    }

    #[test]
    fn the_go_file_names_a_copy_or_nothing() {
        let dir = std::env::temp_dir().join(format!("vmfork-go-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let go = dir.join("go");
        assert!(read_go(&go).is_err());
        std::fs::write(&go, "copy-2\n").unwrap();
        assert_eq!(read_go(&go).unwrap(), "copy-2");
        std::fs::write(&go, "copy 2; rm -rf /\n").unwrap();
        assert!(read_go(&go).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
