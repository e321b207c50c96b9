//! `show` in each format (junit, html, md), `diff`, `list`, and a report of another schema
//! version.

use super::{code, read_report, rig, rig_in, stderr, stdout, write_report};
use crate::common::scratch::Scratch;
use sharedos_report::digest;
use sharedos_report::report::Status;

#[test]
fn junit_is_xml_with_ten_testcases() {
    let s = Scratch::new("junit");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| {
        r.gates[3].status = Status::Fail;
        r.gates[3].reason = "criu said <error> & \"quit\"".into();
        r.gates[4].status = Status::NotRun;
    });
    let o = rig_in(&dir, &["show", "DIR", "--format", "junit"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let xml = stdout(&o);
    let doc = roxmltree::Document::parse(&xml).unwrap();
    let suite = doc
        .descendants()
        .find(|n| n.has_tag_name("testsuite"))
        .unwrap();
    assert_eq!(suite.attribute("name"), Some("sharedos-rig"));
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .collect();
    assert_eq!(cases.len(), 10);
    let dump = cases
        .iter()
        .find(|c| c.attribute("name") == Some("dump"))
        .unwrap();
    let failure = dump.children().find(|n| n.has_tag_name("failure")).unwrap();
    assert_eq!(
        failure.attribute("message"),
        Some("criu said <error> & \"quit\"")
    );
    let skipped = cases
        .iter()
        .filter(|c| c.children().any(|n| n.has_tag_name("skipped")))
        .count();
    assert_eq!(
        skipped, 2,
        "restore_live_process NOT_RUN and the GUI review"
    );
}

#[test]
fn html_embeds_every_png_with_its_hash() {
    let s = Scratch::new("html");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |_| {});
    let o = rig_in(&dir, &["show", "DIR", "--format", "html"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let html = stdout(&o);
    for a in read_report(&dir).png_artifacts() {
        assert!(html.contains(&a.sha256), "missing {}", a.sha256);
        let bytes = std::fs::read(dir.join(&a.path)).unwrap();
        let uri = format!("data:image/png;base64,{}", digest::base64(&bytes, true));
        assert!(html.contains(&uri), "{} not embedded", a.path);
    }
    let again = stdout(&rig_in(&dir, &["show", "DIR", "--format", "html"]));
    assert_eq!(html, again, "html must be deterministic");
    // The same report elsewhere renders to the same page, so screenshots compare.
    let moved = s.0.join("elsewhere").join("r");
    std::fs::create_dir_all(moved.parent().unwrap()).unwrap();
    std::fs::rename(&dir, &moved).unwrap();
    let there = stdout(&rig_in(&moved, &["show", "DIR", "--format", "html"]));
    assert_eq!(
        html, there,
        "html must not depend on where the report lives"
    );
    std::fs::rename(&moved, &dir).unwrap();

    let md = stdout(&rig_in(&dir, &["show", "DIR", "--format", "md"]));
    assert!(
        md.starts_with("# sharedos-rig report: REVIEW_REQUIRED"),
        "{md}"
    );
}

#[test]
fn diff_shows_no_change_with_itself_and_the_differing_gate_otherwise() {
    let s = Scratch::new("diff");
    let a = s.0.join("a");
    let b = s.0.join("b");
    write_report(&a, "2026-11-30T20:15:00.000Z", |_| {});
    write_report(&b, "2026-12-01T08:00:00.000Z", |r| {
        r.gates[5].status = Status::Fail;
        r.gates[5].reason = "framebuffer differs".into();
        r.gates[0].duration_ms *= 3;
        r.environment.kernel_release = "6.12.9-amd64".into();
    });
    let same = rig(&["diff", a.to_str().unwrap(), a.to_str().unwrap()]);
    assert_eq!(code(&same), 0);
    assert!(
        stdout(&same).contains("no differences"),
        "{}",
        stdout(&same)
    );

    let d = rig(&["diff", a.to_str().unwrap(), b.to_str().unwrap()]);
    assert_eq!(code(&d), 0);
    let out = stdout(&d);
    assert!(out.contains("restore_x_state: PASS -> FAIL"), "{out}");
    assert!(
        out.contains("kernel release: 6.1.0-28-amd64 -> 6.12.9-amd64"),
        "{out}"
    );
    assert!(out.contains("x3.00"), "{out}");
    assert!(!out.contains("no differences:"), "{out}");

    let missing = rig(&[
        "diff",
        a.to_str().unwrap(),
        s.0.join("nope").to_str().unwrap(),
    ]);
    assert_eq!(code(&missing), 2);
    assert!(
        stderr(&missing).starts_with("error: reading report B"),
        "{}",
        stderr(&missing)
    );
}

#[test]
fn list_is_newest_first_and_names_unreadable_entries() {
    let s = Scratch::new("list");
    write_report(&s.0.join("old"), "2026-01-01T00:00:00.000Z", |r| {
        r.vm = None
    });
    write_report(&s.0.join("new"), "2026-12-01T00:00:00.000Z", |_| {});
    std::fs::create_dir_all(s.0.join("broken")).unwrap();
    std::fs::write(s.0.join("broken/report.json"), b"{not json").unwrap();
    let o = rig_in(&s.0, &["list", "DIR"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert!(
        lines[0].contains("2026-12-01") && lines[0].contains("5e5e5e5e5e5e"),
        "{out}"
    );
    assert!(
        lines[0].contains("tcg") && lines[0].contains("review:none"),
        "{out}"
    );
    assert!(
        lines[1].contains("2026-01-01") && lines[1].contains("host"),
        "{out}"
    );
    assert!(
        lines[2].starts_with("UNREADABLE") && lines[2].contains("broken"),
        "{out}"
    );

    let none = rig(&["list", s.0.join("nope").to_str().unwrap()]);
    assert_eq!(code(&none), 2);
}

#[test]
fn another_schema_version_is_refused_clearly() {
    let s = Scratch::new("schema");
    let dir = s.0.join("r");
    write_report(&dir, "2026-11-30T20:15:00.000Z", |r| r.schema_version = 99);
    let o = rig_in(&dir, &["show", "DIR"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("schema_version is 99"),
        "{}",
        stderr(&o)
    );
    // To verify, a report.json that cannot be read is a verdict: FAIL, exit 1.
    let v = rig_in(&dir, &["verify", "DIR"]);
    assert_eq!(code(&v), 1);
    assert!(
        stdout(&v).contains("schema_version is 99"),
        "{}",
        stdout(&v)
    );
    assert!(
        stdout(&v)
            .lines()
            .last()
            .unwrap()
            .starts_with("verdict:   FAIL (exit 1)"),
        "{}",
        stdout(&v)
    );
}
