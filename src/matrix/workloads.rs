//! The matrix's workload axis (`vm-matrix --workloads LIST|all`): each workload on each CRIU
//! line Debian ships, one row per (workload, line), on the smallest image of that line holding
//! the workload (`image::workload::images_with`'s order).
//!
//! An image's line is read from its lock (`package criu VERSION`), which records what the image
//! installs: inheritance alone cannot say it (trixie-bpo-criu42 inherits trixie, whose criu is
//! 4.1.1, and takes criu 4.2.1 from an extra suite). The image must also be the line's root or
//! inherit it, so that one line keeps one suite and one kernel: forky, Debian's testing suite
//! whose lock goes stale within days, carries criu 4.2.1 too, but is not the line's.
//!
//! A (workload, line) that no image holds is not refused: it is a NOT_RUN row naming the image
//! to add, and the other rows still run. The deployment table wants one cell per workload and
//! line, and a gap there is a finding a reader must see, not a reason to measure nothing.

use super::variant::{row_workload, Row};
use crate::image::definition::{self, ImageDir};
use crate::image::lock::Lock;
use crate::image::workload;
use anyhow::{bail, Context, Result};
use sharedos_report::report::Workload;
use std::path::Path;

/// One CRIU line Debian ships: the image it is rooted at, and criu's upstream version there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Line {
    pub root: &'static str,
    pub criu: &'static str,
    /// The image to add when no image of the line holds a workload: the root with every
    /// workload's programs.
    pub apps_image: &'static str,
}

/// The lines, oldest first.
pub const LINES: [Line; 3] = [
    Line {
        root: "bookworm",
        criu: "3.17.1",
        apps_image: "bookworm-apps",
    },
    Line {
        root: "trixie",
        criu: "4.1.1",
        apps_image: "trixie-apps",
    },
    Line {
        root: "trixie-bpo-criu42",
        criu: "4.2.1",
        apps_image: "trixie-bpo-criu42-apps",
    },
];

/// The copies every workload row's density gate restores: its figures are the table's memory
/// per copy (and the density gate's own restores a second reading of fork latency).
pub const COPIES_VARIANT: &str = "copies2";

/// `xterm,office` or `all` into workloads, in the order given (`all`: `Workload::ALL`'s).
pub fn parse_workloads(s: &str) -> Result<Vec<Workload>> {
    let names: Vec<&str> = s
        .split(',')
        .map(str::trim)
        .filter(|x| !x.is_empty())
        .collect();
    let list = || {
        Workload::ALL
            .iter()
            .map(|w| w.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if names.is_empty() {
        bail!(
            "--workloads {s:?} names no workload; nothing was built or booted\nfix: give a comma \
             list of workloads ({}) or `all`",
            list()
        );
    }
    if names == ["all"] {
        return Ok(Workload::ALL.to_vec());
    }
    let mut out: Vec<Workload> = Vec::new();
    for n in names {
        let Some(w) = Workload::parse(n) else {
            bail!(
                "--workloads: {n:?} is not a workload; nothing was built or booted\nfix: give \
                 workloads from {}, or `all` alone",
                list()
            );
        };
        if out.contains(&w) {
            bail!("--workloads names {w} twice\nfix: give each workload once");
        }
        out.push(w);
    }
    Ok(out)
}

/// The upstream criu version an image's lock installs (`3.17.1` of `3.17.1-2+deb12u2`); None
/// when it has no lock or installs no criu.
pub fn image_criu(images_dir: &Path, image: &str) -> Option<String> {
    let text = std::fs::read_to_string(images_dir.join(image).join(definition::LOCK_FILE)).ok()?;
    let lock = Lock::parse(&text).ok()?;
    let p = lock.packages.iter().find(|p| p.name == "criu")?;
    Some(upstream(&p.version).to_string())
}

/// A Debian version's upstream part: no epoch, no revision.
fn upstream(v: &str) -> &str {
    let v = v.split_once(':').map_or(v, |(_, rest)| rest);
    v.rsplit_once('-').map_or(v, |(u, _)| u)
}

/// Whether `image` is on `line`: its lock installs the line's criu, and it is the line's root or
/// inherits it.
pub fn on_line(images_dir: &Path, image: &str, line: &Line) -> bool {
    if image_criu(images_dir, image).as_deref() != Some(line.criu) {
        return false;
    }
    ImageDir::load(images_dir, image).is_ok_and(|d| {
        d.sources
            .iter()
            .any(|s| s.parent().and_then(Path::file_name) == Some(line.root.as_ref()))
    })
}

/// One (workload, line) of the axis: the row to run, or why there is none.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AxisRow {
    pub workload: Workload,
    pub line: Line,
    pub row: Row,
    /// None: the row runs. Some((reason, fix)): no image of the line holds the workload; the
    /// row is labelled with the line's root and is a NOT_RUN cell.
    pub missing: Option<(String, String)>,
}

/// The row of `w` on `line`: `image+workload+copies2` (a plain `image+copies2` for the
/// default workload), on the first image of [`workload::images_with`] that is on the line.
pub fn axis_row(images_dir: &Path, w: Workload, line: &Line) -> AxisRow {
    let image = workload::images_with(images_dir, w)
        .into_iter()
        .find(|i| on_line(images_dir, i, line));
    let mut variants: Vec<String> = Vec::new();
    if !w.is_default() {
        variants.push(w.as_str().to_string());
    }
    variants.push(COPIES_VARIANT.to_string());
    let missing = image.is_none().then(|| {
        let packages: Vec<&str> = w.programs().iter().map(|(_, p)| *p).collect();
        (
            format!(
                "no image on criu {}'s line holds {w}: add images/{} (the line's image is {} or \
                 inherits it, its lock installs criu {}; {w} needs {})",
                line.criu,
                line.apps_image,
                line.root,
                line.criu,
                packages.join(", ")
            ),
            format!(
                "add images/{}/image.conf (`inherit = {}`, with the packages {}) and lock it: \
                 `cargo xtask image --image {} --update-lock`",
                line.apps_image,
                line.root,
                packages.join(", "),
                line.apps_image
            ),
        )
    });
    AxisRow {
        workload: w,
        line: *line,
        row: Row {
            image: image.unwrap_or_else(|| line.root.to_string()),
            variants,
        },
        missing,
    }
}

/// Every workload on every line, workload by workload.
pub fn axis(images_dir: &Path, workloads: &[Workload]) -> Vec<AxisRow> {
    workloads
        .iter()
        .flat_map(|w| LINES.iter().map(move |l| axis_row(images_dir, *w, l)))
        .collect()
}

/// The rows `--workloads` asks for, checked: each line's root exists under `images_dir`.
pub fn resolve(images_dir: &Path, workloads: &[Workload]) -> Result<Vec<AxisRow>> {
    for l in &LINES {
        definition::require_image(images_dir, l.root)
            .with_context(|| format!("criu {}'s line is rooted at image {}", l.criu, l.root))?;
    }
    Ok(axis(images_dir, workloads))
}

/// The workload of a matrix row's variants (the default for a plain row).
pub fn of_row(row: &Row) -> Workload {
    row_workload(&row.variants)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn images() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
    }

    #[test]
    fn the_workloads_list_is_parsed_and_bad_input_named() {
        assert_eq!(
            parse_workloads("xterm, desktop").unwrap(),
            [Workload::Xterm, Workload::Desktop]
        );
        assert_eq!(parse_workloads("all").unwrap(), Workload::ALL.to_vec());
        for (bad, says) in [
            ("", "names no workload"),
            (" , ", "names no workload"),
            ("kde", "\"kde\" is not a workload"),
            ("xterm,all", "\"all\" is not a workload"),
            ("xterm,xterm", "names xterm twice"),
        ] {
            let e = format!("{:#}", parse_workloads(bad).unwrap_err());
            assert!(e.contains(says), "{bad:?}: {e}");
            assert!(e.contains("\nfix: "), "{bad:?}: {e}");
        }
    }

    #[test]
    fn an_images_criu_is_read_from_its_lock() {
        assert_eq!(upstream("3.17.1-2+deb12u2"), "3.17.1");
        assert_eq!(upstream("1:4.2.1-1"), "4.2.1");
        assert_eq!(upstream("4.1.1"), "4.1.1");
        let dir = images();
        assert_eq!(image_criu(&dir, "bookworm").as_deref(), Some("3.17.1"));
        assert_eq!(image_criu(&dir, "trixie-apps").as_deref(), Some("4.1.1"));
        assert_eq!(
            image_criu(&dir, "trixie-bpo-criu42").as_deref(),
            Some("4.2.1")
        );
        assert_eq!(image_criu(&dir, "no-such-image"), None);
        // forky installs 4.2.1 but is not rooted at the line; trixie-bpo is rooted at trixie
        // but installs 4.1.1 of it... and trixie-bpo-criu42 inherits trixie, with 4.2.1.
        assert!(!on_line(&dir, "forky", &LINES[2]));
        assert!(on_line(&dir, "trixie-bpo", &LINES[1]));
        assert!(!on_line(&dir, "trixie-bpo-criu42", &LINES[1]));
        assert!(on_line(&dir, "trixie-bpo-criu42-apps", &LINES[2]));
        assert!(!on_line(&dir, "bookworm-apps", &LINES[1]));
    }

    #[test]
    fn every_workload_gets_a_row_on_every_line_on_the_smallest_image_of_that_line() {
        let dir = images();
        let rows = resolve(&dir, &Workload::ALL).unwrap();
        assert_eq!(rows.len(), Workload::ALL.len() * LINES.len());
        for r in &rows {
            assert_eq!(r.missing, None, "{r:?}");
            assert!(on_line(&dir, &r.row.image, &r.line), "{r:?}");
            assert!(
                workload::missing(&dir, &r.row.image, r.workload)
                    .unwrap()
                    .is_empty(),
                "{r:?}"
            );
            assert_eq!(of_row(&r.row), r.workload);
            assert_eq!(r.row.variants.last().map(String::as_str), Some("copies2"));
        }
        let labels: Vec<String> = axis(&dir, &[Workload::Xterm, Workload::Desktop])
            .iter()
            .map(|r| r.row.label())
            .collect();
        assert_eq!(
            labels,
            [
                "bookworm+copies2",
                "trixie+copies2",
                "trixie-bpo-criu42+copies2",
                "bookworm-desktop+desktop+copies2",
                "trixie-desktop+desktop+copies2",
                "trixie-bpo-criu42-apps+desktop+copies2",
            ]
        );
        assert_eq!(
            axis_row(&dir, Workload::Browser, &LINES[1]).row.label(),
            "trixie-apps+browser+copies2"
        );
    }

    #[test]
    fn a_line_without_an_image_for_the_workload_is_a_not_run_row_naming_the_image_to_add() {
        // A copy of images/ without the trixie apps image: no trixie image holds the browser.
        let tmp = std::env::temp_dir().join(format!("sharedos-axis-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&tmp);
        for name in [
            "base",
            "bookworm",
            "trixie",
            "trixie-bpo",
            "trixie-bpo-criu42",
        ] {
            let from = images().join(name);
            let to = tmp.join(name);
            std::fs::create_dir_all(&to).unwrap();
            for f in std::fs::read_dir(&from).unwrap() {
                let f = f.unwrap();
                std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
            }
        }
        let r = axis_row(&tmp, Workload::Browser, &LINES[1]);
        assert_eq!(r.row.label(), "trixie+browser+copies2");
        let (reason, fix) = r.missing.clone().unwrap();
        assert!(
            reason
                .starts_with("no image on criu 4.1.1's line holds browser: add images/trixie-apps"),
            "{reason}"
        );
        assert!(reason.contains("firefox-esr"), "{reason}");
        assert!(fix.contains("images/trixie-apps/image.conf"), "{fix}");
        assert!(fix.contains("--image trixie-apps --update-lock"), "{fix}");
        // The default workload is held by every image.
        assert_eq!(axis_row(&tmp, Workload::Xterm, &LINES[1]).missing, None);
        // A line whose root is gone is refused before anything runs.
        std::fs::remove_dir_all(tmp.join("trixie-bpo-criu42")).unwrap();
        let e = format!("{:#}", resolve(&tmp, &[Workload::Xterm]).unwrap_err());
        assert!(e.contains("rooted at image trixie-bpo-criu42"), "{e}");
        std::fs::remove_dir_all(&tmp).unwrap();
    }
}
