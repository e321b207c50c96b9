//! Our own: the control (an honest archive), and checks of this suite's own crafting.

use super::{
    archive, archive_with, both, exits, guest_report, images_with_expectations, merge,
    no_raw_control, out, plant_reset_png, png_claiming, png_inflating, rig, rig_bounded, verify,
};
use crate::common::scratch::Scratch;
use sharedos_report::report::REPORT_FILE;
use std::os::unix::fs::symlink;

/// The control: an archive built here verifies as a fresh run does.
#[test]
fn own_an_honest_archive_awaits_only_the_review() {
    let s = Scratch::new("own-honest");
    let r = s.path("r");
    archive(&r);
    let o = verify(&r);
    exits(&o, 3);
    no_raw_control(&o);
}

/// report.json itself a link to a report elsewhere: a verdict on the archive, not a usage
/// error, and nothing is read through it.
#[test]
fn own_report_json_that_is_a_link_fails_the_report() {
    let s = Scratch::new("own-link");
    let r = s.path("r");
    archive(&r);
    let outside = s.path("outside");
    archive(&outside);
    std::fs::remove_file(r.join(REPORT_FILE)).unwrap();
    symlink(outside.join(REPORT_FILE), r.join(REPORT_FILE)).unwrap();
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("symbolic link"), "{}", both(&o));
}

/// A matrix.json row label with escapes (matrix.json is as untrusted as a report) reaches the
/// terminal escaped.
#[test]
fn own_matrix_text_escapes_what_matrix_json_says() {
    let s = Scratch::new("own-matrix");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    let mut g = guest_report();
    g.environment.kernel_release = "6.1\u{1b}[2J\r".into();
    archive_with(&r, g, |_| {});
    let m = s.path("matrix");
    let o = merge(&m, &images, &[&r]);
    no_raw_control(&o);
    let path = m.join("matrix.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["cells"][0]["image"] =
        serde_json::json!("bookworm\u{1b}]8;;http://evil\u{7}click\u{1b}]8;;\u{7}");
    v["cells"][0]["reason"] = serde_json::json!("\u{1b}[2J");
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let o = rig(&[&"show", &m]);
    no_raw_control(&o);
}

/// The crafted PNGs above are real ones: the png crate decodes a small one to black pixels.
#[test]
fn own_the_crafted_pngs_decode() {
    for (w, h) in [(64, 40), (7, 3), (1, 1), (300, 5)] {
        let bytes = png_inflating(w, h, u64::from(h));
        let d = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut r = d.read_info().unwrap();
        let mut buf = vec![1u8; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (w, h));
        assert!(buf.iter().all(|b| *b == 0), "{w}x{h}");
    }
    assert!(png_claiming(4000, 1 << 31).len() < 80);
}

/// A PNG of plausible size whose pixel data goes on inflating far past its last row: the
/// decode stops at the image's end instead of inflating the rest, within a small address space.
#[test]
fn own_pixel_data_past_the_last_row_is_not_inflated() {
    let s = Scratch::new("own-trailing");
    let r = s.path("r");
    archive(&r);
    let bomb = png_inflating(640, 480, (390 << 20) / (1 + 3 * 640));
    assert!(bomb.len() < 400_000, "{}", bomb.len());
    plant_reset_png(&r, &bomb);
    let o = rig_bounded(256, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("reset.png"), "{}", both(&o));
}
