//! The one rule for a test that cannot run here (not root, a tool missing): under CI it fails
//! with the reason, since a CI run that silently tested nothing is a lie; elsewhere it skips, and
//! says so on stderr. Shared by the host tests and the gate binary's tests through `#[path]`.

/// Whether this is a CI run: `CI` set to anything but empty, `0` or `false` (GitHub Actions and
/// .ci/run set `CI=true`).
pub fn in_ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Call when `test` cannot run because of `why`. Panics under CI; otherwise prints a loud
/// SKIPPED line and returns, so the caller returns early.
pub fn cannot_run(test: &str, why: &str) {
    if in_ci() {
        panic!("{test} cannot run: {why}. CI is set, so this is a failure, not a skip");
    }
    eprintln!("\n!!!!! SKIPPED {test}: {why}; nothing was tested (under CI this fails) !!!!!\n");
}
