//! The GitHub Actions workflow cannot run here, so every command it runs must be one the project
//! runs itself: this test extracts the `run:` commands from .github/workflows/vm-run.yml (line
//! based, no YAML library), requires each to be in the table in `commands`, and checks that the
//! table's evidence (.ci/run or a test that runs the same command) is really there. It also runs
//! the vm-run step's exit-code logic with the real command replaced by each exit code (`jobs`),
//! the accelerator steps' own lines on constructed reports (`accel`), and the install step's
//! --open-kvm and --allow-userns helpers on stand-ins for /dev/kvm, udev and the AppArmor setting
//! (`install`).

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

// The shared test helpers, as the single-file tests take them with `mod common;`.
#[path = "../common/mod.rs"]
mod common;

mod accel;
mod commands;
mod install;
mod jobs;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

const WORKFLOW: &str = ".github/workflows/vm-run.yml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

/// The `run:` blocks of a workflow, in order, each as its command lines (comments and blank
/// lines dropped). Handles `run: cmd` and `run: |` block scalars.
fn run_blocks(yaml: &str) -> Vec<Vec<String>> {
    let lines: Vec<&str> = yaml.lines().collect();
    let mut blocks = Vec::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim_start().trim_start_matches("- ");
        i += 1;
        let Some(value) = t.strip_prefix("run:") else {
            continue;
        };
        let value = value.trim();
        if value != "|" && value != "|-" && value != ">" {
            blocks.push(vec![value.to_string()]);
            continue;
        }
        assert_ne!(value, ">", "folded run: blocks are not supported here");
        let key_indent = indent(line);
        let mut block = Vec::new();
        while i < lines.len() && (lines[i].trim().is_empty() || indent(lines[i]) > key_indent) {
            let c = lines[i].trim();
            if !c.is_empty() && !c.starts_with('#') {
                block.push(c.to_string());
            }
            i += 1;
        }
        blocks.push(block);
    }
    blocks
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn write_executable(path: &Path, body: &str) {
    std::fs::write(path, body).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
