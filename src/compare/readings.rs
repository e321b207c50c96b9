//! The host's readings of a VM arm's copies: each QEMU's memory, and the further readings
//! taken after something was done to all of them (host KSM, memory given back).

use super::vm_arm::Up;
use super::{fork, ksm, ms, progress};
use crate::judge::compare::Reading;
use crate::run;
use anyhow::Result;
use sharedos_report::model::density::{Mem, STEADY_PCT};
use sharedos_report::procfs::{self, QemuMem};
use sharedos_report::report::Status;
use sharedos_report::wait;
use std::path::Path;
use std::time::{Duration, Instant};

/// The host's view of one QEMU's memory.
pub(super) fn host_mem(pid: u32) -> Result<Mem, String> {
    procfs::read_proc(&format!("/proc/{pid}/smaps_rollup"))
        .and_then(|t| procfs::parse_smaps_rollup(&t))
        .map_err(|e| format!("{e:#}"))
}

/// The host's view of one QEMU's memory by what holds it; None when it does not read (the
/// copy's figure is then only its whole).
pub(super) fn host_split(pid: u32) -> Option<QemuMem> {
    procfs::read_proc_up_to(&format!("/proc/{pid}/smaps"), procfs::MAX_SMAPS_READ)
        .and_then(|t| procfs::parse_qemu_smaps(&t))
        .ok()
}

/// Every copy's QEMU, as the host reads it.
fn host_mems(pids: &[u32]) -> Result<Vec<Mem>> {
    pids.iter()
        .map(|&pid| host_mem(pid).map_err(|e| anyhow::anyhow!("QEMU {pid}: {e}")))
        .collect()
}

/// Every copy read again with the host's KSM merging: NOT_RUN where it was not asked for or
/// this host does not let the rig turn it on (`ksm::check` refused `--ksm on` there already).
pub(super) fn ksm_reading(want: ksm::Want, pids: &[u32], copies: u32) -> Reading {
    let dir = Path::new(ksm::SYSFS);
    let why_not = match want {
        ksm::Want::Off => Some("not asked for (--ksm off)".to_string()),
        _ => ksm::why_not(dir),
    };
    if let Some(why) = why_not {
        return Reading::not_run(why);
    }
    let how = ksm::how();
    // ksmd goes over every copy's RAM twice; 30 s a copy is far more than it takes under TCG.
    let bound = Duration::from_secs(60 + 30 * u64::from(copies));
    progress().note("host KSM: merging the copies' pages, then reading each QEMU again");
    let t = Instant::now();
    let result = (|| -> Result<(Vec<Mem>, Vec<String>)> {
        let before = ksm::counters(dir)?;
        let mut notes = Vec::new();
        let merging = ksm::Merging::start(dir)?;
        if merging.host_run() != "0" {
            notes.push(format!(
                "the host's KSM run was {} before, so the first reading was not with KSM off",
                merging.host_run()
            ));
        }
        let (mems, after, steady) =
            merging.read_until_steady(&before, t, bound, || host_mems(pids), |m| total_pss(m))?;
        merging.restore()?;
        notes.push(format!(
            "ksmd: {} pages shared, {} more pages sharing them, after {} full scans",
            after.pages_shared,
            after.pages_sharing,
            after.full_scans.saturating_sub(before.full_scans)
        ));
        notes.push(if steady {
            format!(
                "steady after {:.1} s: two readings one full scan apart agreed within {STEADY_PCT}%",
                t.elapsed().as_secs_f64()
            )
        } else {
            format!(
                "not steady within its bound of {} s: the last reading is shown",
                bound.as_secs()
            )
        });
        Ok((mems, notes))
    })();
    match result {
        Ok((per_copy, notes)) => Reading {
            status: Status::Pass,
            reason: "every copy read with KSM merging".into(),
            how,
            per_copy,
            took_ms: ms(t.elapsed()),
            notes,
        },
        Err(e) => Reading::failed(how, crate::escape::error_chain(&e)),
    }
}

/// The copies' PSS added up (KiB).
fn total_pss(mems: &[Mem]) -> u64 {
    mems.iter().fold(0u64, |t, m| t.saturating_add(m.pss_kib))
}

/// How long each QEMU's resident memory must hold still before the guest is taken to have
/// handed back all it will: longer than the guest's 2-s delay before it reports free pages.
const SETTLED: Duration = Duration::from_secs(4);

/// What the reading of memory given back did before it read the copies, as the report says it.
fn reclaim_how() -> String {
    format!(
        "in each copy's guest: drop_caches 3, then the virtio_balloon driver loaded, which reports \
         free pages to QEMU (free-page-reporting); read once every QEMU's RSS had held still for \
         {} s",
        SETTLED.as_secs()
    )
}

/// Every copy read again after its guest dropped its caches and reported its free pages.
pub(super) fn reclaim_reading(up: &[Up], b: run::Bounds) -> Reading {
    let how = reclaim_how();
    progress()
        .note("each copy's guest gives back what it does not use, then each QEMU is read again");
    let t = Instant::now();
    for c in up {
        match c.session.guest().exec(&fork::reclaim_command()) {
            Ok(r) if r.status == 0 => {}
            Ok(r) => {
                return Reading::failed(
                    how,
                    format!(
                        "{}: the guest could not give memory back (exit {}): {}",
                        c.label,
                        r.status,
                        crate::escape::line(&r.output)
                    ),
                )
            }
            Err(e) => {
                return Reading::failed(
                    how,
                    format!("{}: {}", c.label, crate::escape::error_chain(&e)),
                )
            }
        }
    }
    let pids: Vec<u32> = up.iter().map(|c| c.session.qemu_pid()).collect();
    let mut last: Option<(Instant, Vec<u64>)> = None;
    let settled = wait::until("every copy's QEMU to stop shrinking", b.gates, || {
        let mems = host_mems(&pids).ok()?;
        let rss: Vec<u64> = mems.iter().map(|m| m.rss_kib).collect();
        match &last {
            // A fall of more than 1 MiB starts the wait for stillness again.
            Some((since, was))
                if rss
                    .iter()
                    .zip(was)
                    .all(|(now, was)| now.saturating_add(1024) >= *was) =>
            {
                (since.elapsed() >= SETTLED).then_some(mems)
            }
            _ => {
                last = Some((Instant::now(), rss));
                None
            }
        }
    });
    match settled {
        Ok(per_copy) => Reading {
            status: Status::Pass,
            reason: "every copy read after its guest gave memory back".into(),
            how,
            per_copy,
            took_ms: ms(t.elapsed()),
            notes: Vec::new(),
        },
        Err(e) => Reading::failed(how, e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reclaim_reading_says_its_wait_in_one_plain_sentence() {
        let h = reclaim_how();
        assert!(
            h.ends_with(&format!("held still for {} s", SETTLED.as_secs())),
            "{h}"
        );
        assert!(!h.contains("  "), "{h}");
    }
}
