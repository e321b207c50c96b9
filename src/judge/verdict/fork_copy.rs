//! What keeps a copy of a VM fork (vm-compare's VM-each column) from holding its state.

use super::Outcome;
use sharedos_report::report::{GateName, Status};
/// The gates a copy of a VM fork runs: the saved guest's own launch and live probe, whose probe
/// goes on in the copy and holds it against the fork-time state, then the copy's cleanup.
pub const VM_FORK_COPY: [GateName; 4] = [
    GateName::Prerequisites,
    GateName::Launch,
    GateName::LiveStateProbe,
    GateName::Cleanup,
];

/// What keeps a copy of a VM fork (`vm-compare`'s VM-each column) from holding its state: every
/// problem of the judgement, each of [`VM_FORK_COPY`] that is not PASS, and each fork check
/// (`recheck::FORK_CHECKS`, judged again by the host) that its live probe lacks or failed. A
/// copy with none of these is one the column may count; a figure is never taken from another.
///
/// A copy of another save passes every check its guest makes, against a fork-time state of its
/// own; only `saved_token`, the token the saved guest recorded, tells it from a copy of this
/// one.
pub fn vm_fork_copy_problems(o: &Outcome, saved_token: &str) -> Vec<String> {
    let mut p = o.problems();
    for name in VM_FORK_COPY {
        match o.gates.iter().find(|g| g.name == name) {
            Some(g) if g.status == Status::Pass => {}
            Some(g) => p.push(format!("{name} is {}: {}", g.status, g.reason)),
            None => p.push(format!("the report has no {name} gate")),
        }
    }
    let probe = o.gates.iter().find(|g| g.name == GateName::LiveStateProbe);
    for (check, _) in super::recheck::FORK_CHECKS {
        match probe.and_then(|g| g.check(check)) {
            Some(c) if c.passed => {}
            Some(_) => p.push(format!(
                "{} failed its check {check}",
                GateName::LiveStateProbe
            )),
            None => p.push(format!(
                "{} lacks the check {check}: this report is not of a VM fork's copy",
                GateName::LiveStateProbe
            )),
        }
    }
    let at_fork = probe
        .and_then(|g| g.check("fork_token_kept"))
        .and_then(|c| c.value.get("dump_time"))
        .and_then(|v| v.as_str());
    match at_fork {
        _ if saved_token.is_empty() => p.push(
            "fork_token_kept cannot bind the copy to the save: the saved guest's token was not read"
                .into(),
        ),
        Some(t) if t == saved_token => {}
        Some(t) => p.push(format!(
            "{} failed its check fork_token_kept on the host: the copy's fork-time token {t} is not \
             the saved guest's {saved_token}, so it is a copy of another save",
            GateName::LiveStateProbe
        )),
        // Said above: the check is missing.
        None => {}
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::review::tests::fresh_report;
    use crate::judge::verdict::evaluate_report;

    #[test]
    fn a_vm_fork_copy_counts_only_with_every_fork_check_passed() {
        let mut r = fresh_report();
        let probe = r.gate_mut(GateName::LiveStateProbe).unwrap();
        for (name, _) in super::super::recheck::FORK_CHECKS {
            let value = match name {
                "fork_token_kept" => serde_json::json!({"dump_time": "t0", "seen": "t0"}),
                _ => serde_json::json!(null),
            };
            probe
                .checks
                .push(sharedos_report::compare::check(name, true, value, "x"));
        }
        assert_eq!(
            vm_fork_copy_problems(&evaluate_report(&r, None), "t0"),
            Vec::<String>::new()
        );
        // A copy of another save holds its own fork-time token, and its guest finds nothing
        // wrong: only the saved guest's token tells.
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t1");
        assert!(
            p.iter()
                .any(|p| p.contains("fork_token_kept on the host")
                    && p.contains("copy of another save")),
            "{p:?}"
        );
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "");
        assert!(p.iter().any(|p| p.contains("was not read")), "{p:?}");
        let probe = r.gate_mut(GateName::LiveStateProbe).unwrap();
        probe.checks.retain(|c| c.name != "fork_token_kept");
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t0");
        assert!(
            p.iter()
                .any(|p| p.contains("lacks the check fork_token_kept")),
            "{p:?}"
        );
        let probe = r.gate_mut(GateName::LiveStateProbe).unwrap();
        probe
            .checks
            .iter_mut()
            .for_each(|c| c.passed = !c.name.starts_with("fork_same_windows"));
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t0");
        assert!(
            p.iter()
                .any(|p| p.contains("failed its check fork_same_windows")),
            "{p:?}"
        );
        r.gate_mut(GateName::Cleanup).unwrap().status = Status::Fail;
        let p = vm_fork_copy_problems(&evaluate_report(&r, None), "t0");
        assert!(p.iter().any(|p| p.starts_with("cleanup is FAIL")), "{p:?}");
    }
}
