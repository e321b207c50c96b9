//! The verdict on a migration (vm-migrate): the gates each half must pass, what keeps each
//! half from passing, and the one verdict on both.

use super::same_run::RunId;
use super::Outcome;
use sharedos_report::cause::Cause;
use sharedos_report::checkpoint::DUMP_TIME_PNG;
use sharedos_report::report::{GateName, Status, Verdict, GUEST_DIR};

/// The gates each guest of a migration (vm-migrate) must pass, beside cleanup: the one that
/// dumps runs the tree up to its dump; the one that restores takes the checkpoint in (its dump
/// gate) and runs the restores on it. The rest of each guest's report is NOT_RUN by design.
pub const MIGRATION_DUMP_SIDE: [GateName; 5] = [
    GateName::Prerequisites,
    GateName::Launch,
    GateName::LiveStateProbe,
    GateName::Dump,
    GateName::Cleanup,
];
pub const MIGRATION_RESTORE_SIDE: [GateName; 7] = [
    GateName::Prerequisites,
    GateName::Dump,
    GateName::RestoreLiveProcess,
    GateName::RestoreXState,
    GateName::Isolation,
    GateName::Reset,
    GateName::Cleanup,
];

/// vm-migrate's summary, beside the two halves' report directories (`from/`, `to/`). Written by
/// the migration and read back by the pairs view, which takes nothing in it on trust.
pub const MIGRATION_FILE: &str = "migration.json";

/// Which guest of a migration a finding is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MigrationSide {
    /// The guest that dumps (`--from`, `from/`).
    Dump,
    /// The guest that restores (`--to`, `to/`).
    Restore,
}

impl MigrationSide {
    /// The side's directory in the migration, which is also how tables name it.
    pub fn dir(self) -> &'static str {
        match self {
            MigrationSide::Dump => "from",
            MigrationSide::Restore => "to",
        }
    }

    /// The gates this side must pass.
    pub fn gates(self) -> &'static [GateName] {
        match self {
            MigrationSide::Dump => &MIGRATION_DUMP_SIDE,
            MigrationSide::Restore => &MIGRATION_RESTORE_SIDE,
        }
    }
}

/// One thing that keeps a migration from passing.
#[derive(Clone, Debug, PartialEq)]
pub struct MigrationFinding {
    pub side: MigrationSide,
    /// The gate that did not pass; None for a problem with the report itself or a side that
    /// never ran.
    pub gate: Option<GateName>,
    pub problem: String,
    /// What the failing program said in its own log (CRIU's error when it refused a restore),
    /// as the gate quoted it: for people to read, never a verdict.
    pub cause: Option<Cause>,
}

/// What keeps one guest's half of a migration from passing: every problem the judgement found
/// (the rig's failure included), then each gate of the side's that is not PASS, with its
/// reason and the cause it quoted.
pub fn migration_half_findings(o: &Outcome, side: MigrationSide) -> Vec<MigrationFinding> {
    let mut f: Vec<MigrationFinding> = o
        .problems()
        .into_iter()
        .map(|problem| MigrationFinding {
            side,
            gate: None,
            problem,
            cause: None,
        })
        .collect();
    for name in side.gates() {
        let (problem, cause) = match o.gates.iter().find(|g| g.name == *name) {
            Some(g) if g.status == Status::Pass => continue,
            Some(g) => (
                format!("{name} is {}: {}", g.status, g.reason),
                g.cause.clone(),
            ),
            None => (format!("the report has no {name} gate"), None),
        };
        f.push(MigrationFinding {
            side,
            gate: Some(*name),
            problem,
            cause,
        });
    }
    f
}

/// What keeps one guest's half of a migration from passing, in words.
pub fn migration_half_problems(o: &Outcome, side: MigrationSide) -> Vec<String> {
    migration_half_findings(o, side)
        .into_iter()
        .map(|f| f.problem)
        .collect()
}

/// Everything that keeps a migration from passing, the dump side's first: a restore CRIU
/// refused is the restore gate's finding, carrying CRIU's own error as its cause; a restore
/// side that is not this dump side's follows ([`migration_binding_problems`]). Empty exactly
/// when [`migration`] is PASS.
pub fn migration_findings(from: &Outcome, to: Option<&Outcome>) -> Vec<MigrationFinding> {
    let mut f = migration_half_findings(from, MigrationSide::Dump);
    match to {
        Some(t) => {
            f.extend(migration_half_findings(t, MigrationSide::Restore));
            f.extend(
                migration_binding_problems(from, t)
                    .into_iter()
                    .map(|problem| MigrationFinding {
                        side: MigrationSide::Restore,
                        gate: None,
                        problem,
                        cause: None,
                    }),
            );
        }
        None => f.push(MigrationFinding {
            side: MigrationSide::Restore,
            gate: None,
            problem: "the restore side did not run: the migration holds no report of it".into(),
            cause: None,
        }),
    }
    f
}

/// Where the dump-time frame sits in a vm-run's report directory: the guest's, under guest/.
fn dump_time_frame() -> String {
    format!("{GUEST_DIR}/{DUMP_TIME_PNG}")
}

/// Why `to` is not the restore side of `from`'s checkpoint, if it is not. Each half passes its
/// own checks wherever it is put, so a half copied in from elsewhere is told apart only by what
/// binds the two: both guests ran with the one marker the host drew for the migration (a half
/// of another migration has another), the restore side's dump-time frame is the file the host
/// took out of the dump side's archive and sent it (both re-hashed in their artifact lists),
/// and they are two runs (a whole run's report in both places would pass both sides' gates).
fn migration_binding_problems(from: &Outcome, to: &Outcome) -> Vec<String> {
    let mut p = Vec::new();
    if let Some(what) = RunId::of(from).shared(&RunId::of(to)) {
        p.push(format!(
            "to/ is the same run as from/: both carry {what}: one guest's report counted as both \
             halves of a migration"
        ));
    }
    let (fm, tm) = (&from.report.marker, &to.report.marker);
    if fm.is_empty() || fm != tm {
        p.push(format!(
            "to/ is not of from/'s migration: its guest ran with the marker {tm:?}, from/'s with \
             {fm:?}: a half of another migration put in this one's place"
        ));
    }
    let frame = dump_time_frame();
    let sha = |o: &Outcome| {
        o.report
            .artifacts
            .iter()
            .find(|a| a.path == frame)
            .map(|a| a.sha256.clone())
    };
    if let (Some(f), Some(t)) = (sha(from), sha(to)) {
        if f != t {
            p.push(format!(
                "to/ restored another checkpoint than from/ kept: its dump-time frame {frame} has \
                 sha256 {t}, from/'s {f}"
            ));
        }
    }
    p
}

/// The one verdict on a migration: PASS when both halves hold (the restore side judged only
/// once the dump side passed), else FAIL. No human review stands in a migration's way.
pub fn migration(from: &Outcome, to: Option<&Outcome>) -> Verdict {
    if migration_findings(from, to).is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::judge;
    use super::*;
    use crate::judge::artifacts::Mismatch;
    use crate::judge::review::tests::fresh_report;
    use crate::judge::review::ReviewFile;

    #[test]
    fn a_migration_passes_only_when_each_side_holds_its_own_gates() {
        use GateName::*;
        let side = |not_here: &[GateName], failed: &[GateName], mism: Vec<Mismatch>| {
            let mut r = fresh_report();
            for g in r.gates.iter_mut() {
                if not_here.contains(&g.name) {
                    g.status = Status::NotRun;
                } else if failed.contains(&g.name) {
                    g.status = Status::Fail;
                    g.reason = "criu restore failed; CRIU says: Error (criu/x.c:1): no".into();
                    g.checks[0].passed = false;
                }
            }
            r.seal();
            judge(&r, ReviewFile::Absent, mism)
        };
        let dump_side = [
            RestoreLiveProcess,
            RestoreXState,
            Isolation,
            Reset,
            GuiPixelReview,
        ];
        let restore_side = [Launch, LiveStateProbe, GuiPixelReview];
        let from = side(&dump_side, &[], vec![]);
        let to = side(&restore_side, &[], vec![]);
        assert!(migration_half_problems(&from, MigrationSide::Dump).is_empty());
        assert_eq!(from.verdict, Verdict::Fail, "alone, each side is FAIL");
        assert_eq!(migration(&from, Some(&to)), Verdict::Pass);
        // No restore side, a restore CRIU refused, a dump side that did not dump, a changed
        // artifact: each a FAIL, and the refusal's reason is quoted.
        assert_eq!(migration(&from, None), Verdict::Fail);
        let refused = side(&restore_side, &[RestoreLiveProcess], vec![]);
        assert_eq!(migration(&from, Some(&refused)), Verdict::Fail);
        let why = migration_half_problems(&refused, MigrationSide::Restore);
        assert!(why.iter().any(|p| p.contains("CRIU says")), "{why:?}");
        let not_dumped = side(&dump_side, &[Dump], vec![]);
        assert_eq!(migration(&not_dumped, Some(&to)), Verdict::Fail);
        let changed = Mismatch {
            path: "guest/checkpoint/images/pages-1.img".into(),
            problem: "sha256 differs".into(),
        };
        let tampered = side(&dump_side, &[], vec![changed]);
        assert_eq!(migration(&tampered, Some(&to)), Verdict::Fail);
    }

    /// A restore CRIU refused is the restore gate's finding and carries CRIU's error; a side that
    /// passes has none, and a missing restore side is a finding of its own.
    #[test]
    fn a_restore_criu_refused_is_a_finding_with_its_cause() {
        use sharedos_report::cause::Cause;
        use GateName::*;
        let half = |not_here: &[GateName], refused: Option<Cause>| {
            let mut r = fresh_report();
            for g in r.gates.iter_mut() {
                if not_here.contains(&g.name) {
                    g.status = Status::NotRun;
                }
            }
            if let Some(c) = refused {
                let g = r.gate_mut(RestoreLiveProcess).unwrap();
                g.status = Status::Fail;
                g.reason = "criu_restore_succeeded failed".into();
                g.checks[0].passed = false;
                g.cause = Some(c);
            }
            r.seal();
            judge(&r, ReviewFile::Absent, vec![])
        };
        let from = half(
            &[
                RestoreLiveProcess,
                RestoreXState,
                Isolation,
                Reset,
                GuiPixelReview,
            ],
            None,
        );
        let restore_side = [Launch, LiveStateProbe, GuiPixelReview];
        let to = half(&restore_side, None);
        assert!(migration_findings(&from, Some(&to)).is_empty());
        let criu = Cause {
            source: "criu restore".into(),
            log: "criu/restore-a.log".into(),
            error: "(00.51) Error (criu/cr-restore.c:1480): Can't fork for 77: File exists".into(),
            before: vec![],
        };
        let refused = half(&restore_side, Some(criu.clone()));
        let f = migration_findings(&from, Some(&refused));
        assert_eq!(migration(&from, Some(&refused)), Verdict::Fail);
        let restore = f
            .iter()
            .find(|f| f.gate == Some(RestoreLiveProcess))
            .unwrap_or_else(|| panic!("{f:?}"));
        assert_eq!(restore.side, MigrationSide::Restore);
        assert_eq!(restore.cause.as_ref(), Some(&criu));
        assert!(restore.problem.starts_with("restore_live_process is FAIL"));
        // Only the gate that quoted CRIU carries its words.
        assert!(f
            .iter()
            .filter(|x| x.gate != Some(RestoreLiveProcess))
            .all(|x| x.cause.is_none()));
        let none = migration_findings(&from, None);
        assert_eq!(none.len(), 1, "{none:?}");
        assert_eq!(none[0].side, MigrationSide::Restore);
        assert!(none[0].problem.contains("restore side did not run"));
    }

    /// Each half passes its own gates wherever it is put: what holds the restore side to the
    /// dump side is one marker, the dump-time frame carried between them, and two runs. Each
    /// binding broken alone fails the migration; all kept, it passes.
    #[test]
    fn a_restore_side_is_held_to_its_dump_side() {
        use crate::judge::review::tests::png;
        use sharedos_report::report::{GuestStart, VmProvenance};
        use GateName::*;
        let frame = dump_time_frame();
        let half = |not_here: &[GateName], marker: &str, key: &str, frame_sha: &str| {
            let mut r = fresh_report();
            for g in r.gates.iter_mut() {
                if not_here.contains(&g.name) {
                    g.status = Status::NotRun;
                }
            }
            r.marker = marker.into();
            r.artifacts.push(png(&frame, frame_sha));
            r.vm = Some(VmProvenance {
                start: Some(GuestStart {
                    client_key: format!("ssh-ed25519 {key}"),
                    ..Default::default()
                }),
                ..Default::default()
            });
            r.seal();
            judge(&r, ReviewFile::Absent, vec![])
        };
        let dump_side = [RestoreLiveProcess, RestoreXState, Isolation, Reset];
        let restore_side = [Launch, LiveStateProbe];
        let sha = "d".repeat(64);
        let from = half(&dump_side, "spike-aaaaaa", "from", &sha);
        let to = half(&restore_side, "spike-aaaaaa", "to", &sha);
        assert_eq!(migration(&from, Some(&to)), Verdict::Pass);
        let only = |to: &Outcome| -> String {
            let f = migration_findings(&from, Some(to));
            assert_eq!(f.len(), 1, "{f:?}");
            assert_eq!((f[0].side, f[0].gate), (MigrationSide::Restore, None));
            f[0].problem.clone()
        };
        let other = half(&restore_side, "spike-bbbbbb", "to", &sha);
        assert_eq!(
            only(&other),
            "to/ is not of from/'s migration: its guest ran with the marker \"spike-bbbbbb\", \
             from/'s with \"spike-aaaaaa\": a half of another migration put in this one's place"
        );
        let elsewhere = half(&restore_side, "spike-aaaaaa", "to", &"e".repeat(64));
        assert_eq!(
            only(&elsewhere),
            format!(
                "to/ restored another checkpoint than from/ kept: its dump-time frame \
                 guest/png/dump-time.png has sha256 {}, from/'s {sha}",
                "e".repeat(64)
            )
        );
        // One whole run's report, which passes both sides' gates, as both halves.
        let whole = half(&[], "spike-aaaaaa", "whole", &sha);
        assert!(migration_half_problems(&whole, MigrationSide::Dump).is_empty());
        assert!(migration_half_problems(&whole, MigrationSide::Restore).is_empty());
        assert_eq!(
            migration_findings(&whole, Some(&whole))
                .iter()
                .map(|f| f.problem.as_str())
                .collect::<Vec<_>>(),
            [
                "to/ is the same run as from/: both carry the session's client key ssh-ed25519 \
              whole: one guest's report counted as both halves of a migration"
            ]
        );
    }
}
