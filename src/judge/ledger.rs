//! The host's ledger of signed reviews. A review lives beside its report, so whoever can edit
//! the archive can delete it, and a report whose signed FAIL review is deleted with its
//! signature looks like one that was never reviewed: nothing inside the archive can tell the
//! two apart, since the report was signed before any review existed, and an older signature
//! can always be put back. So the host remembers: every signed review this host records
//! (`review --sign-key`) or sees verified (`verify --allowed-signers`) is kept here, review.json
//! and its signature byte for byte, under the sha256 of the report.json it decides. Every
//! judgement then requires the report to carry the newest of them (or a newer signed one).
//!
//! Where: `$SHAREDOS_RIG_STATE_DIR`, else `$XDG_STATE_HOME/sharedos-rig`, else
//! `~/.local/state/sharedos-rig`; in it, `reviews/<report sha256>/<review sha256>.json` and
//! `.json.sig`.

use anyhow::{Context, Result};
use sharedos_report::digest;
use sharedos_report::report::{Review, REVIEW_FILE};
use std::path::{Path, PathBuf};

/// More than any review.json and its signature.
const MAX_ENTRY_BYTES: u64 = 1 << 20;
/// More reviews of one report than anyone records.
const MAX_ENTRIES: usize = 1000;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    root: PathBuf,
}

/// A signed review the ledger holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub review: Review,
    pub review_sha256: String,
    /// review.json's copy in the ledger, to restore from.
    pub path: PathBuf,
}

/// The review a report directory carries, as the ledger weighs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Carried<'a> {
    pub review: &'a Review,
    pub sha256: &'a str,
    /// Signed by a key the allowed signers allow (or, with none given, carrying a signature).
    pub signed: bool,
}

impl Ledger {
    pub fn at(root: impl Into<PathBuf>) -> Ledger {
        Ledger { root: root.into() }
    }

    /// The ledger of the user running the command, from the environment.
    pub fn from_env() -> Option<Ledger> {
        let var = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        var("SHAREDOS_RIG_STATE_DIR")
            .or_else(|| var("XDG_STATE_HOME").map(|d| d.join("sharedos-rig")))
            .or_else(|| var("HOME").map(|h| h.join(".local/state/sharedos-rig")))
            .map(Ledger::at)
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    fn report_dir(&self, report_sha256: &str) -> PathBuf {
        self.root.join("reviews").join(report_sha256)
    }

    /// Keeps a signed review of the report whose report.json has `report_sha256`.
    pub fn record(&self, report_sha256: &str, review: &[u8], signature: &[u8]) -> Result<PathBuf> {
        if !is_sha256(report_sha256) {
            anyhow::bail!("{report_sha256:?} is not a sha256");
        }
        let dir = self.report_dir(report_sha256);
        std::fs::create_dir_all(&dir).with_context(|| {
            format!(
                "creating the review ledger {}; set SHAREDOS_RIG_STATE_DIR to a writable directory",
                dir.display()
            )
        })?;
        let name = format!("{}.json", digest::sha256_hex(review));
        digest::replace_in_report(&dir, &format!("{name}.sig"), signature)?;
        digest::replace_in_report(&dir, &name, review)?;
        Ok(dir.join(name))
    }

    /// The signed reviews kept for the report whose report.json has `report_sha256`.
    pub fn recorded(&self, report_sha256: &str) -> Result<Vec<Recorded>> {
        let dir = self.report_dir(report_sha256);
        if !is_sha256(report_sha256) || !dir.is_dir() {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        let entries = std::fs::read_dir(&dir)
            .with_context(|| format!("reading the review ledger {}", dir.display()))?;
        for e in entries.take(2 * MAX_ENTRIES) {
            let path = e.context("reading the review ledger")?.path();
            let Some(sha) = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|s| is_sha256(s))
                .map(str::to_string)
            else {
                continue;
            };
            let bytes = read_capped(&path)?;
            if digest::sha256_hex(&bytes) != sha {
                anyhow::bail!("{} does not hash to its name", path.display());
            }
            let review: Review = serde_json::from_slice(&bytes)
                .with_context(|| format!("{} is not a review", path.display()))?;
            out.push(Recorded {
                review,
                review_sha256: sha,
                path,
            });
        }
        out.sort_by(|a, b| a.review.recorded_at.cmp(&b.review.recorded_at));
        Ok(out)
    }
}

/// What is wrong when the report no longer carries the newest signed review the ledger holds:
/// it carries none, an unsigned one, or an older one. A newer signed review (another decision,
/// recorded with `--force`) supersedes the ledger's.
pub fn problems(recorded: &[Recorded], carried: Option<Carried<'_>>) -> Vec<String> {
    let Some(newest) = recorded.last() else {
        return Vec::new();
    };
    let fine = carried.is_some_and(|c| {
        c.signed
            && (c.sha256 == newest.review_sha256
                || c.review.recorded_at > newest.review.recorded_at)
    });
    if fine {
        return Vec::new();
    }
    let r = &newest.review;
    let now = match carried {
        None => format!("the report directory carries no valid {REVIEW_FILE}"),
        Some(c) if !c.signed => format!("its {REVIEW_FILE} is not signed by an allowed key"),
        Some(c) => format!(
            "its {REVIEW_FILE} is an older one ({} by {} at {})",
            super::review::decision_str(c.review.decision),
            c.review.reviewer,
            c.review.recorded_at
        ),
    };
    vec![format!(
        "this host recorded a signed review of this report ({} by {} at {}), but {now}: it was \
         removed or replaced; restore {REVIEW_FILE} and {REVIEW_FILE}.sig from {} (and its \
         .sig), or record a new decision with `sharedos-rig review --force --sign-key`",
        super::review::decision_str(r.decision),
        r.reviewer,
        r.recorded_at,
        newest.path.display()
    )]
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

fn read_capped(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut v = Vec::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_ENTRY_BYTES + 1).read_to_end(&mut v))
        .with_context(|| format!("reading {}", path.display()))?;
    if v.len() as u64 > MAX_ENTRY_BYTES {
        anyhow::bail!("{} is larger than a review", path.display());
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::review::tests::{fresh_report, review_for};
    use sharedos_report::report::ReviewDecision;

    fn bytes(r: &Review) -> Vec<u8> {
        serde_json::to_vec(r).unwrap()
    }

    fn carried<'a>(review: &'a Review, sha256: &'a str, signed: bool) -> Option<Carried<'a>> {
        Some(Carried {
            review,
            sha256,
            signed,
        })
    }

    fn at(decision: ReviewDecision, time: &str) -> Review {
        let mut r = review_for(&fresh_report(), decision);
        r.recorded_at = time.into();
        r
    }

    #[test]
    fn a_recorded_signed_review_must_stay_carried() {
        let root = std::env::temp_dir().join(format!("ledger-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let l = Ledger::at(&root);
        let report_sha = "ab".repeat(32);
        assert!(l.recorded(&report_sha).unwrap().is_empty());
        assert!(
            problems(&[], None).is_empty(),
            "nothing recorded, nothing required"
        );
        let fail = at(ReviewDecision::Fail, "2026-12-02T10:00:00.000Z");
        let fb = bytes(&fail);
        let fail_sha = digest::sha256_hex(&fb);
        let kept = l.record(&report_sha, &fb, b"sig").unwrap();
        assert_eq!(std::fs::read(&kept).unwrap(), fb);
        assert_eq!(
            std::fs::read(kept.with_extension("json.sig")).unwrap(),
            b"sig"
        );
        let rec = l.recorded(&report_sha).unwrap();
        assert_eq!(rec.len(), 1);
        // Carried as recorded: fine.
        assert!(problems(&rec, carried(&fail, &fail_sha, true)).is_empty());
        // Deleted, unsigned, or an older one put back: named, with where to restore from.
        let p = problems(&rec, None);
        assert!(
            p[0].contains("(fail by alice at 2026-12-02T10:00:00.000Z)"),
            "{p:?}"
        );
        assert!(p[0].contains("carries no valid review.json"), "{p:?}");
        assert!(p[0].contains(&kept.display().to_string()), "{p:?}");
        assert!(problems(&rec, carried(&fail, &fail_sha, false))[0].contains("not signed"));
        let old = at(ReviewDecision::Pass, "2026-12-02T09:00:00.000Z");
        let p = problems(&rec, carried(&old, "00", true));
        assert!(
            p[0].contains("an older one (pass by alice at 2026-12-02T09:00"),
            "{p:?}"
        );
        // A newer signed decision supersedes it.
        let newer = at(ReviewDecision::Pass, "2026-12-02T11:00:00.000Z");
        assert!(problems(&rec, carried(&newer, "11", true)).is_empty());
        // The newest recorded one is the one that counts.
        l.record(&report_sha, &bytes(&newer), b"sig2").unwrap();
        let rec = l.recorded(&report_sha).unwrap();
        assert_eq!(rec.len(), 2);
        assert!(!problems(&rec, carried(&fail, &fail_sha, true)).is_empty());
        std::fs::remove_dir_all(&root).unwrap();
    }
}
