//! The pinned guest image: `images/<name>/` (definition, lock, guest files) built rootless and
//! reproducibly into a cache entry holding `disk.img`, `vmlinuz`, `initrd.img` and
//! `manifest.json`.

pub mod builder;
pub mod cache;
pub mod contract;
pub mod definition;
pub mod exec;
pub mod guest_builder;
pub mod index;
pub mod initrd;
pub mod lock;
pub mod manifest;
pub mod mode;

pub use cache::cache_root;
pub use manifest::{Manifest, PackageVersion};
pub use mode::BuilderMode;

use anyhow::{bail, Context, Result};
use cache::EntryState;
use definition::{ImageDir, GUEST_FILES, LOCK_FILE};
use exec::Progress;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const DEFAULT_IMAGE: &str = "bookworm";

/// What `cargo xtask image` accepts; the host CLI can embed it with `#[command(flatten)]`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct BuildOptions {
    /// Image directory name under images/.
    #[arg(long, default_value = DEFAULT_IMAGE)]
    pub image: String,
    /// Fetch packages from this mirror instead of the definition's, e.g. a dated
    /// http://snapshot.debian.org/archive/debian/<YYYYMMDDTHHMMSSZ>. The image bytes do not change.
    #[arg(long)]
    pub mirror: Option<String>,
    /// Rewrite the lock from what the mirror has now, show what changed, then build.
    #[arg(long)]
    pub update_lock: bool,
    /// Print every command the build would run and run nothing.
    #[arg(long)]
    pub plan: bool,
    /// Force the builder mode instead of probing (default: unshare where user namespaces work,
    /// else fakechroot when the image's glibc is no newer than the host's, else guest).
    #[arg(long, value_enum)]
    pub mode: Option<BuilderMode>,
    /// Where images/ is (default: $SHAREDOS_RIG_IMAGES, ./images, then the source tree).
    #[arg(long)]
    pub images_dir: Option<PathBuf>,
    /// The cache root (default: $SHAREDOS_RIG_CACHE, $XDG_CACHE_HOME/sharedos-rig, ~/.cache/sharedos-rig).
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Runs mmdebstrap in a guest for guest mode: given by the front ends that can start one.
    #[arg(skip)]
    pub guest_builder: Option<guest_builder::SharedGuestBuilder>,
}

impl BuildOptions {
    pub fn new(image: &str) -> BuildOptions {
        BuildOptions {
            image: image.to_string(),
            ..BuildOptions::default()
        }
    }
}

/// A usable cache entry.
#[derive(Debug, Clone)]
pub struct ImageEntry {
    pub dir: PathBuf,
    pub manifest: Manifest,
    /// False when the entry was already in the cache and verified.
    pub built: bool,
}

impl ImageEntry {
    pub fn disk(&self) -> PathBuf {
        self.dir.join(&self.manifest.disk_image)
    }
    pub fn kernel(&self) -> PathBuf {
        self.dir.join(&self.manifest.kernel)
    }
    pub fn initrd(&self) -> PathBuf {
        self.dir.join(&self.manifest.initrd)
    }
}

/// Fails, listing the images that exist, when `opts.image` is not one: the check to make before
/// anything costly.
pub fn require_image(opts: &BuildOptions) -> Result<()> {
    let images_dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
    definition::require_image(&images_dir, &opts.image)
}

struct Inputs {
    image: ImageDir,
    lock_text: Option<String>,
    /// (path under images/<name>/, sha256) in key order.
    hashes: Vec<(String, String)>,
    key: String,
}

fn load_inputs(images_dir: &Path, name: &str) -> Result<Inputs> {
    let image = ImageDir::load(images_dir, name)?;
    let lock_path = image.lock_path();
    let lock_text = match std::fs::read_to_string(&lock_path) {
        Ok(t) => Some(t),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", lock_path.display())),
    };
    let mut hashes = vec![(
        definition::DEFINITION_FILE.to_string(),
        sharedos_report::digest::sha256_hex(image.definition_text.as_bytes()),
    )];
    hashes.push((
        LOCK_FILE.to_string(),
        sharedos_report::digest::sha256_hex(lock_text.as_deref().unwrap_or("").as_bytes()),
    ));
    for f in GUEST_FILES {
        let bytes = std::fs::read(image.file(f))
            .with_context(|| format!("reading {}", image.file(f).display()))?;
        hashes.push((f.to_string(), sharedos_report::digest::sha256_hex(&bytes)));
    }
    let key = cache::entry_key(name, &hashes);
    Ok(Inputs {
        image,
        lock_text,
        hashes,
        key,
    })
}

fn root_of(opts: &BuildOptions) -> Result<PathBuf> {
    match &opts.cache_dir {
        Some(d) => Ok(d.clone()),
        None => cache_root(),
    }
}

/// The commands a build would run, in order (what `--plan` prints).
pub fn plan_image(opts: &BuildOptions) -> Result<Vec<String>> {
    let images_dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
    let inputs = load_inputs(&images_dir, &opts.image)?;
    let root = root_of(opts)?;
    let lock = match (&inputs.lock_text, opts.update_lock) {
        (Some(t), false) => Some(lock::Lock::parse(t).context("parsing the lock")?),
        (None, false) => bail!(
            "{} has no lock: run with --update-lock",
            inputs.image.dir.display()
        ),
        (_, true) => None,
    };
    let release = lock
        .as_ref()
        .map(|l| l.kernel_release.clone())
        .unwrap_or_else(|| "<kernel release>".into());
    let mut out = vec![format!("# entry: {}", root.join(&inputs.key).display())];
    let (mode, reason) = match opts.mode {
        Some(m) => (m, "chosen with --mode".to_string()),
        None => {
            out.push(format!(
                "# mode probe (unshare if it succeeds and the user has subuid/subgid ranges; else fakechroot if the image's glibc is no newer than the host's ({}), else guest):\n{}",
                mode::host_glibc_cmd().display(),
                mode::userns_probe_cmd().display()
            ));
            (BuilderMode::Unshare, "assumed for the plan".to_string())
        }
    };
    out.push(format!("# builder mode: {} ({reason})", mode.as_str()));
    let plan = make_plan(opts, &root, inputs, lock, mode, reason)?;
    out.extend(plan.plan_lines(&release));
    Ok(out)
}

fn mirror_of(opts: &BuildOptions, image: &ImageDir) -> String {
    opts.mirror
        .clone()
        .unwrap_or_else(|| image.definition.mirror.clone())
}

fn make_plan(
    opts: &BuildOptions,
    root: &Path,
    inputs: Inputs,
    lock: Option<lock::Lock>,
    mode: BuilderMode,
    mode_reason: String,
) -> Result<builder::BuildPlan> {
    let mirror = mirror_of(opts, &inputs.image);
    let src = index::sources_line(&inputs.image.definition, &mirror);
    let apt_dir = root
        .join("apt")
        .join(&sharedos_report::digest::sha256_hex(src.as_bytes())[..16]);
    let work = builder::WorkPaths::new(&root.join("tmp").join(format!(
        "{}.{}",
        inputs.key,
        std::process::id()
    )));
    Ok(builder::BuildPlan {
        image: inputs.image,
        mirror,
        mode,
        mode_reason,
        apt_dir,
        work,
        cache_root: root.to_path_buf(),
        lock,
        guest_builder: opts.guest_builder.clone(),
    })
}

/// The verified cache entry for the image, if the cache holds one; builds nothing.
pub fn cached_entry(opts: &BuildOptions) -> Result<Option<ImageEntry>> {
    let images_dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
    let inputs = load_inputs(&images_dir, &opts.image)?;
    let dir = root_of(opts)?.join(&inputs.key);
    let want = cache::want(&opts.image, &inputs.key, &inputs.hashes);
    Ok(match cache::check_entry(&dir, &want) {
        EntryState::Good(m) => Some(ImageEntry {
            dir,
            manifest: *m,
            built: false,
        }),
        _ => None,
    })
}

/// Returns the verified cache entry for the image, building it first when it is missing or
/// its hashes no longer match.
pub fn ensure_image(opts: &BuildOptions) -> Result<ImageEntry> {
    ensure_image_with(opts, &Progress::new("image"))
}

pub fn ensure_image_with(opts: &BuildOptions, progress: &Progress) -> Result<ImageEntry> {
    if opts.plan {
        bail!("plan mode builds nothing: use plan_image()");
    }
    let images_dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
    let inputs = load_inputs(&images_dir, &opts.image)?;
    let root = root_of(opts)?;
    let entry_dir = root.join(&inputs.key);

    if !opts.update_lock {
        let want = cache::want(&opts.image, &inputs.key, &inputs.hashes);
        match cache::check_entry(&entry_dir, &want) {
            EntryState::Good(m) => {
                return Ok(ImageEntry {
                    dir: entry_dir,
                    manifest: *m,
                    built: false,
                })
            }
            EntryState::Bad(why) => {
                progress.note(&format!(
                    "cache entry {} is not usable ({why}): rebuilding it",
                    entry_dir.display()
                ));
                cache::remove_bad_entry(&entry_dir, &want)?;
            }
            EntryState::Missing => {}
        }
    }
    let lock = match (&inputs.lock_text, opts.update_lock) {
        (Some(t), false) => Some(
            lock::Lock::parse(t)
                .with_context(|| format!("parsing {}", inputs.image.lock_path().display()))?,
        ),
        (None, false) => bail!(
            "{} does not exist: create it with `cargo xtask image --image {} --update-lock`",
            inputs.image.lock_path().display(),
            opts.image
        ),
        (_, true) => None,
    };

    let mut missing = exec::missing_tools(&mode::COMMON_TOOLS);
    if !Path::new(index::DEBIAN_KEYRING).is_file() {
        missing.push(format!(
            "{} (apt install debian-archive-keyring)",
            index::DEBIAN_KEYRING
        ));
    }
    if !missing.is_empty() {
        bail!(
            "host tools missing for the image build: {}",
            missing.join(", ")
        );
    }
    let glibc = mode::image_glibc(&inputs.image.definition.suite, lock.as_ref());
    let (mode, reason) = mode::choose_mode(opts.mode, glibc.as_ref());
    let missing = mode.missing_tools();
    if !missing.is_empty() {
        bail!(
            "host tools missing for {} mode: {}",
            mode.as_str(),
            missing.join(", ")
        );
    }
    if nix::unistd::getuid().is_root() {
        progress.note("running as root: the build does not need it, and runs the same as any user");
    }
    progress.note(&format!("builder mode: {} ({reason})", mode.as_str()));

    // --update-lock shows its changes against the lock it replaces, even an unparsable one.
    let old_lock = lock.clone().or_else(|| {
        inputs
            .lock_text
            .as_deref()
            .and_then(|t| lock::Lock::parse(t).ok())
    });
    let plan = make_plan(opts, &root, inputs, lock, mode, reason)?;
    let _ = std::fs::remove_dir_all(&plan.work.dir);
    std::fs::create_dir_all(&plan.work.dir)
        .with_context(|| format!("creating {}", plan.work.dir.display()))?;
    progress.note(&format!(
        "building {} into {} (log: {})",
        opts.image,
        entry_dir.display(),
        plan.work.log.display()
    ));
    let result = builder::build(&plan, progress);
    let result = match result {
        Ok(r) => r,
        Err(e) => {
            // Keeps the log, drops the big files.
            let _ = std::fs::remove_file(&plan.work.tarball);
            let _ = std::fs::remove_dir_all(&plan.work.entry);
            let _ = std::fs::remove_dir_all(&plan.work.extract);
            return Err(e.context(format!(
                "building image {} (log: {})",
                opts.image,
                plan.work.log.display()
            )));
        }
    };
    let mut manifest = result.manifest;

    if let Some(new_lock) = &result.new_lock {
        let changes = lock::diff(old_lock.as_ref(), new_lock);
        if changes.is_empty() {
            progress.note("lock unchanged");
        } else {
            progress.note(&format!("lock changes ({}):", changes.len()));
            for c in &changes {
                eprintln!("  {c}");
            }
        }
        let path = plan.image.lock_path();
        std::fs::write(&path, new_lock.render(&opts.image))
            .with_context(|| format!("writing {}", path.display()))?;
        progress.note(&format!("wrote {}", path.display()));
    }
    // Re-read: --update-lock just changed the lock, so the key is the new one.
    let inputs = load_inputs(&images_dir, &opts.image)?;
    let entry_dir = root.join(&inputs.key);
    manifest.key = inputs.key.clone();
    manifest.lock_sha256 = inputs
        .hashes
        .iter()
        .find(|(p, _)| p == LOCK_FILE)
        .map(|(_, h)| h.clone())
        .unwrap_or_default();
    manifest.inputs = inputs
        .hashes
        .iter()
        .map(|(path, sha256)| manifest::InputFile {
            path: path.clone(),
            sha256: sha256.clone(),
        })
        .collect();
    manifest.write(&result.entry_dir.join(manifest::MANIFEST_FILE))?;
    cache::stamp_entry(&result.entry_dir, &manifest)?;

    if entry_dir.exists() {
        let want = cache::want(&opts.image, &inputs.key, &inputs.hashes);
        if let EntryState::Good(m) = cache::check_entry(&entry_dir, &want) {
            if m.image_sha256 != manifest.image_sha256 {
                progress.note(&format!(
                    "warning: {} already holds an image with sha256 {}, this build made {}: keeping the existing entry",
                    entry_dir.display(),
                    m.image_sha256,
                    manifest.image_sha256
                ));
            }
            let _ = std::fs::remove_dir_all(&plan.work.dir);
            return Ok(ImageEntry {
                dir: entry_dir,
                manifest: *m,
                built: true,
            });
        }
        cache::remove_bad_entry(&entry_dir, &want)?;
    }
    std::fs::rename(&result.entry_dir, &entry_dir)
        .with_context(|| format!("moving the new entry to {}", entry_dir.display()))?;
    cache::stamp_entry(&entry_dir, &manifest)?;
    let _ = std::fs::remove_dir_all(&plan.work.dir);
    Ok(ImageEntry {
        dir: entry_dir,
        manifest,
        built: true,
    })
}

/// `cargo xtask image ...`: builds or finds the entry and prints its directory on the last
/// line of stdout (progress goes to stderr).
pub fn cli_main_image(opts: &BuildOptions) -> Result<()> {
    if opts.plan {
        for line in plan_image(opts)? {
            println!("{line}");
        }
        return Ok(());
    }
    let start = Instant::now();
    let entry = ensure_image(opts)?;
    let m = &entry.manifest;
    if entry.built {
        eprintln!(
            "[image] built {} in {:.1} s: image sha256 {}, kernel {}, {} packages, {} mode",
            m.image_name,
            start.elapsed().as_secs_f64(),
            m.image_sha256,
            m.kernel_release,
            m.packages.len(),
            m.builder_mode
        );
    } else {
        eprintln!(
            "[image] cached {} (verified in {:.3} s): image sha256 {}",
            m.image_name,
            start.elapsed().as_secs_f64(),
            m.image_sha256
        );
    }
    println!("{}", entry.dir.display());
    Ok(())
}

/// Timings of cached no-op builds (the first call builds if the entry is missing and is not
/// counted).
pub fn bench_cached_image(opts: &BuildOptions, iterations: usize) -> Result<Vec<Duration>> {
    let first = ensure_image(opts)?;
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        let e = ensure_image_with(opts, &Progress::plain("image"))?;
        times.push(t.elapsed());
        if e.built || e.dir != first.dir {
            bail!("the cached entry was rebuilt during the benchmark");
        }
    }
    Ok(times)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plan_runs_nothing_and_lists_every_command() {
        let cache = std::env::temp_dir().join(format!("plan-test-{}", std::process::id()));
        let mut o = BuildOptions::new("bookworm");
        o.plan = true;
        o.mode = Some(BuilderMode::Fakechroot);
        o.cache_dir = Some(cache.clone());
        o.images_dir = Some(Path::new(env!("CARGO_MANIFEST_DIR")).join("images"));
        let lines = plan_image(&o).unwrap();
        let all = lines.join("\n");
        for word in [
            "apt-get",
            "mmdebstrap --mode=fakechroot",
            "tar -x",
            "genext2fs",
        ] {
            assert!(all.contains(word), "{word} not in plan:\n{all}");
        }
        assert!(!cache.exists(), "the plan created the cache");
        o.mode = None;
        let all = plan_image(&o).unwrap().join("\n");
        assert!(all.contains("unshare --user --map-root-user true"), "{all}");
    }
}
