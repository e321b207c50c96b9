//! The host's KSM (kernel samepage merging), turned on for one reading of the VM copies and put
//! back as it was found. QEMU marks guest RAM mergeable by default (`mem-merge`), so what KSM
//! would save a host running many copies of one saved guest is read from the same QEMUs, with
//! ksmd told to scan fast and waited for until it has been over all of it twice (the first pass
//! only finds candidates; pages merge on the second).
//!
//! The settings are the host's, shared by everything on it: [`Merging`] restores them on every
//! path, Drop included.

use anyhow::{bail, Context, Result};
use sharedos_report::wait;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the host's kernel exposes KSM.
pub const SYSFS: &str = "/sys/kernel/mm/ksm";

/// What the comparison does with the host's KSM (`--ksm`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Want {
    /// Measure with KSM merging where this host lets the rig control it; NOT_RUN elsewhere.
    Auto,
    /// Measure with KSM merging, and refuse before anything boots where it cannot.
    On,
    /// Leave KSM as it is; the reading is NOT_RUN.
    Off,
}

/// Why the rig cannot turn KSM on here, or None when it can.
pub fn why_not(dir: &Path) -> Option<String> {
    let run = dir.join("run");
    if !run.is_file() {
        return Some(format!(
            "this host's kernel has no KSM ({} is missing)",
            run.display()
        ));
    }
    if nix::unistd::access(&run, nix::unistd::AccessFlags::W_OK).is_err() {
        return Some(format!(
            "{} is not writable by this user (KSM is the host's setting: root only)",
            run.display()
        ));
    }
    None
}

/// Refuses, before anything boots, `--ksm on` on a host where the rig cannot turn KSM on.
pub fn check(want: Want, dir: &Path) -> Result<()> {
    if want == Want::On {
        if let Some(why) = why_not(dir) {
            bail!(
                "--ksm on: {why}; nothing was booted\n\
                 fix: run vm-compare as root on a host whose kernel has KSM, or give --ksm auto \
                 (the KSM reading is then NOT_RUN, with this reason)"
            );
        }
    }
    Ok(())
}

/// The first kernel with `PR_SET_MEMORY_MERGE`, which the shared-OS guest's copies need to opt
/// in to its KSM.
const GUEST_KSM_SINCE: (u32, u32) = (6, 4);

/// Whether a kernel release (`6.1.0-50-cloud-amd64`) lets a process opt in to KSM whole; None
/// when it does not read as one.
pub fn has_memory_merge(release: &str) -> Option<bool> {
    let mut parts = release.split(['.', '-']).map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next()??, parts.next()??);
    Some((major, minor) >= GUEST_KSM_SINCE)
}

/// Refuses `--guest-ksm on` before anything boots when the image pins a kernel whose copies cannot opt
/// in to the guest's KSM. `image` names the image; `release` is its pinned kernel's.
pub fn check_guest(want: Want, image: &str, release: Option<&str>) -> Result<()> {
    if want != Want::On {
        return Ok(());
    }
    if let Some(r) = release {
        if has_memory_merge(r) == Some(false) {
            bail!(
                "--guest-ksm on: the shared-OS guest's kernel ({r}, pinned by images/{image}/packages.lock) \
                 has no PR_SET_MEMORY_MERGE (Linux 6.4 and later), so its CRIU copies cannot opt in \
                 to the guest's KSM; nothing was booted\n\
                 fix: give --guest-ksm auto (the guest's reading is then NOT_RUN, saying why), or an \
                 image with a newer kernel (--image trixie)"
            );
        }
    }
    Ok(())
}

/// The tunables the rig changes, in the order they are put back (`run` last, so that ksmd is
/// stopped only once it has its own pace again).
const SAVED: [&str; 3] = ["pages_to_scan", "sleep_millisecs", "run"];

/// Pages ksmd looks at per batch while the rig waits: a 1 GiB guest is 262144 pages.
const FAST_PAGES: &str = "4096";
/// ksmd's pause between batches while the rig waits: none.
const FAST_SLEEP_MS: &str = "0";

/// What the KSM reading did before it read the copies, as the report says it.
pub fn how() -> String {
    format!(
        "the host's KSM turned on at full pace (pages_to_scan {FAST_PAGES}, sleep_millisecs \
         {FAST_SLEEP_MS}), read once ksmd had been over all mergeable memory twice, then again \
         after each further full scan until two readings in a row agreed within 10% (within a \
         bound); the host's settings put back after"
    )
}

/// KSM turned on by the rig; the host's settings come back when it is dropped.
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
    let text = sharedos_report::procfs::read_proc(&p.to_string_lossy())
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
    /// Turns KSM on at a fast pace, having saved the host's settings.
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

    /// The host's own `run`, as saved before the rig turned KSM on.
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

    /// Puts the host's settings back; merged pages are split again when the host had KSM off
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
            Some(e) => Err(e.context("putting the host's KSM settings back")),
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

    #[test]
    fn guest_ksm_on_an_image_whose_kernel_cannot_opt_in_is_refused() {
        assert_eq!(has_memory_merge("6.1.0-50-cloud-amd64"), Some(false));
        assert_eq!(has_memory_merge("6.4.0"), Some(true));
        assert_eq!(has_memory_merge("6.12.57+deb13-cloud-amd64"), Some(true));
        assert_eq!(has_memory_merge("7.3.1-1-cloud-amd64"), Some(true));
        assert_eq!(has_memory_merge("cloud"), None);
        let e = format!(
            "{:#}",
            check_guest(Want::On, "bookworm", Some("6.1.0-50-cloud-amd64")).unwrap_err()
        );
        assert!(
            e.contains("(6.1.0-50-cloud-amd64, pinned by images/bookworm/packages.lock)")
                && e.contains("fix: give --guest-ksm auto"),
            "{e}"
        );
        assert!(check_guest(Want::Auto, "bookworm", Some("6.1.0-50-cloud-amd64")).is_ok());
        assert!(check_guest(Want::On, "trixie", Some("6.12.57+deb13-cloud-amd64")).is_ok());
        // An image not built yet pins no kernel: its guest says, once booted.
        assert!(check_guest(Want::On, "new", None).is_ok());
    }

    /// A directory laid out as the kernel's KSM directory: plain files the rig reads and writes.
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
    fn the_reading_says_the_pace_it_set_in_one_plain_sentence() {
        let h = how();
        assert!(h.contains(&format!("pages_to_scan {FAST_PAGES},")), "{h}");
        assert!(
            h.contains(&format!("sleep_millisecs {FAST_SLEEP_MS})")),
            "{h}"
        );
        assert!(!h.contains("  "), "{h}");
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
    fn ksm_on_is_refused_where_it_cannot_be_controlled() {
        let missing = std::env::temp_dir().join("sharedos-ksm-none");
        assert!(why_not(&missing).unwrap().contains("no KSM"));
        let e = format!("{:#}", check(Want::On, &missing).unwrap_err());
        assert!(e.contains("--ksm on") && e.contains("fix:"), "{e}");
        assert!(check(Want::Auto, &missing).is_ok());
        assert!(check(Want::Off, &missing).is_ok());
        let d = fake("control");
        assert!(why_not(&d).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }
}
