//! README.md and docs/*.md held to what a reader relies on: every relative link reaches a file
//! (and its `#anchor` a heading there), the README's first screen points into docs/, every
//! `cargo xtask SUB` in a code block names a subcommand xtask has, and a table the README restates
//! from docs/ is the same table. Fast: it reads text and runs the built xtask's `--help` once.
//!
//! It lives in xtask's tests, not the host crate's, because only here does cargo build xtask
//! for the test and name it (`CARGO_BIN_EXE_xtask`): its own help is the one list of subcommands
//! that cannot drift from the code.

// The one command this test starts is xtask itself.
#![allow(clippy::disallowed_methods)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the README's first link into docs/ must be, so that a reader who stops at the first
/// screen still sees where the rest went.
const FIRST_SCREEN: usize = 80;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the repository")
        .to_path_buf()
}

/// README.md and every docs/*.md, by path relative to the repository, in a stable order.
fn documents() -> Vec<(String, String)> {
    let root = repo();
    let read = |rel: &str| {
        std::fs::read_to_string(root.join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
    };
    let mut names: Vec<String> = std::fs::read_dir(root.join("docs"))
        .expect("reading docs/")
        .map(|e| {
            e.expect("reading docs/")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    names.sort();
    names.insert(0, "README.md".to_string());
    names.into_iter().map(|n| (n.clone(), read(&n))).collect()
}

/// What a link's path names, as far as the check needs to know.
enum Target {
    Missing,
    /// A directory or a file that is not Markdown: it exists, and has no headings to check.
    Other,
    Markdown(String),
}

fn on_disk(rel: &str) -> Target {
    let path = repo().join(rel);
    if rel.ends_with(".md") && path.is_file() {
        match std::fs::read_to_string(&path) {
            Ok(t) => Target::Markdown(t),
            Err(_) => Target::Missing,
        }
    } else if path.exists() {
        Target::Other
    } else {
        Target::Missing
    }
}

/// The text with every fenced code block's lines emptied (line numbers kept), since a link or a
/// heading inside one is an example, not part of the page.
fn outside_fences(text: &str) -> String {
    let mut fence: Option<String> = None;
    let mut out = Vec::new();
    for line in text.lines() {
        let t = line.trim_start();
        let marker: String = t.chars().take_while(|&c| c == '`' || c == '~').collect();
        match &fence {
            Some(open)
                if t.trim_end() == marker
                    && marker.len() >= open.len()
                    && marker.starts_with(&open[..1]) =>
            {
                fence = None;
                out.push("");
            }
            Some(_) => out.push(""),
            None if marker.len() >= 3
                && marker.chars().all(|c| c == marker.as_bytes()[0] as char) =>
            {
                fence = Some(marker);
                out.push("");
            }
            None => out.push(line),
        }
    }
    out.join("\n")
}

/// The lines inside fenced code blocks, with their 1-based numbers.
fn fenced_lines(text: &str) -> Vec<(usize, &str)> {
    let outside = outside_fences(text);
    text.lines()
        .zip(outside.lines().chain(std::iter::repeat("")))
        .enumerate()
        .filter(|(_, (line, out))| out.is_empty() && !line.trim().is_empty())
        .filter(|(_, (line, _))| {
            let t = line.trim_start();
            !(t.starts_with("```") || t.starts_with("~~~"))
        })
        .map(|(i, (line, _))| (i + 1, line))
        .collect()
}

/// Code spans blanked to spaces (newlines kept), so that `[a](b)` shown as code is no link. A
/// span closes on a run of as many backticks as opened it, within its paragraph.
fn without_code_spans(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = b.to_vec();
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'`' {
            i += 1;
            continue;
        }
        let run = b[i..].iter().take_while(|&&c| c == b'`').count();
        let mut j = i + run;
        let mut close = None;
        while j < b.len() {
            if b[j..].starts_with(b"\n\n") {
                break;
            }
            if b[j] == b'`' {
                let n = b[j..].iter().take_while(|&&c| c == b'`').count();
                if n == run {
                    close = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(c) => {
                for x in &mut out[i..c + run] {
                    if *x != b'\n' {
                        *x = b' ';
                    }
                }
                i = c + run;
            }
            None => i += run,
        }
    }
    // Every byte of a span became a space, so no character was cut in half.
    String::from_utf8(out).expect("blanking ASCII keeps UTF-8")
}

/// Every link target in the page's prose (inline `[text](target)`, images too, and reference
/// definitions `[label]: target`), with its 1-based line.
fn links(text: &str) -> Vec<(usize, String)> {
    let prose = without_code_spans(&outside_fences(text));
    let mut found = Vec::new();
    for (n, line) in prose.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let Some(end) = after.find(')') else { break };
            found.push((n + 1, clean_target(&after[..end])));
            rest = &after[end..];
        }
        let t = line.trim_start();
        if t.starts_with('[') {
            if let Some(at) = t.find("]:") {
                if !t[..at].contains("](") {
                    found.push((n + 1, clean_target(&t[at + 2..])));
                }
            }
        }
    }
    found
}

/// A target without its `<...>` and its title.
fn clean_target(raw: &str) -> String {
    let t = raw.trim();
    let t = t.split_whitespace().next().unwrap_or("");
    t.trim_start_matches('<').trim_end_matches('>').to_string()
}

/// A URL with a scheme (`https:`, `mailto:`) is not this check's to follow.
fn is_external(target: &str) -> bool {
    match target.find(':') {
        Some(i) => {
            let scheme = &target[..i];
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+.-".contains(c))
        }
        None => false,
    }
}

/// `rel` resolved against the directory of the repository file `from`; None when it climbs out
/// of the repository.
fn resolve(from: &str, rel: &str) -> Option<String> {
    let mut parts: Vec<&str> = from.split('/').collect();
    parts.pop();
    for p in rel.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// GitHub's anchor for a heading: its text as rendered (a link's text, not its target),
/// lowercased, every character but letters, digits, `-`, `_` and spaces dropped, and each space
/// a `-`.
fn slug(heading: &str) -> String {
    let mut text = String::new();
    let mut rest = heading;
    while let Some(open) = rest.find('[') {
        let close = rest[open..].find("](").map(|c| open + c);
        let end = close.and_then(|c| rest[c..].find(')').map(|e| c + e));
        match (close, end) {
            (Some(c), Some(e)) => {
                text.push_str(&rest[..open]);
                text.push_str(&rest[open + 1..c]);
                rest = &rest[e + 1..];
            }
            _ => break,
        }
    }
    text.push_str(rest);
    text.to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// The anchors GitHub gives the page's headings: a repeated one gets `-1`, `-2`, ... after the
/// first.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut out = BTreeSet::new();
    for line in outside_fences(text).lines() {
        let hashes = line.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&hashes) || !line[hashes..].starts_with(' ') {
            continue;
        }
        let title = line[hashes..].trim().trim_end_matches('#').trim();
        let base = slug(title);
        let n = seen.entry(base.clone()).or_insert(0);
        out.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    out
}

/// Every relative link of the page `from` that does not reach a file, or whose `#anchor` names
/// no heading of the Markdown file it reaches, as `file:line: problem; fix`.
fn broken_links(from: &str, text: &str, target: &dyn Fn(&str) -> Target) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, link) in links(text) {
        if is_external(&link) {
            continue;
        }
        let (path, anchor) = match link.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (link.as_str(), None),
        };
        let (resolved, page) = if path.is_empty() {
            (from.to_string(), Target::Markdown(text.to_string()))
        } else {
            match resolve(from, path) {
                Some(r) => {
                    let t = target(&r);
                    (r, t)
                }
                None => (path.to_string(), Target::Missing),
            }
        };
        match (page, anchor) {
            (Target::Missing, _) => problems.push(format!(
                "{from}:{line}: the link `{link}` reaches {resolved}, which does not exist; \
                 fix: point it at the file the text moved to (paths are relative to {from})"
            )),
            (Target::Markdown(t), Some(a)) if !anchors(&t).contains(a) => {
                let known: Vec<String> = anchors(&t).into_iter().collect();
                problems.push(format!(
                    "{from}:{line}: the link `{link}` names #{a}, no heading of {resolved}; \
                     fix: use one of its anchors: {}",
                    known.join(", ")
                ));
            }
            _ => {}
        }
    }
    problems
}

/// The line of the README's first link into docs/, if it has one.
fn first_docs_link(readme: &str) -> Option<usize> {
    links(readme)
        .into_iter()
        .filter(|(_, l)| !is_external(l))
        .find(|(_, l)| {
            resolve("README.md", l).is_some_and(|r| r == "docs" || r.starts_with("docs/"))
        })
        .map(|(line, _)| line)
}

fn first_screen_problem(readme: &str) -> Option<String> {
    match first_docs_link(readme) {
        Some(line) if line <= FIRST_SCREEN => None,
        Some(line) => Some(format!(
            "README.md:{line}: the first link into docs/ is past line {FIRST_SCREEN}; fix: link \
             docs/ from the README's first {FIRST_SCREEN} lines, where a reader still is"
        )),
        None => Some(format!(
            "README.md: no link into docs/ at all; fix: link docs/ from its first \
             {FIRST_SCREEN} lines"
        )),
    }
}

/// xtask's subcommands, from its `--help`: the names under `Commands:`, each on a line of its
/// own indented by two spaces.
fn subcommands(help: &str) -> BTreeSet<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect()
}

/// Every `cargo xtask SUB` in the page's fenced code blocks whose SUB xtask does not have.
fn unknown_xtask_commands(file: &str, text: &str, known: &BTreeSet<String>) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, code) in fenced_lines(text) {
        let mut rest = code;
        while let Some(at) = rest.find("cargo xtask") {
            let word_start =
                at == 0 || !rest[..at].ends_with(|c: char| c.is_alphanumeric() || c == '-');
            let after = &rest[at + "cargo xtask".len()..];
            rest = after;
            if !word_start || !after.starts_with(char::is_whitespace) {
                continue;
            }
            let Some(sub) = after.split_whitespace().next() else {
                continue;
            };
            if sub.starts_with('-') || sub == "\\" || known.contains(sub) {
                continue;
            }
            let list: Vec<&str> = known.iter().map(String::as_str).collect();
            problems.push(format!(
                "{file}:{line}: `cargo xtask {sub}` names no xtask subcommand; fix: use one of \
                 {} (`cargo xtask --help`), or add `{sub}` to xtask's Command (xtask/src/main.rs)",
                list.join(", ")
            ));
        }
    }
    problems
}

/// The page's tables, each as its first line's number and its lines.
fn tables(text: &str) -> Vec<(usize, Vec<&str>)> {
    let mut out: Vec<(usize, Vec<&str>)> = Vec::new();
    let mut open = false;
    for (i, line) in text.lines().enumerate() {
        if line.starts_with('|') {
            match out.last_mut() {
                Some((_, rows)) if open => rows.push(line),
                _ => out.push((i + 1, vec![line])),
            }
            open = true;
        } else {
            open = false;
        }
    }
    out
}

/// A README table whose header row is also a table's in docs/ restates that table: it must be
/// that table, row for row, so that a figure changed in one place cannot leave the other stale.
fn restated_tables_that_differ(readme: &str, docs: &[(String, String)]) -> Vec<String> {
    let mut problems = Vec::new();
    for (line, rows) in tables(readme) {
        for (name, text) in docs {
            for (dline, drows) in tables(text) {
                if drows[0] != rows[0] || drows == rows {
                    continue;
                }
                let at = rows
                    .iter()
                    .zip(&drows)
                    .position(|(a, b)| a != b)
                    .unwrap_or(rows.len().min(drows.len()));
                problems.push(format!(
                    "README.md:{}: this table restates {name}:{dline} and differs from it at its \
                     row {} ({} rows here, {} there); fix: copy the table again from {name}, \
                     where its figures are explained",
                    line + at,
                    at + 1,
                    rows.len(),
                    drows.len()
                ));
            }
        }
    }
    problems
}

fn xtask_help() -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_xtask"))
        .arg("--help")
        .output()
        .expect("running xtask --help");
    assert!(out.status.success(), "xtask --help failed: {out:?}");
    String::from_utf8(out.stdout).expect("xtask --help prints UTF-8")
}

#[test]
fn every_relative_link_reaches_a_file_and_a_heading() {
    let problems: Vec<String> = documents()
        .iter()
        .flat_map(|(name, text)| broken_links(name, text, &on_disk))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_readme_links_into_docs_on_its_first_screen() {
    let docs = documents();
    if let Some(p) = first_screen_problem(&docs[0].1) {
        panic!("{p}");
    }
}

#[test]
fn every_cargo_xtask_command_in_a_code_block_exists() {
    let known = subcommands(&xtask_help());
    assert!(
        known.contains("vm-run") && known.contains("test"),
        "xtask --help no longer lists its subcommands under `Commands:` as this test reads \
         them ({known:?}); fix subcommands() here"
    );
    let problems: Vec<String> = documents()
        .iter()
        .flat_map(|(name, text)| unknown_xtask_commands(name, text, &known))
        .collect();
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn a_table_the_readme_restates_is_the_one_in_docs() {
    let mut docs = documents();
    let readme = docs.remove(0).1;
    let problems = restated_tables_that_differ(&readme, &docs);
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// Each check shown failing on a made-up page, and passing once the page is put right.
mod on_made_up_pages {
    use super::*;

    fn files(pages: &[(&str, &str)]) -> impl Fn(&str) -> Target {
        let pages: BTreeMap<String, String> = pages
            .iter()
            .map(|(p, t)| (p.to_string(), t.to_string()))
            .collect();
        move |p: &str| match pages.get(p) {
            Some(t) if p.ends_with(".md") => Target::Markdown(t.clone()),
            Some(_) => Target::Other,
            None => Target::Missing,
        }
    }

    #[test]
    fn slugs_follow_github() {
        assert_eq!(
            slug("What `cargo xtask vm-run` does"),
            "what-cargo-xtask-vm-run-does"
        );
        assert_eq!(slug("Which QEMU, measured"), "which-qemu-measured");
        assert_eq!(
            slug("A peer: virtme-ng (`--peers`)"),
            "a-peer-virtme-ng---peers"
        );
        assert_eq!(slug("snake_case and Ünïcode"), "snake_case-and-ünïcode");
        assert_eq!(slug("See [the docs](docs/x.md) now"), "see-the-docs-now");
        let a = anchors("# T\n## Measured\n### Measured\n```\n## not a heading\n```\n#nospace\n");
        let want: BTreeSet<String> = ["t", "measured", "measured-1"].map(String::from).into();
        assert_eq!(a, want);
    }

    #[test]
    fn a_link_to_a_missing_file_fails() {
        let page = "See [running](running.md) and [images](../images/README.md).\n";
        let lookup = files(&[("docs/running.md", "# Running\n")]);
        let p = broken_links("docs/ci.md", page, &lookup);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0]
            .starts_with("docs/ci.md:1: the link `../images/README.md` reaches images/README.md"));
        assert!(p[0].contains("fix:"));
        let lookup = files(&[("docs/running.md", "# Running\n"), ("images/README.md", "")]);
        assert!(broken_links("docs/ci.md", page, &lookup).is_empty());
    }

    #[test]
    fn a_link_to_a_missing_heading_fails() {
        let page = "# Top\n\nSee [tiers](ci.md#test-tier), [up](#top), [down](#nowhere).\n";
        let lookup = files(&[("docs/ci.md", "# CI\n## Test tiers\n")]);
        let p = broken_links("docs/x.md", page, &lookup);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("docs/x.md:3: the link `ci.md#test-tier` names #test-tier"));
        assert!(
            p[0].contains("use one of its anchors: ci, test-tiers"),
            "{}",
            p[0]
        );
        assert!(p[1].contains("`#nowhere`"), "{}", p[1]);
        let fixed = "# Top\n\nSee [tiers](ci.md#test-tiers), [up](#top).\n";
        assert!(broken_links("docs/x.md", fixed, &lookup).is_empty());
    }

    #[test]
    fn links_in_code_external_links_and_escapes_out_of_the_repo() {
        let page = "```\n[a](gone.md)\n```\nCode: `[b](gone.md)`, ``x `[c](gone.md)` y``.\n\
                    [web](https://example.org/x.md) [mail](mailto:a@b)\n\
                    [up](../../outside.md)\n[ref]: gone-too.md\n";
        let p = broken_links("docs/x.md", page, &files(&[]));
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(
            p[0].starts_with("docs/x.md:6: the link `../../outside.md`"),
            "{}",
            p[0]
        );
        assert!(
            p[1].starts_with("docs/x.md:7: the link `gone-too.md`"),
            "{}",
            p[1]
        );
    }

    #[test]
    fn a_readme_whose_first_docs_link_is_late_or_missing_fails() {
        let late = format!(
            "# R\n{}[run](docs/running.md)\n",
            "text\n".repeat(FIRST_SCREEN)
        );
        let p = first_screen_problem(&late).expect("line 82 is past the first screen");
        assert!(
            p.starts_with("README.md:82: the first link into docs/"),
            "{p}"
        );
        let none = "# R\n[arch](ARCHITECTURE.md) [web](https://x/docs/a.md)\n";
        assert!(first_screen_problem(none)
            .unwrap()
            .contains("no link into docs/"));
        let early = format!("# R\n[run](docs/running.md)\n{}", "text\n".repeat(200));
        assert_eq!(first_screen_problem(&early), None);
        assert_eq!(first_docs_link("[d](./docs/)\n"), Some(1));
    }

    const HELP: &str = "tasks\n\nUsage: xtask <COMMAND>\n\nCommands:\n  image        Build\n  \
                        vm-run       Boot the image, run the gates.\n               Exits 0\n  \
                        help         Print this\n\nOptions:\n  -h, --help  Print help\n";

    #[test]
    fn subcommands_are_read_from_help() {
        let want: BTreeSet<String> = ["help", "image", "vm-run"].map(String::from).into();
        assert_eq!(subcommands(HELP), want);
        assert!(subcommands("Usage: xtask\n").is_empty());
    }

    #[test]
    fn a_cargo_xtask_command_that_does_not_exist_fails() {
        let known = subcommands(HELP);
        let page = "Prose: cargo xtask vm-rnu is not code.\n\n```sh\ncargo xtask vm-run --plan\n\
                    cargo xtask --help\nnice cargo xtask vm-rnu -- x   # typo\n\
                    cargo xtask image && cargo xtask bench\nmycargo xtask nothing\n```\n";
        let p = unknown_xtask_commands("docs/x.md", page, &known);
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[0].starts_with("docs/x.md:6: `cargo xtask vm-rnu` names no xtask subcommand"));
        assert!(p[0].contains("use one of help, image, vm-run"), "{}", p[0]);
        assert!(
            p[1].starts_with("docs/x.md:7: `cargo xtask bench`"),
            "{}",
            p[1]
        );
    }

    #[test]
    fn a_restated_table_that_drifted_fails() {
        let docs = vec![(
            "docs/c.md".to_string(),
            "# C\n\n| N | MiB |\n| --- | ---: |\n| 1 | 26.9 |\n| 4 | 26.1 |\n".to_string(),
        )];
        let same =
            "# R\n\n| N | MiB |\n| --- | ---: |\n| 1 | 26.9 |\n| 4 | 26.1 |\n\n| other | t |\n";
        assert!(restated_tables_that_differ(same, &docs).is_empty());
        let drifted = "# R\n\n| N | MiB |\n| --- | ---: |\n| 1 | 27.0 |\n| 4 | 26.1 |\n";
        let p = restated_tables_that_differ(drifted, &docs);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(
            p[0].starts_with("README.md:5: this table restates docs/c.md:3"),
            "{}",
            p[0]
        );
        let short = "| N | MiB |\n| --- | ---: |\n| 1 | 26.9 |\n";
        let p = restated_tables_that_differ(short, &docs);
        assert!(
            p[0].contains("at its row 4 (3 rows here, 4 there)"),
            "{}",
            p[0]
        );
    }
}
