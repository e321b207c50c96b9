//! `cargo xtask test`: the README's test command and `.ci/run`'s. It runs the whole suite
//! (ignored tests included, one at a time: the VM tests each want both cores) through
//! cargo-nextest's `ci` profile (`.config/nextest.toml`), which writes JUnit XML beside the build,
//! then reads that XML back and prints every test's wall time, slowest first, and the total.
//! The printing is here; what it prints is built by pure functions the unit tests hold.

use anyhow::{bail, Context, Result};
use sharedos_rig::cmd::Cmd;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Which tests: each tier is a nextest profile of `.config/nextest.toml`, whose default filter
/// picks its tests.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// Every test but the extended tier's: `.ci/run`'s, within 40 minutes on 2 cores.
    Ci,
    /// What `.ci/run` leaves to the hosted workflow (on a schedule and on dispatch): second
    /// runs of capabilities the ci tier already runs once (docs/ci.md, "Test tiers").
    Extended,
}

impl Tier {
    pub fn profile(self) -> &'static str {
        match self {
            Tier::Ci => "ci",
            Tier::Extended => "extended",
        }
    }
}

/// The JUnit file is ours, but a cap keeps a damaged one from eating the machine.
const MAX_JUNIT_BYTES: u64 = 64 << 20;

#[derive(clap::Args)]
pub struct TestArgs {
    /// ci: every test .ci/run runs; extended: the slow tier the hosted workflow runs.
    #[arg(long, value_enum, default_value = "ci")]
    pub tier: Tier,
    /// Only the tests that need neither root nor a VM (no ignored tests): minutes less, for a
    /// quick look before the full run. The fast loop proper is `cargo test --workspace --lib --bins`.
    #[arg(long)]
    pub no_ignored: bool,
    /// More arguments for `cargo nextest run`, e.g. `-- -E 'binary(vm_run)'` for one file's tests.
    #[arg(last = true)]
    pub nextest_args: Vec<String>,
}

/// `cargo nextest run` for the suite.
pub fn nextest_cmd(cargo: &str, a: &TestArgs) -> Cmd {
    let mut argv: Vec<String> = [
        cargo,
        "nextest",
        "run",
        "--workspace",
        "--locked",
        "--profile",
        a.tier.profile(),
        "--run-ignored",
        if a.no_ignored { "default" } else { "all" },
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    argv.extend(a.nextest_args.iter().cloned());
    Cmd::new(argv)
}

pub fn run(a: TestArgs, workspace: &Path) -> Result<i32> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let probe = Cmd::new(vec![cargo.clone(), "nextest".into(), "--version".into()])
        .command()
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        bail!(
            "cargo-nextest is not installed, and the suite runs through it (per-test times, JUnit)\n\
             fix: run `sudo .ci/install-host --tests`, or `cargo install --locked cargo-nextest`"
        );
    }
    let junit = junit_path(workspace, a.tier);
    // A report of an earlier run must not be taken for this one's.
    match std::fs::remove_file(&junit) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing the old {}", junit.display())),
    }
    let cmd = nextest_cmd(&cargo, &a);
    println!("xtask test: {}", cmd.display());
    let started = Instant::now();
    let status = cmd
        .command()
        .current_dir(workspace)
        .status()
        .with_context(|| format!("running {}", cmd.display()))?;
    let wall = started.elapsed().as_secs_f64();
    let code = status.code().unwrap_or(1);
    let text = match read_bounded(&junit) {
        Ok(t) => t,
        Err(e) => {
            // No table, but the run's own outcome stands.
            eprintln!("xtask test: no per-test times: {e:#}");
            return Ok(if code == 0 { 1 } else { code });
        }
    };
    let tests = parse_junit(&text).with_context(|| format!("reading {}", junit.display()))?;
    print!("{}", table(&tests, wall, &junit));
    Ok(code)
}

/// Where nextest's profile writes its JUnit: `<target>/nextest/<profile>/junit.xml`.
pub fn junit_path(workspace: &Path, tier: Tier) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace.join("target"));
    let target = if target.is_absolute() {
        target
    } else {
        workspace.join(target)
    };
    target
        .join("nextest")
        .join(tier.profile())
        .join("junit.xml")
}

/// The JUnit file through the project's one reader of small records: bounded, no link
/// followed, nothing but a regular file.
fn read_bounded(path: &Path) -> Result<String> {
    let bytes = sharedos_rig::vm::accel_cache::read_capped(path, MAX_JUNIT_BYTES)?
        .with_context(|| format!("{} was not written", path.display()))?;
    String::from_utf8(bytes).with_context(|| format!("{} is not UTF-8", path.display()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Passed,
    Failed,
    Skipped,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TestTime {
    /// `binary::test`, as nextest names it.
    pub name: String,
    pub seconds: f64,
    pub outcome: Outcome,
}

/// Every test case of a JUnit document.
pub fn parse_junit(text: &str) -> Result<Vec<TestTime>> {
    let doc = roxmltree::Document::parse(text).context("the JUnit XML does not parse")?;
    let mut out = Vec::new();
    for case in doc.descendants().filter(|n| n.has_tag_name("testcase")) {
        let name = case.attribute("name").unwrap_or("?");
        let class = case.attribute("classname").unwrap_or("");
        let seconds = case
            .attribute("time")
            .and_then(|t| t.parse::<f64>().ok())
            .filter(|t| t.is_finite() && *t >= 0.0)
            .unwrap_or(0.0);
        let child = |tag: &str| case.children().any(|c| c.has_tag_name(tag));
        let outcome = if child("failure") || child("error") {
            Outcome::Failed
        } else if child("skipped") {
            Outcome::Skipped
        } else {
            Outcome::Passed
        };
        out.push(TestTime {
            name: if class.is_empty() {
                name.to_string()
            } else {
                format!("{class} {name}")
            },
            seconds,
            outcome,
        });
    }
    Ok(out)
}

/// Every test, slowest first, then the totals; the last line is the plain `N passed, N failed`
/// that CI reads.
pub fn table(tests: &[TestTime], wall_seconds: f64, junit: &Path) -> String {
    let mut sorted: Vec<&TestTime> = tests.iter().collect();
    sorted.sort_by(|a, b| b.seconds.total_cmp(&a.seconds).then(a.name.cmp(&b.name)));
    let sum: f64 = tests.iter().map(|t| t.seconds).sum();
    let count = |o: Outcome| tests.iter().filter(|t| t.outcome == o).count();
    let mut s = String::from("\nEvery test's wall time, slowest first:\n");
    s.push_str(&format!(
        "{:>4}  {:>9}  {:>6}  {:<7}  test\n",
        "#", "seconds", "share", "result"
    ));
    for (i, t) in sorted.iter().enumerate() {
        let share = if sum > 0.0 {
            100.0 * t.seconds / sum
        } else {
            0.0
        };
        let result = match t.outcome {
            Outcome::Passed => "pass",
            Outcome::Failed => "FAIL",
            Outcome::Skipped => "skip",
        };
        s.push_str(&format!(
            "{:>4}  {:>9.1}  {:>5.1}%  {:<7}  {}\n",
            i + 1,
            t.seconds,
            share,
            result,
            sharedos_rig::escape::line(&t.name)
        ));
    }
    s.push_str(&format!(
        "total: {sum:.0} s in {} tests; {wall_seconds:.0} s wall with the build\n",
        tests.len()
    ));
    s.push_str(&format!("JUnit: {}\n", junit.display()));
    let skipped = count(Outcome::Skipped);
    s.push_str(&format!(
        "tests: {} passed, {} failed{}\n",
        count(Outcome::Passed),
        count(Outcome::Failed),
        if skipped > 0 {
            format!(", {skipped} skipped")
        } else {
            String::new()
        }
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const JUNIT: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="nextest-run" tests="4" failures="1" errors="0" time="130.5">
  <testsuite name="sharedos-rig::vm_run" tests="2" disabled="0" errors="0" failures="1">
    <testcase name="fast" classname="sharedos-rig::vm_run" time="0.25"></testcase>
    <testcase name="slow" classname="sharedos-rig::vm_run" time="120.0">
      <failure type="test failure">boom</failure>
    </testcase>
  </testsuite>
  <testsuite name="xtask" tests="2" disabled="0" errors="0" failures="0">
    <testcase name="middle" classname="xtask" time="10"></testcase>
    <testcase name="odd" classname="xtask" time="NaN"><skipped/></testcase>
  </testsuite>
</testsuites>"#;

    #[test]
    fn junit_cases_are_read_with_their_outcome() {
        let t = parse_junit(JUNIT).unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t[1].name, "sharedos-rig::vm_run slow");
        assert_eq!(t[1].outcome, Outcome::Failed);
        assert_eq!(t[1].seconds, 120.0);
        // A time that is not a number counts as none, not as a poisoned total.
        assert_eq!(t[3].seconds, 0.0);
        assert_eq!(t[3].outcome, Outcome::Skipped);
    }

    #[test]
    fn the_table_is_slowest_first_and_ends_with_the_plain_count() {
        let t = parse_junit(JUNIT).unwrap();
        let s = table(&t, 200.0, Path::new("target/nextest/ci/junit.xml"));
        let slow = s.find("vm_run slow").unwrap();
        let middle = s.find("xtask middle").unwrap();
        let fast = s.find("vm_run fast").unwrap();
        assert!(slow < middle && middle < fast, "{s}");
        assert!(s.contains("total: 130 s in 4 tests; 200 s wall"), "{s}");
        assert_eq!(
            s.lines().last().unwrap(),
            "tests: 2 passed, 1 failed, 1 skipped"
        );
    }

    #[test]
    fn a_document_that_is_not_xml_is_an_error() {
        assert!(parse_junit("<testsuites><testcase").is_err());
    }

    #[test]
    fn a_test_name_cannot_reach_the_terminal_raw() {
        let t = [TestTime {
            name: "x\u{1b}[2Jy".into(),
            seconds: 1.0,
            outcome: Outcome::Passed,
        }];
        assert!(!table(&t, 1.0, Path::new("j")).contains('\u{1b}'));
    }

    #[test]
    fn the_suite_runs_every_test_through_the_ci_profile() {
        let a = TestArgs {
            tier: Tier::Ci,
            no_ignored: false,
            nextest_args: vec!["-E".into(), "binary(vm_run)".into()],
        };
        assert_eq!(
            nextest_cmd("cargo", &a).display(),
            "cargo nextest run --workspace --locked --profile ci --run-ignored all -E 'binary(vm_run)'"
        );
    }

    #[test]
    fn each_tier_has_its_profile_and_junit() {
        let a = TestArgs {
            tier: Tier::Extended,
            no_ignored: false,
            nextest_args: vec![],
        };
        assert!(nextest_cmd("cargo", &a)
            .display()
            .contains("--profile extended --run-ignored all"));
        let config = include_str!("../../.config/nextest.toml");
        // One tier's filter is the other's complement: every test is in exactly one.
        let filters: Vec<&str> = config
            .lines()
            .filter_map(|l| l.strip_prefix("default-filter = "))
            .collect();
        assert_eq!(filters.len(), 2, "{filters:?}");
        assert_eq!(
            filters[0],
            format!("\"not ({})\"", filters[1].trim_matches('"')),
            "the ci tier's filter must be `not (` the extended tier's `)`"
        );
        for t in [Tier::Ci, Tier::Extended] {
            assert!(
                config.contains(&format!("[profile.{}]", t.profile())),
                "{t:?}"
            );
            assert!(junit_path(Path::new("/w"), t).ends_with(format!("{}/junit.xml", t.profile())));
        }
    }
}
