//! ARCHITECTURE.md's layer tables, held against the code: every top-level module of the host
//! crate (`src/`) and of the gate binary (`guest/src/`) sits in exactly one layer, and imports
//! only from layers below its own; and the run options type is named only where its
//! `named-only-by` table says. Fast: it reads source text and runs nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fenced block ```` ```layers NAME ```` of ARCHITECTURE.md: one layer a line, bottom up,
/// its modules separated by spaces. Text after `#` is a comment.
fn layer_table(doc: &str, name: &str) -> Vec<Vec<String>> {
    let fence = format!("```layers {name}");
    let mut lines = doc.lines().skip_while(|l| l.trim() != fence);
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no ```layers {name} block"
    );
    lines
        .take_while(|l| l.trim() != "```")
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect()
}

/// Source text without comments, so that a comment naming `crate::x` is no import.
fn code_of(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            // A `//` inside a string literal (a URL, say) would cut the line short; the lines
            // that matter here are `use` lines and paths, which hold none.
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules a piece of code names through `crate::` (`crate::a::b`, and each item
/// of `crate::{a, b::{c, d}}`).
fn crate_refs(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().last();
        rest = &rest[i + "crate::".len()..];
        // `sharedos_crate::x` or `my_crate::` are other paths.
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let mut depth = 0usize;
            let mut item = String::new();
            let mut items = Vec::new();
            for c in group.chars() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => items.push(std::mem::take(&mut item)),
                    _ if depth == 0 => item.push(c),
                    _ => {}
                }
            }
            items.push(item);
            for it in items {
                if let Some(name) = leading_ident(it.trim()) {
                    out.insert(name);
                }
            }
        } else if let Some(name) = leading_ident(rest) {
            out.insert(name);
        }
    }
    out.remove("self");
    out
}

fn leading_ident(s: &str) -> Option<String> {
    let id: String = s
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect();
    (!id.is_empty()).then_some(id)
}

/// Top-level module name -> every top-level module its files name, for the crate at `src`.
fn imports(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for entry in std::fs::read_dir(src).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        if matches!(name.as_str(), "lib" | "main") {
            continue;
        }
        let mut files = Vec::new();
        collect_rs(&path, &mut files);
        let refs = out.entry(name.clone()).or_default();
        for f in files {
            refs.extend(crate_refs(&code_of(&std::fs::read_to_string(&f).unwrap())));
        }
        refs.remove(&name);
    }
    out
}

fn collect_rs(path: &Path, out: &mut Vec<PathBuf>) {
    if path.is_dir() {
        for e in std::fs::read_dir(path).unwrap() {
            collect_rs(&e.unwrap().path(), out);
        }
    } else if path.extension().is_some_and(|e| e == "rs") {
        out.push(path.to_path_buf());
    }
}

/// What is wrong with `imports` against `layers`: a module in no layer or in two, a layer
/// naming a module that does not exist, and every import of a module from its own layer or one
/// above it.
fn violations(layers: &[Vec<String>], imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut problems = Vec::new();
    let mut level: BTreeMap<&str, usize> = BTreeMap::new();
    for (i, layer) in layers.iter().enumerate() {
        for m in layer {
            if level.insert(m, i).is_some() {
                problems.push(format!("{m} is in two layers"));
            }
            if !imports.contains_key(m) {
                problems.push(format!("layer {i} names {m}, which is no module"));
            }
        }
    }
    for (m, refs) in imports {
        let Some(&mine) = level.get(m.as_str()) else {
            problems.push(format!("{m} is in no layer"));
            continue;
        };
        for r in refs {
            match level.get(r.as_str()) {
                Some(&theirs) if theirs < mine => {}
                Some(&theirs) => problems.push(format!(
                    "{m} (layer {mine}) imports {r} (layer {theirs}): a module imports only from layers below its own"
                )),
                None => {}
            }
        }
    }
    problems
}

fn check(crate_src: &str, table: &str) {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let problems = violations(&layer_table(&doc, table), &imports(&root().join(crate_src)));
    assert!(
        problems.is_empty(),
        "{crate_src} against ARCHITECTURE.md's `layers {table}` table:\n  {}\n\
         Move the code down to where both can reach it, or change the table if the design changed.",
        problems.join("\n  ")
    );
}

#[test]
fn the_host_crate_imports_only_downward() {
    check("src", "host");
}

#[test]
fn the_gate_binary_imports_only_downward() {
    check("guest/src", "guest");
}

#[test]
fn an_upward_import_a_peer_import_and_a_missing_module_are_named() {
    let layers = vec![
        vec!["cmd".to_string()],
        vec!["image".to_string(), "vm".to_string()],
        vec!["run".to_string()],
    ];
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    imports.insert("cmd".into(), BTreeSet::new());
    imports.insert("image".into(), crate_refs("use crate::{cmd, run::boot};"));
    imports.insert(
        "vm".into(),
        crate_refs("let x = crate::image::GUEST_INIT_PATH;"),
    );
    imports.insert("run".into(), crate_refs("use crate::vm::{self, qemu};"));
    imports.insert("judge".into(), BTreeSet::new());
    let p = violations(&layers, &imports);
    assert!(
        p.iter()
            .any(|l| l.starts_with("image (layer 1) imports run (layer 2)")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|l| l.starts_with("vm (layer 1) imports image (layer 1)")),
        "{p:?}"
    );
    assert!(p.iter().any(|l| l == "judge is in no layer"), "{p:?}");
    assert_eq!(p.len(), 3, "{p:?}");
}

#[test]
fn imports_are_read_from_paths_and_nested_groups_not_comments() {
    let code = code_of(
        "use crate::{a::{b, c}, d, self};\n// crate::commented\nfn f() { crate::e::g(); sharedos_crate::h(); }",
    );
    let got: Vec<String> = crate_refs(&code).into_iter().collect();
    assert_eq!(got, ["a", "d", "e"]);
}

/// The fenced block ```` ```named-only-by TYPE ```` of ARCHITECTURE.md: the files (or, ending
/// in `/`, the directories) allowed to name `TYPE`, relative to the workspace. Text after `#` is
/// a comment.
fn named_only_by(doc: &str, ty: &str) -> Vec<String> {
    let fence = format!("```named-only-by {ty}");
    let mut lines = doc.lines().skip_while(|l| l.trim() != fence);
    assert!(
        lines.next().is_some(),
        "ARCHITECTURE.md has no ```named-only-by {ty} block"
    );
    lines
        .take_while(|l| l.trim() != "```")
        .flat_map(|l| l.split('#').next().unwrap_or("").split_whitespace())
        .map(str::to_string)
        .collect()
}

/// Whether `code` names the identifier `ty` (a whole word, so `MyTy` or `Ty2` is another).
fn names(code: &str, ty: &str) -> bool {
    let is_ident = |c: char| c.is_alphanumeric() || c == '_';
    code.match_indices(ty).any(|(i, _)| {
        !code[..i].chars().last().is_some_and(is_ident)
            && !code[i + ty.len()..].chars().next().is_some_and(is_ident)
    })
}

/// Each of `files` (workspace-relative path, source text) that names `ty` in its code, though
/// `allowed` lists neither it nor a directory above it; and each entry of `allowed` that is no
/// file or directory among `files`, so that the table cannot go stale.
fn named_outside(allowed: &[String], files: &[(String, String)], ty: &str) -> Vec<String> {
    let permits = |path: &str| {
        allowed.iter().any(|a| match a.strip_suffix('/') {
            Some(dir) => path.starts_with(&format!("{dir}/")),
            None => path == a,
        })
    };
    let mut problems: Vec<String> = files
        .iter()
        .filter(|(path, text)| names(&code_of(text), ty) && !permits(path))
        .map(|(path, _)| {
            format!("{path} names {ty}: only the command modules and the plan may; give it the part of run::Resolved it reads")
        })
        .collect();
    for a in allowed {
        let exists = files.iter().any(|(path, _)| match a.strip_suffix('/') {
            Some(dir) => path.starts_with(&format!("{dir}/")),
            None => path == a,
        });
        if !exists {
            problems.push(format!(
                "the table names {a}, which is no source file or directory"
            ));
        }
    }
    problems
}

/// Every `.rs` file under the workspace's `dirs`, as (workspace-relative path, text).
fn sources(dirs: &[&str]) -> Vec<(String, String)> {
    let mut paths = Vec::new();
    for d in dirs {
        collect_rs(&root().join(d), &mut paths);
    }
    paths
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root())
                .unwrap()
                .to_string_lossy()
                .to_string();
            let text = std::fs::read_to_string(&p).unwrap();
            (rel, text)
        })
        .collect()
}

#[test]
fn the_run_options_are_named_only_by_the_commands_and_the_plan() {
    let doc = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let allowed = named_only_by(&doc, "VmRunOptions");
    let problems = named_outside(
        &allowed,
        &sources(&["src", "xtask/src", "guest/src", "guest/report/src"]),
        "VmRunOptions",
    );
    assert!(
        problems.is_empty(),
        "against ARCHITECTURE.md's `named-only-by VmRunOptions` table:\n  {}\n\
         A phase receives what the plan resolved (run::Resolved's parts), never the options.",
        problems.join("\n  ")
    );
}

#[test]
fn a_phase_naming_the_options_and_a_stale_entry_are_named() {
    let doc = "x\n```named-only-by Opts\nsrc/run/mod.rs src/run/plan.rs # commands\nxtask/src/\nsrc/gone.rs\n```\n";
    let allowed = named_only_by(doc, "Opts");
    assert_eq!(
        allowed,
        [
            "src/run/mod.rs",
            "src/run/plan.rs",
            "xtask/src/",
            "src/gone.rs"
        ]
    );
    let f = |p: &str, t: &str| (p.to_string(), t.to_string());
    let files = [
        f("src/run/mod.rs", "pub struct Opts { a: u8 }"),
        f("src/run/plan.rs", ""),
        f("xtask/src/bench.rs", "fn b(o: &Opts) {}"),
        f("src/run/boot.rs", "use super::{Boot, Opts};"),
        f(
            "src/run/gates.rs",
            "/// Not [`Opts`]: a comment names no type.\nfn g() {}",
        ),
        f("src/run/archive.rs", "struct MyOpts; struct Opts2;"),
        f("src/xtask/src/fake.rs", "fn c(o: Opts) {}"),
    ];
    let p = named_outside(&allowed, &files, "Opts");
    assert!(
        p.iter()
            .any(|l| l.starts_with("src/run/boot.rs names Opts")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|l| l.starts_with("src/xtask/src/fake.rs names Opts")),
        "{p:?}"
    );
    assert!(
        p.iter()
            .any(|l| l == "the table names src/gone.rs, which is no source file or directory"),
        "{p:?}"
    );
    assert_eq!(p.len(), 3, "{p:?}");
}
