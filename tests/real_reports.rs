//! The CLI on real reports: the real `sharedos-gate diagnose` runs twice on this machine (as root:
//! namespaces, Xvfb, xterm, the probe app; CRIU as far as this kernel allows), then every format
//! is rendered from what it wrote, two runs are compared, listed, reviewed and verified, and the
//! html page is screenshot in headless Chromium.
//!
//! As any user but root the tests print a loud SKIPPED line and pass, or fail when `CI` is set:
//! the diagnostic needs root.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;
use common::chromium::{
    find_image, has_colour_above, match_share, screenshot, Rgb, SHOT_H, SHOT_W,
};
use common::{assert_not_timed_out, bounded};
use sharedos_report::digest;
use sharedos_report::report::{GateName, Report, Status, REPORT_FILE, REVIEW_FILE};
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::sync::OnceLock;

const RIG: &str = env!("CARGO_BIN_EXE_sharedos-rig");
/// Bound on one diagnostic run; its own steps are bounded by --step-timeout.
const DIAGNOSE_TIMEOUT_S: u32 = 600;

fn skip_unless_root(test: &str) -> bool {
    if nix::unistd::geteuid().is_root() {
        return false;
    }
    common::skip::cannot_run(
        test,
        "it runs the real `sharedos-gate diagnose`, which needs root (namespaces, mounts, CRIU); \
         run as root: `cargo test --test real_reports`",
    );
    true
}

fn gate_binary() -> PathBuf {
    common::cargo_binary("sharedos-gate")
}

const PREFIX: &str = "sharedos-rig-real-";

/// Removes what earlier runs of this test binary left (the fixture lives as long as the process,
/// so it cannot clean up after itself): directories whose pid is no longer alive.
fn remove_stale_roots() {
    let Ok(rd) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(pid) = name.strip_prefix(PREFIX) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Two real reports under `<root>/reports/`, written one after the other.
struct Runs {
    root: PathBuf,
    reports: PathBuf,
    a: PathBuf,
    b: PathBuf,
    ra: Report,
    rb: Report,
}

static RUNS: OnceLock<Runs> = OnceLock::new();

fn runs() -> &'static Runs {
    RUNS.get_or_init(|| {
        remove_stale_roots();
        let pid = std::process::id();
        let root = std::env::temp_dir().join(format!("{PREFIX}{pid}"));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).unwrap();
        let gate = gate_binary();
        // Displays apart from the guest crate's own tests (400..2409), distinct per run.
        let display = 2500 + (pid % 600) * 2;
        let (a, ra) = diagnose(&gate, &root, "run-a", display);
        let (b, rb) = diagnose(&gate, &root, "run-b", display + 1);
        Runs {
            reports: root.join("reports"),
            root,
            a,
            b,
            ra,
            rb,
        }
    })
}

fn diagnose(gate: &Path, root: &Path, name: &str, display: u32) -> (PathBuf, Report) {
    let dir = root.join("reports").join(name);
    let out = bounded(DIAGNOSE_TIMEOUT_S, gate)
        .arg("diagnose")
        .arg("--work")
        .arg(root.join(format!("work-{name}")))
        .arg("--out")
        .arg(dir.join(REPORT_FILE))
        .arg("--marker")
        .arg(format!("rr-{}-{name}", std::process::id()))
        .arg("--display")
        .arg(format!(":{display}"))
        .output()
        .expect("running sharedos-gate diagnose");
    assert_not_timed_out(&out, "sharedos-gate diagnose");
    let text = std::fs::read_to_string(dir.join(REPORT_FILE)).unwrap_or_else(|e| {
        panic!(
            "diagnose wrote no report in {}: {e}\nstderr:\n{}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    let report: Report = serde_json::from_str(&text).unwrap();
    assert_eq!(
        out.status.code(),
        Some(report.exit_code),
        "diagnose's exit code is the report's"
    );
    assert_eq!(report.gates.len(), GateName::ALL.len());
    (dir, report)
}

fn rig(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = bounded(60, RIG);
    for a in args {
        c.arg(a);
    }
    // A review ledger of this run's own, under its root.
    c.env("SHAREDOS_RIG_STATE_DIR", runs().root.join("state"));
    let o = c.output().expect("running sharedos-rig");
    assert_not_timed_out(&o, "sharedos-rig");
    o
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn show(dir: &Path, format: &str) -> String {
    let o = rig(&[&"show", &dir, &"--format", &format]);
    assert_eq!(
        o.status.code(),
        Some(0),
        "show --format {format}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout(&o)
}

fn status(r: &Report, n: GateName) -> Status {
    r.gate(n).unwrap().status
}

fn token(r: &Report) -> String {
    let c = r
        .gate(GateName::LiveStateProbe)
        .and_then(|g| g.check("token_is_32_hex"))
        .unwrap_or_else(|| panic!("live_state_probe has no token check: {:?}", r.gates[2]));
    c.value.as_str().unwrap().to_string()
}

/// A scratch copy of a report directory, for the tests that write into one.
fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let t = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &t);
        } else {
            std::fs::copy(e.path(), &t).unwrap();
        }
    }
}

#[test]
fn every_format_renders_from_a_real_report() {
    if skip_unless_root("every_format_renders_from_a_real_report") {
        return;
    }
    let r = runs();
    let verdict = sharedos_report::report::verdict(&r.ra.gates);
    let text = show(&r.a, "text");
    assert!(
        text.starts_with(&format!("verdict: {verdict} (exit {})", r.ra.exit_code)),
        "{text}"
    );
    assert!(text.contains(&r.ra.environment.kernel_release), "{text}");
    let md = show(&r.a, "md");
    assert!(
        md.starts_with(&format!("# sharedos-rig report: {verdict}")),
        "{md}"
    );
    for g in &r.ra.gates {
        assert!(
            md.contains(&format!("`{}`", g.name)),
            "{} missing: {md}",
            g.name
        );
        assert!(text.contains(g.name.as_str()), "{} missing: {text}", g.name);
    }
    let html = show(&r.a, "html");
    assert!(html.starts_with("<!DOCTYPE html>") && html.ends_with("</html>\n"));
    let junit = show(&r.a, "junit");
    roxmltree::Document::parse(&junit).unwrap_or_else(|e| panic!("{e}\n{junit}"));
    // The default format is text.
    let o = rig(&[&"show", &r.a]);
    assert_eq!(stdout(&o), text);
}

#[test]
fn junit_of_a_real_report_has_one_testcase_per_gate() {
    if skip_unless_root("junit_of_a_real_report_has_one_testcase_per_gate") {
        return;
    }
    let r = runs();
    let x = show(&r.a, "junit");
    let doc = roxmltree::Document::parse(&x).unwrap_or_else(|e| panic!("{e}\n{x}"));
    let cases: Vec<roxmltree::Node> = doc
        .descendants()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    let names: Vec<&str> = cases.iter().filter_map(|c| c.attribute("name")).collect();
    let expected: Vec<&str> = GateName::ALL.iter().map(|g| g.as_str()).collect();
    // A fresh real report is intact, so there is no report_integrity case.
    assert_eq!(names, expected, "{x}");
    let (mut failures, mut skipped) = (0, 0);
    for (case, gate) in cases.iter().zip(&r.ra.gates) {
        let child = |tag: &str| case.children().find(|n| n.has_tag_name(tag));
        let (failure, skip) = (child("failure"), child("skipped"));
        assert!(child("error").is_none(), "{x}");
        match gate.status {
            Status::Pass => assert!(failure.is_none() && skip.is_none(), "{}", gate.name),
            Status::Fail => {
                failures += 1;
                let f = failure.unwrap_or_else(|| panic!("{} FAIL without <failure>", gate.name));
                assert_eq!(f.attribute("message"), Some(gate.reason.as_str()));
                assert_eq!(f.attribute("type"), Some("FAIL"));
                assert!(skip.is_none());
            }
            Status::NotRun | Status::ReviewRequired => {
                skipped += 1;
                let s = skip.unwrap_or_else(|| panic!("{} {} not skipped", gate.name, gate.status));
                assert_eq!(s.attribute("message"), Some(gate.reason.as_str()));
                assert_eq!(s.attribute("type"), Some(gate.status.as_str()));
                assert!(failure.is_none());
            }
        }
    }
    // The GUI gate waits for a human in every fresh report: skipped, with its reason.
    assert_eq!(
        status(&r.ra, GateName::GuiPixelReview),
        Status::ReviewRequired
    );
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("tests"), Some("10"));
    assert_eq!(suite.attribute("failures"), Some(&*failures.to_string()));
    assert_eq!(suite.attribute("skipped"), Some(&*skipped.to_string()));
    assert_eq!(suite.attribute("errors"), Some("0"));
    let prop = |name: &str| {
        doc.descendants()
            .find(|n| n.has_tag_name("property") && n.attribute("name") == Some(name))
            .and_then(|n| n.attribute("value"))
            .map(str::to_string)
    };
    assert_eq!(
        prop("kernel release").as_deref(),
        Some(r.ra.environment.kernel_release.as_str())
    );
    assert_eq!(prop("exit_code"), Some(r.ra.exit_code.to_string()));
}

#[test]
fn html_of_a_real_report_carries_every_png_hash_and_the_gate_table() {
    if skip_unless_root("html_of_a_real_report_carries_every_png_hash_and_the_gate_table") {
        return;
    }
    let r = runs();
    let h = show(&r.a, "html");
    let pngs: Vec<_> = r.ra.png_artifacts().collect();
    assert!(!pngs.is_empty(), "the diagnostic captured no PNG");
    for a in &pngs {
        let bytes = std::fs::read(r.a.join(&a.path)).unwrap();
        assert_eq!(digest::sha256_hex(&bytes), a.sha256);
        assert!(
            h.contains(&format!("sha256 <code>{}</code>", a.sha256)),
            "no sha256 of {} under its image",
            a.path
        );
        assert!(
            h.contains(&format!(
                "<img src=\"data:image/png;base64,{}\"",
                digest::base64(&bytes, true)
            )),
            "{} is not embedded byte for byte",
            a.path
        );
    }
    assert!(!h.contains("not embedded") && !h.contains("MISMATCH"));
    let table = h.find("<h2>Gates</h2>").expect("no gate table");
    for g in &r.ra.gates {
        let row = format!(
            "<tr><td><a href=\"#gate-{n}\"><code>{n}</code></a></td><td class=\"status\"><span class=\"s-{s}\">{s}</span></td>",
            n = g.name,
            s = g.status
        );
        let at = h
            .find(&row)
            .unwrap_or_else(|| panic!("no row for {}", g.name));
        assert!(at > table);
    }
    let first_img = h.find("<img ").unwrap();
    assert!(table < first_img, "the gate table comes before the images");
    for needle in ["http://", "https://", "<script", "<link"] {
        assert!(
            !h.contains(needle),
            "the page is not self-contained: {needle}"
        );
    }
    assert!(h.contains(&r.ra.environment.boot_id), "provenance missing");
}

#[test]
fn diff_of_a_real_report_with_itself_reports_no_change() {
    if skip_unless_root("diff_of_a_real_report_with_itself_reports_no_change") {
        return;
    }
    let r = runs();
    let o = rig(&[&"diff", &r.a, &r.a]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(
        s.trim_end().lines().last().unwrap().starts_with(
            "no differences: verdict, gate statuses, checks, provenance and timings are identical"
        ),
        "{s}"
    );
}

#[test]
fn diff_of_two_real_runs_shows_the_token_that_changed() {
    if skip_unless_root("diff_of_two_real_runs_shows_the_token_that_changed") {
        return;
    }
    let r = runs();
    // Each run's probe app draws a fresh random token: it must differ between the runs.
    let (ta, tb) = (token(&r.ra), token(&r.rb));
    assert_ne!(ta, tb);
    let o = rig(&[&"diff", &r.a, &r.b]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    assert!(!s.contains("no differences:"), "{s}");
    assert!(
        s.contains(&format!(
            "live_state_probe/token_is_32_hex: ok {ta} -> ok {tb}"
        )),
        "{s}"
    );
    // Same machine, same binaries: nothing in the provenance differs.
    assert!(!s.contains("provenance:"), "{s}");
    let (va, vb) = (
        sharedos_report::report::verdict(&r.ra.gates),
        sharedos_report::report::verdict(&r.rb.gates),
    );
    if va == vb {
        assert!(s.contains(&format!("verdict: {va} in both")), "{s}");
    }
    // Timings are either identical or listed gate by gate with a B/A ratio.
    assert!(
        s.contains("timings: identical") || s.contains("timings (B/A):\n  gate  prerequisites"),
        "{s}"
    );
}

#[test]
fn list_shows_both_real_runs_newest_first() {
    if skip_unless_root("list_shows_both_real_runs_newest_first") {
        return;
    }
    let r = runs();
    assert!(r.rb.environment.started_at > r.ra.environment.started_at);
    let o = rig(&[&"list", &r.reports]);
    assert_eq!(o.status.code(), Some(0));
    let s = stdout(&o);
    let lines: Vec<&str> = s.lines().collect();
    assert_eq!(lines.len(), 2, "{s}");
    for (line, (dir, rep)) in lines.iter().zip([(&r.b, &r.rb), (&r.a, &r.ra)]) {
        assert!(line.ends_with(&dir.display().to_string()), "{s}");
        assert!(line.starts_with(&rep.environment.started_at), "{line}");
        let v = sharedos_report::report::verdict(&rep.gates);
        assert!(line.contains(&format!("  {v} ")), "{line}");
        assert!(line.contains(&rep.environment.kernel_release), "{line}");
        // No image and no accelerator: the diagnostic ran directly on this host.
        assert!(line.contains("  host  "), "{line}");
        assert!(line.contains("review:none"), "{line}");
    }
}

#[test]
fn review_prints_what_it_signs_and_verify_checks_it_on_a_real_report() {
    if skip_unless_root("review_prints_what_it_signs_and_verify_checks_it_on_a_real_report") {
        return;
    }
    let r = runs();
    let dir = r.root.join("review-copy");
    let _ = std::fs::remove_dir_all(&dir);
    copy_dir(&r.a, &dir);
    let others_pass =
        r.ra.gates
            .iter()
            .all(|g| g.name == GateName::GuiPixelReview || g.status == Status::Pass);

    // Before a review: the report's own verdict.
    let o = rig(&[&"verify", &dir]);
    assert_eq!(o.status.code(), Some(r.ra.exit_code), "{}", stdout(&o));

    let o = rig(&[
        &"review",
        &dir,
        &"--decision",
        &"pass",
        &"--reviewer",
        &"real-report-test",
    ]);
    let s = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{s}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let recorded = s.find("Recorded pass by real-report-test").expect(&s);
    for a in r.ra.png_artifacts() {
        let line = format!("  {}  sha256 {}", dir.join(&a.path).display(), a.sha256);
        let at = s
            .find(&line)
            .unwrap_or_else(|| panic!("no `{line}` in:\n{s}"));
        assert!(at < recorded, "the hashes come before the recording:\n{s}");
    }
    let render = format!("sharedos-rig show {} --format html", dir.display());
    assert!(s.find(&render).expect(&s) < recorded, "{s}");
    assert!(dir.join(REVIEW_FILE).is_file());

    // The review is believed: the GUI gate is decided; the verdict is the other gates'.
    let o = rig(&[&"verify", &dir]);
    let v = stdout(&o);
    assert_eq!(
        o.status.code(),
        Some(if others_pass { 0 } else { 1 }),
        "{v}"
    );
    assert!(v.contains("review:    pass by real-report-test"), "{v}");
    assert!(v.contains("  PASS             gui_pixel_review"), "{v}");
    assert!(!v.contains("review rejected"), "{v}");
    if !others_pass {
        assert!(
            v.contains("verdict:   FAIL (exit 1): at least one gate did not pass"),
            "{v}"
        );
    }
    // A second review needs --force.
    let o = rig(&[&"review", &dir, &"--decision", &"fail", &"--reviewer", &"x"]);
    assert_eq!(o.status.code(), Some(2));

    // A review citing a wrong hash is rejected, and the GUI gate waits again.
    let path = dir.join(REVIEW_FILE);
    let text = std::fs::read_to_string(&path).unwrap();
    let png = r.ra.png_artifacts().next().unwrap();
    assert!(text.contains(&png.sha256));
    std::fs::write(&path, text.replace(&png.sha256, &"0".repeat(64))).unwrap();
    let o = rig(&[&"verify", &dir]);
    let v = stdout(&o);
    assert_eq!(o.status.code(), Some(1), "{v}");
    assert!(
        v.contains(&format!(
            "review rejected: review cites {} with sha256 {}, the report says {}",
            png.path,
            "0".repeat(64),
            png.sha256
        )),
        "{v}"
    );
    assert!(v.contains("  REVIEW_REQUIRED  gui_pixel_review"), "{v}");
    let junit = show(&dir, "junit");
    assert!(junit.contains("name=\"report_integrity\""), "{junit}");

    // A PNG changed after the run: review refuses to sign it.
    std::fs::remove_file(&path).unwrap();
    let mut bytes = std::fs::read(dir.join(&png.path)).unwrap();
    bytes.push(0);
    std::fs::write(dir.join(&png.path), bytes).unwrap();
    let o = rig(&[&"review", &dir, &"--decision", &"pass", &"--reviewer", &"x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("refusing to record a review"));
    assert!(!path.exists());
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Runs sharedos-rig with standard output a pipe nobody reads any more.
fn into_closed_pipe(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let (read_end, write_end) = nix::unistd::pipe().unwrap();
    drop(read_end);
    let mut c = bounded(60, RIG);
    for a in args {
        c.arg(a);
    }
    let o = c
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_not_timed_out(&o, "sharedos-rig");
    o
}

#[test]
fn output_into_a_closed_pipe_ends_quietly() {
    // `list` of an empty directory needs no report, so this part runs as any user.
    let empty = std::env::temp_dir().join(format!("sharedos-rig-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let o = into_closed_pipe(&[&"list", &empty]);
    std::fs::remove_dir_all(&empty).unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(err.is_empty(), "{err}");
    if skip_unless_root("output_into_a_closed_pipe_ends_quietly (real report part)") {
        return;
    }
    let r = runs();
    for args in [
        vec!["show", "A", "--format", "html"],
        vec!["show", "A", "--format", "junit"],
        vec!["diff", "A", "B"],
        vec!["verify", "A"],
    ] {
        let args: Vec<&dyn AsRef<std::ffi::OsStr>> = args
            .iter()
            .map(|a| -> &dyn AsRef<std::ffi::OsStr> {
                match *a {
                    "A" => &r.a,
                    "B" => &r.b,
                    _ => a,
                }
            })
            .collect();
        let o = into_closed_pipe(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "{err}");
        assert!(err.is_empty(), "{err}");
        // The exit code is the command's own: verify keeps its verdict.
        let want = if args.len() == 2 { r.ra.exit_code } else { 0 };
        assert_eq!(o.status.code(), Some(want), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// The html page in headless Chromium.

/// The badge colours of html.rs's stylesheet.
fn badge_colour(s: Status) -> [u8; 3] {
    match s {
        Status::Pass => [0x1a, 0x7f, 0x37],
        Status::Fail => [0xcf, 0x22, 0x2e],
        Status::NotRun => [0x6e, 0x77, 0x81],
        Status::ReviewRequired => [0x9a, 0x67, 0x00],
    }
}

#[test]
fn html_page_in_headless_chromium_shows_the_gate_table_then_the_images() {
    if skip_unless_root("html_page_in_headless_chromium_shows_the_gate_table_then_the_images") {
        return;
    }
    let r = runs();
    let work = r.root.join("chromium");
    std::fs::create_dir_all(&work).unwrap();
    let html = show(&r.a, "html");
    let page = work.join("page.html");
    std::fs::write(&page, &html).unwrap();
    // The same page without its images: what a page whose images failed to render looks like.
    let mut bare = html.clone();
    while let Some(start) = bare.find("<img src=\"data:") {
        let end = start + bare[start..].find('>').unwrap() + 1;
        bare.replace_range(start..end, "");
    }
    assert_ne!(bare, html);
    let bare_page = work.join("bare.html");
    std::fs::write(&bare_page, &bare).unwrap();

    let shot = screenshot(&work, &page, "page");
    if let Some(keep) = std::env::var_os("SHAREDOS_RIG_KEEP_SCREENSHOT") {
        std::fs::copy(work.join("page.png"), keep).unwrap();
    }
    assert_eq!((shot.width, shot.height), (SHOT_W, SHOT_H));
    let colours: HashSet<[u8; 3]> = shot.px.iter().copied().collect();
    assert!(
        colours.len() > 50,
        "a blank page: {} colours",
        colours.len()
    );

    // The framebuffer the diagnostic captured is on the page, unscaled and pixel for pixel.
    let png = r.ra.png_artifacts().next().expect("a PNG");
    let frame = Rgb::decode(&std::fs::read(r.a.join(&png.path)).unwrap());
    let origin = find_image(&shot, &frame).expect("the framebuffer is not on the screenshot");
    let share = match_share(&shot, &frame, origin);
    assert!(
        share > 0.99,
        "only {share:.3} of the framebuffer's pixels shown at {origin:?}"
    );

    // Above the image: the gate table, a badge in each status colour the report has.
    let statuses: HashSet<Status> = r.ra.gates.iter().map(|g| g.status).collect();
    for s in &statuses {
        assert!(
            has_colour_above(&shot, badge_colour(*s), origin.1),
            "no {s} badge above the image at {origin:?}"
        );
    }

    // Without the images the same place shows something else, and the framebuffer is nowhere.
    let bare_shot = screenshot(&work, &bare_page, "bare");
    assert_eq!((bare_shot.width, bare_shot.height), (SHOT_W, SHOT_H));
    assert!(find_image(&bare_shot, &frame).is_none());
    assert!(match_share(&bare_shot, &frame, origin) < 0.5);
    for s in &statuses {
        assert!(has_colour_above(&bare_shot, badge_colour(*s), origin.1));
    }
}
