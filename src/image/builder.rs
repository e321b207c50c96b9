//! Building an entry: the mirror index check, mmdebstrap to a tarball, the lock check,
//! genext2fs to a disk image, the kernel and initrd out of the tarball, the manifest.
//! Every external command comes from a pure `*_cmd` function (`cmds`); the lock check is in
//! `lock_check`.

mod cmds;
mod lock_check;

pub use cmds::{first_tar_members, genext2fs_cmd, mmdebstrap_cmd, module_members, tar_extract_cmd};
pub use lock_check::{lock_fits_definition, settle_lock, Settled};

use lock_check::check_installed;

use super::contract::{kernel_cmdline, GUEST_INIT_PATH};
use super::definition::{ImageDir, INITRD_INIT_FILE};
use super::exec::{self, Cmd, Progress};
use super::guest_builder::{self, SharedGuestBuilder};
use super::index;
use super::initrd::{self, build_initrd};
use super::lock::Lock;
use super::manifest::{
    tool_versions, Manifest, PackageVersion, DISK_FILE, INITRD_FILE, KERNEL_FILE, MANIFEST_VERSION,
};
use super::mode::BuilderMode;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub const CANONICAL_HOSTNAME: &str = "sharedos-guest";

/// Files a build writes under its work directory.
#[derive(Debug, Clone)]
pub struct WorkPaths {
    pub dir: PathBuf,
    pub tarball: PathBuf,
    pub pins: PathBuf,
    pub installed: PathBuf,
    pub debs: PathBuf,
    pub extract: PathBuf,
    pub entry: PathBuf,
    pub log: PathBuf,
}

impl WorkPaths {
    pub fn new(dir: &Path) -> WorkPaths {
        WorkPaths {
            dir: dir.to_path_buf(),
            tarball: dir.join("rootfs.tar"),
            pins: dir.join("pins.pref"),
            installed: dir.join("installed.txt"),
            debs: dir.join("debs.txt"),
            extract: dir.join("extract"),
            entry: dir.join("entry"),
            log: dir.join("build.log"),
        }
    }
}

/// Everything one build needs to know, decided before anything runs.
pub struct BuildPlan {
    pub image: ImageDir,
    pub mirror: String,
    pub mode: BuilderMode,
    pub mode_reason: String,
    pub apt_dir: PathBuf,
    pub work: WorkPaths,
    /// The cache the entry goes to (guest mode finds its builder VM's image there).
    pub cache_root: PathBuf,
    /// None for `--update-lock`: the build resolves what the mirror has.
    pub lock: Option<Lock>,
    /// Runs mmdebstrap in guest mode; None where the caller cannot start a VM.
    pub guest_builder: Option<SharedGuestBuilder>,
}

impl BuildPlan {
    /// What `--plan` prints: the commands, with guest mode's builder VM in place of the host's
    /// mmdebstrap.
    pub fn plan_lines(&self, release_hint: &str) -> Vec<String> {
        let mut out = Vec::new();
        for c in self.commands(release_hint) {
            if self.mode == BuilderMode::Guest && c.argv[0] == "mmdebstrap" {
                match &self.guest_builder {
                    Some(g) => out.extend(g.plan_lines(self)),
                    None => out.push(format!(
                        "# {}",
                        guest_builder::unavailable(&self.image.name)
                    )),
                }
            } else {
                out.push(c.display());
            }
        }
        out
    }

    pub fn commands(&self, release_hint: &str) -> Vec<Cmd> {
        let def = &self.image.definition;
        let entry_disk = self.work.entry.join(DISK_FILE);
        vec![
            Cmd::new(index::apt_update_argv(&self.apt_dir, &def.architecture)),
            mmdebstrap_cmd(
                def,
                &self.image.base_dir,
                &self.mirror,
                self.mode,
                &self.work,
            ),
            tar_extract_cmd(
                &self.work.tarball,
                &self.work.extract,
                &first_tar_members(release_hint),
            ),
            tar_extract_cmd(
                &self.work.tarball,
                &self.work.extract,
                &[format!(
                    "./usr/lib/modules/{release_hint}/<modules from modules.dep>"
                )],
            ),
            genext2fs_cmd(def, &self.work.tarball, &entry_disk),
        ]
    }
}

pub struct BuildResult {
    pub manifest: Manifest,
    pub entry_dir: PathBuf,
    /// Set when `--update-lock` wrote a new lock.
    pub new_lock: Option<Lock>,
}

/// Runs the whole build into `plan.work.entry` and returns the manifest (without key and
/// inputs, which the caller fills in). Each stage is a function of its own below.
pub fn build(plan: &BuildPlan, progress: &Progress) -> Result<BuildResult> {
    let started = std::time::Instant::now();
    create_work_dirs(&plan.work)?;
    let index = check_against_index(plan, progress)?;
    let guest_build = bootstrap(plan, progress)?;
    let settled = check_installed(plan, &index, progress)?;
    extract_kernel_and_initrd(plan, &settled.lock.kernel_release, progress)?;
    make_disk(plan, progress)?;
    let hashes = hash_entry(&plan.work.entry, progress)?;
    let mut tools = tool_versions(plan.mode);
    if let Some(g) = guest_build {
        tools.insert("builder-vm".into(), g.builder);
    }
    let manifest = manifest_of(
        plan,
        &settled.lock,
        hashes,
        BuildRecord {
            tools,
            built_at: sharedos_report::clock::now_rfc3339(),
            build_seconds: (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
        },
    );
    Ok(BuildResult {
        manifest,
        entry_dir: plan.work.entry.clone(),
        new_lock: settled.new_lock,
    })
}

fn create_work_dirs(work: &WorkPaths) -> Result<()> {
    std::fs::create_dir_all(&work.entry)
        .with_context(|| format!("creating {}", work.entry.display()))?;
    std::fs::create_dir_all(&work.extract).context("creating the extraction directory")
}

/// Stage "mirror index": fetches the index, checks the lock against the definition and the
/// mirror (so a stale pin fails in seconds, before the bootstrap), and writes the apt pins.
fn check_against_index(plan: &BuildPlan, progress: &Progress) -> Result<index::SuiteIndex> {
    let def = &plan.image.definition;
    let work = &plan.work;
    let st = progress.stage("mirror index");
    index::prepare_dir(&plan.apt_dir, def, &plan.mirror)?;
    // apt runs with its own locking off (it would want root's lock files), so two builds
    // sharing this index take turns here instead.
    let lock_file = std::fs::File::create(plan.apt_dir.join(".rig-lock"))
        .context("creating the index lock file")?;
    let index_lock = nix::fcntl::Flock::lock(lock_file, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| e)
        .context("locking the package index directory")?;
    exec::run(
        &Cmd::new(index::apt_update_argv(&plan.apt_dir, &def.architecture)),
        &st,
        &work.log,
        None,
    )
    .with_context(|| {
        format!(
            "fetching the package index of {} {}",
            plan.mirror, def.suite
        )
    })?;
    let idx = index::read_index(&plan.apt_dir.join("state/lists"), &def.suites())?;
    match &plan.lock {
        Some(lock) => {
            lock_fits_definition(lock, def, &plan.image.name)?;
            let problems = index::missing_pins(lock, &idx);
            if !problems.is_empty() {
                bail!(index::stale_pins_message(
                    &plan.image.name,
                    &plan.mirror,
                    &problems
                ));
            }
            std::fs::write(&work.pins, index::pin_preferences(lock)).context("writing apt pins")?;
            st.message(&format!(
                "all {} pins are on the mirror",
                lock.packages.len()
            ));
        }
        None => std::fs::write(&work.pins, index::extra_suite_preferences(def))
            .context("writing apt's preferences for the extra suites")?,
    }
    drop(index_lock);
    st.finish();
    Ok(idx)
}

/// Stage "mmdebstrap": the root tarball, on the host or in the builder VM (whose description
/// the manifest records).
fn bootstrap(plan: &BuildPlan, progress: &Progress) -> Result<Option<guest_builder::GuestBuild>> {
    let st = progress.stage(&format!("mmdebstrap ({} mode)", plan.mode.as_str()));
    let guest_build = if plan.mode == BuilderMode::Guest {
        let Some(g) = &plan.guest_builder else {
            return Err(guest_builder::unavailable(&plan.image.name));
        };
        Some(g.mmdebstrap(plan, progress, &|m| st.message(m))?)
    } else {
        let cmd = mmdebstrap_cmd(
            &plan.image.definition,
            &plan.image.base_dir,
            &plan.mirror,
            plan.mode,
            &plan.work,
        );
        exec::run(&cmd, &st, &plan.work.log, Some(&plan.work.dir))?;
        None
    };
    st.finish();
    Ok(guest_build)
}
/// Stage "kernel and initrd": the kernel out of the tarball, and the small initrd from the
/// virtio modules' closure, busybox and the base's initrd-init.
fn extract_kernel_and_initrd(plan: &BuildPlan, release: &str, progress: &Progress) -> Result<()> {
    let work = &plan.work;
    let st = progress.stage("kernel and initrd");
    exec::run(
        &tar_extract_cmd(&work.tarball, &work.extract, &first_tar_members(release)),
        &st,
        &work.log,
        None,
    )
    .with_context(|| format!("taking kernel {release} out of the tarball"))?;
    let mods_dir = work.extract.join(format!("usr/lib/modules/{release}"));
    let order = initrd::module_closure(
        &read(&mods_dir.join("modules.dep"))?,
        &read(&mods_dir.join("modules.builtin"))?,
        &initrd::WANTED_MODULES,
    )?;
    exec::run(
        &tar_extract_cmd(
            &work.tarball,
            &work.extract,
            &module_members(release, &order),
        ),
        &st,
        &work.log,
        None,
    )?;
    let init_script =
        std::fs::read(plan.image.file(INITRD_INIT_FILE)).context("reading the initrd's init")?;
    let cpio = build_initrd(
        &work.extract,
        release,
        &init_script,
        &order,
        plan.image.definition.source_date_epoch,
    )?;
    std::fs::write(work.entry.join(INITRD_FILE), cpio).context("writing the initrd")?;
    std::fs::rename(
        work.extract.join(format!("boot/vmlinuz-{release}")),
        work.entry.join(KERNEL_FILE),
    )
    .with_context(|| format!("the tarball has no /boot/vmlinuz-{release}"))?;
    st.finish();
    Ok(())
}

/// Stage "genext2fs": the disk image of the entry.
fn make_disk(plan: &BuildPlan, progress: &Progress) -> Result<()> {
    let st = progress.stage("genext2fs");
    exec::run(
        &genext2fs_cmd(
            &plan.image.definition,
            &plan.work.tarball,
            &plan.work.entry.join(DISK_FILE),
        ),
        &st,
        &plan.work.log,
        None,
    )?;
    st.finish();
    Ok(())
}

/// The sha256 of each file of an entry (and the disk's size).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryHashes {
    pub image_sha256: String,
    pub image_bytes: u64,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
}

/// Stage "hashing".
fn hash_entry(entry: &Path, progress: &Progress) -> Result<EntryHashes> {
    let st = progress.stage("hashing");
    let (image_sha256, image_bytes) = sharedos_report::digest::sha256_file(&entry.join(DISK_FILE))?;
    let (kernel_sha256, _) = sharedos_report::digest::sha256_file(&entry.join(KERNEL_FILE))?;
    let (initrd_sha256, _) = sharedos_report::digest::sha256_file(&entry.join(INITRD_FILE))?;
    st.finish();
    Ok(EntryHashes {
        image_sha256,
        image_bytes,
        kernel_sha256,
        initrd_sha256,
    })
}

/// What the manifest records about the build itself rather than the image.
#[derive(Debug, Clone, PartialEq)]
pub struct BuildRecord {
    pub tools: std::collections::BTreeMap<String, String>,
    pub built_at: String,
    pub build_seconds: f64,
}

/// The manifest of a finished build; key, lock hash and inputs are left empty for the caller,
/// which knows them only after `--update-lock` has written the lock.
pub fn manifest_of(plan: &BuildPlan, lock: &Lock, h: EntryHashes, record: BuildRecord) -> Manifest {
    let def = &plan.image.definition;
    Manifest {
        manifest_version: MANIFEST_VERSION,
        image_name: plan.image.name.clone(),
        key: String::new(),
        suite: def.suite.clone(),
        architecture: def.architecture.clone(),
        image_sha256: h.image_sha256,
        image_bytes: h.image_bytes,
        kernel_sha256: h.kernel_sha256,
        initrd_sha256: h.initrd_sha256,
        lock_sha256: String::new(),
        definition_sha256: sharedos_report::digest::sha256_hex(
            plan.image.definition_text.as_bytes(),
        ),
        inputs: Vec::new(),
        kernel_release: lock.kernel_release.clone(),
        packages: lock
            .packages
            .iter()
            .map(|p| PackageVersion {
                name: p.name.clone(),
                version: p.version.clone(),
            })
            .collect(),
        mirror: plan.mirror.clone(),
        source_date_epoch: def.source_date_epoch,
        builder: "mmdebstrap".into(),
        builder_mode: plan.mode.as_str().into(),
        tool_versions: record.tools,
        built_at: record.built_at,
        build_seconds: record.build_seconds,
        disk_image: DISK_FILE.into(),
        kernel: KERNEL_FILE.into(),
        initrd: INITRD_FILE.into(),
        init_path: GUEST_INIT_PATH.into(),
        kernel_cmdline: kernel_cmdline(),
    }
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::super::definition::Definition;
    use super::*;

    pub(super) fn def() -> Definition {
        Definition::parse(
            "suite = bookworm\nmirror = http://deb.debian.org/debian\ncomponent = main\n\
             architecture = amd64\nvariant = apt\nkernel_flavour = cloud-amd64\npackage = criu\n\
             package = xterm\ndpkg_exclude = /usr/share/doc/*\ndpkg_include = /usr/share/doc/*/copyright\n\
             source_date_epoch = 1700000000\ndisk_size_mib = 1536\n",
        )
        .unwrap()
    }

    pub(super) fn small_lock(extra: Option<&str>) -> Lock {
        let h = "a".repeat(64);
        let text = match extra {
            None => format!(
                "suite bookworm\narchitecture amd64\nkernel-release 6.1.0-50-cloud-amd64\n\
                 package criu 3.17.1-2 amd64 {h}\n\
                 package linux-image-6.1.0-50-cloud-amd64 6.1.176-1 amd64 {h}\n"
            ),
            Some(e) => format!(
                "suite bookworm\nextra-suite {e}\narchitecture amd64\n\
                 kernel-release 6.1.0-50-cloud-amd64\n\
                 package criu 3.17.1-2 amd64 {h} bookworm\n\
                 package linux-image-6.1.0-50-cloud-amd64 6.1.176-1 amd64 {h} {e}\n"
            ),
        };
        Lock::parse(&text).unwrap()
    }

    #[test]
    fn the_manifest_records_the_image_the_lock_and_the_build() {
        let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
        let plan = BuildPlan {
            image: ImageDir::load(&images, "bookworm").unwrap(),
            mirror: "http://snap/debian".into(),
            mode: BuilderMode::Fakechroot,
            mode_reason: String::new(),
            apt_dir: "/c/apt".into(),
            work: WorkPaths::new(Path::new("/c/tmp/k.1")),
            cache_root: "/c".into(),
            lock: None,
            guest_builder: None,
        };
        let lock = small_lock(None);
        let m = manifest_of(
            &plan,
            &lock,
            EntryHashes {
                image_sha256: "1".repeat(64),
                image_bytes: 1536 << 20,
                kernel_sha256: "2".repeat(64),
                initrd_sha256: "3".repeat(64),
            },
            BuildRecord {
                tools: [("mmdebstrap".to_string(), "mmdebstrap 1.3.5".to_string())].into(),
                built_at: "2026-01-01T00:00:00Z".into(),
                build_seconds: 81.5,
            },
        );
        assert_eq!(m.image_name, "bookworm");
        assert_eq!(m.suite, "bookworm");
        assert_eq!(m.image_sha256, "1".repeat(64));
        assert_eq!(m.kernel_sha256, "2".repeat(64));
        assert_eq!(m.initrd_sha256, "3".repeat(64));
        assert_eq!(m.kernel_release, "6.1.0-50-cloud-amd64");
        assert_eq!(m.package_version("criu"), Some("3.17.1-2"));
        assert_eq!(m.packages.len(), 2);
        assert_eq!(m.mirror, "http://snap/debian");
        assert_eq!(m.builder_mode, "fakechroot");
        assert_eq!(m.build_seconds, 81.5);
        assert_eq!(m.init_path, GUEST_INIT_PATH);
        assert_eq!(
            m.definition_sha256,
            sharedos_report::digest::sha256_hex(plan.image.definition.render().as_bytes())
        );
        // Left for the caller, which knows them once the lock is final.
        assert!(m.key.is_empty() && m.lock_sha256.is_empty() && m.inputs.is_empty());
    }
}
