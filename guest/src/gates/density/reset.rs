//! The CRIU design's reset, copy by copy: with every copy up and measured, each in turn is
//! ended and restored again from the dump under its label, timed as a restore is, and asked for
//! the dump-time state while the others stay up. It is what the VM arms' reset is for a VM (a
//! copy's QEMU ended and resumed again from the save), so the comparison has a reset latency
//! over the copies on both sides. Only with `--copies N`: a `max` search already stands at the
//! host's limit.

use super::{ask_copy, restore_one};
use crate::gates::{Ctx, GateBuilder};
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::model::tree::Observation;
use sharedos_report::report::Check;

/// What resetting every copy did.
pub struct Reset {
    /// The copies up after it (label, PID 1): each reset copy's new tree, or the old one where
    /// it could not be ended.
    pub up: Vec<(String, i32)>,
    /// Each reset's restore latency (ms), in order; a failed restore is not a reset.
    pub reset_ms: Vec<u64>,
    pub check: Check,
}

/// Resets each copy of `up` in turn.
pub fn reset_copies(
    ctx: &mut Ctx,
    g: &mut GateBuilder,
    up: &[(String, i32)],
    snap: &Observation,
) -> Reset {
    let mut errors: Vec<String> = Vec::new();
    let mut reset_ms = Vec::new();
    let mut now_up = Vec::new();
    for (label, pid) in up {
        if let Err(e) = ctx.kill_tree(*pid) {
            errors.push(format!("{label}: ending it for its reset: {e:#}"));
            now_up.push((label.clone(), *pid));
            continue;
        }
        ctx.copies.remove(label);
        let mut took = Vec::new();
        match restore_one(ctx, g, label, &mut took) {
            Ok(p) => {
                now_up.push((label.clone(), p));
                if ask_copy(ctx, label, p, snap).ok() {
                    reset_ms.extend(took);
                } else {
                    errors.push(format!(
                        "{label}: restored again, it did not answer with the dump-time state"
                    ));
                }
            }
            Err(e) => errors.push(e),
        }
    }
    let ok = errors.is_empty() && reset_ms.len() == up.len();
    Reset {
        up: now_up,
        check: reset_check(up.len(), &reset_ms, &errors, ok),
        reset_ms,
    }
}

fn reset_check(copies: usize, reset_ms: &[u64], errors: &[String], ok: bool) -> Check {
    check(
        "all_reset",
        ok,
        json!({"copies": copies, "reset_ms": reset_ms, "errors": errors}),
        "every copy ended and restored again from the dump while the others stayed up, each answering with the dump-time token, counter and windows",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reset_that_failed_or_did_not_answer_fails_the_check() {
        assert!(reset_check(2, &[2900, 3100], &[], true).passed);
        let failed = reset_check(
            2,
            &[2900],
            &["density-2: restoring density-2: criu said no".into()],
            false,
        );
        assert!(!failed.passed);
        assert_eq!(
            failed.value["errors"][0],
            "density-2: restoring density-2: criu said no"
        );
    }
}
