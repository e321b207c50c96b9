//! The pinned guest image: `images/<name>/` (its definition, composed on `images/base/`, and its
//! lock) and the guest files of `images/base/`, built rootless and reproducibly into a cache entry
//! holding `disk.img`, `vmlinuz`, `initrd.img` and `manifest.json`.

pub mod builder;
pub mod cache;
pub mod compose;
pub mod contract;
pub mod definition;
pub mod exec;
pub mod guest_builder;
pub mod index;
pub mod initrd;
pub mod lock;
pub mod manifest;
pub mod mode;
#[cfg(test)]
mod shipped_tests;
pub mod workload;

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

/// [`require_image`], and when `diagnose_args` name a workload, that the image holds it
/// ([`workload::require`]): both before anything is built or booted.
pub fn require_image_for(opts: &BuildOptions, diagnose_args: &[String]) -> Result<()> {
    require_image(opts)?;
    match workload::in_args(diagnose_args) {
        Some(w) => {
            let images_dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
            workload::require(&images_dir, &opts.image, w, workload::Named::Flag)
        }
        None => Ok(()),
    }
}

/// The kernel release the image's lock pins (`packages.lock`), known before anything is built;
/// None when the image has no lock yet (its first build makes one).
pub fn pinned_kernel_release(opts: &BuildOptions) -> Result<Option<String>> {
    let images_dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
    let dir = definition::ImageDir::load(&images_dir, &opts.image)?;
    let path = dir.lock_path();
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let lock = lock::Lock::parse(&text).with_context(|| format!("reading {}", path.display()))?;
    Ok(Some(lock.kernel_release))
}

struct Inputs {
    image: ImageDir,
    lock_text: Option<String>,
    /// (input, sha256) in key order: `image.conf` is the effective definition's canonical
    /// rendering (so comments and layout do not change the key), `packages.lock` the image's
    /// own lock, the guest files the base's.
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

/// The name of the cache entry the current definition of image `name` under `images_dir` gives
/// (the key a build or a cache lookup uses), from its inputs; builds and checks nothing.
pub fn current_entry_key(images_dir: &Path, name: &str) -> Result<String> {
    Ok(load_inputs(images_dir, name)?.key)
}

/// The cache root the image's entry is (or will be) in: `--cache-dir`, or the default root.
pub fn root_of(opts: &BuildOptions) -> Result<PathBuf> {
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
    let lock = lock_to_build_from(&inputs, opts.update_lock, &opts.image)?;
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

/// [`ensure_image`] with the caller's progress. Each stage is a function of its own below.
pub fn ensure_image_with(opts: &BuildOptions, progress: &Progress) -> Result<ImageEntry> {
    if opts.plan {
        bail!("plan mode builds nothing: use plan_image()");
    }
    let images_dir = definition::find_images_dir(opts.images_dir.as_deref(), &opts.image);
    let inputs = load_inputs(&images_dir, &opts.image)?;
    let root = root_of(opts)?;
    if !opts.update_lock {
        if let Some(entry) = reuse_cached(&opts.image, &root, &inputs, progress)? {
            return Ok(entry);
        }
    }
    let lock = lock_to_build_from(&inputs, opts.update_lock, &opts.image)?;
    require_host_tools()?;
    let (mode, reason) = choose_builder_mode(opts.mode, &inputs.image, lock.as_ref())?;
    if nix::unistd::getuid().is_root() {
        progress.note("running as root: the build does not need it, and runs the same as any user");
    }
    progress.note(&format!("builder mode: {} ({reason})", mode.as_str()));
    let old_lock = lock_before(&inputs, lock.as_ref());
    let entry_dir = root.join(&inputs.key);
    let plan = make_plan(opts, &root, inputs, lock, mode, reason)?;
    let result = run_build(&plan, &entry_dir, progress)?;
    if let Some(new_lock) = &result.new_lock {
        write_lock(&plan.image, old_lock.as_ref(), new_lock, progress)?;
    }
    // Re-read: --update-lock just changed the lock, so the key is the new one.
    let inputs = load_inputs(&images_dir, &opts.image)?;
    let manifest = with_inputs(result.manifest, &inputs);
    manifest.write(&result.entry_dir.join(manifest::MANIFEST_FILE))?;
    cache::stamp_entry(&result.entry_dir, &manifest)?;
    let entry = install_entry(&root, &inputs, &result.entry_dir, manifest, progress)?;
    let _ = std::fs::remove_dir_all(&plan.work.dir);
    Ok(entry)
}

/// The cache's entry for these inputs when it verifies; a bad one is removed (under the cache
/// lock) so that the build replaces it.
fn reuse_cached(
    image: &str,
    root: &Path,
    inputs: &Inputs,
    progress: &Progress,
) -> Result<Option<ImageEntry>> {
    let entry_dir = root.join(&inputs.key);
    let want = cache::want(image, &inputs.key, &inputs.hashes);
    match cache::check_entry(&entry_dir, &want) {
        EntryState::Good(m) => Ok(Some(ImageEntry {
            dir: entry_dir,
            manifest: *m,
            built: false,
        })),
        EntryState::Bad(why) => {
            progress.note(&format!(
                "cache entry {} is not usable ({why}): rebuilding it",
                entry_dir.display()
            ));
            cache::remove_bad_entry(&entry_dir, &want)?;
            Ok(None)
        }
        EntryState::Missing => Ok(None),
    }
}

/// The lock a build must install exactly, or None for `--update-lock` (the build writes one).
fn lock_to_build_from(
    inputs: &Inputs,
    update_lock: bool,
    image: &str,
) -> Result<Option<lock::Lock>> {
    let path = inputs.image.lock_path();
    match (&inputs.lock_text, update_lock) {
        (_, true) => Ok(None),
        (Some(t), false) => lock::Lock::parse(t).map(Some).with_context(|| {
            format!(
                "parsing {}: fix it, or write it anew with \
                 `cargo xtask image --image {image} --update-lock`",
                path.display()
            )
        }),
        (None, false) => bail!(
            "{} does not exist: create it with `cargo xtask image --image {image} --update-lock`",
            path.display()
        ),
    }
}

/// The lock `--update-lock` shows its changes against: the one it replaces, even one that no
/// longer parses as the build needs (then None).
fn lock_before(inputs: &Inputs, lock: Option<&lock::Lock>) -> Option<lock::Lock> {
    lock.cloned().or_else(|| {
        inputs
            .lock_text
            .as_deref()
            .and_then(|t| lock::Lock::parse(t).ok())
    })
}

/// Fails naming every missing host tool the build needs whatever the mode, with its package.
fn require_host_tools() -> Result<()> {
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
    Ok(())
}

/// The builder mode and why, refused when its own tools are missing.
fn choose_builder_mode(
    explicit: Option<BuilderMode>,
    image: &ImageDir,
    lock: Option<&lock::Lock>,
) -> Result<(BuilderMode, String)> {
    let glibc = mode::image_glibc(&image.definition.suite, lock);
    let (mode, reason) = mode::choose_mode(explicit, glibc.as_ref());
    let missing = mode.missing_tools();
    if !missing.is_empty() {
        bail!(
            "host tools missing for {} mode: {}",
            mode.as_str(),
            missing.join(", ")
        );
    }
    Ok((mode, reason))
}

/// Runs the build in a fresh work directory; on failure keeps only its log, which the error
/// names.
fn run_build(
    plan: &builder::BuildPlan,
    entry_dir: &Path,
    progress: &Progress,
) -> Result<builder::BuildResult> {
    let _ = std::fs::remove_dir_all(&plan.work.dir);
    std::fs::create_dir_all(&plan.work.dir)
        .with_context(|| format!("creating {}", plan.work.dir.display()))?;
    progress.note(&format!(
        "building {} into {} (log: {})",
        plan.image.name,
        entry_dir.display(),
        plan.work.log.display()
    ));
    builder::build(plan, progress).map_err(|e| {
        let _ = std::fs::remove_file(&plan.work.tarball);
        let _ = std::fs::remove_dir_all(&plan.work.entry);
        let _ = std::fs::remove_dir_all(&plan.work.extract);
        e.context(format!(
            "building image {} (log: {})",
            plan.image.name,
            plan.work.log.display()
        ))
    })
}

/// What `--update-lock` changed, as the lines it prints.
fn lock_change_lines(old: Option<&lock::Lock>, new: &lock::Lock) -> Vec<String> {
    let changes = lock::diff(old, new);
    if changes.is_empty() {
        return vec!["lock unchanged".into()];
    }
    std::iter::once(format!("lock changes ({}):", changes.len()))
        .chain(changes.iter().map(|c| format!("  {c}")))
        .collect()
}

/// Shows what `--update-lock` changed and writes the new lock.
fn write_lock(
    image: &ImageDir,
    old: Option<&lock::Lock>,
    new: &lock::Lock,
    progress: &Progress,
) -> Result<()> {
    for line in lock_change_lines(old, new) {
        progress.note(&line);
    }
    let path = image.lock_path();
    std::fs::write(&path, new.render(&image.name))
        .with_context(|| format!("writing {}", path.display()))?;
    progress.note(&format!("wrote {}", path.display()));
    Ok(())
}

/// The builder's manifest with what only the final inputs tell: the key, the lock's sha256 and
/// every input's.
fn with_inputs(mut manifest: Manifest, inputs: &Inputs) -> Manifest {
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
    manifest
}

/// Moves the built entry into the cache under its key. Another process may have put a good
/// entry there meanwhile: that one is kept (with a warning when its image differs, since two
/// builds of the same inputs should not).
fn install_entry(
    root: &Path,
    inputs: &Inputs,
    built: &Path,
    manifest: Manifest,
    progress: &Progress,
) -> Result<ImageEntry> {
    let image = &inputs.image.name;
    let entry_dir = root.join(&inputs.key);
    if entry_dir.exists() {
        let want = cache::want(image, &inputs.key, &inputs.hashes);
        if let EntryState::Good(m) = cache::check_entry(&entry_dir, &want) {
            if m.image_sha256 != manifest.image_sha256 {
                progress.note(&format!(
                    "warning: {} already holds an image with sha256 {}, this build made {}: keeping the existing entry",
                    entry_dir.display(),
                    m.image_sha256,
                    manifest.image_sha256
                ));
            }
            return Ok(ImageEntry {
                dir: entry_dir,
                manifest: *m,
                built: true,
            });
        }
        cache::remove_bad_entry(&entry_dir, &want)?;
    }
    std::fs::rename(built, &entry_dir)
        .with_context(|| format!("moving the new entry to {}", entry_dir.display()))?;
    cache::stamp_entry(&entry_dir, &manifest)?;
    Ok(ImageEntry {
        dir: entry_dir,
        manifest,
        built: true,
    })
}

/// `cargo xtask image ...`: builds or finds the entry, and returns what goes to stdout: the plan's
/// lines, or the entry directory (a caller captures it, e.g. `dir=$(cargo xtask image)`).
/// Progress goes to stderr.
pub fn cli_main_image(opts: &BuildOptions) -> Result<Vec<String>> {
    if opts.plan {
        return plan_image(opts);
    }
    let start = Instant::now();
    let progress = Progress::new("image");
    let entry = ensure_image_with(opts, &progress)?;
    progress.note(&outcome_line(&entry, start.elapsed()));
    Ok(vec![entry.dir.display().to_string()])
}

/// The last progress line of `cargo xtask image`: what was built or found.
fn outcome_line(entry: &ImageEntry, took: Duration) -> String {
    let m = &entry.manifest;
    if entry.built {
        format!(
            "built {} in {:.1} s: image sha256 {}, kernel {}, {} packages, {} mode",
            m.image_name,
            took.as_secs_f64(),
            m.image_sha256,
            m.kernel_release,
            m.packages.len(),
            m.builder_mode
        )
    } else {
        format!(
            "cached {} (verified in {:.3} s): image sha256 {}",
            m.image_name,
            took.as_secs_f64(),
            m.image_sha256
        )
    }
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

    fn shipped() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
    }

    #[test]
    fn the_key_follows_the_effective_definition_the_lock_and_the_guest_files() {
        let inputs = load_inputs(&shipped(), "bookworm").unwrap();
        let names: Vec<&str> = inputs.hashes.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(
            names,
            [
                "image.conf",
                "packages.lock",
                "sharedos-init",
                "initrd-init",
                "sshd_config"
            ]
        );
        assert_eq!(
            inputs.hashes[0].1,
            sharedos_report::digest::sha256_hex(inputs.image.definition.render().as_bytes())
        );
        assert!(inputs.key.starts_with("bookworm-"), "{}", inputs.key);
        // Images sharing the base share its guest files' hashes, and differ in the rest.
        let trixie = load_inputs(&shipped(), "trixie").unwrap();
        assert_eq!(inputs.hashes[2..], trixie.hashes[2..]);
        assert_ne!(inputs.hashes[0], trixie.hashes[0]);
        assert_ne!(inputs.key, trixie.key);
    }

    #[test]
    fn the_lock_to_build_from_or_the_way_to_write_one() {
        let mut inputs = load_inputs(&shipped(), "bookworm").unwrap();
        let lock = lock_to_build_from(&inputs, false, "bookworm")
            .unwrap()
            .unwrap();
        assert_eq!(lock.suite, "bookworm");
        assert!(lock_to_build_from(&inputs, true, "bookworm")
            .unwrap()
            .is_none());
        // --update-lock shows its changes against the lock it replaces.
        assert_eq!(lock_before(&inputs, None), Some(lock.clone()));

        inputs.lock_text = Some("suite bookworm\nnonsense\n".into());
        let e = format!(
            "{:#}",
            lock_to_build_from(&inputs, false, "bookworm").unwrap_err()
        );
        assert!(e.contains("bookworm/packages.lock"), "{e}");
        assert!(
            e.contains("`cargo xtask image --image bookworm --update-lock`"),
            "{e}"
        );
        assert_eq!(lock_before(&inputs, None), None);

        inputs.lock_text = None;
        let e = lock_to_build_from(&inputs, false, "bookworm")
            .unwrap_err()
            .to_string();
        assert!(e.contains("packages.lock does not exist: create it with `cargo xtask image --image bookworm --update-lock`"), "{e}");
        assert!(lock_to_build_from(&inputs, true, "bookworm")
            .unwrap()
            .is_none());
    }

    #[test]
    fn lock_changes_are_listed_one_per_line() {
        let inputs = load_inputs(&shipped(), "bookworm").unwrap();
        let old = lock_to_build_from(&inputs, false, "bookworm")
            .unwrap()
            .unwrap();
        assert_eq!(lock_change_lines(Some(&old), &old), ["lock unchanged"]);
        let mut new = old.clone();
        new.packages.retain(|p| p.name != "criu");
        let lines = lock_change_lines(Some(&old), &new);
        assert_eq!(lines[0], "lock changes (1):");
        assert!(lines[1].starts_with("  - criu "), "{lines:?}");
    }

    #[test]
    fn the_manifest_gets_the_final_inputs() {
        let inputs = load_inputs(&shipped(), "bookworm").unwrap();
        let m = with_inputs(empty_manifest(), &inputs);
        assert_eq!(m.key, inputs.key);
        assert_eq!(m.lock_sha256, inputs.hashes[1].1);
        assert_eq!(m.inputs.len(), 5);
        assert_eq!(m.inputs[0].path, "image.conf");
        assert_eq!(m.inputs[0].sha256, inputs.hashes[0].1);
        // Exactly what the cache checks an entry against.
        let want = cache::want("bookworm", &inputs.key, &inputs.hashes);
        let mut m = m;
        m.image_name = "bookworm".into();
        assert_eq!(want.mismatch(&m), None);
    }

    fn empty_manifest() -> Manifest {
        Manifest {
            manifest_version: manifest::MANIFEST_VERSION,
            image_name: String::new(),
            key: String::new(),
            suite: String::new(),
            architecture: String::new(),
            image_sha256: "1".repeat(64),
            image_bytes: 0,
            kernel_sha256: String::new(),
            initrd_sha256: String::new(),
            lock_sha256: String::new(),
            definition_sha256: String::new(),
            inputs: Vec::new(),
            kernel_release: "6.1.0-50-cloud-amd64".into(),
            packages: Vec::new(),
            mirror: String::new(),
            source_date_epoch: 0,
            builder: String::new(),
            builder_mode: "unshare".into(),
            tool_versions: Default::default(),
            built_at: String::new(),
            build_seconds: 0.0,
            disk_image: String::new(),
            kernel: String::new(),
            initrd: String::new(),
            init_path: String::new(),
            kernel_cmdline: String::new(),
        }
    }

    #[test]
    fn the_outcome_says_built_or_cached_with_the_image_hash() {
        let mut m = empty_manifest();
        m.image_name = "bookworm".into();
        let mut e = ImageEntry {
            dir: "/c/bookworm-x".into(),
            manifest: m,
            built: true,
        };
        let line = outcome_line(&e, Duration::from_millis(81_500));
        assert!(
            line.starts_with("built bookworm in 81.5 s: image sha256 1111"),
            "{line}"
        );
        assert!(
            line.ends_with("kernel 6.1.0-50-cloud-amd64, 0 packages, unshare mode"),
            "{line}"
        );
        e.built = false;
        let line = outcome_line(&e, Duration::from_millis(12));
        assert!(
            line.starts_with("cached bookworm (verified in 0.012 s): image sha256 1111"),
            "{line}"
        );
    }
}
