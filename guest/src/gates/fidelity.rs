//! The fidelity options (`--cgroup`, `--cow-root`, `--userns`): how the tree and each restored
//! copy get them, and the checks that show a restored copy has them. A check reads what the
//! kernel says about the copy's own processes, never what the rig meant to set up.

use super::step::{Kind, Step};
use super::{Config, Ctx, GateBuilder};
use crate::probe;
use anyhow::{bail, Context, Result};
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::model::app::AppState;
use sharedos_report::report::{CgroupLimits, Check, Evidence, CPU_PERIOD_US};
use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// Where the guest's PID 1 mounts cgroup2.
pub const CGROUP_FS: &str = "/sys/fs/cgroup";

pub use sharedos_report::report::parse_cgroup_limits;

/// The run's own group, relative to the cgroup2 root.
pub fn run_group(marker: &str) -> String {
    format!("/sharedos-{marker}")
}

/// The group of one tree of the run: `tree` for the original, `copy-LABEL` for a restore.
pub fn tree_group(marker: &str, label: &str) -> String {
    format!("{}/{label}", run_group(marker))
}

pub fn group_dir(group: &str) -> PathBuf {
    Path::new(CGROUP_FS).join(group.trim_start_matches('/'))
}

/// The controller files of a group with these limits and their contents.
pub fn limit_files(l: &CgroupLimits) -> [(&'static str, String); 2] {
    [
        ("cpu.max", format!("{} {CPU_PERIOD_US}", l.cpu_quota_us)),
        ("memory.max", l.memory_max_bytes.to_string()),
    ]
}

fn write(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {text:?} to {}", path.display()))
}

/// Enables cpu and memory for the children of the cgroup2 root and of the run's group, and
/// makes the run's group. The root may hold processes and enable controllers; the run's group
/// must hold none (cgroup v2 has no processes in inner groups with controllers).
pub fn prepare_run_group(marker: &str) -> Result<()> {
    let root = Path::new(CGROUP_FS);
    if !root.join("cgroup.controllers").is_file() {
        bail!(
            "no cgroup2 at {CGROUP_FS}: --cgroup needs it mounted there (mount -t cgroup2 cgroup2 {CGROUP_FS})"
        );
    }
    write(&root.join("cgroup.subtree_control"), "+cpu +memory")?;
    let dir = group_dir(&run_group(marker));
    std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
    write(&dir.join("cgroup.subtree_control"), "+cpu +memory")
}

/// Makes the group of one tree with the limits.
pub fn make_tree_group(marker: &str, label: &str, l: &CgroupLimits) -> Result<PathBuf> {
    let dir = group_dir(&tree_group(marker, label));
    std::fs::create_dir(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
    for (file, text) in limit_files(l) {
        write(&dir.join(file), &text)?;
    }
    Ok(dir)
}

/// Removes the run's groups (each must be empty); what could not be removed, in words.
pub fn remove_run_groups(marker: &str) -> Vec<String> {
    let run = group_dir(&run_group(marker));
    if !run.exists() {
        return Vec::new();
    }
    let mut failed = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&run) {
        for e in rd.flatten().filter(|e| e.path().is_dir()) {
            if let Err(err) = std::fs::remove_dir(e.path()) {
                failed.push(format!("rmdir {}: {err}", e.path().display()));
            }
        }
    }
    if let Err(err) = std::fs::remove_dir(&run) {
        failed.push(format!("rmdir {}: {err}", run.display()));
    }
    failed
}

/// Reads at most 64 KiB of a kernel file; the guest's /proc and /sys are still bounded.
pub fn read_small(path: &Path) -> Result<String> {
    let f = std::fs::File::open(path).with_context(|| format!("reading {}", path.display()))?;
    let mut s = String::new();
    f.take(64 * 1024)
        .read_to_string(&mut s)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(s)
}

/// The cgroup v2 path of a process: the `0::PATH` line of /proc/PID/cgroup.
pub fn cgroup_of(pid: i32) -> Result<String> {
    let text = read_small(Path::new(&format!("/proc/{pid}/cgroup")))?;
    parse_proc_cgroup(&text).with_context(|| format!("/proc/{pid}/cgroup has no 0:: line"))
}

pub fn parse_proc_cgroup(text: &str) -> Option<String> {
    text.lines()
        .find_map(|l| l.strip_prefix("0::"))
        .map(|p| p.trim().to_string())
}

/// What a group's controller files said.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct GroupFiles {
    pub cpu_max: String,
    pub memory_max: String,
    pub memory_current: Option<u64>,
    pub oom_kills: Option<u64>,
}

pub fn read_group(group: &str) -> GroupFiles {
    let dir = group_dir(group);
    let read = |f: &str| read_small(&dir.join(f)).unwrap_or_else(|e| format!("unreadable: {e:#}"));
    GroupFiles {
        cpu_max: read("cpu.max").trim().to_string(),
        memory_max: read("memory.max").trim().to_string(),
        memory_current: read("memory.current").trim().parse().ok(),
        oom_kills: read("memory.events").lines().find_map(|l| {
            l.strip_prefix("oom_kill ")
                .and_then(|n| n.trim().parse().ok())
        }),
    }
}

/// Every process of a copy sits in `want` (the copy's own group), whose limits are the
/// requested ones, and the app's memory stayed under the limit with no OOM kill.
pub fn cgroup_check(
    name: &str,
    want: &str,
    l: &CgroupLimits,
    procs: &[(i32, String)],
    files: &GroupFiles,
) -> Check {
    let [(_, cpu), (_, mem)] = limit_files(l);
    // memory.max reads back rounded down to whole pages.
    let mem_ok = files
        .memory_max
        .parse::<u64>()
        .is_ok_and(|m| m <= l.memory_max_bytes && l.memory_max_bytes - m < 4096 * 16);
    let in_group = !procs.is_empty() && procs.iter().all(|(_, g)| g == want);
    let under = matches!((files.memory_current, files.memory_max.parse::<u64>()), (Some(c), Ok(m)) if c <= m);
    let passed = in_group && files.cpu_max == cpu && mem_ok && under && files.oom_kills == Some(0);
    check(
        name,
        passed,
        json!({"group": want, "processes": procs, "files": files}),
        &format!(
            "every process of the copy in {want}, cpu.max {cpu}, memory.max {mem}, memory.current <= memory.max, oom_kill 0"
        ),
    )
}

/// The live (not zombie) processes of a tree: every member of its PID 1's pid namespace.
fn live_members(ctx: &Ctx, pid: i32) -> Vec<i32> {
    let ns: BTreeSet<String> = ctx
        .tree_record(pid)
        .and_then(|r| r.pidns.clone())
        .into_iter()
        .collect();
    probe::members(&ns)
        .into_iter()
        .filter(|m| m.state != "Z")
        .map(|m| m.pid)
        .collect()
}

/// The processes of a tree with their cgroup paths.
pub fn tree_cgroups(ctx: &Ctx, pid: i32) -> Vec<(i32, String)> {
    live_members(ctx, pid)
        .into_iter()
        .map(|p| {
            (
                p,
                cgroup_of(p).unwrap_or_else(|e| format!("unreadable: {e:#}")),
            )
        })
        .collect()
}

/// The option checks of one running tree (a copy, or the original at launch), named with
/// `prefix`; returns the cgroup path the tree's PID 1 is in, for comparisons between copies.
pub fn check_tree(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    label: &str,
    prefix: &str,
) -> Option<String> {
    if ctx.cfg.options.userns {
        let mine = read_link(&format!("/proc/{}/ns/user", std::process::id()));
        g.check(userns_check(
            &format!("{prefix}userns_mapped"),
            &mine,
            &tree_userns(ctx, pid),
        ));
    }
    let l = ctx.cfg.options.cgroup?;
    let want = tree_group(&ctx.cfg.marker, label);
    let procs = tree_cgroups(ctx, pid);
    g.check(cgroup_check(
        &format!("{prefix}cgroup_limits"),
        &want,
        &l,
        &procs,
        &read_group(&want),
    ));
    cgroup_of(pid).ok()
}

fn read_link(path: &str) -> String {
    std::fs::read_link(path)
        .map(|l| l.display().to_string())
        .unwrap_or_else(|e| format!("unreadable: {e}"))
}

/// One process of a tree as its user namespace sees it.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct UsernsView {
    pub pid: i32,
    pub userns: String,
    pub uid_map: String,
    pub gid_map: String,
}

/// Every live process of a tree with its user namespace and id maps.
pub fn tree_userns(ctx: &Ctx, pid: i32) -> Vec<UsernsView> {
    live_members(ctx, pid)
        .into_iter()
        .map(|p| {
            let read = |f: &str| {
                read_small(Path::new(&format!("/proc/{p}/{f}")))
                    .unwrap_or_else(|e| format!("unreadable: {e:#}"))
            };
            UsernsView {
                pid: p,
                userns: read_link(&format!("/proc/{p}/ns/user")),
                uid_map: read("uid_map"),
                gid_map: read("gid_map"),
            }
        })
        .collect()
}

/// The lines of a uid_map or gid_map as (inside, outside, count).
pub fn parse_id_map(text: &str) -> Option<Vec<(u64, u64, u64)>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let n: Vec<u64> = l
                .split_whitespace()
                .map(|w| w.parse().ok())
                .collect::<Option<_>>()?;
            match n[..] {
                [a, b, c] => Some((a, b, c)),
                _ => None,
            }
        })
        .collect()
}

/// Every process of a tree sits in one user namespace, not the guest's, whose maps are exactly
/// root inside to the unprivileged range outside.
pub fn userns_check(name: &str, guest_userns: &str, procs: &[UsernsView]) -> Check {
    use crate::tree::{USERNS_COUNT, USERNS_OUTSIDE};
    let want = vec![(0, u64::from(USERNS_OUTSIDE), u64::from(USERNS_COUNT))];
    let one_ns = procs.first().is_some_and(|p| {
        !p.userns.starts_with("unreadable")
            && p.userns != guest_userns
            && procs.iter().all(|q| q.userns == p.userns)
    });
    let mapped = procs.iter().all(|p| {
        parse_id_map(&p.uid_map).as_ref() == Some(&want)
            && parse_id_map(&p.gid_map).as_ref() == Some(&want)
    });
    check(
        name,
        one_ns && mapped,
        json!({"guest_userns": guest_userns, "processes": procs}),
        &format!(
            "every process in one user namespace other than the guest's, uid_map and gid_map `{}`",
            crate::tree::userns_map_line()
        ),
    )
}

/// Two copies run in user namespaces of their own, each other's included.
pub fn own_userns_check(a: i32, b: i32) -> Check {
    let (na, nb) = (
        read_link(&format!("/proc/{a}/ns/user")),
        read_link(&format!("/proc/{b}/ns/user")),
    );
    own_userns(&na, &nb)
}

pub fn own_userns(a: &str, b: &str) -> Check {
    check(
        "copies_own_userns",
        a.starts_with("user:[") && b.starts_with("user:[") && a != b,
        json!({"a": a, "b": b}),
        "copies A and B in different user namespaces",
    )
}

/// Two copies sit in different groups.
pub fn own_cgroups_check(a: Option<&str>, b: Option<&str>) -> Check {
    check(
        "copies_own_cgroups",
        matches!((a, b), (Some(x), Some(y)) if x != y),
        json!({"a": a, "b": b}),
        "copies A and B in different cgroups",
    )
}

/// The overlay that gives one tree (`tree`, `copy-a`, ...) a writable root of its own: the
/// read-only bind of / below, the tree's own upper layer above, on the run's tmpfs.
pub fn overlay_options(lower: &Path, upper: &Path, work: &Path) -> String {
    format!(
        "lowerdir={},upperdir={},workdir={}",
        lower.display(),
        upper.display(),
        work.display()
    )
}

/// The util-linux command that makes the same overlay, for readers of the plan.
pub fn overlay_mount_argv(lower: &Path, upper: &Path, work: &Path, target: &Path) -> Vec<String> {
    vec![
        "mount".into(),
        "-t".into(),
        "overlay".into(),
        "overlay".into(),
        "-o".into(),
        overlay_options(lower, upper, work),
        target.display().to_string(),
    ]
}

/// A copy's upper layer starts as the original's was at the dump (the original is frozen and
/// gone by then): what the tree wrote to its root before the dump is in every copy, and what a
/// copy writes stays in its own layer. `-a` keeps overlayfs's whiteouts and xattrs.
pub fn copy_layer_argv(from_upper: &Path, to_upper: &Path) -> Vec<String> {
    vec![
        "cp".into(),
        "-a".into(),
        "--".into(),
        format!("{}/.", from_upper.display()),
        to_upper.display().to_string(),
    ]
}

/// Makes the writable root of tree `label` under the run's tmpfs, its upper layer a copy of
/// `carry`'s when given, and mounts it at `cfg.tree_root(label)`.
pub fn make_cow_root(
    ctx: &Ctx,
    label: &str,
    carry: Option<&str>,
) -> (Result<PathBuf>, Vec<Evidence>) {
    let cfg = &ctx.cfg;
    let (upper, work, target) = (
        cfg.cow_upper(label),
        cfg.cow_work(label),
        cfg.tree_root(label),
    );
    let mut evidence = Vec::new();
    let made = (|| -> Result<PathBuf> {
        for d in [&upper, &work, &target] {
            std::fs::create_dir_all(d).with_context(|| format!("mkdir {}", d.display()))?;
        }
        if let Some(from) = carry {
            let out = ctx.run(&carry_layer_step(cfg, label, from));
            let ok = out.success();
            let summary = out.summary();
            evidence.push(out.evidence);
            if !ok {
                bail!("copying the dump-time upper layer: {summary}");
            }
        }
        nix::mount::mount(
            Some("overlay"),
            &target,
            Some("overlay"),
            nix::mount::MsFlags::empty(),
            Some(overlay_options(&cfg.root_bind(), &upper, &work).as_str()),
        )
        .with_context(|| {
            format!(
                "mounting the overlay root of {label} on {}",
                target.display()
            )
        })?;
        Ok(target)
    })();
    (made, evidence)
}

/// The run's tmpfs for the upper layers, in diagnose's private mount namespace: it goes with
/// the run however the run ends.
pub fn mount_cow_tmpfs(cfg: &Config) -> Result<()> {
    let dir = cfg.cow_dir();
    std::fs::create_dir_all(&dir).with_context(|| format!("mkdir {}", dir.display()))?;
    nix::mount::mount(
        Some("tmpfs"),
        &dir,
        Some("tmpfs"),
        nix::mount::MsFlags::MS_NOSUID,
        Some(COW_TMPFS_DATA),
    )
    .with_context(|| format!("mounting a tmpfs for the upper layers on {}", dir.display()))
}

fn file_value(reply: &Result<AppState, String>) -> serde_json::Value {
    match reply {
        Ok(s) => json!({"token": s.token, "file": s.file}),
        Err(e) => json!({"error": e}),
    }
}

/// What the app said of a file: its content and no error, or why not.
fn file_content(reply: &Result<AppState, String>) -> Option<Option<&str>> {
    let f = reply.as_ref().ok()?.file.as_ref()?;
    f.error.is_none().then_some(f.content.as_deref())
}

/// A copy wrote a file to its root: the app reads back its own token, the write sits in the
/// copy's own upper layer and not on the machine's /, and the dump-time file is there as the
/// original wrote it.
pub fn file_written_check(
    name: &str,
    wrote: &Result<AppState, String>,
    in_own_layer: bool,
    on_machine_root: bool,
    dump_time: &Result<AppState, String>,
    dump_token: &str,
) -> Check {
    let own = wrote.as_ref().ok().map(|s| s.token.as_str());
    let written = own.is_some() && file_content(wrote) == Some(own);
    let carried = file_content(dump_time) == Some(Some(dump_token));
    check(
        name,
        written && in_own_layer && !on_machine_root && carried,
        json!({"write": file_value(wrote), "in_own_upper_layer": in_own_layer,
               "on_machine_root": on_machine_root, "dump_time_file": file_value(dump_time)}),
        &format!("the copy reads back the file it wrote, the write is in its own upper layer only, and its dump-time file holds {dump_token}"),
    )
}

/// A copy does not see a file another copy (or its own earlier life) wrote, and still has the
/// dump-time file.
pub fn file_absent_check(
    name: &str,
    read: &Result<AppState, String>,
    dump_time: &Result<AppState, String>,
    dump_token: &str,
) -> Check {
    let absent = file_content(read) == Some(None);
    let carried = file_content(dump_time) == Some(Some(dump_token));
    check(
        name,
        absent && carried,
        json!({"read": file_value(read), "dump_time_file": file_value(dump_time)}),
        &format!("the file is absent and the dump-time file holds {dump_token}"),
    )
}

/// The name of the file the original writes before the dump.
pub const DUMP_TIME_FILE: &str = "dump-time";

/// Asks a tree's app about one of its root files.
pub fn ask_file(ctx: &Ctx, pid: i32, verb: &str, name: &str) -> Result<AppState, String> {
    ctx.app(pid, &format!("file-{verb} {name}"))
        .map_err(|e| format!("{e:#}"))
}

/// `file-write NAME` in a tree, checked: the write landed in `label`'s own upper layer only.
pub fn check_write(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    label: &str,
    name: &str,
    check_name: &str,
    dump_token: &str,
) {
    let wrote = ask_file(ctx, pid, "write", name);
    let inner = crate::stateapp::root_file_path(name).unwrap_or_default();
    let rel = inner.trim_start_matches('/');
    let in_layer = ctx.cfg.cow_upper(label).join(rel).is_file();
    let on_root = Path::new(&inner).exists();
    let dump_time = if name == DUMP_TIME_FILE {
        wrote.clone()
    } else {
        ask_file(ctx, pid, "read", DUMP_TIME_FILE)
    };
    g.check(file_written_check(
        check_name, &wrote, in_layer, on_root, &dump_time, dump_token,
    ));
}

/// `file-read NAME` in a tree, checked absent.
pub fn check_absent(
    ctx: &Ctx,
    g: &mut GateBuilder,
    pid: i32,
    name: &str,
    check_name: &str,
    dump_token: &str,
) {
    let read = ask_file(ctx, pid, "read", name);
    let dump_time = ask_file(ctx, pid, "read", DUMP_TIME_FILE);
    g.check(file_absent_check(check_name, &read, &dump_time, dump_token));
}

/// The options of the upper layers' tmpfs besides nosuid.
const COW_TMPFS_DATA: &str = "mode=0755";

/// How a plan line names tree `label`: `the tree`, or `copy b` for `copy-b`.
fn tree_name(label: &str) -> String {
    match label.strip_prefix("copy-") {
        Some(copy) => format!("copy {copy}"),
        None => format!("the {label}"),
    }
}

/// With `--cow-root`: the tmpfs every tree's upper layer lives on (`mount_cow_tmpfs`).
pub fn cow_tmpfs_step(cfg: &Config) -> Step {
    Step::described(
        Kind::CowTmpfs,
        "--cow-root: a tmpfs for every tree's upper layer at the work directory's cow/ (mount(2))",
        vec![
            "mount".into(),
            "-t".into(),
            "tmpfs".into(),
            "-o".into(),
            format!("nosuid,{COW_TMPFS_DATA}"),
            "tmpfs".into(),
            cfg.cow_dir().display().to_string(),
        ],
    )
}

/// With `--cow-root`: the writable root of tree `label` (`make_cow_root`).
pub fn overlay_step(cfg: &Config, label: &str) -> Step {
    let what = if label == "tree" {
        "--cow-root: the tree's writable root, an overlay over the read-only bind with its upper layer on a tmpfs at the work directory's cow/ (mount(2))".to_string()
    } else {
        format!(
            "--cow-root: {}'s writable root (mount(2))",
            tree_name(label)
        )
    };
    Step::described(
        Kind::CowOverlay,
        &what,
        overlay_mount_argv(
            &cfg.root_bind(),
            &cfg.cow_upper(label),
            &cfg.cow_work(label),
            &cfg.tree_root(label),
        ),
    )
}

/// With `--cow-root`: tree `label`'s upper layer starts as tree `from`'s was at the dump.
pub fn carry_layer_step(cfg: &Config, label: &str, from: &str) -> Step {
    Step::new(
        Kind::CarryLayer,
        &format!("carry the dump-time upper layer into {label}'s"),
        &format!(
            "--cow-root: {}'s upper layer starts as the original's at the dump",
            tree_name(label)
        ),
        copy_layer_argv(&cfg.cow_upper(from), &cfg.cow_upper(label)),
    )
}

/// With `--cgroup`: the group of tree `label` with the limits (`prepare_run_group` for the
/// original, then `make_tree_group`).
pub fn group_step(cfg: &Config, label: &str, l: &CgroupLimits) -> Step {
    let (what, first) = if label == "tree" {
        (
            "--cgroup: a group per tree under the run's group (written to cgroup2 files), with these limits; the tree joins its group before PID 1 is forked".to_string(),
            "echo +cpu +memory > /sys/fs/cgroup/cgroup.subtree_control and <group>/..".to_string(),
        )
    } else {
        (
            format!(
                "--cgroup: {}'s own group under the run's group (cgroup2 files), with these limits; criu restore puts the copy in it",
                tree_name(label)
            ),
            format!("mkdir {}", group_dir(&tree_group(&cfg.marker, label)).display()),
        )
    };
    let mut argv = vec![first];
    argv.extend(limit_files(l).iter().map(|(f, t)| format!("{f}={t}")));
    Step::described(Kind::Cgroup, &what, argv)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_cpu_and_memory() {
        let l = parse_cgroup_limits("cpu=1,memory=512M").unwrap();
        assert_eq!(l.cpu_quota_us, 100_000);
        assert_eq!(l.memory_max_bytes, 512 << 20);
        assert_eq!(
            limit_files(&l),
            [
                ("cpu.max", "100000 100000".to_string()),
                ("memory.max", "536870912".to_string())
            ]
        );
        let l = parse_cgroup_limits("memory=1g, cpu=0.5").unwrap();
        assert_eq!(l.cpu_quota_us, 50_000);
        assert_eq!(l.memory_max_bytes, 1 << 30);
    }

    #[test]
    fn bad_limits_name_the_problem_and_the_form() {
        for (bad, says) in [
            ("cpu=1", "gives no memory=: it needs both"),
            ("memory=512M", "gives no cpu=: it needs both"),
            ("cpu=x,memory=1G", "not a number"),
            ("cpu=0,memory=1G", "out of range"),
            ("cpu=1,memory=12Q", "unknown suffix"),
            ("cpu=1,memory=1M", "below 16M"),
            ("cpu=1,memory=1.5G", "not a whole size"),
            ("cpu=1,cpu=2,memory=1G", "twice"),
            ("cpu=1,io=5,memory=1G", "not `io`"),
            ("cpu", "not KEY=VALUE"),
        ] {
            let e = parse_cgroup_limits(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
            assert!(e.contains("cpu=N,memory=SIZE"), "{bad}: {e}");
        }
    }

    #[test]
    fn groups_are_per_run_and_per_tree() {
        assert_eq!(tree_group("spike-1", "copy-a"), "/sharedos-spike-1/copy-a");
        assert_eq!(
            group_dir("/sharedos-spike-1/tree"),
            PathBuf::from("/sys/fs/cgroup/sharedos-spike-1/tree")
        );
        assert_eq!(
            parse_proc_cgroup("0::/sharedos-m/copy-a\n").as_deref(),
            Some("/sharedos-m/copy-a")
        );
        assert_eq!(parse_proc_cgroup("1:name=x:/\n"), None);
    }

    #[test]
    fn the_cgroup_check_fails_on_each_wrong_fact() {
        let l = parse_cgroup_limits("cpu=1,memory=512M").unwrap();
        let want = "/sharedos-m/copy-a";
        let procs = vec![(10, want.to_string()), (11, want.to_string())];
        let files = GroupFiles {
            cpu_max: "100000 100000".into(),
            memory_max: "536870912".into(),
            memory_current: Some(40 << 20),
            oom_kills: Some(0),
        };
        assert!(cgroup_check("c", want, &l, &procs, &files).passed);
        let mut stray = procs.clone();
        stray[1].1 = "/sharedos-m/tree".into();
        assert!(!cgroup_check("c", want, &l, &stray, &files).passed);
        assert!(!cgroup_check("c", want, &l, &[], &files).passed);
        for f in [
            GroupFiles {
                cpu_max: "max 100000".into(),
                ..files.clone()
            },
            GroupFiles {
                memory_max: "max".into(),
                ..files.clone()
            },
            GroupFiles {
                memory_current: None,
                ..files.clone()
            },
            GroupFiles {
                oom_kills: Some(1),
                ..files.clone()
            },
            GroupFiles {
                memory_current: Some(600 << 20),
                ..files.clone()
            },
        ] {
            assert!(!cgroup_check("c", want, &l, &procs, &f).passed, "{f:?}");
        }
        assert!(own_cgroups_check(Some("/x/a"), Some("/x/b")).passed);
        assert!(!own_cgroups_check(Some("/x/a"), Some("/x/a")).passed);
        assert!(!own_cgroups_check(None, Some("/x/a")).passed);
        assert!(own_userns("user:[1]", "user:[2]").passed);
        assert!(!own_userns("user:[1]", "user:[1]").passed);
        assert!(!own_userns("unreadable: gone", "user:[2]").passed);
    }

    fn reply(token: &str, content: Option<&str>, error: Option<&str>) -> Result<AppState, String> {
        Ok(AppState {
            token: token.into(),
            counter: 1,
            pid: 3,
            file: Some(sharedos_report::model::app::RootFile {
                path: "/var/tmp/sharedos-file-x".into(),
                content: content.map(str::to_string),
                error: error.map(str::to_string),
            }),
        })
    }

    #[test]
    fn the_userns_check_fails_on_each_wrong_fact() {
        let v = |pid, ns: &str, uid: &str, gid: &str| UsernsView {
            pid,
            userns: ns.into(),
            uid_map: uid.into(),
            gid_map: gid.into(),
        };
        let good = "         0     100000      65536\n";
        let ok = vec![v(1, "user:[9]", good, good), v(2, "user:[9]", good, good)];
        assert!(userns_check("u", "user:[1]", &ok).passed);
        assert!(!userns_check("u", "user:[1]", &[]).passed);
        assert!(
            !userns_check("u", "user:[9]", &ok).passed,
            "the guest's own namespace"
        );
        let host = "         0          0 4294967295\n";
        for bad in [
            vec![ok[0].clone(), v(2, "user:[1]", host, host)],
            vec![ok[0].clone(), v(2, "user:[9]", host, good)],
            vec![ok[0].clone(), v(2, "user:[9]", good, "0 100000 10")],
            vec![
                ok[0].clone(),
                v(2, "user:[9]", &format!("{good}1 1 1\n"), good),
            ],
            vec![v(1, "unreadable: gone", good, good)],
        ] {
            assert!(!userns_check("u", "user:[1]", &bad).passed, "{bad:?}");
        }
        assert_eq!(
            parse_id_map("0 1 2\n3 4 5"),
            Some(vec![(0, 1, 2), (3, 4, 5)])
        );
        assert_eq!(parse_id_map("0 1"), None);
    }

    #[test]
    fn the_file_checks_fail_on_each_wrong_fact() {
        let dump = reply("d", Some("d"), None);
        let wrote = reply("t", Some("t"), None);
        assert!(file_written_check("w", &wrote, true, false, &dump, "d").passed);
        for (w, layer, root, dt) in [
            (
                reply("t", Some("t"), Some("EROFS")),
                true,
                false,
                dump.clone(),
            ),
            (reply("t", None, None), true, false, dump.clone()),
            (reply("t", Some("other"), None), true, false, dump.clone()),
            (Err("no answer".to_string()), true, false, dump.clone()),
            (wrote.clone(), false, false, dump.clone()),
            (wrote.clone(), true, true, dump.clone()),
            (wrote.clone(), true, false, reply("d", None, None)),
        ] {
            assert!(
                !file_written_check("w", &w, layer, root, &dt, "d").passed,
                "{w:?} {layer} {root} {dt:?}"
            );
        }
        assert!(file_absent_check("a", &reply("d", None, None), &dump, "d").passed);
        assert!(!file_absent_check("a", &reply("d", Some("t"), None), &dump, "d").passed);
        assert!(!file_absent_check("a", &reply("d", None, Some("EIO")), &dump, "d").passed);
        assert!(
            !file_absent_check("a", &reply("d", None, None), &reply("d", None, None), "d").passed
        );
        let no_file = Ok(AppState {
            token: "d".into(),
            counter: 1,
            pid: 3,
            file: None,
        });
        assert!(!file_absent_check("a", &no_file, &dump, "d").passed);
    }
}
