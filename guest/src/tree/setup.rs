//! The tree's setup: the spawn command (its namespaces, or a user namespace of its own), the
//! pid line it prints, and PID 1's mount table, pivot_root and re-exec as `tree-init`.

use super::argv::init_argv;
use super::{namespaces, tree_env, userns_map_line, TreeSpec, DEV_NODES, INIT_LOG, TREE_EXE};
use crate::exec;
use anyhow::{bail, Context, Result};
use nix::mount::{mount, umount2, MntFlags, MsFlags};
use nix::sched::CloneFlags;
use nix::sys::stat::{makedev, mknod, Mode, SFlag};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

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

/// The directory of the tree's /tmp that holds what its /dev, /dev/shm and /var/lib/xkb show.
const OWN_DIR: &str = ".sharedos-tree";

/// Binds `source` on `target`, then gives the bind exactly `flags` (a bind starts with its
/// source mount's).
pub fn bind_with_flags(source: &Path, target: &Path, flags: MsFlags) -> Result<()> {
    mount(
        Some(source),
        target,
        None::<&str>,
        MsFlags::MS_BIND,
        None::<&str>,
    )
    .with_context(|| format!("binding {} on {}", source.display(), target.display()))?;
    mount(
        None::<&str>,
        target,
        None::<&str>,
        MsFlags::MS_BIND | MsFlags::MS_REMOUNT | flags,
        None::<&str>,
    )
    .with_context(|| format!("setting the flags of the bind on {}", target.display()))
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

    // One tmpfs holds every file of the tree's own: its /tmp, with /dev, /dev/shm and the X
    // keyboard compiler's output bound from directories in it. CRIU archives each tmpfs with tar
    // and gzip at every dump and unpacks it at every restore, 0.2 s a mount under TCG (a dump
    // and three restores a run); a bind of a mount it has archived costs it nothing. Each bind
    // keeps flags of its own: device nodes work under /dev only.
    let tmp = root.join("tmp");
    mount_fs(
        "tmpfs",
        &tmp,
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        "mode=1777",
    )?;
    let own = tmp.join(OWN_DIR);
    for (dir, mode) in [("", 0o755), ("dev", 0o755), ("shm", 0o1777), ("xkb", 0o755)] {
        let p = own.join(dir);
        std::fs::create_dir_all(&p).with_context(|| format!("mkdir {}", p.display()))?;
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
            .with_context(|| format!("chmod {}", p.display()))?;
    }
    let dev = root.join("dev");
    bind_with_flags(&own.join("dev"), &dev, MsFlags::MS_NOSUID)?;
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
    bind_with_flags(
        &own.join("shm"),
        &dev.join("shm"),
        nodev | MsFlags::MS_NODEV,
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

    // The X keyboard compiler writes its output here.
    let xkb = root.join("var/lib/xkb");
    if xkb.is_dir() {
        bind_with_flags(&own.join("xkb"), &xkb, nodev | MsFlags::MS_NODEV)?;
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
