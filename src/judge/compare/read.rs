//! A comparison directory read back (`sharedos-rig show COMPARE_DIR`, `diff`): compare.json is
//! as untrusted as any report, so nothing it says about a column is taken on its word. It is
//! read through the one reader (bounded, no link followed); every report it names must be one
//! plain name inside the directory, and no directory is named twice, in one column or two; the
//! shared-OS column is derived again from its report's density gate, each VM column (VM-each,
//! VM-template) read the same way, each copy and the reset judged again from their own reports
//! by the one verdict, no resume counted twice across them, and the comparison's verdict
//! recomputed by [`super::judge`]. Only the arms compare.json says it ran are read; a column of
//! another is neither judged nor shown. Every place where compare.json says otherwise is
//! returned as a warning.
//!
//! What no report holds is the host's own measurements during the run (each copy's resume time
//! and its QEMU's memory, the idle guest's, the fork's size and save time, the template RAM
//! file's size and what of it was resident): those are kept as compare.json recorded them, and
//! said to be ([`HOST_RECORDED`]).

use super::{
    judge, resume_nonce, shared_os_column, vm_copy_judged, Arm, SharedOs, Summary, VmCopy, VmEach,
    COMPARE_FILE, FORMAT,
};
use crate::judge::ledger::Ledger;
use crate::judge::reader::{Kind, ReportDir};
use crate::judge::verdict::{self, How, Outcome};
use anyhow::{anyhow, bail, Context, Result};
use sharedos_report::model::density::MAX_COPIES;
use sharedos_report::report::REPORT_FILE;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Far above any compare.json (64 copies: about 40 KiB); a larger one is not read.
pub const MAX_COMPARE_BYTES: u64 = 1 << 20;

/// What the host's mark (`*`) says wherever a comparison is shown: what is shown as
/// compare.json recorded it, judged by nothing.
pub const HOST_RECORDED: &str = "the host's own figure, or one computed from it: the VM copies' \
     resume times, their QEMUs' memory and its further readings, the idle guest's memory, the \
     fork's size and save time, the template RAM file's size and what of it was resident (and \
     the host's memory per desktop counted with it), and the VMs' memory and CPUs were measured \
     or chosen by the host during the run and are in compare.json only: shown as recorded, not \
     judged again (the VMs' memory and CPUs are checked against each copy's report)";

const FIX: &str = "fix: give the directory `cargo xtask vm-compare` wrote, as it wrote it";

/// A comparison judged again from its reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Judged {
    /// compare.json with every status, problem and figure a report holds taken from the report,
    /// the host's measurements as recorded, and the verdict recomputed.
    pub summary: Summary,
    /// Where compare.json says otherwise than its reports judged again. Not escaped here.
    pub warnings: Vec<String>,
}

impl Judged {
    /// 0 PASS, 1 FAIL: the recomputed verdict's, never compare.json's.
    pub fn exit_code(&self) -> i32 {
        self.summary.verdict.exit_code()
    }
}

/// Whether `dir` is a comparison directory: it holds something named compare.json (a link
/// there is refused by [`read`], with a reason) and no report.json of its own.
pub fn is_compare_dir(dir: &Path) -> bool {
    let Ok(d) = ReportDir::open(dir) else {
        return false;
    };
    matches!(d.kind(COMPARE_FILE), Ok(Some(_))) && matches!(d.kind(REPORT_FILE), Ok(None))
}

/// Reads the comparison directory at `dir` and judges it again from its reports.
pub fn read(dir: &Path, ledger: Option<&Ledger>) -> Result<Judged> {
    let files = ReportDir::open(dir)
        .map_err(|e| anyhow!("{e}; fix: give a comparison directory (holding {COMPARE_FILE})"))?;
    read_dir(&files, ledger)
}

/// [`read`] of a directory already opened.
pub fn read_dir(files: &ReportDir, ledger: Option<&Ledger>) -> Result<Judged> {
    let shown = files.path().join(COMPARE_FILE).display().to_string();
    let said = parse(files, &shown)?;
    check_names(&said, &shown)?;
    let how = How::full(ledger);
    let mut warnings = Vec::new();

    let (shared_os, so_outcome) = if said.ran(Arm::Criu) {
        let (c, o) = shared_os(files, &said, &how);
        warnings.extend(figure_warnings(&said.shared_os, &c));
        (c, o)
    } else {
        // Not judged, so not shown: a column of an arm not run carries nothing of this run.
        (SharedOs::default(), None)
    };
    let mut image = said.image.clone();
    let mut accel = said.accel.clone();
    let mut workload = said.workload.clone();
    if let Some(o) = &so_outcome {
        let w = o.report.options.workload;
        let ran = (!w.is_default()).then(|| w.as_str().to_string());
        if ran != said.workload {
            warnings.push(format!(
                "{COMPARE_FILE} says the workload is {}, the shared-OS report ran {}; showing the \
                 report's",
                said.workload.as_deref().unwrap_or("the default"),
                w.as_str()
            ));
            workload = ran;
        }
    }
    if let Some(vm) = so_outcome.as_ref().and_then(|o| o.report.vm.as_ref()) {
        if !vm.image_name.is_empty() && vm.image_name != said.image {
            warnings.push(format!(
                "{COMPARE_FILE} says the image is {}, the shared-OS report ran {}; showing the \
                 report's",
                said.image, vm.image_name
            ));
            image = vm.image_name.clone();
        }
        if !vm.accel.is_empty() && vm.accel != said.accel {
            warnings.push(format!(
                "{COMPARE_FILE} says the accelerator is {}, the shared-OS report ran under {}; \
                 showing the report's",
                said.accel, vm.accel
            ));
            accel = vm.accel.clone();
        }
    }

    let mut columns: Vec<(Arm, Column)> = said
        .vm_columns()
        .into_iter()
        .map(|(arm, c)| (arm, vm_column(files, c, &how)))
        .collect();
    mark_repeated_resumes(&mut columns);
    for (arm, c) in &mut columns {
        for seen in &c.seen {
            if !seen.accel.is_empty() && seen.accel != accel {
                warnings.push(format!(
                    "{} {}: its report ran under {}, the comparison under {accel}: the two \
                     columns' times do not compare",
                    arm.column(),
                    seen.label,
                    seen.accel
                ));
            }
        }
        warnings.extend(resource_warnings(*arm, &mut c.col, &c.seen));
    }
    let mut shared_os = shared_os;
    let unnamed = unnamed_reports(files, &said);
    // Whose directory it is no name tells; it fails the comparison in whichever column is
    // judged, the first VM column's when there is one, as a copy left out would be its.
    match columns.first_mut() {
        Some((_, c)) => c.col.problems.extend(unnamed),
        None if said.ran(Arm::Criu) => shared_os.problems.extend(unnamed),
        None => {}
    }
    let mut vm_each = VmEach::default();
    let mut vm_template = None;
    for (arm, c) in columns {
        match arm {
            Arm::VmTemplate => vm_template = Some(c.col),
            _ => vm_each = c.col,
        }
    }

    let mut s = Summary {
        format: said.format,
        image,
        accel,
        copies: said.copies,
        max: said.max,
        workload,
        arms: said.arms.clone(),
        shared_os,
        vm_each,
        vm_template,
        verdict: said.verdict,
        problems: Vec::new(),
    };
    judge(&mut s);
    if s.verdict != said.verdict {
        warnings.push(format!(
            "{COMPARE_FILE} says {}, its reports judged again give {}; showing the re-judged \
             verdict",
            said.verdict, s.verdict
        ));
    }
    for p in s.problems.iter().filter(|p| !said.problems.contains(p)) {
        warnings.push(format!(
            "judged again, a problem {COMPARE_FILE} does not name: {p}"
        ));
    }
    for p in said.problems.iter().filter(|p| !s.problems.contains(p)) {
        warnings.push(format!(
            "{COMPARE_FILE} names a problem its reports judged again do not show: {p}"
        ));
    }
    Ok(Judged {
        summary: s,
        warnings,
    })
}

/// compare.json, read bounded, in this rig's format.
fn parse(files: &ReportDir, shown: &str) -> Result<Summary> {
    let read = files
        .bytes(COMPARE_FILE, MAX_COMPARE_BYTES)
        .map_err(|e| anyhow!("reading {shown}: {e}; {FIX}"))?;
    let v: serde_json::Value = serde_json::from_slice(read.bytes().unwrap_or_default())
        .with_context(|| format!("{shown} is not JSON; {FIX}"))?;
    match v.get("format").and_then(serde_json::Value::as_u64) {
        Some(f) if f == u64::from(FORMAT) || f == 3 || f == 4 => {}
        Some(f) => bail!(
            "{shown} has format {f}, this rig reads {FORMAT} (and 3 and 4): show it with the \
             sharedos-rig that wrote it"
        ),
        None => bail!("{shown} names no format: it is not a compare.json; {FIX}"),
    }
    let s: Summary = serde_json::from_value(v)
        .with_context(|| format!("{shown} is not a compare.json; {FIX}"))?;
    if !(1..=MAX_COPIES).contains(&s.copies) {
        bail!(
            "{shown} says {} copies; a comparison has 1 to {MAX_COPIES}; {FIX}",
            s.copies
        );
    }
    for c in std::iter::once(&s.vm_each).chain(&s.vm_template) {
        if c.copies.len() > s.copies as usize {
            bail!(
                "{shown} lists {} VM copies for a comparison of {}; {FIX}",
                c.copies.len(),
                s.copies
            );
        }
    }
    Ok(s)
}

/// Whether `rel` may name a directory of the comparison: one plain name, not hidden.
fn plain_name(rel: &str) -> bool {
    !rel.is_empty() && !rel.contains('/') && !rel.starts_with('.') && !rel.contains('\0')
}

/// The directories compare.json names for the arms it ran, each with what it names it as.
fn named(s: &Summary) -> Vec<(String, &str)> {
    let mut names = Vec::new();
    if s.ran(Arm::Criu) {
        names.push(("the shared-OS report".into(), s.shared_os.report.as_str()));
    }
    for (arm, c) in s.vm_columns() {
        let fork = match arm {
            Arm::Vm => "the VM fork".to_string(),
            _ => format!("the {} fork", arm.column()),
        };
        names.push((fork, c.fork.as_str()));
        for v in c.copies.iter().chain(&c.reset) {
            names.push((
                format!("{} {}'s report", arm.column(), v.label),
                v.report.as_str(),
            ));
        }
        if let Some(v) = c.search.as_ref().and_then(|s| s.failed.as_ref()) {
            names.push((
                format!(
                    "{} {}'s report (the copy that stopped its search)",
                    arm.column(),
                    v.label
                ),
                v.report.as_str(),
            ));
        }
    }
    names
}

/// Every directory compare.json names is one plain name, and each report is a column's own:
/// one directory named by two columns is refused as one named twice in one column is.
fn check_names(s: &Summary, shown: &str) -> Result<()> {
    let mut seen = BTreeSet::new();
    for (what, rel) in named(s) {
        if !plain_name(rel) {
            bail!(
                "{shown} names {rel:?} as {what}: a report of a comparison is one plain name \
                 inside its directory (no `/`, no `..`, not empty); {FIX}"
            );
        }
        if !seen.insert(rel) {
            bail!(
                "{shown} names {rel:?} as {what} and as another's: each copy is judged from a \
                 report of its own; {FIX}"
            );
        }
    }
    Ok(())
}

/// A report beneath the comparison, judged by the one verdict.
fn judged(files: &ReportDir, rel: &str, how: &How) -> std::result::Result<Outcome, String> {
    let d = files.open_beneath(rel)?;
    verdict::judge_dir(d, how).map_err(|r| r.problem)
}

/// The shared-OS column from its report's density gate.
fn shared_os(files: &ReportDir, said: &Summary, how: &How) -> (SharedOs, Option<Outcome>) {
    let rel = &said.shared_os.report;
    let (col, o) = match judged(files, rel, how) {
        Ok(o) => (shared_os_column(&o, said.requested()), Some(o)),
        Err(e) => (
            SharedOs {
                problems: vec![format!("its report does not read back: {rel}: {e}")],
                ..SharedOs::default()
            },
            None,
        ),
    };
    (
        SharedOs {
            report: rel.clone(),
            ..col
        },
        o,
    )
}

/// Where compare.json's shared-OS figures are not its report's.
fn figure_warnings(said: &SharedOs, fresh: &SharedOs) -> Vec<String> {
    let differs = said.restore_ms != fresh.restore_ms
        || said.reset_ms != fresh.reset_ms
        || said.per_copy != fresh.per_copy
        || said.guest_used_before_kib != fresh.guest_used_before_kib
        || said.guest_used_with_copies_kib != fresh.guest_used_with_copies_kib;
    if differs {
        vec![format!(
            "shared-OS: {COMPARE_FILE}'s figures are not those of its report's density and reset \
             gates; showing the report's"
        )]
    } else {
        Vec::new()
    }
}

/// What a VM copy's own report says of the machine it ran on, for the checks of what
/// compare.json says of every copy.
struct Seen {
    label: String,
    accel: String,
    memory_mib: u64,
    cpus: u32,
}

/// Where compare.json's memory and CPUs for each VM of the column `arm` ran are not those its
/// copies' reports say, named by copy with both values. When every copy that reads back says
/// the same, that is shown; when they differ among themselves, compare.json's stays (marked as
/// the host's).
fn resource_warnings(arm: Arm, vm: &mut VmEach, seen: &[Seen]) -> Vec<String> {
    let said = (vm.memory_mib, vm.cpus);
    let warnings: Vec<String> = seen
        .iter()
        .filter(|c| (c.memory_mib, c.cpus) != said)
        .map(|c| {
            format!(
                "{} {}: {COMPARE_FILE} says each VM had {} MiB and {} CPUs, its report says \
                 {} MiB and {} CPUs",
                arm.column(),
                c.label,
                said.0,
                said.1,
                c.memory_mib,
                c.cpus
            )
        })
        .collect();
    let reported: BTreeSet<(u64, u32)> = seen.iter().map(|c| (c.memory_mib, c.cpus)).collect();
    if let (false, Some(&(m, c))) = (warnings.is_empty(), reported.first()) {
        if reported.len() == 1 {
            (vm.memory_mib, vm.cpus) = (m, c);
        }
    }
    warnings
}

/// Every directory beneath the comparison that holds a report compare.json does not name for
/// an arm it ran: a copy left out of the count (one that failed, say) would otherwise go unseen,
/// and so would the reports of an arm taken out of the list of those run.
fn unnamed_reports(files: &ReportDir, said: &Summary) -> Vec<String> {
    let named: BTreeSet<&str> = named(said).into_iter().map(|(_, rel)| rel).collect();
    let entries = match files.entries("") {
        Ok(e) => e,
        Err(e) => return vec![format!("the comparison's directory does not list: {e}")],
    };
    entries
        .into_iter()
        .filter(|(name, kind)| matches!(kind, Kind::Dir) && !named.contains(name.as_str()))
        .filter(|(name, _)| !matches!(files.kind(&format!("{name}/{REPORT_FILE}")), Ok(None)))
        .map(|(name, _)| {
            format!(
                "the comparison's directory holds a report {COMPARE_FILE} does not name: {name}/ \
                 (a copy left out of the count?)"
            )
        })
        .collect()
}

/// Each value that an earlier one repeats, as (the later's index, the first's index); None is
/// no value. The same nonce in two reports is one resumed guest's report in two places; the
/// same MAC given to two copies makes them not two machines.
fn repeated(values: &[Option<String>]) -> Vec<(usize, usize)> {
    let mut first: BTreeMap<&str, usize> = BTreeMap::new();
    let mut out = Vec::new();
    for (i, n) in values.iter().enumerate() {
        if let Some(n) = n {
            match first.get(n.as_str()) {
                Some(&f) => out.push((i, f)),
                None => {
                    first.insert(n, i);
                }
            }
        }
    }
    out
}

/// A VM column read back: the column, what each copy's report says of its machine, and each
/// copy's and the reset's resume as its report records it, in the column's order.
struct Column {
    col: VmEach,
    seen: Vec<Seen>,
    resumes: Vec<Option<String>>,
}

/// A VM column, whichever arm ran it: each copy and the reset judged again from its report,
/// the host's figures as recorded. Resumes repeated are [`mark_repeated_resumes`]'s, across
/// every column.
fn vm_column(files: &ReportDir, said: &VmEach, how: &How) -> Column {
    let mut seen = Vec::new();
    let mut resumes: Vec<Option<String>> = Vec::new();
    let mut one = |c: &VmCopy| -> VmCopy {
        let (problems, o) = match files.open_beneath(&c.report) {
            Ok(d) => vm_copy_judged(d, how, said.origin(), &c.nonce, &c.mac),
            Err(e) => (
                vec![format!("its report does not read back: {}: {e}", c.report)],
                None,
            ),
        };
        resumes.push(o.as_ref().and_then(resume_nonce).map(str::to_string));
        if let Some(vm) = o.as_ref().and_then(|o| o.report.vm.as_ref()) {
            seen.push(Seen {
                label: c.label.clone(),
                accel: vm.accel.clone(),
                memory_mib: vm.memory_mib,
                cpus: vm.cpus,
            });
        }
        VmCopy {
            problems,
            ..c.clone()
        }
    };
    let mut copies: Vec<VmCopy> = said.copies.iter().map(&mut one).collect();
    let mut reset = said.reset.as_ref().map(&mut one);
    let macs: Vec<Option<String>> = copies
        .iter()
        .chain(&reset)
        .map(|c| (!c.mac.is_empty()).then(|| c.mac.clone()))
        .collect();
    for (later, first) in repeated(&macs) {
        let first_label = copies
            .iter()
            .chain(&reset)
            .nth(first)
            .map(|c| c.label.clone())
            .unwrap_or_default();
        if let Some(c) = copies.iter_mut().chain(reset.as_mut()).nth(later) {
            c.problems.push(format!(
                "the host's record gives it the MAC {} of {first_label} too",
                crate::escape::line(&c.mac)
            ));
        }
    }
    // The column's own problems are the host's record of what stopped it (a copy that did not
    // come up, an interrupt): no report holds them, and they only ever fail the comparison.
    let mut problems = said.problems.clone();
    match files.kind(&said.fork) {
        Ok(Some(Kind::Dir)) => {}
        Ok(Some(k)) => problems.push(format!(
            "its fork's directory {} is {}, not a directory",
            said.fork,
            k.describe()
        )),
        Ok(None) => problems.push(format!("its fork's directory {} is missing", said.fork)),
        Err(e) => problems.push(format!("its fork's directory: {e}")),
    }
    Column {
        col: VmEach {
            copies,
            reset,
            problems,
            ..said.clone()
        },
        seen,
        resumes,
    }
}

/// The `i`th of a column's copies, the reset last.
fn nth_copy(c: &mut VmEach, i: usize) -> Option<&mut VmCopy> {
    c.copies.iter_mut().chain(c.reset.as_mut()).nth(i)
}

/// Every report whose resume an earlier one's repeats, in its column or another, fails naming
/// the first place: one resumed guest's report in two places is one copy, whichever column it
/// is put in.
fn mark_repeated_resumes(columns: &mut [(Arm, Column)]) {
    // Each report's place, (column, copy), beside its resume, every column in order.
    let (places, resumes): (Vec<(usize, usize)>, Vec<Option<String>>) = columns
        .iter()
        .enumerate()
        .flat_map(|(k, (_, c))| {
            c.resumes
                .iter()
                .cloned()
                .enumerate()
                .map(move |(i, n)| ((k, i), n))
        })
        .unzip();
    for (later, first) in repeated(&resumes) {
        let (Some(&(fk, fi)), Some(&(lk, li))) = (places.get(first), places.get(later)) else {
            continue;
        };
        let Some((first_arm, first_col)) = columns.get(fk) else {
            continue;
        };
        let first_arm = *first_arm;
        let c = &first_col.col;
        let Some((label, report)) = c
            .copies
            .iter()
            .chain(&c.reset)
            .nth(fi)
            .map(|c| (c.label.clone(), c.report.clone()))
        else {
            continue;
        };
        let n = resumes.get(later).cloned().flatten().unwrap_or_default();
        let Some((arm, c)) = columns.get_mut(lk) else {
            continue;
        };
        let first = if *arm == first_arm {
            label
        } else {
            format!("{} {label}", first_arm.column())
        };
        if let Some(c) = nth_copy(&mut c.col, li) {
            c.problems.push(format!(
                "its report is the same resume as {first}'s ({report}/): both carry the nonce \
                 {n}: one resumed guest counted twice"
            ));
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
