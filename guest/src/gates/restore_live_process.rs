//! restore_live_process: a copy restored from the dump has the app's token, and its counter
//! continues from the dump-time value.

use super::copies::restore_steps;
use super::state::check_app_state;
use super::step::{Kind, Step, PID};
use super::{Config, Ctx, GateBuilder};
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::report::{Gate, GateName};
use sharedos_report::which::find_program;

/// What this gate runs: the restore of copy a, and a look at its firewall.
pub fn plan(cfg: &Config) -> Vec<Step> {
    let mut v = restore_steps(cfg, &cfg.planned_criu(), "a", "restore copy a");
    v.extend(
        FIREWALL_LISTERS
            .iter()
            .map(|(prog, inner)| firewall_step(prog, inner, PID)),
    );
    v
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::RestoreLiveProcess);
    let Some(snap) = ctx.snapshot.clone() else {
        g.problem("no dump-time state");
        return g.finish("");
    };
    let (pid, ev) = ctx.restore("a");
    let ok = pid.is_ok();
    g.data("restore_ms", json!(ev.duration_ms));
    g.require(
        check(
            "criu_restore_succeeded",
            ok,
            json!({"exit_code": ev.exit_code, "copy_pid": pid.as_ref().map_err(|e| format!("{e:#}"))}),
            "exit 0 and a pidfile naming PID 1 of a new pid namespace",
        ),
        || match &pid {
            Err(e) => format!(
                "criu_restore_succeeded failed: criu restore of copy a gave no running copy: {e:#} (log: criu/restore-a.log){}",
                crate::criu::says(&ctx.cfg.criu_log("restore-a"))
            ),
            Ok(_) => String::new(),
        },
    );
    g.evidence(ev);
    let Ok(pid) = pid else {
        g.cause(ctx.cfg.restore_cause("a"));
        return g.finish("");
    };
    g.data("copy_pid", json!(pid));
    check_app_state(ctx, &mut g, pid, &snap, "");
    super::workload::check_copy_state(ctx, &mut g, pid, &snap, "", None);
    check_no_network_lock_left(ctx, &mut g, pid);
    g.finish("the restored app has the dump-time token and its counter continues from the dump-time value; no CRIU network lock left behind")
}

/// `inner` run inside the network namespace of the tree whose PID 1 is `pid`.
pub fn in_netns_argv(pid: impl std::fmt::Display, inner: &[&str]) -> Vec<String> {
    let mut v = vec![
        "nsenter".to_string(),
        format!("--net=/proc/{pid}/ns/net"),
        "--".into(),
    ];
    v.extend(inner.iter().map(|s| s.to_string()));
    v
}

/// The tools that list a firewall's rules, with their argv; the check uses whichever are
/// installed.
pub const FIREWALL_LISTERS: [(&str, &[&str]); 2] = [
    ("nft", &["nft", "list", "ruleset"]),
    ("iptables-save", &["iptables-save"]),
];

/// `prog` listing the rules of the copy whose PID 1 is `pid`.
pub fn firewall_step(prog: &str, inner: &[&str], pid: impl std::fmt::Display) -> Step {
    Step::new(
        Kind::FirewallList,
        &format!("{prog} in the copy's network namespace"),
        "look for a CRIU network lock left in copy a's firewall (PID is its PID 1)",
        in_netns_argv(pid, inner),
    )
}

/// CRIU locks the network while it dumps; with criu 3.17.1 and the nftables lock the lock's
/// drop table outlives the restore (seen with criu 3.17.1). Checks a restored copy's firewall for anything
/// named after CRIU, with whichever of nft and iptables-save is installed.
pub fn check_no_network_lock_left(ctx: &Ctx, g: &mut GateBuilder, pid: i32) {
    let mut seen = Vec::new();
    let mut looked = 0;
    for (prog, inner) in FIREWALL_LISTERS {
        if find_program(prog).is_none() {
            continue;
        }
        looked += 1;
        let out = ctx.run(&firewall_step(prog, inner, pid));
        if out.success() {
            seen.extend(
                out.stdout
                    .lines()
                    .filter(|l| l.contains("CRIU"))
                    .map(|l| format!("{prog}: {}", l.trim())),
            );
        } else {
            seen.push(format!(
                "{prog} could not list the rules: {}",
                out.summary()
            ));
        }
        g.evidence(out.evidence);
    }
    g.check(check(
        "no_network_lock_left",
        looked > 0 && seen.is_empty(),
        json!({"tools_used": looked, "criu_rules": seen}),
        "no CRIU lock rule or table in the restored copy's firewall",
    ));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn netns_command() {
        assert_eq!(
            in_netns_argv(42, &["nft", "list", "ruleset"]).join(" "),
            "nsenter --net=/proc/42/ns/net -- nft list ruleset"
        );
    }
}
