//! 5. Fidelity differences are matched by key and cannot be dropped.

use super::{archive_with, both, exits, guest_report, out, verify};
use crate::common::scratch::Scratch;
use sharedos_report::report::REPORT_FILE;

/// A guest that drops the differences no option closes does not verify.
#[test]
fn c5_dropping_the_unclosable_fidelity_differences_fails() {
    let s = Scratch::new("c5-drop");
    let r = s.path("r");
    let mut g = guest_report();
    g.fidelity_differences
        .retain(|d| d.key.closable().is_some());
    assert_eq!(g.fidelity_differences.len(), 6);
    archive_with(&r, g, |_| {});
    let o = verify(&r);
    exits(&o, 1);
    for k in [
        "shared_kernel",
        "xvfb_framebuffer",
        "criu_needs_root_and_same_kernel",
        "gui_review_is_pixels",
    ] {
        assert!(
            out(&o).contains(&format!("leaves out the fidelity difference {k}")),
            "{k}: {}",
            both(&o)
        );
    }
}

/// A closable difference left out, its words put into another entry instead: verify matches
/// the difference by its key, not by words, and says which one is missing.
#[test]
fn c5_a_reworded_fidelity_difference_is_missing() {
    use sharedos_report::fidelity::Key;
    let s = Scratch::new("c5-reword");
    let r = s.path("r");
    let mut g = guest_report();
    g.fidelity_differences
        .retain(|d| d.key != Key::NoUserNamespace);
    let xvfb = g
        .fidelity_differences
        .iter_mut()
        .find(|d| d.key == Key::XvfbFramebuffer)
        .unwrap();
    xvfb.detail = format!("and {}", Key::NoUserNamespace.text());
    archive_with(&r, g, |_| {});
    let o = verify(&r);
    exits(&o, 1);
    assert!(
        out(&o).contains("leaves out the fidelity difference no_user_namespace"),
        "{}",
        both(&o)
    );
    // An unknown key is not a difference the rig knows: the report does not parse.
    let text = std::fs::read_to_string(r.join(REPORT_FILE)).unwrap();
    std::fs::write(
        r.join(REPORT_FILE),
        text.replacen("\"xvfb_framebuffer\"", "\"no user namespace\"", 1),
    )
    .unwrap();
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("unknown variant"), "{}", both(&o));
}
