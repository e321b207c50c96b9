//! The human decision on the GUI gate: recording it (`sharedos-rig review`), judging a recorded
//! one against the report it claims to decide, and applying it to the report's gates.
//!
//! The rules are pure functions over `Report` and `Review` values; only `record` and
//! `read_review` touch the disk.

use super::artifacts::{self, Mismatch};
use super::ledger::Ledger;
use super::reader::ReportDir;
use super::sign;
use super::verdict::read_report;
use crate::escape;
use anyhow::{bail, Context, Result};
use sharedos_report::digest;
use sharedos_report::report::{
    self, Artifact, CitedImage, Gate, GateName, Report, Review, ReviewDecision, Status, REVIEW_FILE,
};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

/// More than any real review: it cites a handful of PNGs.
pub const MAX_REVIEW_BYTES: u64 = 1 << 20;

/// What `review.json` beside a report amounts to.
#[derive(Clone, Debug, PartialEq)]
pub enum ReviewState {
    /// No review.json: the GUI gate still waits for a human.
    None,
    /// A review that cites exactly the report's PNGs with their hashes.
    Valid(Review),
    /// A review.json that must not be believed; `review` is None when it could not be parsed.
    Invalid {
        review: Option<Review>,
        problems: Vec<String>,
    },
}

impl ReviewState {
    /// The one-word state `list` shows: none, pass, fail or invalid.
    pub fn label(&self) -> &'static str {
        match self {
            ReviewState::None => "none",
            ReviewState::Valid(r) => match r.decision {
                ReviewDecision::Pass => "pass",
                ReviewDecision::Fail => "fail",
            },
            ReviewState::Invalid { .. } => "invalid",
        }
    }

    pub fn is_invalid(&self) -> bool {
        matches!(self, ReviewState::Invalid { .. })
    }

    /// One line in words, for text output.
    pub fn describe(&self) -> String {
        match self {
            ReviewState::None => "none recorded".to_string(),
            ReviewState::Valid(r) => format!(
                "{} by {} at {}, citing {} PNG(s){}",
                decision_str(r.decision),
                r.reviewer,
                r.recorded_at,
                r.images.len(),
                if r.note.is_empty() {
                    String::new()
                } else {
                    format!(" — note: {}", r.note)
                }
            ),
            ReviewState::Invalid { problems, .. } => {
                format!("REJECTED: {}", problems.join("; "))
            }
        }
    }
}

pub fn decision_str(d: ReviewDecision) -> &'static str {
    match d {
        ReviewDecision::Pass => "pass",
        ReviewDecision::Fail => "fail",
    }
}

/// What was found at `review.json`, before judging it.
#[derive(Clone, Debug, PartialEq)]
pub enum ReviewFile {
    Absent,
    Parsed(Review),
    /// Present but unreadable or not a review: the reason in words.
    Broken(String),
}

/// Reads review.json through the report's reader without judging it; a broken file is a
/// finding, not an error, so that verify can report it as a rejected review.
pub fn read_review(dir: &ReportDir) -> ReviewFile {
    match dir.kind(REVIEW_FILE) {
        Ok(None) => return ReviewFile::Absent,
        Ok(Some(_)) => {}
        Err(e) => return ReviewFile::Broken(format!("cannot look at {REVIEW_FILE}: {e}")),
    }
    let read = match dir.bytes(REVIEW_FILE, MAX_REVIEW_BYTES) {
        Ok(f) => f,
        Err(e) => return ReviewFile::Broken(format!("cannot read {REVIEW_FILE}: {e}")),
    };
    match serde_json::from_slice::<Review>(read.bytes().unwrap_or_default()) {
        Ok(r) => ReviewFile::Parsed(r),
        Err(e) => ReviewFile::Broken(format!(
            "{REVIEW_FILE} is not a review ({e}); record it again with `sharedos-rig review {} --force ...`",
            dir.path().display()
        )),
    }
}

/// Every reason `review` must not be believed for `report`; empty when it is valid.
///
/// `report_sha256` is the hash of report.json as it is on disk now; pass None when the report did
/// not come from a file (the check is then skipped).
pub fn validate(review: &Review, report: &Report, report_sha256: Option<&str>) -> Vec<String> {
    let mut problems = Vec::new();
    if review.schema_version != report::REVIEW_SCHEMA_VERSION {
        problems.push(format!(
            "review has schema_version {}, this rig reads {}",
            review.schema_version,
            report::REVIEW_SCHEMA_VERSION
        ));
    }
    if review.reviewer.trim().is_empty() {
        problems.push("review names no reviewer".to_string());
    }
    match report.gate(GateName::GuiPixelReview).map(|g| g.status) {
        Some(Status::ReviewRequired) => {}
        Some(s) => problems.push(format!(
            "gui_pixel_review is {s} in report.json, so there is no decision to record"
        )),
        None => problems.push("report.json has no gui_pixel_review gate".to_string()),
    }
    if let Some(sha) = report_sha256 {
        if review.report_sha256 != sha {
            problems.push(format!(
                "review was recorded for report.json with sha256 {}, report.json now has {sha}",
                review.report_sha256
            ));
        }
    }
    let pngs: Vec<&Artifact> = report.png_artifacts().collect();
    if pngs.is_empty() {
        problems.push("report lists no PNG, so a review cites nothing".to_string());
    }
    let mut cited: BTreeMap<&str, &CitedImage> = BTreeMap::new();
    for c in &review.images {
        if cited.insert(c.path.as_str(), c).is_some() {
            problems.push(format!("review cites {} twice", c.path));
        }
    }
    for a in &pngs {
        match cited.get(a.path.as_str()) {
            None => problems.push(format!("review does not cite {}", a.path)),
            Some(c) if c.sha256 != a.sha256 => problems.push(format!(
                "review cites {} with sha256 {}, the report says {}",
                a.path, c.sha256, a.sha256
            )),
            Some(_) => {}
        }
    }
    for c in &review.images {
        if !pngs.iter().any(|a| a.path == c.path) {
            problems.push(format!(
                "review cites {}, which is not a PNG of the report",
                c.path
            ));
        }
    }
    problems
}

/// The dump-time image the review page holds every other image against.
#[derive(Debug, Clone, PartialEq)]
pub struct Reference<'a> {
    /// Its entry in the report's artifact list.
    pub artifact: &'a Artifact,
    /// The sha256 of its pixels, as the checks that cite it recorded them (and the host's
    /// recheck verified).
    pub pixel_sha256: String,
    /// The checks that cite it, as `gate.check`.
    pub cited_by: Vec<String>,
}

/// The dump-time reference of the review page: the image the restored copies' framebuffer
/// checks cite (all of them one, by its path and the sha256 of its pixels, which the host's
/// recheck verifies), found in the report's artifact list (whose file hashes the judgement
/// verified: `mismatches`) under that path, and listed there once. Never chosen by its file's
/// name, which the guest chose. Err: why the page shows no reference.
pub fn reference<'a>(report: &'a Report, mismatches: &[Mismatch]) -> Result<Reference<'a>, String> {
    let frames = super::recheck::dump_time_frames(report);
    let Some((first, png, sha)) = frames.first() else {
        return Err("no check that passed cites a dump-time image".into());
    };
    if let Some((other, p, s)) = frames.iter().find(|(_, p, s)| p != png || s != sha) {
        return Err(format!(
            "{first} and {other} cite different dump-time images ({png}, pixels {sha}; {p}, \
             pixels {s})"
        ));
    }
    let path = format!("{}{png}", super::recheck::guest_prefix(report));
    let named: Vec<&Artifact> = report
        .artifacts
        .iter()
        .filter(|a| same_file_name(&a.path, &path))
        .collect();
    let a = match named.as_slice() {
        [] => {
            return Err(format!(
                "{first} cites {path}, which the report's artifact list does not hold"
            ))
        }
        [a] => *a,
        _ => {
            return Err(format!(
                "{} artifacts are named {path}: which of them the checks cite cannot be told, so \
                 none is the reference",
                named.len()
            ))
        }
    };
    if let Some(m) = mismatches.iter().find(|m| m.path == a.path) {
        return Err(format!("{}: {}", m.path, m.problem));
    }
    Ok(Reference {
        artifact: a,
        pixel_sha256: sha.clone(),
        cited_by: frames.into_iter().map(|(c, _, _)| c).collect(),
    })
}

/// Whether two names in a report would name one file: the same parts once empty and `.` parts
/// are dropped (the reader refuses such names; the page must not take one for another first).
fn same_file_name(a: &str, b: &str) -> bool {
    let parts = |s: &'_ str| -> Vec<String> {
        s.split('/')
            .filter(|p| !p.is_empty() && *p != ".")
            .map(str::to_string)
            .collect()
    };
    parts(a) == parts(b)
}

/// Judges what was found at review.json against the report.
pub fn assess(report: &Report, report_sha256: Option<&str>, file: ReviewFile) -> ReviewState {
    match file {
        ReviewFile::Absent => ReviewState::None,
        ReviewFile::Broken(why) => ReviewState::Invalid {
            review: None,
            problems: vec![why],
        },
        ReviewFile::Parsed(r) => {
            let problems = validate(&r, report, report_sha256);
            if problems.is_empty() {
                ReviewState::Valid(r)
            } else {
                ReviewState::Invalid {
                    review: Some(r),
                    problems,
                }
            }
        }
    }
}

/// The report's gates with the review applied: a valid review turns a REVIEW_REQUIRED GUI gate
/// into PASS or FAIL as decided. Nothing else changes, so a review can never revive a gate that
/// failed or did not run.
pub fn apply(gates: &[Gate], state: &ReviewState) -> Vec<Gate> {
    gates
        .iter()
        .map(|g| {
            let mut g = g.clone();
            if g.name != GateName::GuiPixelReview || g.status != Status::ReviewRequired {
                return g;
            }
            match state {
                ReviewState::None => {}
                ReviewState::Valid(r) => {
                    g.status = match r.decision {
                        ReviewDecision::Pass => Status::Pass,
                        ReviewDecision::Fail => Status::Fail,
                    };
                    g.reason = format!(
                        "reviewed by {} at {}: {} on {} PNG(s){}",
                        r.reviewer,
                        r.recorded_at,
                        decision_str(r.decision),
                        r.images.len(),
                        if r.note.is_empty() {
                            String::new()
                        } else {
                            format!(" ({})", r.note)
                        }
                    );
                }
                ReviewState::Invalid { problems, .. } => {
                    g.reason = format!(
                        "{} [review.json rejected: {}]",
                        g.reason,
                        problems.join("; ")
                    );
                }
            }
            g
        })
        .collect()
}

/// What the reviewer asks to record.
#[derive(Clone, Debug)]
pub struct Request {
    pub decision: ReviewDecision,
    pub reviewer: String,
    pub note: String,
    /// Replace an existing review.json.
    pub force: bool,
    /// Sign review.json with this OpenSSH private key (review.json.sig), and keep the signed
    /// review in the host's ledger.
    pub sign_key: Option<PathBuf>,
}

/// Records a review beside the report in `dir`, after re-hashing every PNG and telling `out` what
/// is being signed. Refuses when a PNG on disk differs from report.json, when there is no PNG,
/// when the GUI gate does not wait for a review, or when review.json exists and `force` is off.
/// Every line it prints that names what the report holds is escaped.
pub fn record(
    dir: &Path,
    req: &Request,
    ledger: Option<&Ledger>,
    out: &mut dyn Write,
) -> Result<Review> {
    let key = req.sign_key.as_deref().map(sign::load_key).transpose()?;
    let files = ReportDir::open(dir).map_err(anyhow::Error::msg)?;
    let loaded = read_report(&files).map_err(anyhow::Error::msg)?;
    let report = &loaded.report;
    let reviewer = req.reviewer.trim();
    if reviewer.is_empty() {
        bail!("--reviewer is empty: name the person who looked at the images");
    }
    let pngs = reviewable(dir, report)?;
    let replacing = refuse_an_existing_review(&files, req.force)?;
    check_pngs(&files, &pngs)?;
    tell(out, dir, &pngs)?;
    let review = Review {
        schema_version: report::REVIEW_SCHEMA_VERSION,
        decision: req.decision,
        reviewer: reviewer.to_string(),
        note: req.note.clone(),
        recorded_at: sharedos_report::clock::now_rfc3339(),
        report_sha256: loaded.sha256.clone(),
        images: pngs
            .iter()
            .map(|a| CitedImage {
                path: a.path.clone(),
                sha256: a.sha256.clone(),
            })
            .collect(),
    };
    let mut text = serde_json::to_string_pretty(&review).context("serializing the review")?;
    text.push('\n');
    // Write then rename so a crash never leaves half a review that verify would reject.
    digest::replace_in_report(dir, REVIEW_FILE, text.as_bytes())?;
    let stale = dir.join(sign::sig_name(REVIEW_FILE));
    match key {
        Some(k) => {
            let signed = sign::sign_bytes(dir, REVIEW_FILE, text.as_bytes(), &k)?;
            writeln!(out, "signed review.json.sig with {}", signed.fingerprint)?;
            keep_in_ledger(ledger, &loaded.sha256, text.as_bytes(), &signed.pem, out)?;
        }
        // A signature of the review this one replaces would now be a false one.
        None if std::fs::symlink_metadata(&stale).is_ok() => {
            std::fs::remove_file(&stale).with_context(|| format!("removing {}", stale.display()))?
        }
        None => {}
    }
    if replacing {
        writeln!(out, "--force: the earlier review.json was replaced")?;
    }
    writeln!(
        out,
        "Recorded {} by {} in {}; check it with: sharedos-rig verify {}",
        decision_str(review.decision),
        escape::line(&review.reviewer),
        escape::line(&dir.join(REVIEW_FILE).display().to_string()),
        escape::line(&dir.display().to_string())
    )?;
    Ok(review)
}

/// The report's PNGs, when its GUI gate waits for a review of them.
fn reviewable<'a>(dir: &Path, report: &'a Report) -> Result<Vec<&'a Artifact>> {
    let shown = dir.join(report::REPORT_FILE).display().to_string();
    let pngs: Vec<&Artifact> = report.png_artifacts().collect();
    if pngs.is_empty() {
        bail!(
            "{shown} lists no PNG artifact, so there is nothing to review; run the diagnostic \
             again so that it captures the X framebuffer"
        );
    }
    match report.gate(GateName::GuiPixelReview).map(|g| g.status) {
        Some(Status::ReviewRequired) => Ok(pngs),
        Some(s) => bail!(
            "gui_pixel_review is {s} in {shown}: only a gate that is REVIEW_REQUIRED takes a review"
        ),
        None => bail!("{shown} has no gui_pixel_review gate; it is not a complete report"),
    }
}

/// Whether a review.json is there to replace; an error when it is and `force` is off.
fn refuse_an_existing_review(files: &ReportDir, force: bool) -> Result<bool> {
    let exists = files
        .kind(REVIEW_FILE)
        .map_err(anyhow::Error::msg)?
        .is_some();
    if !exists || force {
        return Ok(exists);
    }
    let what = match read_review(files) {
        ReviewFile::Parsed(r) => format!(
            " ({} by {} at {})",
            decision_str(r.decision),
            r.reviewer,
            r.recorded_at
        ),
        _ => String::new(),
    };
    bail!(
        "{} already exists{what}; pass --force to replace it",
        files.path().join(REVIEW_FILE).display()
    )
}

/// The PNGs on disk must be what the report says: the reviewer signs what the report says.
fn check_pngs(files: &ReportDir, pngs: &[&Artifact]) -> Result<()> {
    let owned: Vec<Artifact> = pngs.iter().map(|a| (*a).clone()).collect();
    let mismatches = artifacts::check(files, &owned, true);
    if mismatches.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = mismatches
        .iter()
        .map(|m| format!("  {}: {}", m.path, m.problem))
        .collect();
    bail!(
        "refusing to record a review: these PNGs differ from what report.json says, and the \
         reviewer must sign what the report says:\n{}",
        lines.join("\n")
    )
}

/// What the reviewer is about to sign, every name escaped: the paths are the guest's.
fn tell(out: &mut dyn Write, dir: &Path, pngs: &[&Artifact]) -> Result<()> {
    let d = escape::line(&dir.display().to_string());
    writeln!(out, "You are signing these images of {d}:")?;
    for a in pngs {
        writeln!(
            out,
            "  {}  sha256 {}",
            escape::line(&dir.join(&a.path).display().to_string()),
            escape::line(&a.sha256)
        )?;
    }
    writeln!(
        out,
        "To look at them with the report: sharedos-rig show {d} --format html > page.html"
    )?;
    Ok(())
}

/// A signed review goes into the host's ledger, so that losing it later is noticed.
fn keep_in_ledger(
    ledger: Option<&Ledger>,
    report_sha256: &str,
    review: &[u8],
    sig: &[u8],
    out: &mut dyn Write,
) -> Result<()> {
    let Some(l) = ledger else {
        writeln!(
            out,
            "note: no review ledger (set SHAREDOS_RIG_STATE_DIR or HOME): this host will not \
             notice if the signed review is deleted"
        )?;
        return Ok(());
    };
    match l.record(report_sha256, review, sig) {
        Ok(p) => writeln!(out, "kept in the review ledger: {}", p.display())?,
        Err(e) => writeln!(
            out,
            "note: the review was not kept in the review ledger ({}): this host will not \
             notice if it is deleted",
            escape::line(&format!("{e:#}"))
        )?,
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use sharedos_report::report::{Environment, Verdict};

    pub(crate) fn png(path: &str, sha: &str) -> Artifact {
        Artifact {
            path: path.into(),
            sha256: sha.into(),
            bytes: 10,
            kind: "png".into(),
        }
    }

    /// A fresh report as the guest writes it: every gate PASS but the GUI review.
    pub(crate) fn fresh_report() -> Report {
        let gates = GateName::ALL
            .iter()
            .map(|n| {
                let s = if *n == GateName::GuiPixelReview {
                    Status::ReviewRequired
                } else {
                    Status::Pass
                };
                let mut g = Gate::new(*n, s, format!("{n} reason"));
                if s == Status::Pass {
                    g.checks.push(report::Check {
                        name: format!("{n}_holds"),
                        passed: true,
                        value: serde_json::json!(true),
                        expected: "true".into(),
                    });
                }
                g
            })
            .collect();
        let mut r = Report {
            schema_version: report::SCHEMA_VERSION,
            marker: "spike-0123456789ab".into(),
            all_gates_pass: false,
            exit_code: 0,
            gates,
            environment: Environment {
                kernel_release: "6.1.0-28-amd64".into(),
                hostname: "guest".into(),
                boot_id: "b00t".into(),
                started_at: "2026-11-30T20:15:00.000Z".into(),
                finished_at: "2026-11-30T20:16:00.000Z".into(),
                ..Default::default()
            },
            artifacts: vec![
                png("png/live.png", &"a".repeat(64)),
                png("png/restored.png", &"b".repeat(64)),
                Artifact {
                    path: "logs/criu.log".into(),
                    sha256: "c".repeat(64),
                    bytes: 3,
                    kind: "criu-log".into(),
                },
            ],
            fidelity_differences: sharedos_report::fidelity::differences(
                "6.1.0-28-amd64",
                &Default::default(),
                &[],
            ),
            options: Default::default(),
            vm: None,
        };
        r.seal();
        r
    }

    /// A report whose restored copies' frame checks cite `png/dump-time.png`, as an honest run
    /// records them, with every PNG they name listed.
    fn citing_report() -> Report {
        let mut r = fresh_report();
        r.artifacts = hostile_gate::honest::PNGS
            .iter()
            .map(|p| png(p, &"d".repeat(64)))
            .collect();
        for (gate, c) in hostile_gate::honest::checks() {
            if let Some(g) = r.gate_mut(gate) {
                g.checks.push(c);
            }
        }
        r
    }

    #[test]
    fn the_reference_is_the_image_the_checks_cite_not_one_named_like_it() {
        let mut r = citing_report();
        // A PNG the guest named like the reference, listed first: not the one the checks cite.
        r.artifacts
            .insert(0, png("evil/dump-time.png", &"e".repeat(64)));
        let got = reference(&r, &[]).unwrap();
        assert_eq!(got.artifact.path, "png/dump-time.png");
        assert_eq!(got.pixel_sha256, hostile_gate::honest::frame().sha256());
        assert_eq!(got.cited_by.len(), 3, "{:?}", got.cited_by);
        // In a vm-run report, the guest's files are under guest/.
        let mut v = citing_report();
        v.vm = Some(Default::default());
        for a in &mut v.artifacts {
            a.path = format!("guest/{}", a.path);
        }
        assert_eq!(
            reference(&v, &[]).unwrap().artifact.path,
            "guest/png/dump-time.png"
        );
    }

    #[test]
    fn two_artifacts_that_would_make_the_reference_are_refused() {
        for twin in [
            "png/dump-time.png",
            "png//dump-time.png",
            "./png/dump-time.png",
        ] {
            let mut r = citing_report();
            r.artifacts.push(png(twin, &"e".repeat(64)));
            let e = reference(&r, &[]).unwrap_err();
            assert!(
                e.contains("2 artifacts are named png/dump-time.png"),
                "{twin}: {e}"
            );
        }
    }

    #[test]
    fn no_reference_when_the_checks_disagree_or_its_file_is_not_the_listed_one() {
        let mut r = citing_report();
        let c = r
            .gate_mut(GateName::Reset)
            .unwrap()
            .checks
            .iter_mut()
            .find(|c| c.name == "same_framebuffer")
            .unwrap();
        c.value["expected_png"] = "png/live-first.png".into();
        let e = reference(&r, &[]).unwrap_err();
        assert!(
            e.contains("restore_x_state.same_framebuffer and reset.same_framebuffer cite different dump-time images"),
            "{e}"
        );
        let r = citing_report();
        let m = artifacts::Mismatch {
            path: "png/dump-time.png".into(),
            problem: "the file on disk has sha256 0000".into(),
        };
        let e = reference(&r, &[m]).unwrap_err();
        assert!(e.contains("png/dump-time.png: the file on disk"), "{e}");
        let mut r = citing_report();
        r.artifacts.retain(|a| !a.path.ends_with("dump-time.png"));
        let e = reference(&r, &[]).unwrap_err();
        assert!(
            e.contains("which the report's artifact list does not hold"),
            "{e}"
        );
        let mut r = fresh_report();
        r.artifacts.clear();
        assert!(reference(&r, &[]).unwrap_err().contains("no check"));
    }

    pub(crate) fn review_for(r: &Report, decision: ReviewDecision) -> Review {
        Review {
            schema_version: report::REVIEW_SCHEMA_VERSION,
            decision,
            reviewer: "alice".into(),
            note: String::new(),
            recorded_at: "2026-11-30T21:00:00.000Z".into(),
            report_sha256: "f".repeat(64),
            images: r
                .png_artifacts()
                .map(|a| CitedImage {
                    path: a.path.clone(),
                    sha256: a.sha256.clone(),
                })
                .collect(),
        }
    }

    fn gui(gates: &[Gate]) -> &Gate {
        gates
            .iter()
            .find(|g| g.name == GateName::GuiPixelReview)
            .unwrap()
    }

    #[test]
    fn a_review_citing_every_png_is_valid() {
        let r = fresh_report();
        let rv = review_for(&r, ReviewDecision::Pass);
        assert!(validate(&rv, &r, None).is_empty());
        assert!(validate(&rv, &r, Some(&"f".repeat(64))).is_empty());
    }

    #[test]
    fn wrong_hash_is_rejected() {
        let r = fresh_report();
        let mut rv = review_for(&r, ReviewDecision::Pass);
        rv.images[1].sha256 = "0".repeat(64);
        let p = validate(&rv, &r, None);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("png/restored.png"), "{p:?}");
    }

    #[test]
    fn missing_image_is_rejected() {
        let r = fresh_report();
        let mut rv = review_for(&r, ReviewDecision::Pass);
        rv.images.remove(0);
        let p = validate(&rv, &r, None);
        assert_eq!(p, vec!["review does not cite png/live.png".to_string()]);
    }

    #[test]
    fn extra_image_is_rejected() {
        let r = fresh_report();
        let mut rv = review_for(&r, ReviewDecision::Pass);
        rv.images.push(CitedImage {
            path: "png/other.png".into(),
            sha256: "d".repeat(64),
        });
        let p = validate(&rv, &r, None);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].contains("not a PNG of the report"), "{p:?}");
    }

    #[test]
    fn citing_a_log_as_image_is_rejected() {
        let r = fresh_report();
        let mut rv = review_for(&r, ReviewDecision::Pass);
        rv.images.push(CitedImage {
            path: "logs/criu.log".into(),
            sha256: "c".repeat(64),
        });
        assert_eq!(validate(&rv, &r, None).len(), 1);
    }

    #[test]
    fn duplicate_citation_is_rejected() {
        let r = fresh_report();
        let mut rv = review_for(&r, ReviewDecision::Pass);
        rv.images.push(rv.images[0].clone());
        let p = validate(&rv, &r, None);
        assert!(p.iter().any(|s| s.contains("twice")), "{p:?}");
    }

    #[test]
    fn changed_report_json_is_rejected() {
        let r = fresh_report();
        let rv = review_for(&r, ReviewDecision::Pass);
        let p = validate(&rv, &r, Some(&"e".repeat(64)));
        assert_eq!(p.len(), 1);
        assert!(p[0].contains("report.json now has"), "{p:?}");
    }

    #[test]
    fn other_schema_or_blank_reviewer_is_rejected() {
        let r = fresh_report();
        let mut rv = review_for(&r, ReviewDecision::Pass);
        rv.schema_version = report::REVIEW_SCHEMA_VERSION + 1;
        rv.reviewer = "  ".into();
        assert_eq!(validate(&rv, &r, None).len(), 2);
    }

    #[test]
    fn report_without_png_cannot_be_reviewed() {
        let mut r = fresh_report();
        r.artifacts.retain(|a| a.kind != "png");
        let rv = review_for(&r, ReviewDecision::Pass);
        let p = validate(&rv, &r, None);
        assert!(p.iter().any(|s| s.contains("no PNG")), "{p:?}");
    }

    #[test]
    fn a_review_cannot_decide_a_gate_that_does_not_wait() {
        let mut r = fresh_report();
        let rv = review_for(&r, ReviewDecision::Pass);
        r.gates[8].status = Status::NotRun;
        let p = validate(&rv, &r, None);
        assert!(p.iter().any(|s| s.contains("NOT_RUN")), "{p:?}");
        let state = assess(&r, None, ReviewFile::Parsed(rv));
        let gates = apply(&r.gates, &state);
        assert_eq!(gui(&gates).status, Status::NotRun);
    }

    #[test]
    fn pass_review_passes_the_gui_gate_and_the_run() {
        let r = fresh_report();
        assert_eq!(report::verdict(&r.gates), Verdict::ReviewRequired);
        let state = assess(
            &r,
            None,
            ReviewFile::Parsed(review_for(&r, ReviewDecision::Pass)),
        );
        assert_eq!(state.label(), "pass");
        let gates = apply(&r.gates, &state);
        assert_eq!(gui(&gates).status, Status::Pass);
        assert!(gui(&gates).reason.contains("alice"));
        assert_eq!(report::verdict(&gates), Verdict::Pass);
    }

    #[test]
    fn fail_review_fails_the_run() {
        let r = fresh_report();
        let state = assess(
            &r,
            None,
            ReviewFile::Parsed(review_for(&r, ReviewDecision::Fail)),
        );
        assert_eq!(state.label(), "fail");
        let gates = apply(&r.gates, &state);
        assert_eq!(gui(&gates).status, Status::Fail);
        assert_eq!(report::verdict(&gates).exit_code(), 1);
    }

    #[test]
    fn pass_review_does_not_hide_another_failed_gate() {
        let mut r = fresh_report();
        r.gates[3].status = Status::Fail;
        let state = assess(
            &r,
            None,
            ReviewFile::Parsed(review_for(&r, ReviewDecision::Pass)),
        );
        let gates = apply(&r.gates, &state);
        assert_eq!(gui(&gates).status, Status::Pass);
        assert_eq!(gates[3].status, Status::Fail);
        assert_eq!(report::verdict(&gates), Verdict::Fail);
    }

    #[test]
    fn invalid_or_absent_review_leaves_the_gate_waiting() {
        let r = fresh_report();
        let gates = apply(&r.gates, &ReviewState::None);
        assert_eq!(gui(&gates).status, Status::ReviewRequired);
        let state = assess(&r, None, ReviewFile::Broken("bad json".into()));
        assert_eq!(state.label(), "invalid");
        let gates = apply(&r.gates, &state);
        assert_eq!(gui(&gates).status, Status::ReviewRequired);
        assert!(gui(&gates).reason.contains("rejected: bad json"));
    }
}
