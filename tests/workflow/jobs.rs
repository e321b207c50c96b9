//! The workflow's jobs: triggers, cache, summary and artifacts; the image matrix and the merge
//! job; the judged steps' exit-code logic, run with the real command replaced by each exit code.

use super::{read, root, run_blocks, WORKFLOW};
use std::path::Path;
use std::process::Command;

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
