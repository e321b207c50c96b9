//! The one report schema. The guest writes it, the host extends it (`vm`) and reads it back
//! (review, verify, show, diff, list): both sides use these types and nothing else.

use crate::cause::{Cause, KernelOops};
use crate::fidelity::Difference;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

/// Bumped whenever a field changes meaning or disappears; readers refuse other versions.
/// Version 2: `fidelity_differences` lists keyed differences (`crate::fidelity`), not sentences.
pub const SCHEMA_VERSION: u32 = 2;

/// review.json's own version, apart from the report's: a review's fields did not change when
/// the report's did.
pub const REVIEW_SCHEMA_VERSION: u32 = 1;

/// File name of the report inside a report directory.
pub const REPORT_FILE: &str = "report.json";
/// The key of the reset gate's `data` that holds how long its restore of the reset copy took
/// (ms), as the guest timed it: the CRIU column's reset in a comparison.
pub const RESET_RESTORE_MS: &str = "restore_ms";

/// In a report archived by vm-run, the directory holding exactly what the guest sent, its own
/// report.json included; the host's report.json and evidence sit beside it.
pub const GUEST_DIR: &str = "guest";

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    Pass,
    Fail,
    NotRun,
    ReviewRequired,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Fail => "FAIL",
            Status::NotRun => "NOT_RUN",
            Status::ReviewRequired => "REVIEW_REQUIRED",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The ten gates, in their defined order, and the optional density gate in its place. The order
/// of the variants is the run order.
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum GateName {
    Prerequisites,
    Launch,
    LiveStateProbe,
    Dump,
    RestoreLiveProcess,
    RestoreXState,
    Isolation,
    Reset,
    /// Only in a run given `--copies`: it is not one of the ten.
    Density,
    GuiPixelReview,
    Cleanup,
}

impl GateName {
    pub const ALL: [GateName; 10] = [
        GateName::Prerequisites,
        GateName::Launch,
        GateName::LiveStateProbe,
        GateName::Dump,
        GateName::RestoreLiveProcess,
        GateName::RestoreXState,
        GateName::Isolation,
        GateName::Reset,
        GateName::GuiPixelReview,
        GateName::Cleanup,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GateName::Prerequisites => "prerequisites",
            GateName::Launch => "launch",
            GateName::LiveStateProbe => "live_state_probe",
            GateName::Dump => "dump",
            GateName::RestoreLiveProcess => "restore_live_process",
            GateName::RestoreXState => "restore_x_state",
            GateName::Isolation => "isolation",
            GateName::Reset => "reset",
            GateName::Density => "density",
            GateName::GuiPixelReview => "gui_pixel_review",
            GateName::Cleanup => "cleanup",
        }
    }

    /// The gates a run runs, in order: the ten, with density after reset when it was asked for.
    pub fn sequence(density: bool) -> Vec<GateName> {
        let mut v = GateName::ALL.to_vec();
        if density {
            let at = v
                .iter()
                .position(|g| *g == GateName::Reset)
                .map_or(v.len(), |i| i + 1);
            v.insert(at, GateName::Density);
        }
        v
    }

    /// True for the gates that need a working CRIU.
    pub fn needs_criu(self) -> bool {
        matches!(
            self,
            GateName::Dump
                | GateName::RestoreLiveProcess
                | GateName::RestoreXState
                | GateName::Isolation
                | GateName::Reset
                | GateName::Density
        )
    }
}

impl fmt::Display for GateName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One named check of a gate with the value it saw.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Check {
    pub name: String,
    pub passed: bool,
    /// What was observed (a number, a hash, a list of windows, ...).
    pub value: Value,
    /// What the check wanted, in words, so a failed check explains itself.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub expected: String,
}

/// One external command (or one probe) a gate ran, as it ran.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Evidence {
    /// What this step was for.
    pub step: String,
    /// The argv, exactly as executed; empty for in-process probes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub argv: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// Set when the process was ended by a signal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
    #[serde(default)]
    pub timed_out: bool,
    pub duration_ms: u64,
    /// The last lines of standard output.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stdout_tail: String,
    /// The last lines of standard error.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub stderr_tail: String,
    /// Free-form observation of an in-process probe.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Gate {
    pub name: GateName,
    pub status: Status,
    pub reason: String,
    pub duration_ms: u64,
    #[serde(default)]
    pub checks: Vec<Check>,
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// Gate-specific measurements (init pid, image size, pids of the copies, ...).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub data: BTreeMap<String, Value>,
    /// What the program the gate failed on said, quoted from its log (CRIU's first error and
    /// the lines before it): for display only, never read by a verdict.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cause: Option<Cause>,
}

impl Gate {
    pub fn new(name: GateName, status: Status, reason: impl Into<String>) -> Self {
        Gate {
            name,
            status,
            reason: reason.into(),
            duration_ms: 0,
            checks: Vec::new(),
            evidence: Vec::new(),
            data: BTreeMap::new(),
            cause: None,
        }
    }

    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }
}

/// Where the diagnostic ran, read on the machine that ran it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Environment {
    pub kernel_release: String,
    pub kernel_version: String,
    pub machine: String,
    pub hostname: String,
    pub boot_id: String,
    /// PRETTY_NAME of /etc/os-release.
    pub os: String,
    pub euid: u32,
    /// UTC, RFC 3339.
    pub started_at: String,
    pub finished_at: String,
    pub criu_version: Option<String>,
    pub xvfb_version: Option<String>,
    pub xterm_version: Option<String>,
    pub gate_version: String,
    /// The gate binary's own argv.
    pub command_line: Vec<String>,
}

/// A file the run wrote, relative to the report's directory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Artifact {
    pub path: String,
    pub sha256: String,
    pub bytes: u64,
    /// png, log, criu-log, criu-images, serial-log, ...
    pub kind: String,
}

/// The host's side of the provenance, added by `vm-run`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct VmProvenance {
    /// The accelerator that actually ran the guest: "kvm" or "tcg".
    pub accel: String,
    /// Why that accelerator: the probe's outcome in words.
    pub accel_reason: String,
    pub qemu_version: String,
    pub machine_type: String,
    pub cpu_model: String,
    pub memory_mib: u64,
    pub cpus: u32,
    pub qemu_argv: Vec<String>,
    pub host_os: String,
    pub host_kernel: String,
    pub host_hostname: String,
    pub image_name: String,
    pub image_sha256: String,
    pub image_lock_sha256: String,
    pub kernel_release_pinned: String,
    pub image_builder_mode: String,
    pub gate_binary_sha256: String,
    pub rig_version: String,
    pub rig_git_commit: String,
    pub command_line: Vec<String>,
    pub started_at: String,
    pub finished_at: String,
    /// Seconds per phase: image, boot_to_ssh, copy, gates, fetch.
    pub phases: Vec<Phase>,
    pub guest_mem_used_mib: Option<u64>,
    pub guest_mem_total_mib: Option<u64>,
    /// Set when the rig itself failed (exit 2): what went wrong and how to fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rig_error: Option<String>,
    /// A guest kernel oops the host read on the serial console, whether or not the kernel went
    /// on to panic: the host's own evidence, but the console is the guest's to write, so it is
    /// shown and never judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kernel_oops: Option<KernelOops>,
    /// How the guest came up: booted cold, or resumed from a snapshot (and which), and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start: Option<GuestStart>,
    /// The bound on TCG's translation cache (MiB) the QEMU line gave, read from it; None under
    /// KVM or with QEMU's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcg_tb_size_mib: Option<u64>,
}

/// How a session's guest came up. Every resume of one snapshot is the same machine up to the
/// moment it was saved, so a resumed run records the snapshot and a nonce of its own that the
/// guest echoed back after the resume.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct GuestStart {
    /// "cold" or "resumed".
    pub how: String,
    /// Why this way: `--cold`, or why a snapshot was made, remade or not used.
    pub reason: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<SnapshotRef>,
    /// The public half of this run's own client key, made fresh for it.
    #[serde(default)]
    pub client_key: String,
    /// Made fresh by the host for this run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce: Option<String>,
    /// What the resumed guest printed back for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nonce_echo: Option<String>,
    /// The host's time the guest clock was set to after the resume, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock_set_to: Option<String>,
    /// The resumed guest took fresh entropy from the host and reseeded its CRNG before anything
    /// of the run drew from it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rng_reseeded: bool,
}

/// A snapshot as a resumed run records it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct SnapshotRef {
    /// sha256 of the saved machine state, checked as it streamed into QEMU.
    pub state_sha256: String,
    /// sha256 of the disk overlay saved with it, checked before QEMU started.
    pub disk_sha256: String,
    /// sha256 of everything that decides it (see the rig's `vm::snapshot::Key`).
    pub key_sha256: String,
    /// When it was saved, RFC 3339.
    pub made_at: String,
    /// The host key the saved boot's init made and announced: which boot this was.
    pub boot_host_key: String,
    /// A layer's: the sha256 of the gate binary it holds (saved in the guest over its base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gate_sha256: Option<String>,
    /// A layer's: the state sha256 of the snapshot it was made over.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_state_sha256: Option<String>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Phase {
    pub name: String,
    pub duration_ms: u64,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Report {
    pub schema_version: u32,
    /// The random marker every process of the tree carried.
    pub marker: String,
    pub all_gates_pass: bool,
    /// 0 every gate passed, 3 only the human review is outstanding, 1 anything else.
    pub exit_code: i32,
    pub gates: Vec<Gate>,
    pub environment: Environment,
    pub artifacts: Vec<Artifact>,
    /// How this run differs from the runtime it stands in for, by key (`crate::fidelity`).
    pub fidelity_differences: Vec<Difference>,
    /// What `diagnose` was asked to do beyond the ten plain gates; absent in a plain run.
    #[serde(default, skip_serializing_if = "RunOptions::is_plain")]
    pub options: RunOptions,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vm: Option<VmProvenance>,
}

mod options;

pub use options::{parse_cgroup_limits, CgroupLimits, Copies, RunOptions, Workload, CPU_PERIOD_US};

impl Report {
    pub fn gate(&self, name: GateName) -> Option<&Gate> {
        self.gates.iter().find(|g| g.name == name)
    }

    pub fn gate_mut(&mut self, name: GateName) -> Option<&mut Gate> {
        self.gates.iter_mut().find(|g| g.name == name)
    }

    /// Inserts a gate where the run order puts it: before the first gate that runs after it.
    pub fn insert_gate(&mut self, g: Gate) {
        let at = self
            .gates
            .iter()
            .position(|x| x.name > g.name)
            .unwrap_or(self.gates.len());
        self.gates.insert(at, g);
    }

    /// Recomputes `all_gates_pass` and `exit_code` from the gates.
    pub fn seal(&mut self) {
        let v = verdict(&self.gates);
        self.all_gates_pass = v == Verdict::Pass;
        self.exit_code = v.exit_code();
    }

    /// Every quoted cause and oops cut to its bounds again: whoever wrote them may not have.
    pub fn bound_quotes(&mut self) {
        for g in &mut self.gates {
            g.cause = g.cause.take().map(Cause::bounded);
        }
        if let Some(vm) = &mut self.vm {
            vm.kernel_oops = vm.kernel_oops.take().map(KernelOops::bounded);
        }
    }

    /// The PNG artifacts a reviewer must cite.
    pub fn png_artifacts(&self) -> impl Iterator<Item = &Artifact> {
        self.artifacts.iter().filter(|a| a.kind == "png")
    }
}

/// The exit code, and the report's `exit_code`, of a vm-run whose rig itself failed (QEMU, boot,
/// SSH, fetch): not a verdict of the gates.
pub const RIG_FAILURE_EXIT: i32 = 2;

#[derive(Clone, Copy, PartialEq, Eq, Debug, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Verdict {
    /// Every gate PASS, the human review included.
    Pass,
    /// Every gate PASS but gui_pixel_review, which waits for a human.
    ReviewRequired,
    Fail,
}

impl Verdict {
    pub fn exit_code(self) -> i32 {
        match self {
            Verdict::Pass => 0,
            Verdict::ReviewRequired => 3,
            Verdict::Fail => 1,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::ReviewRequired => "REVIEW_REQUIRED",
            Verdict::Fail => "FAIL",
        }
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The verdict rules: PASS only when all ten gates are present and PASS (and the
/// density gate, when the report has one); REVIEW_REQUIRED when the only gate short of PASS is
/// the GUI review waiting for a human. Whether a density gate belongs in the report is the
/// report's options' to say: the host's verify holds the gate list against them.
pub fn verdict(gates: &[Gate]) -> Verdict {
    let expected = GateName::sequence(gates.iter().any(|g| g.name == GateName::Density));
    let all_present = expected
        .iter()
        .all(|n| gates.iter().filter(|g| g.name == *n).count() == 1);
    if !all_present || gates.len() != expected.len() {
        return Verdict::Fail;
    }
    let mut review_outstanding = false;
    for g in gates {
        match (g.name, g.status) {
            (_, Status::Pass) => {}
            (GateName::GuiPixelReview, Status::ReviewRequired) => review_outstanding = true,
            _ => return Verdict::Fail,
        }
    }
    if review_outstanding {
        Verdict::ReviewRequired
    } else {
        Verdict::Pass
    }
}

/// The human decision on the GUI gate, stored as `review.json` beside the report.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Review {
    pub schema_version: u32,
    pub decision: ReviewDecision,
    pub reviewer: String,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// UTC, RFC 3339.
    pub recorded_at: String,
    /// sha256 of report.json when the decision was recorded.
    pub report_sha256: String,
    /// Every PNG of the report with the sha256 the reviewer saw.
    pub images: Vec<CitedImage>,
}

pub const REVIEW_FILE: &str = "review.json";

#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug)]
#[serde(rename_all = "lowercase")]
pub enum ReviewDecision {
    Pass,
    Fail,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct CitedImage {
    pub path: String,
    pub sha256: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(status: Status) -> Vec<Gate> {
        GateName::ALL
            .iter()
            .map(|n| Gate::new(*n, status, "x"))
            .collect()
    }

    #[test]
    fn every_gate_pass_is_pass() {
        assert_eq!(verdict(&all(Status::Pass)), Verdict::Pass);
        assert_eq!(Verdict::Pass.exit_code(), 0);
    }

    #[test]
    fn only_review_outstanding_is_three() {
        let mut g = all(Status::Pass);
        g[8].status = Status::ReviewRequired;
        assert_eq!(verdict(&g), Verdict::ReviewRequired);
        assert_eq!(verdict(&g).exit_code(), 3);
    }

    #[test]
    fn not_run_is_never_pass() {
        for i in 0..10 {
            let mut g = all(Status::Pass);
            g[i].status = Status::NotRun;
            assert_eq!(verdict(&g), Verdict::Fail, "gate {i} NOT_RUN");
        }
    }

    #[test]
    fn review_required_elsewhere_fails() {
        let mut g = all(Status::Pass);
        g[3].status = Status::ReviewRequired;
        assert_eq!(verdict(&g), Verdict::Fail);
    }

    #[test]
    fn missing_or_duplicate_gate_fails() {
        let mut g = all(Status::Pass);
        g.pop();
        assert_eq!(verdict(&g), Verdict::Fail);
        let mut g = all(Status::Pass);
        g[9] = Gate::new(GateName::Launch, Status::Pass, "dup");
        assert_eq!(verdict(&g), Verdict::Fail);
    }

    #[test]
    fn names_serialize_as_the_spec_spells_them() {
        let names: Vec<String> = GateName::ALL
            .iter()
            .map(|n| {
                serde_json::to_value(n)
                    .unwrap()
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(
            names,
            [
                "prerequisites",
                "launch",
                "live_state_probe",
                "dump",
                "restore_live_process",
                "restore_x_state",
                "isolation",
                "reset",
                "gui_pixel_review",
                "cleanup"
            ]
        );
        for n in GateName::ALL {
            assert_eq!(serde_json::to_value(n).unwrap(), n.as_str());
        }
        assert_eq!(
            serde_json::to_value(Status::NotRun).unwrap(),
            "NOT_RUN".to_string()
        );
    }

    #[test]
    fn density_sits_after_reset_and_counts_in_the_verdict() {
        let seq = GateName::sequence(true);
        assert_eq!(seq.len(), 11);
        let at = seq.iter().position(|g| *g == GateName::Density).unwrap();
        assert_eq!(seq[at - 1], GateName::Reset);
        assert_eq!(seq[at + 1], GateName::GuiPixelReview);
        assert_eq!(GateName::sequence(false), GateName::ALL.to_vec());
        let mut g: Vec<Gate> = seq
            .iter()
            .map(|n| Gate::new(*n, Status::Pass, "x"))
            .collect();
        assert_eq!(verdict(&g), Verdict::Pass);
        g[at].status = Status::Fail;
        assert_eq!(verdict(&g), Verdict::Fail);
        g[at].status = Status::NotRun;
        assert_eq!(verdict(&g), Verdict::Fail);
        let mut twice = all(Status::Pass);
        twice.push(Gate::new(GateName::Density, Status::Pass, "x"));
        twice.push(Gate::new(GateName::Density, Status::Pass, "x"));
        assert_eq!(verdict(&twice), Verdict::Fail);
    }

    #[test]
    fn run_options_serialize_and_a_plain_run_has_none() {
        let plain = RunOptions::default();
        assert!(plain.is_plain());
        assert_eq!(plain.gates(), GateName::ALL.to_vec());
        let four = RunOptions {
            copies: Some(Copies::Count(4)),
            ..RunOptions::default()
        };
        assert_eq!(
            serde_json::to_value(&four).unwrap(),
            serde_json::json!({"copies": {"count": 4}})
        );
        let max: RunOptions = serde_json::from_str(r#"{"copies": "max"}"#).unwrap();
        assert_eq!(max.copies, Some(Copies::Max));
        assert_eq!(max.gates().len(), 11);
        assert_eq!(Copies::Max.to_string(), "max");
        assert!(plain.args().is_empty());
        let all = RunOptions {
            copies: Some(Copies::Count(2)),
            max_copies: None,
            cgroup: Some(CgroupLimits {
                cpu_quota_us: 150_000,
                memory_max_bytes: 512 << 20,
            }),
            cow_root: true,
            userns: true,
            workload: Workload::Desktop,
            guest_ksm: true,
        };
        assert_eq!(
            all.args().join(" "),
            "--copies 2 --userns --cgroup cpu=1.5,memory=512M --cow-root --workload desktop --guest-ksm"
        );
        let capped = RunOptions {
            copies: Some(Copies::Max),
            max_copies: Some(3),
            ..RunOptions::default()
        };
        assert_eq!(capped.args().join(" "), "--copies max --max-copies 3");
        // The default workload leaves the options as a plain run's.
        let xterm: RunOptions = serde_json::from_str(r#"{"workload": "xterm"}"#).unwrap();
        assert!(xterm.is_plain());
        let v = serde_json::to_value(RunOptions {
            workload: Workload::BrowserNosandbox,
            ..RunOptions::default()
        })
        .unwrap();
        assert_eq!(v, serde_json::json!({"workload": "browser-nosandbox"}));
        for w in Workload::ALL {
            assert_eq!(Workload::parse(w.as_str()), Some(w));
            assert_eq!(serde_json::to_value(w).unwrap(), w.as_str());
        }
        assert_eq!(Workload::parse("gnome"), None);
        // The office workload: its own word for the typed-text checks, and room for its first
        // start.
        assert_eq!(Workload::Office.typed_text_word(), Some("office"));
        assert_eq!(Workload::Desktop.typed_text_word(), Some("editor"));
        assert_eq!(Workload::Browser.typed_text_word(), None);
        assert!(Workload::Office.ready_steps() > Workload::Desktop.ready_steps());
        let odd = CgroupLimits {
            cpu_quota_us: 100_000,
            memory_max_bytes: (1 << 30) + 4096,
        };
        assert_eq!(odd.to_string(), "cpu=1,memory=1048580K");
    }
}
