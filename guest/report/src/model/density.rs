//! The density gate's figures as the report records them under `data.density`, the bounds
//! they were measured within, and the statistics the host draws from them.

use crate::report::Copies;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// The most copies either form restores (`--copies N` is refused above it).
pub const MAX_COPIES: u32 = 64;
/// Bound of the `max` search: within the host's bound on the whole gate phase under KVM (450 s) as
/// well as under TCG (1800 s), the other gates included.
pub const SEARCH_DEADLINE: Duration = Duration::from_secs(300);
/// The least MemAvailable the `max` search leaves the guest, in KiB: 128 MiB, or an eighth of
/// MemTotal when that is more, so sshd and the rig's own reads never meet the OOM killer.
pub fn reserve_kib(mem_total_kib: u64) -> u64 {
    (128 * 1024).max(mem_total_kib / 8)
}

/// Why the restoring stopped.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Stop {
    /// `--copies N`: N restores were made.
    Count,
    /// `max`: the hard cap was reached.
    Cap,
    /// `max`: another copy would take MemAvailable below the reserve.
    MemoryFloor,
    /// `max`: the search's deadline passed.
    Deadline,
    /// A restore failed.
    RestoreFailed,
    /// `max`: a restored copy did not answer with the dump-time state.
    NoAnswer,
}

impl Stop {
    /// Whether stopping here is a bound of the search rather than something that broke.
    pub fn is_bound(self) -> bool {
        matches!(
            self,
            Stop::Count | Stop::Cap | Stop::MemoryFloor | Stop::Deadline
        )
    }
}

/// What bounds the restoring.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Limits {
    pub cap: u32,
    /// None for `--copies N`, which restores N whatever memory is left.
    pub reserve_kib: Option<u64>,
    /// None for `--copies N`: each restore has its own step bound.
    #[serde(with = "opt_secs")]
    pub deadline: Option<Duration>,
}

impl Limits {
    pub fn for_request(req: Copies, mem_total_kib: u64) -> Limits {
        match req {
            Copies::Count(n) => Limits {
                cap: n.min(MAX_COPIES),
                reserve_kib: None,
                deadline: None,
            },
            Copies::Max => Limits {
                cap: MAX_COPIES,
                reserve_kib: Some(reserve_kib(mem_total_kib)),
                deadline: Some(SEARCH_DEADLINE),
            },
        }
    }
}

mod opt_secs {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;
    pub fn serialize<S: Serializer>(d: &Option<Duration>, s: S) -> Result<S::Ok, S::Error> {
        match d {
            Some(d) => s.serialize_some(&d.as_secs()),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Duration>, D::Error> {
        Ok(Option::<u64>::deserialize(d)?.map(Duration::from_secs))
    }
}

/// The memory of a process (or a sum of them) from smaps_rollup, in KiB.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Mem {
    pub rss_kib: u64,
    pub pss_kib: u64,
    /// Private_Clean + Private_Dirty: what ending the process would give back.
    pub uss_kib: u64,
}

impl Mem {
    pub fn add(&mut self, o: Mem) {
        self.rss_kib = self.rss_kib.saturating_add(o.rss_kib);
        self.pss_kib = self.pss_kib.saturating_add(o.pss_kib);
        self.uss_kib = self.uss_kib.saturating_add(o.uss_kib);
    }
}

/// Median of the values; the mean of the middle two for an even count.
pub fn median(xs: &[u64]) -> Option<f64> {
    let mut v = xs.to_vec();
    v.sort_unstable();
    let n = v.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(v[n / 2] as f64),
        _ => Some((v[n / 2 - 1] as f64 + v[n / 2] as f64) / 2.0),
    }
}

/// The 95th percentile by nearest rank: the smallest value at least 95 % of the values reach.
pub fn p95(xs: &[u64]) -> Option<u64> {
    let mut v = xs.to_vec();
    v.sort_unstable();
    let rank = (v.len() * 95).div_ceil(100);
    v.get(rank.checked_sub(1)?).copied()
}

/// One copy's memory: every process of its pid namespace, zombies aside (they map nothing).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CopyMem {
    pub label: String,
    pub pid: i32,
    pub processes: usize,
    pub mem: Mem,
    /// Processes whose smaps_rollup could not be read or parsed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

/// The raw figures, under `data.density`: the host reads them back to render the section.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct DensityData {
    pub requested: Copies,
    pub limits: Limits,
    /// Copies up at once when the restoring stopped.
    pub copies: u32,
    pub stopped_by: Stop,
    pub stop_detail: String,
    /// Each restore's latency (ms), in restore order, the failed one included.
    pub restore_ms: Vec<u64>,
    pub restore_ms_median: Option<f64>,
    pub restore_ms_p95: Option<u64>,
    /// Measured with every copy up.
    pub per_copy: Vec<CopyMem>,
    pub total: Mem,
    pub mem_total_kib: u64,
    /// MemTotal - MemAvailable before the first restore and with every copy up.
    pub mem_used_before_kib: u64,
    pub mem_used_with_copies_kib: u64,
    /// Copies of the earlier gates ended first, so that they do not count against this one.
    pub ended_before: Vec<String>,
    /// With `--copies N`, each copy's reset once all were measured: its tree ended and restored
    /// again from the dump, the others up (ms, in order). Empty when no reset ran, or any failed.
    #[serde(default)]
    pub reset_ms: Vec<u64>,
    /// With `--guest-ksm`: every copy read again with the guest's KSM merging the copies'
    /// pages. None when not asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guest_ksm: Option<GuestKsm>,
}

/// The copies read again with the guest's KSM merging their pages: the restored copies opted
/// in (`PR_SET_MEMORY_MERGE`, inherited from the restoring process), ksmd ran at full pace, and
/// each copy was read after every further full scan until two readings in a row agreed.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct GuestKsm {
    /// PASS: every copy read with ksmd merging; NOT_RUN: it could not be, `reason` says why (a
    /// kernel without the prctl); FAIL: tried, and it failed.
    pub status: crate::report::Status,
    pub reason: String,
    /// Each copy, in `per_copy`'s order, read last.
    pub per_copy: Vec<CopyMem>,
    /// ksmd's own counters at that last reading.
    pub pages_shared: u64,
    pub pages_sharing: u64,
    pub full_scans: u64,
    /// From turning ksmd on to the last reading (ms).
    pub took_ms: u64,
    /// Whether two readings in a row agreed within 10% before the bound.
    pub steady: bool,
}

/// Two readings of a settling figure agree when they differ by at most this share of the
/// larger (%): KSM's readings, the host's and the guest's, are taken as steady then.
pub const STEADY_PCT: u64 = 10;

/// Whether two readings agree within [`STEADY_PCT`].
pub fn steady(a: u64, b: u64) -> bool {
    let diff = u128::from(a.abs_diff(b));
    diff * 100 <= u128::from(STEADY_PCT) * u128::from(a.max(b))
}

impl GuestKsm {
    /// A reading not taken, and why.
    pub fn not_run(reason: impl Into<String>) -> GuestKsm {
        GuestKsm {
            status: crate::report::Status::NotRun,
            reason: reason.into(),
            per_copy: Vec::new(),
            pages_shared: 0,
            pages_sharing: 0,
            full_scans: 0,
            took_ms: 0,
            steady: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_p95() {
        assert_eq!(median(&[]), None);
        assert_eq!(p95(&[]), None);
        assert_eq!(median(&[7]), Some(7.0));
        assert_eq!(p95(&[7]), Some(7));
        assert_eq!(median(&[3, 1, 2]), Some(2.0));
        assert_eq!(median(&[4, 1, 3, 2]), Some(2.5));
        let hundred: Vec<u64> = (1..=100).rev().collect();
        assert_eq!(p95(&hundred), Some(95));
        assert_eq!(median(&hundred), Some(50.5));
        // 20 values: rank 19, not the maximum.
        let twenty: Vec<u64> = (1..=20).collect();
        assert_eq!(p95(&twenty), Some(19));
        // Few values: the p95 is the largest.
        assert_eq!(p95(&[3000, 3100, 9000]), Some(9000));
    }

    #[test]
    fn only_bounds_are_good_stops() {
        for s in [Stop::Count, Stop::Cap, Stop::MemoryFloor, Stop::Deadline] {
            assert!(s.is_bound(), "{s:?}");
        }
        assert!(!Stop::RestoreFailed.is_bound());
        assert!(!Stop::NoAnswer.is_bound());
    }

    #[test]
    fn readings_agree_within_ten_percent_of_the_larger() {
        assert!(steady(1000, 1000));
        assert!(steady(1000, 910));
        assert!(steady(910, 1000));
        assert!(!steady(1000, 890));
        assert!(steady(0, 0));
        assert!(!steady(0, 1));
        assert!(steady(u64::MAX, u64::MAX - 1));
    }

    #[test]
    fn the_figures_round_trip() {
        let d = DensityData {
            requested: Copies::Max,
            limits: Limits::for_request(Copies::Max, 1 << 20),
            copies: 2,
            stopped_by: Stop::MemoryFloor,
            stop_detail: "x".into(),
            restore_ms: vec![3000, 3200],
            restore_ms_median: median(&[3000, 3200]),
            restore_ms_p95: p95(&[3000, 3200]),
            per_copy: vec![],
            total: Mem::default(),
            mem_total_kib: 1 << 20,
            mem_used_before_kib: 100,
            mem_used_with_copies_kib: 200,
            ended_before: vec!["a".into()],
            reset_ms: vec![2800, 2900],
            guest_ksm: Some(GuestKsm::not_run("no prctl")),
        };
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["stopped_by"], "memory_floor");
        assert_eq!(v["limits"]["deadline"], 300);
        assert_eq!(serde_json::from_value::<DensityData>(v).unwrap(), d);
    }
}
