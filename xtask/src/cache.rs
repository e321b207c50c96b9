//! `cargo xtask cache list|prune`: the image cache's items, what each needs and whether it is
//! current; and the removal of what nothing current refers to. The deciding is
//! `sharedos_rig::cache_inventory`'s; this prints.

use anyhow::Result;
use sharedos_rig::cache_inventory::{self as inv, Facts, Outcome, Status};
use sharedos_rig::image::{self, definition};
use sharedos_rig::vm::{self, accel_cache};
use std::collections::BTreeMap;
use std::path::PathBuf;

#[derive(clap::Subcommand)]
pub enum CacheCommand {
    /// Each item of the cache root (image entries, snapshots, accelerator verdicts under
    /// accel/, peers/) with its size, age, what it refers to and whether it is current.
    List(CacheArgs),
    /// Remove what nothing current refers to: snapshots of another QEMU or of an image entry
    /// gone or not current, image entries no image's current definition gives, verdicts of
    /// another host boot, QEMU or kernel, half-made snapshots of dead PIDs. Whatever a running
    /// rig holds is left, and said so.
    Prune {
        #[command(flatten)]
        at: CacheArgs,
        /// Say what would be removed, and remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
}

#[derive(clap::Args)]
pub struct CacheArgs {
    /// The cache root (default: $SHAREDOS_RIG_CACHE, $XDG_CACHE_HOME/sharedos-rig,
    /// ~/.cache/sharedos-rig).
    #[arg(long)]
    cache_dir: Option<PathBuf>,
    /// Where images/ is, whose current definitions decide which entries are current (default:
    /// $SHAREDOS_RIG_IMAGES, ./images, then the source tree).
    #[arg(long)]
    images_dir: Option<PathBuf>,
}

/// What decides currency on this host: the installed QEMU, this boot, and the entry each
/// image's current definition gives.
fn facts(a: &CacheArgs) -> Facts {
    let images_dir = definition::find_images_dir(a.images_dir.as_deref(), image::DEFAULT_IMAGE);
    let names = definition::list_images(&images_dir);
    let current = (!names.is_empty()).then(|| {
        names
            .into_iter()
            .map(|n| {
                let key = image::current_entry_key(&images_dir, &n).map_err(|e| format!("{e:#}"));
                (n, key)
            })
            .collect::<BTreeMap<_, _>>()
    });
    Facts {
        qemu_version: vm::qemu_version().ok(),
        host_boot_id: accel_cache::host_boot_id().ok(),
        current,
    }
}

fn root(a: &CacheArgs) -> Result<PathBuf> {
    match &a.cache_dir {
        Some(d) => Ok(d.clone()),
        None => image::cache_root(),
    }
}

fn what(i: &inv::Item) -> &'static str {
    match i.what {
        inv::What::Entry(_) => "image",
        inv::What::Snapshot(_) => "snapshot",
        inv::What::Making { .. } => "making",
        inv::What::Accel(_) => "accel",
        inv::What::Peers => "peers",
        inv::What::Lock => "lock",
        inv::What::Builder => "builder",
        inv::What::Link { .. } => "link",
        inv::What::Other => "other",
    }
}

pub fn cache(c: CacheCommand) -> Result<i32> {
    match c {
        CacheCommand::List(a) => list(&a),
        CacheCommand::Prune { at, dry_run } => prune(&at, dry_run),
    }
}

fn list(a: &CacheArgs) -> Result<i32> {
    let listing = inv::scan(&root(a)?)?;
    let facts = facts(a);
    let verdicts = inv::classify(&listing, &facts);
    print_facts(&listing, &facts);
    let now = std::time::SystemTime::now();
    println!(
        "{:<9} {:<44} {:>10} {:>5}  {:<8} WHAT",
        "KIND", "NAME", "SIZE", "AGE", "STATUS"
    );
    let mut total = 0u64;
    for (i, v) in listing.items.iter().zip(&verdicts) {
        total = total.saturating_add(i.bytes);
        println!(
            "{:<9} {:<44} {:>10} {:>5}  {:<8} {}",
            what(i),
            sharedos_rig::escape::line(&i.name),
            inv::human_bytes(i.bytes),
            inv::human_age(i.modified, now),
            v.status.as_str(),
            sharedos_rig::escape::line(&v.why)
        );
    }
    let stale: u64 = listing
        .items
        .iter()
        .zip(&verdicts)
        .filter(|(_, v)| v.status == Status::Stale)
        .map(|(i, _)| i.bytes)
        .sum();
    println!(
        "{} item(s), {} ({total} bytes); stale, which `cargo xtask cache prune` removes: {} ({stale} bytes)",
        listing.items.len(),
        inv::human_bytes(total),
        inv::human_bytes(stale)
    );
    Ok(0)
}

fn print_facts(listing: &inv::Listing, facts: &Facts) {
    println!("cache {}", listing.root.display());
    println!(
        "installed QEMU: {}",
        facts
            .qemu_version
            .as_deref()
            .unwrap_or("none found (a snapshot's or verdict's QEMU is not judged)")
    );
    match &facts.current {
        None => println!("image definitions: none found (image entries are not judged)"),
        Some(c) => {
            let names: Vec<String> = c
                .iter()
                .map(|(n, k)| match k {
                    Ok(k) => format!("{n} -> {k}"),
                    Err(_) => format!("{n} -> (definition does not read)"),
                })
                .collect();
            println!("current entries: {}", names.join(", "));
        }
    }
}

fn prune(a: &CacheArgs, dry_run: bool) -> Result<i32> {
    let listing = inv::scan(&root(a)?)?;
    let facts = facts(a);
    let verdicts = inv::classify(&listing, &facts);
    print_facts(&listing, &facts);
    let done = inv::prune(&listing, &verdicts, dry_run)?;
    let mut freed = 0u64;
    let mut failed = 0usize;
    for d in &done {
        let name = sharedos_rig::escape::line(&d.name);
        let size = format!("{} ({} bytes)", inv::human_bytes(d.bytes), d.bytes);
        let why = sharedos_rig::escape::line(&d.why);
        match &d.outcome {
            Outcome::Removed => {
                freed = freed.saturating_add(d.bytes);
                println!("removed {name}, {size}: {why}");
            }
            Outcome::WouldRemove => {
                freed = freed.saturating_add(d.bytes);
                println!("would remove {name}, {size}: {why}");
            }
            Outcome::Skipped(s) => println!(
                "left {name}, {size}: {why}; {}",
                sharedos_rig::escape::line(s)
            ),
            Outcome::Failed(e) => {
                failed += 1;
                println!("failed to remove {name}: {}", sharedos_rig::escape::line(e));
            }
        }
    }
    println!(
        "{} {} ({freed} bytes){}",
        if dry_run { "would free" } else { "freed" },
        inv::human_bytes(freed),
        if done.is_empty() {
            "; nothing is stale"
        } else {
            ""
        }
    );
    if failed > 0 {
        anyhow::bail!(
            "{failed} stale item(s) could not be removed (said above)\nfix: check their \
             permissions and owner, then run cargo xtask cache prune again"
        );
    }
    Ok(0)
}
