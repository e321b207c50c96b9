//! Pages in headless Chromium: a page screenshot at a fixed size and decoded, and what the
//! checks of a screenshot share (a colour found, an image found unscaled). The report page's
//! check lives in tests/real_reports.rs; a comparison page's, [`check_compare_page`], is
//! called by the vm-compare test on the directory it made.

use super::{assert_not_timed_out, bounded};
use std::path::Path;
use std::process::Stdio;

/// Bound on one headless Chromium screenshot.
pub const CHROMIUM_TIMEOUT_S: u32 = 120;

pub struct Rgb {
    pub width: usize,
    pub height: usize,
    pub px: Vec<[u8; 3]>,
}

impl Rgb {
    pub fn decode(bytes: &[u8]) -> Rgb {
        let mut dec = png::Decoder::new(bytes);
        dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
        let mut reader = dec.read_info().expect("a valid PNG");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("a valid PNG frame");
        let step = match info.color_type {
            png::ColorType::Rgb => 3,
            png::ColorType::Rgba => 4,
            png::ColorType::Grayscale => 1,
            png::ColorType::GrayscaleAlpha => 2,
            png::ColorType::Indexed => panic!("indexed after EXPAND"),
        };
        let px = buf[..info.buffer_size()]
            .chunks(step)
            .map(|c| {
                if step < 3 {
                    [c[0], c[0], c[0]]
                } else {
                    [c[0], c[1], c[2]]
                }
            })
            .collect();
        Rgb {
            width: info.width as usize,
            height: info.height as usize,
            px,
        }
    }

    pub fn at(&self, x: usize, y: usize) -> [u8; 3] {
        self.px[y * self.width + x]
    }
}

pub fn close(a: [u8; 3], b: [u8; 3]) -> bool {
    a.iter().zip(b).all(|(x, y)| x.abs_diff(y) <= 3)
}

/// Where `img` is drawn unscaled in `shot`, found by its first uniform row: the top-left corner.
pub fn find_image(shot: &Rgb, img: &Rgb) -> Option<(usize, usize)> {
    let row = (0..img.height).find(|&y| (0..img.width).all(|x| img.at(x, y) == img.at(0, y)))?;
    let c = img.at(0, row);
    for y in row..shot.height {
        let mut x = 0;
        while x < shot.width {
            if !close(shot.at(x, y), c) {
                x += 1;
                continue;
            }
            let start = x;
            while x < shot.width && close(shot.at(x, y), c) {
                x += 1;
            }
            if x - start == img.width {
                return Some((start, y - row));
            }
        }
    }
    None
}

/// The share of `img`'s pixels that `shot` shows at `origin`.
pub fn match_share(shot: &Rgb, img: &Rgb, (ox, oy): (usize, usize)) -> f64 {
    if ox + img.width > shot.width || oy + img.height > shot.height {
        return 0.0;
    }
    let mut same = 0usize;
    for y in 0..img.height {
        for x in 0..img.width {
            if close(shot.at(ox + x, oy + y), img.at(x, y)) {
                same += 1;
            }
        }
    }
    same as f64 / (img.width * img.height) as f64
}

pub fn has_colour_above(shot: &Rgb, c: [u8; 3], rows: usize) -> bool {
    shot.px[..rows.min(shot.height) * shot.width]
        .iter()
        .filter(|p| **p == c)
        .count()
        > 20
}

pub const SHOT_W: usize = 1200;
pub const SHOT_H: usize = 2400;

pub fn screenshot(work: &Path, page: &Path, name: &str) -> Rgb {
    let png_path = work.join(format!("{name}.png"));
    let profile = work.join(format!("profile-{name}"));
    let _ = std::fs::remove_dir_all(&profile);
    std::fs::create_dir_all(&profile).unwrap();
    let chromium = Path::new("/usr/bin/chromium");
    assert!(
        chromium.is_file(),
        "{} is missing: install Debian's package `chromium` (.ci/packages.txt lists it)",
        chromium.display()
    );
    let o = bounded(CHROMIUM_TIMEOUT_S, chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--window-size={SHOT_W},{SHOT_H}"))
        .arg(format!("--screenshot={}", png_path.display()))
        .arg(format!("file://{}", page.display()))
        .env("HOME", &profile)
        .env("XDG_CONFIG_HOME", profile.join("config"))
        .env("XDG_CACHE_HOME", profile.join("cache"))
        .stdin(Stdio::null())
        .output()
        .expect("running chromium");
    assert_not_timed_out(&o, "chromium --headless --screenshot");
    let bytes = std::fs::read(&png_path).unwrap_or_else(|e| {
        panic!(
            "chromium wrote no screenshot ({e}), exit {:?}\nstderr:\n{}",
            o.status.code(),
            String::from_utf8_lossy(&o.stderr)
        )
    });
    assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    Rgb::decode(&bytes)
}

/// Pixels of `shot` within a step of `c`: how many, and the first row holding one.
fn count(shot: &Rgb, c: [u8; 3]) -> (usize, Option<usize>) {
    let mut n = 0;
    let mut first = None;
    for y in 0..shot.height {
        for x in 0..shot.width {
            if close(shot.at(x, y), c) {
                n += 1;
                first.get_or_insert(y);
            }
        }
    }
    (n, first)
}

/// `html` without its `<svg>` elements numbered in `drop` (0 the first).
fn without_svgs(html: &str, drop: &[usize]) -> String {
    let mut out = String::new();
    let mut rest = html;
    let mut i = 0;
    while let Some(start) = rest.find("<svg") {
        let end = start + rest[start..].find("</svg>").expect("a closed svg") + "</svg>".len();
        out.push_str(&rest[..start]);
        if !drop.contains(&i) {
            out.push_str(&rest[start..end]);
        }
        rest = &rest[end..];
        i += 1;
    }
    out.push_str(rest);
    out
}

/// The comparison page of `dir` (a vm-compare directory) in headless Chromium draws its two
/// charts: `rig show DIR --format html` is screenshot whole, without its memory chart, without
/// its latency chart and without both. Each design's colour (`render::compare::chart`) must be
/// drawn below the verdict and the table, by each chart (taking either out leaves fewer of its
/// pixels, but some), and nowhere once both are out, so that what was found is the charts.
/// `work` is a scratch directory.
pub fn check_compare_page(rig: &Path, dir: &Path, work: &Path) {
    use sharedos_rig::render::compare::chart;
    std::fs::create_dir_all(work).unwrap();
    let o = bounded(120, rig)
        .arg("show")
        .arg(dir)
        .args(["--format", "html"])
        .stdin(Stdio::null())
        .output()
        .expect("running sharedos-rig show --format html");
    assert_not_timed_out(&o, "sharedos-rig show --format html");
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "show --format html of {}: exit {:?}\n{}",
        dir.display(),
        o.status.code(),
        String::from_utf8_lossy(&o.stderr)
    );
    let html = String::from_utf8(o.stdout).expect("a UTF-8 page");
    assert_eq!(html.matches("<svg").count(), 2, "two charts on the page");
    let shoot = |name: &str, drop: &[usize]| -> Rgb {
        let page = work.join(format!("{name}.html"));
        std::fs::write(&page, without_svgs(&html, drop)).unwrap();
        let shot = screenshot(work, &page, name);
        assert_eq!((shot.width, shot.height), (SHOT_W, SHOT_H));
        shot
    };
    let whole = shoot("compare", &[]);
    if let Some(keep) = std::env::var_os("SHAREDOS_RIG_KEEP_SCREENSHOT") {
        std::fs::copy(work.join("compare.png"), keep).unwrap();
    }
    let no_memory = shoot("compare-no-memory", &[0]);
    let no_latency = shoot("compare-no-latency", &[1]);
    let bare = shoot("compare-bare", &[0, 1]);
    for (name, c) in [("shared-OS", chart::SHARED_OS), ("VM each", chart::VM_EACH)] {
        let c = [c.0, c.1, c.2];
        let (all, first) = count(&whole, c);
        assert!(
            all > 100,
            "{name}'s colour {c:02x?}: {all} pixels on the page"
        );
        // The page opens on its verdict and its table; the charts follow them.
        assert!(
            first.is_some_and(|y| y > 300),
            "{name}'s colour {c:02x?} first drawn at row {first:?}, above the charts"
        );
        for (without, shot) in [("memory", &no_memory), ("latency", &no_latency)] {
            let (n, _) = count(shot, c);
            assert!(
                n > 30 && n + 30 < all,
                "{name}'s colour {c:02x?}: {n} pixels without the {without} chart, {all} with \
                 it: each chart should draw it"
            );
        }
        let (n, _) = count(&bare, c);
        assert!(
            n < 20,
            "{name}'s colour {c:02x?} is on the page without its charts ({n} pixels)"
        );
    }
}
