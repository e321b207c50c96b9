//! Every command the workflow runs is in the table here, with its evidence (.ci/run or a test
//! that runs the same command), and that evidence is really there.

use super::{read, root, run_blocks, WORKFLOW};
use std::process::Command;

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
            ("tests/workflow/install.rs", "&[\"--open-kvm\", \"--allow-userns\"],"),
            ("tests/workflow/install.rs", "fn open_kvm_writes_the_rule_applies_it_and_a_second_run_changes_nothing()"),
            ("tests/workflow/install.rs", "fn allow_userns_lifts_the_restriction_once()"),
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
        evidence: &[("tests/workflow/accel.rs", "fn the_summary_step_shows_the_accelerator_escaped()")],
    },
    Known {
        command: ".ci/accel check \"reports/${{ matrix.image }}\"",
        evidence: &[("tests/workflow/accel.rs", "fn the_check_step_fails_on_tcg_where_kvm_opens()")],
    },
    // The compare job: tests/vm_compare.rs runs vm-compare at N = 4 and with --copies max
    // --ksm off, as the user, through the same options; --accel auto as vm-run's jobs.
    Known {
        command: "cargo xtask vm-compare --copies 4 --accel auto --out reports/compare-4",
        evidence: &[
            ("tests/vm_compare.rs", "&[\"--copies\", \"4\"]"),
            ("tests/vm_compare.rs", "args[0] = \"vm-compare\".into();"),
            ("tests/vm_run.rs", "\"auto\""),
        ],
    },
    Known {
        command: "cargo xtask vm-compare --copies max --ksm off --accel auto --out reports/compare-max",
        evidence: &[
            ("tests/vm_compare.rs", "\"max\","),
            ("tests/vm_compare.rs", "\"--ksm\",\n            \"off\","),
        ],
    },
    Known {
        command: ".ci/accel check reports/compare-4/shared-os",
        evidence: &[("tests/workflow/accel.rs", "fn the_check_step_fails_on_tcg_where_kvm_opens()")],
    },
    Known {
        command: "cargo run -p sharedos-rig -- show reports/compare-4 --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[("tests/cli_reports/compare.rs", "\"--format\""), ("tests/vm_compare.rs", ".arg(\"show\")")],
    },
    Known {
        command: "cargo run -p sharedos-rig -- show reports/compare-max --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[("tests/vm_compare.rs", ".arg(\"show\")")],
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
                "tests/cli_reports/show.rs",
                "\"show\", \"DIR\", \"--format\", \"junit\"",
            ),
        ],
    },
    Known {
        command: "cargo run -p sharedos-rig -- show \"reports/${{ matrix.image }}\" --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[
            ("tests/real_reports.rs", "show(&r.a, \"md\")"),
            (
                "tests/cli_reports/show.rs",
                "\"show\", \"DIR\", \"--format\", \"md\"",
            ),
        ],
    },
    // The merge over the downloaded report directories: tests/vm_matrix.rs merges real ones
    // (with --images-dir and --images) and holds the table against vm-matrix's;
    // tests/cli_reports/matrix.rs runs the command on constructed ones.
    Known {
        command: "cargo run -p sharedos-rig -- matrix merge --out matrix --images-dir images --images bookworm,bookworm-apps,bookworm-bpo,bookworm-browser,bookworm-desktop,trixie,trixie-apps,trixie-bpo,trixie-bpo-criu42,trixie-bpo-criu42-apps,trixie-desktop,forky reports/* || status=$?",
        evidence: &[
            ("tests/vm_matrix.rs", "\"matrix\".into(),\n        \"merge\".into(),"),
            ("tests/vm_matrix.rs", "\"--images-dir\".into(),\n        \"images\".into(),\n        \"--images\".into(),"),
            ("tests/vm_matrix.rs", "assert_eq!(md_body(&show(&merged, \"md\")), md_body(&md));"),
            (
                "tests/cli_reports/matrix.rs",
                "\"matrix\",\n        \"merge\",\n        \"--out\",\n        ms,\n        \"--images-dir\",",
            ),
        ],
    },
    // The workload axis: tests/bad_input.rs plans its rows, each row is a vm-run as
    // tests/vm_matrix.rs runs them (with --reports-root), and tests/cli_reports/matrix.rs
    // renders the deployment table from a matrix directory.
    Known {
        command: "cargo xtask vm-matrix --workloads all --accel auto --memory 2048 --reports-root reports || true",
        evidence: &[
            ("tests/bad_input.rs", "\"--workloads\", \"xterm,desktop\", \"--plan\""),
            ("tests/vm_matrix.rs", "\"--reports-root\".into(),"),
        ],
    },
    Known {
        command: "cargo run -p sharedos-rig -- matrix table reports/matrix-* --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[(
            "tests/cli_reports/matrix.rs",
            "rig(&[\"matrix\", \"table\", m.to_str().unwrap(), \"--format\", \"md\"])",
        )],
    },
    Known {
        command: "cargo run -p sharedos-rig -- show matrix --format md >> \"$GITHUB_STEP_SUMMARY\"",
        evidence: &[
            ("tests/vm_matrix.rs", "show(&merged, \"md\")"),
            ("tests/cli_reports/matrix.rs", "rig(&[\"show\", ms, \"--format\", \"md\"])"),
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
            "{WORKFLOW} runs `{c}`, which is not in tests/workflow/commands.rs's list of commands \
             the project runs itself: run it in .ci/run or a test first, then add it with its \
             evidence"
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
