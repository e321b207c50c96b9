//! 3. Bounded decode, reads and hashing.

use super::{
    archive, both, exits, images_with_expectations, out, plant_reset_png, png_claiming,
    png_inflating, read, rig_bounded, rig_within, verify, write_json,
};
use crate::common::scratch::Scratch;
use sharedos_report::digest;
use sharedos_report::report;

/// A 65-byte PNG claiming 4000 x 2^31 pixels: verify, show --format html, list and merge
/// refuse it within a small address space instead of aborting on the allocation it asks for.
#[test]
fn c3_a_png_claiming_billions_of_pixels_is_refused_before_any_buffer() {
    let s = Scratch::new("c3-dims");
    let images = images_with_expectations(&s);
    let r = s.path("reports/bookworm");
    archive(&r);
    let bomb = png_claiming(4000, 1 << 31);
    assert!(bomb.len() < 80);
    plant_reset_png(&r, &bomb);
    let o = rig_bounded(512, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("reset.png"), "{}", both(&o));
    exits(&rig_bounded(512, &[&"show", &r, &"--format", &"html"]), 0);
    exits(&rig_bounded(512, &[&"list", &s.path("reports")]), 0);
    let m = s.path("matrix");
    let o = rig_bounded(
        512,
        &[
            &"matrix",
            &"merge",
            &"--out",
            &m,
            &"--images-dir",
            &images,
            &r,
        ],
    );
    exits(&o, 1);
}

/// A deflate bomb: a 390 KB PNG whose pixels inflate to 390 MiB.
#[test]
fn c3_a_deflate_bomb_is_refused_within_a_bound() {
    let s = Scratch::new("c3-bomb");
    let r = s.path("r");
    archive(&r);
    let bomb = png_inflating(11_400, 12_000, 12_000);
    assert!(bomb.len() < 400_000, "{}", bomb.len());
    plant_reset_png(&r, &bomb);
    let o = rig_bounded(256, &[&"verify", &r]);
    exits(&o, 1);
    exits(&rig_bounded(256, &[&"show", &r, &"--format", &"html"]), 0);
}

/// One 30 MiB "PNG" listed 100 times: the html page does not hold 100 copies at once, and
/// verify names the repeated entry.
#[test]
fn c3_html_of_a_png_listed_100_times_stays_bounded() {
    let s = Scratch::new("c3-html");
    let r = s.path("r");
    archive(&r);
    let big: Vec<u8> = (0..30u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(r.join("guest/png/big.png"), &big).unwrap();
    drop(big);
    let mut rep = read(&r);
    let a = digest::artifact(&r, "guest/png/big.png", "png").unwrap();
    for _ in 0..100 {
        rep.artifacts.push(a.clone());
    }
    write_json(&r, &rep);
    let o = rig_bounded(1024, &[&"show", &r, &"--format", &"html"]);
    exits(&o, 0);
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("guest/png/big.png"), "{}", both(&o));
}

/// A 256 GiB sparse file listed as an artifact is refused by its size, not hashed for minutes.
#[test]
fn c3_a_huge_sparse_artifact_is_refused_by_its_size() {
    let s = Scratch::new("c3-sparse");
    let r = s.path("r");
    archive(&r);
    let f = std::fs::File::create(r.join("guest/huge.log")).unwrap();
    f.set_len(256 << 30).unwrap();
    drop(f);
    let mut rep = read(&r);
    rep.artifacts.push(report::Artifact {
        path: "guest/huge.log".into(),
        sha256: "0".repeat(64),
        bytes: 256 << 30,
        kind: "log".into(),
    });
    write_json(&r, &rep);
    let o = rig_within(60, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("guest/huge.log"), "{}", both(&o));
}

/// One log listed 60,000 times: the repeated entries are refused, and the file is not hashed
/// 60,000 times.
#[test]
fn c3_one_artifact_listed_60000_times_is_refused() {
    let s = Scratch::new("c3-many");
    let r = s.path("r");
    archive(&r);
    std::fs::write(r.join("guest/big.log"), vec![b'x'; 1 << 20]).unwrap();
    let mut rep = read(&r);
    let a = digest::artifact(&r, "guest/big.log", "log").unwrap();
    for _ in 0..60_000 {
        rep.artifacts.push(a.clone());
    }
    write_json(&r, &rep);
    let o = rig_within(60, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("guest/big.log"), "{}", both(&o));
}
