//! The host's own judgement of the checks a report's verdict rests on most: the app's token and
//! counter after a restore, the windows, and the framebuffer. The guest records what it observed
//! beside each check; the host runs the very comparison the guest ran (sharedos-report's
//! `compare`, shared) on those values, and for framebuffers hashes the pixels of the PNGs it
//! fetched itself. A check a guest says passed, but which the host does not see pass, is a
//! problem in the report; so is a PASS gate without one of these checks. A guest that lies must
//! now forge consistent values and pixels, not only a `passed: true`.

use super::pixels;
use super::reader::ReportDir;
use serde_json::Value;
use sharedos_report::compare;
use sharedos_report::model::app::AppState;
use sharedos_report::model::screen::Window;
use sharedos_report::report::{Check, GateName, Report, Status, Workload};
use sharedos_report::{digest, report};
use std::collections::BTreeMap;
use std::time::Duration;

/// The comparison a check's value is judged by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `{dump_time, seen}` tokens, equal and not empty.
    SameToken,
    /// `{dump_time, seen, ms_since_dump_query}`: seen within the range the dump-time counter
    /// and the elapsed time allow.
    CounterContinues,
    /// `{first, second, first_token, second_token}`: the counter moved on, the token did not.
    CounterAdvances,
    /// `{dump_time, seen}` window lists, equal and not empty.
    SameWindows,
    /// `{expected_sha256, expected_png, seen_sha256, seen_png}`: two different PNGs whose pixels
    /// (hashed here) are equal and are the recorded hashes.
    SameFramebuffer,
    /// `{typed, read}`: the editor's text read back is exactly the typed text.
    EditorHoldsTyped,
    /// `{dump_time, seen, typed_elsewhere?}`: the copy's editor holds the dump-time text and
    /// none of what was typed into another copy.
    EditorSameText,
    /// `{fork_time, seen}`: two MAC addresses, both well formed, the copy's another than the
    /// saved guest's.
    OwnMac,
    /// `{before, asked, count, seen}`: the window manager showed the asked workspace, another
    /// than the one before.
    WorkspaceSwitched,
    /// `{dump_time, seen, switched_elsewhere?}`: the copy shows the dump-time workspace (not the
    /// first) and not the one another copy was switched to.
    SameWorkspace,
}

/// The live probe's checks judged again.
const LIVE_CHECKS: [(&str, Kind); 2] = [
    ("counter_advances", Kind::CounterAdvances),
    ("framebuffer_stable_when_idle", Kind::SameFramebuffer),
];

/// The state checks of each restored copy judged again: the app's (in the copy's app gate) and
/// the screen's (in its X gate), as the guest's `check_app_state` and `check_x_state` name them.
const COPY_CHECKS: [(&str, Kind, bool); 5] = [
    ("same_token", Kind::SameToken, false),
    ("counter_continues", Kind::CounterContinues, false),
    ("counter_advances", Kind::CounterAdvances, false),
    ("same_windows", Kind::SameWindows, true),
    ("same_framebuffer", Kind::SameFramebuffer, true),
];

/// The restored copies: the gate of their app checks, the gate of their X checks, and the
/// prefix of the checks' names.
const COPIES: [(GateName, GateName, &str); 3] = [
    (GateName::RestoreLiveProcess, GateName::RestoreXState, ""),
    (GateName::Isolation, GateName::Isolation, "b_"),
    (GateName::Reset, GateName::Reset, ""),
];

/// The workload's own state checks of each restored copy, judged again in the app's gate: the
/// editor's text (`--workload desktop`), the page's token and counter (the browser workloads),
/// the Writer document's text (`--workload office`).
fn workload_copy_checks(w: Workload) -> &'static [(&'static str, Kind)] {
    match w {
        Workload::Xterm => &[],
        Workload::Desktop => &[("editor_same_text", Kind::EditorSameText)],
        Workload::Browser | Workload::BrowserNosandbox => &[
            ("page_same_token", Kind::SameToken),
            ("page_counter_continues", Kind::CounterContinues),
            ("page_counter_advances", Kind::CounterAdvances),
        ],
        Workload::Session => &[("workspace_same", Kind::SameWorkspace)],
        Workload::Office => &[("office_same_text", Kind::EditorSameText)],
        // The page's field holds its text as an editor would: the editor's comparison.
        Workload::Chromium | Workload::ChromiumNosandbox => &[
            ("page_same_token", Kind::SameToken),
            ("page_counter_continues", Kind::CounterContinues),
            ("page_counter_advances", Kind::CounterAdvances),
            ("page_field_same_text", Kind::EditorSameText),
        ],
    }
}

/// The workload's live checks judged again.
fn workload_live_checks(w: Workload) -> &'static [(&'static str, Kind)] {
    match w {
        Workload::Desktop => &[("editor_holds_typed_text", Kind::EditorHoldsTyped)],
        Workload::Browser | Workload::BrowserNosandbox => {
            &[("page_counter_advances", Kind::CounterAdvances)]
        }
        Workload::Chromium | Workload::ChromiumNosandbox => &[
            ("page_counter_advances", Kind::CounterAdvances),
            ("page_field_holds_typed_text", Kind::EditorHoldsTyped),
        ],
        Workload::Xterm => &[],
        Workload::Session => &[("workspace_switched", Kind::WorkspaceSwitched)],
        Workload::Office => &[("office_holds_typed_text", Kind::EditorHoldsTyped)],
    }
}

/// The checks judged again, per gate, for a run of workload `w`; a PASS of the gate needs each
/// of them.
fn rechecked(w: Workload) -> Vec<(GateName, String, Kind)> {
    let live = LIVE_CHECKS
        .iter()
        .chain(workload_live_checks(w))
        .map(|(name, kind)| (GateName::LiveStateProbe, name.to_string(), *kind));
    let copies = COPIES.iter().flat_map(move |(app, x, prefix)| {
        let own = COPY_CHECKS.iter().map(move |(name, kind, on_screen)| {
            let gate = if *on_screen { *x } else { *app };
            (gate, format!("{prefix}{name}"), *kind)
        });
        let workload = workload_copy_checks(w)
            .iter()
            .map(move |(name, kind)| (*app, format!("{prefix}{name}"), *kind));
        own.chain(workload)
    });
    live.chain(copies).collect()
}

/// A copy of a VM fork (`diagnose --vm-fork-go`): its live probe holds the copy against the
/// fork-time state. Judged again wherever the guest claims one passed;
/// `verdict::vm_fork_copy_problems` requires each of them.
pub const FORK_CHECKS: [(&str, Kind); 5] = [
    ("fork_token_kept", Kind::SameToken),
    ("fork_counter_continues", Kind::CounterContinues),
    ("fork_same_windows", Kind::SameWindows),
    ("fork_same_framebuffer", Kind::SameFramebuffer),
    ("fork_own_mac", Kind::OwnMac),
];

/// The restored copies are all held against one dump: these checks must name the same dump-time
/// value (the token, the windows, the dump-time frame) in every gate.
const ONE_DUMP: [(Kind, &str); 5] = [
    (Kind::SameToken, "dump_time"),
    (Kind::SameWindows, "dump_time"),
    (Kind::SameFramebuffer, "expected_png"),
    (Kind::EditorSameText, "dump_time"),
    (Kind::SameWorkspace, "dump_time"),
];

/// How much of a check's value a problem quotes: the guest chose it.
const MAX_VALUE_SHOWN: usize = 400;

/// The largest PNG file read to hash its pixels.
const MAX_PNG_BYTES: u64 = 32 << 20;

/// Every disagreement between the report and the host's own judgement, in words. `dir` is the
/// report directory; the PNGs a check names are the guest's (under `guest/` in a vm-run report).
pub fn problems(r: &Report, dir: &ReportDir) -> Vec<String> {
    let mut frames = Frames::new(dir, guest_prefix(r));
    let mut out = Vec::new();
    let mut dump_values: BTreeMap<&str, Vec<(String, &Value)>> = BTreeMap::new();
    if let Some(g) = r.gate(GateName::LiveStateProbe) {
        for (name, kind) in FORK_CHECKS {
            let Some(c) = g.check(name).filter(|c| c.passed) else {
                continue;
            };
            if let Err(why) = judge(kind, c, &mut frames) {
                out.push(format!(
                    "report.json says {}.{name} passed, but the host's own comparison fails: {why}",
                    GateName::LiveStateProbe
                ));
            }
        }
    }
    for (gate, name, kind) in rechecked(r.options.workload) {
        let Some(g) = r.gate(gate) else { continue };
        let Some(c) = g.check(&name) else {
            if g.status == Status::Pass {
                out.push(format!(
                    "report.json says {gate} PASS, but it lacks the check {name}, which the host judges for itself"
                ));
            }
            continue;
        };
        // A check the guest says failed cannot make a PASS; only claims of success are judged.
        if !c.passed {
            continue;
        }
        if let Err(why) = judge(kind, c, &mut frames) {
            out.push(format!(
                "report.json says {gate}.{name} passed, but the host's own comparison fails: {why}"
            ));
        }
        // The live probe compares two live frames; every later gate compares with the dump.
        for (k, field) in ONE_DUMP {
            if k == kind && gate != GateName::LiveStateProbe {
                if let Some(v) = c.value.get(field) {
                    dump_values
                        .entry(field_label(k, &name))
                        .or_default()
                        .push((format!("{gate}.{name}"), v));
                }
            }
        }
    }
    for (what, seen) in dump_values {
        if let Some((first, v)) = seen.first() {
            for (other, w) in &seen[1..] {
                if w != v {
                    out.push(format!(
                        "{first} and {other} hold the copies against different {what}: the copies are not shown to come from one dump"
                    ));
                }
            }
        }
    }
    out
}

/// Where a report's guest files are within its directory: `guest/` in a vm-run report, the
/// directory itself in the guest's own.
pub fn guest_prefix(r: &Report) -> String {
    if r.vm.is_some() {
        format!("{}/", report::GUEST_DIR)
    } else {
        String::new()
    }
}

/// The dump-time frame each restored copy's framebuffer check that claims success cites, as
/// (`gate.check`, its PNG relative to the guest's files, the sha256 of its pixels): the checks
/// [`problems`] judges again and holds to one dump. A value that does not read is left out
/// ([`problems`] reports it).
pub fn dump_time_frames(r: &Report) -> Vec<(String, String, String)> {
    rechecked(r.options.workload)
        .into_iter()
        .filter(|(gate, _, kind)| {
            *kind == Kind::SameFramebuffer && *gate != GateName::LiveStateProbe
        })
        .filter_map(|(gate, name, _)| {
            let c = r.gate(gate)?.check(&name).filter(|c| c.passed)?;
            let png: String = field(&c.value, "expected_png").ok()?;
            let sha: String = field(&c.value, "expected_sha256").ok()?;
            Some((format!("{gate}.{name}"), png, sha))
        })
        .collect()
}

fn field_label(k: Kind, check: &str) -> &'static str {
    match k {
        // The page's token is the page's own, apart from the app's.
        Kind::SameToken if check.contains("page_") => "dump-time page tokens",
        Kind::SameToken => "dump-time tokens",
        Kind::SameWindows => "dump-time windows",
        Kind::EditorSameText if check.contains("page_field") => "dump-time field texts",
        Kind::EditorSameText => "dump-time editor texts",
        Kind::SameWorkspace => "dump-time workspaces",
        _ => "dump-time frames",
    }
}

/// The host's verdict on one check the guest says passed: Ok when it passes here too.
fn judge(kind: Kind, c: &Check, frames: &mut Frames) -> Result<(), String> {
    let v = &c.value;
    let again = match kind {
        Kind::SameToken => {
            let (dump, seen): (String, String) = (field(v, "dump_time")?, field(v, "seen")?);
            compare::same_token(&c.name, &dump, &seen)
        }
        Kind::OwnMac => {
            let (at_fork, seen): (String, String) = (field(v, "fork_time")?, field(v, "seen")?);
            compare::own_mac(&c.name, &at_fork, &seen)
        }
        Kind::CounterContinues => compare::counter_continues(
            &c.name,
            field(v, "dump_time")?,
            Duration::from_millis(field(v, "ms_since_dump_query")?),
            field(v, "seen")?,
        ),
        Kind::CounterAdvances => {
            let state = |counter: &str, token: &str| -> Result<AppState, String> {
                Ok(AppState {
                    token: field(v, token)?,
                    counter: field(v, counter)?,
                    pid: 0,
                    file: None,
                })
            };
            let second = state("second", "second_token")?;
            compare::counter_advances(&c.name, &state("first", "first_token")?, Ok(&second))
        }
        Kind::SameWindows => {
            let (dump, seen): (Vec<Window>, Vec<Window>) =
                (field(v, "dump_time")?, field(v, "seen")?);
            compare::same_windows(&c.name, &dump, &seen)
        }
        Kind::EditorHoldsTyped => {
            let (typed, read): (String, String) = (field(v, "typed")?, field(v, "read")?);
            compare::editor_holds_typed(&c.name, &typed, Ok(&read))
        }
        Kind::EditorSameText => {
            let (dump, seen): (String, String) = (field(v, "dump_time")?, field(v, "seen")?);
            let elsewhere: Option<String> = match v.get("typed_elsewhere") {
                Some(_) => Some(field(v, "typed_elsewhere")?),
                None => None,
            };
            compare::editor_same_text(&c.name, &dump, Ok(&seen), elsewhere.as_deref())
        }
        Kind::WorkspaceSwitched => compare::session::workspace_switched(
            &c.name,
            field(v, "before")?,
            field(v, "asked")?,
            field(v, "count")?,
            Ok(field(v, "seen")?),
        ),
        Kind::SameWorkspace => {
            let elsewhere: Option<u32> = match v.get("switched_elsewhere") {
                Some(_) => Some(field(v, "switched_elsewhere")?),
                None => None,
            };
            compare::session::same_workspace(
                &c.name,
                field(v, "dump_time")?,
                Ok(field(v, "seen")?),
                elsewhere,
            )
        }
        Kind::SameFramebuffer => {
            let (want_png, seen_png): (String, String) =
                (field(v, "expected_png")?, field(v, "seen_png")?);
            if want_png == seen_png {
                return Err(format!("it compares {want_png} with itself"));
            }
            for (png, sha) in [(&want_png, "expected_sha256"), (&seen_png, "seen_sha256")] {
                let recorded: String = field(v, sha)?;
                let here = frames.pixel_sha256(png)?;
                if here != recorded {
                    return Err(format!(
                        "the pixels of {png} hash to {here}, not the recorded {sha} {recorded}"
                    ));
                }
            }
            compare::same_framebuffer(
                &c.name,
                (&frames.pixel_sha256(&want_png)?, &want_png),
                (&frames.pixel_sha256(&seen_png)?, &seen_png),
                "",
            )
        }
    };
    if again.passed {
        Ok(())
    } else {
        let mut seen = c.value.to_string();
        if seen.len() > MAX_VALUE_SHOWN {
            let cut = (0..=MAX_VALUE_SHOWN)
                .rev()
                .find(|i| seen.is_char_boundary(*i))
                .unwrap_or(0);
            seen.truncate(cut);
            seen.push_str("...");
        }
        Err(format!(
            "its values {seen} are not {}",
            if again.expected.is_empty() {
                "two equal frames".to_string()
            } else {
                again.expected
            }
        ))
    }
}

/// One field of a check's value, as the comparison takes it.
fn field<T: serde::de::DeserializeOwned>(v: &Value, key: &str) -> Result<T, String> {
    let f = v
        .get(key)
        .ok_or_else(|| format!("its value has no {key}"))?;
    serde_json::from_value(f.clone()).map_err(|e| format!("its {key} does not read: {e}"))
}

/// Pixel hashes of the report's PNGs, each file read and decoded once, within bounds and
/// without following links.
struct Frames<'a> {
    dir: &'a ReportDir,
    /// Where the guest's files are in the report directory: `guest/` in a vm-run report.
    prefix: String,
    seen: BTreeMap<String, Result<String, String>>,
}

impl<'a> Frames<'a> {
    fn new(dir: &'a ReportDir, prefix: String) -> Self {
        Frames {
            dir,
            prefix,
            seen: BTreeMap::new(),
        }
    }

    /// sha256 of the PNG's pixels as tightly packed RGB, as the guest hashes a frame it grabs.
    fn pixel_sha256(&mut self, rel: &str) -> Result<String, String> {
        let (dir, prefix) = (self.dir, &self.prefix);
        self.seen
            .entry(rel.to_string())
            .or_insert_with(|| {
                if !digest::relative_name_ok(rel) || !rel.ends_with(".png") {
                    return Err(format!("{rel:?} is not a PNG inside the report"));
                }
                let at = format!("{prefix}{rel}");
                dir.bytes(&at, MAX_PNG_BYTES)
                    .map_err(anyhow::Error::msg)
                    .and_then(|f| pixels::decode(f.bytes().unwrap_or_default()))
                    .map(|img| digest::sha256_hex(&img.data))
                    .map_err(|e| format!("{rel}: {e:#}"))
            })
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::reader::tests::Scratch;
    use hostile_gate::honest;
    use serde_json::json;
    use std::path::Path;

    /// A scratch directory holding the honest PNGs, removed at the end.
    fn honest_dir(name: &str) -> Scratch {
        let s = Scratch::new(&format!("recheck-{name}"));
        honest::write_pngs(&s.0).unwrap();
        s
    }

    /// The ten gates, PASS but the review, with the honest checks (no vm: the PNGs are in the
    /// report directory itself).
    fn honest_report() -> Report {
        let mut r = crate::judge::review::tests::fresh_report();
        r.vm = None;
        for (gate, c) in honest::checks() {
            if let Some(g) = r.gate_mut(gate) {
                g.checks.push(c);
            }
        }
        r
    }

    fn check_mut<'a>(r: &'a mut Report, gate: GateName, name: &str) -> &'a mut Check {
        let g = r.gate_mut(gate).unwrap();
        g.checks.iter_mut().find(|c| c.name == name).unwrap()
    }

    fn at(dir: &Path) -> ReportDir {
        ReportDir::open(dir).unwrap()
    }

    fn one_problem(r: &Report, dir: &Path, needle: &str) {
        let p = problems(r, &at(dir));
        assert!(
            p.iter().any(|m| m.contains(needle)),
            "{needle:?} not in {p:#?}"
        );
    }

    #[test]
    fn an_honest_report_agrees_with_the_host() {
        let s = honest_dir("honest");
        assert_eq!(problems(&honest_report(), &at(&s.0)), Vec::<String>::new());
    }

    /// The honest report with a VM fork copy's checks in its live probe, made from the honest
    /// restore checks they share a value shape with.
    fn fork_copy_report() -> Report {
        let mut r = honest_report();
        for ((name, _), (gate, from)) in FORK_CHECKS.iter().zip([
            (GateName::RestoreLiveProcess, "same_token"),
            (GateName::RestoreLiveProcess, "counter_continues"),
            (GateName::RestoreXState, "same_windows"),
            (GateName::RestoreXState, "same_framebuffer"),
        ]) {
            let mut c = check_mut(&mut r, gate, from).clone();
            c.name = name.to_string();
            r.gate_mut(GateName::LiveStateProbe).unwrap().checks.push(c);
        }
        r
    }

    #[test]
    fn a_vm_fork_copys_claims_are_judged_again() {
        let s = honest_dir("fork");
        assert_eq!(
            problems(&fork_copy_report(), &at(&s.0)),
            Vec::<String>::new()
        );
        for (name, field, forged) in [
            (
                "fork_token_kept",
                "seen",
                json!("ffffffffffffffffffffffffffffffff"),
            ),
            ("fork_counter_continues", "seen", json!(1_000_025)),
            ("fork_same_windows", "seen", json!([])),
            (
                "fork_same_framebuffer",
                "seen_sha256",
                json!("0".repeat(64)),
            ),
        ] {
            let mut r = fork_copy_report();
            check_mut(&mut r, GateName::LiveStateProbe, name).value[field] = forged;
            one_problem(&r, &s.0, &format!("live_state_probe.{name} passed, but"));
        }
    }

    #[test]
    fn forged_values_are_caught_by_the_comparison_the_guest_claims_it_ran() {
        let s = honest_dir("forged");
        let cases: [(GateName, &str, &str, serde_json::Value, &str); 5] = [
            (
                GateName::RestoreLiveProcess,
                "same_token",
                "seen",
                json!("ffffffffffffffffffffffffffffffff"),
                "restore_live_process.same_token passed, but",
            ),
            (
                GateName::Isolation,
                "b_counter_continues",
                "seen",
                json!(1_000_025),
                "isolation.b_counter_continues passed, but",
            ),
            (
                GateName::Reset,
                "counter_advances",
                "second",
                json!(3),
                "reset.counter_advances passed, but",
            ),
            (
                GateName::RestoreXState,
                "same_windows",
                "seen",
                json!([]),
                "restore_x_state.same_windows passed, but",
            ),
            (
                GateName::LiveStateProbe,
                "counter_advances",
                "second_token",
                json!("another"),
                "live_state_probe.counter_advances passed, but",
            ),
        ];
        for (gate, name, field, forged, says) in cases {
            let mut r = honest_report();
            check_mut(&mut r, gate, name).value[field] = forged;
            one_problem(&r, &s.0, says);
        }
        // The guest chose the values: a problem quotes only the start of them.
        let mut r = honest_report();
        check_mut(&mut r, GateName::Reset, "same_token").value["seen"] = json!("é".repeat(50_000));
        let p = problems(&r, &at(&s.0));
        assert!(
            p.len() == 1 && p[0].len() < 1024 && p[0].contains("..."),
            "{p:?}"
        );
    }

    #[test]
    fn framebuffer_claims_are_held_against_the_pixels_of_the_pngs() {
        let s = honest_dir("pixels");
        // Copy a's screen is not the dump's, though the check claims the dump-time hash.
        let mut other = honest::frame();
        other.rgb[5] ^= 0x10;
        honest::write_png(&other, &s.0.join("png/restored-a.png")).unwrap();
        one_problem(
            &honest_report(),
            &s.0,
            "restore_x_state.same_framebuffer passed, but the host's own comparison fails: the pixels of png/restored-a.png hash to",
        );

        let s = honest_dir("pixels-2");
        for (field, value, says) in [
            (
                "seen_png",
                "png/dump-time.png",
                "compares png/dump-time.png with itself",
            ),
            ("seen_png", "png/nowhere.png", "png/nowhere.png:"),
            (
                "seen_png",
                "../outside.png",
                "is not a PNG inside the report",
            ),
            ("seen_sha256", "00", "not the recorded seen_sha256 00"),
        ] {
            let mut r = honest_report();
            check_mut(&mut r, GateName::Reset, "same_framebuffer").value[field] = json!(value);
            one_problem(&r, &s.0, says);
        }
    }

    #[test]
    fn a_pass_without_a_rechecked_check_is_named() {
        let s = honest_dir("missing");
        let mut r = honest_report();
        let g = r.gate_mut(GateName::Isolation).unwrap();
        g.checks.retain(|c| c.name != "b_same_framebuffer");
        one_problem(
            &r,
            &s.0,
            "report.json says isolation PASS, but it lacks the check b_same_framebuffer",
        );
        // A gate that did not pass need not carry it, and a failed check is not judged again.
        let mut r = honest_report();
        let g = r.gate_mut(GateName::Isolation).unwrap();
        g.status = Status::Fail;
        g.checks.retain(|c| c.name != "b_same_framebuffer");
        let c = check_mut(&mut r, GateName::Reset, "same_token");
        c.passed = false;
        c.value = json!({"error": "no answer"});
        assert_eq!(problems(&r, &at(&s.0)), Vec::<String>::new());
    }

    #[test]
    fn copies_held_against_different_dumps_are_named() {
        let s = honest_dir("dumps");
        let mut r = honest_report();
        let other = "fedcba9876543210fedcba9876543210";
        let c = check_mut(&mut r, GateName::Reset, "same_token");
        c.value = json!({"dump_time": other, "seen": other});
        one_problem(
            &r,
            &s.0,
            "restore_live_process.same_token and reset.same_token hold the copies against different dump-time tokens",
        );
    }

    /// A desktop run: the editor's checks beside the honest ones.
    fn desktop_report() -> Report {
        typed_text_report(Workload::Desktop)
    }

    /// A run of an editor workload (`w`): its typed-text checks, named with its word, beside
    /// the honest ones.
    fn typed_text_report(w: Workload) -> Report {
        let mut r = honest_report();
        r.options.workload = w;
        let word = w.typed_text_word().unwrap();
        let text = "0123456789abcdef0123456789abcdef";
        let add =
            |r: &mut Report, gate: GateName, c: Check| r.gate_mut(gate).unwrap().checks.push(c);
        add(
            &mut r,
            GateName::LiveStateProbe,
            compare::editor_holds_typed(&format!("{word}_holds_typed_text"), text, Ok(text)),
        );
        for (gate, prefix, elsewhere) in [
            (GateName::RestoreLiveProcess, "", None),
            (GateName::Isolation, "b_", Some(" changed-1a2b3c4d")),
            (GateName::Reset, "", Some(" changed-5e6f7a8b")),
        ] {
            let name = format!("{prefix}{word}_same_text");
            add(
                &mut r,
                gate,
                compare::editor_same_text(&name, text, Ok(text), elsewhere),
            );
        }
        r
    }

    #[test]
    fn the_document_checks_of_an_office_run_are_judged_again() {
        let s = honest_dir("office");
        let office = || typed_text_report(Workload::Office);
        assert_eq!(problems(&office(), &at(&s.0)), Vec::<String>::new());
        // Copy b's document claimed to pass while it holds what was typed into copy a.
        let mut r = office();
        check_mut(&mut r, GateName::Isolation, "b_office_same_text").value["seen"] =
            json!("0123456789abcdef0123456789abcdef changed-1a2b3c4d");
        one_problem(&r, &s.0, "isolation.b_office_same_text passed, but");
        let mut r = office();
        check_mut(&mut r, GateName::Reset, "office_same_text").value["seen"] = json!("");
        one_problem(&r, &s.0, "reset.office_same_text passed, but");
        let mut r = office();
        check_mut(&mut r, GateName::LiveStateProbe, "office_holds_typed_text").value["read"] =
            json!("0123");
        one_problem(
            &r,
            &s.0,
            "live_state_probe.office_holds_typed_text passed, but",
        );
        let mut r = office();
        r.gate_mut(GateName::RestoreLiveProcess)
            .unwrap()
            .checks
            .retain(|c| c.name != "office_same_text");
        one_problem(
            &r,
            &s.0,
            "restore_live_process PASS, but it lacks the check office_same_text",
        );
        // The desktop's names do not stand in for the office's.
        let mut r = desktop_report();
        r.options.workload = Workload::Office;
        assert!(!problems(&r, &at(&s.0)).is_empty());
    }

    #[test]
    fn the_editor_checks_of_a_desktop_run_are_judged_again() {
        let s = honest_dir("desktop");
        assert_eq!(problems(&desktop_report(), &at(&s.0)), Vec::<String>::new());
        // Copy b's editor claimed to pass while it holds what was typed into copy a.
        let mut r = desktop_report();
        check_mut(&mut r, GateName::Isolation, "b_editor_same_text").value["seen"] =
            json!("0123456789abcdef0123456789abcdef changed-1a2b3c4d");
        one_problem(&r, &s.0, "isolation.b_editor_same_text passed, but");
        // A reset copy whose editor lost its text.
        let mut r = desktop_report();
        check_mut(&mut r, GateName::Reset, "editor_same_text").value["seen"] = json!("");
        one_problem(&r, &s.0, "reset.editor_same_text passed, but");
        let mut r = desktop_report();
        check_mut(&mut r, GateName::LiveStateProbe, "editor_holds_typed_text").value["read"] =
            json!("");
        one_problem(
            &r,
            &s.0,
            "live_state_probe.editor_holds_typed_text passed, but",
        );
        // Copies held against different dump-time texts.
        let mut r = desktop_report();
        let c = check_mut(&mut r, GateName::Reset, "editor_same_text");
        c.value["dump_time"] = json!("other");
        c.value["seen"] = json!("other");
        one_problem(&r, &s.0, "against different dump-time editor texts");
        // A PASS without the editor's check, in a desktop run only.
        let mut r = desktop_report();
        r.gate_mut(GateName::Reset)
            .unwrap()
            .checks
            .retain(|c| c.name != "editor_same_text");
        one_problem(
            &r,
            &s.0,
            "reset PASS, but it lacks the check editor_same_text",
        );
        r.options.workload = Workload::Xterm;
        assert_eq!(problems(&r, &at(&s.0)), Vec::<String>::new());
    }

    /// A session run: the workspace checks beside the honest ones.
    fn session_report() -> Report {
        let mut r = honest_report();
        r.options.workload = Workload::Session;
        let add =
            |r: &mut Report, gate: GateName, c: Check| r.gate_mut(gate).unwrap().checks.push(c);
        add(
            &mut r,
            GateName::LiveStateProbe,
            compare::session::workspace_switched("workspace_switched", 0, 2, 4, Ok(2)),
        );
        for (gate, name, elsewhere) in [
            (GateName::RestoreLiveProcess, "workspace_same", None),
            (GateName::Isolation, "b_workspace_same", Some(3)),
            (GateName::Reset, "workspace_same", Some(1)),
        ] {
            add(
                &mut r,
                gate,
                compare::session::same_workspace(name, 2, Ok(2), elsewhere),
            );
        }
        r
    }

    #[test]
    fn the_workspace_checks_of_a_session_run_are_judged_again() {
        let s = honest_dir("session");
        assert_eq!(problems(&session_report(), &at(&s.0)), Vec::<String>::new());
        // Copy b claimed to pass while it shows the workspace copy a was switched to.
        let mut r = session_report();
        check_mut(&mut r, GateName::Isolation, "b_workspace_same").value["seen"] = json!(3);
        one_problem(&r, &s.0, "isolation.b_workspace_same passed, but");
        // A reset copy back on the first workspace: a fresh session, not the dumped one.
        let mut r = session_report();
        check_mut(&mut r, GateName::Reset, "workspace_same").value["seen"] = json!(0);
        one_problem(&r, &s.0, "reset.workspace_same passed, but");
        let mut r = session_report();
        check_mut(&mut r, GateName::LiveStateProbe, "workspace_switched").value["seen"] = json!(0);
        one_problem(&r, &s.0, "live_state_probe.workspace_switched passed, but");
        // Copies held against different dump-time workspaces.
        let mut r = session_report();
        let c = check_mut(&mut r, GateName::Reset, "workspace_same");
        c.value["dump_time"] = json!(3);
        c.value["seen"] = json!(3);
        one_problem(&r, &s.0, "against different dump-time workspaces");
        let mut r = session_report();
        r.gate_mut(GateName::Reset)
            .unwrap()
            .checks
            .retain(|c| c.name != "workspace_same");
        one_problem(
            &r,
            &s.0,
            "reset PASS, but it lacks the check workspace_same",
        );
    }

    /// A chromium-nosandbox run: the page's checks and its field's beside the honest ones.
    fn chromium_report() -> Report {
        let mut r = honest_report();
        r.options.workload = Workload::ChromiumNosandbox;
        let token = "0123456789abcdef0123456789abcdef";
        let text = "89abcdef01234567";
        let app = |counter| AppState {
            token: token.into(),
            counter,
            pid: 0,
            file: None,
        };
        let add =
            |r: &mut Report, gate: GateName, c: Check| r.gate_mut(gate).unwrap().checks.push(c);
        add(
            &mut r,
            GateName::LiveStateProbe,
            compare::counter_advances("page_counter_advances", &app(3), Ok(&app(4))),
        );
        add(
            &mut r,
            GateName::LiveStateProbe,
            compare::page_field_holds_typed("page_field_holds_typed_text", text, Ok(text)),
        );
        for (gate, prefix, elsewhere) in [
            (GateName::RestoreLiveProcess, "", None),
            (GateName::Isolation, "b_", Some("-changed-1a2b3c4d")),
            (GateName::Reset, "", Some("-changed-5e6f7a8b")),
        ] {
            let n = |name: &str| format!("{prefix}{name}");
            add(
                &mut r,
                gate,
                compare::same_token(&n("page_same_token"), token, token),
            );
            add(
                &mut r,
                gate,
                compare::counter_continues(
                    &n("page_counter_continues"),
                    40,
                    Duration::from_secs(5),
                    60,
                ),
            );
            add(
                &mut r,
                gate,
                compare::counter_advances(&n("page_counter_advances"), &app(60), Ok(&app(61))),
            );
            add(
                &mut r,
                gate,
                compare::page_field_same_text(
                    &n("page_field_same_text"),
                    text,
                    Ok(text),
                    elsewhere,
                ),
            );
        }
        r
    }

    #[test]
    fn the_page_field_checks_of_a_chromium_run_are_judged_again() {
        let s = honest_dir("chromium");
        assert_eq!(
            problems(&chromium_report(), &at(&s.0)),
            Vec::<String>::new()
        );
        // Copy b's field claimed to pass while it shows what was typed into copy a.
        let mut r = chromium_report();
        check_mut(&mut r, GateName::Isolation, "b_page_field_same_text").value["seen"] =
            json!("89abcdef01234567-changed-1a2b3c4d");
        one_problem(&r, &s.0, "isolation.b_page_field_same_text passed, but");
        let mut r = chromium_report();
        check_mut(
            &mut r,
            GateName::LiveStateProbe,
            "page_field_holds_typed_text",
        )
        .value["read"] = json!("");
        one_problem(
            &r,
            &s.0,
            "live_state_probe.page_field_holds_typed_text passed, but",
        );
        // Copies held against different dump-time field texts.
        let mut r = chromium_report();
        let c = check_mut(&mut r, GateName::Reset, "page_field_same_text");
        c.value["dump_time"] = json!("other");
        c.value["seen"] = json!("other");
        one_problem(&r, &s.0, "against different dump-time field texts");
        // A PASS without the field's check.
        let mut r = chromium_report();
        r.gate_mut(GateName::Reset)
            .unwrap()
            .checks
            .retain(|c| c.name != "page_field_same_text");
        one_problem(
            &r,
            &s.0,
            "reset PASS, but it lacks the check page_field_same_text",
        );
    }

    #[test]
    fn a_vm_run_report_has_the_guest_pngs_under_guest() {
        let s = honest_dir("vm");
        let mut r = honest_report();
        r.vm = Some(Default::default());
        one_problem(&r, &s.0, "png/live-first.png:");
        honest::write_pngs(&s.0.join(report::GUEST_DIR)).unwrap();
        assert_eq!(problems(&r, &at(&s.0)), Vec::<String>::new());
    }
}
