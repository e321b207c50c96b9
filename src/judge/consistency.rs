//! What a report.json says about itself, held against its own gates: the gate list, a
//! GUI gate only a review can pass, a PASS that stands on checks, verdict fields its gates
//! give, every fidelity difference no option closed, durations that add up; and, in a vm-run
//! archive, the host's report.json against the guest's own (guest/report.json).

use super::reader::ReportDir;
use super::verdict::{parse_report, MAX_REPORT_BYTES};
use sharedos_report::fidelity;
use sharedos_report::report::{
    self, Gate, GateName, Report, RunOptions, Status, Verdict, REPORT_FILE, RIG_FAILURE_EXIT,
};

/// The rig's own failure recorded by vm-run, if any.
pub fn rig_error(r: &Report) -> Option<&str> {
    r.vm.as_ref().and_then(|vm| vm.rig_error.as_deref())
}

/// The shape of a report: the ten gates, once each, in order, and the density gate after
/// reset exactly when the report's options asked for it (`--copies`). Empty when it holds.
pub fn gate_list_problems(gates: &[Gate], options: &RunOptions) -> Vec<String> {
    let names: Vec<GateName> = gates.iter().map(|g| g.name).collect();
    let expected = options.gates();
    if names == expected {
        return Vec::new();
    }
    let mut out = Vec::new();
    for n in &expected {
        match names.iter().filter(|m| *m == n).count() {
            0 if *n == GateName::Density => out.push(format!(
                "report.json has no {n} gate, though its options ask for one (copies: {})",
                options.copies.map(|c| c.to_string()).unwrap_or_default()
            )),
            0 => out.push(format!("report.json has no {n} gate")),
            1 => {}
            k => out.push(format!("report.json has the {n} gate {k} times")),
        }
    }
    if !expected.contains(&GateName::Density) && names.contains(&GateName::Density) {
        out.push(
            "report.json has a density gate, but its options do not ask for one (no copies)"
                .to_string(),
        );
    }
    if out.is_empty() {
        let got: Vec<&str> = names.iter().map(|n| n.as_str()).collect();
        out.push(format!(
            "report.json's gates are out of gate order: {}",
            got.join(", ")
        ));
    }
    out
}

/// The sum of the gates' durations in milliseconds; None when it does not fit in a u64 (the
/// guest wrote them, and no real run lasts 584 million years).
pub fn total_ms(gates: &[Gate]) -> Option<u64> {
    gates
        .iter()
        .try_fold(0u64, |acc, g| acc.checked_add(g.duration_ms))
}

/// Every way report.json contradicts itself, in words: the gate list, a GUI PASS without a
/// review, a PASS without checks or with a failed one, verdict fields its gates do not give
/// (a run whose rig failed has the rig-failure code), a fidelity difference left out that no
/// option closed (a run whose rig failed has no guest list to judge), durations that overflow.
pub fn problems(r: &Report) -> Vec<String> {
    let mut out = gate_list_problems(&r.gates, &r.options);
    if rig_error(r).is_none() {
        out.extend(
            fidelity::problems(&r.fidelity_differences, &r.options, &r.gates)
                .into_iter()
                .map(|p| format!("report.json {p}")),
        );
    }
    out.extend(pass_problems(&r.gates));
    out.extend(verdict_field_problems(r));
    if total_ms(&r.gates).is_none() {
        out.push(
            "report.json's gate durations add up to more than a u64 of milliseconds holds: the \
             durations are not real ones"
                .to_string(),
        );
    }
    out
}

/// A PASS the report claims but cannot stand behind.
fn pass_problems(gates: &[Gate]) -> Vec<String> {
    let mut out = Vec::new();
    for g in gates.iter().filter(|g| g.status == Status::Pass) {
        if g.name == GateName::GuiPixelReview {
            out.push(format!(
                "report.json says {} PASS, but only a valid {} can pass that gate",
                g.name,
                report::REVIEW_FILE
            ));
            continue;
        }
        // A PASS stands on the checks behind it: with none, or a failed one, it is only a claim.
        if g.checks.is_empty() {
            out.push(format!(
                "report.json says {} PASS, but records no check behind it",
                g.name
            ));
        }
        for c in g.checks.iter().filter(|c| !c.passed) {
            out.push(format!(
                "report.json says {} PASS, but its check {} failed",
                g.name, c.name
            ));
        }
    }
    out
}

/// `all_gates_pass` and `exit_code` against what the gates give.
fn verdict_field_problems(r: &Report) -> Vec<String> {
    let v = report::verdict(&r.gates);
    let expected_exit = if rig_error(r).is_some() {
        RIG_FAILURE_EXIT
    } else {
        v.exit_code()
    };
    let mut out = Vec::new();
    if r.all_gates_pass != (v == Verdict::Pass) {
        out.push(format!(
            "report.json says all_gates_pass={}, but its gates give {v}",
            r.all_gates_pass
        ));
    }
    if r.exit_code != expected_exit {
        out.push(format!(
            "report.json says exit_code={}, but its gates give {v} (exit {expected_exit})",
            r.exit_code,
        ));
    }
    out
}

/// What vm-run archived of the guest's own report (guest/report.json): its verdict fields must
/// be what its gates give, and the host's report.json must carry exactly the guest's gates,
/// environment, options, fidelity differences and marker. Nothing when there is no
/// guest/report.json (a report written by diagnose directly), but a guest/ that cannot be
/// looked into is a problem.
pub fn guest_problems(dir: &ReportDir, top: &Report) -> Vec<String> {
    let rel = format!("{}/{REPORT_FILE}", report::GUEST_DIR);
    match dir.kind(&rel) {
        Ok(None) => return Vec::new(),
        Ok(Some(_)) => {}
        Err(e) => return vec![format!("{rel} cannot be looked at: {e}")],
    }
    let g = match dir
        .bytes(&rel, MAX_REPORT_BYTES)
        .map_err(anyhow::Error::msg)
        .and_then(|f| parse_report(f.bytes().unwrap_or_default()))
    {
        Ok(g) => g,
        Err(e) => return vec![format!("{rel} cannot be read: {e:#}")],
    };
    let mut out: Vec<String> = problems(&g)
        .into_iter()
        .map(|p| format!("{rel}, as the guest wrote it: {p}"))
        .collect();
    out.extend(host_guest_differences(top, &g, &rel));
    out
}

/// The fields the host's report.json takes from the guest's unchanged, where they differ.
pub fn host_guest_differences(top: &Report, guest: &Report, rel: &str) -> Vec<String> {
    let same = [
        ("gates", top.gates == guest.gates),
        ("environment", top.environment == guest.environment),
        ("options", top.options == guest.options),
        (
            "fidelity_differences",
            top.fidelity_differences == guest.fidelity_differences,
        ),
        ("marker", top.marker == guest.marker),
    ];
    same.iter()
        .filter(|(_, equal)| !equal)
        .map(|(field, _)| {
            format!("{REPORT_FILE}'s {field} differ from what the guest reported in {rel}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::review::tests::fresh_report;

    #[test]
    fn durations_that_overflow_are_named_not_summed() {
        let mut r = fresh_report();
        assert_eq!(total_ms(&r.gates), Some(0));
        r.gates[0].duration_ms = 1 << 63;
        assert_eq!(total_ms(&r.gates), Some(1 << 63));
        r.gates[1].duration_ms = 1 << 63;
        assert_eq!(total_ms(&r.gates), None);
        let p = problems(&r);
        assert!(p.iter().any(|p| p.contains("durations add up")), "{p:?}");
    }

    #[test]
    fn every_difference_no_option_closed_must_be_listed_by_key() {
        let mut r = fresh_report();
        assert!(problems(&r).is_empty(), "{:?}", problems(&r));
        r.fidelity_differences
            .retain(|d| d.key != fidelity::Key::XvfbFramebuffer);
        let p = problems(&r);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("report.json leaves out the fidelity difference xvfb_framebuffer")
                && p[0].ends_with("no option closes it"),
            "{p:?}"
        );
        // A run whose rig failed has no guest list to judge.
        r.vm = Some(sharedos_report::report::VmProvenance {
            rig_error: Some("ssh: refused".into()),
            ..Default::default()
        });
        r.exit_code = RIG_FAILURE_EXIT;
        assert!(problems(&r).is_empty(), "{:?}", problems(&r));
    }

    #[test]
    fn host_and_guest_must_agree_beyond_the_gates() {
        let g = fresh_report();
        assert!(host_guest_differences(&g, &g, "guest/report.json").is_empty());
        let mut h = g.clone();
        h.environment.kernel_release = "other".into();
        h.options.userns = true;
        h.marker = "spike-other".into();
        h.fidelity_differences.pop();
        assert_eq!(
            host_guest_differences(&h, &g, "guest/report.json"),
            [
                "report.json's environment differ from what the guest reported in guest/report.json",
                "report.json's options differ from what the guest reported in guest/report.json",
                "report.json's fidelity_differences differ from what the guest reported in guest/report.json",
                "report.json's marker differ from what the guest reported in guest/report.json",
            ]
        );
    }
}
