//! Ctrl-C ends a long command of the rig at once, whatever it started: `cmd::run` (an image
//! build's mmdebstrap, genext2fs, apt) runs its command in a process group of its own and ends
//! the whole group on an interrupt. A test binary of its own, because the signal flag it raises
//! is process-wide and stays raised. Runs in a plain `cargo test`: nothing here boots or builds.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use sharedos_rig::cmd::{self, Cmd};
use sharedos_rig::progress::Progress;
use std::time::{Duration, Instant};

#[test]
fn an_interrupt_ends_a_running_commands_whole_process_group() {
    sharedos_report::signals::install().unwrap();
    let mark = format!("interrupt-test-{}", std::process::id());
    let dir = std::env::temp_dir().join(&mark);
    std::fs::create_dir_all(&dir).unwrap();
    // A child that would run for an hour, and a grandchild of its own in the background: the
    // `; :` keeps each shell from exec'ing its sleep, so each stays named by the mark.
    let cmd = Cmd::new(vec![
        "sh".into(),
        "-c".into(),
        "sh -c 'sleep 3600; :' \"$0-grandchild\" & sleep 3600; :".into(),
        mark.clone(),
    ]);
    let watcher = {
        let mark = mark.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(30);
            while common::processes_mentioning(&format!("{mark}-grandchild")).is_empty() {
                assert!(Instant::now() < deadline, "the command never started");
                std::thread::sleep(Duration::from_millis(20));
            }
            nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGINT)
                .unwrap();
        })
    };
    let started = Instant::now();
    let result = cmd::run(
        &cmd,
        &Progress::plain("test").stage("sleeper"),
        &dir.join("log"),
        None,
    );
    let took = started.elapsed();
    watcher.join().unwrap();
    let e = format!(
        "{:#}",
        result.expect_err("an interrupted command succeeded")
    );
    assert!(e.contains("interrupted by SIGINT"), "{e}");
    assert!(e.contains("its process group was ended"), "{e}");
    // A liveness bound, not a benchmark: without the interrupt this waits an hour.
    assert!(took < Duration::from_secs(60), "took {took:?}");
    let left = common::processes_mentioning(&mark);
    assert!(left.is_empty(), "left running: {left:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
