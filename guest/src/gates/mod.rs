//! The ten gates and the optional density gate, one file each, registered in
//! `GATES`; and what they share: the run's context (ctx), the steps a gate runs and the plan
//! prints (step), restoring and ending copies (copies), the checks of a copy's state (state),
//! the gate builder, and the fidelity options.
//!
//! A gate's file holds its `run`, and its `plan`: the commands it runs, built by the same pure
//! functions its `run` calls. A new gate is one new file and one line in `GATES`.

pub mod builder;
pub mod chromium;
pub mod copies;
pub mod ctx;
pub mod fidelity;
pub mod office;
pub mod session;
pub mod state;
pub mod step;
pub mod workload;

pub mod cleanup;
pub mod density;
pub mod dump;
pub mod gui_pixel_review;
pub mod isolation;
pub mod launch;
pub mod live_state_probe;
pub mod prerequisites;
pub mod reset;
pub mod restore_live_process;
pub mod restore_x_state;

pub use builder::GateBuilder;
pub use ctx::{Config, Ctx, MARK, MARK_RGB};
pub use step::{Kind, Step};

use sharedos_report::report::{Gate, GateName, RunOptions};

/// One gate: its name, what runs it, and what it runs.
pub struct Def {
    pub name: GateName,
    pub run: fn(&mut Ctx) -> Gate,
    /// Every command the gate runs for this configuration, in its order.
    pub plan: fn(&Config) -> Vec<Step>,
}

const fn def(name: GateName, run: fn(&mut Ctx) -> Gate, plan: fn(&Config) -> Vec<Step>) -> Def {
    Def { name, run, plan }
}

/// The plan of a gate that runs no command: it reads /proc, the X wire or the report
/// directory only.
fn no_commands(_: &Config) -> Vec<Step> {
    Vec::new()
}

/// Every gate, in the order of `GateName::sequence`; density, which only `--copies` adds, where
/// `GateName::sequence` puts it.
#[rustfmt::skip]
pub const GATES: [Def; 11] = [
    def(GateName::Prerequisites, prerequisites::run, prerequisites::plan),
    def(GateName::Launch, launch::run, launch::plan),
    def(GateName::LiveStateProbe, live_state_probe::run, no_commands),
    def(GateName::Dump, dump::run, dump::plan),
    def(GateName::RestoreLiveProcess, restore_live_process::run, restore_live_process::plan),
    def(GateName::RestoreXState, restore_x_state::run, no_commands),
    def(GateName::Isolation, isolation::run, isolation::plan),
    def(GateName::Reset, reset::run, reset::plan),
    def(GateName::Density, density::run, density::plan),
    def(GateName::GuiPixelReview, gui_pixel_review::run, no_commands),
    def(GateName::Cleanup, cleanup::run, cleanup::plan),
];

/// The gates a run with these options runs, in order.
pub fn selected(options: &RunOptions) -> Vec<&'static Def> {
    let names = options.gates();
    GATES.iter().filter(|d| names.contains(&d.name)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::criu::{NetNs, NetworkLock};
    use sharedos_report::report::Copies;
    use std::path::Path;

    /// The commands each gate's `run` executes, built as it builds them: by the same
    /// functions, with what only a run knows (a pid, a found path, every copy label).
    fn run_mode_steps(cfg: &Config, gate: GateName) -> Vec<Step> {
        let criu = cfg.planned_criu();
        let pid = 4242;
        let restores = |labels: &[&str]| -> Vec<Step> {
            labels
                .iter()
                .flat_map(|l| copies::restore_steps(cfg, &criu, l, ""))
                .collect()
        };
        match gate {
            GateName::Prerequisites => vec![
                prerequisites::xvfb_version_step(),
                prerequisites::xterm_version_step(Path::new("/usr/bin/xterm")),
                prerequisites::criu_version_step(&criu),
                prerequisites::criu_check_step(&criu),
                prerequisites::nft_lock_check_step(&criu),
            ],
            GateName::Launch => vec![launch::spawn_step(cfg, &cfg.spec())],
            GateName::Dump => vec![
                dump::dump_step(cfg, &criu, pid, NetworkLock::Nftables, NetNs::New),
                dump::dump_step(cfg, &criu, pid, NetworkLock::detect(), NetNs::New),
                dump::dump_step(cfg, &criu, pid, NetworkLock::detect(), NetNs::Saved),
            ],
            GateName::RestoreLiveProcess => {
                let mut v = restores(&["a"]);
                v.extend(
                    restore_live_process::FIREWALL_LISTERS
                        .iter()
                        .map(|(p, inner)| restore_live_process::firewall_step(p, inner, pid)),
                );
                v
            }
            GateName::Isolation => restores(&["a", "b"]),
            GateName::Reset => restores(&["a", "reset"]),
            GateName::Density => restores(&["density-1", "density-2", "density-64"]),
            GateName::LiveStateProbe
            | GateName::RestoreXState
            | GateName::GuiPixelReview
            | GateName::Cleanup => Vec::new(),
        }
    }

    /// What a run-mode argv looks like in the plan: placeholders for the run's values.
    fn as_planned(argv: &[String]) -> Vec<String> {
        argv.iter()
            .map(|a| {
                a.replace("4242", step::PID)
                    .replace("/usr/bin/xterm", "xterm")
                    .replace("density-64", "density-1")
                    .replace("density-2", "density-1")
            })
            .collect()
    }

    #[test]
    fn every_command_a_gate_runs_is_in_its_plan() {
        let mut cfg = ctx::tests::config();
        let all = RunOptions {
            max_copies: None,
            copies: Some(Copies::Max),
            cgroup: fidelity::parse_cgroup_limits("cpu=1,memory=512M").ok(),
            cow_root: true,
            userns: true,
            workload: sharedos_report::report::Workload::Desktop,
            guest_ksm: true,
        };
        for options in [RunOptions::default(), all] {
            cfg.options = options;
            for d in selected(&cfg.options) {
                let plan = (d.plan)(&cfg);
                for s in run_mode_steps(&cfg, d.name) {
                    let argv = as_planned(&s.argv);
                    assert!(
                        plan.iter().any(|p| p.kind == s.kind && p.argv == argv),
                        "{} runs {:?} `{}`, which its plan does not list:\n{plan:#?}",
                        d.name,
                        s.kind,
                        argv.join(" ")
                    );
                }
            }
        }
    }

    #[test]
    fn the_registry_runs_the_spec_sequence() {
        let names = |o: &RunOptions| selected(o).iter().map(|d| d.name).collect::<Vec<_>>();
        let plain = RunOptions::default();
        assert_eq!(names(&plain), GateName::sequence(false));
        let dense = RunOptions {
            copies: Some(Copies::Max),
            ..RunOptions::default()
        };
        assert_eq!(names(&dense), GateName::sequence(true));
        assert_eq!(GATES.len(), GateName::sequence(true).len());
    }
}
