//! The density gate's figures as the report records them under `data.density`, the bounds
//! they were measured within, and the statistics the host draws from them.

use crate::report::Copies;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

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

/// `max`: a copy whose own restore (or a VM's resume) took longer than this stops the search:
/// past it, one more desktop is a wait no deployment would call a fork. Under TCG a restore
/// takes about 3 s and a VM's resume 2-4 s.
pub const COPY_BOUND: Duration = Duration::from_secs(60);

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
    /// `max`: the last copy took longer than the bound on one copy ([`COPY_BOUND`]).
    TooSlow,
}

impl Stop {
    /// Whether stopping here is a bound of the search rather than something that broke.
    pub fn is_bound(self) -> bool {
        matches!(
            self,
            Stop::Count | Stop::Cap | Stop::MemoryFloor | Stop::Deadline | Stop::TooSlow
        )
    }

    /// The limit as a page names it.
    pub fn said(self) -> &'static str {
        match self {
            Stop::Count => "the count asked for",
            Stop::Cap => "the cap on copies",
            Stop::MemoryFloor => "the memory floor",
            Stop::Deadline => "the search's deadline",
            Stop::RestoreFailed => "a restore or clone that failed",
            Stop::NoAnswer => "a copy that did not answer",
            Stop::TooSlow => "the bound on one copy's time",
        }
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
    /// `max`: the most one copy may take ([`COPY_BOUND`]); None for `--copies N`, and in a
    /// report from before the bound.
    #[serde(default, with = "opt_secs", skip_serializing_if = "Option::is_none")]
    pub copy_bound: Option<Duration>,
}

impl Limits {
    /// The bounds of a request on a machine of `mem_total_kib`; `max_copies` lowers the cap of
    /// a `max` search (`--max-copies`).
    pub fn for_request(req: Copies, mem_total_kib: u64, max_copies: Option<u32>) -> Limits {
        match req {
            Copies::Count(n) => Limits {
                cap: n.min(MAX_COPIES),
                reserve_kib: None,
                deadline: None,
                copy_bound: None,
            },
            Copies::Max => Limits {
                cap: max_copies.unwrap_or(MAX_COPIES).clamp(1, MAX_COPIES),
                reserve_kib: Some(reserve_kib(mem_total_kib)),
                deadline: Some(SEARCH_DEADLINE),
                copy_bound: Some(COPY_BOUND),
            },
        }
    }
}

/// Where a search stands before the next copy: the guest's restores and the host's VMs are
/// held to one rule ([`stop_before_next`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchState {
    pub copies_up: u32,
    pub elapsed: Duration,
    pub mem_available_kib: u64,
    /// The largest PSS one copy has shown so far; 0 before the first.
    pub largest_copy_pss_kib: u64,
    /// How far MemAvailable fell per copy so far; 0 before the first. It also counts what PSS
    /// does not: the kernel's own memory for each copy (page tables, sockets, namespaces).
    pub avail_drop_per_copy_kib: u64,
    /// What the last copy took to come up; zero before the first.
    pub last_copy: Duration,
}

impl SearchState {
    /// Where a search stands with `copies_up` copies up, MemAvailable having gone from
    /// `avail_before_kib` to `avail_kib`.
    pub fn new(
        copies_up: usize,
        elapsed: Duration,
        avail_before_kib: u64,
        avail_kib: u64,
        largest_copy_pss_kib: u64,
        last_copy: Duration,
    ) -> SearchState {
        SearchState {
            copies_up: u32::try_from(copies_up).unwrap_or(u32::MAX),
            elapsed,
            mem_available_kib: avail_kib,
            largest_copy_pss_kib,
            avail_drop_per_copy_kib: avail_before_kib.saturating_sub(avail_kib)
                / (copies_up as u64).max(1),
            last_copy,
        }
    }

    /// What the next copy is expected to take: the larger of the two per-copy measures.
    pub fn next_copy_kib(&self) -> u64 {
        self.largest_copy_pss_kib.max(self.avail_drop_per_copy_kib)
    }

    /// As the search records it, step by step.
    pub fn step(&self) -> SearchStep {
        SearchStep {
            copies_up: self.copies_up,
            elapsed_ms: crate::clock::millis(self.elapsed),
            mem_available_kib: self.mem_available_kib,
            last_copy_ms: crate::clock::millis(self.last_copy),
        }
    }

    /// What the search saw, for the line that says why it stopped.
    pub fn said(&self) -> String {
        format!(
            "{} copies up, {} s in, the last in {:.1} s, MemAvailable {} MiB, next copy estimated at {} MiB (largest copy PSS {} MiB, MemAvailable fell {} MiB per copy)",
            self.copies_up,
            self.elapsed.as_secs(),
            self.last_copy.as_secs_f64(),
            self.mem_available_kib / 1024,
            self.next_copy_kib() / 1024,
            self.largest_copy_pss_kib / 1024,
            self.avail_drop_per_copy_kib / 1024
        )
    }
}

/// How many copies to make: the bounds of the request, whether it only counts to a number, and
/// where memory stood before the first copy.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SearchPlan {
    pub requested: Copies,
    pub limits: Limits,
    /// `--copies N`: make N, asking and measuring each only once all are up.
    pub count_mode: bool,
    pub mem_total_kib: u64,
    pub avail_before_kib: u64,
}

impl SearchPlan {
    pub fn new(
        requested: Copies,
        max_copies: Option<u32>,
        mem_total_kib: u64,
        avail_before_kib: u64,
    ) -> SearchPlan {
        SearchPlan {
            requested,
            limits: Limits::for_request(requested, mem_total_kib, max_copies),
            count_mode: matches!(requested, Copies::Count(_)),
            mem_total_kib,
            avail_before_kib,
        }
    }

    /// Where the search stands with `copies_up` copies up and `avail_kib` MemAvailable.
    pub fn state(
        &self,
        copies_up: usize,
        elapsed: Duration,
        avail_kib: u64,
        largest_copy_pss_kib: u64,
        last_copy: Duration,
    ) -> SearchState {
        SearchState::new(
            copies_up,
            elapsed,
            self.avail_before_kib,
            avail_kib,
            largest_copy_pss_kib,
            last_copy,
        )
    }

    /// Whether to stop before the next copy: the bound met and what the search saw.
    pub fn decide(&self, s: &SearchState) -> Option<(Stop, String)> {
        let stop = stop_before_next(&self.limits, s, self.count_mode)?;
        let detail = if self.count_mode {
            format!(
                "{} copies restored as asked, {} s in",
                s.copies_up,
                s.elapsed.as_secs()
            )
        } else {
            s.said()
        };
        Some((stop, detail))
    }
}

/// A search under way: its plan, and what it has seen of the copies so far. The density gate's
/// restores and the host's VMs keep their count with it, so that both are held to one rule and
/// record their steps one way.
#[derive(Clone, Debug)]
pub struct Searching {
    plan: SearchPlan,
    started: Instant,
    largest_copy_pss_kib: u64,
    last_copy: Duration,
    steps: Vec<SearchStep>,
}

impl Searching {
    pub fn new(plan: SearchPlan) -> Searching {
        Searching {
            plan,
            started: Instant::now(),
            largest_copy_pss_kib: 0,
            last_copy: Duration::ZERO,
            steps: Vec::new(),
        }
    }

    /// Before copy `copies_up + 1`, with `avail_kib` MemAvailable: records the step (a
    /// search's; a count records none) and says whether to stop, and why.
    pub fn next(&mut self, copies_up: usize, avail_kib: u64) -> Option<(Stop, String)> {
        let state = self.plan.state(
            copies_up,
            self.started.elapsed(),
            avail_kib,
            self.largest_copy_pss_kib,
            self.last_copy,
        );
        if !self.plan.count_mode {
            self.steps.push(state.step());
        }
        self.plan.decide(&state)
    }

    /// A copy came up after `took`; its PSS, where it was read (a count reads none, and a
    /// copy whose read failed leaves the estimate of the next to MemAvailable's fall).
    pub fn up(&mut self, took: Duration, pss_kib: Option<u64>) {
        self.last_copy = took;
        self.largest_copy_pss_kib = self.largest_copy_pss_kib.max(pss_kib.unwrap_or(0));
    }

    pub fn plan(&self) -> &SearchPlan {
        &self.plan
    }

    pub fn largest_copy_pss_kib(&self) -> u64 {
        self.largest_copy_pss_kib
    }

    pub fn steps(&self) -> &[SearchStep] {
        &self.steps
    }

    pub fn into_steps(self) -> Vec<SearchStep> {
        self.steps
    }
}

/// The bound that forbids another copy, or None when one more may be made.
pub fn stop_before_next(limits: &Limits, s: &SearchState, count_mode: bool) -> Option<Stop> {
    if s.copies_up >= limits.cap {
        return Some(if count_mode { Stop::Count } else { Stop::Cap });
    }
    if limits.deadline.is_some_and(|d| s.elapsed >= d) {
        return Some(Stop::Deadline);
    }
    if limits.copy_bound.is_some_and(|b| s.last_copy > b) {
        return Some(Stop::TooSlow);
    }
    if let Some(reserve) = limits.reserve_kib {
        if s.mem_available_kib.saturating_sub(s.next_copy_kib()) < reserve {
            return Some(Stop::MemoryFloor);
        }
    }
    None
}

/// One step of a search, recorded before each further copy was decided on: what memory a page
/// draws against N comes from these.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SearchStep {
    pub copies_up: u32,
    pub elapsed_ms: u64,
    pub mem_available_kib: u64,
    pub last_copy_ms: u64,
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
    /// `max`: where the search stood before each restore and when it stopped, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<SearchStep>,
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

    fn state(up: u32, secs: u64, avail_mib: u64, pss_mib: u64) -> SearchState {
        SearchState {
            copies_up: up,
            elapsed: Duration::from_secs(secs),
            mem_available_kib: avail_mib * 1024,
            largest_copy_pss_kib: pss_mib * 1024,
            avail_drop_per_copy_kib: 0,
            last_copy: Duration::from_secs(3),
        }
    }

    #[test]
    fn the_max_search_stops_at_each_bound() {
        let l = Limits::for_request(Copies::Max, 1024 * 1024, None);
        assert_eq!(l.cap, MAX_COPIES);
        assert_eq!(l.reserve_kib, Some(128 * 1024));
        assert_eq!(stop_before_next(&l, &state(0, 0, 900, 0), false), None);
        assert_eq!(stop_before_next(&l, &state(5, 100, 900, 40), false), None);
        assert_eq!(
            stop_before_next(&l, &state(MAX_COPIES, 100, 900, 40), false),
            Some(Stop::Cap)
        );
        assert_eq!(
            stop_before_next(&l, &state(5, 300, 900, 40), false),
            Some(Stop::Deadline)
        );
        // 160 MiB left, a copy took 40: 120 would remain, under the 128 MiB reserve.
        assert_eq!(
            stop_before_next(&l, &state(9, 100, 160, 40), false),
            Some(Stop::MemoryFloor)
        );
        assert_eq!(stop_before_next(&l, &state(9, 100, 170, 40), false), None);
        // MemAvailable fell more per copy than PSS shows: the larger estimate holds the floor.
        let kernel_heavy = SearchState {
            avail_drop_per_copy_kib: 50 * 1024,
            ..state(9, 100, 170, 40)
        };
        assert_eq!(
            stop_before_next(&l, &kernel_heavy, false),
            Some(Stop::MemoryFloor)
        );
        // Even the first copy is refused on a guest already below the reserve.
        assert_eq!(
            stop_before_next(&l, &state(0, 0, 100, 0), false),
            Some(Stop::MemoryFloor)
        );
        // A copy slower than the bound stops the search, however much memory is left.
        let slow = SearchState {
            last_copy: COPY_BOUND + Duration::from_millis(1),
            ..state(5, 100, 900, 40)
        };
        assert_eq!(stop_before_next(&l, &slow, false), Some(Stop::TooSlow));
        // --max-copies lowers the cap, within 1 to the most there is.
        let capped = Limits::for_request(Copies::Max, 1024 * 1024, Some(3));
        assert_eq!(
            stop_before_next(&capped, &state(3, 10, 900, 40), false),
            Some(Stop::Cap)
        );
        assert_eq!(Limits::for_request(Copies::Max, 1, Some(0)).cap, 1);
        assert_eq!(
            Limits::for_request(Copies::Max, 1, Some(1000)).cap,
            MAX_COPIES
        );
        // A bigger guest keeps an eighth of itself.
        assert_eq!(reserve_kib(8 << 20), 1 << 20);
    }

    #[test]
    fn a_count_stops_only_at_its_count() {
        let l = Limits::for_request(Copies::Count(3), 1024 * 1024, None);
        assert_eq!(stop_before_next(&l, &state(2, 10_000, 1, 900), true), None);
        assert_eq!(
            stop_before_next(&l, &state(3, 0, 900, 0), true),
            Some(Stop::Count)
        );
    }

    const MIB: u64 = 1024;

    #[test]
    fn the_search_state_spreads_the_fall_of_memavailable_over_the_copies() {
        let plan = SearchPlan::new(Copies::Max, None, 1024 * MIB, 900 * MIB);
        assert!(!plan.count_mode);
        assert_eq!(
            plan.limits,
            Limits::for_request(Copies::Max, 1024 * MIB, None)
        );
        let first = plan.state(0, Duration::ZERO, 900 * MIB, 0, Duration::ZERO);
        assert_eq!(first.avail_drop_per_copy_kib, 0);
        let fourth = plan.state(
            4,
            Duration::from_secs(9),
            700 * MIB,
            30 * MIB,
            Duration::ZERO,
        );
        assert_eq!(fourth.copies_up, 4);
        assert_eq!(fourth.avail_drop_per_copy_kib, 50 * MIB);
        assert_eq!(fourth.next_copy_kib(), 50 * MIB, "the larger estimate");
        // Memory freed meanwhile is no negative fall.
        assert_eq!(
            plan.state(2, Duration::ZERO, 950 * MIB, 0, Duration::ZERO)
                .avail_drop_per_copy_kib,
            0
        );
    }

    #[test]
    fn the_decision_names_the_bound_and_what_the_search_saw() {
        let count = SearchPlan::new(Copies::Count(3), None, 1024 * MIB, 900 * MIB);
        assert!(count.count_mode);
        assert_eq!(
            count.decide(&count.state(2, Duration::ZERO, MIB, 0, Duration::ZERO)),
            None
        );
        assert_eq!(
            count.decide(&count.state(3, Duration::from_secs(12), MIB, 0, Duration::ZERO)),
            Some((Stop::Count, "3 copies restored as asked, 12 s in".into()))
        );
        let max = SearchPlan::new(Copies::Max, None, 1024 * MIB, 900 * MIB);
        let (stop, detail) = max
            .decide(&max.state(
                9,
                Duration::from_secs(100),
                160 * MIB,
                40 * MIB,
                Duration::ZERO,
            ))
            .unwrap();
        assert_eq!(stop, Stop::MemoryFloor);
        assert!(
            detail.starts_with("9 copies up, 100 s in, the last in 0.0 s, MemAvailable 160 MiB, next copy estimated at 82 MiB (largest copy PSS 40 MiB, MemAvailable fell 82 MiB per copy)"),
            "{detail}"
        );
    }

    #[test]
    fn only_bounds_are_good_stops() {
        for s in [
            Stop::Count,
            Stop::Cap,
            Stop::MemoryFloor,
            Stop::Deadline,
            Stop::TooSlow,
        ] {
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
            limits: Limits::for_request(Copies::Max, 1 << 20, None),
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
            steps: vec![SearchStep {
                copies_up: 1,
                elapsed_ms: 3000,
                mem_available_kib: 900,
                last_copy_ms: 3000,
            }],
        };
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(v["stopped_by"], "memory_floor");
        assert_eq!(v["limits"]["deadline"], 300);
        assert_eq!(serde_json::from_value::<DensityData>(v).unwrap(), d);
    }
}
