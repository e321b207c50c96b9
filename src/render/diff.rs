//! What changed between two reports: gate statuses (with reviews applied), check values,
//! provenance, and timings as B/A ratios.

use crate::escape::line as esc;
use crate::judge::ledger::Ledger;
use crate::judge::verdict::{self, How, Outcome};
use crate::render::{duration, value_str};
use anyhow::{Context, Result};
use sharedos_report::report::{GateName, Report, Status, Verdict};
use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

#[derive(Clone, Debug, PartialEq)]
pub struct GateChange {
    pub gate: GateName,
    /// None when the gate is missing from that report.
    pub a: Option<Status>,
    pub b: Option<Status>,
    pub b_reason: String,
}

/// One side of a check: whether it passed and the value it saw.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckSide {
    pub passed: bool,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CheckChange {
    pub gate: GateName,
    pub check: String,
    pub a: Option<CheckSide>,
    pub b: Option<CheckSide>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct FieldChange {
    pub field: &'static str,
    pub a: String,
    pub b: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// "gate" or "phase".
    pub kind: &'static str,
    pub name: String,
    pub a_ms: Option<u64>,
    pub b_ms: Option<u64>,
}

impl Timing {
    /// B/A; None when either side is missing or A is zero while B is not.
    pub fn ratio(&self) -> Option<f64> {
        match (self.a_ms, self.b_ms) {
            (Some(0), Some(0)) => Some(1.0),
            (Some(0), _) => None,
            (Some(a), Some(b)) => Some(b as f64 / a as f64),
            _ => None,
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct DiffReport {
    pub a_label: String,
    pub b_label: String,
    pub verdict: (Verdict, Verdict),
    pub gates: Vec<GateChange>,
    pub checks: Vec<CheckChange>,
    pub provenance: Vec<FieldChange>,
    /// Every gate and vm phase timing, in run order, whether it changed or not.
    pub timings: Vec<Timing>,
}

impl DiffReport {
    pub fn timings_identical(&self) -> bool {
        self.timings.iter().all(|t| t.a_ms == t.b_ms)
    }

    /// Nothing differs, timings included.
    pub fn is_empty(&self) -> bool {
        self.verdict.0 == self.verdict.1
            && self.gates.is_empty()
            && self.checks.is_empty()
            && self.provenance.is_empty()
            && self.timings_identical()
    }
}

/// Diffs two reports as they stand, without reviews.
pub fn diff(a: &Report, b: &Report) -> DiffReport {
    diff_outcomes(
        &verdict::evaluate_report(a, None),
        &verdict::evaluate_report(b, None),
        "A",
        "B",
    )
}

/// Diffs two report directories, each with its review applied and judged by the one verdict
/// (artifacts not re-hashed). Err when either report cannot be judged.
pub fn diff_dirs(a: &Path, b: &Path, ledger: Option<&Ledger>) -> Result<DiffReport> {
    let how = How::quick(ledger);
    let oa =
        verdict::judge(a, &how).with_context(|| format!("reading report A at {}", a.display()))?;
    let ob =
        verdict::judge(b, &how).with_context(|| format!("reading report B at {}", b.display()))?;
    Ok(diff_outcomes(
        &oa,
        &ob,
        &a.display().to_string(),
        &b.display().to_string(),
    ))
}

pub fn diff_outcomes(a: &Outcome, b: &Outcome, a_label: &str, b_label: &str) -> DiffReport {
    let mut gates = Vec::new();
    let mut checks = Vec::new();
    let mut timings = Vec::new();
    for name in GateName::ALL {
        let ga = a.gates.iter().find(|g| g.name == name);
        let gb = b.gates.iter().find(|g| g.name == name);
        let (sa, sb) = (ga.map(|g| g.status), gb.map(|g| g.status));
        if sa != sb {
            gates.push(GateChange {
                gate: name,
                a: sa,
                b: sb,
                b_reason: gb.map(|g| g.reason.clone()).unwrap_or_default(),
            });
        }
        timings.push(Timing {
            kind: "gate",
            name: name.to_string(),
            a_ms: ga.map(|g| g.duration_ms),
            b_ms: gb.map(|g| g.duration_ms),
        });
        // Checks are matched by name, in A's order, then the ones only B has.
        let side = |g: Option<&sharedos_report::report::Gate>| -> BTreeMap<String, CheckSide> {
            g.map(|g| {
                g.checks
                    .iter()
                    .map(|c| {
                        (
                            c.name.clone(),
                            CheckSide {
                                passed: c.passed,
                                value: value_str(&c.value),
                            },
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
        };
        let (ca, cb) = (side(ga), side(gb));
        let mut names: Vec<&String> = Vec::new();
        for c in ga
            .iter()
            .flat_map(|g| &g.checks)
            .chain(gb.iter().flat_map(|g| &g.checks))
        {
            if !names.contains(&&c.name) {
                names.push(&c.name);
            }
        }
        for n in names {
            let (x, y) = (ca.get(n), cb.get(n));
            if x != y {
                checks.push(CheckChange {
                    gate: name,
                    check: n.clone(),
                    a: x.cloned(),
                    b: y.cloned(),
                });
            }
        }
    }

    let pa = provenance_fields(&a.report);
    let pb = provenance_fields(&b.report);
    let provenance = pa
        .into_iter()
        .zip(pb)
        .filter(|((_, x), (_, y))| x != y)
        .map(|((field, x), (_, y))| FieldChange { field, a: x, b: y })
        .collect();

    let phases_a = phases(&a.report);
    let phases_b = phases(&b.report);
    let mut phase_names: Vec<&String> = Vec::new();
    for (n, _) in phases_a.iter().chain(phases_b.iter()) {
        if !phase_names.contains(&n) {
            phase_names.push(n);
        }
    }
    for n in phase_names {
        let get = |p: &[(String, u64)]| p.iter().find(|(x, _)| x == n).map(|(_, ms)| *ms);
        timings.push(Timing {
            kind: "phase",
            name: n.clone(),
            a_ms: get(&phases_a),
            b_ms: get(&phases_b),
        });
    }

    DiffReport {
        a_label: a_label.to_string(),
        b_label: b_label.to_string(),
        verdict: (a.verdict, b.verdict),
        gates,
        checks,
        provenance,
        timings,
    }
}

fn phases(r: &Report) -> Vec<(String, u64)> {
    r.vm.as_ref()
        .map(|vm| {
            vm.phases
                .iter()
                .map(|p| (p.name.clone(), p.duration_ms))
                .collect()
        })
        .unwrap_or_default()
}

/// The provenance that says what was tested on what. Per-run identities (boot id, timestamps,
/// marker) are left out: they always differ and say nothing about the change.
fn provenance_fields(r: &Report) -> Vec<(&'static str, String)> {
    let e = &r.environment;
    let none = || "-".to_string();
    let o = |v: &Option<String>| v.clone().unwrap_or_else(none);
    let vm = r.vm.as_ref();
    let v = |f: &dyn Fn(&sharedos_report::report::VmProvenance) -> String| {
        vm.map(f).unwrap_or_else(none)
    };
    vec![
        ("kernel release", e.kernel_release.clone()),
        ("kernel version", e.kernel_version.clone()),
        ("os", e.os.clone()),
        ("hostname", e.hostname.clone()),
        ("criu version", o(&e.criu_version)),
        ("Xvfb version", o(&e.xvfb_version)),
        ("xterm version", o(&e.xterm_version)),
        ("gate version", e.gate_version.clone()),
        (
            "fidelity differences",
            e_join(
                &r.fidelity_differences
                    .iter()
                    .map(|d| d.to_string())
                    .collect::<Vec<_>>(),
            ),
        ),
        (
            "accelerator",
            vm.map_or_else(|| "host".to_string(), |vm| vm.accel.clone()),
        ),
        ("qemu version", v(&|vm| vm.qemu_version.clone())),
        ("qemu machine", v(&|vm| vm.machine_type.clone())),
        ("cpu model", v(&|vm| vm.cpu_model.clone())),
        ("vm memory MiB", v(&|vm| vm.memory_mib.to_string())),
        ("vm cpus", v(&|vm| vm.cpus.to_string())),
        ("image name", v(&|vm| vm.image_name.clone())),
        ("image sha256", v(&|vm| vm.image_sha256.clone())),
        ("image lock sha256", v(&|vm| vm.image_lock_sha256.clone())),
        ("gate binary sha256", v(&|vm| vm.gate_binary_sha256.clone())),
        ("rig version", v(&|vm| vm.rig_version.clone())),
        ("rig git commit", v(&|vm| vm.rig_git_commit.clone())),
        ("host os", v(&|vm| vm.host_os.clone())),
        ("host kernel", v(&|vm| vm.host_kernel.clone())),
    ]
}

fn e_join(v: &[String]) -> String {
    if v.is_empty() {
        "-".to_string()
    } else {
        v.join("; ")
    }
}

fn status_str(s: Option<Status>) -> &'static str {
    s.map_or("absent", |s| s.as_str())
}

fn side_str(s: &Option<CheckSide>) -> String {
    match s {
        None => "absent".to_string(),
        Some(c) => format!(
            "{} {}",
            if c.passed { "ok" } else { "FAILED" },
            esc(&c.value)
        ),
    }
}

fn ms_str(ms: Option<u64>) -> String {
    ms.map_or_else(|| "-".to_string(), duration)
}

impl fmt::Display for DiffReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "A: {}", esc(&self.a_label))?;
        writeln!(f, "B: {}", esc(&self.b_label))?;
        if self.is_empty() {
            return write!(
                f,
                "no differences: verdict, gate statuses, checks, provenance and timings are identical"
            );
        }
        let (va, vb) = self.verdict;
        if va == vb {
            writeln!(f, "verdict: {va} in both")?;
        } else {
            writeln!(f, "verdict: {va} -> {vb}")?;
        }
        if self.gates.is_empty() && self.checks.is_empty() && self.provenance.is_empty() {
            writeln!(f, "no differences in gate statuses, checks or provenance")?;
        }
        if !self.gates.is_empty() {
            writeln!(f, "gate statuses:")?;
            for g in &self.gates {
                writeln!(
                    f,
                    "  {}: {} -> {}  ({})",
                    g.gate,
                    status_str(g.a),
                    status_str(g.b),
                    esc(&g.b_reason)
                )?;
            }
        }
        if !self.checks.is_empty() {
            writeln!(f, "checks:")?;
            for c in &self.checks {
                writeln!(
                    f,
                    "  {}/{}: {} -> {}",
                    c.gate,
                    esc(&c.check),
                    side_str(&c.a),
                    side_str(&c.b)
                )?;
            }
        }
        if !self.provenance.is_empty() {
            writeln!(f, "provenance:")?;
            for p in &self.provenance {
                writeln!(f, "  {}: {} -> {}", p.field, esc(&p.a), esc(&p.b))?;
            }
        }
        if self.timings_identical() {
            write!(f, "timings: identical")
        } else {
            write!(f, "timings (B/A):")?;
            let names: Vec<String> = self.timings.iter().map(|t| esc(&t.name)).collect();
            let w = names.iter().map(|n| n.len()).max().unwrap_or(0);
            for (t, name) in self.timings.iter().zip(&names) {
                let ratio = t
                    .ratio()
                    .map_or_else(|| "n/a".to_string(), |r| format!("x{r:.2}"));
                write!(
                    f,
                    "\n  {:<5} {:<w$}  {:>12} -> {:>12}  {ratio}",
                    t.kind,
                    name,
                    ms_str(t.a_ms),
                    ms_str(t.b_ms)
                )?;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::review::tests::fresh_report;
    use crate::render::tests::rich_report;
    use sharedos_report::report::{Check, Phase, VmProvenance};

    #[test]
    fn a_report_diffed_with_itself_has_no_differences() {
        for r in [fresh_report(), rich_report()] {
            let d = diff(&r, &r);
            assert!(d.is_empty(), "{d:?}");
            let s = d.to_string();
            assert!(
                s.lines().last().unwrap().starts_with("no differences:"),
                "{s}"
            );
        }
    }

    #[test]
    fn gate_status_changes_are_listed() {
        let a = fresh_report();
        let b = rich_report();
        let d = diff(&a, &b);
        let changed: Vec<GateName> = d.gates.iter().map(|g| g.gate).collect();
        assert_eq!(changed, [GateName::Dump, GateName::RestoreLiveProcess]);
        let s = d.to_string();
        assert!(s.contains("dump: PASS -> FAIL"), "{s}");
        assert!(s.contains("verdict: REVIEW_REQUIRED -> FAIL"), "{s}");
    }

    #[test]
    fn check_values_are_compared_by_gate_and_name() {
        let mut a = fresh_report();
        let check = |v: i64, passed: bool| Check {
            name: "counter_advances".into(),
            passed,
            value: serde_json::json!(v),
            expected: String::new(),
        };
        a.gates[2].checks = vec![check(3, true)];
        let mut b = a.clone();
        b.gates[2].checks[0] = check(3, false);
        b.gates[2].checks.push(check(9, true));
        b.gates[2].checks[1].name = "new_check".into();
        let d = diff(&a, &b);
        assert_eq!(d.checks.len(), 2, "{:?}", d.checks);
        let s = d.to_string();
        assert!(
            s.contains("live_state_probe/counter_advances: ok 3 -> FAILED 3"),
            "{s}"
        );
        assert!(
            s.contains("live_state_probe/new_check: absent -> ok 9"),
            "{s}"
        );
    }

    #[test]
    fn provenance_and_timings() {
        let mut a = fresh_report();
        a.gates[0].duration_ms = 100;
        a.vm = Some(VmProvenance {
            accel: "kvm".into(),
            image_sha256: "1".repeat(64),
            qemu_version: "8.2".into(),
            phases: vec![Phase {
                name: "boot_to_ssh".into(),
                duration_ms: 2000,
            }],
            ..Default::default()
        });
        let mut b = a.clone();
        b.environment.kernel_release = "6.12.0".into();
        b.environment.criu_version = Some("4.1".into());
        b.gates[0].duration_ms = 250;
        if let Some(vm) = b.vm.as_mut() {
            vm.accel = "tcg".into();
            vm.phases[0].duration_ms = 8000;
        }
        let d = diff(&a, &b);
        let fields: Vec<&str> = d.provenance.iter().map(|p| p.field).collect();
        assert_eq!(fields, ["kernel release", "criu version", "accelerator"]);
        assert!(!d.timings_identical());
        let s = d.to_string();
        assert!(s.contains("accelerator: kvm -> tcg"), "{s}");
        assert!(s.contains("criu version: - -> 4.1"), "{s}");
        assert!(s.contains("x2.50"), "{s}");
        assert!(s.contains("x4.00"), "{s}");
        assert!(s.contains("verdict: REVIEW_REQUIRED in both"), "{s}");
    }

    #[test]
    fn only_timings_differ() {
        let a = fresh_report();
        let mut b = a.clone();
        b.gates[1].duration_ms = 7;
        let s = diff(&a, &b).to_string();
        assert!(
            s.contains("no differences in gate statuses, checks or provenance"),
            "{s}"
        );
        assert!(s.contains("n/a"), "A is 0 ms: {s}");
    }

    #[test]
    fn ratios() {
        let t = |a, b| Timing {
            kind: "gate",
            name: "x".into(),
            a_ms: a,
            b_ms: b,
        };
        assert_eq!(t(Some(0), Some(0)).ratio(), Some(1.0));
        assert_eq!(t(Some(0), Some(1)).ratio(), None);
        assert_eq!(t(Some(4), Some(2)).ratio(), Some(0.5));
        assert_eq!(t(None, Some(2)).ratio(), None);
    }
}
