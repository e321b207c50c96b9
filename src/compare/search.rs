//! The host's side of `--copies max` in a VM arm: one copy at a time, each kept up, until the
//! first bound of the rule the density gate holds its restores to
//! (`sharedos_report::model::density::stop_before_next`), read against the host's MemAvailable:
//! the cap, the deadline, the bound on one copy's resume, or the memory floor. With `--copies N`
//! the same loop stops at N and reads nothing more, so that both requests are one path.
//!
//! Each step is written to `<arm>-search.json` beside compare.json as soon as it is taken, so
//! that a run stopped half way keeps what it measured.

use super::{progress, Arm};
use crate::judge::compare::Search;
use anyhow::Result;
use sharedos_report::digest;
use sharedos_report::model::density::{Limits, SearchPlan, SearchStep, Searching, Stop};
use sharedos_report::procfs;
use sharedos_report::report::Copies;
use std::path::Path;
use std::time::Duration;

/// The file a VM arm's search writes its steps to, under the comparison's directory.
pub fn file_name(arm: Arm) -> String {
    format!("{}-search.json", arm.as_str())
}

/// What `<arm>-search.json` holds: compare.json holds the search's record once the arm is
/// done; this file is what is left of it should the run be stopped before.
#[derive(serde::Serialize)]
struct Archived<'a> {
    arm: Arm,
    finished: bool,
    limits: &'a Limits,
    steps: &'a [SearchStep],
    stopped_by: Option<Stop>,
    detail: Option<&'a str>,
}

/// A VM arm's search under way: the one bookkeeping of the density gate's, read against the
/// host's MemAvailable.
pub(super) struct HostSearch(Searching);

impl HostSearch {
    /// A search for `req`, its bounds from this host's memory now.
    pub(super) fn new(req: Copies, max_copies: Option<u32>) -> Result<HostSearch> {
        let (total, avail) = procfs::read_meminfo()?;
        Ok(HostSearch(Searching::new(SearchPlan::new(
            req, max_copies, total, avail,
        ))))
    }

    /// Whether to stop before copy `copies_up + 1`: the bound met and what the search saw. A
    /// count reads nothing; a search reads the host's MemAvailable and records the step.
    pub(super) fn decide(&mut self, copies_up: usize) -> Result<Option<(Stop, String)>> {
        let plan = self.0.plan();
        let avail = if plan.count_mode {
            plan.avail_before_kib
        } else {
            procfs::read_meminfo()?.1
        };
        Ok(self.0.next(copies_up, avail))
    }

    /// A copy came up after `took`, its QEMU's PSS read (None: it did not read, and the
    /// search's estimate of the next copy stands on MemAvailable alone).
    pub(super) fn up(&mut self, took: Duration, pss_kib: Option<u64>) {
        self.0.up(took, pss_kib);
    }

    /// Writes the steps so far, and the stop once there is one; a failure is said, and the
    /// search goes on.
    pub(super) fn archive(&self, out: &Path, arm: Arm, stop: Option<(Stop, &str)>) {
        let record = Archived {
            arm,
            finished: stop.is_some(),
            limits: &self.0.plan().limits,
            steps: self.0.steps(),
            stopped_by: stop.map(|(s, _)| s),
            detail: stop.map(|(_, d)| d),
        };
        let written = serde_json::to_vec_pretty(&record)
            .map_err(anyhow::Error::from)
            .and_then(|b| digest::replace_in_report(out, &file_name(arm), &b));
        if let Err(e) = written {
            progress().note(&format!(
                "{}: its search's steps were not written: {e:#}",
                arm.column()
            ));
        }
    }

    /// The record of the search so far, or at its end.
    pub(super) fn record(&self, stopped_by: Stop, detail: &str) -> Search {
        Search {
            limits: self.0.plan().limits,
            stopped_by,
            detail: detail.to_string(),
            steps: self.0.steps().to_vec(),
            failed: None,
        }
    }

    pub(super) fn count_mode(&self) -> bool {
        self.0.plan().count_mode
    }

    /// MemAvailable at the last step, in MiB; before the first copy, at the start.
    pub(super) fn avail_mib(&self) -> u64 {
        self.0
            .steps()
            .last()
            .map_or(self.0.plan().avail_before_kib, |s| s.mem_available_kib)
            / 1024
    }
}
