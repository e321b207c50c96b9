//! `sharedos-rig list`: the reports in a directory, newest first, one line each. Each entry is
//! reached without following a link and judged by the one verdict (artifacts not re-hashed, so
//! a directory of many reports lists quickly); every field a report wrote is escaped.

use crate::escape::line as esc;
use crate::judge::ledger::Ledger;
use crate::judge::reader::{Kind, ReportDir};
use crate::judge::verdict::{self, How};
use anyhow::Result;
use sharedos_report::report::{Verdict, REPORT_FILE};
use std::fmt;
use std::path::{Path, PathBuf};

/// One readable report.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    pub started_at: String,
    pub verdict: Verdict,
    pub kernel: String,
    /// The image's sha256, None when the report did not come from vm-run.
    pub image_sha256: Option<String>,
    /// kvm, tcg, or None for a run directly on a host.
    pub accel: Option<String>,
    /// none, pass, fail or invalid.
    pub review: &'static str,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub dir: PathBuf,
    /// Err carries why the report could not be read, so nothing is skipped silently.
    pub summary: std::result::Result<Summary, String>,
}

/// Lists every immediate subdirectory of `root`: readable reports newest first (by
/// environment.started_at), then the unreadable ones (a link among them, named and not
/// followed) by name. Err only when `root` itself cannot be read.
pub fn list(root: &Path, ledger: Option<&Ledger>) -> Result<Vec<Entry>> {
    let fix = "give the directory that holds the reports (default: reports/)";
    let dir = ReportDir::open(root)
        .map_err(|e| anyhow::anyhow!("reading the report directory {e}; {fix}"))?;
    let names = dir
        .entries("")
        .map_err(|e| anyhow::anyhow!("listing {}: {e}; {fix}", root.display()))?;
    let mut entries = Vec::new();
    for (name, kind) in names {
        let path = root.join(&name);
        let summary = match kind {
            Kind::Dir => summarize(&dir, &name, ledger),
            Kind::Link => Err("a symbolic link, not followed".to_string()),
            _ => continue,
        };
        entries.push(Entry { summary, dir: path });
    }
    sort(&mut entries);
    Ok(entries)
}

fn summarize(
    root: &ReportDir,
    name: &str,
    ledger: Option<&Ledger>,
) -> std::result::Result<Summary, String> {
    let dir = root.open_beneath(name)?;
    if dir.kind(REPORT_FILE)?.is_none() {
        return Err(format!("no {REPORT_FILE}"));
    }
    let o = verdict::judge_dir(dir, &How::quick(ledger)).map_err(|e| e.problem)?;
    let vm = o.report.vm.as_ref();
    Ok(Summary {
        started_at: o.report.environment.started_at.clone(),
        verdict: o.verdict,
        kernel: o.report.environment.kernel_release.clone(),
        image_sha256: vm.map(|v| v.image_sha256.clone()),
        accel: vm.map(|v| v.accel.clone()),
        review: o.review.label(),
    })
}

/// Newest first; RFC 3339 UTC stamps of one format sort as text. Ties and unreadable entries go
/// by directory name, which vm-run starts with a UTC stamp too.
pub fn sort(entries: &mut [Entry]) {
    entries.sort_by(|x, y| match (&x.summary, &y.summary) {
        (Ok(a), Ok(b)) => b
            .started_at
            .cmp(&a.started_at)
            .then_with(|| y.dir.cmp(&x.dir)),
        (Ok(_), Err(_)) => std::cmp::Ordering::Less,
        (Err(_), Ok(_)) => std::cmp::Ordering::Greater,
        (Err(_), Err(_)) => y.dir.cmp(&x.dir),
    });
}

/// A field as list shows it: "-" when empty, escaped otherwise.
fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".to_string()
    } else {
        esc(s)
    }
}

impl fmt::Display for Entry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.summary {
            Ok(s) => {
                let image = s
                    .image_sha256
                    .as_deref()
                    .map_or("-", |h| h.get(..12).unwrap_or(h));
                let dir = esc(&self.dir.display().to_string());
                write!(
                    f,
                    "{:<24}  {:<15}  {:<20}  {:<12}  {:<5}  review:{:<7}  {}",
                    or_dash(&s.started_at),
                    s.verdict.as_str(),
                    or_dash(&s.kernel),
                    or_dash(image),
                    s.accel.as_deref().map_or("host".to_string(), or_dash),
                    s.review,
                    dir
                )
            }
            Err(why) => write!(
                f,
                "UNREADABLE  {}: {}",
                esc(&self.dir.display().to_string()),
                esc(why)
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(dir: &str, at: &str) -> Entry {
        Entry {
            dir: dir.into(),
            summary: Ok(Summary {
                started_at: at.into(),
                verdict: Verdict::ReviewRequired,
                kernel: "6.1.0-28-amd64".into(),
                image_sha256: None,
                accel: None,
                review: "none",
            }),
        }
    }

    #[test]
    fn scans_a_directory_and_names_what_it_cannot_read() {
        let root = std::env::temp_dir().join(format!("list-scan-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("empty")).unwrap();
        std::fs::create_dir_all(root.join("old-schema")).unwrap();
        std::fs::write(
            root.join("old-schema").join(REPORT_FILE),
            br#"{"schema_version": 0}"#,
        )
        .unwrap();
        std::fs::write(root.join("stray-file"), b"x").unwrap();
        let v = list(&root, None).unwrap();
        let lines: Vec<String> = v.iter().map(|e| e.to_string()).collect();
        assert_eq!(lines.len(), 2, "{lines:?}");
        assert!(
            lines.iter().any(|l| l.contains("empty: no report.json")),
            "{lines:?}"
        );
        assert!(
            lines.iter().any(|l| l.contains("schema_version is 0")),
            "{lines:?}"
        );
        std::fs::remove_dir_all(&root).unwrap();
        assert!(list(&root, None).is_err());
    }

    #[test]
    fn newest_first_unreadable_last() {
        let mut v = vec![
            Entry {
                dir: "r/broken".into(),
                summary: Err("no report.json".into()),
            },
            ok("r/old", "2026-01-01T00:00:00.000Z"),
            ok("r/new", "2026-12-01T00:00:00.000Z"),
        ];
        sort(&mut v);
        let dirs: Vec<String> = v.iter().map(|e| e.dir.display().to_string()).collect();
        assert_eq!(dirs, ["r/new", "r/old", "r/broken"]);
    }

    #[test]
    fn line_shows_host_and_dash_without_vm() {
        let line = ok("r/a", "2026-01-01T00:00:00.000Z").to_string();
        assert!(line.contains("REVIEW_REQUIRED"), "{line}");
        assert!(line.contains(" - "), "{line}");
        assert!(line.contains("host"), "{line}");
        assert!(line.contains("review:none"), "{line}");
        let mut e = ok("r/b", "x");
        if let Ok(s) = e.summary.as_mut() {
            s.image_sha256 = Some("abcdef0123456789".into());
            s.accel = Some("kvm".into());
        }
        let line = e.to_string();
        assert!(line.contains("abcdef012345 "), "{line}");
        assert!(line.contains("kvm"), "{line}");
        let bad = Entry {
            dir: "r/x".into(),
            summary: Err("schema_version is 9".into()),
        };
        assert_eq!(bad.to_string(), "UNREADABLE  r/x: schema_version is 9");
    }
}
