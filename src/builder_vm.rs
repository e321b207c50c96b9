//! The image builder's VM (guest mode): mmdebstrap `--mode=root` inside a guest booted from the
//! pinned bookworm image, for a host where user namespaces are blocked and fakechroot cannot run
//! the suite (its glibc is newer than the host's). The guest is a `vm::Session` like a vm-run's,
//! with the outbound network; image builds get it injected as their [`GuestBuilder`]. The host's
//! own mmdebstrap script, the apt pins and the files the hooks upload go in over the session; the
//! tarball streams back on the command's standard output, and the hook outputs and mmdebstrap's
//! log are read back after it. Everything else (the index, the lock check, genext2fs, the
//! initrd, the manifest) stays on the host, in image/.

use crate::cmd::Cmd;
use crate::image::builder::{mmdebstrap_cmd, BuildPlan, WorkPaths};
use crate::image::definition::{ImageDir, PID1_FILE, SSHD_CONFIG_FILE};
use crate::image::guest_builder::{GuestBuild, GuestBuilder, SharedGuestBuilder};
use crate::image::lock::Lock;
use crate::image::mode::{self, BuilderMode};
use crate::image::{self, BuildOptions, ImageEntry};
use crate::progress::Progress;
use crate::vm::qemu::{Accel, Network};
use crate::vm::session::{self, Bounds, SessionSpec, Start};
use crate::vm::ssh::{self, Guest};
use crate::vm::{AccelChoice, Event, GuestMedia, Session};
use anyhow::{bail, Context, Result};
use sharedos_report::signals;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The image the builder VM boots: one that fakechroot builds on any host whose glibc is no
/// older than bookworm's, and that has perl, apt, gpgv and the archive keyring mmdebstrap needs.
pub const BUILDER_IMAGE: &str = "bookworm";
/// The build's scratch in the guest, a tmpfs: the image's root disk has too little free space
/// for an unpacked suite.
pub const GUEST_DIR: &str = "/mnt/sharedos-build";
/// Guest memory: the tmpfs below lives in it.
pub const MEMORY_MIB: u64 = 4096;
/// Holds the unpacked suite with its .debs and apt lists; the tarball is not kept there.
pub const TMPFS_MIB: u64 = 3072;
pub const CPUS: u32 = 2;
/// How much of mmdebstrap's log in the guest is read back into the build log.
pub const LOG_TAIL_BYTES: u64 = 256 << 10;

fn p(path: &Path) -> String {
    path.display().to_string()
}

fn in_dir(name: &str) -> String {
    format!("{GUEST_DIR}/{name}")
}

/// The build's work paths inside the guest; the tarball goes to standard output.
pub fn guest_work() -> WorkPaths {
    let mut w = WorkPaths::new(Path::new(GUEST_DIR));
    w.tarball = PathBuf::from("-");
    w
}

/// Where the image directory's guest files are uploaded to.
pub fn guest_image_dir() -> PathBuf {
    Path::new(GUEST_DIR).join("image")
}

/// The most a build may take: a trixie build under TCG takes a few minutes.
pub fn build_bound(accel: Accel) -> Duration {
    Duration::from_secs(600 * u64::from(accel.slowdown()))
}

/// The host's mmdebstrap scripts that run in the guest: mmdebstrap itself (perl) and the filter
/// it pipes the essential packages through when dpkg path filters are set (python3); the
/// builder image has both interpreters but not mmdebstrap.
pub const SCRIPTS: [&str; 2] = ["mmdebstrap", "mmtarfilter"];

/// Where `SCRIPTS` go; it leads the PATH mmdebstrap runs with.
pub fn guest_bin() -> String {
    in_dir("bin")
}

/// The host's `SCRIPTS`, found on PATH.
pub fn host_scripts() -> Result<Vec<PathBuf>> {
    SCRIPTS
        .iter()
        .map(|s| {
            sharedos_report::which::find_program(s)
                .with_context(|| format!("{s} is not on PATH (apt install mmdebstrap)"))
        })
        .collect()
}

/// The files copied in: (host path, guest path, mode).
pub fn uploads(plan: &BuildPlan, scripts: &[PathBuf]) -> Vec<(PathBuf, String, u32)> {
    let gw = guest_work();
    let gi = guest_image_dir();
    let mut v: Vec<(PathBuf, String, u32)> = scripts
        .iter()
        .zip(SCRIPTS)
        .map(|(local, name)| (local.clone(), format!("{}/{name}", guest_bin()), 0o755))
        .collect();
    v.extend([
        (plan.work.pins.clone(), p(&gw.pins), 0o644),
        (plan.image.file(PID1_FILE), p(&gi.join(PID1_FILE)), 0o644),
        (
            plan.image.file(SSHD_CONFIG_FILE),
            p(&gi.join(SSHD_CONFIG_FILE)),
            0o644,
        ),
    ]);
    v
}

/// The hook outputs read back: (guest path, host path).
pub fn downloads(plan: &BuildPlan) -> [(String, PathBuf); 2] {
    let gw = guest_work();
    [
        (p(&gw.installed), plan.work.installed.clone()),
        (p(&gw.debs), plan.work.debs.clone()),
    ]
}

/// The scratch tmpfs, and the guest clock set from the host's: apt refuses a Release file
/// dated after its clock, and the guest has only the emulated RTC. The tmpfs is 0755 because
/// apt downloads as user _apt: where _apt cannot reach the chroot, apt downloads as root and
/// leaves the image's `partial` directories owned by root instead of _apt, and the image
/// differs from an unshare build's.
pub fn prep_command(epoch_seconds: &str) -> String {
    format!(
        "mkdir -p {GUEST_DIR} && mount -t tmpfs -o size={TMPFS_MIB}m,mode=0755 sharedos-build {GUEST_DIR} \
         && mkdir {GUEST_DIR}/bin {GUEST_DIR}/image {GUEST_DIR}/tmp && date -u -s @{epoch_seconds} >/dev/null"
    )
}

/// mmdebstrap as the guest runs it: the host's argv with mmdebstrap's own `--mode=root`, the
/// guest's paths, the tarball on standard output, and its chroot on the tmpfs.
pub fn guest_mmdebstrap_cmd(plan: &BuildPlan) -> Cmd {
    let mut c = mmdebstrap_cmd(
        &plan.image.definition,
        &guest_image_dir(),
        &plan.mirror,
        BuilderMode::Guest,
        &guest_work(),
    );
    c.argv[0] = format!("{}/mmdebstrap", guest_bin());
    c.env("TMPDIR", &in_dir("tmp")).env(
        "PATH",
        &format!("{}:/usr/sbin:/usr/bin:/sbin:/bin", guest_bin()),
    )
}

/// The guest's shell line: the tarball on standard output, mmdebstrap's log to a file read back
/// afterwards, and a sampler that keeps the tmpfs's peak use (KiB) for the log.
pub fn run_command(cmd: &Cmd) -> String {
    format!(
        "cd {GUEST_DIR} || exit 1; \
         {{ m=0; while sleep 2; do u=$(df -Pk {GUEST_DIR} | awk 'NR==2 {{print $3}}'); \
         if [ \"$u\" -gt \"$m\" ]; then m=$u; echo $m > peak-kib; fi; done; }} </dev/null >/dev/null 2>&1 & \
         s=$!; {} 2>{GUEST_DIR}/build.log; r=$?; kill $s; exit $r",
        cmd.display()
    )
}

/// The end of mmdebstrap's log and the tmpfs's peak use.
pub fn log_command() -> String {
    format!(
        "tail -c {LOG_TAIL_BYTES} {GUEST_DIR}/build.log; \
         echo \"tmpfs peak: $(cat {GUEST_DIR}/peak-kib 2>/dev/null || echo '?') KiB of {TMPFS_MIB} MiB\""
    )
}

/// The builder VM, under the accelerator its front end was asked for.
#[derive(Debug, Clone, Copy)]
pub struct BuilderVm {
    pub accel: AccelChoice,
}

impl BuilderVm {
    /// The builder for [`BuildOptions::guest_builder`].
    pub fn shared(accel: AccelChoice) -> SharedGuestBuilder {
        Arc::new(BuilderVm { accel })
    }
}

impl GuestBuilder for BuilderVm {
    fn mmdebstrap(
        &self,
        plan: &BuildPlan,
        progress: &Progress,
        message: &dyn Fn(&str),
    ) -> Result<GuestBuild> {
        build(self.accel, plan, progress, message)
    }

    fn plan_lines(&self, plan: &BuildPlan) -> Vec<String> {
        plan_lines(self.accel, plan)
    }
}

/// The builder VM's session: more memory for the tmpfs, the outbound network, its logs in the
/// build's work directory.
pub fn spec(accel: AccelChoice, logs: &Path) -> SessionSpec {
    SessionSpec {
        name: "sharedos-rig-builder".into(),
        accel,
        accel_cache: None,
        memory_mib: MEMORY_MIB,
        cpus: CPUS,
        network: Network::Outbound,
        logs: logs.to_path_buf(),
        keep: false,
        start: Start::Cold,
        snapshot: None,
        layer: None,
        ram: None,
    }
}

/// Where the builder VM's console and QEMU log go.
fn logs_dir(plan: &BuildPlan) -> PathBuf {
    plan.work.dir.join("builder-vm")
}

/// What `--plan` prints in place of the host's mmdebstrap line: the session, then what runs
/// over it.
pub fn plan_lines(accel: AccelChoice, plan: &BuildPlan) -> Vec<String> {
    let mut v = vec![format!(
        "# guest mode: the {BUILDER_IMAGE} image from this cache (built first when missing, by unshare or fakechroot) boots in QEMU; mmdebstrap runs as root in it"
    )];
    v.extend(session_plan_lines(accel, plan));
    v.push(
        "# then over one SSH session to 127.0.0.1:<free port>, host key pinned from the console:"
            .into(),
    );
    v.extend(over_ssh_plan_lines(plan));
    v
}

/// The builder VM's session, from the session's own plan.
fn session_plan_lines(accel: AccelChoice, plan: &BuildPlan) -> Vec<String> {
    let entry = Path::new("<bookworm entry>");
    let media = GuestMedia {
        kernel: entry.join("vmlinuz"),
        initrd: entry.join("initrd.img"),
        disk: entry.join("disk.img"),
    };
    let p = session::plan(&spec(accel, &logs_dir(plan)), &media);
    let mut v = vec![p.keygen.display(), p.overlay.display()];
    for (_, when, cmd) in &p.qemu {
        let when = match when.is_empty() {
            true => String::new(),
            false => format!("   ({when})"),
        };
        v.push(format!("{}{when}", cmd.display()));
    }
    v
}

/// The scratch, the uploads, mmdebstrap, its log and the hook outputs read back.
fn over_ssh_plan_lines(plan: &BuildPlan) -> Vec<String> {
    let mut v = vec![prep_command("<host epoch seconds>")];
    let scripts = host_scripts().unwrap_or_else(|_| {
        SCRIPTS
            .iter()
            .map(|s| format!("<host {s}>").into())
            .collect()
    });
    for (local, remote, mode) in uploads(plan, &scripts) {
        v.push(format!(
            "{}   (stdin: {})",
            ssh::upload_command(&remote, mode),
            local.display()
        ));
    }
    v.push(format!(
        "{}   (stdout: {})",
        run_command(&guest_mmdebstrap_cmd(plan)),
        plan.work.tarball.display()
    ));
    v.push(format!(
        "{}   (into {})",
        log_command(),
        plan.work.log.display()
    ));
    for (remote, local) in downloads(plan) {
        v.push(format!("cat {remote}   (stdout: {})", local.display()));
    }
    v
}

/// Runs mmdebstrap in the builder VM: the tarball lands at `plan.work.tarball` and the hook
/// outputs where the host build reads them.
fn build(
    accel: AccelChoice,
    plan: &BuildPlan,
    progress: &Progress,
    message: &dyn Fn(&str),
) -> Result<GuestBuild> {
    let scripts = host_scripts()?;
    let entry = builder_entry(plan, progress)?;
    let logs = logs_dir(plan);
    {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&logs)
            .with_context(|| format!("creating {}", logs.display()))?;
    }
    let mut sink = |e: &Event| progress.note(&format!("builder VM {}", e.line()));
    let spec = SessionSpec {
        accel_cache: crate::vm::accel_cache::Spot::of_image(&entry),
        ..spec(accel, &logs)
    };
    let session = Session::open(&spec, &GuestMedia::of(&entry), &mut sink)
        .with_context(|| format!("booting the builder VM (its logs: {})", logs.display()))?;
    let guest = session.guest();
    let b = session.bounds();
    send_inputs(guest, plan, &scripts, b)?;
    run_mmdebstrap(guest, plan, session.accel(), b, progress, message)?;
    read_back(guest, plan)?;
    let builder = format!(
        "{BUILDER_IMAGE} {} under {}",
        entry.manifest.image_sha256,
        session.accel().as_str()
    );
    session.end(&mut sink);
    Ok(GuestBuild { builder })
}

/// Stage "inputs": the scratch tmpfs and the clock, then the scripts, the pins and the guest
/// files the hooks upload.
fn send_inputs(guest: &Guest, plan: &BuildPlan, scripts: &[PathBuf], b: Bounds) -> Result<()> {
    // The uploads are small, but TCG guests answer slowly under load.
    guest.set_timeout(b.ssh * 4);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let prep = guest.exec(&prep_command(&now.to_string()))?;
    if prep.status != 0 {
        bail!(
            "preparing the builder VM's scratch failed ({}): {}",
            prep.status,
            prep.output.trim()
        );
    }
    for (local, remote, mode) in uploads(plan, scripts) {
        guest
            .upload(&local, &remote, mode)
            .with_context(|| format!("copying {} into the builder VM", local.display()))?;
    }
    Ok(())
}

/// Stage "mmdebstrap": the tarball streamed to the host within the build's bound, then the end
/// of mmdebstrap's log appended to the build's log.
fn run_mmdebstrap(
    guest: &Guest,
    plan: &BuildPlan,
    accel: Accel,
    b: Bounds,
    progress: &Progress,
    message: &dyn Fn(&str),
) -> Result<()> {
    let line = run_command(&guest_mmdebstrap_cmd(plan));
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&plan.work.log)
        .with_context(|| format!("opening log {}", plan.work.log.display()))?;
    writeln!(log, "$ (in the builder VM) {line}").ok();
    progress.note("builder VM: running mmdebstrap in the guest");
    let max = plan.image.definition.disk_size_mib << 21;
    let started = Instant::now();
    let status = guest.exec_to_file(
        &line,
        &plan.work.tarball,
        max,
        started + build_bound(accel),
        &mut |n| {
            message(&format!(
                "tarball {} MiB after {:.0} s",
                n >> 20,
                started.elapsed().as_secs_f64()
            ))
        },
    );
    let said = guest_log(guest, b);
    writeln!(log, "{said}").ok();
    let status = status.context("running mmdebstrap in the builder VM")?;
    if status != 0 {
        bail!(
            "mmdebstrap in the builder VM exited {status}\n--- the end of its log (full log: {}) ---\n{}",
            plan.work.log.display(),
            sharedos_report::text::tail(&said, 30, 6000)
        );
    }
    if let Some(peak) = said.lines().rev().find(|l| l.starts_with("tmpfs peak:")) {
        progress.note(&format!("builder VM {peak}"));
    }
    Ok(())
}

/// The end of mmdebstrap's log in the guest, or why it could not be read.
fn guest_log(guest: &Guest, b: Bounds) -> String {
    if let Some(sig) = signals::interrupted() {
        return format!("(mmdebstrap's log in the builder VM was not read: {sig} arrived)");
    }
    guest.set_timeout(b.ssh);
    guest
        .exec(&log_command())
        .map(|r| r.output)
        .unwrap_or_else(|e| format!("(could not read mmdebstrap's log in the builder VM: {e:#})"))
}

/// Stage "read back": the hook outputs the host build reads.
fn read_back(guest: &Guest, plan: &BuildPlan) -> Result<()> {
    for (remote, local) in downloads(plan) {
        let r = guest.exec(&format!("cat {remote}"))?;
        if r.status != 0 {
            bail!(
                "reading {remote} in the builder VM failed ({}): {}",
                r.status,
                r.output.trim()
            );
        }
        std::fs::write(&local, r.output.as_bytes())
            .with_context(|| format!("writing {}", local.display()))?;
    }
    Ok(())
}

/// The builder VM's image from the cache, built first when missing. It must not need guest mode
/// itself: that would boot a builder VM to build the builder VM.
fn builder_entry(plan: &BuildPlan, progress: &Progress) -> Result<ImageEntry> {
    let images_dir = plan
        .image
        .dir
        .parent()
        .context("the image directory has no parent")?;
    let mut o = BuildOptions::new(BUILDER_IMAGE);
    o.images_dir = Some(images_dir.to_path_buf());
    o.cache_dir = Some(plan.cache_root.clone());
    o.mirror = Some(plan.mirror.clone());
    if let Some(e) = image::cached_entry(&o)? {
        return Ok(e);
    }
    let builder_image = ImageDir::load(images_dir, BUILDER_IMAGE).with_context(|| {
        format!("guest mode boots the {BUILDER_IMAGE} image, so it must be in the images directory")
    })?;
    let lock = std::fs::read_to_string(builder_image.lock_path())
        .ok()
        .and_then(|t| Lock::parse(&t).ok());
    let glibc = mode::image_glibc(&builder_image.definition.suite, lock.as_ref());
    let (m, why) = mode::choose_mode(None, glibc.as_ref());
    if m == BuilderMode::Guest {
        bail!(
            "guest mode boots the {BUILDER_IMAGE} image, which is not in the cache and cannot be built here either ({why}); \
             build it where user namespaces work or the host's glibc is no older than {BUILDER_IMAGE}'s, e.g. \
             `cargo xtask image --image {BUILDER_IMAGE}`, into the same cache"
        );
    }
    progress.note(&format!(
        "building the builder VM's image {BUILDER_IMAGE} first, in {} mode ({why})",
        m.as_str()
    ));
    o.mode = Some(m);
    image::ensure_image_with(&o, &Progress::plain("image"))
        .with_context(|| format!("building the builder VM's image {BUILDER_IMAGE}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan() -> BuildPlan {
        let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
        BuildPlan {
            image: ImageDir::load(&images, "trixie").unwrap(),
            mirror: "http://snap/debian".into(),
            mode: BuilderMode::Guest,
            mode_reason: String::new(),
            apt_dir: "/c/apt".into(),
            work: WorkPaths::new(Path::new("/c/tmp/k.1")),
            cache_root: "/c".into(),
            lock: None,
            guest_builder: None,
        }
    }

    #[test]
    fn the_guest_runs_the_hosts_argv_as_root_into_stdout() {
        let pl = plan();
        let g = guest_mmdebstrap_cmd(&pl);
        let host = mmdebstrap_cmd(
            &pl.image.definition,
            &guest_image_dir(),
            &pl.mirror,
            BuilderMode::Unshare,
            &guest_work(),
        );
        assert_eq!(g.argv[0], "/mnt/sharedos-build/bin/mmdebstrap");
        assert_eq!(g.argv[1], "--mode=root");
        assert_eq!(g.argv[2..], host.argv[2..], "only the mode differs");
        assert_eq!(
            &g.argv[g.argv.len() - 3..],
            &["trixie", "-", "http://snap/debian"]
        );
        assert!(g.argv.contains(
            &"--setup-hook=upload /mnt/sharedos-build/pins.pref /etc/apt/preferences.d/sharedos-lock"
                .to_string()
        ));
        assert!(g.argv.contains(
            &"--customize-hook=download /tmp/sharedos-debs.txt /mnt/sharedos-build/debs.txt"
                .to_string()
        ));
        assert!(g.argv.contains(
            &"--customize-hook=upload /mnt/sharedos-build/image/sharedos-init /usr/sbin/sharedos-init"
                .to_string()
        ));
        assert_eq!(
            g.env,
            [
                ("SOURCE_DATE_EPOCH".to_string(), "1700000000".to_string()),
                ("TMPDIR".to_string(), "/mnt/sharedos-build/tmp".to_string()),
                (
                    "PATH".to_string(),
                    "/mnt/sharedos-build/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string()
                )
            ]
        );
        let line = run_command(&g);
        assert!(line.contains(&format!(
            "{} 2>/mnt/sharedos-build/build.log; r=$?; kill $s; exit $r",
            g.display()
        )));
    }

    #[test]
    fn every_file_a_hook_uploads_goes_in_and_every_download_comes_back() {
        let pl = plan();
        let g = guest_mmdebstrap_cmd(&pl);
        let up = uploads(
            &pl,
            &["/usr/bin/mmdebstrap".into(), "/usr/bin/mmtarfilter".into()],
        );
        for a in g.argv.iter().filter_map(|a| a.split_once("hook=upload ")) {
            let src = a.1.split(' ').next().unwrap();
            assert!(
                up.iter().any(|(_, remote, _)| remote == src),
                "{src} is uploaded by a hook but not copied into the guest"
            );
        }
        for a in g.argv.iter().filter_map(|a| a.split_once("hook=download ")) {
            let dst = a.1.split(' ').nth(1).unwrap();
            assert!(
                downloads(&pl).iter().any(|(remote, _)| remote == dst),
                "{dst}"
            );
        }
        assert_eq!(up[0].1, "/mnt/sharedos-build/bin/mmdebstrap");
        assert_eq!(up[1].1, "/mnt/sharedos-build/bin/mmtarfilter");
        assert_eq!((up[0].2, up[1].2), (0o755, 0o755));
        assert_eq!(downloads(&pl)[1].1, Path::new("/c/tmp/k.1/debs.txt"));
    }

    #[test]
    fn prep_mounts_the_scratch_and_sets_the_clock() {
        assert_eq!(
            prep_command("1764547200"),
            "mkdir -p /mnt/sharedos-build && mount -t tmpfs -o size=3072m,mode=0755 sharedos-build /mnt/sharedos-build \
             && mkdir /mnt/sharedos-build/bin /mnt/sharedos-build/image /mnt/sharedos-build/tmp && date -u -s @1764547200 >/dev/null"
        );
    }

    #[test]
    fn plan_shows_the_builder_vm_with_its_open_network() {
        let all = plan_lines(AccelChoice::Auto, &plan()).join("\n");
        for w in [
            "ssh-keygen",
            "qemu-img create",
            "-m 4096",
            "user,id=n0,hostfwd=tcp:127.0.0.1:0-:22",
            "mount -t tmpfs",
            "cat > /mnt/sharedos-build/bin/mmdebstrap.part",
            "cat > /mnt/sharedos-build/bin/mmtarfilter.part",
            "/mnt/sharedos-build/bin/mmdebstrap --mode=root",
            "cat /mnt/sharedos-build/installed.txt",
        ] {
            assert!(all.contains(w), "{w} not in the plan:\n{all}");
        }
        assert!(!all.contains("restrict=on"));
    }
}
