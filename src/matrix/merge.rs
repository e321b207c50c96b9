//! `sharedos-rig matrix merge --out DIR REPORT_DIR...`: a matrix directory from vm-run report
//! directories made elsewhere (in CI, one job per image). Each report is copied into
//! `DIR/<row>/` and judged there as vm-run judges what it archives, and matrix.json is written
//! by [`super::assemble`], the function vm-matrix writes its own with: the same expectations,
//! the same cells, the same exit code.
//!
//! The reports travelled (uploaded and downloaded as CI artifacts), so they are read as
//! untrusted, through the one reader every judgement uses: no link followed at any component,
//! no special file opened, no file with a second hard link (which would copy a file from
//! outside the report into the matrix), a size and entry cap on the whole copy, and anything
//! but regular files and directories refused. Each row is then judged on its copy by the one
//! verdict. The row comes from the report itself
//! (the image its vm-run recorded, and the variants its diagnose arguments stand for), never
//! from the directory's name, and must be unique.

use super::variant::{self, Row};
use super::{assemble, create_matrix_dir, finished_cell, Cell, Matrix, RunInfo};
use crate::image::definition;
use crate::judge::ledger::Ledger;
use crate::judge::reader::{Kind, ReportDir};
use crate::judge::verdict;
use anyhow::{bail, Context, Result};
use sharedos_report::clock;
use std::path::{Path, PathBuf};

/// Directory depth a report may have (a real one: `guest/criu/...`, three or four).
const MAX_DEPTH: usize = 16;
/// Entries a report may have: what vm-run's fetch lets a guest send.
const MAX_ENTRIES: usize = 10_000;

#[derive(Debug, Clone)]
pub struct MergeOptions {
    /// The matrix directory to create (new or empty).
    pub out: PathBuf,
    /// vm-run report directories, in row order.
    pub reports: Vec<PathBuf>,
    /// Where images/ is, for each image's expected-gates (default: found as vm-matrix finds it).
    pub images_dir: Option<PathBuf>,
    /// The rows there must be (as vm-matrix's `--images`), in order; empty: the reports' own,
    /// in the order given. A row without a report is a rig failure (its job archived nothing),
    /// and a report of a row not named is refused.
    pub images: Vec<String>,
    pub command_line: Vec<String>,
}

/// Builds the matrix directory; returns the matrix written (its exit code is the command's).
/// Stages: every report named (nothing written for bad input), the rows ordered, each report
/// copied and judged into its cell, matrix.json assembled.
pub fn merge(o: &MergeOptions) -> Result<Matrix> {
    if o.reports.is_empty() {
        bail!("no report directory given: `sharedos-rig matrix merge --out DIR REPORT_DIR...`");
    }
    let started_at = clock::now_rfc3339();
    let rows = name_rows(&o.reports)?;
    let order = order_rows(&rows, &o.images)?;
    create_matrix_dir(&o.out)?;
    let cells = copy_and_judge(o, &rows, &order)?;
    assemble(
        &o.out,
        cells,
        &|image| definition::find_images_dir(o.images_dir.as_deref(), image),
        RunInfo {
            started_at,
            jobs: order.len(),
            jobs_reason: format!(
                "merged from {} vm-run report directories, each run on its own",
                rows.len()
            ),
            command_line: o.command_line.clone(),
        },
    )
}

/// Each report's row, from the report itself; two reports of one row are refused.
fn name_rows(reports: &[PathBuf]) -> Result<Vec<(String, &Path)>> {
    let mut rows: Vec<(String, &Path)> = Vec::new();
    for src in reports {
        let label = row_label(src)?;
        if let Some((_, first)) = rows.iter().find(|(l, _)| *l == label) {
            bail!(
                "{} and {} are both reports of row {label}: a matrix has one cell per row, so \
                 give only one of them",
                first.display(),
                src.display()
            );
        }
        rows.push((label, src.as_path()));
    }
    Ok(rows)
}

/// The rows in `--images`' order (every report's row must be named there), else the reports'.
fn order_rows(rows: &[(String, &Path)], images: &[String]) -> Result<Vec<String>> {
    let mut order: Vec<String> = Vec::new();
    for name in images {
        let label = Row::parse(name)?.label();
        if order.contains(&label) {
            bail!("--images names {label} twice");
        }
        order.push(label);
    }
    if let Some((label, src)) = rows
        .iter()
        .find(|(l, _)| !order.is_empty() && !order.contains(l))
    {
        bail!(
            "{} is a report of row {label}, which --images does not name ({}): add it there or \
             leave the report out",
            src.display(),
            order.join(", ")
        );
    }
    if order.is_empty() {
        order = rows.iter().map(|(l, _)| l.clone()).collect();
    }
    Ok(order)
}

/// Each row's report copied into the matrix and judged there by the one verdict; a row without
/// a report is a rig failure. A copy that fails removes the half matrix.
fn copy_and_judge(
    o: &MergeOptions,
    rows: &[(String, &Path)],
    order: &[String],
) -> Result<Vec<Cell>> {
    let matrix = ReportDir::open(&o.out).map_err(anyhow::Error::msg)?;
    let ledger = Ledger::from_env();
    let mut cells = Vec::new();
    for label in order {
        let Some((_, src)) = rows.iter().find(|(l, _)| l == label) else {
            cells.push(missing_row(label));
            continue;
        };
        if let Err(e) = copy_report(src, &o.out.join(label)) {
            // The directory was new or empty: what is in it now is this merge's half copy,
            // which no one should take for a matrix.
            let _ = std::fs::remove_dir_all(&o.out);
            return Err(e.context(format!(
                "copying the report {} into the matrix (nothing was merged)",
                src.display()
            )));
        }
        cells.push(finished_cell(&matrix, label, None, ledger.as_ref()));
    }
    Ok(cells)
}

/// A row `--images` names that no report was given for.
fn missing_row(label: &str) -> Cell {
    let mut c = super::not_run_cell(
        label,
        "no vm-run report was given for this row: the run that should have made it archived none",
        "",
    );
    c.outcome = super::CellOutcome::RigFailed;
    c.fix = format!(
        "read the log of the job that ran {label} (in CI: its vm-run job), or run it here: \
         `cargo xtask vm-run --image {}`",
        c.base_image()
    );
    c
}

/// The row a vm-run report belongs to: the image it recorded, and the variants its diagnose
/// arguments (after `--` on its command line) stand for.
pub fn row_label(dir: &Path) -> Result<String> {
    let files = ReportDir::open(dir).map_err(anyhow::Error::msg)?;
    if files
        .kind(sharedos_report::report::REPORT_FILE)
        .map_err(anyhow::Error::msg)?
        .is_none()
    {
        bail!(
            "{} holds no report.json: is it a report directory written by `cargo xtask vm-run \
             --out DIR`?",
            dir.display()
        );
    }
    let l = verdict::read_report(&files)
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("reading the report in {}", dir.display()))?;
    let row = variant::report_row(&l.report).with_context(|| {
        format!(
            "the report in {}: merge takes the directories `cargo xtask vm-run --image NAME \
             --out DIR` writes",
            dir.display()
        )
    })?;
    Ok(row.label())
}

/// Copies a report directory: regular files and directories only, nothing through a link,
/// each file read once through the one reader (its caps are the copy's).
pub fn copy_report(src: &Path, dst: &Path) -> Result<()> {
    let from = ReportDir::open(src).map_err(anyhow::Error::msg)?;
    std::fs::create_dir(dst).with_context(|| format!("creating {}", dst.display()))?;
    let mut entries = 0;
    copy_tree(&from, dst, "", 0, &mut entries)
}

fn copy_tree(
    from: &ReportDir,
    dst: &Path,
    rel: &str,
    depth: usize,
    entries: &mut usize,
) -> Result<()> {
    if depth > MAX_DEPTH {
        bail!("{rel} is nested deeper than {MAX_DEPTH} directories");
    }
    for (name, kind) in from.entries(rel).map_err(anyhow::Error::msg)? {
        let r = if rel.is_empty() {
            name
        } else {
            format!("{rel}/{name}")
        };
        *entries += 1;
        if *entries > MAX_ENTRIES {
            bail!("the report holds more than {MAX_ENTRIES} entries");
        }
        match kind {
            Kind::Dir => {
                std::fs::create_dir(dst.join(&r))
                    .with_context(|| format!("creating {}", dst.join(&r).display()))?;
                copy_tree(from, dst, &r, depth + 1, entries)?;
            }
            Kind::File { .. } => {
                let mut out = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(dst.join(&r))
                    .with_context(|| format!("creating {}", dst.join(&r).display()))?;
                from.copy(&r, &mut out).map_err(|e| {
                    anyhow::anyhow!(
                        "{e}: vm-run never archives such a file, so the report was altered; it \
                         is not merged"
                    )
                })?;
            }
            k => bail!(
                "{r} in {} is {}: vm-run never archives one, so the report was altered; it is \
                 not merged",
                src_name(from),
                k.describe()
            ),
        }
    }
    Ok(())
}

fn src_name(from: &ReportDir) -> String {
    from.path().display().to_string()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::matrix::tests::report;
    use crate::matrix::{CellOutcome, EXPECTATIONS_FILE};
    use sharedos_report::digest;
    use sharedos_report::report::{GateName, Phase, Report, Status};

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("matrix-merge-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A report as vm-run archives it for `image`, with `diagnose` after `--`.
    fn vm_report(statuses: &[(GateName, Status)], image: &str, diagnose: &[&str]) -> Report {
        let mut r = report(statuses, "6.1.0-50-cloud-amd64", "3.17.1");
        r.artifacts.clear();
        let vm = r.vm.as_mut().unwrap();
        vm.image_name = image.into();
        vm.image_sha256 = "ab".repeat(32);
        vm.command_line = ["xtask", "vm-run", "--image", image, "--out", "x"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        if !diagnose.is_empty() {
            vm.command_line.push("--".into());
            vm.command_line
                .extend(diagnose.iter().map(|s| s.to_string()));
        }
        r
    }

    fn write(dir: &Path, r: &Report) -> PathBuf {
        std::fs::create_dir_all(dir.join("guest")).unwrap();
        std::fs::write(dir.join("guest/note.txt"), "from the guest").unwrap();
        let mut r = r.clone();
        hostile_gate::honest::add_to(&mut r, dir).unwrap();
        std::fs::write(
            dir.join("report.json"),
            serde_json::to_string_pretty(&r).unwrap(),
        )
        .unwrap();
        dir.to_path_buf()
    }

    fn images_with(root: &Path, names: &[&str]) -> PathBuf {
        let images = root.join("images");
        for n in names {
            std::fs::create_dir_all(images.join(n)).unwrap();
            std::fs::write(images.join(n).join(definition::DEFINITION_FILE), "").unwrap();
        }
        images
    }

    fn opts(root: &Path, reports: Vec<PathBuf>, images: &Path) -> MergeOptions {
        MergeOptions {
            out: root.join("matrix"),
            reports,
            images_dir: Some(images.to_path_buf()),
            images: vec![],
            command_line: vec!["merge".into()],
        }
    }

    #[test]
    fn rows_come_from_the_reports_and_variant_rows_skip_the_expectations() {
        let root = scratch("rows");
        let images = images_with(&root, &["bookworm"]);
        // bookworm's committed expectation: dump FAILs. The plain row passes, so it differs;
        // the variant row is judged by its own verdict (3: only the review is outstanding).
        let mut exp = String::new();
        for g in GateName::ALL {
            let s = match g {
                GateName::Dump => "FAIL",
                GateName::GuiPixelReview => "REVIEW_REQUIRED",
                _ => "PASS",
            };
            exp.push_str(&format!("{g} {s}\n"));
        }
        std::fs::write(images.join("bookworm").join(EXPECTATIONS_FILE), exp).unwrap();
        let a = write(&root.join("in/one"), &vm_report(&[], "bookworm", &[]));
        let b = write(
            &root.join("in/two"),
            &vm_report(&[], "bookworm", &["--userns", "--copies", "4"]),
        );
        let m = merge(&opts(&root, vec![a, b], &images)).unwrap();
        let labels: Vec<&str> = m.cells.iter().map(|c| c.image.as_str()).collect();
        assert_eq!(labels, ["bookworm", "bookworm+userns+copies4"]);
        assert_eq!(m.cells[1].variants, ["userns", "copies4"]);
        assert!(m.cells[0].expected.is_some());
        assert_eq!(m.cells[0].differences, ["dump: expected FAIL, got PASS"]);
        assert_eq!(m.cells[0].judgement(), 1);
        assert!(m.cells[1].expected.is_none());
        assert_eq!(m.cells[1].exit_code, Some(3));
        assert_eq!(m.exit_code, 1);
        // Copied whole, under the row's name, and read back as vm-matrix's are.
        let out = root.join("matrix");
        assert_eq!(
            std::fs::read_to_string(out.join("bookworm+userns+copies4/guest/note.txt")).unwrap(),
            "from the guest"
        );
        let (loaded, problems) = crate::matrix::load(&out, Some(&images), None).unwrap();
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(loaded, m);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn bad_inputs_are_named_and_write_nothing() {
        let root = scratch("bad");
        let images = images_with(&root, &["bookworm"]);
        let a = write(&root.join("in/a"), &vm_report(&[], "bookworm", &[]));
        let b = write(&root.join("in/b"), &vm_report(&[], "bookworm", &[]));
        let empty = root.join("in/empty");
        std::fs::create_dir_all(&empty).unwrap();
        let mut alone = vm_report(&[], "bookworm", &[]);
        alone.vm = None;
        let alone = write(&root.join("in/alone"), &alone);
        let odd = write(
            &root.join("in/odd"),
            &vm_report(&[], "bookworm", &["--verbose"]),
        );
        let named = write(&root.join("in/named"), &vm_report(&[], "../etc", &[]));
        let cases: Vec<(Vec<PathBuf>, &str)> = vec![
            (
                vec![a.clone(), b.clone()],
                "are both reports of row bookworm",
            ),
            (vec![empty], "a report directory written by"),
            (vec![root.join("in/none")], "in/none does not exist"),
            (vec![alone], "not of vm-run"),
            (vec![odd], "are not a matrix variant's"),
            (vec![named], "not a plain image name"),
            (vec![], "no report directory given"),
        ];
        for (reports, want) in cases {
            let e = format!("{:#}", merge(&opts(&root, reports, &images)).unwrap_err());
            assert!(e.contains(want), "want {want:?}: {e}");
            assert!(!root.join("matrix").exists(), "{want}: nothing written");
        }
        // An output directory that already holds something is refused.
        std::fs::create_dir_all(root.join("matrix")).unwrap();
        std::fs::write(root.join("matrix/x"), "").unwrap();
        let e = format!("{:#}", merge(&opts(&root, vec![a], &images)).unwrap_err());
        assert!(e.contains("not empty"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn the_copy_follows_no_link_and_takes_only_files_and_directories() {
        let root = scratch("links");
        let images = images_with(&root, &["bookworm"]);
        let secret = root.join("secret");
        std::fs::write(&secret, "host secret").unwrap();
        let a = write(&root.join("in/a"), &vm_report(&[], "bookworm", &[]));
        std::os::unix::fs::symlink(&secret, a.join("guest/link")).unwrap();
        let e = format!(
            "{:#}",
            merge(&opts(&root, vec![a.clone()], &images)).unwrap_err()
        );
        assert!(
            e.contains("guest/link") && e.contains("symbolic link"),
            "{e}"
        );
        assert!(!root.join("matrix").exists(), "no half matrix is left");
        std::fs::remove_file(a.join("guest/link")).unwrap();
        // A linked directory is refused as well, and a FIFO never blocks the copy.
        std::os::unix::fs::symlink(&root, a.join("guest/up")).unwrap();
        let _ = std::fs::remove_dir_all(root.join("matrix"));
        let e = format!(
            "{:#}",
            merge(&opts(&root, vec![a.clone()], &images)).unwrap_err()
        );
        assert!(e.contains("guest/up"), "{e}");
        std::fs::remove_file(a.join("guest/up")).unwrap();
        nix::unistd::mkfifo(&a.join("guest/fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let _ = std::fs::remove_dir_all(root.join("matrix"));
        let e = format!(
            "{:#}",
            merge(&opts(&root, vec![a.clone()], &images)).unwrap_err()
        );
        assert!(e.contains("guest/fifo") && e.contains("is a FIFO"), "{e}");
        std::fs::remove_file(a.join("guest/fifo")).unwrap();
        // A hard link to a host file passes as a regular file: it is refused, not copied.
        std::fs::hard_link(&secret, a.join("guest/hard.log")).unwrap();
        let _ = std::fs::remove_dir_all(root.join("matrix"));
        let e = format!("{:#}", merge(&opts(&root, vec![a], &images)).unwrap_err());
        assert!(e.contains("guest/hard.log has 2 hard links"), "{e}");
        assert!(!root.join("matrix").exists());
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn named_rows_without_a_report_are_rig_failures_in_their_place() {
        let root = scratch("rows-named");
        let images = images_with(&root, &["bookworm", "trixie"]);
        let t = write(&root.join("in/t"), &vm_report(&[], "trixie", &[]));
        let mut o = opts(&root, vec![t.clone()], &images);
        o.images = vec!["bookworm".into(), "trixie".into()];
        let m = merge(&o).unwrap();
        let labels: Vec<&str> = m.cells.iter().map(|c| c.image.as_str()).collect();
        assert_eq!(labels, ["bookworm", "trixie"]);
        assert_eq!(m.cells[0].outcome, CellOutcome::RigFailed);
        assert!(
            m.cells[0].reason.contains("no vm-run report"),
            "{:?}",
            m.cells[0]
        );
        assert_eq!(m.cells[1].outcome, CellOutcome::Ran);
        assert_eq!(m.exit_code, 2);
        // A report of a row --images does not name is refused.
        std::fs::remove_dir_all(root.join("matrix")).unwrap();
        o.images = vec!["bookworm".into()];
        let e = format!("{:#}", merge(&o).unwrap_err());
        assert!(e.contains("which --images does not name (bookworm)"), "{e}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn a_tampered_artifact_fails_the_row() {
        let root = scratch("tamper");
        let images = images_with(&root, &["bookworm"]);
        let dir = root.join("in/a");
        std::fs::create_dir_all(dir.join("guest")).unwrap();
        std::fs::write(dir.join("guest/note.txt"), "from the guest").unwrap();
        let mut r = vm_report(&[], "bookworm", &[]);
        r.artifacts = vec![digest::artifact(&dir, "guest/note.txt", "log").unwrap()];
        write(&dir, &r);
        let m = merge(&opts(&root, vec![dir.clone()], &images)).unwrap();
        assert_eq!(
            m.cells[0].exit_code,
            Some(3),
            "untouched: awaits the review"
        );
        std::fs::write(dir.join("guest/note.txt"), "changed on the way").unwrap();
        std::fs::remove_dir_all(root.join("matrix")).unwrap();
        let m = merge(&opts(&root, vec![dir], &images)).unwrap();
        assert_eq!(
            m.cells[0].exit_code,
            Some(1),
            "a changed artifact is a FAIL"
        );
        assert_eq!(m.exit_code, 1);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// What vm-run archives when its image would not build: the rig error of its image phase.
    pub(crate) fn stale_report(image: &str, why: &str) -> Report {
        let mut r = vm_report(&GateName::ALL.map(|g| (g, Status::NotRun)), image, &[]);
        let vm = r.vm.as_mut().unwrap();
        vm.image_sha256.clear();
        vm.phases = vec![Phase {
            name: "image".into(),
            duration_ms: 5,
        }];
        vm.rig_error = Some(format!("{}: {why}", crate::matrix::IMAGE_PHASE_CONTEXT));
        r.exit_code = 2;
        r
    }

    #[test]
    fn a_report_whose_image_would_not_build_is_a_not_run_row() {
        let root = scratch("stale");
        let images = images_with(&root, &["stale"]);
        let d = write(
            &root.join("in/stale"),
            &stale_report("stale", "the lock of image stale does not match the mirror"),
        );
        let m = merge(&opts(&root, vec![d], &images)).unwrap();
        let c = &m.cells[0];
        assert_eq!(c.outcome, CellOutcome::NotRun);
        assert_eq!(
            c.reason,
            "the image could not be built: the lock of image stale does not match the mirror"
        );
        assert!(c
            .fix
            .contains("cargo xtask image --image stale --update-lock"));
        assert_eq!(m.exit_code, 2);
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// vm-run's image phase gives its error the context the merge recognises.
    #[test]
    fn vm_run_names_its_image_phase_as_the_merge_expects() {
        let src = include_str!("../run/mod.rs");
        assert!(src.contains(&format!(
            ".context(\"{}\")",
            crate::matrix::IMAGE_PHASE_CONTEXT
        )));
    }
}
