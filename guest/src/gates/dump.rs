//! dump: CRIU checkpoints the whole tree. The state just before the dump is what every restored
//! copy is compared with.

use super::state::obs_value;
use super::{Ctx, GateBuilder};
use crate::{criu, probe, pstree};
use serde_json::json;
use sharedos_report::compare::{self, check};
use sharedos_report::digest::sha256_file;
use sharedos_report::report::{Gate, GateName};
use std::collections::BTreeSet;
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

pub fn run(ctx: &mut Ctx) -> Gate {
    let mut g = GateBuilder::new(GateName::Dump);
    let (Some(pid), Some(criu_path)) = (ctx.tree, ctx.criu.clone()) else {
        g.problem("no tree or no usable criu");
        return g.finish("");
    };
    match ctx.observe(pid, "dump-time") {
        Ok(o) => {
            g.data("dump_time_state", obs_value(&o));
            ctx.snapshot = Some(o);
        }
        Err(e) => {
            g.problem(format!("could not record the dump-time state: {e:#}"));
            return g.finish("");
        }
    }
    // The tree's processes as they are just before the dump, by their pids inside the tree: what
    // CRIU's pstree must list.
    let tree_ns = ctx.tree_record(pid).and_then(|t| t.pidns.clone());
    let marked = probe::scan(&ctx.cfg.marker);
    let seen: BTreeSet<i32> = marked
        .iter()
        .filter(|p| tree_ns.is_some() && p.pidns == tree_ns)
        .filter_map(|p| p.ns_pid)
        .collect();
    g.data(
        "tree_at_dump_time",
        json!(marked
            .iter()
            .map(|p| json!({"pid": p.pid, "ns_pid": p.ns_pid, "program": p.program(), "pidns": p.pidns}))
            .collect::<Vec<_>>()),
    );
    if let Err(e) = std::fs::create_dir_all(ctx.cfg.dump_dir()) {
        g.problem(format!("mkdir {}: {e}", ctx.cfg.dump_dir().display()));
        return g.finish("");
    }
    let argv = criu::dump_argv(
        &criu_path,
        pid,
        &ctx.cfg.dump_dir(),
        &ctx.cfg.criu_log("dump"),
        ctx.lock,
        &ctx.cfg.dump_extra(),
    );
    let started = Instant::now();
    let out = ctx.run("criu dump of the tree", &argv);
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
        || format!("criu dump failed: {} (log: criu/dump.log)", out.summary()),
    );
    g.evidence(out.evidence);
    if !dumped {
        // CRIU resumes a tree it failed to dump; cleanup ends it.
        return g.finish("");
    }

    // CRIU ends the tree it dumped. Whether it did is observed before we send anything: after
    // our own SIGKILL the tree would be gone whatever CRIU did.
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
    let pstree_img = ctx.cfg.dump_dir().join("pstree.img");
    match pstree::read(&pstree_img) {
        Ok(entries) => {
            let recorded: BTreeSet<i32> = entries.iter().map(|e| e.pid as i32).collect();
            g.data("pstree", json!(entries));
            g.check(compare::pstree_matches(&recorded, &seen));
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
    g.finish("CRIU dumped the whole tree: its pstree lists exactly the tree's processes")
}
