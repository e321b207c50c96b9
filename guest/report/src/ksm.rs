//! KSM (kernel samepage merging) turned on for one reading and put back as it was found: the
//! host's for the VM copies (`sharedos_rig::compare::ksm`), the shared-OS guest's for the CRIU
//! copies (the density gate's `--guest-ksm`). Either way ksmd is told to scan fast and waited
//! for until it has been over all mergeable memory twice (the first pass only finds candidates;
//! pages merge on the second). The settings are shared by everything on that kernel: [`Merging`]
//! restores them on every path, Drop included.

use crate::wait;
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The tunables the rig changes, in the order they are put back (`run` last, so that ksmd is
/// stopped only once it has its own pace again).
const SAVED: [&str; 3] = ["pages_to_scan", "sleep_millisecs", "run"];

/// Pages ksmd looks at per batch while the rig waits: a 1 GiB guest is 262144 pages.
pub const FAST_PAGES: &str = "4096";
/// ksmd's pause between batches while the rig waits: none.
pub const FAST_SLEEP_MS: &str = "0";

/// KSM turned on by the rig; the settings it found come back when it is dropped.
#[derive(Debug)]
pub struct Merging {
    dir: PathBuf,
    saved: Vec<(&'static str, String)>,
}

/// What ksmd had merged when it was read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    pub full_scans: u64,
    pub pages_shared: u64,
    pub pages_sharing: u64,
}

fn read_value(dir: &Path, name: &str) -> Result<String> {
    let p = dir.join(name);
    let text = crate::procfs::read_proc(&p.to_string_lossy())
        .with_context(|| format!("reading {}", p.display()))?;
    Ok(text.trim().to_string())
}

fn read_number(dir: &Path, name: &str) -> Result<u64> {
    let v = read_value(dir, name)?;
    v.parse()
        .with_context(|| format!("{}/{name} holds {v:?}, not a number", dir.display()))
}

fn write_value(dir: &Path, name: &str, value: &str) -> Result<()> {
    let p = dir.join(name);
    std::fs::write(&p, value).with_context(|| format!("writing {value} to {}", p.display()))
}

pub fn counters(dir: &Path) -> Result<Counters> {
    Ok(Counters {
        full_scans: read_number(dir, "full_scans")?,
        pages_shared: read_number(dir, "pages_shared")?,
        pages_sharing: read_number(dir, "pages_sharing")?,
    })
}

impl Merging {
    /// Turns KSM on at a fast pace, having saved the settings it found.
    pub fn start(dir: &Path) -> Result<Merging> {
        let mut saved = Vec::new();
        for name in SAVED {
            saved.push((name, read_value(dir, name)?));
        }
        let m = Merging {
            dir: dir.to_path_buf(),
            saved,
        };
        write_value(dir, "pages_to_scan", FAST_PAGES)?;
        write_value(dir, "sleep_millisecs", FAST_SLEEP_MS)?;
        write_value(dir, "run", "1")?;
        Ok(m)
    }

    /// The `run` found, as saved before the rig turned KSM on.
    pub fn host_run(&self) -> &str {
        self.saved
            .iter()
            .find(|(name, _)| *name == "run")
            .map_or("", |(_, v)| v.as_str())
    }

    /// Waits up to `bound` for ksmd to have been over all mergeable memory twice since `from`.
    pub fn wait_merged(&self, from: &Counters, bound: Duration) -> Result<Counters> {
        self.wait_merged_from(from, 2, bound)
    }

    /// Waits up to `bound` for `scans` more full scans of ksmd since `from`.
    pub fn wait_merged_from(
        &self,
        from: &Counters,
        scans: u64,
        bound: Duration,
    ) -> Result<Counters> {
        let want = from.full_scans.saturating_add(scans);
        wait::until("ksmd's next full scans", bound, || {
            counters(&self.dir).ok().filter(|c| c.full_scans >= want)
        })
        .map_err(|e| anyhow::anyhow!("{e}: KSM's merging was not measured"))
    }

    /// Reads with `read` once ksmd has been over all mergeable memory twice since `before`,
    /// then again after each further full scan until two readings in a row agree
    /// ([`crate::model::density::steady`] on `total`), while `bound`, counted from `since`,
    /// lasts. Returns the last reading, ksmd's counters at it, and whether it settled. KSM
    /// merges over several scans, so one reading after the first two may not be its figure.
    pub fn read_until_steady<T>(
        &self,
        before: &Counters,
        since: Instant,
        bound: Duration,
        mut read: impl FnMut() -> Result<T>,
        total: impl Fn(&T) -> u64,
    ) -> Result<(T, Counters, bool)> {
        let mut now = self.wait_merged(before, bound)?;
        let mut last = read()?;
        loop {
            let left = bound.saturating_sub(since.elapsed());
            if left.is_zero() {
                return Ok((last, now, false));
            }
            match self.wait_merged_from(&now, 1, left) {
                Ok(c) => now = c,
                Err(_) => return Ok((last, now, false)),
            }
            let next = read()?;
            let agree = crate::model::density::steady(total(&last), total(&next));
            last = next;
            if agree {
                return Ok((last, now, true));
            }
        }
    }

    /// Puts the settings found back; merged pages are split again where KSM was off
    /// (`run` 2, then the host's own value).
    pub fn restore(mut self) -> Result<()> {
        self.put_back()
    }

    fn put_back(&mut self) -> Result<()> {
        let saved = std::mem::take(&mut self.saved);
        let mut first_err = None;
        for (name, value) in &saved {
            let r = if *name == "run" && value == "0" {
                write_value(&self.dir, "run", "2").and_then(|()| write_value(&self.dir, "run", "0"))
            } else {
                write_value(&self.dir, name, value)
            };
            if let Err(e) = r {
                first_err.get_or_insert(e);
            }
        }
        match first_err {
            Some(e) => Err(e.context("putting KSM's settings back")),
            None => Ok(()),
        }
    }
}

impl Drop for Merging {
    fn drop(&mut self) {
        let _ = self.put_back();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sharedos-ksm-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        for (f, v) in [
            ("run", "0\n"),
            ("pages_to_scan", "100\n"),
            ("sleep_millisecs", "20\n"),
            ("full_scans", "7\n"),
            ("pages_shared", "0\n"),
            ("pages_sharing", "0\n"),
        ] {
            std::fs::write(d.join(f), v).unwrap();
        }
        d
    }

    fn value(d: &Path, f: &str) -> String {
        std::fs::read_to_string(d.join(f)).unwrap().trim().into()
    }

    #[test]
    fn the_host_s_settings_come_back_on_restore_and_on_drop() {
        let d = fake("restore");
        let m = Merging::start(&d).unwrap();
        assert_eq!(m.host_run(), "0");
        assert_eq!(value(&d, "run"), "1");
        assert_eq!(value(&d, "pages_to_scan"), FAST_PAGES);
        m.restore().unwrap();
        assert_eq!(
            [
                value(&d, "run"),
                value(&d, "pages_to_scan"),
                value(&d, "sleep_millisecs")
            ],
            ["0", "100", "20"]
        );
        {
            let _m = Merging::start(&d).unwrap();
            assert_eq!(value(&d, "sleep_millisecs"), "0");
        }
        assert_eq!(value(&d, "sleep_millisecs"), "20");
        assert_eq!(value(&d, "run"), "0");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn merging_is_waited_for_until_two_full_scans_and_no_longer_than_the_bound() {
        let d = fake("wait");
        let m = Merging::start(&d).unwrap();
        let from = counters(&d).unwrap();
        let e = m
            .wait_merged(&from, Duration::from_millis(200))
            .unwrap_err();
        assert!(format!("{e:#}").contains("not measured"), "{e:#}");
        std::fs::write(d.join("full_scans"), "8\n").unwrap();
        assert!(m.wait_merged(&from, Duration::from_millis(200)).is_err());
        std::fs::write(d.join("full_scans"), "9\n").unwrap();
        std::fs::write(d.join("pages_sharing"), "1234\n").unwrap();
        let c = m.wait_merged(&from, Duration::from_secs(5)).unwrap();
        assert_eq!(c.pages_sharing, 1234);
        drop(m);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn readings_go_on_until_two_agree_and_a_bound_ends_them_unsettled() {
        let d = fake("steady");
        let m = Merging::start(&d).unwrap();
        let before = counters(&d).unwrap();
        std::fs::write(d.join("full_scans"), "9\n").unwrap();
        // Each reading stands for one more full scan of ksmd.
        let run = |figure: fn(u64) -> u64, bound: Duration| {
            let mut call = 0;
            let scan = d.clone();
            m.read_until_steady(
                &before,
                Instant::now(),
                bound,
                || {
                    let n = read_number(&scan, "full_scans")? + 1;
                    std::fs::write(scan.join("full_scans"), format!("{n}\n"))?;
                    call += 1;
                    Ok(figure(call))
                },
                |v| *v,
            )
            .unwrap()
        };
        // 1000 then 500 differ; 500 then 480 agree within 10%.
        let (last, _, steady) = run(
            |call| [1000, 500, 480][usize::try_from(call - 1).unwrap().min(2)],
            Duration::from_secs(5),
        );
        assert_eq!((last, steady), (480, true));
        // Readings that never agree end at the bound, said unsettled, with the last shown.
        std::fs::write(d.join("full_scans"), "9\n").unwrap();
        let (last, _, steady) = run(|call| 1000 * (call % 2 + 1), Duration::from_millis(300));
        assert!(!steady && (last == 1000 || last == 2000), "{last}");
        drop(m);
        let _ = std::fs::remove_dir_all(&d);
    }
}
