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
use anyhow::Result;
use sharedos_report::ksm::{counters, Merging};
use sharedos_report::model::density::{CopyMem, GuestKsm};
use sharedos_report::report::Status;
use std::path::Path;
use std::time::{Duration, Instant};

/// The prctl that opts a whole process in to KSM (Linux 6.4 and later).
const PR_SET_MEMORY_MERGE: i32 = 67;

/// The guest's KSM.
pub const SYSFS: &str = "/sys/kernel/mm/ksm";

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
    let result = (|| -> Result<GuestKsm> {
        let before = counters(ksm)?;
        let merging = Merging::start(ksm)?;
        let (mems, now, steady_now) = merging.read_until_steady(
            &before,
            t,
            bound,
            || {
                Ok(up
                    .iter()
                    .map(|(l, p)| copy_mem(ctx, l, *p))
                    .collect::<Vec<_>>())
            },
            |m| total_pss(m),
        )?;
        // The guest's settings back (merged pages split again where KSM was off).
        merging.restore()?;
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
            took_ms: sharedos_report::clock::millis(t.elapsed()),
            steady: steady_now,
        })
    })();
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
}
