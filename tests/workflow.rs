//! The GitHub Actions workflow cannot run here, so every command it runs must be one the project
//! runs itself: this test extracts the `run:` commands from .github/workflows/vm-run.yml (line
//! based, no YAML library), requires each to be in the table below, and checks that the table's
//! evidence (.ci/run or a test that runs the same command) is really there. It also runs the
//! vm-run step's exit-code logic with the real command replaced by each exit code.

use std::path::{Path, PathBuf};
use std::process::Command;

const WORKFLOW: &str = ".github/workflows/vm-run.yml";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("reading {rel}: {e}"))
}

/// One command the workflow may run, and where the project runs the same thing: each
/// (file, text) must be found in that file.
struct Known {
    command: &'static str,
    evidence: &'static [(&'static str, &'static str)],
}

const KNOWN: &[Known] = &[
    // The one install step; .ci/run adds --tests, and tests/install.rs runs it bare.
    Known {
        command: "sudo .ci/install-host",
        evidence: &[
            (".ci/run", "\n.ci/install-host --tests\n"),
            ("tests/install.rs", "install_host(&[])"),
            ("README.md", "sudo .ci/install-host\n"),
        ],
    },
    // vm-run as an unprivileged user with --mode fakechroot, --accel auto and --out
    // (tests/vm_run.rs, through tests/common/mod.rs); --mode belongs to the image options vm-run shares with `xtask image`.
    Known {
        command: "cargo xtask vm-run --mode fakechroot --accel auto --out reports/ci || status=$?",
        evidence: &[
            ("tests/common/mod.rs", "\"vm-run\""),
            ("tests/common/mod.rs", "\"--accel\""),
            ("tests/vm_run.rs", "\"auto\""),
            ("tests/common/mod.rs", "\"--out\""),
            ("tests/common/mod.rs", "\"--mode\""),
            ("tests/common/mod.rs", "\"fakechroot\""),
            ("xtask/src/main.rs", "image: BuildOptions"),
        ],
    },
    Known {
        command:
            "cargo run -p sharedos-rig -- show reports/ci --format junit > reports/ci/junit.xml",
        evidence: &[
            ("tests/real_reports.rs", "show(&r.a, \"junit\")"),
            (
                "tests/cli_reports.rs",
                "\"show\", \"DIR\", \"--format\", \"junit\"",
            ),
        ],
    },
    Known {
        command:
            "cargo run -p sharedos-rig -- show reports/ci --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[
            ("tests/real_reports.rs", "show(&r.a, \"md\")"),
            (
                "tests/cli_reports.rs",
                "\"show\", \"DIR\", \"--format\", \"md\"",
            ),
        ],
    },
    // Shell plumbing of the vm-run step, checked by vm_run_step_accepts_exactly_0_and_3.
    Known {
        command: "status=0",
        evidence: &[],
    },
    Known {
        command: "echo \"vm-run exited $status\"",
        evidence: &[],
    },
    Known {
        command: "test \"$status\" -eq 0 || test \"$status\" -eq 3",
        evidence: &[],
    },
];

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

#[test]
fn the_parser_reads_single_lines_and_blocks() {
    let y = "steps:\n  - run: echo a\n  - name: x\n    run: |\n      one\n      # no\n\n      two\n    if: always()\n  - run: three\n";
    assert_eq!(
        run_blocks(y),
        vec![vec!["echo a"], vec!["one", "two"], vec!["three"]]
    );
}

#[test]
fn every_workflow_command_is_one_the_project_runs_itself() {
    let yaml = read(WORKFLOW);
    let commands: Vec<String> = run_blocks(&yaml).into_iter().flatten().collect();
    assert!(!commands.is_empty());
    for c in &commands {
        assert!(
            KNOWN.iter().any(|k| k.command == c),
            "{WORKFLOW} runs `{c}`, which is not in tests/workflow.rs's list of commands the \
             project runs itself: run it in .ci/run or a test first, then add it with its evidence"
        );
    }
    for k in KNOWN {
        assert!(
            commands.iter().any(|c| c == k.command),
            "`{}` is listed but {WORKFLOW} no longer runs it: drop it from the list",
            k.command
        );
        for (file, needle) in k.evidence {
            assert!(
                read(file).contains(needle),
                "`{}` claims {file} runs it, but {file} has no `{needle}`",
                k.command
            );
        }
    }
    // The files it names are the ones .ci/run runs: the whole test suite, ignored tests included.
    let ci = read(".ci/run");
    assert!(ci.contains("cargo test --workspace --locked -- --include-ignored"));
}

#[test]
fn only_package_installation_uses_sudo() {
    for c in run_blocks(&read(WORKFLOW)).into_iter().flatten() {
        if c.contains("sudo") {
            assert_eq!(
                c, "sudo .ci/install-host",
                "sudo for something other than the install step"
            );
        }
    }
}

#[test]
fn the_package_lists_it_installs_name_the_host_tools() {
    let o = Command::new("sh")
        .arg("-c")
        .arg("grep -hv '^#' .ci/packages.txt .ci/packages-image.txt")
        .current_dir(root())
        .output()
        .unwrap();
    assert!(o.status.success());
    let pkgs: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    // QEMU is the install step's own choice, always as a pair.
    let script = read(".ci/install-host");
    assert!(script.contains("qemu=(qemu-system-x86 qemu-utils)"));
    assert!(script.contains("qemu=(\"qemu-system-x86=$v\" \"qemu-utils=$v\")"));
    for p in [
        "mmdebstrap",
        "fakechroot",
        "fakeroot",
        "genext2fs",
        "openssh-client",
        "libssl-dev",
        "pkg-config",
    ] {
        assert!(
            pkgs.iter().any(|x| x == p),
            "{p} is not installed: {pkgs:?}"
        );
    }
}

#[test]
fn the_workflow_has_its_triggers_cache_summary_and_artifact() {
    let y = read(WORKFLOW);
    for needle in [
        "\non:\n",
        "\n  push:\n",
        "\n  pull_request:\n",
        "\n  workflow_dispatch:\n",
        "runs-on: ubuntu-latest",
        "SHAREDOS_RIG_CACHE: ${{ github.workspace }}/.rig-cache",
        "uses: actions/cache@v4",
        "path: ${{ github.workspace }}/.rig-cache",
        "hashFiles('images/bookworm/packages.lock', 'images/bookworm/*')",
        "uses: actions/upload-artifact@v4",
        "uses: actions/attest-build-provenance@v2",
        "subject-path: reports/ci/report.json",
        "id-token: write",
        "attestations: write",
        "path: reports/ci\n",
        "paths: reports/ci/junit.xml",
    ] {
        assert!(y.contains(needle), "{WORKFLOW} lacks `{needle}`");
    }
    // The image cache is where the builder looks for it.
    assert!(read("src/image/cache.rs").contains("\"SHAREDOS_RIG_CACHE\""));
    // Everything after vm-run runs even when vm-run failed, so a failed run is still reported.
    let after = &y[y.find("- name: vm-run").unwrap()..];
    let later_steps = after.matches("\n      - ").count();
    assert_eq!(
        after.matches("if: always()").count(),
        later_steps,
        "{after}"
    );
}

#[test]
fn vm_run_step_accepts_exactly_0_and_3() {
    let y = read(WORKFLOW);
    let step = run_blocks(&y)
        .into_iter()
        .find(|b| b.iter().any(|c| c.starts_with("cargo xtask vm-run ")))
        .expect("a run block with cargo xtask vm-run");
    for code in 0..=4 {
        // The step with the real command replaced by one that exits `code`.
        let script: Vec<String> = step
            .iter()
            .map(|c| match c.strip_prefix("cargo xtask vm-run ") {
                Some(rest) => {
                    let tail = &rest[rest.find(" || ").expect("an || status=$?")..];
                    format!("(exit {code}){tail}")
                }
                None => c.clone(),
            })
            .collect();
        // GitHub's default shell for run steps on Linux.
        let o = Command::new("bash")
            .args(["--noprofile", "--norc", "-e", "-c", &script.join("\n")])
            .current_dir(Path::new("/"))
            .output()
            .unwrap();
        let ok = o.status.success();
        assert_eq!(ok, code == 0 || code == 3, "exit {code}: {script:?}");
        assert_eq!(
            String::from_utf8_lossy(&o.stdout),
            format!("vm-run exited {code}\n")
        );
    }
}
