//! What the end-to-end tests share: an unprivileged user, a sandbox it owns holding copies of
//! the binaries and of images/, and running commands as that user.

#![allow(dead_code)]

pub mod chromium;
pub mod scratch;
pub mod seed;
pub mod skip;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output};

/// `timeout` around a command, so that no child outlives its bound; the group is signalled.
pub fn bounded(secs: u32, program: impl AsRef<std::ffi::OsStr>) -> Command {
    let mut c = Command::new("timeout");
    c.arg("--kill-after=10").arg(secs.to_string()).arg(program);
    c
}

pub fn assert_not_timed_out(o: &Output, what: &str) {
    assert_ne!(
        o.status.code(),
        Some(124),
        "{what} timed out\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Created by the tests when missing; useradd gives it subuid/subgid ranges, which the image
/// builder's unshare mode needs.
pub const USER: &str = "rigbuilder";

pub fn is_root() -> bool {
    nix::unistd::getuid().is_root()
}

pub fn ensure_user() -> (u32, u32) {
    let id = |flag: &str| -> Option<u32> {
        let o = Command::new("id").args([flag, USER]).output().ok()?;
        o.status
            .success()
            .then(|| String::from_utf8_lossy(&o.stdout).trim().parse().ok())?
    };
    if id("-u").is_none() {
        let st = Command::new("useradd")
            .args(["--create-home", "--shell", "/bin/sh", USER])
            .status()
            .expect("running useradd");
        assert!(st.success(), "useradd {USER} failed");
    }
    (
        id("-u").expect("uid of the test user"),
        id("-g").expect("gid of the test user"),
    )
}

/// A binary of another workspace member, built fresh next to this test's binary (Cargo builds
/// only this package's binaries for its tests).
pub fn cargo_binary(package: &str) -> PathBuf {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let st = Command::new(cargo)
        .args(["build", "--quiet", "-p", package])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .status()
        .unwrap_or_else(|e| panic!("running cargo build -p {package}: {e}"));
    assert!(st.success(), "cargo build -p {package} failed");
    let exe = std::env::current_exe().expect("current_exe");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>");
    let bin = dir.join(package);
    assert!(bin.is_file(), "{} was not built", bin.display());
    bin
}

pub fn xtask_binary() -> PathBuf {
    cargo_binary("xtask")
}

pub fn last_line(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or("")
        .to_string()
}

/// A scratch directory owned by the user, holding a copy of xtask and of images/.
pub struct Sandbox {
    pub dir: PathBuf,
    pub xtask: PathBuf,
    pub images: PathBuf,
    pub uid: u32,
    pub gid: u32,
}

impl Sandbox {
    /// None, after saying so loudly, when the test cannot switch users (not root); under CI it
    /// fails instead.
    pub fn new_or_skip(name: &str) -> Option<Sandbox> {
        if !is_root() {
            skip::cannot_run(
                name,
                &format!(
                    "it must start as root to create and switch to the unprivileged user {USER}"
                ),
            );
            return None;
        }
        Some(Sandbox::new(name))
    }

    pub fn new(name: &str) -> Sandbox {
        let (uid, gid) = ensure_user();
        let dir = std::env::temp_dir().join(format!("sharedos-test-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("home")).unwrap();
        let xtask = dir.join("xtask");
        std::fs::copy(xtask_binary(), &xtask).unwrap();
        let images = dir.join("images");
        let st = Command::new("cp")
            .arg("-r")
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("images"))
            .arg(&images)
            .status()
            .unwrap();
        assert!(st.success());
        let sb = Sandbox {
            dir,
            xtask,
            images,
            uid,
            gid,
        };
        sb.chown();
        // The user must be able to reach the sandbox from /.
        let mut p = sb.dir.parent();
        while let Some(d) = p {
            let mode = std::fs::metadata(d).unwrap().mode();
            assert!(
                mode & 0o001 != 0,
                "{} is not searchable by {USER}",
                d.display()
            );
            p = d.parent();
        }
        sb
    }

    fn chown(&self) {
        let st = Command::new("chown")
            .arg("-R")
            .arg(format!("{}:{}", self.uid, self.gid))
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Copies a file into the sandbox, executable and owned by the user.
    pub fn copy_in(&self, src: &Path, name: &str) -> PathBuf {
        let dst = self.dir.join(name);
        std::fs::copy(src, &dst).unwrap();
        self.chown();
        dst
    }

    /// `program args` as the user, with HOME in the sandbox and no inherited cache setting.
    pub fn command_as_user(&self, program: &Path, args: &[&str]) -> Command {
        let mut c = Command::new("setpriv");
        c.arg(format!("--reuid={}", self.uid))
            .arg(format!("--regid={}", self.gid))
            .arg("--init-groups")
            .arg("env")
            .arg(format!("HOME={}", self.dir.join("home").display()))
            .arg("SHAREDOS_RIG_CACHE=/nonexistent-must-not-be-used")
            .arg(program)
            .args(args)
            .current_dir(&self.dir);
        c
    }

    /// `program args` as the user (as `command_as_user`), inside a user namespace that maps ids
    /// 0-65535 to themselves and sets `user.max_user_namespaces` to 0 there: the user can
    /// create no user namespace, as on hosts that block them, while this host's own setting is
    /// left alone. Root maps the namespace from outside (newuidmap would want root's subuid
    /// range), and the shell inside execs again once mapped, to hold root's capabilities there.
    /// Every step execs the next, so the child's pid is the program's. Its stdout and stderr
    /// are piped.
    pub fn spawn_as_user_without_userns(&self, program: &Path, args: &[&str]) -> Child {
        use std::io::Write;
        let inner = self.command_as_user(program, args);
        let mut child = Command::new("unshare")
            .args(["--user", "--", "sh", "-c"])
            .arg(
                "read _ && exec sh -c 'echo 0 > /proc/sys/user/max_user_namespaces && exec \"$@\"' sh \"$@\"",
            )
            .arg("sh")
            .arg(inner.get_program())
            .args(inner.get_args())
            .current_dir(&self.dir)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("running unshare");
        let ours = std::fs::read_link("/proc/self/ns/user").unwrap();
        let ns = format!("/proc/{}/ns/user", child.id());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::fs::read_link(&ns).ok().as_ref() == Some(&ours) {
            assert!(
                std::time::Instant::now() < deadline,
                "unshare did not enter a new user namespace within 10 s"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        for map in ["uid_map", "gid_map"] {
            std::fs::write(format!("/proc/{}/{map}", child.id()), "0 0 65536\n")
                .unwrap_or_else(|e| panic!("writing {map} of the namespace: {e}"));
        }
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"go\n").unwrap();
        drop(stdin);
        child
    }

    /// [`Sandbox::spawn_as_user_without_userns`], waited for.
    pub fn run_as_user_without_userns(&self, program: &Path, args: &[&str]) -> Output {
        let child = self.spawn_as_user_without_userns(program, args);
        let out = child.wait_with_output().expect("waiting for the command");
        eprintln!(
            "--- (no user namespaces) {} {args:?} ({}) stderr:\n{}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    pub fn run_as_user(&self, program: &Path, args: &[&str]) -> Output {
        let out = self
            .command_as_user(program, args)
            .output()
            .expect("running a command as the test user");
        eprintln!(
            "--- {} {args:?} ({}) stderr:\n{}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // A failed test shares nothing, and must not panic again here; its reports (the gates'
        // evidence, the guests' logs) are kept for whoever reads the failure.
        if std::thread::panicking() {
            keep_reports(&self.dir);
        } else {
            seed::publish_snapshots(self, "cache");
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Moves a failed test's `reports/` out of its sandbox, to `$TMPDIR/sharedos-test-kept/`, and
/// says where. The last kept of a sandbox's name replaces the one before.
fn keep_reports(sandbox: &Path) {
    let reports = sandbox.join("reports");
    let (Some(name), true) = (sandbox.file_name(), reports.is_dir()) else {
        return;
    };
    let kept = std::env::temp_dir().join("sharedos-test-kept").join(name);
    let _ = std::fs::remove_dir_all(&kept);
    let moved = std::fs::create_dir_all(&kept)
        .and_then(|()| std::fs::rename(&reports, kept.join("reports")));
    match moved {
        Ok(()) => eprintln!("the failed test's reports are kept in {}", kept.display()),
        Err(e) => eprintln!("the failed test's reports could not be kept: {e}"),
    }
}

/// `xtask vm-run` with the sandbox's images and cache, and the given gate binary.
pub fn vm_run_args(sb: &Sandbox, gate: &Path, out: &Path, accel: &str) -> Vec<String> {
    let p = |p: &Path| p.display().to_string();
    vec![
        "vm-run".into(),
        // Relative on purpose, as `cargo xtask vm-run` run from a checkout finds `images/`: the
        // builder must hand mmdebstrap absolute paths.
        "--images-dir".into(),
        "images".into(),
        "--cache-dir".into(),
        p(&sb.dir.join("cache")),
        "--accel".into(),
        accel.into(),
        // The image builder mode hosted runners need (no user namespaces), as the workflow runs it.
        "--mode".into(),
        "fakechroot".into(),
        "--gate-binary".into(),
        p(gate),
        "--out".into(),
        p(out),
    ]
}

/// `xtask vm-exec` as the user, on the sandbox's image, with `args` after the boot options.
pub fn vm_exec(sb: &Sandbox, args: &[&str]) -> Output {
    let all = vm_exec_args(sb, args);
    sb.run_as_user(
        &sb.xtask,
        &all.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

/// The words of [`vm_exec`], for a caller that sets more on the command.
pub fn vm_exec_args(sb: &Sandbox, args: &[&str]) -> Vec<String> {
    let mut all: Vec<String> = [
        "vm-exec",
        "--images-dir",
        "images",
        "--cache-dir",
        &sb.dir.join("cache").display().to_string(),
        "--mode",
        "fakechroot",
        "--accel",
        "tcg",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    all.extend(args.iter().map(|s| s.to_string()));
    all
}

/// The three fidelity options at once, as diagnose takes them after vm-run's `--`; the matrix
/// row `+userns+cgroup+cowroot` stands for the same.
pub const ALL_FIDELITY_OPTIONS: [&str; 4] =
    ["--userns", "--cgroup", "cpu=1,memory=512M", "--cow-root"];

/// A report of a run with [`ALL_FIDELITY_OPTIONS`] records them, each option's checks ran in
/// the original and in the restored copies and passed, and its fidelity list names only the
/// differences no option closes (and those of workloads it did not run).
pub fn assert_all_fidelity_options_held(r: &sharedos_report::report::Report) {
    use sharedos_report::fidelity::CLOSABLE;
    use sharedos_report::report::{CgroupLimits, GateName, RunOptions};
    assert_eq!(
        r.options,
        RunOptions {
            cgroup: Some(CgroupLimits {
                cpu_quota_us: 100_000,
                memory_max_bytes: 512 << 20,
            }),
            cow_root: true,
            userns: true,
            copies: None,
            max_copies: None,
            workload: Default::default(),
            guest_ksm: false,
        }
    );
    // Each option's checks ran in the original and in the restored copies, and passed.
    let launch = r.gate(GateName::Launch).unwrap();
    for name in [
        "tree_userns_mapped",
        "tree_cgroup_limits",
        "tree_cow_file_written",
    ] {
        assert!(
            launch.check(name).is_some_and(|c| c.passed),
            "launch {name}"
        );
    }
    for c in CLOSABLE.iter().filter(|c| r.options.requested(c.option)) {
        for (gate, name) in c.checks {
            let check = r.gate(*gate).and_then(|g| g.check(name));
            assert!(check.is_some_and(|k| k.passed), "{gate}.{name}: {check:?}");
        }
        assert!(
            !r.fidelity_differences.iter().any(|f| f.key == c.key),
            "{} still listed: {:?}",
            c.flag,
            r.fidelity_differences
        );
    }
    // The differences no option closes, and those of the workloads this run did not run.
    let kept = sharedos_report::fidelity::Key::ALL
        .iter()
        .filter(|k| !matches!(k.closable(), Some(c) if r.options.requested(c.option)))
        .count();
    assert_eq!(
        r.fidelity_differences.len(),
        kept,
        "{:?}",
        r.fidelity_differences
    );
}

/// Every process whose command line mentions `needle` (QEMU's names the run's files).
pub fn processes_mentioning(needle: &str) -> Vec<(i32, String)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<i32>().ok()) else {
            continue;
        };
        if pid == std::process::id() as i32 {
            continue;
        }
        let Ok(cmd) = std::fs::read(format!("/proc/{pid}/cmdline")) else {
            continue;
        };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) {
            out.push((pid, cmd));
        }
    }
    out
}

/// The static gate binary the VM tests copy into their sandboxes.
pub fn gate_binary() -> PathBuf {
    sharedos_rig::gate_binary::build_gate_binary(Path::new(env!("CARGO_MANIFEST_DIR")))
        .expect("building the static gate binary")
}

/// A vm-run report directory's report.json, as the tests read it back.
pub fn read_report(dir: &Path) -> sharedos_report::report::Report {
    let text = std::fs::read_to_string(dir.join("report.json"))
        .unwrap_or_else(|e| panic!("no report.json in {}: {e}", dir.display()));
    serde_json::from_str(&text).unwrap()
}
