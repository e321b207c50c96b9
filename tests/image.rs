//! End-to-end tests of `xtask image`: real builds against the Debian mirror, run as an
//! unprivileged user. They need root only to create that user and switch to it; the build
//! itself runs entirely as the user.
//!
//! The builds take minutes and need the network, so they are `#[ignore]`d in a plain
//! `cargo test`; CI runs them with
//! `cargo test -p sharedos-rig --test image -- --ignored --test-threads=1`.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use sharedos_report::digest::sha256_file;
use sharedos_rig::image::lock::Lock;
use sharedos_rig::image::Manifest;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{last_line, Sandbox};

/// What bookworm's entry holds, byte for byte, as every build of its lock has given so far (in
/// unshare and in fakechroot mode, on several machines). It follows from bookworm's effective
/// definition, its lock and the guest files in images/base/: a commit that changes one of those
/// on purpose updates these in the same commit; any other change to them is a regression.
const BOOKWORM_IMAGE_SHA256: &str =
    "75cad91c885553d89c21733766c018f874cf6bc623b9ba59b9a3f9135738bf26";
const BOOKWORM_KERNEL_SHA256: &str =
    "3d616aa853fe11b1c0ea99a1cdb4fb6ddc9010ba7c4562de700ad94264989654";
const BOOKWORM_INITRD_SHA256: &str =
    "31069e6c43a091d3ab6ee8006b6ded2ab095d415b87328284a7e731a70c1b4d0";

/// trixie's image, vmlinuz and initrd as its lock has built them in unshare mode and in guest
/// mode; updated with its definition or lock, as bookworm's are.
const TRIXIE_SHA256: (&str, &str, &str) = (
    "cba43d3452aef748adbff953ffe9049b938d3af4298531e3673ab7c3519d6a02",
    "ed8f0dbdbefe3994093937f5ee934818ae902b88cb0b6bc423811c10d55b87b0",
    "f4773794eae0dddbc42d01f73417b8e37f07c70c2778d826fca6d001246469b4",
);

/// The built bookworm entry is the one it has always been.
fn assert_bookworm_bytes(m: &Manifest) {
    assert_eq!(
        m.image_sha256, BOOKWORM_IMAGE_SHA256,
        "bookworm's image differs from the one its definition and lock have always built"
    );
    assert_eq!(
        m.kernel_sha256, BOOKWORM_KERNEL_SHA256,
        "bookworm's vmlinuz"
    );
    assert_eq!(m.initrd_sha256, BOOKWORM_INITRD_SHA256, "bookworm's initrd");
}

/// Returns false (after saying so loudly) when the test cannot run here.
fn can_run(test: &str) -> bool {
    if !common::is_root() {
        common::skip::cannot_run(
            test,
            &format!(
                "it must start as root to create and switch to the unprivileged user {}",
                common::USER
            ),
        );
        return false;
    }
    true
}

/// Runs `xtask image <args>` as the user with its own cache under the sandbox.
fn image(sb: &Sandbox, cache: &str, args: &[&str]) -> Output {
    let mut all = vec![
        "image",
        "--images-dir",
        sb.images.to_str().unwrap(),
        "--cache-dir",
    ];
    let cache_dir = sb.dir.join(cache);
    all.push(cache_dir.to_str().unwrap());
    all.extend_from_slice(args);
    sb.run_as_user(&sb.xtask, &all)
}

fn lock(sb: &Sandbox) -> Lock {
    lock_of(sb, "bookworm")
}

fn lock_of(sb: &Sandbox, image: &str) -> Lock {
    Lock::parse(&std::fs::read_to_string(sb.images.join(image).join("packages.lock")).unwrap())
        .unwrap()
}

/// Builds, then checks the entry the way the VM will use it.
fn build_and_check(sb: &Sandbox, cache: &str, args: &[&str], want_mode: Option<&str>) -> Manifest {
    let out = image(sb, cache, args);
    check_build(sb, "bookworm", cache, &out, want_mode)
}

/// Checks a build's output and its entry against the image's lock.
fn check_build(
    sb: &Sandbox,
    image_name: &str,
    cache: &str,
    out: &Output,
    want_mode: Option<&str>,
) -> Manifest {
    assert!(
        out.status.success(),
        "build failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let dir = PathBuf::from(last_line(out));
    assert!(
        dir.starts_with(sb.dir.join(cache)),
        "last line {dir:?} is not an entry of the cache"
    );
    let m = Manifest::read(&dir.join("manifest.json")).unwrap();
    let lock = lock_of(sb, image_name);
    assert_eq!(m.image_name, image_name);

    assert_eq!(m.kernel_release, lock.kernel_release);
    for name in [
        "criu",
        "xvfb",
        "xterm",
        "openssh-server",
        "iptables",
        "busybox-static",
    ] {
        let locked = lock
            .get(name)
            .unwrap_or_else(|| panic!("{name} is not locked"));
        assert_eq!(
            m.package_version(name),
            Some(locked.version.as_str()),
            "{name}"
        );
    }
    assert_eq!(m.packages.len(), lock.packages.len());
    if let Some(mode) = want_mode {
        assert_eq!(m.builder_mode, mode);
    }
    assert!(["unshare", "fakechroot", "guest"].contains(&m.builder_mode.as_str()));
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A build announces its mode; a cached entry says it was found, and its manifest the mode.
    assert!(
        stderr.contains(&format!("builder mode: {}", m.builder_mode))
            || stderr.contains(&format!("cached {image_name} (verified in")),
        "the mode is not announced"
    );

    let lock_bytes = std::fs::read(sb.images.join(image_name).join("packages.lock")).unwrap();
    assert_eq!(
        m.lock_sha256,
        sharedos_report::digest::sha256_hex(&lock_bytes)
    );
    for (file, sha) in [
        (&m.disk_image, &m.image_sha256),
        (&m.kernel, &m.kernel_sha256),
        (&m.initrd, &m.initrd_sha256),
    ] {
        assert_eq!(&sha256_file(&dir.join(file)).unwrap().0, sha, "{file}");
    }
    assert!(
        dir.join("vmlinuz").is_file()
            && dir.join("initrd.img").is_file()
            && dir.join("disk.img").is_file()
    );

    // Nothing in the cache may have been made by root.
    let mut stack = vec![sb.dir.join(cache)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let md = std::fs::symlink_metadata(e.path()).unwrap();
            assert_eq!(
                md.uid(),
                sb.uid,
                "{} is not owned by {}",
                e.path().display(),
                common::USER
            );
            if md.is_dir() {
                stack.push(e.path());
            }
        }
    }
    m
}

/// The default mode's build gives bookworm's bytes. Every build of the lock is held to those
/// bytes (here in unshare mode, in the guest-mode test in fakechroot mode, and in every CI run
/// anew), so a build that stopped being reproducible fails here without a second build.
#[test]
#[ignore = "slow: a full image build from the Debian mirror (~3 min); run with --ignored"]
fn default_mode_builds_as_a_user_the_image_its_lock_always_gave() {
    if !can_run("default_mode_builds_as_a_user_the_image_its_lock_always_gave") {
        return;
    }
    let sb = Sandbox::new("default");
    let userns = user_can_unshare(&sb);
    let has_subids = ["/etc/subuid", "/etc/subgid"].iter().all(|f| {
        std::fs::read_to_string(f)
            .map(|t| {
                t.lines()
                    .any(|l| l.starts_with(&format!("{}:", common::USER)))
            })
            .unwrap_or(false)
    });
    // Where unshare mode can work the default must pick it; elsewhere either mode is right.
    let want = if userns && has_subids {
        Some("unshare")
    } else {
        None
    };
    let a = build_and_check(&sb, "cache-a", &[], want);
    assert_bookworm_bytes(&a);

    // A second run finds the entry and does nothing.
    let again = image(&sb, "cache-a", &[]);
    assert!(again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("cached bookworm"));
    assert!(!String::from_utf8_lossy(&again.stderr).contains("mmdebstrap"));

    // The benchmark of the cached no-op: measured and shown, not asserted as a timing.
    let mut c = Command::new("setpriv");
    c.args([
        &format!("--reuid={}", sb.uid),
        &format!("--regid={}", sb.gid),
        "--init-groups",
    ])
    .arg(&sb.xtask)
    .args(["bench-image", "--iterations", "20", "--images-dir"])
    .arg(&sb.images)
    .arg("--cache-dir")
    .arg(sb.dir.join("cache-a"));
    let out = c.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("BENCH {}", String::from_utf8_lossy(&out.stdout).trim());
}

#[test]
#[ignore = "needs the Debian mirror's index (a few seconds); run with --ignored"]
fn a_pin_the_mirror_lacks_fails_fast_naming_it() {
    if !can_run("a_pin_the_mirror_lacks_fails_fast_naming_it") {
        return;
    }
    let sb = Sandbox::new("stale");
    let path = sb.images.join("bookworm/packages.lock");
    let text = std::fs::read_to_string(&path).unwrap();
    let criu = lock(&sb).get("criu").unwrap().version.clone();
    let bogus = format!("{criu}~gone1");
    let edited = text.replace(
        &format!("package criu {criu} "),
        &format!("package criu {bogus} "),
    );
    assert_ne!(edited, text);
    std::fs::write(&path, edited).unwrap();

    let start = std::time::Instant::now();
    let out = image(&sb, "cache", &[]);
    let took = start.elapsed();
    assert!(
        !out.status.success(),
        "a build with a pin the mirror lacks succeeded"
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "criu {bogus} is not on the mirror (the mirror has {criu})"
        )),
        "{err}"
    );
    assert!(err.contains("--update-lock"), "{err}");
    assert!(err.contains("--mirror"), "{err}");
    // Fails before the bootstrap: mmdebstrap never started.
    assert!(!err.contains("mmdebstrap ("), "{err}");
    assert!(
        !out.stdout.iter().any(|_| true),
        "nothing goes to stdout on failure"
    );
    eprintln!("failed in {:.1} s", took.as_secs_f64());
}

/// `xtask image` of trixie with the sandbox's images into `cache`: in guest mode when the user
/// has no user namespaces, as trixie's glibc is newer than this host's.
fn trixie_args<'a>(sb: &'a Sandbox, cache: &'a std::path::Path) -> [&'a str; 7] {
    [
        "image",
        "--image",
        "trixie",
        "--images-dir",
        sb.images.to_str().unwrap(),
        "--cache-dir",
        cache.to_str().unwrap(),
    ]
}

#[test]
#[ignore = "slow: a fakechroot build of bookworm, then trixie built in a QEMU guest under TCG (~18 min); the extended tier's, not .ci/run's: cargo xtask test --tier extended"]
fn a_newer_suite_builds_in_a_guest_without_user_namespaces() {
    if !can_run("a_newer_suite_builds_in_a_guest_without_user_namespaces") {
        return;
    }
    let sb = Sandbox::new("guest");
    let cache = sb.dir.join("cache");
    let started = std::time::Instant::now();
    let out = sb.run_as_user_without_userns(&sb.xtask, &trixie_args(&sb, &cache));
    let took = started.elapsed();
    let err = String::from_utf8_lossy(&out.stderr);
    // Auto mode: no user namespaces, and trixie's glibc is newer than this host's.
    assert!(
        err.contains("unprivileged user namespaces are blocked here")
            || err.contains("has no range in /etc/subuid"),
        "{err}"
    );
    assert!(err.contains("builder mode: guest ("), "{err}");
    assert!(
        err.contains("(libc6 2.41") && err.contains("is newer than the host's"),
        "{err}"
    );
    // The builder VM's own image is built first, in a mode this host can run.
    assert!(
        err.contains("building the builder VM's image bookworm first, in fakechroot mode"),
        "{err}"
    );
    let m = check_build(&sb, "trixie", "cache", &out, Some("guest"));

    // The builder VM's image is bookworm built in fakechroot mode, without user namespaces: the
    // same bytes as every other build of its lock.
    let out = image(&sb, "cache", &["--image", "bookworm"]);
    let builder = check_build(&sb, "bookworm", "cache", &out, Some("fakechroot"));
    assert_bookworm_bytes(&builder);
    // The VM tests run bookworm; this build (named to run before them) spares them theirs.
    common::seed::publish(&sb, &PathBuf::from(last_line(&out)), &cache);
    assert!(
        m.tool_versions["builder-vm"].starts_with("bookworm "),
        "{:?}",
        m.tool_versions
    );
    assert!(m.kernel_release.starts_with("6.12."));
    eprintln!(
        "guest-mode trixie (bookworm builder image built first) in {:.0} s",
        took.as_secs_f64()
    );

    // The same bytes as trixie's lock gives in unshare mode, with user namespaces.
    assert_eq!(
        (
            m.image_sha256.as_str(),
            m.kernel_sha256.as_str(),
            m.initrd_sha256.as_str()
        ),
        TRIXIE_SHA256,
        "the guest-built trixie differs from the one its lock has always built"
    );
    // The matrix test runs trixie: it takes this build instead of making its own.
    let out = image(&sb, "cache", &["--image", "trixie"]);
    common::seed::publish(&sb, &PathBuf::from(last_line(&out)), &cache);
}

/// Ctrl-C during a guest-mode build ends it promptly: the builder VM's QEMU, the build and the
/// rig itself, with a message that names the interrupt. Without it the rig would wait out the
/// build (up to 40 minutes under TCG) before it looked at the signal.
#[test]
#[ignore = "slow: bookworm built in fakechroot mode into the seed (~3 min), then a guest-mode build of trixie interrupted once mmdebstrap runs in its VM; run with --ignored"]
fn ctrl_c_ends_a_guest_mode_build_promptly() {
    use std::io::{BufRead, BufReader};
    if !can_run("ctrl_c_ends_a_guest_mode_build_promptly") {
        return;
    }
    let sb = Sandbox::new("guest-sigint");
    let cache = sb.dir.join("cache");
    // The builder VM's image is bookworm from the seed, where the first test that needs it
    // builds it in fakechroot mode (this one, in a run of the suite): the same bytes as every
    // other build of its lock. With the default mode's test (unshare) this is the suite's one
    // check that two builder modes give one sha; guest mode's is the extended tier's
    // (a_newer_suite_builds_in_a_guest_without_user_namespaces).
    let entry = common::seed::seed(&sb, "cache", "bookworm", "fakechroot");
    let seeded = Manifest::read(&entry.join("manifest.json")).unwrap();
    assert_eq!(seeded.builder_mode, "fakechroot", "{seeded:?}");
    assert_bookworm_bytes(&seeded);
    let mut child = sb.spawn_as_user_without_userns(&sb.xtask, &trixie_args(&sb, &cache));
    // Every step of spawn_as_user_without_userns execs the next: this is the rig's pid.
    let rig = child.id();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    loop {
        let line = lines
            .next()
            .unwrap_or_else(|| {
                panic!(
                    "the build ended before mmdebstrap ran in the builder VM:\n{}",
                    seen.join("\n")
                )
            })
            .unwrap();
        seen.push(line.clone());
        if line.contains("builder VM: running mmdebstrap in the guest") {
            break;
        }
    }
    let qemu: Vec<(i32, String)> = common::processes_mentioning(sb.dir.to_str().unwrap())
        .into_iter()
        .filter(|(_, c)| c.starts_with("qemu-system"))
        .collect();
    assert_eq!(qemu.len(), 1, "the builder VM is not running: {qemu:?}");

    let sent = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(rig as i32),
        nix::sys::signal::Signal::SIGINT,
    )
    .unwrap();
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = child.wait().unwrap();
    let took = sent.elapsed();
    let said = format!("{}\n{}", seen.join("\n"), rest.join("\n"));
    eprintln!("{said}\n--- the rig ended {took:?} after SIGINT");
    assert!(!status.success(), "the interrupted build succeeded");
    // A liveness bound, not a benchmark: the build itself would take many minutes more.
    assert!(
        took < std::time::Duration::from_secs(60),
        "the rig took {took:?} to end after SIGINT"
    );
    assert!(
        rest.iter().any(|l| l.contains("interrupted by SIGINT")),
        "the message does not name the interrupt:\n{}",
        rest.join("\n")
    );
    // QEMU's line names the sandbox's cache, as a host mmdebstrap's would: nothing of the
    // build is left.
    let left = common::processes_mentioning(sb.dir.to_str().unwrap());
    assert!(left.is_empty(), "left running: {left:?}");
    // The builder VM's run directory (its key and overlay) went with it.
    let prefix = format!("sharedos-rig-run-{rig}-");
    let runs: Vec<_> = std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
        .map(|e| e.path())
        .collect();
    assert!(runs.is_empty(), "left behind: {runs:?}");
}

/// Whether the user can create a user namespace mapped to root, as unshare mode needs.
fn user_can_unshare(sb: &Sandbox) -> bool {
    Command::new("setpriv")
        .args([
            &format!("--reuid={}", sb.uid),
            &format!("--regid={}", sb.gid),
            "--init-groups",
        ])
        .args(["unshare", "--user", "--map-root-user", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

#[test]
#[ignore = "slow: an image build from the Debian mirror with --update-lock (~2 min); run with --ignored"]
fn a_backports_kernel_is_locked_from_its_suite() {
    if !can_run("a_backports_kernel_is_locked_from_its_suite") {
        return;
    }
    let sb = Sandbox::new("bpo");
    let path = sb.images.join("bookworm-bpo/packages.lock");
    // The lock checked below is the one this build writes, not the one in the tree.
    std::fs::remove_file(&path).unwrap();
    let out = image(&sb, "cache", &["--image", "bookworm-bpo", "--update-lock"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains(&format!("wrote {}", path.display())), "{err}");
    let text = std::fs::read_to_string(&path).unwrap();
    let lock = Lock::parse(&text).unwrap();
    assert_eq!(lock.suite, "bookworm");
    assert_eq!(lock.extra_suites, ["bookworm-backports"]);
    assert!(
        text.contains("\nextra-suite bookworm-backports\n"),
        "{text}"
    );
    let release = &lock.kernel_release;
    assert!(
        release.starts_with("6.12.") && release.ends_with("-cloud-amd64"),
        "{release}"
    );
    for name in [
        format!("linux-image-{release}"),
        "linux-image-cloud-amd64".into(),
    ] {
        let p = lock
            .get(&name)
            .unwrap_or_else(|| panic!("{name} is not locked"));
        assert_eq!(p.suite, "bookworm-backports", "{name}");
        let line = format!(
            "package {name} {} {} {} bookworm-backports\n",
            p.version, p.architecture, p.sha256
        );
        assert!(text.contains(&line), "{line} not in the lock:\n{text}");
        assert!(p.version.contains("~bpo12"), "{name} {}", p.version);
    }
    // Everything else comes from bookworm itself.
    for name in ["criu", "libc6", "openssh-server"] {
        assert_eq!(lock.get(name).unwrap().suite, "bookworm", "{name}");
    }
    let entry = PathBuf::from(last_line(&out));
    let m = Manifest::read(&entry.join("manifest.json")).unwrap();
    assert_eq!(&m.kernel_release, release);
    // While the mirror still serves the tree's pins, this is the entry the tree's lock gives:
    // the migration test takes it from the seed instead of building it again.
    let tree_lock = Path::new(env!("CARGO_MANIFEST_DIR")).join("images/bookworm-bpo/packages.lock");
    if std::fs::read_to_string(tree_lock).unwrap() == text {
        common::seed::publish(&sb, &entry, &sb.dir.join("cache"));
    }
}

#[test]
fn plan_as_a_user_prints_commands_and_creates_nothing() {
    if !can_run("plan_as_a_user_prints_commands_and_creates_nothing") {
        return;
    }
    let sb = Sandbox::new("plan");
    let out = image(&sb, "cache", &["--plan", "--mode", "fakechroot"]);
    assert!(out.status.success());
    let s = String::from_utf8_lossy(&out.stdout);
    for w in [
        "apt-get",
        "mmdebstrap --mode=fakechroot",
        "genext2fs -B 4096",
        "tar -x",
    ] {
        assert!(s.contains(w), "{w} missing from the plan:\n{s}");
    }
    assert!(!sb.dir.join("cache").exists(), "--plan created the cache");
}
