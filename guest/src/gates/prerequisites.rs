//! prerequisites: root, the tree's tools, a usable work directory and display, and a CRIU whose
//! `criu check` succeeds on this kernel. Each missing piece is named with its fix.

use super::step::{Kind, Step};
use super::{Config, Ctx, GateBuilder};
use crate::criu::{self, NetworkLock};
use serde_json::json;
use sharedos_report::compare::check;
use sharedos_report::report::{Gate, GateName};
use sharedos_report::which::{find_program, is_executable};
use std::path::{Path, PathBuf};

/// Checks the tree itself needs. When one fails, launch cannot run; when only the CRIU checks
/// fail, launch, the live-state probe and cleanup still run.
pub const TREE_CHECKS: [&str; 8] = [
    "root",
    "work_dir_writable",
    "report_dir_writable",
    "namespaces_supported",
    "xvfb_present",
    "xterm_present",
    "display_free",
    "workload_programs_present",
];

/// Tools the CRIU gates run besides criu, each as the alternatives any one of which will do,
/// with what needs it and the package that brings it.
pub const CRIU_GATE_TOOLS: [(&[&str], &str, &str); 2] = [
    (
        &["nsenter"],
        "restore_live_process lists a restored copy's firewall from inside its network namespace",
        "util-linux",
    ),
    (
        &["iptables-save", "nft"],
        "restore_live_process looks for a CRIU network lock left in a restored copy's firewall",
        "iptables or nftables",
    ),
];

/// The CRIU gates' tools that are missing, each named with what needs it and how to get it.
pub fn missing_tools(present: impl Fn(&str) -> bool) -> Vec<String> {
    CRIU_GATE_TOOLS
        .iter()
        .filter(|(alternatives, _, _)| !alternatives.iter().any(|t| present(t)))
        .map(|(alternatives, why, package)| {
            format!(
                "{} not found ({why}): install {package}",
                alternatives.join(" or ")
            )
        })
        .collect()
}

fn writable(dir: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| e.to_string())?;
    let probe = dir.join(format!(".write-test-{}", std::process::id()));
    std::fs::write(&probe, b"x").map_err(|e| e.to_string())?;
    std::fs::remove_file(&probe).map_err(|e| e.to_string())
}

/// The host's own X sockets and lock files: a display in use there would answer anyone who
/// looks at `:N` from outside the tree, so the run refuses to share its number.
pub fn display_users(display: u32) -> Vec<String> {
    [
        format!("/tmp/.X11-unix/X{display}"),
        format!("/tmp/.X{display}-lock"),
    ]
    .into_iter()
    .filter(|p| Path::new(p).exists())
    .collect()
}

pub fn package_version_argv(package: &str) -> Vec<String> {
    vec![
        "dpkg-query".into(),
        "-W".into(),
        "-f=${Version}".into(),
        package.into(),
    ]
}

fn first_line(s: &str) -> String {
    s.lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim()
        .to_string()
}

pub fn xvfb_version_step() -> Step {
    // Xvfb has no version option; its Debian package says it (launch later reads the running
    // server's release over the wire).
    Step::new(
        Kind::PackageVersion,
        "Xvfb version",
        "Xvfb version (its package's; launch reads the running server's over the wire)",
        package_version_argv("xvfb"),
    )
}

pub fn xterm_version_step(xterm: &Path) -> Step {
    Step::new(
        Kind::ProgramVersion,
        "xterm version",
        "xterm version",
        vec![xterm.display().to_string(), "-version".into()],
    )
}

pub fn criu_version_step(criu: &Path) -> Step {
    Step::new(
        Kind::CriuVersion,
        "criu version",
        "CRIU version",
        criu::version_argv(criu),
    )
}

pub fn criu_check_step(criu: &Path) -> Step {
    Step::new(
        Kind::CriuCheck,
        "criu check",
        "CRIU works on this kernel",
        criu::check_argv(criu),
    )
}

pub fn nft_lock_check_step(criu: &Path) -> Step {
    Step::new(
        Kind::CriuCheck,
        "criu check: nftables lock",
        "whether CRIU can lock the network with nftables (used for a dump that leaves the network namespace out)",
        criu::nft_lock_check_argv(criu),
    )
}

/// What this gate runs, in its order. The plan names xterm as PATH will find it.
pub fn plan(cfg: &Config) -> Vec<Step> {
    let criu = cfg.planned_criu();
    vec![
        xvfb_version_step(),
        xterm_version_step(Path::new("xterm")),
        criu_version_step(&criu),
        criu_check_step(&criu),
        nft_lock_check_step(&criu),
    ]
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Prerequisites);
    let root = check_root(&mut g);
    check_dirs(ctx, &mut g);
    check_namespaces(&mut g);
    // Commands keep their output in the scratch directory; without it none can run.
    let can_run = ctx.cfg.scratch().is_dir();
    check_x_tools(ctx, &mut g, can_run);
    check_workload_programs(ctx, &mut g);
    check_display(ctx, &mut g);
    check_criu_gate_tools(&mut g);
    ctx.criu = check_criu(ctx, &mut g, root, can_run);
    ctx.lock = NetworkLock::detect();
    g.data("criu_network_lock", json!(ctx.lock.as_str()));
    if let Some(criu) = ctx.criu.clone() {
        let out = ctx.run(&nft_lock_check_step(&criu));
        ctx.nft_lock = out.success();
        g.data("criu_nftables_lock", json!(ctx.nft_lock));
        g.evidence(out.evidence);
    }
    g.data("tree_checks", json!(TREE_CHECKS));
    g.finish("root; criu, Xvfb, xterm, nsenter and a firewall lister present; `criu check` succeeded; work and report directories writable; display free")
}

/// Whether we are root; namespaces, mounts and CRIU need it.
fn check_root(g: &mut GateBuilder) -> bool {
    let euid = nix::unistd::geteuid().as_raw();
    g.require(check("root", euid == 0, json!(euid), "euid 0"), || {
        format!(
            "not root (euid {euid}): namespaces and CRIU need root; run as root, e.g. `sudo sharedos-gate diagnose`"
        )
    })
}

/// The work and report directories can be written, and the directories the run writes into
/// exist.
fn check_dirs(ctx: &Ctx, g: &mut GateBuilder) {
    for (name, dir, flag) in [
        ("work_dir_writable", ctx.cfg.work.clone(), "--work DIR"),
        ("report_dir_writable", ctx.cfg.report_dir(), "--out FILE"),
    ] {
        let r = writable(&dir);
        let c = check(
            name,
            r.is_ok(),
            json!({"path": dir, "error": r.as_ref().err()}),
            "a directory this run can write",
        );
        g.require(c, || {
            format!(
                "{} is not writable ({}): pass {flag} on a writable filesystem",
                dir.display(),
                r.err().unwrap_or_default()
            )
        });
    }
    // Failures here are already reported by the two checks above.
    let _ = std::fs::create_dir_all(ctx.cfg.scratch());
    let _ = std::fs::create_dir_all(ctx.cfg.report_dir().join("criu"));
    let _ = std::fs::create_dir_all(ctx.cfg.report_dir().join("png"));
}

fn check_namespaces(g: &mut GateBuilder) {
    let ns_missing: Vec<&str> = ["pid", "mnt", "net", "ipc", "uts"]
        .into_iter()
        .filter(|ns| !Path::new(&format!("/proc/self/ns/{ns}")).exists())
        .collect();
    g.check(check(
        "namespaces_supported",
        ns_missing.is_empty(),
        json!({"missing": ns_missing}),
        "pid, mnt, net, ipc and uts namespaces in /proc/self/ns",
    ));
}

/// Xvfb and xterm are on PATH; their versions go into the environment record.
fn check_x_tools(ctx: &mut Ctx, g: &mut GateBuilder, can_run: bool) {
    for (name, prog, package) in [
        ("xvfb_present", "Xvfb", "xvfb"),
        ("xterm_present", "xterm", "xterm"),
    ] {
        let found = find_program(prog);
        g.require(
            check(
                name,
                found.is_some(),
                json!(found),
                &format!("{prog} on PATH"),
            ),
            || format!("{prog} not found on PATH: install it (`apt-get install {package}`)"),
        );
        let Some(path) = found.filter(|_| can_run) else {
            continue;
        };
        if prog == "Xvfb" {
            if let Some(v) = tool_version(ctx, g, &xvfb_version_step()) {
                ctx.env.xvfb_version = Some(format!("{package} {v} (Debian package)"));
            }
        } else if let Some(v) = tool_version(ctx, g, &xterm_version_step(&path)) {
            ctx.env.xterm_version = Some(v);
        }
    }
}

/// The workload's own programs are on PATH (only a workload other than xterm has any).
fn check_workload_programs(ctx: &Ctx, g: &mut GateBuilder) {
    let w = ctx.cfg.options.workload;
    let programs = w.programs();
    if programs.is_empty() {
        return;
    }
    let found: Vec<(&str, Option<PathBuf>)> = programs
        .iter()
        .map(|(p, _)| (*p, find_program(p)))
        .collect();
    let missing: Vec<&str> = programs
        .iter()
        .zip(&found)
        .filter(|(_, (_, f))| f.is_none())
        .map(|((_, package), _)| *package)
        .collect();
    g.require(
        check(
            "workload_programs_present",
            missing.is_empty(),
            json!({"workload": w, "found": found}),
            &format!(
                "{} on PATH",
                programs.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", ")
            ),
        ),
        || {
            format!(
                "the {w} workload's programs are missing: install {} (an image with them: images/bookworm-desktop, images/trixie-desktop, images/bookworm-browser, images/bookworm-apps)",
                missing.join(", ")
            )
        },
    );
}

/// The first line a version command printed, when it succeeded; its run is evidence.
fn tool_version(ctx: &Ctx, g: &mut GateBuilder, step: &Step) -> Option<String> {
    let out = ctx.run(step);
    let v = first_line(&out.stdout);
    let ok = out.success() && !v.is_empty();
    g.evidence(out.evidence);
    ok.then_some(v)
}

fn check_display(ctx: &Ctx, g: &mut GateBuilder) {
    let users = display_users(ctx.cfg.display);
    let c = check(
        "display_free",
        users.is_empty(),
        json!(users),
        "no X socket or lock file for the display on this machine",
    );
    g.require(c, || {
        format!(
            "display :{} is already in use here ({}): pick a free one with --display :N",
            ctx.cfg.display,
            users.join(", ")
        )
    });
}

fn check_criu_gate_tools(g: &mut GateBuilder) {
    let missing = missing_tools(|t| find_program(t).is_some());
    let found: Vec<(String, Option<PathBuf>)> = CRIU_GATE_TOOLS
        .iter()
        .flat_map(|(alts, _, _)| alts.iter())
        .map(|t| (t.to_string(), find_program(t)))
        .collect();
    let c = check(
        "criu_gate_tools_present",
        missing.is_empty(),
        json!({"found": found, "missing": missing}),
        "nsenter, and iptables-save or nft, on PATH",
    );
    g.require(c, || missing.join("; "));
}

/// A criu is there and `criu check` succeeds with it; its version goes into the environment
/// record. Returns the criu the CRIU gates may use.
fn check_criu(ctx: &mut Ctx, g: &mut GateBuilder, root: bool, can_run: bool) -> Option<PathBuf> {
    let criu = ctx.cfg.criu_path();
    let criu_found = criu.as_deref().is_some_and(is_executable);
    let criu_value = json!(criu);
    g.require(check("criu_present", criu_found, criu_value, "an executable criu"), || {
        match &ctx.cfg.criu {
            Some(p) => format!(
                "--criu {} does not exist or is not executable: pass the path of a criu binary, or drop --criu to use the one on PATH",
                p.display()
            ),
            None => "criu not found on PATH or in /usr/sbin, /sbin: install it (`apt-get install criu`) or pass --criu PATH".into(),
        }
    });
    let not_run = |why: &str| {
        check(
            "criu_check",
            false,
            json!(format!("not run: {why}")),
            "`criu check` exits 0",
        )
    };
    let Some(criu) = criu.filter(|_| criu_found) else {
        g.record(not_run("no criu"));
        return None;
    };
    if !can_run {
        g.record(not_run("the work directory is not usable"));
        return None;
    }
    let out = ctx.run(&criu_version_step(&criu));
    ctx.env.criu_version = criu::parse_version(&out.stdout);
    g.evidence(out.evidence);
    if !root {
        g.record(not_run("criu check needs root"));
        return None;
    }
    let out = ctx.run(&criu_check_step(&criu));
    let ok = out.success();
    let seen = json!({"exit_code": out.evidence.exit_code, "last_line": first_line(&out.stderr.lines().rev().collect::<Vec<_>>().join("\n")), "stdout": first_line(&out.stdout)});
    let kernel = ctx.env.kernel_release.clone();
    let version = ctx.env.criu_version.clone();
    g.require(check("criu_check", ok, seen, "`criu check` exits 0"), || {
        let mut why = format!(
            "`criu check` failed on kernel {} with criu {}: {}",
            kernel,
            version.as_deref().unwrap_or("(unknown version)"),
            out.summary()
        );
        if out.stderr.contains("vdso") {
            why.push_str(
                "; this CRIU cannot read this kernel's vDSO (Debian 12's criu 3.17.1 fails on kernels >= 6.13; CRIU >= 4.1 works): run inside the pinned guest with `cargo xtask vm-run`, or pass --criu with a newer build",
            );
        }
        why
    });
    g.evidence(out.evidence);
    ok.then_some(criu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_tool_is_named() {
        assert!(missing_tools(|_| true).is_empty());
        assert!(
            missing_tools(|t| t != "iptables-save").is_empty(),
            "nft will do"
        );
        let m = missing_tools(|t| t != "iptables-save" && t != "nft");
        assert_eq!(m.len(), 1);
        assert!(m[0].starts_with("iptables-save or nft not found"), "{m:?}");
        let m = missing_tools(|t| t != "nsenter");
        assert_eq!(m.len(), 1);
        assert!(
            m[0].contains("nsenter") && m[0].contains("util-linux"),
            "{m:?}"
        );
        assert_eq!(missing_tools(|_| false).len(), 2);
    }

    #[test]
    fn an_unused_display_has_no_users() {
        assert!(display_users(64999).is_empty());
    }

    #[test]
    fn first_line_skips_blanks() {
        assert_eq!(
            first_line("\n  \nX.Org X Server 1.21\nmore"),
            "X.Org X Server 1.21"
        );
    }
}
