//! 8. Numbers near overflow.

use super::{archive_with, both, err, exits, guest_report, out, rig, verify};
use crate::common::scratch::Scratch;
use sharedos_report::report::GateName;

/// A restored counter near u64::MAX: the host's recheck of counter_continues must not
/// overflow (a debug build panics).
#[test]
fn c8_a_counter_near_u64_max_does_not_panic() {
    let s = Scratch::new("c8-counter");
    let r = s.path("r");
    archive_with(&r, guest_report(), |h| {
        let g = h.gate_mut(GateName::RestoreLiveProcess).unwrap();
        let c = g
            .checks
            .iter_mut()
            .find(|c| c.name == "counter_continues")
            .unwrap();
        c.value["dump_time"] = serde_json::json!(u64::MAX - 5);
        c.value["seen"] = serde_json::json!(u64::MAX - 3);
        c.value["max"] = serde_json::json!(u64::MAX);
    });
    let o = verify(&r);
    assert!(!err(&o).contains("panicked"), "{}", both(&o));
    exits(&o, 1);
}

/// Gate durations near 2^63: their sum does not panic in a debug build, nor wrap, and verify
/// names the problem.
#[test]
fn c8_durations_near_2_pow_63_do_not_panic_or_wrap() {
    let s = Scratch::new("c8-durations");
    let r = s.path("r");
    let mut g = guest_report();
    g.gates[0].duration_ms = 1 << 63;
    g.gates[1].duration_ms = 1 << 63;
    archive_with(&r, g, |_| {});
    for format in ["text", "md", "html", "junit"] {
        let o = rig(&[&"show", &r, &"--format", &format]);
        assert!(!err(&o).contains("panicked"), "{format}: {}", both(&o));
        exits(&o, 0);
    }
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("duration"), "{}", both(&o));
}
