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
    // The one install step, in both jobs; .ci/run adds --tests, and tests/install.rs runs it bare.
    Known {
        command: "sudo .ci/install-host",
        evidence: &[
            (".ci/run", "\n.ci/install-host --tests\n"),
            ("tests/install.rs", "install_host(&[])"),
            ("README.md", "sudo .ci/install-host\n"),
        ],
    },
    // vm-run of one image as an unprivileged user with --image, --accel auto, --out and no
    // --mode (the builder chooses): tests/vm_matrix.rs runs exactly that for its stale image,
    // and tests/vm_run.rs runs the whole session with --accel auto.
    Known {
        command: "cargo xtask vm-run --image \"${{ matrix.image }}\" --accel auto --out \"reports/${{ matrix.image }}\" || status=$?",
        evidence: &[
            ("tests/common/mod.rs", "\"vm-run\""),
            ("tests/common/mod.rs", "\"--accel\""),
            ("tests/common/mod.rs", "\"--out\""),
            ("tests/vm_run.rs", "\"auto\""),
            ("tests/vm_matrix.rs", "common::vm_run_args(&sb, &gate, &stale_out, \"auto\")"),
            ("tests/vm_matrix.rs", "vr.drain(mode..mode + 2);"),
            ("tests/vm_matrix.rs", "[\"--image\".to_string(), STALE.to_string()]"),
            ("xtask/src/main.rs", "image: BuildOptions"),
        ],
    },
    Known {
        command: "cargo run -p sharedos-rig -- show \"reports/${{ matrix.image }}\" --format junit > \"reports/${{ matrix.image }}.junit.xml\"",
        evidence: &[
            ("tests/real_reports.rs", "show(&r.a, \"junit\")"),
            (
                "tests/cli_reports.rs",
                "\"show\", \"DIR\", \"--format\", \"junit\"",
            ),
        ],
    },
    Known {
        command: "cargo run -p sharedos-rig -- show \"reports/${{ matrix.image }}\" --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[
            ("tests/real_reports.rs", "show(&r.a, \"md\")"),
            (
                "tests/cli_reports.rs",
                "\"show\", \"DIR\", \"--format\", \"md\"",
            ),
        ],
    },
    // The merge over the downloaded report directories: tests/vm_matrix.rs merges real ones
    // (with --images-dir and --images) and holds the table against vm-matrix's;
    // tests/cli_reports.rs runs the command on constructed ones.
    Known {
        command: "cargo run -p sharedos-rig -- matrix merge --out matrix --images-dir images --images bookworm,bookworm-bpo,trixie,trixie-bpo,trixie-bpo-criu42,forky reports/* || status=$?",
        evidence: &[
            ("tests/vm_matrix.rs", "\"matrix\".into(),\n        \"merge\".into(),"),
            ("tests/vm_matrix.rs", "\"--images-dir\".into(),\n        \"images\".into(),\n        \"--images\".into(),"),
            ("tests/vm_matrix.rs", "assert_eq!(md_body(&show(&merged, \"md\")), md_body(&md));"),
            (
                "tests/cli_reports.rs",
                "\"matrix\",\n        \"merge\",\n        \"--out\",\n        ms,\n        \"--images-dir\",",
            ),
        ],
    },
    Known {
        command: "cargo run -p sharedos-rig -- show matrix --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[
            ("tests/vm_matrix.rs", "show(&merged, \"md\")"),
            ("tests/cli_reports.rs", "rig(&[\"show\", ms, \"--format\", \"md\"])"),
        ],
    },
    // Shell plumbing of the two judged steps, checked by the *_step_accepts_* tests below.
    Known {
        command: "status=0",
        evidence: &[],
    },
    Known {
        command: "echo \"vm-run exited $status\"",
        evidence: &[],
    },
    Known {
        command: "test \"$status\" -ne 2",
        evidence: &[],
    },
    Known {
        command: "echo \"matrix merge exited $status\"",
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

/// The text of one job: from its `  name:` line under `jobs:` to the next line indented by
/// exactly two spaces (the next job), or the end.
fn job<'a>(yaml: &'a str, name: &str) -> &'a str {
    let start = yaml
        .find(&format!("\n  {name}:\n"))
        .unwrap_or_else(|| panic!("no job {name}"))
        + 1;
    let mut offset = start;
    for (k, line) in yaml[start..].split_inclusive('\n').enumerate() {
        if k > 0 && line.starts_with("  ") && !line.starts_with("   ") {
            return &yaml[start..offset];
        }
        offset += line.len();
    }
    &yaml[start..]
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
        "hashFiles(format('images/{0}/packages.lock', matrix.image), 'images/*/image.conf', 'images/base/*')",
        "uses: actions/upload-artifact@v4",
        "uses: actions/attest-build-provenance@v2",
        "subject-path: reports/${{ matrix.image }}/report.json",
        "id-token: write",
        "attestations: write",
        "path: reports/${{ matrix.image }}\n",
        "paths: reports/${{ matrix.image }}.junit.xml",
    ] {
        assert!(y.contains(needle), "{WORKFLOW} lacks `{needle}`");
    }
    // The image cache is where the builder looks for it.
    assert!(read("src/image/cache.rs").contains("\"SHAREDOS_RIG_CACHE\""));
    // Within each job, everything after its judged step runs even when that step failed, so a
    // failed run is still reported and uploaded.
    for (name, step) in [
        ("vm-run", "- name: vm-run\n"),
        ("matrix", "- name: Merge the matrix\n"),
    ] {
        let j = job(&y, name);
        let after = &j[j.find(step).unwrap_or_else(|| panic!("{name}: no {step}"))..];
        let later_steps = after.matches("\n      - ").count();
        assert!(later_steps >= 1, "{name}");
        assert_eq!(
            after.matches("if: always()").count(),
            later_steps,
            "{after}"
        );
    }
}

/// One job per image under images/, none stopping the others; the merge job waits for all of
/// them however they ended, downloads what they uploaded and names the same images.
#[test]
fn the_matrix_covers_every_image_and_the_merge_job_takes_every_report() {
    let y = read(WORKFLOW);
    let runs = job(&y, "vm-run");
    assert!(runs.contains("      fail-fast: false\n"), "{runs}");
    assert!(
        !runs.contains("download-artifact"),
        "the job ends where the next begins"
    );
    let line = runs
        .lines()
        .find_map(|l| l.trim().strip_prefix("image: ["))
        .expect("a matrix of images");
    let listed: Vec<&str> = line
        .trim_end_matches(']')
        .split(',')
        .map(str::trim)
        .collect();
    let on_disk = sharedos_rig::image::definition::list_images(&root().join("images"));
    let mut sorted: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
    sorted.sort();
    assert_eq!(
        sorted, on_disk,
        "the workflow's matrix is every image under images/"
    );
    assert!(runs.contains("name: sharedos-rig-report-${{ matrix.image }}\n"));

    let merge = job(&y, "matrix");
    assert!(merge.contains("    needs: vm-run\n"), "{merge}");
    assert!(merge.contains("    if: always()\n"), "{merge}");
    assert!(merge.contains("uses: actions/download-artifact@v4"));
    assert!(merge.contains("pattern: sharedos-rig-report-*\n"));
    assert!(merge.contains("path: reports\n"));
    assert!(merge.contains(&format!(" --images {} reports/*", listed.join(","))));
    assert!(merge.contains("path: matrix\n"));
}

/// A judged step with its real command replaced by one that exits `code`: did it succeed,
/// and what did it print?
fn run_step(prefix: &str, code: i32) -> (bool, String) {
    let y = read(WORKFLOW);
    let step = run_blocks(&y)
        .into_iter()
        .find(|b| b.iter().any(|c| c.starts_with(prefix)))
        .unwrap_or_else(|| panic!("a run block with {prefix}"));
    let script: Vec<String> = step
        .iter()
        .map(|c| match c.strip_prefix(prefix) {
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
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
    )
}

/// A per-image job fails only when the rig failed (2): a gate's verdict is the merge's to
/// judge against the image's expectations.
#[test]
fn vm_run_step_fails_only_on_a_rig_failure() {
    for code in 0..=4 {
        let (ok, out) = run_step("cargo xtask vm-run ", code);
        assert_eq!(ok, code != 2, "exit {code}");
        assert_eq!(out, format!("vm-run exited {code}\n"));
    }
}

/// The merge job passes on 0 (every row as expected) and 3 (only a review outstanding), as
/// vm-matrix's exit codes mean.
#[test]
fn merge_step_accepts_exactly_0_and_3() {
    for code in 0..=4 {
        let (ok, out) = run_step("cargo run -p sharedos-rig -- matrix merge ", code);
        assert_eq!(ok, code == 0 || code == 3, "exit {code}");
        assert_eq!(out, format!("matrix merge exited {code}\n"));
    }
}
