//! 1. The matrix judges with verify.

use super::{
    archive, archive_with, both, err, exits, guest_report, images_with_expectations, merge, out,
    plant_reset_png, state_dir, verify, BIN,
};
use crate::common::scratch::Scratch;
use sharedos_report::report::Status;
use std::process::Command;

/// A row whose statuses match its image's expectations but whose report verify rejects (an
/// artifact changed after it was hashed) is not "as expected", and merge exits 1.
#[test]
fn c1_a_matrix_row_verify_rejects_is_not_as_expected() {
    let s = Scratch::new("c1-merge");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    exits(&verify(&r), 3);
    std::fs::write(r.join("serial.log"), b"SHAREDOS-READY, edited\n").unwrap();
    exits(&verify(&r), 1);
    let m = s.path("matrix");
    let o = merge(&m, &images, &[&r]);
    exits(&o, 1);
    assert!(!err(&o).contains("as expected"), "{}", both(&o));
}

/// The host's recheck (forged pixels) decides a matrix row with expectations too.
#[test]
fn c1_a_matrix_row_whose_pixels_are_forged_fails_the_merge() {
    let s = Scratch::new("c1-pixels");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    let mut other = hostile_gate::honest::frame();
    other.rgb[0] ^= 0x40;
    hostile_gate::honest::write_png(&other, &r.join("guest/png/reset.png")).unwrap();
    let bytes = std::fs::read(r.join("guest/png/reset.png")).unwrap();
    plant_reset_png(&r, &bytes);
    exits(&verify(&r), 1);
    exits(&merge(&s.path("matrix"), &images, &[&r]), 1);
}

/// `show MATRIX` judges each row again, expectations included, and says where matrix.json
/// disagrees: an edited `expected`, `differences` and `exit_code` do not make a row pass.
#[test]
fn c1_show_matrix_recomputes_what_matrix_json_claims() {
    let s = Scratch::new("c1-show");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    let mut g = guest_report();
    g.gates[3].status = Status::Fail;
    archive_with(&r, g, |_| {});
    let m = s.path("matrix");
    exits(&merge(&m, &images, &[&r]), 1);
    let path = m.join("matrix.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["cells"][0]["expected"] = v["cells"][0]["gates"].clone();
    v["cells"][0]["differences"] = serde_json::json!([]);
    v["exit_code"] = serde_json::json!(0);
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let o = Command::new(BIN)
        .args(["show", m.to_str().unwrap()])
        .env("SHAREDOS_RIG_IMAGES", &images)
        .env("SHAREDOS_RIG_STATE_DIR", state_dir())
        .output()
        .unwrap();
    exits(&o, 0);
    assert!(err(&o).contains("expect"), "{}", both(&o));
    assert!(err(&o).contains("exit"), "{}", both(&o));
    assert!(
        out(&o).starts_with("matrix: 1 image(s), exit 1"),
        "{}",
        both(&o)
    );
    assert!(!out(&o).contains("as expected"), "{}", both(&o));

    // A row whose report was changed after the merge: show says so and does not pass it.
    let m2 = s.path("matrix2");
    let r2 = s.path("in2/bookworm");
    archive(&r2);
    exits(&merge(&m2, &images, &[&r2]), 0);
    std::fs::write(m2.join("bookworm/serial.log"), b"edited").unwrap();
    let o = Command::new(BIN)
        .args(["show", m2.to_str().unwrap()])
        .env("SHAREDOS_RIG_IMAGES", &images)
        .env("SHAREDOS_RIG_STATE_DIR", state_dir())
        .output()
        .unwrap();
    assert!(err(&o).contains("serial.log"), "{}", both(&o));
    assert!(!out(&o).contains("as expected"), "{}", both(&o));
}
