//! Building an entry: the mirror index check, mmdebstrap to a tarball, the lock check,
//! genext2fs to a disk image, the kernel and initrd out of the tarball, the manifest.
//! Every external command comes from a pure `*_cmd` function below.

use super::contract::{kernel_cmdline, GUEST_INIT_PATH};
use super::definition::{
    Definition, ImageDir, INITRD_INIT_FILE, PID1_FILE, SSHD_CONFIG_FILE, SSHD_CONFIG_PATH,
};
use super::exec::{self, Cmd, Progress};
use super::guest_builder::{self, SharedGuestBuilder};
use super::index;
use super::initrd::{self, build_initrd, BUSYBOX_IN_TAR};
use super::lock::{parse_debs, parse_installed, DebHashes, Lock, PkgKey};
use super::manifest::{
    tool_versions, Manifest, PackageVersion, DISK_FILE, INITRD_FILE, KERNEL_FILE, MANIFEST_VERSION,
};
use super::mode::BuilderMode;
use anyhow::{bail, Context, Result};
use sharedos_report::text::quote;
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

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The mmdebstrap invocation. `work.pins` holds apt preferences that keep every package at its
/// locked version; for `--update-lock` it holds only the extra suites' lower priority
/// ([`index::extra_suite_preferences`]) and apt takes what the mirror has. It is
/// installed and removed either way, because removing it leaves preferences.d with a new
/// mtime: doing the same in both paths keeps their images identical. `guest_files` is the
/// directory holding the guest files (images/base/, or where guest mode copied them).
pub fn mmdebstrap_cmd(
    def: &Definition,
    guest_files: &Path,
    mirror: &str,
    mode: BuilderMode,
    work: &WorkPaths,
) -> Cmd {
    let mut a: Vec<String> = vec![
        "mmdebstrap".into(),
        format!("--mode={}", mode.mmdebstrap_mode()),
        format!("--variant={}", def.variant),
        format!("--arch={}", def.architecture),
        format!("--components={}", def.components.join(",")),
        format!("--include={}", def.include_packages().join(",")),
        "--format=tar".into(),
        // Dated snapshot mirrors serve expired Release files; the lock pins the content.
        "--aptopt=Acquire::Check-Valid-Until \"false\"".into(),
        // Keeps every downloaded .deb until the customize hooks have hashed them;
        // mmdebstrap's cleanup still removes them before the tarball is made.
        "--skip=essential/unlink".into(),
    ];
    for (include, glob) in &def.dpkg_filters {
        let kind = if *include {
            "path-include"
        } else {
            "path-exclude"
        };
        a.push(format!("--dpkgopt={kind}={glob}"));
    }
    a.push("--setup-hook=mkdir -p \"$1/etc/apt/preferences.d\"".into());
    a.push(format!(
        "--setup-hook=upload {} /etc/apt/preferences.d/sharedos-lock",
        p(&work.pins)
    ));
    // One line per suite, each a separate printf argument so that each ends in a newline.
    let sources = def
        .suites()
        .iter()
        .map(|suite| {
            quote(&format!(
                "deb {} {suite} {}",
                def.mirror,
                def.components.join(" ")
            ))
        })
        .collect::<Vec<_>>()
        .join(" ");
    let hosts = format!("127.0.0.1\tlocalhost\n127.0.1.1\t{CANONICAL_HOSTNAME}\n::1\t\tlocalhost ip6-localhost ip6-loopback\n");
    let hooks: Vec<String> = vec![
        // What was installed, and the sha256 of every .deb it came from, for the lock check.
        "chroot \"$1\" dpkg-query -W -f='${Package} ${Version} ${Architecture}\\n' > \"$1/tmp/sharedos-installed.txt\"".into(),
        "(cd \"$1/var/cache/apt/archives\" && sha256sum -- *.deb) > \"$1/tmp/sharedos-debs.txt\"".into(),
        format!("download /tmp/sharedos-installed.txt {}", p(&work.installed)),
        format!("download /tmp/sharedos-debs.txt {}", p(&work.debs)),
        // Random host keys (created by openssh-server's postinst) would make every build differ;
        // the guest creates its one ed25519 key at boot. The stock initramfs is unused: the
        // builder makes a small one. mmdebstrap copies the build host's hostname and
        // resolv.conf in: replace them so the bytes do not depend on the host.
        "rm -f \"$1\"/tmp/sharedos-*.txt \"$1\"/etc/apt/preferences.d/sharedos-lock \"$1\"/etc/ssh/ssh_host_* \"$1\"/boot/initrd.img-* \"$1\"/initrd.img \"$1\"/initrd.img.old".into(),
        format!("upload {} {GUEST_INIT_PATH}", p(&guest_files.join(PID1_FILE))),
        format!("upload {} {SSHD_CONFIG_PATH}", p(&guest_files.join(SSHD_CONFIG_FILE))),
        format!("chmod 0755 \"$1{GUEST_INIT_PATH}\" && chmod 0644 \"$1{SSHD_CONFIG_PATH}\""),
        format!("printf '%s\\n' {sources} > \"$1/etc/apt/sources.list\""),
        format!("printf '%s\\n' {CANONICAL_HOSTNAME} > \"$1/etc/hostname\""),
        format!("printf '%s' {} > \"$1/etc/hosts\"", quote(&hosts)),
        "printf 'nameserver 10.0.2.3\\n' > \"$1/etc/resolv.conf\"".into(),
        "chmod 0644 \"$1/etc/hostname\" \"$1/etc/hosts\" \"$1/etc/resolv.conf\"".into(),
    ];
    for h in hooks {
        a.push(format!("--customize-hook={h}"));
    }
    a.push(def.suite.clone());
    a.push(p(&work.tarball));
    a.push(mirror.to_string());
    // mmdebstrap appends each further MIRROR to the build's sources.list; one starting with
    // `deb ` is taken as it stands.
    for extra in def.extra_suite_names() {
        a.push(format!("deb {mirror} {extra} {}", def.components.join(" ")));
    }
    Cmd::new(a).env("SOURCE_DATE_EPOCH", &def.source_date_epoch.to_string())
}

/// The ext2 filesystem (mounted as ext4) straight from the tarball: owners, modes and setuid
/// bits come from the tar headers, so no root and no fakeroot are needed.
pub fn genext2fs_cmd(def: &Definition, tarball: &Path, out: &Path) -> Cmd {
    let blocks = def.disk_size_mib * 256;
    Cmd::new(vec![
        "genext2fs".into(),
        "-B".into(),
        "4096".into(),
        "-b".into(),
        blocks.to_string(),
        "-N".into(),
        def.inodes.to_string(),
        "-m".into(),
        "0".into(),
        "-L".into(),
        "rootfs".into(),
        "-a".into(),
        p(tarball),
        p(out),
    ])
    // genext2fs stamps the superblock and inodes with the current time unless this is set.
    .env("SOURCE_DATE_EPOCH", &def.source_date_epoch.to_string())
}

/// Extracts `members` (paths as the tarball names them, `./usr/...`) into `dest`.
pub fn tar_extract_cmd(tarball: &Path, dest: &Path, members: &[String]) -> Cmd {
    let mut a = vec![
        "tar".into(),
        "-x".into(),
        "-f".into(),
        p(tarball),
        "-C".into(),
        p(dest),
        "--no-same-owner".into(),
        "--".into(),
    ];
    a.extend(members.iter().cloned());
    Cmd::new(a)
}

pub fn first_tar_members(release: &str) -> Vec<String> {
    vec![
        format!("./boot/vmlinuz-{release}"),
        format!("./usr/lib/modules/{release}/modules.dep"),
        format!("./usr/lib/modules/{release}/modules.builtin"),
        BUSYBOX_IN_TAR.to_string(),
    ]
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

/// Whether a lock was written for this definition's suites and architecture; a definition
/// changed since its lock was written needs a new lock before anything is fetched.
pub fn lock_fits_definition(lock: &Lock, def: &Definition, image: &str) -> Result<()> {
    if lock.suite == def.suite
        && lock.architecture == def.architecture
        && lock.extra_suites == def.extra_suite_names()
    {
        return Ok(());
    }
    let extra = |e: &[String]| e.iter().map(|e| format!(" + {e}")).collect::<String>();
    bail!(
        "the lock is for {}{} {}, the definition says {}{} {}: run \
         `cargo xtask image --image {image} --update-lock`",
        lock.suite,
        extra(&lock.extra_suites),
        lock.architecture,
        def.suite,
        extra(&def.extra_suite_names()),
        def.architecture,
    )
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

/// The lock the image was built to, and the new one when the build wrote it (`--update-lock`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub lock: Lock,
    pub new_lock: Option<Lock>,
}

/// Stage "lock check": what the bootstrap installed, against the lock or as the new lock.
fn check_installed(
    plan: &BuildPlan,
    idx: &index::SuiteIndex,
    progress: &Progress,
) -> Result<Settled> {
    let st = progress.stage("lock check");
    let installed = parse_installed(&read(&plan.work.installed)?)?;
    let debs = parse_debs(&read(&plan.work.debs)?)?;
    let settled = settle_lock(
        &plan.image.definition,
        plan.lock.as_ref(),
        &installed,
        &debs,
        idx,
    )?;
    st.message(&format!(
        "{} packages, kernel {}",
        settled.lock.packages.len(),
        settled.lock.kernel_release
    ));
    st.finish();
    Ok(settled)
}

/// With a lock: the image must hold exactly the locked packages, each from a .deb of the locked
/// sha256. Without one (`--update-lock`): what was installed becomes the lock, each package's
/// suite taken from the mirror's index, and it must agree with that index.
pub fn settle_lock(
    def: &Definition,
    planned: Option<&Lock>,
    installed: &[PkgKey],
    debs: &DebHashes,
    idx: &index::SuiteIndex,
) -> Result<Settled> {
    if let Some(lock) = planned {
        let problems = lock.check_installed(installed, debs);
        if !problems.is_empty() {
            bail!(
                "the image does not hold exactly the locked packages:\n  {}",
                problems.join("\n  ")
            );
        }
        return Ok(Settled {
            lock: lock.clone(),
            new_lock: None,
        });
    }
    let mut l = Lock::from_installed(
        &def.suite,
        &def.architecture,
        &def.kernel_flavour,
        installed,
        debs,
    )?;
    l.assign_suites(
        &def.extra_suite_names(),
        &def.extra_packages(),
        &|k: &PkgKey| idx.suites_of(k),
    )?;
    let disagree = index::missing_pins(&l, idx);
    if !disagree.is_empty() {
        bail!(
            "the downloaded .debs disagree with the mirror's index:\n  {}",
            disagree.join("\n  ")
        );
    }
    Ok(Settled {
        lock: l.clone(),
        new_lock: Some(l),
    })
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

/// The tarball members of the modules the initrd loads (`order` as modules.dep names them).
pub fn module_members(release: &str, order: &[String]) -> Vec<String> {
    order
        .iter()
        .map(|m| format!("./usr/lib/modules/{release}/{m}"))
        .collect()
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
    use super::super::definition::ExtraSuite;
    use super::*;

    fn def() -> Definition {
        Definition::parse(
            "suite = bookworm\nmirror = http://deb.debian.org/debian\ncomponent = main\n\
             architecture = amd64\nvariant = apt\nkernel_flavour = cloud-amd64\npackage = criu\n\
             package = xterm\ndpkg_exclude = /usr/share/doc/*\ndpkg_include = /usr/share/doc/*/copyright\n\
             source_date_epoch = 1700000000\ndisk_size_mib = 1536\n",
        )
        .unwrap()
    }

    #[test]
    fn mmdebstrap_argv_is_exact_where_it_matters() {
        let w = WorkPaths::new(Path::new("/c/tmp/k.1"));
        let c = mmdebstrap_cmd(
            &def(),
            Path::new("/src/images/base"),
            "http://snap/debian",
            BuilderMode::Fakechroot,
            &w,
        );
        let a = &c.argv;
        assert_eq!(
            &a[..7],
            &[
                "mmdebstrap",
                "--mode=fakechroot",
                "--variant=apt",
                "--arch=amd64",
                "--components=main",
                "--include=criu,xterm,linux-image-cloud-amd64",
                "--format=tar",
            ]
        );
        assert_eq!(
            &a[a.len() - 3..],
            &["bookworm", "/c/tmp/k.1/rootfs.tar", "http://snap/debian"]
        );
        let ex = a
            .iter()
            .position(|x| x == "--dpkgopt=path-exclude=/usr/share/doc/*")
            .unwrap();
        let inc = a
            .iter()
            .position(|x| x == "--dpkgopt=path-include=/usr/share/doc/*/copyright")
            .unwrap();
        assert!(ex < inc, "dpkg applies filters in order");
        assert!(a.contains(
            &"--setup-hook=upload /c/tmp/k.1/pins.pref /etc/apt/preferences.d/sharedos-lock"
                .to_string()
        ));
        assert!(a.contains(
            &"--customize-hook=upload /src/images/base/sharedos-init /usr/sbin/sharedos-init"
                .to_string()
        ));
        assert!(a.contains(
            &"--customize-hook=download /tmp/sharedos-debs.txt /c/tmp/k.1/debs.txt".to_string()
        ));
        assert!(a.iter().any(|x| x.contains("etc/ssh/ssh_host_*")));
        // The image names the definition's mirror whatever was fetched from.
        assert!(a
            .iter()
            .any(|x| x.contains("'deb http://deb.debian.org/debian bookworm main'")));
        assert_eq!(
            c.env,
            vec![("SOURCE_DATE_EPOCH".to_string(), "1700000000".to_string())]
        );

        let u = mmdebstrap_cmd(
            &def(),
            Path::new("/src/images/base"),
            "http://snap/debian",
            BuilderMode::Unshare,
            &w,
        );
        assert_eq!(u.argv[1], "--mode=unshare");
        assert_eq!(
            u.argv[2..],
            c.argv[2..],
            "only the mode differs between the modes"
        );
    }

    #[test]
    fn an_extra_suite_adds_a_source_and_chooses_its_packages_suite() {
        let w = WorkPaths::new(Path::new("/c/tmp/k.1"));
        let plain = mmdebstrap_cmd(
            &def(),
            Path::new("/i"),
            "http://snap/debian",
            BuilderMode::Unshare,
            &w,
        );
        assert!(plain
            .argv
            .iter()
            .any(|x| x.ends_with("printf '%s\\n' 'deb http://deb.debian.org/debian bookworm main' > \"$1/etc/apt/sources.list\"")));
        let mut d = def();
        d.extra_suites = vec![ExtraSuite {
            suite: "bookworm-backports".into(),
            packages: vec!["linux-image-cloud-amd64".into()],
        }];
        let c = mmdebstrap_cmd(
            &d,
            Path::new("/i"),
            "http://snap/debian",
            BuilderMode::Unshare,
            &w,
        );
        assert_eq!(
            &c.argv[c.argv.len() - 4..],
            &[
                "bookworm",
                "/c/tmp/k.1/rootfs.tar",
                "http://snap/debian",
                "deb http://snap/debian bookworm-backports main"
            ]
        );
        assert!(c.argv.contains(
            &"--include=criu,xterm,linux-image-cloud-amd64/bookworm-backports".to_string()
        ));
        assert!(c.argv.iter().any(|x| x.ends_with(
            "printf '%s\\n' 'deb http://deb.debian.org/debian bookworm main' \
             'deb http://deb.debian.org/debian bookworm-backports main' > \"$1/etc/apt/sources.list\""
        )), "{:?}", c.argv);

        // A second extra suite: one more source, in the build and in the image, and its
        // packages named with their own suite.
        d.extra_suites.push(ExtraSuite {
            suite: "trixie".into(),
            packages: vec!["criu".into()],
        });
        let c = mmdebstrap_cmd(
            &d,
            Path::new("/i"),
            "http://snap/debian",
            BuilderMode::Unshare,
            &w,
        );
        assert_eq!(
            &c.argv[c.argv.len() - 5..],
            &[
                "bookworm",
                "/c/tmp/k.1/rootfs.tar",
                "http://snap/debian",
                "deb http://snap/debian bookworm-backports main",
                "deb http://snap/debian trixie main"
            ]
        );
        assert!(c.argv.contains(
            &"--include=criu/trixie,xterm,linux-image-cloud-amd64/bookworm-backports".to_string()
        ));
        assert!(
            c.argv.iter().any(|x| x.ends_with(
                "'deb http://deb.debian.org/debian bookworm-backports main' \
             'deb http://deb.debian.org/debian trixie main' > \"$1/etc/apt/sources.list\""
            )),
            "{:?}",
            c.argv
        );
    }

    #[test]
    fn genext2fs_and_tar_argv() {
        let c = genext2fs_cmd(
            &def(),
            Path::new("/w/rootfs.tar"),
            Path::new("/w/entry/disk.img"),
        );
        assert_eq!(
            c.argv,
            [
                "genext2fs",
                "-B",
                "4096",
                "-b",
                "393216",
                "-N",
                "65536",
                "-m",
                "0",
                "-L",
                "rootfs",
                "-a",
                "/w/rootfs.tar",
                "/w/entry/disk.img"
            ]
        );
        assert_eq!(c.env[0].0, "SOURCE_DATE_EPOCH");
        let t = tar_extract_cmd(
            Path::new("/w/r.tar"),
            Path::new("/w/x"),
            &first_tar_members("6.1.0-50-cloud-amd64"),
        );
        assert_eq!(
            t.argv,
            [
                "tar",
                "-x",
                "-f",
                "/w/r.tar",
                "-C",
                "/w/x",
                "--no-same-owner",
                "--",
                "./boot/vmlinuz-6.1.0-50-cloud-amd64",
                "./usr/lib/modules/6.1.0-50-cloud-amd64/modules.dep",
                "./usr/lib/modules/6.1.0-50-cloud-amd64/modules.builtin",
                "./usr/bin/busybox"
            ]
        );
    }

    #[test]
    fn an_unlocked_build_names_each_packages_suite_among_several() {
        let mut d = def();
        d.extra_suites = vec![
            ExtraSuite {
                suite: "bookworm-backports".into(),
                packages: vec!["linux-image-cloud-amd64".into()],
            },
            ExtraSuite {
                suite: "trixie".into(),
                packages: vec!["criu".into()],
            },
        ];
        let installed = [
            key("criu", "4.1.1-1"),
            key("libc6", "2.36-9"),
            key("libnet1", "1.3-1"),
            key("linux-image-6.12.1-cloud-amd64", "6.12.1-1~bpo12+1"),
            key("linux-image-cloud-amd64", "6.12.1-1~bpo12+1"),
        ];
        let debs: DebHashes = installed
            .iter()
            .map(|k| (k.clone(), "a".repeat(64)))
            .collect();
        let mut idx = index::SuiteIndex {
            debs: debs.clone(),
            ..Default::default()
        };
        let mut put = |k: &PkgKey, suites: &[&str]| {
            idx.suites
                .insert(k.clone(), suites.iter().map(|s| s.to_string()).collect());
        };
        put(&installed[0], &["trixie"]);
        put(&installed[1], &["bookworm", "bookworm-backports"]);
        // A dependency only the later suites have: the first of them in the definition's order.
        put(&installed[2], &["trixie", "bookworm-backports"]);
        put(&installed[3], &["bookworm-backports"]);
        put(&installed[4], &["bookworm-backports"]);
        let s = settle_lock(&d, None, &installed, &debs, &idx).unwrap();
        let suite = |n: &str| s.lock.get(n).unwrap().suite.clone();
        assert_eq!(s.lock.extra_suites, ["bookworm-backports", "trixie"]);
        assert_eq!(suite("criu"), "trixie");
        assert_eq!(suite("libc6"), "bookworm");
        assert_eq!(suite("libnet1"), "bookworm-backports");
        assert_eq!(
            suite("linux-image-6.12.1-cloud-amd64"),
            "bookworm-backports"
        );
        assert!(lock_fits_definition(&s.lock, &d, "x").is_ok());
        assert_eq!(Lock::parse(&s.lock.render("x")).unwrap(), s.lock);

        // criu resolved to the main suite's: not the image the definition asks for.
        idx.suites
            .insert(installed[0].clone(), vec!["bookworm".into()]);
        let e = settle_lock(&d, None, &installed, &debs, &idx)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("criu 4.1.1-1 came from bookworm, but the definition takes it from trixie"),
            "{e}"
        );

        // A lock of the first extra suite only does not fit a definition of both.
        let e = lock_fits_definition(&small_lock(Some("bookworm-backports")), &d, "x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(
                "the lock is for bookworm + bookworm-backports amd64, the definition says \
                 bookworm + bookworm-backports + trixie amd64"
            ),
            "{e}"
        );
    }

    fn small_lock(extra: Option<&str>) -> Lock {
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

    fn key(name: &str, version: &str) -> PkgKey {
        (name.into(), version.into(), "amd64".into())
    }

    #[test]
    fn a_lock_of_other_suites_is_refused_with_the_fix() {
        let d = def();
        assert!(lock_fits_definition(&small_lock(None), &d, "bookworm").is_ok());
        let e = lock_fits_definition(&small_lock(Some("bookworm-backports")), &d, "bookworm")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the lock is for bookworm + bookworm-backports amd64, the definition says bookworm amd64"),
            "{e}"
        );
        assert!(
            e.contains("`cargo xtask image --image bookworm --update-lock`"),
            "{e}"
        );
    }

    #[test]
    fn a_locked_build_must_install_exactly_the_lock() {
        let lock = small_lock(None);
        let installed = [
            key("criu", "3.17.1-2"),
            key("linux-image-6.1.0-50-cloud-amd64", "6.1.176-1"),
        ];
        let debs: DebHashes = installed
            .iter()
            .map(|k| (k.clone(), "a".repeat(64)))
            .collect();
        let idx = index::SuiteIndex::default();
        let s = settle_lock(&def(), Some(&lock), &installed, &debs, &idx).unwrap();
        assert_eq!(s.lock, lock);
        assert_eq!(s.new_lock, None);

        let mut other = debs.clone();
        other.insert(key("criu", "3.17.1-2"), "b".repeat(64));
        let e = settle_lock(&def(), Some(&lock), &installed, &other, &idx)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("does not hold exactly the locked packages"),
            "{e}"
        );
        assert!(e.contains("criu 3.17.1-2: the .deb has sha256 bbbb"), "{e}");
    }

    #[test]
    fn an_unlocked_build_writes_the_lock_the_index_agrees_with() {
        let installed = [
            key("criu", "3.17.1-2"),
            key("linux-image-6.1.0-50-cloud-amd64", "6.1.176-1"),
        ];
        let debs: DebHashes = installed
            .iter()
            .map(|k| (k.clone(), "a".repeat(64)))
            .collect();
        let mut idx = index::SuiteIndex {
            debs: debs.clone(),
            ..Default::default()
        };
        for k in &installed {
            idx.suites.insert(k.clone(), vec!["bookworm".into()]);
        }
        let s = settle_lock(&def(), None, &installed, &debs, &idx).unwrap();
        assert_eq!(s.new_lock.as_ref(), Some(&s.lock));
        assert_eq!(s.lock, small_lock(None));

        // The index names another .deb for criu: the download is not what the mirror lists.
        idx.debs.insert(key("criu", "3.17.1-2"), "c".repeat(64));
        let e = settle_lock(&def(), None, &installed, &debs, &idx)
            .unwrap_err()
            .to_string();
        assert!(e.contains("disagree with the mirror's index"), "{e}");
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

    #[test]
    fn the_initrd_modules_are_named_as_the_tarball_names_them() {
        assert_eq!(
            module_members(
                "6.1.0-50-cloud-amd64",
                &["kernel/drivers/block/virtio_blk.ko".into()]
            ),
            ["./usr/lib/modules/6.1.0-50-cloud-amd64/kernel/drivers/block/virtio_blk.ko"]
        );
    }
}
