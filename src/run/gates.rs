//! Gates: over the run's session, the gate binary copied in and checked, the guest clock set,
//! then the gates, their progress shown line by line within one deadline.

use super::{
    provenance, Bounds, Event, GateCall, Observed, GUEST_GATE, GUEST_REPORT_DIR, GUEST_WORK,
};
use crate::cmd::{self, Cmd};
use crate::escape::{self, line as one_line};
use crate::vm::session;
use crate::vm::ssh::Guest;
use anyhow::{bail, Context, Result};
use sharedos_report::digest;
use sharedos_report::report::{GuestStart, REPORT_FILE};
use sharedos_report::text::shell_words;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The longest line of the guest's output the rig keeps; a longer one is cut there.
pub const MAX_LINE: usize = 64 << 10;
/// How much of the guest's output the transcript keeps.
pub const MAX_TRANSCRIPT: usize = 8 << 20;
pub const MEMINFO: &str = "cat /proc/meminfo";
pub const TRANSCRIPT_FILE: &str = "diagnose-transcript.log";

/// The guest's command line for the diagnostic.
pub fn diagnose_argv(step: Duration, extra: &[String]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        GUEST_GATE.into(),
        "diagnose".into(),
        "--work".into(),
        GUEST_WORK.into(),
        "--out".into(),
        format!("{GUEST_REPORT_DIR}/{REPORT_FILE}"),
        "--step-timeout".into(),
        step.as_secs().to_string(),
    ];
    v.extend(extra.iter().cloned());
    v
}

/// How long the gate binary gets to check its arguments on the host; it parses them and exits.
pub const CHECK_ARGS_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of the gate binary's output the check keeps.
const CHECK_ARGS_MAX_OUTPUT: usize = 16 << 10;

/// The gate binary, run on the host with the very arguments the guest will get, asked only to
/// check them: `--check-args` goes first, so that no argument of the user's can take it as its
/// value.
pub fn check_args_cmd(gate: &std::path::Path, extra: &[String]) -> Cmd {
    let mut argv = diagnose_argv(Duration::from_secs(60), extra);
    argv[0] = gate.display().to_string();
    argv.insert(2, "--check-args".into());
    Cmd::new(argv)
}

/// Refuses diagnose arguments the gate binary's own parser refuses, before anything is built
/// or booted: the parser in the guest is the one that counts, so the host asks it rather than
/// keeping a copy of its rules. Its words are the binary's (which may be any binary given with
/// --gate-binary): bounded and escaped.
pub fn check_diagnose_args(gate: &GateCall) -> Result<()> {
    check_args(&gate.binary, &gate.diagnose_args)
}

/// [`check_diagnose_args`] for the arguments `args` and the gate binary `gate`; vm-matrix
/// checks each row's this way before its first run.
pub fn check_args(gate: &std::path::Path, args: &[String]) -> Result<()> {
    if args.iter().any(|a| a == "--check-args") {
        bail!(
            "--check-args after `--` would make the guest's diagnose check its arguments and run nothing: \
             leave it out (vm-run checks the arguments on the host before it boots)"
        );
    }
    let cmd = check_args_cmd(gate, args);
    let out = cmd::capture_bounded(&cmd, CHECK_ARGS_TIMEOUT, CHECK_ARGS_MAX_OUTPUT)
        .context("checking the diagnose arguments with the gate binary on this host")?;
    if out.code == Some(0) {
        return Ok(());
    }
    // The binary's words as the cause, the rig's diagnosis and fix above them.
    let said = anyhow::anyhow!(
        "{}",
        escape::lines(sharedos_report::text::tail(&out.stderr, 12, 4000).trim_end())
    );
    let gate = gate.display();
    let head = if out.stderr.contains("'--check-args'") {
        format!(
            "the gate binary {gate} cannot check arguments: it has no --check-args\n\
             fix: rebuild it (`cargo xtask vm-run` builds it) or give a newer one with --gate-binary"
        )
    } else if out.code == Some(2) {
        format!(
            "the arguments after `--` are refused by the gate binary's own parser; nothing was built or booted\n\
             fix: correct them (`{gate} diagnose --help` lists them)"
        )
    } else {
        format!(
            "the gate binary {gate} could not check the arguments after `--` ({})\n\
             fix: check that it runs on this host (`{gate} --version`), or rebuild it with `cargo xtask vm-run`",
            out.code
                .map_or("ended by a signal".to_string(), |c| format!("exit code {c}"))
        )
    };
    Err(said.context(head))
}

/// One round trip (each costs a second or so under TCG): stamp the guest clock from the host so
/// the report's timestamps are true (the guest has only the emulated RTC), and hash the gate
/// binary there (`missing` when there is none). After a copy it checks what arrived; in a guest
/// resumed from the layer that holds the binary it is the only look at it before use.
pub fn prep_command(epoch_seconds: &str) -> String {
    format!(
        "date -u -s @{epoch_seconds} >/dev/null && {{ {} 2>/dev/null || echo missing; }}",
        session::sha256_command(GUEST_GATE)
    )
}

/// Whether the guest should hold the gate binary of sha256 `host_sha256` already: it was
/// resumed from the snapshot layer made with that binary. Only then is the copy left for after
/// the check; any other guest gets the binary before the one round trip that checks it.
pub fn expect_in_guest(start: Option<&GuestStart>, host_sha256: &str) -> bool {
    start
        .and_then(|s| s.snapshot.as_ref())
        .and_then(|snap| snap.gate_sha256.as_deref())
        .is_some_and(|sha| !host_sha256.is_empty() && sha == host_sha256)
}

/// What the copy does once the guest's sha256 of the binary is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// The binary in the guest is the host's: use it.
    Use,
    /// It was not copied yet, and the guest's is missing or another: copy it in, check again.
    Copy,
    /// It was copied, and what arrived is another: refuse it.
    Refuse,
}

/// The skip decision: `copied` whether this run sent the binary before the check, `printed`
/// what the guest's hash printed, `host_sha256` the host's.
pub fn next(copied: bool, printed: &str, host_sha256: &str) -> Next {
    match (session::sha256_matches(printed, host_sha256), copied) {
        (true, _) => Next::Use,
        (false, false) => Next::Copy,
        (false, true) => Next::Refuse,
    }
}

/// The gate binary in the guest, checked against the host's sha256, and the guest clock set.
/// A guest resumed from the layer that holds this binary is not sent it again: the prep's
/// check finds it (and a guest whose binary differs gets it copied in and checked again).
pub fn copy(
    guest: &Guest,
    start: Option<&GuestStart>,
    gate: &GateCall,
    obs: &mut Observed,
) -> Result<()> {
    let t = Instant::now();
    let (gate_sha, _) = digest::sha256_file(&gate.binary)
        .with_context(|| format!("hashing {}", gate.binary.display()))?;
    obs.vm.gate_binary_sha256 = gate_sha.clone();
    guest.set_timeout(Duration::from_secs(60 * 4));
    let held = expect_in_guest(start, &gate_sha);
    if !held {
        upload_gate(guest, &gate.binary)?;
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let prep = guest.exec(&prep_command(&now.to_string()))?;
    if prep.status != 0 {
        bail!(
            "setting the guest clock failed: {}\nfix: run again; with --cold if it recurs",
            one_line(&sharedos_report::text::tail(&prep.output, 3, 500))
        );
    }
    let (copied, why) = match next(!held, &prep.output, &gate_sha) {
        Next::Use if held => (
            false,
            "the guest was resumed from the snapshot layer that holds it".to_string(),
        ),
        Next::Use => (true, "the guest had none".to_string()),
        Next::Refuse => return Err(corrupted(&gate_sha, &prep.output)),
        Next::Copy => {
            // The layer's binary is not this one after all: copied in, checked again.
            upload_gate(guest, &gate.binary)?;
            let check = guest.exec(&session::sha256_command(GUEST_GATE))?;
            if next(true, &check.output, &gate_sha) != Next::Use {
                return Err(corrupted(&gate_sha, &check.output));
            }
            (
                true,
                format!(
                    "the one in the snapshot layer hashed {:?}, not this one",
                    one_line(&sharedos_report::text::tail(&prep.output, 1, 200))
                ),
            )
        }
    };
    obs.send(Event::GateBinary {
        sha256: gate_sha,
        copied,
        why,
    });
    obs.phase("copy", t);
    Ok(())
}

fn upload_gate(guest: &Guest, binary: &Path) -> Result<()> {
    guest
        .upload(binary, GUEST_GATE, 0o755)
        .context("copying the gate binary into the guest")
}

fn corrupted(host: &str, printed: &str) -> anyhow::Error {
    anyhow::anyhow!(
        "the gate binary in the guest is not the host's: sha256 on the host {host}, in the guest {:?}\n\
         fix: run again; if it recurs, run with --cold (a damaged snapshot layer is made again when its files no longer hash as recorded)",
        one_line(&sharedos_report::text::tail(printed, 3, 500))
    )
}

/// Sends `files` in, each to its guest path, and checks each one's sha256 there.
pub fn send_files(guest: &Guest, files: &[(PathBuf, String)], obs: &mut Observed) -> Result<()> {
    if files.is_empty() {
        return Ok(());
    }
    let t = Instant::now();
    let mut dirs: Vec<String> = files
        .iter()
        .filter_map(|(_, r)| r.rsplit_once('/').map(|(d, _)| d.to_string()))
        .filter(|d| !d.is_empty())
        .collect();
    dirs.sort();
    dirs.dedup();
    let made = guest.exec(&format!("mkdir -p -- {}", shell_words(&dirs)))?;
    if made.status != 0 {
        bail!("mkdir in the guest failed: {}", one_line(&made.output));
    }
    let mut sums = Vec::new();
    for (local, remote) in files {
        guest
            .upload(local, remote, 0o600)
            .with_context(|| format!("sending {} into the guest as {remote}", local.display()))?;
        let (sha, _) =
            digest::sha256_file(local).with_context(|| format!("hashing {}", local.display()))?;
        sums.push(format!("{sha}  {remote}"));
    }
    // One round trip checks them all: sha256sum -c reads the list from stdin.
    let check = guest.exec(&format!(
        "printf '%s\\n' {} | sha256sum --quiet -c -",
        shell_words(&sums)
    ))?;
    if check.status != 0 {
        bail!(
            "files sent into the guest arrived corrupted: {}",
            one_line(&sharedos_report::text::tail(&check.output, 3, 500))
        );
    }
    obs.phase("send", t);
    Ok(())
}

/// Runs the diagnostic, shows each gate as it ends, keeps a bounded transcript, and reads the
/// guest's memory afterwards.
pub fn gates(guest: &Guest, gate: &GateCall, b: Bounds, obs: &mut Observed) -> Result<()> {
    let argv = diagnose_argv(b.guest_step, &gate.diagnose_args);
    obs.send(Event::Gates {
        command: shell_words(&argv),
    });
    let status = follow(guest, &shell_words(&argv), b, obs)?;
    if ![0, 1, 3].contains(&status) {
        bail!(
            "the diagnostic exited {status} (not a verdict): {}",
            one_line(&sharedos_report::text::tail(
                &obs.transcript.join(
                    "
"
                ),
                8,
                2000
            ))
        );
    }
    read_guest_memory(guest, b, obs)
}

/// Runs `command`, which prints the diagnostic's output (runs it, or follows a run already
/// under way in a VM copy), within the gate phase's bound: the gate lines shown as they come,
/// the phase timed, the transcript kept in the report. Returns the command's exit code.
pub(crate) fn follow(guest: &Guest, command: &str, b: Bounds, obs: &mut Observed) -> Result<i32> {
    let t = Instant::now();
    let ran = diagnose(guest, command, t + b.gates, obs);
    obs.phase("gates", t);
    digest::replace_in_report(
        &obs.report_dir,
        TRANSCRIPT_FILE,
        (obs.transcript.join("\n") + "\n").as_bytes(),
    )?;
    ran.with_context(|| {
        format!(
            "running the gates in the guest (bound: {} s under {})",
            b.gates.as_secs(),
            obs.vm.accel
        )
    })
}

/// The guest's memory after the gates, for the report's provenance.
pub(crate) fn read_guest_memory(guest: &Guest, b: Bounds, obs: &mut Observed) -> Result<()> {
    guest.set_timeout(b.ssh);
    let meminfo = guest.exec(MEMINFO)?;
    provenance::guest_memory(&mut obs.vm, &meminfo.output);
    Ok(())
}

/// Runs the diagnostic's `command` until `deadline`: each `gate ` and `progress ` line is sent as
/// it comes (escaped where it is shown), and
/// the transcript keeps the output up to [`MAX_TRANSCRIPT`] bytes, then says how much it dropped.
fn diagnose(guest: &Guest, command: &str, deadline: Instant, obs: &mut Observed) -> Result<i32> {
    let mut kept = 0usize;
    let mut dropped = 0usize;
    let ran = guest.exec_lines(command, deadline, MAX_LINE, &mut |line| {
        if line.starts_with("gate ") || line.starts_with("progress ") {
            obs.send(Event::Gate {
                line: line.to_string(),
            });
        }
        if kept + line.len() < MAX_TRANSCRIPT {
            kept += line.len() + 1;
            obs.transcript.push(line.to_string());
        } else {
            dropped += 1;
        }
    });
    if dropped > 0 {
        obs.transcript.push(format!(
            "[sharedos-rig: {dropped} more lines dropped; the transcript keeps {MAX_TRANSCRIPT} bytes]"
        ));
    }
    ran
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diagnose_line() {
        let a = diagnose_argv(
            Duration::from_secs(180),
            &["--display".into(), ":171".into()],
        );
        assert_eq!(
            a.join(" "),
            "/usr/local/bin/sharedos-gate diagnose --work /root/work --out /root/report/report.json --step-timeout 180 --display :171"
        );
    }

    #[test]
    fn the_host_check_takes_the_guests_arguments_with_check_args_first() {
        let c = check_args_cmd(
            std::path::Path::new("/b/sharedos-gate"),
            &["--cgroup".into()],
        );
        // A trailing option that wants a value cannot swallow --check-args.
        assert_eq!(
            c.argv.join(" "),
            "/b/sharedos-gate diagnose --check-args --work /root/work --out /root/report/report.json --step-timeout 60 --cgroup"
        );
    }

    #[test]
    fn prep_sets_the_clock_then_hashes_the_binary_or_says_missing() {
        assert_eq!(
            prep_command("1764547200"),
            "date -u -s @1764547200 >/dev/null && { sha256sum /usr/local/bin/sharedos-gate 2>/dev/null || echo missing; }"
        );
    }

    fn resumed(gate: Option<&str>) -> GuestStart {
        GuestStart {
            how: "resumed".into(),
            snapshot: Some(sharedos_report::report::SnapshotRef {
                state_sha256: "s".repeat(64),
                gate_sha256: gate.map(String::from),
                ..Default::default()
            }),
            ..GuestStart::default()
        }
    }

    #[test]
    fn only_a_guest_resumed_from_the_layer_of_this_binary_is_expected_to_hold_it() {
        let host = "a".repeat(64);
        assert!(expect_in_guest(Some(&resumed(Some(&host))), &host));
        // A layer of another binary, the plain snapshot, a cold boot, no start at all.
        assert!(!expect_in_guest(
            Some(&resumed(Some(&"b".repeat(64)))),
            &host
        ));
        assert!(!expect_in_guest(Some(&resumed(None)), &host));
        assert!(!expect_in_guest(Some(&GuestStart::default()), &host));
        assert!(!expect_in_guest(None, &host));
        assert!(!expect_in_guest(Some(&resumed(Some(""))), ""));
    }

    #[test]
    fn the_skip_decision_uses_only_a_binary_whose_sha_is_the_hosts() {
        let host = "a".repeat(64);
        let same = format!("{host}  /usr/local/bin/sharedos-gate\n");
        let other = format!("{}  /usr/local/bin/sharedos-gate\n", "b".repeat(64));
        // Held by the layer and the same: not copied again.
        assert_eq!(next(false, &same, &host), Next::Use);
        // Expected but another, or missing: copied in, then checked again.
        assert_eq!(next(false, &other, &host), Next::Copy);
        assert_eq!(next(false, "missing\n", &host), Next::Copy);
        assert_eq!(next(false, "", &host), Next::Copy);
        // Copied, and what arrived is another (corrupted) or missing: refused.
        assert_eq!(next(true, &same, &host), Next::Use);
        assert_eq!(next(true, &other, &host), Next::Refuse);
        assert_eq!(next(true, "missing\n", &host), Next::Refuse);
        // A prefix of the hash, or the hash later in the output, is not the hash.
        assert_eq!(next(true, &host[..63], &host), Next::Refuse);
        assert_eq!(next(true, &format!("x {host}"), &host), Next::Refuse);
        let e = format!("{:#}", corrupted(&host, &other));
        assert!(e.contains("fix:") && e.contains(&host), "{e}");
    }
}
