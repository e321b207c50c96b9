//! 7. Signatures and reviews.

use super::{both, exits, out, review, rig_in, signed};
use crate::common::scratch::Scratch;
use sharedos_report::report::REVIEW_FILE;

/// A signed FAIL review, deleted with its signature, does not turn the report back into one
/// that only awaits a review.
#[test]
fn c7_a_deleted_signed_fail_review_is_noticed() {
    let s = Scratch::new("c7-deleted");
    let (r, allowed, _, alice) = signed(&s);
    exits(
        &rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]),
        3,
    );
    exits(&review(&s, &r, "fail", "alice@example", &alice), 0);
    exits(
        &rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]),
        1,
    );
    std::fs::remove_file(r.join(REVIEW_FILE)).unwrap();
    std::fs::remove_file(r.join("review.json.sig")).unwrap();
    let o = rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]);
    exits(&o, 1);
    assert!(out(&o).contains("review"), "{}", both(&o));
}

/// A review signed by a key the allowed signers file gives to another principal is refused:
/// the CI key cannot sign a review as alice.
#[test]
fn c7_a_review_by_a_principal_its_key_is_not_allowed_for_is_refused() {
    let s = Scratch::new("c7-principal");
    let (r, allowed, ci, alice) = signed(&s);
    exits(&review(&s, &r, "pass", "alice@example", &ci), 0);
    let o = rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]);
    exits(&o, 1);
    assert!(out(&o).contains("alice@example"), "{}", both(&o));
    exits(&review(&s, &r, "pass", "alice@example", &alice), 0);
    exits(
        &rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]),
        0,
    );
}
