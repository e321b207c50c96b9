//! ARCHITECTURE.md's layer tables, held against the code: every top-level module of the host
//! crate (`src/`) and of the gate binary (`guest/src/`) sits in exactly one layer, and imports
//! only from layers below its own. Fast: it reads source text and runs nothing.

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
