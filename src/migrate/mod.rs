//! `vm-migrate`: a checkpoint made in one guest restored in a guest booted from another image
//! (another kernel, maybe another CRIU). Each guest is a vm-run of its own, with its own archived
//! and judged report under the migration's directory (`from/`, `to/`):
//!
//! 1. the FROM guest runs `diagnose --migrate-dump`: the gates up to the dump, keeping the CRIU
//!    images and the dump-time state as artifacts, which the fetch brings home bounded and
//!    hashed and the judgement re-hashes;
//! 2. the host takes those files out of the archive through the one reader (no link followed,
//!    every read capped, each file's sha256 held to the artifact list) into `checkpoint/`, with a
//!    manifest;
//! 3. the TO guest is sent them over its pinned SSH session and runs
//!    `diagnose --migrate-restore`: the dump gate checks them against the manifest, then the
//!    restore, X-state, isolation and reset gates run on them, and the host rechecks those as it
//!    does any vm-run's.
//!
//! The verdict is `judge::verdict::migration` over both judgements; `migration.json` names both
//! guests' kernels and CRIU versions, and the marker both guests ran with. A guest that cannot
//! boot is the rig's failure (exit 2); a restore CRIU refuses is a FAIL whose gate quotes CRIU's
//! log.

pub mod plan;

use crate::escape;
use crate::judge::verdict::{self, How, MigrationSide, Outcome};
use crate::progress::Progress;
use crate::run::{self, VmRunOptions, RIG_FAILURE_EXIT};
use anyhow::{bail, Context, Result};
use serde_json::json;
use sharedos_report::checkpoint::{IMAGES_DIR, MANIFEST_FILE};
use sharedos_report::report::{Status, Verdict};
use sharedos_report::{clock, digest, random};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The migration's summary, beside `from/` and `to/`.
pub use verdict::MIGRATION_FILE as SUMMARY_FILE;

#[derive(Debug, Clone)]
pub struct MigrateOptions {
    /// Everything but the image and the report directory, as for vm-run.
    pub base: VmRunOptions,
    pub from: String,
    pub to: String,
    /// Test only: flip one byte of a CRIU image after the host checked it and before the TO
    /// guest is sent it, so that the restore side's check of the checkpoint must fail.
    pub tamper_checkpoint: bool,
}

fn progress() -> Progress {
    Progress::new("vm-migrate")
}

/// Runs the migration; returns its exit code (0 PASS, 1 FAIL, 2 the rig failed).
pub fn vm_migrate(opts: &MigrateOptions) -> i32 {
    match migrate(opts) {
        Ok(code) => code,
        Err(e) => {
            progress().error(&e);
            RIG_FAILURE_EXIT
        }
    }
}

fn migrate(opts: &MigrateOptions) -> Result<i32> {
    sharedos_report::signals::install().context("installing signal handlers")?;
    if let Some(note) = plan::check_pair(&opts.base.image, &opts.from, &opts.to)? {
        progress().note(&note);
    }
    crate::gate_binary::require(&opts.base.gate_binary)?;
    let out = create_out(opts)?;
    let marker = format!("spike-{}", random::random_hex(6)?);
    // Started before the FROM guest boots, so before its dump-time query: the restore side's
    // bound on the counter is never too tight.
    let started = Instant::now();
    progress().note(&format!("dump side: {} ({})", opts.from, out.display()));
    let from_dir = out.join("from");
    let code = run::vm_run(&half(opts, &opts.from, &from_dir, plan::dump_args(&marker)));
    if code == RIG_FAILURE_EXIT {
        return summarize(
            opts,
            &marker,
            &out,
            None,
            None,
            "the dump side's guest failed (rig)",
        );
    }
    progress().note(
        "the dump side's report alone is FAIL by design (its restore gates run in the other guest); the migration's verdict comes last",
    );
    let from = judge(&from_dir)?;
    let dump_problems = verdict::migration_half_problems(&from, MigrationSide::Dump);
    if !dump_problems.is_empty() {
        return summarize(
            opts,
            &marker,
            &out,
            Some(&from),
            None,
            "the dump side did not pass",
        );
    }
    let staged = out.join("checkpoint");
    let files =
        stage(&from, &staged).context("taking the checkpoint out of the dump side's archive")?;
    if opts.tamper_checkpoint {
        tamper(&staged)?;
    }
    let since = started.elapsed();
    progress().note(&format!(
        "restore side: {} ({} checkpoint files)",
        opts.to,
        files.len()
    ));
    let to_dir = out.join("to");
    let mut to_opts = half(opts, &opts.to, &to_dir, plan::restore_args(&marker, since));
    to_opts.upload = files;
    let code = run::vm_run(&to_opts);
    if code == RIG_FAILURE_EXIT {
        return summarize(
            opts,
            &marker,
            &out,
            Some(&from),
            None,
            "the restore side's guest failed (rig)",
        );
    }
    let to = judge(&to_dir)?;
    summarize(opts, &marker, &out, Some(&from), Some(&to), "")
}

/// The migration's directory: `--out`, or `<reports root>/<UTC>-migrate-FROM-TO`; new or empty.
fn create_out(opts: &MigrateOptions) -> Result<PathBuf> {
    let dir = match &opts.base.out {
        Some(d) => d.clone(),
        None => opts.base.reports_root.join(format!(
            "{}-migrate-{}-{}",
            clock::compact_utc_now(),
            opts.from,
            opts.to
        )),
    };
    run::archive::create_empty_dir(&dir, "migration's directory", "")?;
    Ok(dir)
}

/// One guest's vm-run: its image, its report directory, its diagnose arguments.
fn half(opts: &MigrateOptions, image: &str, dir: &Path, args: Vec<String>) -> VmRunOptions {
    let mut o = opts.base.clone();
    o.image.image = image.to_string();
    o.out = Some(dir.to_path_buf());
    o.diagnose_args = args;
    o.keep_vm = false;
    o
}

/// The one verdict on a guest's archived report; one that does not read back is the rig's
/// failure, as vm-run says of its own.
fn judge(dir: &Path) -> Result<Outcome> {
    verdict::judge(dir, &How::full(None)).map_err(|e| {
        anyhow::anyhow!(
            "the archived report in {} does not read back: {e}",
            dir.display()
        )
    })
}

/// Copies the checkpoint's files out of the judged archive into `staged` through the reader
/// (no link followed, reads capped), each held to the sha256 the artifact list gives it, and
/// writes the manifest. Returns each file with its guest path, the manifest last.
fn stage(from: &Outcome, staged: &Path) -> Result<Vec<(PathBuf, String)>> {
    let files = plan::checkpoint_files(&from.report.artifacts)?;
    let reader = from
        .files
        .as_ref()
        .context("the judgement kept no reader of the dump side's archive")?;
    std::fs::create_dir_all(staged.join(IMAGES_DIR))
        .with_context(|| format!("creating {}", staged.display()))?;
    let mut upload = Vec::new();
    for c in &files {
        let local = staged.join(&c.name);
        let mut f = std::fs::File::create(&local)
            .with_context(|| format!("creating {}", local.display()))?;
        let read = reader
            .copy(&c.archived, &mut f)
            .map_err(|e| anyhow::anyhow!("reading {}: {e}", c.archived))?;
        f.flush()?;
        if read.sha256 != c.sha256 || read.len != c.bytes {
            bail!(
                "{} reads as sha256 {} ({} bytes), but the artifact list gives {} ({} bytes)",
                c.archived,
                read.sha256,
                read.len,
                c.sha256,
                c.bytes
            );
        }
        upload.push((local, plan::guest_path(&c.name)));
    }
    let manifest = staged.join(MANIFEST_FILE);
    std::fs::write(&manifest, plan::manifest(&files))
        .with_context(|| format!("writing {}", manifest.display()))?;
    upload.push((manifest, plan::manifest_guest_path()));
    Ok(upload)
}

/// Test only: the last byte of the largest CRIU image flipped.
fn tamper(staged: &Path) -> Result<()> {
    let images = staged.join(IMAGES_DIR);
    let largest = std::fs::read_dir(&images)?
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.len(), e.path())))
        .max()
        .context("no CRIU image to tamper with")?;
    let mut bytes = std::fs::read(&largest.1)?;
    if let Some(b) = bytes.last_mut() {
        *b ^= 0xff;
    }
    std::fs::write(&largest.1, bytes)?;
    progress().note(&format!(
        "test hook: flipped the last byte of {}",
        largest.1.display()
    ));
    Ok(())
}

/// What one guest was: its image, kernel and CRIU, its report directory, and what kept it from
/// passing, with the cause each failed gate quoted (CRIU's error when it refused the restore).
fn side(image: &str, o: Option<&Outcome>, which: MigrationSide) -> serde_json::Value {
    let dir = which.dir();
    let gates = which.gates();
    match o {
        Some(o) => {
            let env = &o.report.environment;
            json!({
                "image": image,
                "report": dir,
                "kernel": env.kernel_release,
                "criu": env.criu_version,
                "os": env.os,
                "gates": gates.iter().filter_map(|n| o.gates.iter().find(|g| g.name == *n)).map(|g| json!({
                    "name": g.name, "status": g.status, "reason": g.reason, "cause": g.cause,
                })).collect::<Vec<_>>(),
                "problems": verdict::migration_half_problems(o, which),
            })
        }
        None => json!({"image": image, "report": dir}),
    }
}

/// Writes `migration.json`, prints the outcome, and returns the exit code: 2 when either guest
/// failed as a rig (`rig` says which), else the migration verdict's.
fn summarize(
    opts: &MigrateOptions,
    marker: &str,
    out: &Path,
    from: Option<&Outcome>,
    to: Option<&Outcome>,
    rig: &str,
) -> Result<i32> {
    let rig_failed = rig.contains("(rig)");
    let v = match from {
        Some(f) => verdict::migration(f, to),
        None => Verdict::Fail,
    };
    let code = if rig_failed {
        RIG_FAILURE_EXIT
    } else {
        v.exit_code()
    };
    let summary = json!({
        "from": side(&opts.from, from, MigrationSide::Dump),
        "to": side(&opts.to, to, MigrationSide::Restore),
        "cross_kernel": opts.from != opts.to,
        // The host's record of which migration the halves are: a reader holds each half's
        // marker to it, so halves of another migration put in this one's place fail.
        "marker": marker,
        "verdict": if rig_failed { "RIG_FAILURE".to_string() } else { v.to_string() },
        "exit_code": code,
        "why": rig,
    });
    let text = serde_json::to_string_pretty(&summary)? + "\n";
    digest::replace_in_report(out, SUMMARY_FILE, text.as_bytes())?;
    let p = progress();
    let who = |image: &str, o: Option<&Outcome>| match o {
        Some(o) => format!(
            "{image} (kernel {}, criu {})",
            escape::line(&o.report.environment.kernel_release),
            escape::line(
                o.report
                    .environment
                    .criu_version
                    .as_deref()
                    .unwrap_or("unknown")
            )
        ),
        None => image.to_string(),
    };
    for (o, which) in [(from, MigrationSide::Dump), (to, MigrationSide::Restore)] {
        let Some(o) = o else { continue };
        for g in which
            .gates()
            .iter()
            .filter_map(|n| o.gates.iter().find(|g| g.name == *n))
        {
            if g.status != Status::Pass {
                p.note(&format!(
                    "{} {}: {}",
                    g.name,
                    g.status,
                    escape::line(&sharedos_report::text::tail(&g.reason, 12, 1500))
                ));
            }
        }
    }
    p.result(&format!(
        "migration {} -> {}: {} (exit {code}){}",
        who(&opts.from, from),
        who(&opts.to, to),
        if rig_failed {
            "RIG FAILURE"
        } else {
            v.as_str()
        },
        if rig.is_empty() {
            String::new()
        } else {
            format!(": {rig}")
        }
    ));
    p.result(&out.display().to_string());
    Ok(code)
}
