//! density (only with `--copies N|max`): how many copies of the dumped tree run at once on this
//! kernel, and at what restore latency. Every copy is restored from the one dump and kept up;
//! with all of them up each must still answer with the dump-time state, and the memory each
//! takes is read from its processes' smaps_rollup. The guest records raw numbers only: the
//! accelerator that shapes them is known to the host, which computes and labels the figures.
//!
//! `max` searches upward one copy at a time, keeping every copy up. Under TCG a restore costs
//! about 3 s, so the search must not restore anything twice: the largest N then costs exactly N
//! restores (plus one that fails, when one does). Bisection or doubling would kill and re-restore
//! whole sets of copies, O(N log N) restores, and a doubling step overshoots into the OOM killer
//! before any bound can stop it. Before each restore the search stops at the first bound met:
//! the cap, the deadline, or the memory floor (MemAvailable minus what the next copy is expected
//! to take, the larger of the largest PSS a copy has shown and the fall of MemAvailable per copy
//! so far, would be below the reserve). A restore that fails or a copy that does not
//! answer also ends it, and fails the gate: the floor exists so that the search stops before
//! anything breaks.

mod ksm;
mod reset;

use super::copies::{kill_step, restore_steps};
use super::step::Step;
use super::{Config, Ctx, GateBuilder};
use crate::probe::{self, TreeRecordExt};
use anyhow::Result;
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::model::density::{
    median, p95, CopyMem, DensityData, Mem, SearchPlan, SearchStep, Searching, Stop,
};
use sharedos_report::model::tree::{Observation, TreeRecord};
use sharedos_report::procfs::{parse_smaps_rollup, read_meminfo, read_proc};
use sharedos_report::report::{Check, Copies, Gate, GateName};
use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

fn copy_mem(ctx: &Ctx, label: &str, pid: i32) -> CopyMem {
    let mut c = CopyMem {
        label: label.to_string(),
        pid,
        processes: 0,
        mem: Mem::default(),
        errors: Vec::new(),
    };
    let ns: BTreeSet<String> = ctx
        .tree_record(pid)
        .and_then(|r| r.pidns.clone())
        .into_iter()
        .collect();
    if ns.is_empty() {
        c.errors.push(format!(
            "copy {label} (pid {pid}) has no recorded pid namespace"
        ));
        return c;
    }
    for m in probe::members(&ns).into_iter().filter(|m| m.state != "Z") {
        let path = format!("/proc/{}/smaps_rollup", m.pid);
        match read_proc(&path).and_then(|t| parse_smaps_rollup(&t)) {
            Ok(mem) => {
                c.processes += 1;
                c.mem.add(mem);
            }
            // A process that ended between the listing and the read is simply gone.
            Err(_) if !probe::is_live(m.pid) => {}
            Err(e) => c.errors.push(format!("{} ({}): {e:#}", m.pid, m.comm)),
        }
    }
    if c.processes == 0 && c.errors.is_empty() {
        c.errors.push(format!("copy {label} has no live process"));
    }
    c
}

/// What one copy answered while all were up.
pub struct Answer {
    label: String,
    token: Check,
    counter: Check,
    x_in_copy: Check,
    windows: Check,
}

fn ask_copy(ctx: &Ctx, label: &str, pid: i32, snap: &Observation) -> Answer {
    let app = ctx.app(pid, "get").map_err(|e| format!("{e:#}"));
    let (token, counter) = match &app {
        Ok(s) => (
            compare::same_token("same_token", &snap.app.token, &s.token),
            compare::counter_continues(
                "counter_continues",
                snap.app.counter,
                snap.app_asked_at.elapsed(),
                s.counter,
            ),
        ),
        Err(e) => (
            check("same_token", false, json!({"error": e}), "the app answers"),
            check(
                "counter_continues",
                false,
                json!({"error": e}),
                "the app answers",
            ),
        ),
    };
    let windows = match ctx.x(pid, "the copy's X windows", |c| c.mapped_toplevels()) {
        Ok(w) => compare::same_windows("same_windows", &snap.windows, &w),
        Err(e) => check(
            "same_windows",
            false,
            json!({"error": format!("{e:#}")}),
            "the copy's X server answers",
        ),
    };
    Answer {
        label: label.to_string(),
        token,
        counter,
        x_in_copy: ctx.check_x_server_in_tree("x_server_in_copy", pid),
        windows,
    }
}

impl Answer {
    fn ok(&self) -> bool {
        [&self.token, &self.counter, &self.x_in_copy, &self.windows]
            .iter()
            .all(|c| c.passed)
    }
}

/// One check over every copy: passes when there is at least one copy and each passed; the
/// value names the copies that did not, with what they showed.
pub fn all_of(name: &str, expected: &str, per_copy: &[(String, &Check)]) -> Check {
    let failed: Vec<serde_json::Value> = per_copy
        .iter()
        .filter(|(_, c)| !c.passed)
        .map(|(l, c)| json!({"copy": l, "seen": c.value, "expected": c.expected}))
        .collect();
    check(
        name,
        !per_copy.is_empty() && failed.is_empty(),
        json!({"copies": per_copy.len(), "failed": failed}),
        expected,
    )
}

/// What this gate runs: the earlier gates' copies ended, then one restore per copy, all kept
/// up, then every copy ended.
pub fn plan(cfg: &Config) -> Vec<Step> {
    let copies = cfg
        .options
        .copies
        .map_or_else(|| "N".to_string(), |c| c.to_string());
    let mut v = vec![kill_step(
        "each copy of the earlier gates",
        "SIGKILL to each copy the earlier gates left up (kill(2)): their memory would count against this gate's",
    )];
    v.extend(restore_steps(
        cfg,
        &cfg.planned_criu(),
        "density-1",
        &format!("restore copy density-1, then density-2 and on, all kept up (--copies {copies}); each copy's processes' /proc/PID/smaps_rollup and /proc/meminfo are read in-process"),
    ));
    if let Some(Copies::Count(_)) = cfg.options.copies {
        v.extend(restore_steps(
            cfg,
            &cfg.planned_criu(),
            "density-1",
            "reset: each copy in turn killed and restored again from the dump under its label, the others up, and asked for the dump-time state (with --copies N)",
        ));
    }
    v.push(kill_step(
        "each density copy",
        "SIGKILL to each density copy's PID 1 once all were measured (kill(2)); then wait until its pid namespace is empty",
    ));
    v
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Density);
    let Some(req) = ctx.cfg.options.copies else {
        g.problem("density runs only with --copies");
        return g.finish("");
    };
    let Some(snap) = ctx.snapshot.clone() else {
        g.problem("no dump-time state");
        return g.finish("");
    };
    let ended_before = match end_earlier_copies(ctx) {
        Ok(labels) => labels,
        Err(problem) => {
            g.problem(problem);
            return g.finish("");
        }
    };
    let plan = match read_meminfo() {
        Ok((total, avail)) => SearchPlan::new(req, ctx.cfg.options.max_copies, total, avail),
        Err(e) => {
            g.problem(format!("reading the guest's memory: {e:#}"));
            return g.finish("");
        }
    };
    // The copies opt in to the guest's KSM through what restores them: this process.
    let ksm_dir = Path::new(ksm::SYSFS);
    let opted = ctx.cfg.options.guest_ksm.then(|| ksm::opt_in(ksm_dir));
    let search = restore_copies(ctx, &mut g, &plan, &snap);
    if opted.is_some() {
        ksm::opt_out();
    }
    let measured = measure(ctx, &search.up, &snap);
    // ksmd over every copy: twice, then once more per reading until two agree; 20 s a copy
    // under TCG is far more than that takes.
    let guest_ksm = opted.map(|opted| {
        let copies = u64::try_from(search.up.len()).unwrap_or(u64::MAX);
        let bound = Duration::from_secs(60_u64.saturating_add(copies.saturating_mul(20)));
        ksm::reading(ctx, ksm_dir, &search.up, &opted, bound)
    });
    let fresh = fresh_checks(ctx, &search.up);
    for c in copy_checks(req, &search, &fresh, &measured) {
        g.check(c);
    }
    // Reset only a whole set that held: a copy already failing says nothing about a reset.
    let reset = match req {
        Copies::Count(_) if g.checks_passed() => {
            Some(reset::reset_copies(ctx, &mut g, &search.up, &snap))
        }
        _ => None,
    };
    let up = reset.as_ref().map_or(&search.up, |r| &r.up).clone();
    let reset_ms = match reset {
        Some(r) => {
            g.check(r.check);
            r.reset_ms
        }
        None => Vec::new(),
    };
    // Every copy ends here; cleanup looks again.
    g.check(end_copies(ctx, &up));
    let mut data = density_data(&plan, search, measured, ended_before);
    data.reset_ms = reset_ms;
    data.guest_ksm = guest_ksm;
    let reason = pass_reason(&data);
    match serde_json::to_value(&data) {
        Ok(v) => g.data("density", v),
        Err(e) => g.problem(format!("recording the figures: {e}")),
    }
    g.finish(&reason)
}

/// The earlier gates' copies would count against this gate's memory: they end first. Returns
/// their labels, or the problem that stops the gate.
fn end_earlier_copies(ctx: &mut Ctx) -> Result<Vec<String>, String> {
    let earlier: Vec<(String, i32)> = std::mem::take(&mut ctx.copies).into_iter().collect();
    let mut ended = Vec::new();
    for (label, pid) in earlier {
        // One tree may sit under two labels (a lying restore): it ends once.
        if ctx.tree_record(pid).is_none() {
            continue;
        }
        ctx.kill_tree(pid)
            .map_err(|e| format!("ending copy {label} of an earlier gate: {e:#}"))?;
        ended.push(label);
    }
    Ok(ended)
}

/// What the restoring did: the copies up (label, PID 1), each restore's time, and why it
/// stopped.
#[derive(Clone, Debug, PartialEq)]
pub struct Search {
    pub up: Vec<(String, i32)>,
    pub restore_ms: Vec<u64>,
    pub stop: Stop,
    pub detail: String,
    /// `max`: where the search stood before each restore, and when it stopped.
    pub steps: Vec<SearchStep>,
}

/// Restores one copy after another, keeping every copy up, until the plan says stop or a copy
/// fails: see the module's comment for why one at a time.
fn restore_copies(
    ctx: &mut Ctx,
    g: &mut GateBuilder,
    plan: &SearchPlan,
    snap: &Observation,
) -> Search {
    let mut search = Searching::new(*plan);
    let mut up: Vec<(String, i32)> = Vec::new();
    let mut restore_ms = Vec::new();
    let (stop, detail) = loop {
        let avail = match read_meminfo() {
            Ok((_, a)) => a,
            Err(e) => {
                // Without MemAvailable the floor cannot be kept: nothing more is restored.
                let detail = format!("reading /proc/meminfo before the next restore: {e:#}");
                g.problem(detail.clone());
                break (Stop::RestoreFailed, detail);
            }
        };
        if let Some(stop) = search.next(up.len(), avail) {
            break stop;
        }
        let label = format!("density-{}", up.len() + 1);
        let pid = match restore_one(ctx, g, &label, &mut restore_ms) {
            Ok(pid) => pid,
            Err(detail) => break (Stop::RestoreFailed, detail),
        };
        up.push((label.clone(), pid));
        let took = Duration::from_millis(restore_ms.last().copied().unwrap_or(0));
        if plan.count_mode {
            search.up(took, None);
        } else {
            match check_new_copy(ctx, &label, pid, snap) {
                Ok(pss) => search.up(took, Some(pss)),
                Err(detail) => break (Stop::NoAnswer, detail),
            }
            (ctx.cfg.progress)(&format!(
                "density: {} copies up, the last restored in {:.1} s, the largest PSS {} MiB; MemAvailable {} MiB before the last",
                up.len(),
                took.as_secs_f64(),
                search.largest_copy_pss_kib() / 1024,
                avail / 1024
            ));
        }
    };
    Search {
        up,
        restore_ms,
        stop,
        detail,
        steps: search.into_steps(),
    }
}

/// Restores copy `label`, timing it; its PID 1, or what went wrong.
fn restore_one(
    ctx: &mut Ctx,
    g: &mut GateBuilder,
    label: &str,
    restore_ms: &mut Vec<u64>,
) -> Result<i32, String> {
    let (pid, ev) = ctx.restore(label);
    restore_ms.push(ev.duration_ms);
    g.evidence(ev);
    if pid.is_err() {
        g.cause(ctx.cfg.restore_cause(label));
    }
    pid.map_err(|e| format!("restoring {label}: {e:#} (log: criu/restore-{label}.log)"))
}

/// In the search for the most copies, a new copy must answer with the dump-time state before
/// the next is restored; its PSS feeds the memory floor.
fn check_new_copy(ctx: &Ctx, label: &str, pid: i32, snap: &Observation) -> Result<u64, String> {
    if !ask_copy(ctx, label, pid, snap).ok() {
        return Err(format!("{label} did not answer with the dump-time state"));
    }
    Ok(copy_mem(ctx, label, pid).mem.pss_kib)
}

/// With every copy up: what each answers and what each takes.
pub struct Measured {
    pub answers: Vec<Answer>,
    pub mems: Vec<CopyMem>,
    pub total: Mem,
    /// MemTotal - MemAvailable with every copy up.
    pub used_with: Result<u64, String>,
}

fn measure(ctx: &Ctx, up: &[(String, i32)], snap: &Observation) -> Measured {
    let answers = up.iter().map(|(l, p)| ask_copy(ctx, l, *p, snap)).collect();
    let mems: Vec<CopyMem> = up.iter().map(|(l, p)| copy_mem(ctx, l, *p)).collect();
    let used_with = read_meminfo()
        .map(|(t, a)| t.saturating_sub(a))
        .map_err(|e| format!("{e:#}"));
    let mut total = Mem::default();
    for m in &mems {
        total.add(m.mem);
    }
    Measured {
        answers,
        mems,
        total,
        used_with,
    }
}

/// Each copy is a tree of its own: its own PID 1 and pid namespace, shared with no other
/// running tree.
fn fresh_checks(ctx: &Ctx, up: &[(String, i32)]) -> Vec<(String, Check)> {
    up.iter()
        .map(|(l, p)| {
            let others: Vec<TreeRecord> = ctx
                .trees
                .iter()
                .filter(|t| !t.ended && t.pid1_running() && t.pid != *p)
                .cloned()
                .collect();
            let c = match ctx.tree_record(*p) {
                Some(rec) => compare::fresh_copy("fresh", rec, &others),
                None => check("fresh", false, json!({"pid": p}), "a registered tree"),
            };
            (l.clone(), c)
        })
        .collect()
}

/// The gate's checks over every copy, from what the search did and what was measured.
pub fn copy_checks(
    req: Copies,
    search: &Search,
    fresh: &[(String, Check)],
    m: &Measured,
) -> Vec<Check> {
    let restored_ok = search.stop.is_bound() && !search.up.is_empty();
    let mut v = vec![check(
        "all_restored",
        restored_ok,
        json!({"requested": req, "restored": search.up.len(), "stopped_by": search.stop, "detail": search.detail}),
        &match req {
            Copies::Count(n) => format!("{n} copies restored, each PID 1 of its own pid namespace"),
            Copies::Max => "at least one copy, and the search stopped at a bound (cap, memory floor, deadline), not at a failed restore or a copy that did not answer".into(),
        },
    )];
    let fresh: Vec<(String, &Check)> = fresh.iter().map(|(l, c)| (l.clone(), c)).collect();
    v.push(all_of(
        "copies_distinct",
        "each copy its own PID 1 and pid namespace, shared with no other running tree",
        &fresh,
    ));
    type Pick = fn(&Answer) -> &Check;
    let per_answer: [(&str, &str, Pick); 4] = [
        (
            "all_same_token",
            "every copy's app answers the dump-time token",
            |a| &a.token,
        ),
        (
            "all_counters_continue",
            "every copy's counter continues from the dump-time value",
            |a| &a.counter,
        ),
        (
            "all_x_servers_in_copy",
            "every copy's display is served from inside that copy",
            |a| &a.x_in_copy,
        ),
        (
            "all_windows_as_dumped",
            "every copy's X server answers with the dump-time windows",
            |a| &a.windows,
        ),
    ];
    for (name, expected, f) in per_answer {
        let per: Vec<(String, &Check)> =
            m.answers.iter().map(|a| (a.label.clone(), f(a))).collect();
        v.push(all_of(name, expected, &per));
    }
    let mem_errors: Vec<&String> = m.mems.iter().flat_map(|c| &c.errors).collect();
    v.push(check(
        "memory_measured",
        !m.mems.is_empty() && mem_errors.is_empty() && m.used_with.is_ok(),
        json!({"copies": m.mems.len(), "errors": mem_errors, "meminfo": m.used_with}),
        "smaps_rollup of every process of every copy, and /proc/meminfo, read and parsed",
    ));
    v
}

/// Ends every copy and checks that each is gone as a whole.
fn end_copies(ctx: &mut Ctx, up: &[(String, i32)]) -> Check {
    let mut kill_errors = Vec::new();
    let mut ns = BTreeSet::new();
    for (l, p) in up {
        ns.extend(ctx.tree_record(*p).and_then(|r| r.pidns.clone()));
        if let Err(e) = ctx.kill_tree(*p) {
            kill_errors.push(format!("{l}: {e:#}"));
        }
        ctx.copies.remove(l);
    }
    let left = probe::members(&ns);
    check(
        "copies_killed",
        kill_errors.is_empty() && left.is_empty(),
        json!({"copies": up.len(), "errors": kill_errors, "left": left}),
        "every copy's PID 1 gone and its pid namespace empty",
    )
}

/// The figures the report keeps under `data.density`.
pub fn density_data(
    plan: &SearchPlan,
    search: Search,
    measured: Measured,
    ended_before: Vec<String>,
) -> DensityData {
    DensityData {
        requested: plan.requested,
        limits: plan.limits,
        copies: u32::try_from(search.up.len()).unwrap_or(u32::MAX),
        stopped_by: search.stop,
        stop_detail: search.detail,
        restore_ms_median: median(&search.restore_ms),
        restore_ms_p95: p95(&search.restore_ms),
        restore_ms: search.restore_ms,
        per_copy: measured.mems,
        total: measured.total,
        mem_total_kib: plan.mem_total_kib,
        mem_used_before_kib: plan.mem_total_kib.saturating_sub(plan.avail_before_kib),
        mem_used_with_copies_kib: measured.used_with.unwrap_or(0),
        ended_before,
        reset_ms: Vec::new(),
        guest_ksm: None,
        steps: search.steps,
    }
}

fn pass_reason(d: &DensityData) -> String {
    format!(
        "{} copies up at once from one dump (stopped: {}), each answering with the dump-time token, counter and windows{}; all killed",
        d.copies,
        serde_json::to_value(d.stopped_by).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
        if d.reset_ms.is_empty() {
            String::new()
        } else {
            format!(
                ", and again after each was reset (ended and restored from the dump, {} ms median)",
                median(&d.reset_ms).unwrap_or_default()
            )
        }
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1024;

    fn answer(label: &str, token_ok: bool) -> Answer {
        let c = |name: &str, ok: bool| check(name, ok, json!(null), "x");
        Answer {
            label: label.into(),
            token: c("same_token", token_ok),
            counter: c("counter_continues", true),
            x_in_copy: c("x_server_in_copy", true),
            windows: c("same_windows", true),
        }
    }

    fn measured(labels: &[&str]) -> Measured {
        Measured {
            answers: labels.iter().map(|l| answer(l, true)).collect(),
            mems: labels
                .iter()
                .map(|l| CopyMem {
                    label: l.to_string(),
                    pid: 7,
                    processes: 5,
                    mem: Mem {
                        rss_kib: 30 * MIB,
                        pss_kib: 20 * MIB,
                        uss_kib: 10 * MIB,
                    },
                    errors: vec![],
                })
                .collect(),
            total: Mem::default(),
            used_with: Ok(400 * MIB),
        }
    }

    fn failed(v: &[Check]) -> Vec<&str> {
        v.iter()
            .filter(|c| !c.passed)
            .map(|c| c.name.as_str())
            .collect()
    }

    #[test]
    fn the_copy_checks_fail_on_each_broken_fact() {
        let search = Search {
            up: vec![("density-1".into(), 10), ("density-2".into(), 11)],
            restore_ms: vec![300, 400],
            stop: Stop::Count,
            detail: String::new(),
            steps: Vec::new(),
        };
        let fresh: Vec<(String, Check)> = ["density-1", "density-2"]
            .iter()
            .map(|l| (l.to_string(), check("fresh", true, json!(null), "x")))
            .collect();
        let m = measured(&["density-1", "density-2"]);
        let all = copy_checks(Copies::Count(2), &search, &fresh, &m);
        let names: Vec<&str> = all.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "all_restored",
                "copies_distinct",
                "all_same_token",
                "all_counters_continue",
                "all_x_servers_in_copy",
                "all_windows_as_dumped",
                "memory_measured"
            ]
        );
        assert!(failed(&all).is_empty(), "{all:?}");

        let broke = Search {
            stop: Stop::RestoreFailed,
            ..search.clone()
        };
        assert_eq!(
            failed(&copy_checks(Copies::Count(2), &broke, &fresh, &m)),
            ["all_restored"]
        );
        let mut shared = fresh.clone();
        shared[1].1.passed = false;
        assert_eq!(
            failed(&copy_checks(Copies::Count(2), &search, &shared, &m)),
            ["copies_distinct"]
        );
        let mut wrong = measured(&["density-1", "density-2"]);
        wrong.answers[1] = answer("density-2", false);
        assert_eq!(
            failed(&copy_checks(Copies::Count(2), &search, &fresh, &wrong)),
            ["all_same_token"]
        );
        let mut unread = measured(&["density-1", "density-2"]);
        unread.mems[0].errors.push("42 (Xvfb): gone".into());
        assert_eq!(
            failed(&copy_checks(Copies::Count(2), &search, &fresh, &unread)),
            ["memory_measured"]
        );
        let mut no_meminfo = measured(&["density-1", "density-2"]);
        no_meminfo.used_with = Err("unreadable".into());
        assert_eq!(
            failed(&copy_checks(Copies::Count(2), &search, &fresh, &no_meminfo)),
            ["memory_measured"]
        );
        let none = Search {
            up: vec![],
            restore_ms: vec![],
            stop: Stop::MemoryFloor,
            detail: String::new(),
            steps: Vec::new(),
        };
        let f = copy_checks(Copies::Max, &none, &[], &measured(&[]));
        for name in [
            "all_restored",
            "copies_distinct",
            "all_same_token",
            "memory_measured",
        ] {
            assert!(
                failed(&f).contains(&name),
                "no copy must fail {name}: {f:?}"
            );
        }
    }

    #[test]
    fn the_figures_keep_what_was_measured() {
        let plan = SearchPlan::new(Copies::Max, None, 1024 * MIB, 900 * MIB);
        let search = Search {
            up: vec![("density-1".into(), 10), ("density-2".into(), 11)],
            restore_ms: vec![300, 500, 400],
            stop: Stop::RestoreFailed,
            detail: "restoring density-3: boom".into(),
            steps: Vec::new(),
        };
        let d = density_data(
            &plan,
            search,
            measured(&["density-1", "density-2"]),
            vec!["a".into()],
        );
        assert_eq!(d.copies, 2);
        assert_eq!(d.stopped_by, Stop::RestoreFailed);
        assert_eq!(d.restore_ms, [300, 500, 400]);
        assert_eq!(d.restore_ms_median, Some(400.0));
        assert_eq!(d.restore_ms_p95, Some(500));
        assert_eq!(d.mem_used_before_kib, 124 * MIB);
        assert_eq!(d.mem_used_with_copies_kib, 400 * MIB);
        assert_eq!(d.ended_before, ["a"]);
        assert!(pass_reason(&d)
            .starts_with("2 copies up at once from one dump (stopped: restore_failed)"));
    }

    #[test]
    fn one_copy_that_fails_fails_the_whole_check() {
        let good = check("same_token", true, json!("t"), "t");
        let bad = check("same_token", false, json!({"seen": "u"}), "t");
        let c = all_of(
            "all_same_token",
            "all",
            &[("d1".into(), &good), ("d2".into(), &bad)],
        );
        assert!(!c.passed);
        assert_eq!(c.value["failed"][0]["copy"], "d2");
        assert!(all_of("all_same_token", "all", &[("d1".into(), &good)]).passed);
        assert!(
            !all_of("all_same_token", "all", &[]).passed,
            "no copy is no pass"
        );
    }
}
