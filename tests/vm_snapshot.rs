//! Snapshots, as the test user on a real QEMU: the first run of an image makes its snapshot and
//! resumes it, later runs resume it, nothing a run does reaches the snapshot, and each way a
//! snapshot can go bad is refused (the snapshot remade) or falls back to a cold boot, with the
//! reason said and the run's own work done. Two resumed gate runs differing in their tokens,
//! keys and nonces is held in tests/vm_run.rs, whose runs resume one snapshot.
//!
//! Minutes, so `#[ignore]`d in a plain `cargo test`.

#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use common::{processes_mentioning, vm_exec, vm_exec_args, Sandbox};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

/// The one snapshot in the sandbox's store.
fn the_snapshot(sb: &Sandbox) -> PathBuf {
    let store = sb.dir.join("cache/snapshots");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&store)
        .unwrap_or_else(|e| panic!("{}: {e}", store.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    let half_made: Vec<&PathBuf> = dirs
        .iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    assert!(
        half_made.is_empty(),
        "half-made snapshots left: {half_made:?}"
    );
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.remove(0)
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A vm-exec whose command's output and exit code came through, however the guest came up.
fn exec_ok(sb: &Sandbox, cmd: &str) -> Output {
    let out = vm_exec(sb, &["--", cmd]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    out
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn sha(p: &Path) -> String {
    sharedos_report::digest::sha256_file(p).unwrap().0
}

#[test]
#[ignore = "boots VMs: minutes; run with --include-ignored"]
fn snapshots_are_made_once_resumed_after_and_never_used_when_bad() {
    let Some(sb) = Sandbox::new_or_skip("snapshot") else {
        return;
    };
    common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    // This test is about making one.
    let _ = std::fs::remove_dir_all(sb.dir.join("cache/snapshots"));

    // The first run makes the snapshot, then resumes it like every later run.
    let first = exec_ok(&sb, "echo made > /root/written-by-a-run; sync; echo first");
    assert!(
        stderr(&first).contains("snapshot saved:"),
        "{}",
        stderr(&first)
    );
    assert!(
        stderr(&first).contains(
            "there was no snapshot for this image and these settings: made one, then resumed it"
        ),
        "{}",
        stderr(&first)
    );
    assert_eq!(stdout(&first).trim(), "first");
    let snap = the_snapshot(&sb);
    // The key in it logs into every resume: nobody else may read it, or list the store.
    assert_eq!(mode(&snap), 0o700);
    assert_eq!(mode(&snap.join("id_ed25519")), 0o600);
    let disk = sha(&snap.join("disk.qcow2"));
    let state = sha(&snap.join("state"));

    // A later run resumes it, and sees nothing the first run wrote: that went to its own
    // overlay, and the snapshot's files are as they were made.
    let second = exec_ok(&sb, "test ! -e /root/written-by-a-run && echo clean");
    assert!(
        stderr(&second).contains("resumed snapshot"),
        "{}",
        stderr(&second)
    );
    assert!(
        !stderr(&second).contains("snapshot saved"),
        "{}",
        stderr(&second)
    );
    assert_eq!(stdout(&second).trim(), "clean");
    assert_eq!(sha(&snap.join("disk.qcow2")), disk);
    assert_eq!(sha(&snap.join("state")), state);

    // --cold boots the kernel, and says so.
    let cold = vm_exec(&sb, &["--cold", "--", "true"]);
    assert_eq!(cold.status.code(), Some(0), "{}", stderr(&cold));
    assert!(
        stderr(&cold).contains("booted cold (asked for a cold boot)"),
        "{}",
        stderr(&cold)
    );

    // Each bad snapshot is found before its guest runs (its state as QEMU, started stopped,
    // takes it in), thrown away and made again; the run still does its work.
    let faults: [Fault; 3] = [
        (
            "a damaged state file",
            &|d: &Path| flip_a_byte(&d.join("state")),
            "the snapshot was damaged: state has sha256",
        ),
        (
            "an overlay that changed",
            &|d: &Path| append(&d.join("disk.qcow2")),
            "the snapshot was damaged: disk.qcow2 has sha256",
        ),
        (
            "a snapshot of another QEMU version",
            &|d: &Path| {
                let p = d.join("snapshot.json");
                let s = std::fs::read_to_string(&p).unwrap();
                assert!(s.contains("QEMU emulator version "));
                std::fs::write(
                    &p,
                    s.replace("QEMU emulator version ", "QEMU emulator version 0.1 not "),
                )
                .unwrap();
            },
            "the snapshot was stale: it was made by \"QEMU emulator version 0.1 not",
        ),
    ];
    for (what, fault, said) in faults {
        let snap = the_snapshot(&sb);
        fault(&snap);
        let out = exec_ok(&sb, "echo still-works");
        let err = stderr(&out);
        assert!(err.contains(said), "{what}: {err}");
        assert!(err.contains("made one, then resumed it"), "{what}: {err}");
        assert!(err.contains("snapshot saved:"), "{what}: {err}");
        assert_eq!(stdout(&out).trim(), "still-works", "{what}");
        // Remade under the same key, and whole.
        assert_eq!(the_snapshot(&sb), snap);
    }

    // A changed key leaves no old snapshot behind: once a run makes its new one, the image's
    // snapshot of another QEMU goes too (a copy of this one, its record naming QEMU 0.1).
    let snap = the_snapshot(&sb);
    let name = snap.file_name().unwrap().to_string_lossy().into_owned();
    let old = snap.with_file_name(format!(
        "{}-ffffffffffffffff",
        name.rsplit_once('-').unwrap().0
    ));
    let to_old_qemu = |d: &Path| {
        let p = d.join("snapshot.json");
        let s = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            s.replace("QEMU emulator version ", "QEMU emulator version 0.1 not "),
        )
        .unwrap();
    };
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(&snap)
        .arg(&old)
        .status()
        .unwrap();
    assert!(st.success());
    to_old_qemu(&old);
    to_old_qemu(&snap);
    let st = std::process::Command::new("chown")
        .arg("-R")
        .arg(format!("{}:{}", sb.uid, sb.gid))
        .arg(&old)
        .status()
        .unwrap();
    assert!(st.success());
    let out = exec_ok(&sb, "echo still-works");
    let err = stderr(&out);
    assert!(err.contains("stale snapshot removed"), "{err}");
    assert!(!old.exists(), "{err}");
    assert_eq!(the_snapshot(&sb), snap);

    // A resume that never answers (its guest left stopped) is given up in seconds, and the
    // run boots cold instead, keeping the snapshot, which was not at fault.
    let snap = the_snapshot(&sb);
    let out = sb
        .command_as_user(
            &sb.xtask,
            &vm_exec_args(&sb, &["--", "echo cold-after-all"])
                .iter()
                .map(String::as_str)
                .collect::<Vec<_>>(),
        )
        .env("SHAREDOS_RIG_TEST_RESUME_STOPPED", "1")
        .output()
        .unwrap();
    let err = stderr(&out);
    eprintln!("{err}");
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(err.contains("booted cold (the resume failed, so this run booted cold: the resumed guest did not answer"), "{err}");
    assert_eq!(stdout(&out).trim(), "cold-after-all");
    assert_eq!(the_snapshot(&sb), snap);

    let left = processes_mentioning(sb.dir.to_str().unwrap());
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// What a fault is, what it does to the snapshot's directory, and what the run must say.
type Fault<'a> = (&'a str, &'a dyn Fn(&Path), &'a str);

fn flip_a_byte(p: &Path) {
    use std::io::{Read, Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(p)
        .unwrap();
    let at = f.metadata().unwrap().len() / 2;
    let mut b = [0u8; 1];
    f.seek(SeekFrom::Start(at)).unwrap();
    f.read_exact(&mut b).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(&[b[0] ^ 0x5a]).unwrap();
}

fn append(p: &Path) {
    use std::io::Write;
    let mut f = std::fs::OpenOptions::new().append(true).open(p).unwrap();
    f.write_all(b"\0").unwrap();
}
