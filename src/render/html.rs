//! One self-contained HTML page, in this order: the verdict, the gate table, each PNG beside the
//! dump-time one with a diff of the two, labelled with what it should show, all embedded as
//! data: URIs with their sha256 under each, then every gate's checks and evidence, the
//! provenance. No script, no external resource, and no clock, so a headless browser screenshots
//! the same page every time.

use super::{cause_quote, density, duration, provenance, short_cause, total_duration, value_str};
use crate::escape::html as esc;
use crate::judge::pixels;
use crate::judge::reader::ReportDir;
use crate::judge::review::{self, Reference, ReviewState};
use crate::judge::verdict::{verdict_meaning, Outcome};
use sharedos_report::digest;
use sharedos_report::report::{Artifact, Gate, Report, Status, Verdict, Workload};
use std::fmt::Write;

/// A framebuffer PNG of a few MiB at most; a larger "PNG" is not embedded.
const MAX_EMBEDDED_PNG_BYTES: u64 = 32 << 20;
/// The PNG bytes one page embeds in all (a real report: six PNGs of about 1 MiB): the images
/// past it are named, not embedded.
const MAX_EMBEDDED_TOTAL_BYTES: u64 = 64 << 20;

pub(super) const STYLE: &str = "\
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:72em;padding:0 1em;color:#1b1b1b;background:#fff}
h1 .verdict{padding:.1em .4em;border-radius:.2em;color:#fff}
.s-PASS{background:#1a7f37}.s-FAIL{background:#cf222e}.s-NOT_RUN{background:#6e7781}.s-REVIEW_REQUIRED{background:#9a6700}
td.status span{padding:0 .3em;border-radius:.2em;color:#fff;font-size:.9em}
table{border-collapse:collapse;margin:.5em 0 1.5em}
th,td{border:1px solid #d0d7de;padding:.25em .6em;text-align:left;vertical-align:top}
td.num{text-align:right;white-space:nowrap}
code,pre{font-family:ui-monospace,monospace;font-size:.9em}
td code{overflow-wrap:anywhere}
pre{white-space:pre-wrap;word-break:break-all;background:#f6f8fa;padding:.4em;margin:.2em 0}
.pair{border-top:1px solid #d0d7de;margin-bottom:1em}
.row{display:flex;gap:.8em;overflow-x:auto;align-items:flex-start;padding-bottom:.5em}
figure{flex:none;margin:0;border:1px solid #d0d7de;padding:.5em}
figure img{display:block;image-rendering:pixelated}
figcaption{font-size:.85em;word-break:break-all;max-width:40em}
.problem{color:#cf222e;font-weight:bold}
.ok{color:#1a7f37}.bad{color:#cf222e}
";

pub fn render(o: &Outcome) -> String {
    let mut s = String::new();
    // fmt::Write into a String cannot fail.
    let _ = write_all(&mut s, o);
    s
}

fn write_all(s: &mut String, o: &Outcome) -> std::fmt::Result {
    write_head(s, o)?;
    write_gate_table(s, o)?;
    // After the gate table, so the page opens on the verdict and the images follow it.
    let pngs: Vec<&Artifact> = o.report.png_artifacts().collect();
    let reference = review::reference(&o.report, &o.mismatches);
    write_images(
        s,
        o.files.as_deref(),
        &pngs,
        o.report.options.workload,
        reference,
    )?;
    writeln!(s, "<h2>Checks per gate</h2>")?;
    for g in &o.gates {
        write_gate_detail(s, g)?;
    }
    write_where(s, &o.report)?;
    write_tail(s, &o.report)
}

/// The page's head, the verdict, the review and what to do next, and the problems.
fn write_head(s: &mut String, o: &Outcome) -> std::fmt::Result {
    let v = o.verdict.as_str();
    writeln!(s, "<!DOCTYPE html>")?;
    writeln!(s, "<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">")?;
    writeln!(s, "<title>sharedos-rig report: {v}</title>")?;
    writeln!(s, "<style>\n{STYLE}</style>\n</head>\n<body>")?;
    writeln!(
        s,
        "<h1>sharedos-rig report <span class=\"verdict s-{v}\">{v}</span></h1>"
    )?;
    writeln!(
        s,
        "<p>exit {}: {}</p>",
        o.exit_code,
        esc(verdict_meaning(o))
    )?;
    // Only the directory's own name: the page must render the same wherever the report is
    // copied, so screenshots of it compare.
    let name = o
        .dir
        .as_ref()
        .and_then(|d| d.file_name())
        .map(|n| n.to_string_lossy().into_owned());
    if let Some(n) = &name {
        writeln!(s, "<p>report: <code>{}</code></p>", esc(n))?;
    }
    writeln!(s, "<p>review: {}</p>", esc(&o.review.describe()))?;
    if o.review == ReviewState::None && o.gates_verdict == Verdict::ReviewRequired {
        writeln!(
            s,
            "<p>Look at every image below, then record the decision: <code>sharedos-rig review \
             REPORT_DIR --decision pass|fail --reviewer NAME</code>{}</p>",
            name.map(|n| format!(" (REPORT_DIR: the directory <code>{}</code>)", esc(&n)))
                .unwrap_or_default()
        )?;
    }
    let problems = o.problems();
    if !problems.is_empty() {
        writeln!(s, "<h2>Problems</h2>\n<ul>")?;
        for p in &problems {
            writeln!(s, "<li class=\"problem\">{}</li>", esc(p))?;
        }
        writeln!(s, "</ul>")?;
    }
    Ok(())
}

fn write_gate_table(s: &mut String, o: &Outcome) -> std::fmt::Result {
    writeln!(s, "<h2>Gates</h2>\n<table>")?;
    writeln!(
        s,
        "<tr><th>gate</th><th>status</th><th>duration</th><th>reason</th></tr>"
    )?;
    for g in &o.gates {
        writeln!(
            s,
            "<tr><td><a href=\"#gate-{n}\"><code>{n}</code></a></td><td class=\"status\">{}{}</td>\
             <td class=\"num\">{}</td><td>{}</td></tr>",
            status_badge(g.status),
            short_cause(g)
                .map(|c| format!(" <span class=\"cause\">({})</span>", esc(&c)))
                .unwrap_or_default(),
            duration(g.duration_ms),
            esc(&g.reason),
            n = g.name
        )?;
    }
    writeln!(
        s,
        "<tr><th>total</th><td></td><td class=\"num\">{}</td><td></td></tr>\n</table>",
        total_duration(&o.gates)
    )?;
    Ok(())
}

/// The density figures, when there are any, where it ran, and the phase timings.
fn write_where(s: &mut String, r: &Report) -> std::fmt::Result {
    if let Some(rows) = density(r) {
        writeln!(s, "<h2>Density</h2>\n<table>")?;
        for (k, val) in rows {
            writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(&k), esc(&val))?;
        }
        writeln!(s, "</table>")?;
    }

    writeln!(s, "<h2>Where it ran</h2>\n<table>")?;
    for (k, val) in provenance(r) {
        writeln!(s, "<tr><th>{}</th><td>{}</td></tr>", esc(k), esc(&val))?;
    }
    writeln!(s, "</table>")?;

    if let Some(vm) = &r.vm {
        writeln!(s, "<h2>Phase timings</h2>\n<table>")?;
        writeln!(s, "<tr><th>phase</th><th>duration</th></tr>")?;
        for p in &vm.phases {
            writeln!(
                s,
                "<tr><td>{}</td><td class=\"num\">{}</td></tr>",
                esc(&p.name),
                duration(p.duration_ms)
            )?;
        }
        writeln!(s, "</table>")?;
        if !vm.qemu_argv.is_empty() {
            writeln!(
                s,
                "<p>qemu argv:</p>\n<pre>{}</pre>",
                esc(&vm.qemu_argv.join(" "))
            )?;
        }
    }
    Ok(())
}

/// The fidelity differences, every artifact, and the end of the page.
fn write_tail(s: &mut String, r: &Report) -> std::fmt::Result {
    if !r.fidelity_differences.is_empty() {
        writeln!(s, "<h2>Fidelity differences</h2>\n<ul>")?;
        for f in &r.fidelity_differences {
            writeln!(
                s,
                "<li><code>{}</code>: {}</li>",
                f.key,
                esc(&f.to_string())
            )?;
        }
        writeln!(s, "</ul>")?;
    }

    writeln!(s, "<h2>Artifacts</h2>\n<table>")?;
    writeln!(
        s,
        "<tr><th>path</th><th>kind</th><th>bytes</th><th>sha256</th></tr>"
    )?;
    for a in &r.artifacts {
        writeln!(
            s,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"num\">{}</td><td><code>{}</code></td></tr>",
            esc(&a.path),
            esc(&a.kind),
            a.bytes,
            esc(&a.sha256)
        )?;
    }
    writeln!(s, "</table>\n</body>\n</html>")?;
    Ok(())
}

fn status_badge(st: Status) -> String {
    format!("<span class=\"s-{0}\">{0}</span>", st.as_str())
}

/// The file name the guest gives its dump-time image: only a label for a reader, never how the
/// reference is found (`review::reference`).
const DUMP_TIME_NAME: &str = "dump-time.png";

/// What each framebuffer image should show, by its file name (and the workload: a desktop's
/// changed copies also show the text typed into the editor); `is_reference`: the image the
/// checks cite as the dump-time one.
fn expectation(path: &str, workload: Workload, is_reference: bool) -> &'static str {
    if is_reference {
        return "the reference: the tree's screen when it was dumped, the image the copies' checks cite";
    }
    let name = path.rsplit('/').next().unwrap_or(path);
    match (name, workload) {
        ("isolation-a.png", Workload::Desktop) => {
            return "copy A after its own change: should differ from the reference by the drawn mark and the text typed at the end of the editor's line, and by nothing else";
        }
        ("reset-changed.png", Workload::Desktop) => {
            return "copy A changed again before the reset: the drawn mark and both typed changes in the editor";
        }
        ("isolation-a.png" | "reset-changed.png", Workload::Session) => {
            return "copy A after its own change: should differ from the reference by the drawn mark and the workspace the panel's pager shows as current, and by nothing else";
        }
        _ => {}
    }
    match name {
        DUMP_TIME_NAME => {
            "named like the dump-time image, but not the one the copies' checks cite: compare it with the reference"
        }
        "live.png" => "the live tree just before the dump: should match the reference",
        "restored-a.png" => "the restored copy: should match the reference exactly",
        "isolation-a.png" => {
            "copy A after its own change: should differ from the reference by the drawn mark and by nothing else"
        }
        "isolation-b.png" => {
            "copy B while A changed: should match the reference exactly (A's change must not reach it)"
        }
        "reset.png" => "the copy after reset: should match the reference exactly",
        "reset-changed.png" => {
            "the copy changed before the reset: the drawn mark (the reset copy must not show it)"
        }
        _ => "not labelled by this rig: compare it with the reference",
    }
}

/// How many PNG bytes the page may still embed.
struct Budget(u64);

impl Budget {
    /// Takes `n` bytes from the budget; false when they do not fit.
    fn take(&mut self, n: u64) -> bool {
        match self.0.checked_sub(n) {
            Some(left) => {
                self.0 = left;
                true
            }
            None => false,
        }
    }
}

type Read = Result<std::rc::Rc<crate::judge::reader::FileRead>, String>;

/// Each image beside the dump-time reference and a diff of the two, labelled with what it
/// should show, so that "differs by the mark and nothing else" is seen at a glance. The
/// reference is the image the checks cite (`review::reference`), its pixels held to the sha256
/// they cite; when there is none, each image is shown alone and the page says why. The bytes
/// are the judgement's own read of each file; images are decoded one at a time (the reference
/// once), and the page embeds at most [`MAX_EMBEDDED_TOTAL_BYTES`].
fn write_images(
    s: &mut String,
    files: Option<&ReportDir>,
    pngs: &[&Artifact],
    workload: Workload,
    reference: Result<Reference<'_>, String>,
) -> std::fmt::Result {
    writeln!(s, "<h2>Images, each against the dump-time image</h2>")?;
    if pngs.is_empty() {
        return writeln!(s, "<p>The report lists no PNG.</p>");
    }
    let mut unique: Vec<&Artifact> = Vec::new();
    for a in pngs {
        if !unique.iter().any(|u| u.path == a.path) {
            unique.push(a);
        }
    }
    let reference = reference.map(|r| {
        let read = read_artifact(files, &r.artifact.path);
        let pixels = read.clone().and_then(|f| {
            let img =
                pixels::decode(f.bytes().unwrap_or_default()).map_err(|e| format!("{e:#}"))?;
            let here = digest::sha256_hex(&img.data);
            if here == r.pixel_sha256 {
                Ok(img)
            } else {
                Err(format!(
                    "its pixels hash to {here}, not the {} its checks cite",
                    r.pixel_sha256
                ))
            }
        });
        (r.artifact, read, pixels)
    });
    if let Err(why) = &reference {
        writeln!(
            s,
            "<p class=\"problem\">No image is the reference: {}.</p>",
            esc(why)
        )?;
    }
    let mut budget = Budget(MAX_EMBEDDED_TOTAL_BYTES);
    for a in unique {
        let is_reference = matches!(&reference, Ok((r, _, _)) if r.path == a.path);
        writeln!(
            s,
            "<div class=\"pair\">\n<p><code>{}</code>: {}</p>",
            esc(&a.path),
            esc(expectation(&a.path, workload, is_reference))
        )?;
        writeln!(s, "<div class=\"row\">")?;
        let read = read_artifact(files, &a.path);
        write_image(s, a, &read, &mut budget)?;
        if let (Ok((r, ref_read, ref_pixels)), false) = (&reference, is_reference) {
            // The image and its diff first, so that both fit a screen unscaled; the reference
            // follows.
            write_diff(s, (&r.path, ref_pixels), &read, &mut budget)?;
            write_image(s, r, ref_read, &mut budget)?;
        }
        writeln!(s, "</div>\n</div>")?;
    }
    Ok(())
}

/// The diff of one image against the decoded reference, this image decoded for it alone.
fn write_diff(
    s: &mut String,
    (ref_path, reference): (&str, &Result<pixels::Rgb, String>),
    read: &Read,
    budget: &mut Budget,
) -> std::fmt::Result {
    let d = match (reference, read) {
        (Ok(rp), Ok(f)) => pixels::decode(f.bytes().unwrap_or_default())
            .and_then(|ap| pixels::diff(rp, &ap))
            .and_then(|d| pixels::encode(&d.image).map(|png| (png, d.describe())))
            .map_err(|e| format!("{e:#}")),
        (Err(why), _) => Err(format!("the reference: {why}")),
        (_, Err(why)) => Err(why.clone()),
    };
    writeln!(s, "<figure>")?;
    match d {
        Ok((png, words)) if budget.take(png.len() as u64) => writeln!(
            s,
            "<img src=\"data:image/png;base64,{}\" alt=\"diff\">\n<figcaption>diff against <code>{}</code>: {}</figcaption>",
            digest::base64(&png, true),
            esc(ref_path),
            esc(&words)
        )?,
        Ok((_, words)) => writeln!(
            s,
            "<figcaption>diff against <code>{}</code>: {} (not embedded: {})</figcaption>",
            esc(ref_path),
            esc(&words),
            over_budget()
        )?,
        Err(why) => writeln!(
            s,
            "<figcaption class=\"problem\">no diff: {}</figcaption>",
            esc(&why)
        )?,
    }
    writeln!(s, "</figure>")
}

fn over_budget() -> String {
    format!(
        "this page embeds at most {} MiB of images, and the images above used that",
        MAX_EMBEDDED_TOTAL_BYTES >> 20
    )
}

/// One PNG as read from the report, with its sha256 and whatever keeps it from being shown.
fn write_image(s: &mut String, a: &Artifact, read: &Read, budget: &mut Budget) -> std::fmt::Result {
    writeln!(s, "<figure>")?;
    let mut note = String::new();
    match read {
        Ok(f) => {
            if f.sha256 != a.sha256 {
                note = format!(
                    "MISMATCH: the file on disk has sha256 {}, not the one the report lists",
                    f.sha256
                );
            }
            let bytes = f.bytes().unwrap_or_default();
            if budget.take(bytes.len() as u64) {
                writeln!(
                    s,
                    "<img src=\"data:image/png;base64,{}\" alt=\"{}\">",
                    digest::base64(bytes, true),
                    esc(&a.path)
                )?;
            } else {
                note = format!("not embedded: {}. {note}", over_budget());
            }
        }
        Err(why) => note = format!("not embedded: {why}"),
    }
    writeln!(
        s,
        "<figcaption><code>{}</code><br>sha256 <code>{}</code>",
        esc(&a.path),
        esc(&a.sha256)
    )?;
    if !note.is_empty() {
        writeln!(s, "<br><span class=\"problem\">{}</span>", esc(note.trim()))?;
    }
    writeln!(s, "</figcaption>\n</figure>")
}

/// An artifact for embedding, the judgement's own read of it (no link followed, no special
/// file opened, within the caps).
fn read_artifact(files: Option<&ReportDir>, rel: &str) -> Read {
    let files = files.ok_or_else(|| "the report was not read from a directory".to_string())?;
    files.bytes(rel, MAX_EMBEDDED_PNG_BYTES)
}

fn write_gate_detail(s: &mut String, g: &Gate) -> std::fmt::Result {
    writeln!(
        s,
        "<h3 id=\"gate-{n}\"><code>{n}</code> {}</h3>\n<p>{}</p>",
        status_badge(g.status),
        esc(&g.reason),
        n = g.name
    )?;
    if let Some((from, lines)) = cause_quote(g) {
        writeln!(
            s,
            "<p>Cause, quoted from {}:</p>\n<pre class=\"cause\">{}</pre>",
            esc(&from),
            lines.iter().map(|l| esc(l)).collect::<Vec<_>>().join("\n")
        )?;
    }
    if g.checks.is_empty() {
        writeln!(s, "<p>No checks recorded.</p>")?;
    } else {
        writeln!(
            s,
            "<table>\n<tr><th>check</th><th>result</th><th>value</th><th>expected</th></tr>"
        )?;
        for c in &g.checks {
            writeln!(
                s,
                "<tr><td>{}</td><td class=\"{}\">{}</td><td><code>{}</code></td><td>{}</td></tr>",
                esc(&c.name),
                if c.passed { "ok" } else { "bad" },
                if c.passed { "ok" } else { "FAILED" },
                esc(&value_str(&c.value)),
                esc(&c.expected)
            )?;
        }
        writeln!(s, "</table>")?;
    }
    if !g.data.is_empty() {
        writeln!(s, "<table>\n<tr><th>data</th><th>value</th></tr>")?;
        for (k, v) in &g.data {
            writeln!(
                s,
                "<tr><td>{}</td><td><code>{}</code></td></tr>",
                esc(k),
                esc(&value_str(v))
            )?;
        }
        writeln!(s, "</table>")?;
    }
    if !g.evidence.is_empty() {
        writeln!(
            s,
            "<details><summary>evidence: {} step(s)</summary>",
            g.evidence.len()
        )?;
        for e in &g.evidence {
            let mut head = esc(&e.step);
            if let Some(c) = e.exit_code {
                let _ = write!(head, ", exit {c}");
            }
            if let Some(sig) = e.signal {
                let _ = write!(head, ", signal {sig}");
            }
            if e.timed_out {
                head.push_str(", TIMED OUT");
            }
            let _ = write!(head, ", {}", duration(e.duration_ms));
            writeln!(s, "<p>{head}</p>")?;
            for (label, text) in [
                ("argv", e.argv.join(" ")),
                ("stdout", e.stdout_tail.clone()),
                ("stderr", e.stderr_tail.clone()),
                ("note", e.note.clone()),
            ] {
                if !text.is_empty() {
                    writeln!(s, "<pre>{label}: {}</pre>", esc(&text))?;
                }
            }
        }
        writeln!(s, "</details>")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::verdict::evaluate_report;
    use crate::render::tests::rich_report;

    #[test]
    fn page_carries_hashes_gates_provenance_and_no_raw_report_text() {
        let r = rich_report();
        let h = render(&evaluate_report(&r, None));
        assert!(h.starts_with("<!DOCTYPE html>"));
        assert!(h.ends_with("</html>\n"));
        for a in r.png_artifacts() {
            assert!(h.contains(&a.sha256));
        }
        assert!(h.contains("not embedded: the report was not read from a directory"));
        assert!(h.contains("criu dump said &lt;oops&gt; &amp; &quot;quit&quot; | &#39;x&#39;"));
        assert!(!h.contains("<oops>"));
        assert!(h.contains("token_is_32_hex"));
        assert!(h.contains("QEMU emulator version 7.2.15"));
        assert!(!h.contains("http://") && !h.contains("https://") && !h.contains("<script"));
    }

    /// A report directory holding the honest PNGs and an image of the guest's named like the
    /// reference, listed first, with other pixels.
    fn with_a_false_reference(name: &str) -> (crate::judge::reader::tests::Scratch, Outcome) {
        let sc = crate::judge::reader::tests::Scratch::new(name);
        let mut r = crate::judge::review::tests::fresh_report();
        r.artifacts.clear();
        hostile_gate::honest::add_to(&mut r, &sc.0).unwrap();
        let mut other = hostile_gate::honest::frame();
        other.rgb.iter_mut().for_each(|b| *b = 255 - *b);
        std::fs::create_dir_all(sc.0.join("evil")).unwrap();
        hostile_gate::honest::write_png(&other, &sc.0.join("evil/dump-time.png")).unwrap();
        let evil = digest::artifact(&sc.0, "evil/dump-time.png", "png").unwrap();
        r.artifacts.insert(0, evil);
        r.seal();
        let mut o = evaluate_report(&r, None);
        o.files = Some(std::rc::Rc::new(ReportDir::open(&sc.0).unwrap()));
        (sc, o)
    }

    #[test]
    fn the_reference_is_the_image_the_checks_cite_not_the_first_named_like_it() {
        let (_sc, o) = with_a_false_reference("html-reference");
        let h = render(&o);
        // Every other image is held against the cited one; the false one is shown once, as
        // itself, and said not to be the reference.
        assert_eq!(
            h.matches("<figcaption><code>evil/dump-time.png</code>")
                .count(),
            1,
            "{h}"
        );
        assert_eq!(
            h.matches("<figcaption><code>png/dump-time.png</code>")
                .count(),
            7,
            "{h}"
        );
        assert!(
            h.contains("diff against <code>png/dump-time.png</code>"),
            "{h}"
        );
        assert!(
            h.contains("<code>evil/dump-time.png</code>: named like the dump-time image"),
            "{h}"
        );
    }

    #[test]
    fn no_reference_is_shown_when_two_artifacts_would_make_it() {
        let (_sc, mut o) = with_a_false_reference("html-reference-twice");
        let twin = o.report.artifacts[0].clone();
        o.report.artifacts.push(Artifact {
            path: "png/dump-time.png".into(),
            ..twin
        });
        let h = render(&o);
        assert!(
            h.contains("No image is the reference: 2 artifacts are named png/dump-time.png"),
            "{h}"
        );
        assert!(!h.contains("diff against"), "{h}");
    }

    #[test]
    fn embeds_images_from_the_report_directory() {
        let dir = std::env::temp_dir().join(format!("render-html-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("png")).unwrap();
        std::fs::write(dir.join("png/live.png"), b"foo").unwrap();
        let mut o = evaluate_report(&rich_report(), None);
        o.dir = Some(dir.clone());
        o.files = Some(std::rc::Rc::new(ReportDir::open(&dir).unwrap()));
        let h = render(&o);
        assert!(h.contains("data:image/png;base64,Zm9v"));
        // The listed hash is "aaa…", the bytes are "foo": the page must say so.
        assert!(h.contains(&format!(
            "the file on disk has sha256 {}",
            digest::sha256_hex(b"foo")
        )));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
