//! `compare.json`: one `vm-compare` run's columns side by side, one per arm it ran: the
//! shared-OS design (N CRIU copies of one tree in one guest, the density gate's figures), the
//! VM-each design (N copies of a whole guest saved with the tree up, each a QEMU of its own) and
//! the templated VM design (the same, each clone mapping one template's RAM file copy-on-write),
//! and the one verdict on it ([`judge`]). Every figure sits beside the report it came from; a
//! column whose copies do not hold their state carries no figures, only its problems.
//!
//! [`read`] reads a comparison directory back (`show`, `diff`) and judges it again from its
//! reports.

mod checks;
pub mod read;

pub use checks::judge;

use super::reader::ReportDir;
use super::verdict::{self, How, Outcome, Refused};
use serde::{Deserialize, Serialize};
use sharedos_report::model::density::{DensityData, GuestKsm, Limits, Mem, SearchStep, Stop};
use sharedos_report::procfs::QemuMem;
use sharedos_report::report::{Copies, GateName, Status, Verdict, RESET_RESTORE_MS};
use std::path::Path;

/// The summary beside the column directories.
pub const COMPARE_FILE: &str = "compare.json";
/// compare.json's format; a reader refuses another. 2: each copy is bound to its save by the
/// fork-time token (`fork_token`), and the further readings (`ksm`, `reclaim`) are recorded.
/// 3: each copy's resume is recorded by the nonce the host gave it (`VmCopy::nonce`), so that
/// one report cannot stand for two copies. 4: the arms run are named (`arms`), and the
/// templated VM arm (`vm_template`) may be among them. 5: a comparison may search for the
/// most copies each arm holds (`max`, each column's `search`). A reader takes 3 and 4 as well:
/// 3's arms are the CRIU and the VM-each ones, and neither searched.
pub const FORMAT: u32 = 5;

/// The designs a comparison can put side by side (`--arms`).
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, clap::ValueEnum,
)]
#[serde(rename_all = "kebab-case")]
pub enum Arm {
    /// The shared-OS design: N CRIU copies of one tree in one guest (`shared_os`).
    Criu,
    /// A VM each: N QEMUs resumed from one save, each reading the whole RAM image into memory
    /// of its own (`vm_each`).
    Vm,
    /// A VM each from a template: the saved guest's RAM is a file on the host's tmpfs that
    /// every clone maps private, so a clone pays only for the pages it writes (`vm_template`).
    VmTemplate,
}

impl Arm {
    pub const ALL: [Arm; 3] = [Arm::Criu, Arm::Vm, Arm::VmTemplate];

    /// As `--arms` and compare.json spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Arm::Criu => "criu",
            Arm::Vm => "vm",
            Arm::VmTemplate => "vm-template",
        }
    }

    /// The arm's column as problems and warnings name it.
    pub fn column(self) -> &'static str {
        match self {
            Arm::Criu => "shared-OS",
            Arm::Vm => "VM-each",
            Arm::VmTemplate => "VM-template",
        }
    }
}

/// The arms of a comparison written before they were named (format 3).
fn format_3_arms() -> Vec<Arm> {
    vec![Arm::Criu, Arm::Vm]
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Summary {
    pub format: u32,
    pub image: String,
    /// The accelerator both columns ran under: under TCG the ratios are the result, the
    /// absolute times are not.
    pub accel: String,
    /// The copies each column ran at once; with `max`, the cap of each arm's search.
    pub copies: u32,
    /// `--copies max`: each arm searched upward, one copy at a time, for the most it holds,
    /// and its column's `search` says what stopped it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub max: bool,
    /// What the tree ran in both columns (`--workload`); None: the default, the xterm.
    #[serde(default)]
    pub workload: Option<String>,
    /// The arms this comparison ran, in `Arm`'s order; a column of an arm not among them was
    /// not run and is not judged.
    #[serde(default = "format_3_arms")]
    pub arms: Vec<Arm>,
    pub shared_os: SharedOs,
    pub vm_each: VmEach,
    /// The templated VM arm: the same column as `vm_each`, its copies cloned from a template
    /// whose RAM they map copy-on-write (`VmEach::template` says how).
    #[serde(default)]
    pub vm_template: Option<VmEach>,
    pub verdict: Verdict,
    /// Why the verdict is not PASS, column by column.
    pub problems: Vec<String>,
}

impl Summary {
    /// What each column was asked for: N copies, or the most it holds.
    pub fn requested(&self) -> Copies {
        if self.max {
            Copies::Max
        } else {
            Copies::Count(self.copies)
        }
    }

    /// The most copies any column it ran holds: N, or with `max` the furthest search.
    pub fn widest(&self) -> u32 {
        if !self.max {
            return self.copies;
        }
        let mut n = if self.ran(Arm::Criu) {
            self.shared_os.per_copy.len()
        } else {
            0
        };
        for (_, c) in self.vm_columns() {
            n = n.max(c.copies.len());
        }
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// How many copies each column ran, as a page says it.
    pub fn copies_said(&self) -> String {
        if self.max {
            format!(
                "the most copies each arm holds (--copies max, up to {})",
                self.copies
            )
        } else {
            format!("{} copies each", self.copies)
        }
    }

    /// Whether the comparison ran `arm`: a column of an arm it did not run is neither judged
    /// nor shown.
    pub fn ran(&self, arm: Arm) -> bool {
        self.arms.contains(&arm)
    }

    /// The VM columns of the arms it ran that it has, in `Arm`'s order: the VM-each arm's,
    /// then the templated one's.
    pub fn vm_columns(&self) -> Vec<(Arm, &VmEach)> {
        let mut v = Vec::new();
        if self.ran(Arm::Vm) {
            v.push((Arm::Vm, &self.vm_each));
        }
        if let (true, Some(t)) = (self.ran(Arm::VmTemplate), &self.vm_template) {
            v.push((Arm::VmTemplate, t));
        }
        v
    }
}

/// The shared-OS column: a vm-run with `--copies N`, its density gate's figures.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct SharedOs {
    /// The vm-run's report directory, relative to the compare directory.
    pub report: String,
    pub restore_ms: Vec<u64>,
    pub per_copy: Vec<Mem>,
    /// The guest's memory in use, before the first restore and with every copy up (KiB).
    pub guest_used_before_kib: u64,
    pub guest_used_with_copies_kib: u64,
    /// The resets the guest timed (ms): each copy's, ended and restored again from the dump by
    /// the density gate once all were measured (`DensityData::reset_ms`); from a gate binary
    /// older than those, the one its reset gate timed. Empty unless the gate timing them passed.
    #[serde(default)]
    pub reset_ms: Vec<u64>,
    /// What each copy had: the guest's whole memory and CPUs, shared.
    pub resources: String,
    /// Every copy read again with the guest's KSM merging their pages (`--guest-ksm`), as the
    /// guest read it (`DensityData::guest_ksm`).
    #[serde(default)]
    pub ksm: Reading,
    /// `max`: the density gate's search, as its report records it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<Search>,
    pub problems: Vec<String>,
}

/// `--copies max`: how one arm's search for the most copies went. Before each further copy the
/// search read where it stood (a step) and stopped at the first bound met or at a copy that
/// failed: the one rule of `sharedos_report::model::density::stop_before_next`, the guest's
/// MemAvailable for the CRIU copies, the host's for the VMs.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Search {
    pub limits: Limits,
    pub stopped_by: Stop,
    /// What the search saw when it stopped.
    pub detail: String,
    /// Where it stood before each further copy, and at its stop: copies_up 0, 1, 2 ...
    pub steps: Vec<SearchStep>,
    /// A VM arm's copy whose failure to come up stopped the search, archived as far as it got;
    /// not among the copies counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<VmCopy>,
}

/// The VM-each column: one guest saved with its tree up, resumed N times as N QEMUs at once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct VmEach {
    /// The saved guest's console and QEMU log, relative to the compare directory.
    pub fork: String,
    pub state_bytes: u64,
    pub state_sha256: String,
    /// The app's token when the guest was saved, as that guest recorded it; each copy's
    /// fork-time token must be this one.
    #[serde(default)]
    pub fork_token: String,
    /// A fault put into the column on purpose (`--lie`), said here so that no one takes its
    /// FAIL for a finding.
    #[serde(default)]
    pub lie: Option<String>,
    pub save_ms: u64,
    pub copies: Vec<VmCopy>,
    /// The first copy put back to the fork: its QEMU ended, a fresh one resumed from the save.
    pub reset: Option<VmCopy>,
    pub memory_mib: u64,
    pub cpus: u32,
    /// How `memory_mib` and `cpus` were chosen: matched to a CRIU copy's cgroup, or not.
    #[serde(default)]
    pub resources: String,
    /// The QEMU of the guest the fork is made in, read by the host just after it resumed from
    /// the image's snapshot and before its tree started: what a VM costs running nothing of the
    /// desktop, so that what a desktop adds can be told from what the VM itself costs.
    pub idle_guest: Option<Mem>,
    /// Where the memory figures come from.
    pub memory_source: String,
    /// Every copy read again with the host's KSM merging their pages.
    #[serde(default)]
    pub ksm: Reading,
    /// Every copy read again after its guest dropped its caches and handed its free pages back
    /// (free page reporting through virtio-balloon).
    #[serde(default)]
    pub reclaim: Reading,
    /// The templated arm's template: None in the VM-each arm.
    #[serde(default)]
    pub template: Option<TemplateRam>,
    /// `max`: the host's search for the most copies of this arm.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search: Option<Search>,
    pub problems: Vec<String>,
}

/// The RAM file a templated arm's clones map: the host's own figures, which no report holds.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct TemplateRam {
    /// The file's size: the guest's whole memory.
    pub bytes: u64,
    /// What of it the host holds in memory (its tmpfs blocks), read with the copies' memory.
    /// The clones' PSS counts only the pages they map, shared among them; the rest of the
    /// file is a cost no clone's figure shows, so a desktop's share of the host's memory is
    /// the clones' private pages plus this, over N.
    pub resident_bytes: u64,
    /// Where the file lived and how each clone maps it.
    pub how: String,
    /// The QEMU features the arm needed, as QEMU names them.
    pub features: Vec<String>,
    /// What the arm keeps off, and why (free page reporting and the balloon).
    pub off: Vec<String>,
}

/// A further reading of every copy's QEMU, taken after something was done to all of them.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Reading {
    /// PASS: every copy was read after it; NOT_RUN: not done, `reason` says why; FAIL: tried,
    /// and it failed.
    pub status: Status,
    pub reason: String,
    /// What was done before the reading.
    pub how: String,
    /// Each copy's QEMU, in the column's order.
    pub per_copy: Vec<Mem>,
    /// From the first step to the last copy read.
    pub took_ms: u64,
    /// What else was seen (KSM's own counters, the host's setting before).
    pub notes: Vec<String>,
}

impl Default for Reading {
    fn default() -> Self {
        Reading::not_run("not measured")
    }
}

impl Reading {
    pub fn not_run(reason: impl Into<String>) -> Reading {
        Reading {
            status: Status::NotRun,
            reason: reason.into(),
            how: String::new(),
            per_copy: Vec::new(),
            took_ms: 0,
            notes: Vec::new(),
        }
    }

    pub fn failed(how: impl Into<String>, reason: impl Into<String>) -> Reading {
        Reading {
            status: Status::Fail,
            how: how.into(),
            ..Reading::not_run(reason)
        }
    }
}

/// One resumed copy of the saved guest.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
pub struct VmCopy {
    pub label: String,
    /// Its report directory, relative to the compare directory.
    pub report: String,
    /// The nonce the host made for this copy's resume and its guest echoed back: the host's
    /// record of that resume, which the copy's report must carry. Empty when it did not come up.
    #[serde(default)]
    pub nonce: String,
    /// The MAC address the host gave this copy with its go (`compare::fork::copy_mac`); its
    /// report's `fork_own_mac` must have seen it. Empty when the host gave none.
    #[serde(default)]
    pub mac: String,
    /// From its QEMU's start to the copy's guest answering over SSH with this copy's key.
    pub resume_ms: u64,
    /// Its QEMU process, read by the host with every copy up and the tree idle; None when the
    /// read failed (the error is among the problems).
    pub host_mem: Option<Mem>,
    /// The same QEMU's memory by what holds it (`/proc/PID/smaps`, read with `host_mem`): the
    /// guest's RAM, TCG's translation cache, QEMU's own. None when it did not read.
    #[serde(default)]
    pub host_split: Option<QemuMem>,
    /// What keeps this copy from counting (`verdict::vm_fork_copy_problems`).
    pub problems: Vec<String>,
}

/// The shared-OS column's figures and problems from its judged vm-run report: the density gate
/// must PASS with the copies asked for up (with `max`, the copies its search reached), and the
/// judgement find nothing wrong.
pub fn shared_os_column(o: &Outcome, requested: Copies) -> SharedOs {
    let mut c = SharedOs {
        problems: o.problems(),
        resources: "the guest's memory and CPUs, shared by every copy (no --cgroup)".into(),
        ..SharedOs::default()
    };
    let Some(g) = o.gates.iter().find(|g| g.name == GateName::Density) else {
        c.problems.push("the report has no density gate".into());
        return c;
    };
    if g.status != Status::Pass {
        c.problems
            .push(format!("density is {}: {}", g.status, g.reason));
    }
    match g
        .data
        .get("density")
        .map(|v| serde_json::from_value::<DensityData>(v.clone()))
    {
        Some(Ok(d))
            if d.requested == requested
                && d.per_copy.len() == d.copies as usize
                && (requested == Copies::Max || requested == Copies::Count(d.copies)) =>
        {
            let copies = d.copies;
            if requested == Copies::Max {
                c.search = Some(Search {
                    limits: d.limits,
                    stopped_by: d.stopped_by,
                    detail: d.stop_detail.clone(),
                    steps: d.steps.clone(),
                    failed: None,
                });
            }
            c.problems.extend(distinct_copy_problems(&d));
            match (d.reset_ms.len(), criu_reset(o)) {
                (0, Ok(ms)) => c.reset_ms = vec![ms],
                (0, Err(p)) => c.problems.push(p),
                (n, _) if n == copies as usize => c.reset_ms = d.reset_ms.clone(),
                (n, _) => c.problems.push(format!(
                    "the density gate timed {n} resets of its {copies} copies"
                )),
            }
            c.ksm = guest_ksm_reading(d.guest_ksm.as_ref());
            match c.ksm.status {
                Status::NotRun => {}
                Status::Pass if c.ksm.per_copy.len() == copies as usize => {}
                Status::Pass => c.problems.push(format!(
                    "the guest KSM reading has {} copies, not {copies}",
                    c.ksm.per_copy.len()
                )),
                _ => c.problems.push(format!(
                    "the guest KSM reading is {}: {}",
                    c.ksm.status, c.ksm.reason
                )),
            }
            c.restore_ms = d.restore_ms;
            c.per_copy = d.per_copy.iter().map(|m| m.mem).collect();
            c.guest_used_before_kib = d.mem_used_before_kib;
            c.guest_used_with_copies_kib = d.mem_used_with_copies_kib;
        }
        Some(Ok(d)) => c.problems.push(format!(
            "the density gate had {} copies up ({} measured) for --copies {}, not --copies {requested}",
            d.copies,
            d.per_copy.len(),
            d.requested
        )),
        Some(Err(e)) => c
            .problems
            .push(format!("the density figures do not read: {e}")),
        None => c
            .problems
            .push("the density gate recorded no figures".into()),
    }
    c
}

/// What the shared-OS column shows of the guest's KSM reading: the guest's figures and words,
/// as a VM column's further readings are shown.
fn guest_ksm_reading(k: Option<&GuestKsm>) -> Reading {
    let Some(k) = k else {
        return Reading::not_run("not asked for (the density gate ran without --guest-ksm)");
    };
    Reading {
        status: k.status,
        reason: k.reason.clone(),
        how: "in the guest: the copies opted in to KSM (prctl PR_SET_MEMORY_MERGE, inherited through criu restore), ksmd at full pace, each copy read after every further full scan until two readings in a row agreed within 10% (within a bound)".into(),
        per_copy: k.per_copy.iter().map(|c| c.mem).collect(),
        took_ms: k.took_ms,
        notes: match k.status {
            Status::Pass => vec![
                format!(
                    "guest ksmd: {} pages shared, {} more pages sharing them, after {} full scans",
                    k.pages_shared, k.pages_sharing, k.full_scans
                ),
                if k.steady {
                    "steady: two readings one full scan apart agreed within 10%".into()
                } else {
                    "not steady within its bound: the last reading is shown".into()
                },
            ],
            _ => Vec::new(),
        },
    }
}

/// The CRIU reset of a judged report: the time its reset gate's restore took, as the guest timed
/// it, counted only when that gate passed (its checks judged again by the host: the reset copy
/// back at the dump-time state), as a VM reset counts only when its copy holds. Err: why not.
fn criu_reset(o: &Outcome) -> Result<u64, String> {
    let Some(g) = o.gates.iter().find(|g| g.name == GateName::Reset) else {
        return Err("the report has no reset gate".into());
    };
    if g.status != Status::Pass {
        return Err(format!("reset is {}: {}", g.status, g.reason));
    }
    g.data
        .get(RESET_RESTORE_MS)
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| "the reset gate recorded no restore time".into())
}

/// Whether the density gate's copies are as many distinct restores as it says: each copy its
/// own label and its own process (the PID 1 its restore wrote, all up at once in one guest, so
/// two copies with one PID are one restore counted twice), each restore timed.
fn distinct_copy_problems(d: &DensityData) -> Vec<String> {
    let mut p = Vec::new();
    for (i, c) in d.per_copy.iter().enumerate() {
        let before = &d.per_copy[..i];
        if c.pid <= 0 {
            p.push(format!("{}'s pid is {}, no process", c.label, c.pid));
        } else if let Some(first) = before.iter().find(|o| o.pid == c.pid) {
            p.push(format!(
                "{} and {} are one process (pid {}): one restore counted twice",
                first.label, c.label, c.pid
            ));
        }
        if before.iter().any(|o| o.label == c.label) {
            p.push(format!("two copies are labelled {}", c.label));
        }
    }
    if d.restore_ms.len() != d.per_copy.len() {
        p.push(format!(
            "the density gate timed {} restores for {} copies",
            d.restore_ms.len(),
            d.per_copy.len()
        ));
    }
    p
}

/// The save a copy must have been resumed from, as the host recorded it when it saved the guest.
#[derive(Debug, Clone, Copy)]
pub struct Origin<'a> {
    /// The app's token at the fork, as the saved guest recorded it.
    pub token: &'a str,
    /// The saved state's sha256.
    pub state_sha256: &'a str,
}

impl VmEach {
    pub fn origin(&self) -> Origin<'_> {
        Origin {
            token: &self.fork_token,
            state_sha256: &self.state_sha256,
        }
    }
}

/// A copy's problems from its archived report, judged by the one verdict, the copy bound to
/// the save it must have been resumed from and to the resume the host made (`nonce`, the
/// host's record of it).
pub fn vm_copy_problems(dir: &Path, origin: Origin, nonce: &str, mac: &str) -> Vec<String> {
    copy_problems(&verdict::judge(dir, &How::full(None)), origin, nonce, mac)
}

/// [`vm_copy_problems`] of a report directory already opened (reached beneath a comparison
/// without following a link), with the judgement it came from when there is one.
pub fn vm_copy_judged(
    dir: ReportDir,
    how: &How,
    origin: Origin,
    nonce: &str,
    mac: &str,
) -> (Vec<String>, Option<Outcome>) {
    let judged = verdict::judge_dir(dir, how);
    (copy_problems(&judged, origin, nonce, mac), judged.ok())
}

fn copy_problems(
    judged: &Result<Outcome, Refused>,
    origin: Origin,
    nonce: &str,
    mac: &str,
) -> Vec<String> {
    match judged {
        Ok(o) => {
            let mut p = verdict::vm_fork_copy_problems(o, origin.token);
            p.extend(fork_origin_problem(o, origin.state_sha256));
            p.extend(resume_problem(o, nonce));
            p.extend(mac_problem(o, mac));
            p
        }
        Err(e) => vec![format!("its report does not read back: {e}")],
    }
}

/// Whether a copy's report saw the MAC the host gave it (`recorded`): a copy that kept the
/// saved guest's, or took another's, is not a machine of its own. The copy's `fork_own_mac`
/// missing or failing is `vm_fork_copy_problems`'s to say.
pub fn mac_problem(o: &Outcome, recorded: &str) -> Option<String> {
    let seen = o
        .gates
        .iter()
        .find(|g| g.name == sharedos_report::report::GateName::LiveStateProbe)
        .and_then(|g| g.check("fork_own_mac"))
        .and_then(|c| c.value.get("seen"))
        .and_then(|v| v.as_str())?;
    if recorded.is_empty() {
        return Some("the host's record gives it no MAC of its own".into());
    }
    (seen != recorded).then(|| {
        format!(
            "its card's MAC is {}, not the {recorded} the host gave it",
            crate::escape::line(seen)
        )
    })
}

/// The nonce of the resume a judged report records, when its guest echoed it back: what only
/// that resume can have (every copy of one save is the same machine up to the save, boot id
/// and all).
pub fn resume_nonce(o: &Outcome) -> Option<&str> {
    let start = o.report.vm.as_ref()?.start.as_ref()?;
    match (&start.nonce, &start.nonce_echo) {
        (Some(n), Some(e)) if n == e && !n.is_empty() => Some(n),
        _ => None,
    }
}

/// Whether a copy's judged report is of the resume the host recorded for it (`recorded`, the
/// nonce it gave that resume): a report copied from another copy, or from another resume of the
/// same save, passes every check its guest made, and only this binding tells it apart. An empty
/// `recorded` is [`judge`]'s to report.
pub fn resume_problem(o: &Outcome, recorded: &str) -> Option<String> {
    let start = o.report.vm.as_ref().and_then(|v| v.start.as_ref());
    let Some(nonce) = start.and_then(|s| s.nonce.as_deref()) else {
        return Some("its report records no nonce of its resume".into());
    };
    let echo = start.and_then(|s| s.nonce_echo.as_deref()).unwrap_or("");
    if resume_nonce(o).is_none() {
        return Some(format!(
            "its guest echoed {}, not the nonce its host gave ({nonce})",
            if echo.is_empty() { "nothing" } else { echo }
        ));
    }
    (!recorded.is_empty() && nonce != recorded).then(|| {
        format!(
            "its report is of the resume with nonce {nonce}, not the one the host recorded for it \
             ({recorded})"
        )
    })
}

/// Whether a copy's judged report says it was resumed from the fork whose state hashes to
/// `state_sha256`: a copy resumed from another save (another comparison's, say) is not a copy
/// of this column, whatever its own checks say.
pub fn fork_origin_problem(o: &Outcome, state_sha256: &str) -> Option<String> {
    let start = o.report.vm.as_ref().and_then(|v| v.start.as_ref());
    let seen = start
        .filter(|s| s.how == "resumed")
        .and_then(|s| s.snapshot.as_ref())
        .map(|s| s.state_sha256.as_str());
    match seen {
        Some(h) if !state_sha256.is_empty() && h == state_sha256 => None,
        Some(h) => Some(format!(
            "its report says it resumed from the save {h}, not the column's fork {state_sha256}"
        )),
        None => Some("its report does not say it was resumed from a VM fork".into()),
    }
}
