//! sharedos-gate: the diagnostic that runs inside the guest (or on any Linux as root). The
//! report schema and the comparisons the host runs again are in sharedos-report (guest/report).
//!
//! Layers, bottom up. A module imports only from layers below its own (`layers_hold` checks):
//!
//! 0. `sharedos_report`: the schema, comparisons and model types the host shares.
//! 1. `exec`, `probe`, `stateapp`, `pstree`, `criu`: one tool each (running a command, reading
//!    /proc, the state app, CRIU's images and command lines).
//! 2. `x11`, `tree`: the X wire; the tree, its namespaces and its workload.
//! 3. `gates`: the run's context, the steps, one file per gate, and the registry `GATES`.
//! 4. `diagnose`: the gate sequence and its rules, the plan, the report.
//! 5. `lies`: the lying-CRIU suite, which runs `diagnose` as a program.
//! 6. `output`: everything the binary prints; `main.rs` parses, calls, and prints through it.

pub mod criu;
pub mod diagnose;
pub mod exec;
pub mod gates;
pub mod lies;
pub mod output;
pub mod probe;
pub mod pstree;
pub mod stateapp;
pub mod tree;
pub mod x11;

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    /// The layer of each top-level module, as the crate's documentation states them.
    const LAYERS: [(&str, u8); 11] = [
        ("exec", 1),
        ("probe", 1),
        ("stateapp", 1),
        ("pstree", 1),
        ("criu", 1),
        ("x11", 2),
        ("tree", 2),
        ("gates", 3),
        ("diagnose", 4),
        ("lies", 5),
        ("output", 6),
    ];

    fn layer(module: &str) -> Option<u8> {
        LAYERS.iter().find(|(m, _)| *m == module).map(|(_, l)| *l)
    }

    /// The top-level modules a source text names through `crate::`, braces of a `use` included.
    fn crate_imports(text: &str) -> BTreeSet<String> {
        let ident = |s: &str| -> String {
            s.chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect()
        };
        let mut found = BTreeSet::new();
        for (i, _) in text.match_indices("crate::") {
            let rest = &text[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let inner = &group[..group.find('}').unwrap_or(group.len())];
                found.extend(inner.split(',').map(|p| ident(p.trim())));
            } else {
                found.insert(ident(rest));
            }
        }
        found.retain(|m| !m.is_empty() && m != "self");
        found
    }

    fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }

    #[test]
    fn layers_hold() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let mut upward = Vec::new();
        for f in &files {
            let rel = f.strip_prefix(&src).unwrap();
            let top = rel.iter().next().unwrap().to_string_lossy();
            let module = top.trim_end_matches(".rs");
            if module == "lib" || module == "main" {
                continue;
            }
            let mine = layer(module).unwrap_or_else(|| {
                panic!("{module} has no layer: add it to LAYERS and to the crate's documentation")
            });
            for dep in crate_imports(&std::fs::read_to_string(f).unwrap()) {
                let theirs =
                    layer(&dep).unwrap_or_else(|| panic!("{} names crate::{dep}", rel.display()));
                if dep != module && theirs >= mine {
                    upward.push(format!(
                        "{} (layer {mine}) imports {dep} (layer {theirs})",
                        rel.display()
                    ));
                }
            }
        }
        assert!(
            upward.is_empty(),
            "imports that do not go down:\n{}",
            upward.join("\n")
        );
    }

    #[test]
    fn an_upward_import_is_seen() {
        let text = "use crate::{exec, gates::Ctx};\nfn f() { crate::diagnose::run(); }";
        let found = crate_imports(text);
        assert_eq!(
            found.into_iter().collect::<Vec<_>>(),
            ["diagnose", "exec", "gates"]
        );
        assert!(layer("diagnose") > layer("gates") && layer("gates") > layer("tree"));
    }
}
