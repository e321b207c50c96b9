//! dump: CRIU checkpoints the whole tree. The state just before the dump is what every restored
//! copy is compared with.

use super::copies::only_when;
use super::state::obs_value;
use super::step::{Kind, Step, PID};
use super::{Config, Ctx, GateBuilder};
use crate::criu::{self, NetNs, NetworkLock};
use crate::netns;
use crate::{probe, pstree};
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::digest::sha256_file;
use sharedos_report::report::{Gate, GateName};
use std::collections::BTreeSet;
use std::fmt::Display;
use std::path::Path;
use std::time::Instant;

/// Writes a listing of the CRIU images (name, bytes, sha256): the images themselves are too big
/// to archive, their listing is the evidence.
fn write_listing(ctx: &Ctx) -> anyhow::Result<(u64, usize)> {
    let mut entries: Vec<_> = std::fs::read_dir(ctx.cfg.dump_dir())?
        .flatten()
        .filter(|e| e.path().is_file())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    let mut text = String::new();
    let mut total = 0;
    for e in &entries {
        let (h, n) = sha256_file(&e.path())?;
        total += n;
        text.push_str(&format!(
            "{h}  {n:>10}  {}\n",
            e.file_name().to_string_lossy()
        ));
    }
    std::fs::write(ctx.cfg.report_dir().join("criu/dump-images.txt"), text)?;
    Ok((total, entries.len()))
}

/// `criu dump` of the tree whose PID 1 is `pid` (its host pid).
pub fn dump_step(
    cfg: &Config,
    criu: &Path,
    pid: impl Display,
    lock: NetworkLock,
    net: NetNs,
) -> Step {
    Step::new(
        Kind::CriuDump,
        "criu dump of the tree",
        "checkpoint the tree (PID is the tree's PID 1 on the host)",
        criu::dump_argv(
            criu,
            pid,
            &cfg.dump_dir(),
            &cfg.criu_log("dump"),
            lock,
            net,
            &cfg.dump_extra(),
        ),
    )
}

pub fn plan(cfg: &Config) -> Vec<Step> {
    let criu = cfg.planned_criu();
    let lock = NetworkLock::detect();
    [
        only_when(
            "the tree's network namespace is as it was made (loopback alone, down, no address), \
             locked with nftables where CRIU has it",
            vec![dump_step(
                cfg,
                &criu,
                PID,
                NetworkLock::Nftables,
                NetNs::New,
            )],
        ),
        only_when(
            "that, on a CRIU without the nftables lock",
            vec![dump_step(cfg, &criu, PID, lock, NetNs::New)],
        ),
        only_when(
            "it is not: its contents saved in full",
            vec![dump_step(cfg, &criu, PID, lock, NetNs::Saved)],
        ),
    ]
    .concat()
}

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Dump);
    let (Some(pid), Some(criu_path)) = (ctx.tree, ctx.criu.clone()) else {
        g.problem("no tree or no usable criu");
        return g.finish("");
    };
    let Some(seen) = record_dump_time(ctx, &mut g, pid) else {
        return g.finish("");
    };
    let net = network_namespace(&mut g, pid);
    if let Err(e) = std::fs::create_dir_all(ctx.cfg.dump_dir()) {
        g.problem(format!("mkdir {}: {e}", ctx.cfg.dump_dir().display()));
        return g.finish("");
    }
    if !run_dump(ctx, &mut g, &criu_path, pid, net) {
        // CRIU resumes a tree it failed to dump; cleanup ends it.
        return g.finish("");
    }
    check_original_ended(ctx, &mut g, pid);
    check_images(ctx, &mut g);
    check_pstree(ctx, &mut g, &seen);
    g.finish("CRIU dumped the whole tree: its pstree lists exactly the tree's processes")
}

/// The state every copy is compared with, kept as the snapshot, and the tree's processes just
/// before the dump by their pids inside the tree: what CRIU's pstree must list. None when the
/// state could not be read.
fn record_dump_time(ctx: &mut Ctx, g: &mut GateBuilder, pid: i32) -> Option<BTreeSet<i32>> {
    match ctx.observe(pid, "dump-time") {
        Ok(o) => {
            g.data("dump_time_state", obs_value(&o));
            ctx.snapshot = Some(o);
        }
        Err(e) => {
            g.problem(format!("could not record the dump-time state: {e:#}"));
            return None;
        }
    }
    let tree_ns = ctx.tree_record(pid).and_then(|t| t.pidns.clone());
    let marked = probe::scan(&ctx.cfg.marker);
    g.data(
        "tree_at_dump_time",
        json!(marked
            .iter()
            .map(|p| json!({"pid": p.pid, "ns_pid": p.ns_pid, "program": p.program(), "pidns": p.pidns}))
            .collect::<Vec<_>>()),
    );
    Some(
        marked
            .iter()
            .filter(|p| tree_ns.is_some() && p.pidns == tree_ns)
            .filter_map(|p| p.ns_pid)
            .collect(),
    )
}

/// Whether CRIU may leave the tree's network namespace out of the dump (`crate::netns`): only
/// when a new one would equal it, every process below the tree's PID 1 (in a nested pid
/// namespace too) in it. The reading and the choice go in the gate's data; a namespace that
/// cannot be read is saved in full.
fn network_namespace(g: &mut GateBuilder, pid: i32) -> NetNs {
    let (net, reading, why) = match netns::read(pid, &probe::descendants(pid)) {
        Ok(r) => match r.differs_from_new() {
            None => (NetNs::New, json!(r), None),
            Some(why) => (NetNs::Saved, json!(r), Some(why)),
        },
        Err(e) => (
            NetNs::Saved,
            json!(null),
            Some(format!("it could not be read: {e:#}")),
        ),
    };
    g.data(
        "network_namespace",
        json!({
            "reading": reading,
            "criu": match net {
                NetNs::New => "left out of the dump (--empty-ns net): each restore makes a new one, which equals it",
                NetNs::Saved => "saved in full",
            },
            "why_saved": why,
        }),
    );
    net
}

/// Runs `criu dump`; whether it succeeded.
fn run_dump(ctx: &Ctx, g: &mut GateBuilder, criu: &Path, pid: i32, net: NetNs) -> bool {
    let lock = NetworkLock::for_dump(ctx.lock, net, ctx.nft_lock);
    g.data("network_lock", json!(lock.as_str()));
    let started = Instant::now();
    let out = ctx.run(&dump_step(&ctx.cfg, criu, pid, lock, net));
    let ms = started.elapsed().as_millis() as u64;
    g.data("dump_ms", json!(ms));
    let dumped = out.success();
    g.require(
        check(
            "criu_dump_succeeded",
            dumped,
            json!(out.evidence.exit_code),
            "exit 0",
        ),
        || {
            format!(
                "criu dump failed: {} (log: criu/dump.log){}",
                out.summary(),
                criu::says(&ctx.cfg.criu_log("dump"))
            )
        },
    );
    if !dumped {
        g.cause(criu::cause(&ctx.cfg.criu_log("dump"), "criu dump", "dump"));
    }
    g.evidence(out.evidence);
    dumped
}

/// CRIU ends the tree it dumped. Whether it did is observed before we send anything: after our
/// own SIGKILL the tree would be gone whatever CRIU did.
fn check_original_ended(ctx: &mut Ctx, g: &mut GateBuilder, pid: i32) {
    let ended = match ctx.tree_record(pid).cloned() {
        Some(rec) => {
            let waited = super::copies::wait_tree_gone(&rec, ctx.cfg.quick(), false);
            if waited.is_ok() {
                ctx.mark_ended(pid);
            } else {
                // Left running by CRIU: ended here so later gates and cleanup start clean.
                let _ = ctx.kill_tree(pid);
            }
            waited.map_err(|e| e.to_string())
        }
        None => Err(format!("pid {pid} is not a tree of this run")),
    };
    ctx.tree = None;
    g.check(check(
        "original_tree_ended",
        ended.is_ok(),
        json!({"pid": pid, "ended_by_criu": ended.is_ok(), "error": ended.err()}),
        "CRIU ended the dumped tree: its PID 1 and every process of its pid namespace gone, before any signal of ours",
    ));
}

fn check_images(ctx: &Ctx, g: &mut GateBuilder) {
    match write_listing(ctx) {
        Ok((bytes, files)) => {
            g.data("image_bytes", json!(bytes));
            g.data("image_files", json!(files));
            g.check(check(
                "images_written",
                files > 0 && bytes > 0,
                json!({"files": files, "bytes": bytes, "listing": "criu/dump-images.txt"}),
                "CRIU image files in the dump directory",
            ));
        }
        Err(e) => g.problem(format!("listing the CRIU images: {e:#}")),
    }
}

/// CRIU's pstree lists exactly the processes `seen` in the tree just before the dump.
fn check_pstree(ctx: &Ctx, g: &mut GateBuilder, seen: &BTreeSet<i32>) {
    let pstree_img = ctx.cfg.dump_dir().join("pstree.img");
    match pstree::read(&pstree_img) {
        Ok(entries) => {
            let recorded: BTreeSet<i32> = entries.iter().map(|e| e.pid as i32).collect();
            g.data("pstree", json!(entries));
            g.check(compare::pstree_matches(&recorded, seen));
        }
        Err(e) => {
            g.check(check(
                "pstree_matches_tree",
                false,
                json!({"error": format!("{e:#}"), "seen_at_dump_time": seen}),
                "a pstree.img listing exactly the tree's processes",
            ));
        }
    }
}
