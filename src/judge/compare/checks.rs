//! The one verdict on a comparison: each arm it ran held to its column's checks, every VM
//! column to the same ones, and the record of the resumes checked across all of them.

use super::{Arm, Search, Summary, TemplateRam, VmCopy, VmEach, COMPARE_FILE};
use sharedos_report::model::density::Stop;
use sharedos_report::report::{Status, Verdict};

/// The one verdict on a comparison: PASS when every arm it ran holds, every copy of each
/// checked; the problems say what did not. A column of an arm not run is not judged: what it
/// holds is not a measurement of this comparison.
pub fn judge(s: &mut Summary) {
    let mut p = arms_problems(&s.arms);
    if s.ran(Arm::Criu) {
        for q in &s.shared_os.problems {
            p.push(format!("{}: {q}", Arm::Criu.column()));
        }
        let reached = s.shared_os.per_copy.len();
        p.extend(
            search_problems(s, Arm::Criu, s.shared_os.search.as_ref(), reached)
                .into_iter()
                .map(|q| format!("{}: {q}", Arm::Criu.column())),
        );
    }
    if s.ran(Arm::VmTemplate) && s.vm_template.is_none() {
        p.push(format!(
            "{}: the arm was run (--arms) and {COMPARE_FILE} has no column of it",
            Arm::VmTemplate.column()
        ));
    }
    let columns = s.vm_columns();
    for &(arm, c) in &columns {
        // With `max` a column holds the copies its search reached, which the search must say.
        let want = match (s.max, &c.search) {
            (true, Some(search)) => search.steps.last().map_or(0, |st| st.copies_up),
            _ => s.copies,
        };
        p.extend(vm_column_problems(arm, c, want));
        p.extend(
            search_problems(s, arm, c.search.as_ref(), c.copies.len())
                .into_iter()
                .map(|q| format!("{}: {q}", arm.column())),
        );
    }
    p.extend(resume_record_problems(&columns));
    s.verdict = if p.is_empty() {
        Verdict::Pass
    } else {
        Verdict::Fail
    };
    s.problems = p;
}

/// What the list of arms says against itself. A comparison of no arm would pass having
/// measured nothing, and an arm named twice says the file was not written as vm-compare writes
/// it.
fn arms_problems(arms: &[Arm]) -> Vec<String> {
    let mut p = Vec::new();
    if arms.is_empty() {
        p.push(format!(
            "{COMPARE_FILE} names no arm run: a comparison of nothing measures nothing"
        ));
    }
    for (i, a) in arms.iter().enumerate() {
        // Said once, at its second naming, however many times it is named.
        if arms[..i].iter().filter(|b| *b == a).count() == 1 {
            p.push(format!(
                "{COMPARE_FILE} names the arm {} more than once: each arm is run once",
                a.as_str()
            ));
        }
    }
    p
}

/// The checks every VM column is held to, whichever arm ran it, named by its column; and the
/// template the templated arm's clones map, which that arm must record and no other may.
fn vm_column_problems(arm: Arm, c: &VmEach, copies: u32) -> Vec<String> {
    let name = arm.column();
    let mut p: Vec<String> = c.problems.iter().map(|q| format!("{name}: {q}")).collect();
    if c.copies.len() != copies as usize {
        p.push(format!(
            "{name}: {} copies came up, not {copies}",
            c.copies.len()
        ));
    }
    for v in c.copies.iter().chain(&c.reset) {
        for q in &v.problems {
            p.push(format!("{name} {}: {q}", v.label));
        }
        if v.host_mem.is_none() {
            p.push(format!("{name} {}: no host memory figure", v.label));
        }
    }
    if c.reset.is_none() {
        p.push(format!("{name}: no reset was measured"));
    }
    if let Some(lie) = &c.lie {
        p.push(format!("{name}: a lie run, not a measurement: {lie}"));
    }
    for (what, r) in [("KSM", &c.ksm), ("memory given back", &c.reclaim)] {
        match r.status {
            Status::NotRun => {}
            Status::Pass if r.per_copy.len() == c.copies.len() => {}
            Status::Pass => p.push(format!(
                "{name}: the {what} reading has {} copies, not {}",
                r.per_copy.len(),
                c.copies.len()
            )),
            _ => p.push(format!(
                "{name}: the {what} reading is {}: {}",
                r.status, r.reason
            )),
        }
    }
    match (arm, &c.template) {
        (Arm::VmTemplate, Some(t)) => {
            p.extend(template_problems(t).map(|q| format!("{name}: {q}")))
        }
        (Arm::VmTemplate, None) => p.push(format!(
            "{name}: {COMPARE_FILE} records no template RAM file: without it a desktop's share \
             of the host's memory cannot be told"
        )),
        (_, Some(_)) => p.push(format!(
            "{name}: {COMPARE_FILE} records a template RAM file, which only the templated arm's \
             clones map"
        )),
        (_, None) => {}
    }
    p
}

/// What an arm's record of its search says against the comparison and against itself: present
/// exactly when the comparison searched (`max`), stopped at a bound or at a copy that failed
/// (never at a count), its steps one per copy from none up to the `reached` the column holds,
/// and within its own cap.
fn search_problems(s: &Summary, arm: Arm, search: Option<&Search>, reached: usize) -> Vec<String> {
    let mut p = Vec::new();
    let search = match (s.max, search) {
        (false, None) => return p,
        (false, Some(_)) => {
            p.push(format!(
                "{COMPARE_FILE} records a search for the most copies in a comparison of {} \
                 copies: the search is not what was run",
                s.copies
            ));
            return p;
        }
        (true, None) => {
            p.push(
                "no record of its search for the most copies (--copies max): what stopped it \
                 is not known"
                    .into(),
            );
            return p;
        }
        (true, Some(search)) => search,
    };
    if reached == 0 {
        p.push("its search stopped before its first copy: nothing was measured".into());
    }
    let steps_in_order = search
        .steps
        .iter()
        .enumerate()
        .all(|(i, st)| usize::try_from(st.copies_up).is_ok_and(|n| n == i));
    if !steps_in_order {
        p.push(
            "its search's steps are not one per copy from none upward: they are not one \
                 search's record"
                .into(),
        );
    }
    let last = search.steps.last().map(|st| st.copies_up);
    if last.and_then(|n| usize::try_from(n).ok()) != Some(reached) {
        p.push(format!(
            "its search's last step has {} copies up, and the column holds {reached}",
            last.map_or_else(|| "no".into(), |n| n.to_string())
        ));
    }
    if usize::try_from(search.limits.cap).is_ok_and(|cap| reached > cap) {
        p.push(format!(
            "{reached} copies up past its search's cap of {}",
            search.limits.cap
        ));
    }
    match search.stopped_by {
        Stop::Count => p.push(
            "its search says it stopped at a count: a search for the most copies stops at a \
                 bound or a failure"
                .into(),
        ),
        Stop::RestoreFailed if arm != Arm::Criu && search.failed.is_none() => p.push(
            "its search says a clone failed and records no copy that did: the limit is not shown"
                .into(),
        ),
        _ => {}
    }
    if search.failed.is_some() && (arm == Arm::Criu || search.stopped_by != Stop::RestoreFailed) {
        p.push("its search records a failed copy, and did not stop at one".into());
    }
    if search.detail.trim().is_empty() {
        p.push("its search does not say what it saw when it stopped".into());
    }
    p
}

/// Whether the template's figures can be what the host read: its resident part is a part of
/// the file, which is the guest's whole memory and so is never empty. The clones' memory is
/// counted with these figures, so a template that says less than it holds would flatter them.
fn template_problems(t: &TemplateRam) -> Option<String> {
    if t.bytes == 0 {
        return Some("its template RAM file is recorded as 0 bytes: no guest's memory".into());
    }
    (t.resident_bytes > t.bytes).then(|| {
        format!(
            "its template RAM file holds {} bytes in memory, more than its {} bytes: the \
             figures are not the host's reading of one file",
            t.resident_bytes, t.bytes
        )
    })
}

/// What compare.json's own record of the resumes says against itself: every copy and the reset
/// of every VM column recorded with a nonce, and no two with one, in one column or across two
/// (a resume of the VM-each arm's save reported again as a clone of the template is still one
/// resume).
fn resume_record_problems(columns: &[(Arm, &VmEach)]) -> Vec<String> {
    let mut p = Vec::new();
    let all: Vec<(Arm, &VmCopy)> = columns
        .iter()
        .flat_map(|&(arm, c)| c.copies.iter().chain(&c.reset).map(move |v| (arm, v)))
        .collect();
    for (i, &(arm, c)) in all.iter().enumerate() {
        let name = arm.column();
        if c.nonce.is_empty() {
            // A copy that did not come up has no resume to record; its own problems say why.
            if !c.problems.is_empty() {
                continue;
            }
            p.push(format!(
                "{name} {}: {COMPARE_FILE} records no nonce for its resume: nothing binds its \
                 report to a resume the host made",
                c.label
            ));
            continue;
        }
        if let Some(&(first_arm, first)) = all[..i].iter().find(|(_, o)| o.nonce == c.nonce) {
            let later = if first_arm == arm {
                c.label.clone()
            } else {
                format!("{name} {}", c.label)
            };
            p.push(format!(
                "{} {} and {later}: {COMPARE_FILE} records one resume twice (nonce {}): one \
                 resumed guest cannot be two copies",
                first_arm.column(),
                first.label,
                c.nonce
            ));
        }
    }
    p
}

#[cfg(test)]
mod tests;
