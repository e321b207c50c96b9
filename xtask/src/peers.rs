//! `cargo xtask bench --peers`: virtme-ng, the nearest peer of the rig's first command, set up
//! under the image cache (`<cache root>/peers/`) so the bench can time `vng --run KERNEL -- true`
//! on the image's own kernel beside the floor boots and warm runs. Each step logs to a file in
//! that directory and leaves a marker naming what it made, so a later sitting redoes nothing
//! that already worked. When the peer cannot run here the caller gets the reason as text, to
//! print in the summary instead of a timing.

use anyhow::{bail, Context, Result};
use sharedos_rig::cmd::{self, Cmd};
use sharedos_rig::escape;
use sharedos_rig::image::ImageEntry;
use sharedos_rig::progress::Progress;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// virtme-ng from PyPI, pinned so that two sittings time the same peer.
pub const VNG_VERSION: &str = "1.42";
/// virtiofsd from crates.io, pinned for the same reason.
pub const VIRTIOFSD_VERSION: &str = "1.14.0";

/// How long one timed vng boot may take before it is ended: a TCG boot that takes this long
/// is a hang, not a timing.
const VNG_TIMEOUT: Duration = Duration::from_secs(600);
/// How much of a vng run's output is kept to find its reason in.
const VNG_OUTPUT_BYTES: usize = 4 << 20;

/// A host program vng needs that pip does not bring, with the Debian package that has it and
/// what vng does with it, for the message that names the fix.
struct HostTool {
    /// Names or absolute paths, any one of which will do.
    candidates: &'static [&'static str],
    package: &'static str,
    why: &'static str,
}

const HOST_TOOLS: &[HostTool] = &[
    HostTool {
        candidates: &["qemu-system-x86_64"],
        package: "qemu-system-x86",
        why: "vng boots the kernel in it",
    },
    HostTool {
        candidates: &["modprobe"],
        package: "kmod",
        why: "vng resolves the kernel's virtio and virtiofs modules for its initramfs with it",
    },
    HostTool {
        candidates: &["busybox-static", "busybox.static", "busybox"],
        package: "busybox-static",
        why: "vng's initramfs is built around it",
    },
    HostTool {
        // virtme-init looks in these two places before PATH.
        candidates: &[
            "/usr/lib/systemd/systemd-udevd",
            "/lib/systemd/systemd-udevd",
            "udevd",
        ],
        package: "udev",
        why: "the guest runs the host's root, and without udevd there no /dev/virtio-ports \
              links appear, so vng cannot hand the command its stdio and exits 255",
    },
    HostTool {
        candidates: &["debugfs"],
        package: "e2fsprogs",
        why: "the kernel's modules are read out of the image's disk with it, unmounted",
    },
];

/// The tools of `tools` that `found` finds none of, as `name (apt-get install PKG: why)`.
/// Pure over `found`, so a test can take any tool away.
fn missing_tools(tools: &[HostTool], found: &dyn Fn(&str) -> bool) -> Vec<String> {
    tools
        .iter()
        .filter(|t| !t.candidates.iter().any(|c| found(c)))
        .map(|t| {
            format!(
                "{} is missing (apt-get install {}: {})",
                t.candidates[t.candidates.len() - 1],
                t.package,
                t.why
            )
        })
        .collect()
}

fn tool_found(name: &str) -> bool {
    if name.starts_with('/') {
        sharedos_report::which::is_executable(Path::new(name))
    } else {
        sharedos_report::which::find_program(name).is_some()
    }
}

/// Whether a kernel can mount a 9p root: vng's fallback when virtiofsd is not there. From its
/// modules.builtin and whether fs/9p/9p.ko is among its modules.
fn kernel_has_9p(modules_builtin: &str, has_module: bool) -> bool {
    has_module
        || modules_builtin
            .lines()
            .any(|l| l.trim().ends_with("fs/9p/9p.ko"))
}

/// The last lines of a failed vng run that say what went wrong, for one line of the summary:
/// the lines naming a failure if there are any, else the last lines that are not a stack
/// trace, each cut to a readable length, escaped, since they are another program's (and a
/// guest kernel's) text.
pub fn failure_reason(output: &str, n: usize) -> String {
    const NOISE: &[&str] = &[
        "? ",
        "<TASK>",
        "</TASK>",
        "Call Trace",
        "RIP:",
        "RSP:",
        "RAX:",
        "RDX:",
        "RBP:",
        "R10:",
        "R13:",
        "Code:",
        "CPU:",
        "Hardware name:",
        "Kernel Offset:",
        "---[ end",
    ];
    const FAILING: &[&str] = &[
        "panic",
        "fail",
        "error",
        "cannot",
        "can't",
        "not found",
        "unable",
        "no such",
        "stuck",
    ];
    let kept: Vec<&str> = output
        .lines()
        .map(strip_kernel_stamp)
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .filter(|l| !NOISE.iter().any(|p| l.starts_with(p)) && !l.contains("+0x"))
        .collect();
    let failing: Vec<&str> = kept
        .iter()
        .copied()
        .filter(|l| {
            let low = l.to_lowercase();
            FAILING.iter().any(|w| low.contains(w))
        })
        .collect();
    let pick = if failing.is_empty() { kept } else { failing };
    let tail = &pick[pick.len().saturating_sub(n)..];
    tail.iter()
        .map(|l| escape::line(&cut(l, 200)))
        .collect::<Vec<_>>()
        .join(" / ")
}

/// `[    2.6980] text` -> `text`: the kernel's timestamp says nothing about why.
fn strip_kernel_stamp(l: &str) -> &str {
    let t = l.trim_start();
    match (t.strip_prefix('['), t.find(']')) {
        (Some(_), Some(end))
            if t[1..end]
                .trim()
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.') =>
        {
            &t[end + 1..]
        }
        _ => l,
    }
}

fn cut(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max).collect();
    out.push('…');
    out
}

/// A failed setup step as one bounded line: the step's own message (which names its log and
/// the fix), then the failing lines of the command's output that it quotes, not all of them.
fn setup_reason(e: &anyhow::Error) -> String {
    let mut causes = e.chain();
    let top = causes.next().map(ToString::to_string).unwrap_or_default();
    let rest: Vec<String> = causes.map(ToString::to_string).collect();
    let detail = failure_reason(&rest.join("\n"), 2);
    let top = escape::line(&cut(&top, 400));
    if detail.is_empty() {
        top
    } else {
        format!("{top}: {detail}")
    }
}

/// The peer, set up: how to run vng on the image's kernel.
#[derive(Debug, Clone)]
pub struct Peer {
    pub vng: PathBuf,
    /// PATH for vng: the venv's bin (vng runs `virtme-run` from PATH) and virtiofsd's.
    pub path: String,
    /// The image's kernel, copied beside its modules so vng finds them.
    pub kernel: PathBuf,
    /// A line for the summary about how the peer runs (e.g. without virtiofsd).
    pub note: Option<String>,
}

/// Where the peers live under a cache root.
pub fn peers_dir(cache_root: &Path) -> PathBuf {
    cache_root.join("peers")
}

/// Sets virtme-ng up under `dir` for `entry`'s kernel, redoing no step whose marker says it
/// is done. Err is the reason the peer cannot run here, for the summary, naming the log and
/// the fix.
pub fn set_up(dir: &Path, entry: &ImageEntry, progress: &Progress) -> Result<Peer, String> {
    let missing = missing_tools(HOST_TOOLS, &tool_found);
    if !missing.is_empty() {
        return Err(missing.join("; "));
    }
    std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let vng = venv(dir, progress).map_err(|e| setup_reason(&e))?;
    let kernel = kernel_tree(dir, entry, progress).map_err(|e| setup_reason(&e))?;
    let modules = kernel
        .parent()
        .and_then(Path::parent)
        .map(|root| {
            root.join("lib/modules")
                .join(&entry.manifest.kernel_release)
        })
        .unwrap_or_default();
    // vng starts virtme-run from PATH, so the venv's bin goes first.
    let mut path = vec![dir.join("venv/bin").display().to_string()];
    let mut note = None;
    match virtiofsd(dir, progress) {
        Ok(bin) => path.push(bin.display().to_string()),
        Err(e) => {
            let builtin =
                std::fs::read_to_string(modules.join("modules.builtin")).unwrap_or_default();
            let why = setup_reason(&e);
            if !kernel_has_9p(&builtin, modules.join("kernel/fs/9p/9p.ko").exists()) {
                return Err(format!(
                    "virtiofsd could not be built ({why}), and this kernel has no 9p, so vng \
                     would have no root filesystem"
                ));
            }
            note = Some(format!(
                "without virtiofsd, which could not be built ({why}): vng used 9p"
            ));
        }
    }
    path.push(std::env::var("PATH").unwrap_or_default());
    Ok(Peer {
        vng,
        path: path.join(":"),
        kernel,
        note,
    })
}

/// A step's marker: `name.done` in `dir`, holding what the step made.
fn done(dir: &Path, name: &str, what: &str) -> bool {
    std::fs::read_to_string(dir.join(format!("{name}.done"))).is_ok_and(|s| s.trim() == what)
}

fn mark(dir: &Path, name: &str, what: &str) -> Result<()> {
    let p = dir.join(format!("{name}.done"));
    std::fs::write(&p, format!("{what}\n")).with_context(|| format!("writing {}", p.display()))
}

/// Runs one setup step's command, its output appended to `log`.
fn step(cmd: &Cmd, progress: &Progress, name: &str, log: &Path, fix: &str) -> Result<()> {
    let stage = progress.stage(name);
    cmd::run(cmd, &stage, log, None).with_context(|| {
        format!(
            "peers: {name} failed (its output: {}); {fix}",
            log.display()
        )
    })?;
    stage.finish();
    Ok(())
}

/// The venv with virtme-ng installed: `dir/venv`, its vng returned.
fn venv(dir: &Path, progress: &Progress) -> Result<PathBuf> {
    let what = format!("virtme-ng=={VNG_VERSION}");
    let venv = dir.join("venv");
    let vng = venv.join("bin/vng");
    if done(dir, "virtme-ng", &what) && vng.exists() {
        return Ok(vng);
    }
    let log = dir.join("virtme-ng.log");
    if !venv.join("bin/pip").exists() {
        step(
            &Cmd::new(vec![
                "python3".into(),
                "-m".into(),
                "venv".into(),
                venv.display().to_string(),
            ]),
            progress,
            "python3 -m venv",
            &log,
            "on Debian, `apt-get install python3-venv` brings the venv module and its pip",
        )?;
    }
    step(
        &Cmd::new(vec![
            venv.join("bin/pip").display().to_string(),
            "install".into(),
            "--disable-pip-version-check".into(),
            what.clone(),
        ]),
        progress,
        "pip install virtme-ng",
        &log,
        "it needs PyPI reachable; the log has pip's own reason",
    )?;
    if !vng.exists() {
        bail!(
            "pip installed {what} but left no {} (log: {})",
            vng.display(),
            log.display()
        );
    }
    mark(dir, "virtme-ng", &what)?;
    Ok(vng)
}

/// virtiofsd built by cargo into `dir/virtiofsd/bin`, which is returned. Its build directory
/// stays, so a build that failed for a missing library goes on where it stopped.
fn virtiofsd(dir: &Path, progress: &Progress) -> Result<PathBuf> {
    let what = format!("virtiofsd {VIRTIOFSD_VERSION}");
    let root = dir.join("virtiofsd");
    let bin = root.join("bin");
    if done(dir, "virtiofsd", &what) && bin.join("virtiofsd").exists() {
        return Ok(bin);
    }
    step(
        &Cmd::new(vec![
            "nice".into(),
            "-n".into(),
            "19".into(),
            "cargo".into(),
            "install".into(),
            "virtiofsd".into(),
            "--version".into(),
            VIRTIOFSD_VERSION.into(),
            "--locked".into(),
            "--root".into(),
            root.display().to_string(),
        ])
        .env(
            "CARGO_TARGET_DIR",
            &dir.join("virtiofsd-build").display().to_string(),
        ),
        progress,
        "cargo install virtiofsd",
        &dir.join("virtiofsd.log"),
        "it links libseccomp and libcap-ng: `apt-get install libseccomp-dev libcap-ng-dev`",
    )?;
    mark(dir, "virtiofsd", &what)?;
    Ok(bin)
}

/// `dir/kernels/<image key>/`: the image's kernel as `boot/vmlinuz-<release>` beside the
/// image's `lib/modules/<release>`. vng finds a kernel's modules by walking up from the
/// kernel's path to a `lib/modules`, and it needs them: Debian's kernels build virtio-pci,
/// virtiofs and the console as modules, which vng's initramfs loads. Returns the kernel.
fn kernel_tree(dir: &Path, entry: &ImageEntry, progress: &Progress) -> Result<PathBuf> {
    let release = &entry.manifest.kernel_release;
    if release.is_empty() || release.contains('/') || release.starts_with('.') {
        bail!("the image's manifest names no usable kernel release ({release:?})");
    }
    let what = format!("{} {release}", entry.manifest.kernel_sha256);
    let tree = dir.join("kernels").join(&entry.manifest.key);
    let kernel = tree.join("boot").join(format!("vmlinuz-{release}"));
    if done(&tree, "tree", &what) && kernel.exists() {
        return Ok(kernel);
    }
    // Made aside and renamed, so a tree that is there is whole.
    let part = dir
        .join("kernels")
        .join(format!("{}.part", entry.manifest.key));
    for d in [&part, &tree] {
        if d.exists() {
            std::fs::remove_dir_all(d).with_context(|| format!("removing {}", d.display()))?;
        }
    }
    let modules = part.join("lib/modules");
    for d in [part.join("boot"), modules.clone()] {
        std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
    }
    std::fs::copy(
        entry.kernel(),
        part.join("boot").join(format!("vmlinuz-{release}")),
    )
    .with_context(|| format!("copying the image's kernel {}", entry.kernel().display()))?;
    // Images are merged-/usr, so the modules are under /usr/lib; debugfs reads the disk
    // without mounting it or writing to it.
    step(
        &Cmd::new(vec![
            "debugfs".into(),
            "-R".into(),
            format!("rdump /usr/lib/modules/{release} {}", modules.display()),
            entry.disk().display().to_string(),
        ]),
        progress,
        "reading the kernel's modules out of the image",
        &dir.join("kernel-tree.log"),
        "the image's disk is an ext2 filesystem that debugfs (e2fsprogs) reads",
    )?;
    // debugfs exits 0 when the path is not there, so the result is what tells.
    if !modules.join(release).join("modules.dep").exists() {
        bail!(
            "the image's disk {} has no /usr/lib/modules/{release}/modules.dep (log: {})",
            entry.disk().display(),
            dir.join("kernel-tree.log").display()
        );
    }
    mark(&part, "tree", &what)?;
    std::fs::rename(&part, &tree)
        .with_context(|| format!("renaming {} to {}", part.display(), tree.display()))?;
    progress.note(&format!("peers: kernel and modules in {}", tree.display()));
    Ok(kernel)
}

/// `vng --run KERNEL -- true` with the sitting's guest size, under TCG when the floor ran
/// under TCG so the two boots are alike.
pub fn vng_cmd(peer: &Peer, disable_kvm: bool, memory_mib: u64, cpus: u32) -> Cmd {
    let mut argv = vec![peer.vng.display().to_string()];
    if disable_kvm {
        argv.push("--disable-kvm".into());
    }
    argv.extend([
        "--memory".into(),
        format!("{memory_mib}M"),
        "--cpus".into(),
        cpus.to_string(),
        "--run".into(),
        peer.kernel.display().to_string(),
        "--".into(),
        "true".into(),
    ]);
    Cmd::new(argv).env("PATH", &peer.path)
}

/// One vng boot: Ok(seconds) when it exited 0, Err(reason) when it did not. A failed run is
/// run again with --verbose, untimed, because vng sends the guest's console nowhere without
/// it, and the console is where a boot says why it failed. Output goes to `log`.
pub fn time_vng(cmd: &Cmd, log: &Path) -> Result<Result<f64, String>> {
    let started = Instant::now();
    let out = cmd::capture_bounded(cmd, VNG_TIMEOUT, VNG_OUTPUT_BYTES);
    let secs = started.elapsed().as_secs_f64();
    let out = match out {
        Ok(o) => o,
        Err(e) => return Ok(Err(escape::line(&format!("{e:#}")))),
    };
    write_log(log, cmd, &out)?;
    if out.code == Some(0) {
        return Ok(Ok(secs));
    }
    let code = out
        .code
        .map_or_else(|| "a signal".to_string(), |c| c.to_string());
    let mut verbose = cmd.clone();
    verbose.argv.insert(1, "--verbose".into());
    let vlog = log.with_extension("verbose.log");
    let detail = match cmd::capture_bounded(&verbose, VNG_TIMEOUT, VNG_OUTPUT_BYTES) {
        Ok(v) => {
            write_log(&vlog, &verbose, &v)?;
            failure_reason(&format!("{}\n{}", v.stdout, v.stderr), 2)
        }
        Err(e) => escape::line(&format!("{e:#}")),
    };
    Ok(Err(format!(
        "vng exited {code}: {detail} (logs: {}, {})",
        log.display(),
        vlog.display()
    )))
}

fn write_log(log: &Path, cmd: &Cmd, out: &cmd::Captured) -> Result<()> {
    std::fs::write(
        log,
        format!(
            "$ {}\nexit: {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            cmd.display(),
            out.code,
            out.stdout,
            out.stderr
        ),
    )
    .with_context(|| format!("writing {}", log.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_missing_tool_is_named_with_its_package() {
        let all = missing_tools(HOST_TOOLS, &|_| true);
        assert!(all.is_empty(), "{all:?}");
        let no_udev = missing_tools(HOST_TOOLS, &|c| !c.contains("udevd"));
        assert_eq!(no_udev.len(), 1, "{no_udev:?}");
        assert!(no_udev[0].starts_with("udevd is missing (apt-get install udev:"));
        // One candidate is enough: busybox without busybox-static will do.
        let plain_busybox = missing_tools(HOST_TOOLS, &|c| !c.starts_with("busybox-"));
        assert!(plain_busybox.is_empty(), "{plain_busybox:?}");
        let none = missing_tools(HOST_TOOLS, &|_| false);
        assert_eq!(none.len(), HOST_TOOLS.len());
        assert!(none.iter().any(|m| m.contains("apt-get install kmod")));
    }

    #[test]
    fn the_install_step_installs_every_package_the_peer_names() {
        let list = include_str!("../../.ci/packages-peers.txt");
        let listed: Vec<&str> = list
            .lines()
            .filter(|l| !l.starts_with('#'))
            .flat_map(str::split_whitespace)
            .collect();
        // QEMU is .ci/install-host's own choice, always installed as a pair.
        let named = HOST_TOOLS
            .iter()
            .map(|t| t.package)
            .filter(|p| *p != "qemu-system-x86")
            .chain(["python3-venv", "libseccomp-dev", "libcap-ng-dev"]);
        for p in named {
            assert!(listed.contains(&p), "{p} is not in .ci/packages-peers.txt");
        }
    }

    #[test]
    fn a_kernel_has_9p_built_in_or_as_a_module() {
        assert!(kernel_has_9p(
            "kernel/fs/9p/9p.ko\nkernel/fs/ext4/ext4.ko\n",
            false
        ));
        assert!(kernel_has_9p("", true));
        assert!(!kernel_has_9p(
            "kernel/fs/ext4/ext4.ko\nkernel/net/9p/9pnet.ko\n",
            false
        ));
    }

    #[test]
    fn the_reason_is_the_failing_lines_not_the_stack_trace() {
        // The tail of a real vng --verbose boot of a Debian cloud kernel without its modules.
        let out = "\
[    2.697394] VFS: Cannot open root device \"(null)\" or unknown-block(0,0): error -19
[    2.697850] Please append a correct \"root=\" boot option; here are the available partitions:
[    2.698583] Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)
[    2.699012] CPU: 0 PID: 1 Comm: swapper/0 Not tainted 6.1.0-50-cloud-amd64 #1
[    2.699604] Call Trace:
[    2.700292]  <TASK>
[    2.700689]  dump_stack_lvl+0x44/0x5c
[    2.701085]  panic+0x118/0x2f4
[    2.702061]  </TASK>
[    2.702231] Kernel Offset: 0x9c00000 from 0xffffffff81000000
";
        assert_eq!(
            failure_reason(out, 2),
            "VFS: Cannot open root device \"(null)\" or unknown-block(0,0): error -19 / \
             Kernel panic - not syncing: VFS: Unable to mount root fs on unknown-block(0,0)"
        );
    }

    #[test]
    fn without_a_failing_line_the_reason_is_the_last_lines() {
        assert_eq!(failure_reason("one\n\ntwo\nthree\n", 2), "two / three");
        assert_eq!(failure_reason("", 2), "");
    }

    #[test]
    fn the_reason_is_escaped_and_bounded() {
        let r = failure_reason("error: \u{1b}[31mred\u{1b}[0m\n", 1);
        assert!(!r.contains('\u{1b}'), "{r}");
        assert!(r.contains("\\u{1b}"), "{r}");
        let long = format!("error {}", "x".repeat(1000));
        assert!(failure_reason(&long, 1).chars().count() <= 201);
    }

    #[test]
    fn a_setup_failure_is_its_step_and_its_failing_lines() {
        let e = anyhow::anyhow!(
            "`cargo install virtiofsd` failed (exit status: 101)\n--- last 4 lines of its output ---\n\
             Compiling libseccomp-sys v0.2.1\n\
             error: failed to run custom build command for `libseccomp-sys v0.2.1`\n\
             = note: unable to find library -lseccomp\n\
             Building [====>    ] 120/200"
        )
        .context("peers: cargo install virtiofsd failed (its output: /p/virtiofsd.log); apt-get install libseccomp-dev libcap-ng-dev");
        assert_eq!(
            setup_reason(&e),
            "peers: cargo install virtiofsd failed (its output: /p/virtiofsd.log); apt-get install \
             libseccomp-dev libcap-ng-dev: error: failed to run custom build command for \
             `libseccomp-sys v0.2.1` / = note: unable to find library -lseccomp"
        );
        let plain = anyhow::anyhow!("the image's manifest names no usable kernel release");
        assert_eq!(
            setup_reason(&plain),
            "the image's manifest names no usable kernel release"
        );
    }

    #[test]
    fn a_step_is_done_only_for_the_version_it_made() {
        let dir = std::env::temp_dir().join(format!("peers-marker-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        assert!(!done(&dir, "virtme-ng", "virtme-ng==1.42"));
        mark(&dir, "virtme-ng", "virtme-ng==1.42").unwrap();
        assert!(done(&dir, "virtme-ng", "virtme-ng==1.42"));
        assert!(!done(&dir, "virtme-ng", "virtme-ng==1.43"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_kernel_stamp_goes_and_other_brackets_stay() {
        assert_eq!(strip_kernel_stamp("[    2.6980] text"), " text");
        assert_eq!(strip_kernel_stamp("[peers] text"), "[peers] text");
    }

    #[test]
    fn vng_runs_the_kernel_with_the_sittings_size_and_accelerator() {
        let peer = Peer {
            vng: "/p/venv/bin/vng".into(),
            path: "/p/venv/bin:/p/virtiofsd/bin:/usr/bin".into(),
            kernel: "/p/kernels/k/boot/vmlinuz-6.1".into(),
            note: None,
        };
        let c = vng_cmd(&peer, true, 1024, 2);
        assert_eq!(
            c.argv,
            [
                "/p/venv/bin/vng",
                "--disable-kvm",
                "--memory",
                "1024M",
                "--cpus",
                "2",
                "--run",
                "/p/kernels/k/boot/vmlinuz-6.1",
                "--",
                "true"
            ]
        );
        assert_eq!(c.env, [("PATH".to_string(), peer.path.clone())]);
        assert!(!vng_cmd(&peer, false, 1024, 2)
            .argv
            .contains(&"--disable-kvm".to_string()));
    }
}
