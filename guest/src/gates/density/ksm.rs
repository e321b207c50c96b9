//! The guest's KSM for the density gate's copies (`--guest-ksm`). A restored copy's pages are
//! private to it: CRIU does not share them between restores. KSM can merge the identical ones,
//! but only in memory a process opted in; Linux 6.4 added `PR_SET_MEMORY_MERGE`, which opts in a
//! whole process and is inherited by what it forks and runs. The gate sets it on itself before
//! the first restore, so that `criu restore`, which it starts, and every task CRIU forks for a
//! copy inherit it. Once every copy is up and measured, ksmd runs at full pace and each copy is
//! read after every further full scan until two readings in a row agree; the guest's KSM
//! settings are then put back.

use super::copy_mem;
use crate::gates::Ctx;
use anyhow::{Context, Result};
use sharedos_report::model::density::{steady, CopyMem, GuestKsm};
use sharedos_report::procfs::read_proc;
use sharedos_report::report::Status;
use std::path::Path;
use std::time::{Duration, Instant};

/// The prctl that opts a whole process in to KSM (Linux 6.4 and later).
const PR_SET_MEMORY_MERGE: i32 = 67;

/// The guest's KSM.
pub const SYSFS: &str = "/sys/kernel/mm/ksm";

/// ksmd at full pace: the most pages a pass, no sleep between passes.
const FAST: [(&str, &str); 2] = [("pages_to_scan", "4096"), ("sleep_millisecs", "0")];

/// Opts this process, and so everything it starts from now on, in to KSM; Err: why the reading
/// cannot be taken on this guest, in the words the report gives.
pub fn opt_in(ksm: &Path) -> Result<(), String> {
    if !ksm.join("run").exists() {
        return Err(format!(
            "this guest's kernel has no KSM ({} is missing)",
            ksm.display()
        ));
    }
    // SAFETY: prctl with plain integer arguments; it reads and writes no memory of ours.
    let r = unsafe { nix::libc::prctl(PR_SET_MEMORY_MERGE, 1, 0, 0, 0) };
    if r == 0 {
        return Ok(());
    }
    let e = std::io::Error::last_os_error();
    Err(match e.raw_os_error() {
        Some(nix::libc::EINVAL) => format!(
            "kernel {} has no PR_SET_MEMORY_MERGE (Linux 6.4+): the copies cannot opt in",
            kernel_release()
        ),
        _ => format!("prctl(PR_SET_MEMORY_MERGE): {e}"),
    })
}

/// Takes this process out again: only what it starts later would inherit it.
pub fn opt_out() {
    // SAFETY: as in `opt_in`.
    let _ = unsafe { nix::libc::prctl(PR_SET_MEMORY_MERGE, 0, 0, 0, 0) };
}

fn kernel_release() -> String {
    nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// ksmd's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Counters {
    pub full_scans: u64,
    pub pages_shared: u64,
    pub pages_sharing: u64,
}

fn read_value(ksm: &Path, name: &str) -> Result<String> {
    let p = ksm.join(name);
    Ok(read_proc(&p.to_string_lossy())
        .with_context(|| format!("reading {}", p.display()))?
        .trim()
        .to_string())
}

fn read_u64(ksm: &Path, name: &str) -> Result<u64> {
    let v = read_value(ksm, name)?;
    v.parse()
        .with_context(|| format!("{}/{name} holds {v:?}, not a count", ksm.display()))
}

pub fn counters(ksm: &Path) -> Result<Counters> {
    Ok(Counters {
        full_scans: read_u64(ksm, "full_scans")?,
        pages_shared: read_u64(ksm, "pages_shared")?,
        pages_sharing: read_u64(ksm, "pages_sharing")?,
    })
}

fn write_value(ksm: &Path, name: &str, value: &str) -> Result<()> {
    let p = ksm.join(name);
    std::fs::write(&p, value).with_context(|| format!("writing {value} to {}", p.display()))
}

/// Waits up to `bound` for `scans` more full scans of ksmd than `from`.
fn wait_scans(ksm: &Path, from: &Counters, scans: u64, bound: Duration) -> Result<Counters> {
    let want = from.full_scans.saturating_add(scans);
    sharedos_report::wait::until("ksmd's next full scans", bound, || {
        counters(ksm).ok().filter(|c| c.full_scans >= want)
    })
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// The copies' PSS added up (KiB).
fn total_pss(mems: &[CopyMem]) -> u64 {
    mems.iter()
        .fold(0u64, |t, m| t.saturating_add(m.mem.pss_kib))
}

/// Every copy of `up` read with ksmd merging, within `bound`; `opted`: whether the copies
/// could opt in ([`opt_in`]'s answer before the restores).
pub fn reading(
    ctx: &Ctx,
    ksm: &Path,
    up: &[(String, i32)],
    opted: &Result<(), String>,
    bound: Duration,
) -> GuestKsm {
    if let Err(why) = opted {
        return GuestKsm::not_run(why.clone());
    }
    let t = Instant::now();
    let mut saved = Vec::new();
    let result = (|| -> Result<GuestKsm> {
        for name in ["run", "pages_to_scan", "sleep_millisecs"] {
            saved.push((name, read_value(ksm, name)?));
        }
        let before = counters(ksm)?;
        for (name, value) in FAST {
            write_value(ksm, name, value)?;
        }
        write_value(ksm, "run", "1")?;
        let mut now = wait_scans(ksm, &before, 2, bound)?;
        let read = |up: &[(String, i32)]| -> Vec<CopyMem> {
            up.iter().map(|(l, p)| copy_mem(ctx, l, *p)).collect()
        };
        let mut mems = read(up);
        let steady_now = loop {
            let left = bound.saturating_sub(t.elapsed());
            if left.is_zero() {
                break false;
            }
            match wait_scans(ksm, &now, 1, left) {
                Ok(c) => now = c,
                Err(_) => break false,
            }
            let next = read(up);
            let agree = steady(total_pss(&mems), total_pss(&next));
            mems = next;
            if agree {
                break true;
            }
        };
        let errors: Vec<&String> = mems.iter().flat_map(|m| &m.errors).collect();
        let (status, reason) = if errors.is_empty() {
            (
                Status::Pass,
                format!(
                    "every copy read with the guest's KSM merging ({} pages shared, {} more sharing them)",
                    now.pages_shared, now.pages_sharing
                ),
            )
        } else {
            (
                Status::Fail,
                format!("a copy's memory could not be read: {errors:?}"),
            )
        };
        Ok(GuestKsm {
            status,
            reason,
            per_copy: mems,
            pages_shared: now.pages_shared,
            pages_sharing: now.pages_sharing,
            full_scans: now.full_scans.saturating_sub(before.full_scans),
            took_ms: u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX),
            steady: steady_now,
        })
    })();
    // The guest's settings back; `run` last, so that ksmd stops (merged pages stay merged:
    // the copies end soon after, and unmerging them all would only cost time).
    for (name, value) in saved.iter().rev() {
        let _ = write_value(ksm, name, value);
    }
    result.unwrap_or_else(|e| GuestKsm {
        status: Status::Fail,
        ..GuestKsm::not_run(format!("{e:#}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_guest_without_ksm_says_so() {
        let dir = std::env::temp_dir().join(format!("no-ksm-{}", std::process::id()));
        let e = opt_in(&dir).unwrap_err();
        assert!(e.contains("has no KSM"), "{e}");
    }

    #[test]
    fn counters_that_do_not_read_as_counts_are_an_error() {
        let dir = std::env::temp_dir().join(format!("ksm-counters-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (f, v) in [
            ("full_scans", "3\n"),
            ("pages_shared", "10"),
            ("pages_sharing", "25"),
        ] {
            std::fs::write(dir.join(f), v).unwrap();
        }
        assert_eq!(
            counters(&dir).unwrap(),
            Counters {
                full_scans: 3,
                pages_shared: 10,
                pages_sharing: 25
            }
        );
        std::fs::write(dir.join("pages_sharing"), "lots").unwrap();
        let e = format!("{:#}", counters(&dir).unwrap_err());
        assert!(e.contains("not a count"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
