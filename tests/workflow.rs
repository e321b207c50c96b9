//! The GitHub Actions workflow cannot run here, so every command it runs must be one the project
//! runs itself: this test extracts the `run:` commands from .github/workflows/vm-run.yml (line
//! based, no YAML library), requires each to be in the table below, and checks that the table's
//! evidence (.ci/run or a test that runs the same command) is really there. It also runs the
//! vm-run step's exit-code logic with the real command replaced by each exit code, the
//! accelerator steps' own lines on constructed reports, and the install step's --open-kvm and
//! --allow-userns helpers on stand-ins for /dev/kvm, udev and the AppArmor setting.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use sharedos_report::report::{self, VmProvenance};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

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
    // The one install step, in the merge and lint jobs; .ci/run adds --tests, and
    // tests/install.rs runs it bare.
    Known {
        command: "sudo .ci/install-host",
        evidence: &[
            (".ci/run", "\n.ci/install-host --tests\n"),
            ("tests/install.rs", "install_host(&[])"),
            ("README.md", "sudo .ci/install-host\n"),
        ],
    },
    // In the vm-run jobs, with KVM opened and user namespaces allowed: run below with both
    // flags against stand-ins, and each helper on its own, failing included.
    Known {
        command: "sudo .ci/install-host --open-kvm --allow-userns",
        evidence: &[
            ("tests/workflow.rs", "&[\"--open-kvm\", \"--allow-userns\"],"),
            ("tests/workflow.rs", "fn open_kvm_writes_the_rule_applies_it_and_a_second_run_changes_nothing()"),
            ("tests/workflow.rs", "fn allow_userns_lifts_the_restriction_once()"),
            (".ci/install-host", "[ \"$open_kvm\" = 1 ] && \"$ci/open-kvm\""),
            (".ci/install-host", "[ \"$allow_userns\" = 1 ] && \"$ci/allow-userns\""),
        ],
    },
    // The extended tier's job: root installs what the tests need (cargo-nextest included) and
    // runs the suite's other tier, as .ci/run does for the ci tier. The runner's PATH and HOME
    // carry its cargo; KVM opened as in the vm-run jobs.
    Known {
        command: "sudo env \"PATH=$PATH\" \"HOME=$HOME\" .ci/install-host --tests --open-kvm",
        evidence: &[
            (".ci/run", "\n.ci/install-host --tests\n"),
            (".ci/install-host", "[ \"$tests\" = 1 ] && install_nextest"),
            (".ci/install-host", "[ \"$open_kvm\" = 1 ] && \"$ci/open-kvm\""),
        ],
    },
    Known {
        command: "sudo env \"PATH=$PATH\" \"HOME=$HOME\" CI=true cargo xtask test --tier extended",
        evidence: &[
            (".ci/run", "\ncargo xtask test\n"),
            ("xtask/src/test.rs", "Tier::Extended => \"extended\","),
            (".config/nextest.toml", "[profile.extended]"),
        ],
    },
    // The accelerator steps, run below on constructed reports with the workflow's own lines.
    Known {
        command: ".ci/accel summary \"reports/${{ matrix.image }}\" >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[("tests/workflow.rs", "fn the_summary_step_shows_the_accelerator_escaped()")],
    },
    Known {
        command: ".ci/accel check \"reports/${{ matrix.image }}\"",
        evidence: &[("tests/workflow.rs", "fn the_check_step_fails_on_tcg_where_kvm_opens()")],
    },
    // The lint job: tests/ci_lint.rs runs fmt and clippy here, and shows each failing; .ci/run's
    // full suite includes every unit test that the fast loop runs.
    Known {
        command: "cargo fmt --all --check",
        evidence: &[("tests/ci_lint.rs", "\"fmt --all --check\"")],
    },
    Known {
        command: "cargo clippy --workspace --all-targets -- -D warnings",
        evidence: &[(
            "tests/ci_lint.rs",
            "\"clippy --workspace --all-targets -- -D warnings\"",
        )],
    },
    Known {
        command: "cargo test --workspace --lib --bins",
        evidence: &[
            (".ci/run", "\ncargo xtask test\n"),
            ("xtask/src/test.rs", "\"--run-ignored\","),
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
        command: "cargo run -p sharedos-rig -- matrix merge --out matrix --images-dir images --images bookworm,bookworm-bpo,bookworm-browser,bookworm-desktop,trixie,trixie-bpo,trixie-bpo-criu42,trixie-desktop,forky reports/* || status=$?",
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
    assert!(ci.contains("\ncargo xtask test\n"));
}

#[test]
fn only_installation_and_the_extended_tier_use_sudo() {
    for c in run_blocks(&read(WORKFLOW)).into_iter().flatten() {
        if c.contains("sudo") {
            // The extended tier's suite runs as root, as .ci/run runs the ci tier.
            assert!(
                c == "sudo .ci/install-host"
                    || c == "sudo .ci/install-host --open-kvm --allow-userns"
                    || c == "sudo env \"PATH=$PATH\" \"HOME=$HOME\" .ci/install-host --tests --open-kvm"
                    || c == "sudo env \"PATH=$PATH\" \"HOME=$HOME\" CI=true cargo xtask test --tier extended",
                "sudo for something other than the install step or the extended tier: {c}"
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
        "\n  schedule:\n",
        "if: github.event_name == 'schedule' || github.event_name == 'workflow_dispatch'",
        "run: sudo env \"PATH=$PATH\" \"HOME=$HOME\" CI=true cargo xtask test --tier extended",
        "runs-on: ubuntu-latest",
        "SHAREDOS_RIG_CACHE: ${{ github.workspace }}/.rig-cache",
        "uses: actions/cache@v5",
        "path: ${{ github.workspace }}/.rig-cache",
        "hashFiles(format('images/{0}/packages.lock', matrix.image), 'images/*/image.conf', 'images/base/*')",
        "uses: actions/upload-artifact@v6",
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
    assert!(merge.contains("uses: actions/download-artifact@v7"));
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

/// A scratch directory removed when the test ends, pass or fail.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "sharedos-rig-workflow-{}-{name}",
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

/// The vm-run jobs open KVM and allow user namespaces in their install step, then put the
/// accelerator in the summary and check it, after the run and whatever it did; the other jobs
/// boot nothing and change nothing beyond packages. Only the vm-run jobs may attest.
#[test]
fn the_vm_run_jobs_open_kvm_and_report_and_check_the_accelerator() {
    let y = read(WORKFLOW);
    let runs = job(&y, "vm-run");
    assert!(
        runs.contains("        run: sudo .ci/install-host --open-kvm --allow-userns\n"),
        "{runs}"
    );
    let at = |needle: &str| {
        runs.find(needle)
            .unwrap_or_else(|| panic!("the vm-run job has no `{needle}`"))
    };
    let run = at("- name: vm-run\n");
    let summary = at(
        "        if: always()\n        run: .ci/accel summary \"reports/${{ matrix.image }}\" >> \"$GITHUB_STEP_SUMMARY\"\n",
    );
    let check =
        at("        if: always()\n        run: .ci/accel check \"reports/${{ matrix.image }}\"\n");
    assert!(run < summary && summary < check);
    // What the steps read is the accelerator vm-run records.
    let script = read(".ci/accel");
    assert!(script.contains("jq -r '.vm.accel // \"\""));
    assert!(read("guest/report/src/report.rs").contains("pub accel: String,"));

    assert!(
        y.contains("\npermissions:\n  contents: read\n\njobs:\n"),
        "the workflow grants only read access by default"
    );
    assert!(runs.contains(
        "    permissions:\n      contents: read\n      # For each report's build-provenance attestation.\n      id-token: write\n      attestations: write\n"
    ));
    for name in ["matrix", "lint"] {
        let j = job(&y, name);
        assert!(j.contains("        run: sudo .ci/install-host\n"), "{name}");
        assert!(
            !j.contains("--open-kvm") && !j.contains("--allow-userns"),
            "{name}"
        );
        assert!(
            !j.contains("id-token") && !j.contains("attestations"),
            "{name}"
        );
    }
}

/// The lint job: the standards' fmt and clippy and the fast unit tests, with the toolchain's
/// rustfmt and clippy components.
#[test]
fn the_lint_job_runs_fmt_clippy_and_the_unit_tests() {
    let y = read(WORKFLOW);
    let lint = job(&y, "lint");
    let commands: Vec<String> = run_blocks(lint).into_iter().flatten().collect();
    assert_eq!(
        commands,
        [
            "sudo .ci/install-host",
            "cargo fmt --all --check",
            "cargo clippy --workspace --all-targets -- -D warnings",
            "cargo test --workspace --lib --bins",
        ]
    );
    assert!(lint.contains("      - uses: dtolnay/rust-toolchain@stable\n        with:\n          components: rustfmt, clippy\n"));
    assert!(lint.contains("      - uses: actions/checkout@v5\n"));
}

/// DIR/report.json as vm-run writes the host's part: the real provenance type, so a renamed
/// field breaks this test rather than the workflow.
fn write_vm_report(dir: &Path, accel: &str, reason: &str) {
    let vm = VmProvenance {
        accel: accel.into(),
        accel_reason: reason.into(),
        image_builder_mode: "unshare".into(),
        image_name: "bookworm".into(),
        ..Default::default()
    };
    let doc = serde_json::json!({ "schema_version": report::SCHEMA_VERSION, "vm": vm });
    std::fs::create_dir_all(dir).unwrap();
    std::fs::write(
        dir.join(report::REPORT_FILE),
        serde_json::to_vec_pretty(&doc).unwrap(),
    )
    .unwrap();
}

/// Runs the workflow's own line that starts with `prefix` from the repository root, with the
/// image's report directory at `reports`, /dev/kvm at `kvm` and the job summary at `summary`.
fn run_accel_step(prefix: &str, reports: &Path, kvm: &Path, summary: &Path) -> (bool, String) {
    let line = run_blocks(&read(WORKFLOW))
        .into_iter()
        .flatten()
        .find(|c| c.starts_with(prefix))
        .unwrap_or_else(|| panic!("no run line starting {prefix}"));
    let line = line.replace(
        "\"reports/${{ matrix.image }}\"",
        &format!("'{}'", reports.display()),
    );
    assert!(!line.contains("${{"), "{line}");
    let o = Command::new("bash")
        .args(["--noprofile", "--norc", "-e", "-c", &line])
        .current_dir(root())
        .env("GITHUB_STEP_SUMMARY", summary)
        .env("KVM_DEVICE", kvm)
        .output()
        .unwrap();
    (o.status.success(), text(&o))
}

fn jq_missing(test: &str) -> bool {
    if Command::new("jq").arg("--version").output().is_err() {
        common::skip::cannot_run(test, "jq is not installed (sudo .ci/install-host)");
        return true;
    }
    false
}

/// The summary step shows the accelerator and why, from the report; a hostile reason reaches
/// the page bounded and escaped; a report that is missing, a link, not JSON or too big is named
/// as such, and the step still succeeds (the check step is the one that fails).
#[test]
fn the_summary_step_shows_the_accelerator_escaped() {
    let t = "the_summary_step_shows_the_accelerator_escaped";
    if jq_missing(t) {
        return;
    }
    let s = Scratch::new("summary");
    let summary = s.0.join("summary.md");
    let absent = s.0.join("no-kvm");
    let step = |dir: &Path| {
        let _ = std::fs::remove_file(&summary);
        let (ok, out) = run_accel_step(".ci/accel summary ", dir, &absent, &summary);
        assert!(ok, "{out}");
        std::fs::read_to_string(&summary).unwrap()
    };

    let kvm = s.0.join("kvm-run");
    write_vm_report(
        &kvm,
        "kvm",
        "auto: /dev/kvm opened read-write and the kernel banner appeared after 0.4 s",
    );
    let md = step(&kvm);
    assert!(md.starts_with("### Accelerator\n\n"), "{md}");
    assert!(md.contains("\n- ran under: **kvm**\n"), "{md}");
    assert!(md.contains("\n- why: auto\\: /dev/kvm opened read\\-write and the kernel banner appeared after 0\\.4 s\n"), "{md}");
    assert!(md.contains("\n- image builder mode: unshare\n"), "{md}");
    assert!(md.contains(" on this runner: absent\n"), "{md}");

    // A reason written to break out: HTML, a table cell, a link, a terminal escape, a second
    // line, and far too long.
    let hostile = format!(
        "<script>alert(1)</script> | `code` [link](http://evil.example) \u{1b}[31mred\n- **fake line** {}",
        "A".repeat(2000)
    );
    let bad = s.0.join("hostile");
    write_vm_report(&bad, "tcg", &hostile);
    let md = step(&bad);
    let why = md
        .lines()
        .find(|l| l.starts_with("- why: "))
        .unwrap_or_else(|| panic!("{md}"));
    assert!(!md.contains('<') && !md.contains('\u{1b}'), "{md}");
    assert!(
        why.contains("&lt;script&gt;alert\\(1\\)&lt;/script&gt;"),
        "{why}"
    );
    assert!(
        why.contains(" \\| \\`code\\` \\[link\\]\\(http\\://evil\\.example\\) "),
        "{why}"
    );
    assert!(why.contains(" \\- \\*\\*fake line\\*\\* "), "{why}");
    assert!(!md.lines().any(|l| l.starts_with("- **fake")), "{md}");
    assert!(
        why.matches('A').count() < 300,
        "not bounded: {} chars",
        why.len()
    );
    for (i, c) in why.char_indices() {
        if "|`[]()*_#".contains(c) {
            assert_eq!(&why[i - 1..i], "\\", "unescaped {c} in {why}");
        }
    }

    // No report, a link, not JSON, too big: said, not guessed.
    let none = s.0.join("none");
    std::fs::create_dir_all(&none).unwrap();
    assert!(step(&none).contains("\n- **not known**: no report at "));
    let link = s.0.join("link");
    std::fs::create_dir_all(&link).unwrap();
    std::os::unix::fs::symlink(kvm.join("report.json"), link.join("report.json")).unwrap();
    let md = step(&link);
    assert!(md.contains("is a symbolic link; refused"), "{md}");
    assert!(!md.contains("ran under"), "{md}");
    let garbage = s.0.join("garbage");
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("report.json"), b"{ not json").unwrap();
    assert!(step(&garbage).contains("is not JSON"));
    let big = s.0.join("big");
    std::fs::create_dir_all(&big).unwrap();
    let f = std::fs::File::create(big.join("report.json")).unwrap();
    f.set_len((16 << 20) + 1).unwrap();
    assert!(step(&big).contains("bytes; refused"));
    let early = s.0.join("early");
    write_vm_report(&early, "", "");
    assert!(step(&early).contains("names no accelerator"));
}

/// The check step fails exactly when KVM opens here and the guest ran under anything else, or
/// when there is no accelerator to check.
#[test]
fn the_check_step_fails_on_tcg_where_kvm_opens() {
    let t = "the_check_step_fails_on_tcg_where_kvm_opens";
    if jq_missing(t) {
        return;
    }
    let s = Scratch::new("check");
    let summary = s.0.join("summary.md");
    // A regular file opens read-write as /dev/kvm would once opened; a directory never does.
    let opens = s.0.join("kvm-open");
    std::fs::write(&opens, b"").unwrap();
    let closed = s.0.join("kvm-closed");
    std::fs::create_dir_all(&closed).unwrap();
    let absent = s.0.join("kvm-absent");
    let kvm = s.0.join("kvm-run");
    write_vm_report(&kvm, "kvm", "auto: the kernel banner appeared after 0.4 s");
    let tcg = s.0.join("tcg-run");
    write_vm_report(
        &tcg,
        "tcg",
        "auto: under KVM the kernel showed no boot progress \u{1b}[2J within 8 s",
    );
    let check = |dir: &Path, dev: &Path| run_accel_step(".ci/accel check ", dir, dev, &summary);

    let (ok, out) = check(&kvm, &opens);
    assert!(ok, "{out}");
    assert!(out.contains("the guest ran under kvm"), "{out}");

    let (ok, out) = check(&tcg, &opens);
    assert!(!ok, "TCG where KVM opens must fail: {out}");
    assert!(out.contains("but the guest ran under 'tcg'"), "{out}");
    assert!(out.contains("serial-kvm-probe.log"), "a fix-it line: {out}");
    assert!(
        !out.contains('\u{1b}'),
        "the reason reached the log unescaped: {out:?}"
    );

    for dev in [&absent, &closed] {
        let (ok, out) = check(&tcg, dev);
        assert!(ok, "{}: {out}", dev.display());
        assert!(out.contains("so TCG is expected"), "{out}");
    }

    let none = s.0.join("none");
    std::fs::create_dir_all(&none).unwrap();
    let (ok, out) = check(&none, &absent);
    assert!(!ok, "no report: nothing was checked, so no success: {out}");
    assert!(
        out.contains("the accelerator could not be checked"),
        "{out}"
    );
    assert!(!summary.exists(), "the check writes no summary");
}

/// Runs one of the install step's helpers (.ci/open-kvm, .ci/allow-userns) with `env`, and
/// `bin` first on PATH.
fn helper(name: &str, env: &[(&str, &Path)], bin: &Path) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(root().join(".ci").join(name));
    c.env("PATH", path).env_remove("SUDO_USER");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    eprintln!("--- .ci/{name} ({}):\n{}", o.status, text(&o));
    o
}

/// A stand-in udevadm that logs its arguments and, on `trigger`, does what udev does with the
/// rule: the device gets mode 0666 if a rule in the rules directory says so. `applies` false
/// stands for a host where udev is not running.
fn stub_udevadm(bin: &Path, log: &Path, applies: bool) {
    std::fs::create_dir_all(bin).unwrap();
    let apply = if applies {
        "[ \"$1\" = trigger ] && grep -qs 'MODE=\"0666\"' \"$UDEV_RULES_DIR\"/*.rules && chmod 0666 \"$KVM_DEVICE\"\n"
    } else {
        ""
    };
    write_executable(
        &bin.join("udevadm"),
        &format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\n{apply}exit 0\n",
            log.display()
        ),
    );
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn root_or_skip(test: &str) -> bool {
    if !common::is_root() {
        common::skip::cannot_run(
            test,
            "the install step's helpers refuse to run without root",
        );
        return false;
    }
    true
}

/// --open-kvm: where the device exists, the usual udev rule, reloaded and triggered, and the
/// device ends mode 0666; a second run changes nothing; no device, nothing written; a udev that
/// does not apply the rule fails the step with the fix.
#[test]
fn open_kvm_writes_the_rule_applies_it_and_a_second_run_changes_nothing() {
    if !root_or_skip("open_kvm_writes_the_rule_applies_it_and_a_second_run_changes_nothing") {
        return;
    }
    let s = Scratch::new("open-kvm");
    let (dev, rules, bin, log) = (
        s.0.join("kvm"),
        s.0.join("rules.d"),
        s.0.join("bin"),
        s.0.join("udevadm.log"),
    );
    stub_udevadm(&bin, &log, true);
    let env = [
        ("KVM_DEVICE", dev.as_path()),
        ("UDEV_RULES_DIR", rules.as_path()),
    ];

    // No device: nothing to do, nothing written.
    let o = helper("open-kvm", &env, &bin);
    assert!(o.status.success());
    assert!(text(&o).contains("nothing to open"), "{}", text(&o));
    assert!(!rules.exists() && !log.exists());

    // root:kvm 0660, as on a hosted runner.
    std::fs::write(&dev, b"").unwrap();
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o660)).unwrap();
    let o = helper("open-kvm", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    let rule = rules.join("65-sharedos-rig-kvm.rules");
    assert_eq!(
        std::fs::read_to_string(&rule).unwrap(),
        "KERNEL==\"kvm\", GROUP=\"kvm\", MODE=\"0666\", OPTIONS+=\"static_node=kvm\"\n"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.starts_with("control --reload-rules\ntrigger --name-match=kvm\n"),
        "{calls}"
    );
    assert_eq!(mode(&dev), 0o666);
    assert!(text(&o).contains("wrote udev rule"), "{}", text(&o));
    assert!(text(&o).contains("mode 0660 -> 0666"), "{}", text(&o));

    // Again: nothing to change, udev left alone.
    let o = helper("open-kvm", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("nothing changed"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), calls);

    // A udev that does not apply the rule: the step fails and says what to do.
    std::fs::remove_dir_all(&rules).unwrap();
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o660)).unwrap();
    stub_udevadm(&bin, &log, false);
    let o = helper("open-kvm", &env, &bin);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("is still mode 0660"), "{}", text(&o));
    assert!(text(&o).contains("chmod 0666"), "{}", text(&o));
}

/// --allow-userns: 1 becomes 0 and is read back; a second run changes nothing; no setting,
/// nothing to do; a setting that cannot be written fails the step with the fix.
#[test]
fn allow_userns_lifts_the_restriction_once() {
    if !root_or_skip("allow_userns_lifts_the_restriction_once") {
        return;
    }
    let s = Scratch::new("allow-userns");
    let bin = s.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let knob = s.0.join("apparmor_restrict_unprivileged_userns");
    let env = [("USERNS_SYSCTL", knob.as_path())];

    let o = helper("allow-userns", &env, &bin);
    assert!(o.status.success());
    assert!(text(&o).contains("nothing to lift"), "{}", text(&o));
    assert!(!knob.exists());

    std::fs::write(&knob, b"1\n").unwrap();
    let o = helper("allow-userns", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0\n");
    assert!(
        text(&o).contains("1 -> 0 until the next boot"),
        "{}",
        text(&o)
    );

    let o = helper("allow-userns", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already lifted"), "{}", text(&o));

    // /dev/full takes no write.
    let o = helper(
        "allow-userns",
        &[("USERNS_SYSCTL", Path::new("/dev/full"))],
        &bin,
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
        "{}",
        text(&o)
    );
}

/// The workflow's own install line, `.ci/install-host --open-kvm --allow-userns`, run for real
/// as root with the two helpers pointed at stand-ins: the packages part changes nothing on a
/// machine that has them, then each helper runs and says what it did.
#[test]
#[ignore = "runs the install step as root (apt-get update); run with --include-ignored"]
fn the_install_step_passes_its_flags_to_the_helpers() {
    let t = "the_install_step_passes_its_flags_to_the_helpers";
    if !root_or_skip(t) {
        return;
    }
    if !Path::new("/usr/bin/apt-get").exists() {
        common::skip::cannot_run(
            t,
            "this host has no apt-get; the install step supports Debian and Ubuntu",
        );
        return;
    }
    let s = Scratch::new("install-flags");
    let (dev, rules, bin, log, knob) = (
        s.0.join("kvm"),
        s.0.join("rules.d"),
        s.0.join("bin"),
        s.0.join("udevadm.log"),
        s.0.join("userns"),
    );
    stub_udevadm(&bin, &log, true);
    std::fs::write(&dev, b"").unwrap();
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o660)).unwrap();
    std::fs::write(&knob, b"1\n").unwrap();
    let o = install_host_with(
        &["--open-kvm", "--allow-userns"],
        &[
            ("KVM_DEVICE", dev.as_path()),
            ("UDEV_RULES_DIR", rules.as_path()),
            ("USERNS_SYSCTL", knob.as_path()),
        ],
        &bin,
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("install-host: QEMU"), "{out}");
    assert!(out.contains("install-host: KVM: wrote udev rule"), "{out}");
    assert!(
        out.contains("install-host: user namespaces: lifted"),
        "{out}"
    );
    assert_eq!(mode(&dev), 0o666);
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0\n");
}

fn install_host_with(args: &[&str], env: &[(&str, &Path)], bin: &Path) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(root().join(".ci/install-host"));
    c.args(args).env("PATH", path).env_remove("SUDO_USER");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    eprintln!(
        "--- .ci/install-host {args:?} ({}):\n{}",
        o.status,
        text(&o)
    );
    o
}
