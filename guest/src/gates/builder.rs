//! Builds a gate from its checks: PASS only when there are checks and all passed.

use serde_json::Value;
use sharedos_report::cause::Cause;
use sharedos_report::report::{Check, Evidence, Gate, GateName, Status};

pub struct GateBuilder {
    pub gate: Gate,
    pub problems: Vec<String>,
}

impl GateBuilder {
    pub fn new(name: GateName) -> Self {
        GateBuilder {
            gate: Gate::new(name, Status::Fail, ""),
            problems: Vec::new(),
        }
    }

    pub fn check(&mut self, c: Check) -> bool {
        let ok = c.passed;
        if !ok {
            let why = if c.expected.is_empty() {
                format!("{} failed (saw {})", c.name, c.value)
            } else {
                format!(
                    "{} failed: expected {}, saw {}",
                    c.name, c.expected, c.value
                )
            };
            self.problems.push(why);
        }
        self.gate.checks.push(c);
        ok
    }

    /// As `check`, but a failure is explained by `fix` (what is wrong and how to go on).
    pub fn require(&mut self, c: Check, fix: impl FnOnce() -> String) -> bool {
        let ok = c.passed;
        if !ok {
            self.problems.push(fix());
        }
        self.gate.checks.push(c);
        ok
    }

    /// Whether every check so far passed and no problem was met.
    pub fn checks_passed(&self) -> bool {
        self.problems.is_empty() && self.gate.checks.iter().all(|c| c.passed)
    }

    /// Records a check whose failure another problem of this gate already explains.
    pub fn record(&mut self, c: Check) {
        self.gate.checks.push(c);
    }

    pub fn evidence(&mut self, e: Evidence) {
        self.gate.evidence.push(e);
    }

    /// The evidence of a step that may not have been taken.
    pub fn evidence_opt(&mut self, e: Option<Evidence>) {
        self.gate.evidence.extend(e);
    }

    /// What the program a step failed on said (its log's first error): the first one a gate
    /// is given stays, as it is the one the rest followed from.
    pub fn cause(&mut self, c: Option<Cause>) {
        if self.gate.cause.is_none() {
            self.gate.cause = c;
        }
    }

    pub fn data(&mut self, k: &str, v: Value) {
        self.gate.data.insert(k.to_string(), v);
    }

    /// A step that could not be carried out at all: the gate fails with it.
    pub fn problem(&mut self, p: impl Into<String>) {
        self.problems.push(p.into());
    }

    pub fn finish(mut self, pass_reason: &str) -> Gate {
        let all_passed = self.gate.checks.iter().all(|c| c.passed);
        if self.problems.is_empty() && !self.gate.checks.is_empty() && all_passed {
            self.gate.status = Status::Pass;
            self.gate.reason = pass_reason.to_string();
            // A failure the gate went past (a density search's last restore) is not its cause.
            self.gate.cause = None;
        } else {
            self.gate.status = Status::Fail;
            if self.problems.is_empty() {
                let failed: Vec<&str> = self
                    .gate
                    .checks
                    .iter()
                    .filter(|c| !c.passed)
                    .map(|c| c.name.as_str())
                    .collect();
                self.problems.push(if failed.is_empty() {
                    "no check was made".into()
                } else {
                    format!("failed checks: {}", failed.join(", "))
                });
            }
            self.gate.reason = self.problems.join("; ");
        }
        self.gate
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use sharedos_report::compare::check;

    #[test]
    fn gate_without_checks_is_not_pass() {
        let g = GateBuilder::new(GateName::Launch).finish("ok");
        assert_eq!(g.status, Status::Fail);
        let mut b = GateBuilder::new(GateName::Launch);
        b.check(check("a", true, json!(1), ""));
        assert_eq!(b.finish("ok").status, Status::Pass);
        let mut b = GateBuilder::new(GateName::Launch);
        b.check(check("a", true, json!(1), ""));
        b.check(check("b", false, json!(2), "3"));
        let g = b.finish("ok");
        assert_eq!(g.status, Status::Fail);
        assert!(
            g.reason.contains("b failed: expected 3, saw 2"),
            "{}",
            g.reason
        );
    }
}
