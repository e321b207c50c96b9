//! Which image holds a workload: the host reads it from the images' definitions (the packages
//! that bring the workload's programs), so that a run asked for a workload its image lacks is
//! refused before anything is built or booted, and a run that names no image gets one that has
//! it.

use super::definition::{list_images, ImageDir};
use super::DEFAULT_IMAGE;
use anyhow::{bail, Result};
use sharedos_report::report::Workload;
use std::path::Path;

/// The workload named by diagnose arguments (`--workload X` or `--workload=X`), the last one
/// winning as clap's does. None when there is none, or when it names no workload: the gate
/// binary's own check of the arguments says so, with its list.
pub fn in_args(args: &[String]) -> Option<Workload> {
    let mut found = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        if a == "--" {
            break;
        }
        let value = match a.strip_prefix("--workload") {
            Some("") => it.next().map(String::as_str),
            Some(rest) => rest.strip_prefix('='),
            None => None,
        };
        if let Some(v) = value {
            found = Some(Workload::parse(v));
        }
    }
    found.flatten()
}

/// The packages of `w` that the definition of `image` does not install.
pub fn missing(images_dir: &Path, image: &str, w: Workload) -> Result<Vec<&'static str>> {
    Ok(lacking(&ImageDir::load(images_dir, image)?, w))
}

fn lacking(image: &ImageDir, w: Workload) -> Vec<&'static str> {
    w.programs()
        .iter()
        .map(|(_, package)| *package)
        .filter(|p| !image.definition.packages.iter().any(|q| q == p))
        .collect()
}

/// The images under `images_dir` that hold `w`: those made from the default image first, then
/// the smallest (fewest packages in its definition), then by name. The smallest first, so that
/// an image holding every workload's programs (`bookworm-apps`) is chosen only for a workload
/// no narrower image holds. An image whose definition does not compose is left out. Each
/// definition is composed once.
pub fn images_with(images_dir: &Path, w: Workload) -> Vec<String> {
    let mut with: Vec<(bool, usize, String)> = list_images(images_dir)
        .into_iter()
        .filter_map(|n| {
            let d = ImageDir::load(images_dir, &n).ok()?;
            lacking(&d, w)
                .is_empty()
                .then(|| (!made_from_default(&d), d.definition.packages.len(), n))
        })
        .collect();
    with.sort();
    with.into_iter().map(|(_, _, n)| n).collect()
}

/// Whether the image is the default image or inherits from it.
fn made_from_default(image: &ImageDir) -> bool {
    image
        .sources
        .iter()
        .any(|s| s.parent().and_then(Path::file_name) == Some(DEFAULT_IMAGE.as_ref()))
}

/// How the user names an image where the refusal is made, for its fix line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Named {
    /// `--image NAME` (vm-run, vm-compare), which may also be left out to have one chosen.
    Flag,
    /// The image part of a matrix row, `NAME+variant`.
    Row,
}

/// Fails, in a line that names the problem and one that names the image to use, when `image`
/// lacks `w`.
pub fn require(images_dir: &Path, image: &str, w: Workload, named: Named) -> Result<()> {
    let lacks = missing(images_dir, image, w)?;
    if lacks.is_empty() {
        return Ok(());
    }
    let with = images_with(images_dir, w);
    let others = if with.len() > 1 {
        format!(" (or {})", with[1..].join(", "))
    } else {
        String::new()
    };
    let fix = match (with.first(), named) {
        (Some(first), Named::Flag) => {
            format!("give --image {first}{others}, or leave --image out to have one chosen")
        }
        (Some(first), Named::Row) => format!("write the row as {first}+{w}{others}"),
        (None, _) => format!(
            "add an image that installs {} (images/README.md)",
            lacks.join(", ")
        ),
    };
    bail!(
        "image {image} has no {w} workload (its definition does not install {}); nothing was built or booted\nfix: {fix}",
        lacks.join(", ")
    )
}

/// The image a run that names none gets: the default, unless the workload needs another; then
/// the first of [`images_with`].
pub fn choose(images_dir: &Path, w: Option<Workload>) -> Result<String> {
    let Some(w) = w else {
        return Ok(DEFAULT_IMAGE.to_string());
    };
    if missing(images_dir, DEFAULT_IMAGE, w)?.is_empty() {
        return Ok(DEFAULT_IMAGE.to_string());
    }
    match images_with(images_dir, w).into_iter().next() {
        Some(image) => Ok(image),
        None => bail!(
            "no image under {} has the {w} workload's programs ({}); nothing was built or booted\nfix: add an image that installs them (images/README.md)",
            images_dir.display(),
            w.programs()
                .iter()
                .map(|(_, p)| *p)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn the_workload_is_read_from_either_form_and_the_last_wins() {
        assert_eq!(in_args(&args(&[])), None);
        assert_eq!(
            in_args(&args(&["--workload", "desktop"])),
            Some(Workload::Desktop)
        );
        assert_eq!(
            in_args(&args(&["--userns", "--workload=browser"])),
            Some(Workload::Browser)
        );
        assert_eq!(
            in_args(&args(&["--workload", "desktop", "--workload", "xterm"])),
            Some(Workload::Xterm)
        );
        // Not a workload: left to the gate binary's own check, which lists them.
        assert_eq!(in_args(&args(&["--workload", "kde"])), None);
        assert_eq!(in_args(&args(&["--workload"])), None);
        assert_eq!(in_args(&args(&["--workloads", "desktop"])), None);
    }

    fn images() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
    }

    #[test]
    fn the_shipped_images_hold_the_workloads_they_are_named_for() {
        let dir = images();
        assert!(missing(&dir, "bookworm", Workload::Xterm)
            .unwrap()
            .is_empty());
        assert_eq!(
            missing(&dir, "bookworm", Workload::Desktop).unwrap(),
            ["openbox", "mousepad", "dbus-daemon"]
        );
        assert_eq!(
            images_with(&dir, Workload::Desktop),
            [
                "bookworm-desktop",
                "bookworm-apps",
                "trixie-desktop",
                "trixie-apps",
                "trixie-bpo-criu42-apps"
            ]
        );
        assert_eq!(
            images_with(&dir, Workload::BrowserNosandbox),
            [
                "bookworm-browser",
                "bookworm-apps",
                "trixie-apps",
                "trixie-bpo-criu42-apps"
            ]
        );
        assert_eq!(choose(&dir, None).unwrap(), "bookworm");
        assert_eq!(choose(&dir, Some(Workload::Xterm)).unwrap(), "bookworm");
        assert_eq!(
            choose(&dir, Some(Workload::Desktop)).unwrap(),
            "bookworm-desktop"
        );
        assert_eq!(
            choose(&dir, Some(Workload::Browser)).unwrap(),
            "bookworm-browser"
        );
    }

    #[test]
    fn an_image_without_the_workload_is_refused_in_one_line_naming_the_image_to_use() {
        let dir = images();
        require(&dir, "bookworm-desktop", Workload::Desktop, Named::Flag).unwrap();
        require(&dir, "trixie", Workload::Xterm, Named::Row).unwrap();
        let e = require(&dir, "bookworm", Workload::Desktop, Named::Flag)
            .unwrap_err()
            .to_string();
        assert_eq!(e.lines().count(), 2, "{e}");
        assert!(
            e.starts_with("image bookworm has no desktop workload"),
            "{e}"
        );
        assert!(
            e.contains("fix: give --image bookworm-desktop (or bookworm-apps, trixie-desktop, trixie-apps, trixie-bpo-criu42-apps)"),
            "{e}"
        );
        let e = require(&dir, "trixie-desktop", Workload::Browser, Named::Flag)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "--image bookworm-browser (or bookworm-apps, trixie-apps, trixie-bpo-criu42-apps),"
            ),
            "{e}"
        );
        let e = require(&dir, "trixie", Workload::Desktop, Named::Row)
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with(
                "fix: write the row as bookworm-desktop+desktop (or bookworm-apps, trixie-desktop, trixie-apps, trixie-bpo-criu42-apps)"
            ),
            "{e}"
        );
    }
}
