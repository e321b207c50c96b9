//! The host's KSM (kernel samepage merging), turned on for one reading of the VM copies and put
//! back as it was found. QEMU marks guest RAM mergeable by default (`mem-merge`), so what KSM
//! would save a host running many copies of one saved guest is read from the same QEMUs, with
//! ksmd told to scan fast and waited for until it has been over all of it twice (the first pass
//! only finds candidates; pages merge on the second).
//!
//! The settings are the host's, shared by everything on it: [`Merging`] restores them on every
//! path, Drop included.

use anyhow::{bail, Result};
pub use sharedos_report::ksm::{counters, Counters, Merging, FAST_PAGES, FAST_SLEEP_MS};
use std::path::Path;

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

/// What the KSM reading did before it read the copies, as the report says it.
pub fn how() -> String {
    format!(
        "the host's KSM turned on at full pace (pages_to_scan {FAST_PAGES}, sleep_millisecs \
         {FAST_SLEEP_MS}), read once ksmd had been over all mergeable memory twice, then again \
         after each further full scan until two readings in a row agreed within 10% (within a \
         bound); the host's settings put back after"
    )
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
    fn ksm_on_is_refused_where_it_cannot_be_controlled() {
        let missing = std::env::temp_dir().join("sharedos-ksm-none");
        assert!(why_not(&missing).unwrap().contains("no KSM"));
        let e = format!("{:#}", check(Want::On, &missing).unwrap_err());
        assert!(e.contains("--ksm on") && e.contains("fix:"), "{e}");
        assert!(check(Want::Auto, &missing).is_ok());
        assert!(check(Want::Off, &missing).is_ok());
        let d = std::env::temp_dir().join(format!("sharedos-ksm-control-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("run"), "0\n").unwrap();
        assert!(why_not(&d).is_none());
        let _ = std::fs::remove_dir_all(&d);
    }
}
