//! The tree under test: private pid, mount, net, ipc and uts namespaces; a minimal mount table
//! reached through pivot_root; Xvfb, an xterm and the stateful app under a PID 1 of our own.
//!
//! The sequence: `diagnose` execs `sharedos-gate tree-spawn` after unshare(2) of the five
//! namespaces; tree-spawn forks the namespace's PID 1, prints its host pid and exits. PID 1
//! builds the mount table, pivots, copies our binary into the private /tmp (so CRIU finds every
//! executable inside the tree at restore, wherever the binary lived on the host) and re-execs it
//! as `tree-init`, which starts the programs and reaps.

use crate::exec;
use anyhow::{bail, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use sharedos_report::report::{Evidence, Workload as Kind};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

pub const XTERM_TITLE: &str = "sharedos-spike";
/// Our binary's path inside the tree when the tree's root does not show it (see [`exe_in_tree`]):
/// a copy in the tree's own /tmp.
pub const TREE_EXE: &str = "/tmp/sharedos-gate";
pub const MARKER_ENV: &str = "SHAREDOS_MARKER";
pub const SCREEN: &str = "640x480x24";

#[derive(Clone, Debug)]
pub struct TreeSpec {
    pub marker: String,
    pub display: u32,
    /// A read-only bind of the host's `/`: the tree's root, and CRIU's `--root` at restore.
    pub root: PathBuf,
    /// With `--cgroup`: the cgroup2 directory the tree joins before its PID 1 is forked.
    pub cgroup: Option<PathBuf>,
    /// With `--userns`: the tree in a user namespace of its own, root mapped to `USERNS_MAP`.
    pub userns: bool,
    /// What the tree runs beside Xvfb and the state app.
    pub workload: Kind,
    /// This binary as the tree runs it (PID 1 and the state app): see [`exe_in_tree`].
    pub exe: PathBuf,
}

/// Where the tree runs this binary (`exe`, as the outside sees it) from. CRIU dumps a tmpfs by
/// tarring and gzipping its files, so a copy of this 5 MB binary in the tree's /tmp cost every
/// dump 2 s and every restore 1 s under TCG. The binary itself serves when the tree's root (a
/// bind of `/`, not of what is mounted below it) shows it at the same path: it is on the root
/// filesystem, and anyone may execute it (root inside a user namespace is anyone). CRIU then
/// records only its path, and checks at restore that the file is still the one it dumped.
pub fn exe_in_tree(exe: &Path) -> PathBuf {
    use std::os::unix::fs::MetadataExt;
    let shown = exe.is_absolute()
        && match (std::fs::metadata(exe), std::fs::metadata("/")) {
            (Ok(e), Ok(r)) => e.is_file() && e.dev() == r.dev() && e.mode() & 0o001 != 0,
            _ => false,
        };
    if shown {
        exe.to_path_buf()
    } else {
        PathBuf::from(TREE_EXE)
    }
}

/// The device nodes of the tree's /dev: name, major, minor.
pub const DEV_NODES: [(&str, u64, u64); 6] = [
    ("null", 1, 3),
    ("zero", 1, 5),
    ("full", 1, 7),
    ("random", 1, 8),
    ("urandom", 1, 9),
    ("tty", 5, 0),
];

pub fn dev_node_names() -> Vec<&'static str> {
    DEV_NODES.iter().map(|(n, _, _)| *n).collect()
}

/// First uid and gid outside that root inside the tree's user namespace maps to, and how many.
pub const USERNS_OUTSIDE: u32 = 100_000;
pub const USERNS_COUNT: u32 = 65_536;

/// The line written to the tree's uid_map and gid_map: inside, outside, count.
pub fn userns_map_line() -> String {
    format!("0 {USERNS_OUTSIDE} {USERNS_COUNT}")
}

pub fn namespaces() -> CloneFlags {
    CloneFlags::CLONE_NEWPID
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWNET
        | CloneFlags::CLONE_NEWIPC
        | CloneFlags::CLONE_NEWUTS
}

fn spec_args(spec: &TreeSpec) -> Vec<String> {
    let mut v = vec![
        "--marker".into(),
        spec.marker.clone(),
        "--display".into(),
        format!(":{}", spec.display),
        "--exe".into(),
        spec.exe.display().to_string(),
    ];
    if !spec.workload.is_default() {
        v.extend(["--workload".into(), spec.workload.to_string()]);
    }
    v
}

/// What diagnose execs, after unshare(2), to start the tree.
pub fn spawn_argv(exe: &Path, spec: &TreeSpec) -> Vec<String> {
    let mut v = vec![exe.display().to_string(), "tree-spawn".into()];
    v.extend(spec_args(spec));
    v.push("--root".into());
    v.push(spec.root.display().to_string());
    if let Some(cg) = &spec.cgroup {
        v.push("--cgroup".into());
        v.push(cg.display().to_string());
    }
    if spec.userns {
        v.push("--userns".into());
    }
    v
}

/// The util-linux command that makes the same namespaces, for readers of the plan.
pub fn unshare_equivalent_argv(exe: &Path, spec: &TreeSpec) -> Vec<String> {
    let mut v: Vec<String> = vec!["unshare".into()];
    if spec.userns {
        // util-linux 2.38's form: outer, inner, count.
        let map = format!("{USERNS_OUTSIDE},0,{USERNS_COUNT}");
        v.extend([
            "--user".to_string(),
            format!("--map-users={map}"),
            format!("--map-groups={map}"),
        ]);
    }
    v.extend(
        [
            "--pid",
            "--fork",
            "--mount-proc",
            "--mount",
            "--net",
            "--ipc",
            "--uts",
            "--propagation",
            "private",
            "--",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    v.extend(spawn_argv(exe, spec));
    v
}

/// PID 1's re-exec, from inside the tree.
pub fn init_argv(spec: &TreeSpec) -> Vec<String> {
    let mut v = vec![spec.exe.display().to_string(), "tree-init".into()];
    v.extend(spec_args(spec));
    v
}

pub fn xvfb_argv(display: u32) -> Vec<String> {
    [
        "Xvfb",
        &format!(":{display}"),
        "-screen",
        "0",
        SCREEN,
        "-nolisten",
        "tcp",
        "-noreset",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The xterm prints the marker and then idles, so its screen stays still between grabs.
pub fn xterm_argv(marker: &str) -> Vec<String> {
    [
        "xterm",
        "-ut",
        "-T",
        XTERM_TITLE,
        "-geometry",
        "80x24+0+0",
        "-e",
        "/bin/sh",
        "-c",
        &format!("echo {marker}; exec sleep infinity"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub fn stateapp_argv(exe: &Path, marker: &str) -> Vec<String> {
    vec![
        exe.display().to_string(),
        "stateapp".into(),
        "--marker".into(),
        marker.into(),
        "--socket".into(),
        crate::stateapp::SOCKET.into(),
    ]
}

/// One program the tree's PID 1 starts; it writes its output to `/tmp/NAME.log` in the tree.
pub struct Program {
    pub name: &'static str,
    pub argv: Vec<String>,
    /// Set for this program only, beside the tree's environment.
    pub env: Vec<(String, String)>,
    /// What PID 1 waits for (each bounded) before starting it.
    pub after: Vec<After>,
}

/// A condition PID 1 waits for before it starts a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// A path in the tree: a socket the program needs at once.
    Path(&'static str),
    /// A window manager announced on the display (`_NET_SUPPORTING_WM_CHECK`). Started beside
    /// openbox, mousepad ran with no window of it viewable in 3 of 20 desktop launches under
    /// TCG: its map request, redirected to a manager still starting, is the likely loss.
    WindowManager,
}

impl Program {
    fn new(name: &'static str, argv: Vec<String>) -> Program {
        Program {
            name,
            argv,
            env: Vec::new(),
            after: Vec::new(),
        }
    }

    pub fn log(&self) -> String {
        format!("/tmp/{}.log", self.name)
    }
}

/// A file PID 1 writes into the tree's private /tmp before it starts anything.
pub struct TreeFile {
    pub path: &'static str,
    pub text: String,
}

/// What the tree runs under its PID 1: an X server, the clients PID 1 starts once the server's
/// socket is there, and the files they read. The default workload: Xvfb, the
/// state app and an xterm.
pub struct Workload {
    pub x_server: Program,
    pub clients: Vec<Program>,
    pub files: Vec<TreeFile>,
}

impl Workload {
    /// Every program, in the order PID 1 starts them.
    pub fn programs(&self) -> impl Iterator<Item = &Program> {
        std::iter::once(&self.x_server).chain(&self.clients)
    }
}

/// The desktop workload's session bus, a socket in the tree's /tmp.
pub const BUS_SOCKET: &str = "/tmp/sharedos-bus";
/// The window manager's name as it announces itself (`_NET_SUPPORTING_WM_CHECK`), and the
/// editor's WM_CLASS class.
pub const WM_NAME: &str = "Openbox";
pub const EDITOR_CLASS: &str = "Mousepad";
/// The browser's local page and its profile, in the tree's /tmp.
pub const PAGE: &str = "/tmp/sharedos-page.html";
pub const BROWSER_PROFILE: &str = "/tmp/sharedos-firefox";

/// What the tree's processes are, per workload: the program name (argv[0]'s basename) each
/// live-state check looks for, the check's name, and what it is in words.
pub fn expected_processes(w: Kind) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut v = vec![("Xvfb", "xvfb_process", "an Xvfb")];
    match w {
        Kind::Xterm => v.push(("xterm", "xterm_process", "an xterm")),
        Kind::Desktop => v.extend([
            (
                "dbus-daemon",
                "dbus_process",
                "the session bus (dbus-daemon)",
            ),
            ("openbox", "wm_process", "the window manager (openbox)"),
            ("mousepad", "editor_process", "the editor (mousepad)"),
        ]),
        Kind::Browser | Kind::BrowserNosandbox => v.push((
            "firefox-esr",
            "browser_process",
            "the browser (firefox-esr)",
        )),
    }
    v
}

/// GTK's settings in the tree's $HOME: no blinking cursor and no animations, so that an idle
/// screen stays still between two grabs (the framebuffer checks compare pixels).
const GTK_SETTINGS: &str = "[Settings]\ngtk-cursor-blink = false\ngtk-enable-animations = false\n";

/// The page: its script keeps a random token and a counter that ticks every 100 ms in memory
/// only, and shows both in the document title; the body stays still.
pub fn page_html() -> String {
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>{w}</title></head>
<body style="margin:0;background:#fff;color:#000;font:16px sans-serif">
<p style="margin:40px">sharedos browser workload: this page's script keeps a token and a counter in memory and shows them in the title.</p>
<script>
const bytes = new Uint8Array(16);
crypto.getRandomValues(bytes);
const token = Array.from(bytes, b => b.toString(16).padStart(2, "0")).join("");
let counter = 0;
const show = () => {{ document.title = "{w} " + token + " " + counter; }};
show();
setInterval(() => {{ counter += 1; show(); }}, {tick});
</script>
</body></html>
"#,
        w = sharedos_report::model::app::PAGE_TITLE_WORD,
        tick = sharedos_report::compare::TICK_MS
    )
}

/// Firefox's preferences for the run: no first-run pages, telemetry, update or network
/// probes (the tree's network namespace has only loopback). With `sandbox` false, the content
/// sandbox level is 0 as well.
pub fn browser_prefs(sandbox: bool) -> String {
    let mut prefs = vec![
        r#"user_pref("browser.shell.checkDefaultBrowser", false);"#,
        r#"user_pref("browser.startup.homepage_override.mstone", "ignore");"#,
        r#"user_pref("browser.aboutwelcome.enabled", false);"#,
        r#"user_pref("datareporting.policy.dataSubmissionEnabled", false);"#,
        r#"user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);"#,
        r#"user_pref("browser.sessionstore.resume_from_crash", false);"#,
        r#"user_pref("app.normandy.enabled", false);"#,
        r#"user_pref("app.update.enabled", false);"#,
        r#"user_pref("browser.safebrowsing.update.enabled", false);"#,
        r#"user_pref("network.captive-portal-service.enabled", false);"#,
        r#"user_pref("network.connectivity-service.enabled", false);"#,
        r#"user_pref("extensions.update.enabled", false);"#,
    ];
    if !sandbox {
        prefs.push(r#"user_pref("security.sandbox.content.level", 0);"#);
    }
    prefs.join("\n") + "\n"
}

/// The environment that switches every Firefox sandbox off: only `browser-nosandbox` sets it.
pub const BROWSER_NO_SANDBOX_ENV: [&str; 6] = [
    "MOZ_DISABLE_CONTENT_SANDBOX",
    "MOZ_DISABLE_GMP_SANDBOX",
    "MOZ_DISABLE_RDD_SANDBOX",
    "MOZ_DISABLE_SOCKET_PROCESS_SANDBOX",
    "MOZ_DISABLE_UTILITY_SANDBOX",
    "MOZ_DISABLE_VR_SANDBOX",
];

pub fn dbus_argv() -> Vec<String> {
    [
        "dbus-daemon",
        "--session",
        "--nofork",
        "--nopidfile",
        &format!("--address=unix:path={BUS_SOCKET}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The browser's window: kiosk mode (no tab strip, whose title would move on with the counter),
/// 520x360 at the top left, clear of the mark isolation and reset draw at 560,400: Firefox
/// repaints its window over anything drawn on it.
pub fn browser_argv() -> Vec<String> {
    [
        "firefox-esr",
        "--no-remote",
        "--profile",
        BROWSER_PROFILE,
        "--kiosk",
        "--width",
        "520",
        "--height",
        "360",
        &format!("file://{PAGE}"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub fn workload(spec: &TreeSpec) -> Workload {
    let mut clients = vec![Program::new(
        "stateapp",
        stateapp_argv(&spec.exe, &spec.marker),
    )];
    let mut files = Vec::new();
    match spec.workload {
        Kind::Xterm => clients.push(Program::new("xterm", xterm_argv(&spec.marker))),
        Kind::Desktop => {
            files.push(TreeFile {
                path: "/tmp/.config/gtk-3.0/settings.ini",
                text: GTK_SETTINGS.into(),
            });
            clients.push(Program::new("dbus", dbus_argv()));
            clients.push(Program::new("openbox", vec!["openbox".into()]));
            let mut editor = Program::new("mousepad", vec!["mousepad".into()]);
            editor.after = vec![After::Path(BUS_SOCKET), After::WindowManager];
            clients.push(editor);
        }
        Kind::Browser | Kind::BrowserNosandbox => {
            let sandbox = spec.workload == Kind::Browser;
            files.push(TreeFile {
                path: PAGE,
                text: page_html(),
            });
            files.push(TreeFile {
                path: "/tmp/sharedos-firefox/user.js",
                text: browser_prefs(sandbox),
            });
            let mut browser = Program::new("firefox", browser_argv());
            browser
                .env
                .push(("MOZ_CRASHREPORTER_DISABLE".into(), "1".into()));
            if !sandbox {
                browser.env.extend(
                    BROWSER_NO_SANDBOX_ENV
                        .iter()
                        .map(|k| (k.to_string(), "1".to_string())),
                );
            }
            clients.push(browser);
        }
    }
    Workload {
        x_server: Program::new("xvfb", xvfb_argv(spec.display)),
        clients,
        files,
    }
}

/// The log of the tree's PID 1, beside its programs' logs.
const INIT_LOG: &str = "/tmp/tree-init.log";

/// The environment of every process in the tree: nothing inherited from the caller.
pub fn tree_env(spec: &TreeSpec) -> Vec<(String, String)> {
    vec![
        (
            "PATH".into(),
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".into(),
        ),
        ("HOME".into(), "/tmp".into()),
        ("LANG".into(), "C.UTF-8".into()),
        ("DISPLAY".into(), format!(":{}", spec.display)),
        (MARKER_ENV.into(), spec.marker.clone()),
    ]
    .into_iter()
    .chain((spec.workload == Kind::Desktop).then(|| {
        (
            "DBUS_SESSION_BUS_ADDRESS".to_string(),
            format!("unix:path={BUS_SOCKET}"),
        )
    }))
    .collect()
}

/// A path inside the tree as seen from outside, through the tree's root.
pub fn path_in_tree(tree_pid: i32, inner: &str) -> PathBuf {
    PathBuf::from(format!("/proc/{tree_pid}/root{inner}"))
}

/// The logs PID 1 and the programs of the tree (`spec`'s) write in its private /tmp, as
/// evidence of a failed start.
pub fn log_evidence(spec: &TreeSpec, pid: i32) -> Vec<Evidence> {
    let w = workload(spec);
    let logs = std::iter::once(("tree-init", INIT_LOG.to_string()))
        .chain(w.programs().map(|p| (p.name, p.log())));
    logs.filter_map(|(name, log)| {
        let p = path_in_tree(pid, &log);
        std::fs::read_to_string(&p).ok().map(|text| Evidence {
            step: format!("log of {name} inside the tree"),
            note: sharedos_report::text::tail(&text, 20, 3000),
            ..Evidence::default()
        })
    })
    .collect()
}

/// How the spawn command runs: with the tree's environment only and, without a user namespace,
/// after unshare(2) of the five namespaces.
pub fn spawn_setup(spec: &TreeSpec) -> impl FnOnce(&mut Command) {
    let env = tree_env(spec);
    let userns = spec.userns;
    move |cmd| {
        cmd.env_clear().envs(env);
        // With a user namespace tree-spawn makes every namespace itself: the others must belong
        // to the new user namespace, which needs its map written from outside first.
        if !userns {
            // SAFETY: unshare(2) is async-signal-safe; nothing else runs between fork and exec.
            unsafe {
                cmd.pre_exec(|| nix::sched::unshare(namespaces()).map_err(std::io::Error::from));
            }
        }
    }
}

/// How `tree-spawn` tells diagnose the host pid of the tree's PID 1, on its standard output.
pub fn pid_line(pid: i32) -> String {
    format!("{PID_LINE}{pid}")
}
const PID_LINE: &str = "tree-pid ";

/// The host pid of the tree's PID 1, from what the spawn command printed (`pid_line`).
pub fn spawned_pid(out: &exec::Outcome) -> Result<i32> {
    if !out.success() {
        bail!("{}", out.summary());
    }
    out.stdout
        .lines()
        .find_map(|l| l.strip_prefix(PID_LINE))
        .and_then(|p| p.trim().parse::<i32>().ok())
        .with_context(|| format!("tree-spawn printed no pid: {}", out.summary()))
}

/// `tree-spawn`: runs in the new namespaces but still in the caller's pid namespace; its child
/// is the new namespace's PID 1. Returns, in the process that forked PID 1, its pid (for
/// `pid_line`), and None in any other; the forked PID 1 returns only with its error.
pub fn spawn_main(spec: &TreeSpec) -> Result<Option<i32>> {
    // Joined before the fork: PID 1 and everything it starts are born in the group.
    if let Some(cg) = &spec.cgroup {
        let procs = cg.join("cgroup.procs");
        std::fs::write(&procs, "0").with_context(|| format!("joining {}", procs.display()))?;
    }
    if spec.userns {
        return spawn_in_userns(spec);
    }
    fork_init(spec)
}

fn fork_init(spec: &TreeSpec) -> Result<Option<i32>> {
    // SAFETY: this process was just exec'd and is single-threaded.
    match unsafe { nix::unistd::fork() }.context("fork of the tree's PID 1")? {
        nix::unistd::ForkResult::Parent { child } => Ok(Some(child.as_raw())),
        nix::unistd::ForkResult::Child => Err(become_init(spec).context("tree PID 1 setup failed")),
    }
}

/// `tree-spawn --userns`: a child makes the user namespace and waits; this process, still
/// root outside, writes the child's uid and gid maps; then the child becomes root inside, makes
/// the other namespaces (owned by the new user namespace) and forks PID 1 as without one.
fn spawn_in_userns(spec: &TreeSpec) -> Result<Option<i32>> {
    use std::io::{Read, Write};
    let (ready_r, ready_w) = nix::unistd::pipe().context("pipe")?;
    let (go_r, go_w) = nix::unistd::pipe().context("pipe")?;
    // SAFETY: this process was just exec'd and is single-threaded.
    match unsafe { nix::unistd::fork() }.context("fork of the user namespace's first process")? {
        nix::unistd::ForkResult::Child => {
            drop((ready_r, go_w));
            let run = || -> Result<Option<i32>> {
                // Root inside is no owner of the directories above the root (the work directory
                // may sit under root's 0700 home): the way there is walked now, while still root
                // outside, and PID 1 goes on from this working directory.
                nix::unistd::chdir(&spec.root)
                    .with_context(|| format!("chdir {}", spec.root.display()))?;
                nix::sched::unshare(CloneFlags::CLONE_NEWUSER).context("unshare(CLONE_NEWUSER)")?;
                std::fs::File::from(ready_w)
                    .write_all(b"u")
                    .context("telling the parent")?;
                let mut go = [0u8; 1];
                std::fs::File::from(go_r)
                    .read_exact(&mut go)
                    .context("waiting for the uid and gid maps")?;
                if &go != b"g" {
                    bail!("the parent did not write the maps");
                }
                let root = nix::unistd::Gid::from_raw(0);
                nix::unistd::setresgid(root, root, root).context("setresgid(0) inside")?;
                let root = nix::unistd::Uid::from_raw(0);
                nix::unistd::setresuid(root, root, root).context("setresuid(0) inside")?;
                nix::sched::unshare(namespaces()).context("unshare of the tree's namespaces")?;
                fork_init(spec)
            };
            run().context("tree-spawn in a user namespace")
        }
        nix::unistd::ForkResult::Parent { child } => {
            drop((ready_w, go_r));
            let mapped = (|| -> Result<()> {
                let mut ready = [0u8; 1];
                std::fs::File::from(ready_r)
                    .read_exact(&mut ready)
                    .context("waiting for the child's user namespace")?;
                for file in ["uid_map", "gid_map"] {
                    let p = format!("/proc/{child}/{file}");
                    std::fs::write(&p, userns_map_line())
                        .with_context(|| format!("writing {p}"))?;
                }
                Ok(())
            })();
            if mapped.is_ok() {
                std::fs::File::from(go_w)
                    .write_all(b"g")
                    .context("letting the child go on")?;
            } else {
                // Closing the pipe unanswered makes the child give up.
                drop(go_w);
            }
            let status = nix::sys::wait::waitpid(child, None).context("waiting for the child")?;
            mapped?;
            match status {
                nix::sys::wait::WaitStatus::Exited(_, 0) => Ok(None),
                other => bail!("the user namespace's first process ended {other:?}"),
            }
        }
    }
}

/// The root bind came into this user namespace's mount namespace locked to its parent, and
/// pivot_root(2) refuses a locked mount: a bind of it made here is not locked. The working
/// directory still names the old mount, so it moves to the new one through `..` and the root's
/// own name (looking up a name follows mounts; `.` does not).
fn enter_own_root_bind(root: &Path) -> Result<()> {
    let name = root
        .file_name()
        .with_context(|| format!("{} has no last component", root.display()))?;
    mount(
        Some("."),
        ".",
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REC,
        None::<&str>,
    )
    .context("binding the tree's root onto itself")?;
    let again = Path::new("..").join(name);
    nix::unistd::chdir(&again).with_context(|| format!("chdir {}", again.display()))
}

fn mount_fs(fstype: &str, target: &Path, flags: MsFlags, data: &str) -> Result<()> {
    mount(Some(fstype), target, Some(fstype), flags, Some(data))
        .with_context(|| format!("mounting {fstype} on {}", target.display()))
}

/// Builds the tree's mount table under `spec.root` and pivots into it, then execs `tree-init`.
/// Returns only on error.
fn become_init(spec: &TreeSpec) -> anyhow::Error {
    match setup_root_and_exec(spec) {
        Ok(never) => match never {},
        Err(e) => e,
    }
}

fn setup_root_and_exec(spec: &TreeSpec) -> Result<std::convert::Infallible> {
    // Our own session: with it CRIU needs no --shell-job.
    nix::unistd::setsid().context("setsid")?;
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .context("making the mount tree private")?;
    nix::unistd::sethostname("sharedos-tree").context("setting the tree's hostname")?;
    // In a user namespace the root is reached from the working directory tree-spawn set.
    let root = if spec.userns {
        enter_own_root_bind(&spec.root)?;
        Path::new(".")
    } else {
        spec.root.as_path()
    };
    let nodev = MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC;

    let dev = root.join("dev");
    mount_fs("tmpfs", &dev, MsFlags::MS_NOSUID, "mode=0755,size=1m")?;
    for (name, major, minor) in DEV_NODES {
        let p = dev.join(name);
        if spec.userns {
            // mknod(2) of a device is refused inside a user namespace: the machine's node is
            // bound instead (the old root is still there to bind it from).
            std::fs::File::create(&p).with_context(|| format!("creating {}", p.display()))?;
            let host = Path::new("/dev").join(name);
            mount(
                Some(&host),
                &p,
                None::<&str>,
                MsFlags::MS_BIND,
                None::<&str>,
            )
            .with_context(|| format!("binding {} on {}", host.display(), p.display()))?;
            continue;
        }
        mknod(
            &p,
            SFlag::S_IFCHR,
            Mode::from_bits_truncate(0o666),
            makedev(major, minor),
        )
        .with_context(|| format!("mknod {}", p.display()))?;
        nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            &p,
            Mode::from_bits_truncate(0o666),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
        .with_context(|| format!("chmod {}", p.display()))?;
    }
    // A devpts instance of our own: each copy numbers its ptys from 0.
    std::fs::create_dir(dev.join("pts")).context("mkdir /dev/pts")?;
    mount_fs(
        "devpts",
        &dev.join("pts"),
        nodev,
        "newinstance,ptmxmode=0666,mode=0620",
    )?;
    std::os::unix::fs::symlink("pts/ptmx", dev.join("ptmx")).context("symlink /dev/ptmx")?;
    std::fs::create_dir(dev.join("shm")).context("mkdir /dev/shm")?;
    mount_fs(
        "tmpfs",
        &dev.join("shm"),
        nodev | MsFlags::MS_NODEV,
        "mode=1777",
    )?;
    for (name, target) in [
        ("fd", "/proc/self/fd"),
        ("stdin", "/proc/self/fd/0"),
        ("stdout", "/proc/self/fd/1"),
        ("stderr", "/proc/self/fd/2"),
    ] {
        std::os::unix::fs::symlink(target, dev.join(name))
            .with_context(|| format!("symlink /dev/{name}"))?;
    }

    mount_fs(
        "tmpfs",
        &root.join("tmp"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=1777",
    )?;
    // The X keyboard compiler writes its output here.
    let xkb = root.join("var/lib/xkb");
    if xkb.is_dir() {
        mount_fs("tmpfs", &xkb, nodev | MsFlags::MS_NODEV, "mode=0755")?;
    }
    // A proc of the new pid namespace (we are its PID 1 now).
    mount_fs("proc", &root.join("proc"), nodev | MsFlags::MS_NODEV, "")?;

    let exe_in_tree = root.join(spec.exe.strip_prefix("/").unwrap_or(&spec.exe));
    if spec.exe == Path::new(TREE_EXE) {
        std::fs::copy("/proc/self/exe", &exe_in_tree)
            .with_context(|| format!("copying our binary to {}", exe_in_tree.display()))?;
    } else if !exe_in_tree.is_file() {
        bail!(
            "the tree's root does not show this binary at {} (give the gate binary a path on the root filesystem)",
            spec.exe.display()
        );
    }

    nix::unistd::chdir(root).with_context(|| format!("chdir {}", root.display()))?;
    nix::unistd::pivot_root(".", ".").context("pivot_root")?;
    // The old root sits on top of the new one after pivot_root(".", "."); detaching it leaves
    // the tree with only the mounts made above.
    umount2(".", MntFlags::MNT_DETACH).context("detaching the old root")?;
    nix::unistd::chdir("/").context("chdir /")?;

    close_inherited_fds();
    redirect_stdio(INIT_LOG)?;

    let argv = init_argv(spec);
    let err = crate::exec::command(&argv[0])
        .args(&argv[1..])
        .env_clear()
        .envs(tree_env(spec))
        .exec();
    bail!("exec {}: {err}", argv[0])
}

/// Leaked host descriptors made CRIU's dump fail: the tree keeps only 0, 1, 2.
fn close_inherited_fds() {
    let fds: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
                .collect()
        })
        .unwrap_or_default();
    for fd in fds.into_iter().filter(|fd| *fd > 2) {
        let _ = nix::unistd::close(fd);
    }
}

fn redirect_stdio(log: &str) -> Result<()> {
    use std::os::fd::AsRawFd;
    let null = std::fs::File::open("/dev/null").context("opening /dev/null")?;
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .with_context(|| format!("opening {log}"))?;
    // SAFETY: dup2 onto the standard descriptors of this single-threaded process.
    unsafe {
        nix::libc::dup2(null.as_raw_fd(), 0);
        nix::libc::dup2(out.as_raw_fd(), 1);
        nix::libc::dup2(out.as_raw_fd(), 2);
    }
    Ok(())
}

extern "C" fn exit_on_term(_: i32) {
    // SAFETY: _exit is async-signal-safe. PID 1 exiting takes the whole namespace with it.
    unsafe { nix::libc::_exit(0) }
}

fn start(p: &Program) -> Result<u32> {
    let (argv, log) = (&p.argv, p.log());
    let out = std::fs::File::create(&log).with_context(|| format!("creating {log}"))?;
    let err = out.try_clone()?;
    let child = crate::exec::command(&argv[0])
        .args(&argv[1..])
        .envs(p.env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", argv.join(" ")))?;
    Ok(child.id())
}

/// Waits (bounded, as for the X socket) for `after` before `program` starts; the X server is
/// reached at `x_socket`.
fn wait_for(
    after: After,
    x_socket: &str,
    program: &str,
) -> Result<(), sharedos_report::wait::WaitError> {
    let bound = Duration::from_secs(300);
    match after {
        After::Path(path) => {
            sharedos_report::wait::until(&format!("{path} before {program}"), bound, || {
                Path::new(path).exists().then_some(())
            })
        }
        After::WindowManager => {
            let mut x = None;
            sharedos_report::wait::until(
                &format!("a window manager before {program}"),
                bound,
                || {
                    if x.is_none() {
                        x = crate::x11::XConn::connect(Path::new(x_socket)).ok();
                    }
                    let name = x.as_ref()?.window_manager_name();
                    match name {
                        Ok(Some(n)) if !n.is_empty() => Some(()),
                        Ok(_) => None,
                        // A broken connection is made again at the next look.
                        Err(_) => {
                            x = None;
                            None
                        }
                    }
                },
            )
        }
    }
}

/// `tree-init`: PID 1 of the tree, already inside its own root. Starts the workload, then
/// reaps, for ever; what it does goes to `log`, a line at a time (PID 1's stdout is its log).
pub fn init_main(spec: &TreeSpec, log: &mut dyn FnMut(&str)) -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(
        SigHandler::Handler(exit_on_term),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only calls _exit.
    unsafe { sigaction(Signal::SIGTERM, &act) }.context("SIGTERM handler")?;

    let w = workload(spec);
    for f in &w.files {
        let p = Path::new(f.path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
        }
        std::fs::write(p, &f.text).with_context(|| format!("writing {}", f.path))?;
    }
    log(&format!("{} pid {}", w.x_server.name, start(&w.x_server)?));
    let socket = format!("/tmp/.X11-unix/X{}", spec.display);
    // Bounded so a broken X server cannot keep PID 1 from starting the rest; the outside
    // observer reports what did not come up.
    let up = sharedos_report::wait::until("the X socket", Duration::from_secs(300), || {
        Path::new(&socket).exists().then_some(())
    });
    if let Err(e) = up {
        log(&e.to_string());
    }
    for p in &w.clients {
        for after in &p.after {
            if let Err(e) = wait_for(*after, &socket, p.name) {
                log(&e.to_string());
            }
        }
        log(&format!("{} pid {}", p.name, start(p)?));
    }
    loop {
        match nix::sys::wait::wait() {
            Ok(status) => log(&format!("reaped {status:?}")),
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => {
                nix::unistd::pause();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> TreeSpec {
        TreeSpec {
            marker: "spike-0123456789ab".into(),
            display: 170,
            root: PathBuf::from("/w/root"),
            cgroup: None,
            userns: false,
            workload: Kind::Xterm,
            exe: PathBuf::from("/usr/local/bin/sharedos-gate"),
        }
    }

    #[test]
    fn each_workload_runs_its_programs_and_the_default_is_unchanged() {
        let names = |w: Kind| -> Vec<&'static str> {
            let s = TreeSpec {
                workload: w,
                ..spec()
            };
            workload(&s).programs().map(|p| p.name).collect()
        };
        assert_eq!(names(Kind::Xterm), ["xvfb", "stateapp", "xterm"]);
        assert_eq!(
            names(Kind::Desktop),
            ["xvfb", "stateapp", "dbus", "openbox", "mousepad"]
        );
        assert_eq!(names(Kind::Browser), ["xvfb", "stateapp", "firefox"]);
        // The editor maps its window only once the manager is up to take its map request.
        let desktop = workload(&TreeSpec {
            workload: Kind::Desktop,
            ..spec()
        });
        let editor = desktop
            .clients
            .iter()
            .find(|p| p.name == "mousepad")
            .unwrap();
        assert_eq!(
            editor.after,
            [After::Path(BUS_SOCKET), After::WindowManager]
        );
        assert!(!init_argv(&spec()).contains(&"--workload".to_string()));
        let desktop = TreeSpec {
            workload: Kind::Desktop,
            ..spec()
        };
        assert!(init_argv(&desktop)
            .join(" ")
            .ends_with("--workload desktop"));
        assert!(tree_env(&desktop)
            .iter()
            .any(|(k, v)| k == "DBUS_SESSION_BUS_ADDRESS" && v == "unix:path=/tmp/sharedos-bus"));
        assert!(!tree_env(&spec()).iter().any(|(k, _)| k.starts_with("DBUS")));
        // The sandbox is off only in the variant named so.
        let env = |w: Kind| -> Vec<(String, String)> {
            let s = TreeSpec {
                workload: w,
                ..spec()
            };
            workload(&s)
                .clients
                .iter()
                .flat_map(|p| p.env.clone())
                .collect()
        };
        assert!(!env(Kind::Browser)
            .iter()
            .any(|(k, _)| k.contains("SANDBOX")));
        assert_eq!(
            env(Kind::BrowserNosandbox)
                .iter()
                .filter(|(k, _)| k.contains("SANDBOX"))
                .count(),
            BROWSER_NO_SANDBOX_ENV.len()
        );
        assert!(browser_prefs(false).contains("security.sandbox.content.level"));
        assert!(!browser_prefs(true).contains("sandbox"));
        assert!(page_html().contains("document.title = \"sharedos-page \" + token"));
    }

    #[test]
    fn xvfb_line_matches_the_spec() {
        assert_eq!(
            xvfb_argv(170).join(" "),
            "Xvfb :170 -screen 0 640x480x24 -nolisten tcp -noreset"
        );
    }

    #[test]
    fn xterm_carries_title_and_marker() {
        let a = xterm_argv("spike-x");
        assert_eq!(a[2..4], ["-T".to_string(), XTERM_TITLE.to_string()]);
        assert!(a.last().unwrap().contains("echo spike-x"));
    }

    /// The binary itself only where the tree's root shows it and anyone may run it; else the copy.
    #[test]
    fn the_tree_runs_the_binary_in_place_only_when_its_root_shows_it() {
        use std::os::unix::fs::PermissionsExt;
        let sh = std::fs::canonicalize("/bin/sh").unwrap();
        assert_eq!(exe_in_tree(&sh), sh, "a program on the root filesystem");
        assert_eq!(exe_in_tree(Path::new("bin/sh")), Path::new(TREE_EXE));
        assert_eq!(
            exe_in_tree(Path::new("/nonexistent/sharedos-gate")),
            Path::new(TREE_EXE)
        );
        // /dev is mounted over the root filesystem: the tree's bind of / does not show it.
        let below = Path::new("/dev/shm").join(format!("sharedos-exe-{}", std::process::id()));
        std::fs::write(&below, b"x").unwrap();
        std::fs::set_permissions(&below, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(exe_in_tree(&below), Path::new(TREE_EXE));
        std::fs::remove_file(&below).unwrap();
        // Root inside a user namespace is anyone: a binary only its owner may run is copied.
        let dir = std::env::temp_dir();
        let private = std::fs::canonicalize(&dir)
            .unwrap()
            .join(format!("sharedos-exe-{}", std::process::id()));
        std::fs::write(&private, b"x").unwrap();
        std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(exe_in_tree(&private), Path::new(TREE_EXE));
        std::fs::remove_file(&private).unwrap();
    }

    #[test]
    fn spawn_and_unshare_lines() {
        let s = spec();
        let exe = Path::new("/usr/local/bin/sharedos-gate");
        assert_eq!(
            spawn_argv(exe, &s).join(" "),
            "/usr/local/bin/sharedos-gate tree-spawn --marker spike-0123456789ab --display :170 --exe /usr/local/bin/sharedos-gate --root /w/root"
        );
        let u = unshare_equivalent_argv(exe, &s).join(" ");
        assert!(u.starts_with(
            "unshare --pid --fork --mount-proc --mount --net --ipc --uts --propagation private -- "
        ));
        assert!(init_argv(&s)
            .join(" ")
            .contains("tree-init --marker spike-0123456789ab"));
    }

    #[test]
    fn every_tree_process_gets_the_marker() {
        let env = tree_env(&spec());
        assert!(env
            .iter()
            .any(|(k, v)| k == MARKER_ENV && v == "spike-0123456789ab"));
        assert!(stateapp_argv(Path::new("/g"), "m1").contains(&"m1".to_string()));
    }

    #[test]
    fn five_namespaces() {
        let f = namespaces();
        for n in [
            CloneFlags::CLONE_NEWPID,
            CloneFlags::CLONE_NEWNS,
            CloneFlags::CLONE_NEWNET,
            CloneFlags::CLONE_NEWIPC,
            CloneFlags::CLONE_NEWUTS,
        ] {
            assert!(f.contains(n));
        }
        assert!(!f.contains(CloneFlags::CLONE_NEWUSER));
    }
}
