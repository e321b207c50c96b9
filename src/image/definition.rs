//! The image definition: `images/<name>/image.conf`, a reviewable `key = value` file, plus the
//! guest files next to it that end up in the image or the initrd.

use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub const DEFINITION_FILE: &str = "image.conf";
pub const LOCK_FILE: &str = "packages.lock";
/// The guest's PID 1, installed at [`GUEST_INIT_PATH`](super::contract::GUEST_INIT_PATH).
pub const PID1_FILE: &str = "sharedos-init";
/// The initrd's /init.
pub const INITRD_INIT_FILE: &str = "initrd-init";
/// sshd config, installed at [`SSHD_CONFIG_PATH`].
pub const SSHD_CONFIG_FILE: &str = "sshd_config";

pub const SSHD_CONFIG_PATH: &str = "/etc/ssh/sharedos_sshd_config";

/// The files of an image directory that decide the image's bytes, besides the lock.
pub const GUEST_FILES: [&str; 3] = [PID1_FILE, INITRD_INIT_FILE, SSHD_CONFIG_FILE];

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Definition {
    pub suite: String,
    pub mirror: String,
    pub components: Vec<String>,
    pub architecture: String,
    pub variant: String,
    pub kernel_flavour: String,
    pub packages: Vec<String>,
    /// A second suite on the same mirror and components (e.g. `bookworm-backports`), from which
    /// only `extra_packages` are taken; everything else still comes from `suite`.
    pub extra_suite: Option<String>,
    /// Packages taken from `extra_suite` (with whatever of their dependencies only it has).
    pub extra_packages: Vec<String>,
    /// dpkg path filters in file order: (is_include, glob).
    pub dpkg_filters: Vec<(bool, String)>,
    pub source_date_epoch: u64,
    pub disk_size_mib: u64,
    pub inodes: u64,
}

impl Definition {
    /// The kernel meta package, e.g. `linux-image-cloud-amd64`.
    pub fn kernel_package(&self) -> String {
        format!("linux-image-{}", self.kernel_flavour)
    }

    /// The requested packages plus the kernel, in file order, without repeats. A package taken
    /// from the extra suite is written `name/suite`, apt's way of choosing a package's suite (apt
    /// then takes from that suite the dependencies only it can satisfy).
    pub fn include_packages(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.packages.iter().cloned().chain([self.kernel_package()]) {
            let p = match &self.extra_suite {
                Some(extra) if self.extra_packages.contains(&p) => format!("{p}/{extra}"),
                _ => p,
            };
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// The requested packages plus the kernel, names only.
    fn include_packages_plain(&self) -> Vec<String> {
        self.packages
            .iter()
            .cloned()
            .chain([self.kernel_package()])
            .collect()
    }

    /// Every suite the image takes packages from: `suite` first, then the extra one.
    pub fn suites(&self) -> Vec<String> {
        std::iter::once(self.suite.clone())
            .chain(self.extra_suite.clone())
            .collect()
    }

    pub fn parse(text: &str) -> Result<Definition> {
        let mut suite = None;
        let mut mirror = None;
        let mut components = Vec::new();
        let mut architecture = None;
        let mut variant = None;
        let mut kernel_flavour = None;
        let mut extra_suite = None;
        let mut extra_packages = Vec::new();
        let mut packages = Vec::new();
        let mut dpkg_filters = Vec::new();
        let mut sde = None;
        let mut disk = None;
        let mut inodes = None;
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (k, v) = line
                .split_once('=')
                .with_context(|| format!("line {}: expected `key = value`, got {raw:?}", i + 1))?;
            let (k, v) = (k.trim(), v.trim().to_string());
            if v.is_empty() {
                bail!("line {}: {k} has no value", i + 1);
            }
            let once = |slot: &mut Option<String>| -> Result<()> {
                if slot.replace(v.clone()).is_some() {
                    bail!("line {}: {k} given twice", i + 1);
                }
                Ok(())
            };
            let number = || -> Result<u64> {
                v.parse::<u64>().with_context(|| {
                    format!("line {}: {k} must be a whole number, got {v:?}", i + 1)
                })
            };
            match k {
                "suite" => once(&mut suite)?,
                "mirror" => once(&mut mirror)?,
                "architecture" => once(&mut architecture)?,
                "variant" => once(&mut variant)?,
                "kernel_flavour" => once(&mut kernel_flavour)?,
                "extra_suite" => once(&mut extra_suite)?,
                "extra_suite_package" => extra_packages.push(v.clone()),
                "component" => components.push(v.clone()),
                "package" => packages.push(v.clone()),
                "dpkg_exclude" => dpkg_filters.push((false, v.clone())),
                "dpkg_include" => dpkg_filters.push((true, v.clone())),
                "source_date_epoch" => sde = Some(number()?),
                "disk_size_mib" => disk = Some(number()?),
                "inodes" => inodes = Some(number()?),
                other => bail!("line {}: unknown key {other:?}", i + 1),
            }
            if v.split_whitespace().count() != 1 {
                bail!("line {}: {k} takes one word, got {v:?}", i + 1);
            }
        }
        let need = |o: Option<String>, k: &str| o.with_context(|| format!("{k} is missing"));
        let def = Definition {
            suite: need(suite, "suite")?,
            mirror: need(mirror, "mirror")?,
            components,
            architecture: need(architecture, "architecture")?,
            variant: need(variant, "variant")?,
            kernel_flavour: need(kernel_flavour, "kernel_flavour")?,
            packages,
            extra_suite,
            extra_packages,
            dpkg_filters,
            source_date_epoch: sde.context("source_date_epoch is missing")?,
            disk_size_mib: disk.context("disk_size_mib is missing")?,
            inodes: inodes.unwrap_or(65536),
        };
        if def.components.is_empty() {
            bail!("no component given");
        }
        match (&def.extra_suite, def.extra_packages.is_empty()) {
            (None, false) => bail!(
                "extra_suite_package is given but extra_suite is not: name the suite they come from"
            ),
            (Some(s), true) => bail!(
                "extra_suite = {s} takes no package: add `extra_suite_package = NAME` lines, e.g. \
                 extra_suite_package = {}",
                def.kernel_package()
            ),
            (Some(s), false) if *s == def.suite => {
                bail!("extra_suite = {s} is the image's own suite")
            }
            _ => {}
        }
        let wanted = def.include_packages_plain();
        for p in &def.extra_packages {
            if !wanted.contains(p) {
                bail!(
                    "extra_suite_package = {p} is neither a `package` nor the kernel {}: \
                     list it as a package too",
                    def.kernel_package()
                );
            }
        }
        if def.disk_size_mib < 256 {
            bail!(
                "disk_size_mib {} is too small for a Debian root",
                def.disk_size_mib
            );
        }
        Ok(def)
    }
}

/// An image directory: its definition and where its files are.
#[derive(Debug, Clone)]
pub struct ImageDir {
    pub name: String,
    pub dir: PathBuf,
    pub definition: Definition,
    pub definition_text: String,
}

impl ImageDir {
    pub fn load(images_dir: &Path, name: &str) -> Result<ImageDir> {
        require_image(images_dir, name)?;
        let dir = images_dir.join(name);
        let path = dir.join(DEFINITION_FILE);
        let definition_text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading the image definition {}", path.display()))?;
        let definition = Definition::parse(&definition_text)
            .with_context(|| format!("parsing {}", path.display()))?;
        Ok(ImageDir {
            name: name.to_string(),
            dir,
            definition,
            definition_text,
        })
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    pub fn file(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// The images under `images_dir`: the directories holding an image.conf, sorted by name.
pub fn list_images(images_dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(images_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter(|e| e.path().join(DEFINITION_FILE).is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// Fails, naming the images that do exist, when `name` is not an image under `images_dir`.
/// Cheap on purpose: callers check a name before anything costly (the gate binary's build, a
/// report directory) so that a typo costs nothing.
pub fn require_image(images_dir: &Path, name: &str) -> Result<()> {
    if name.is_empty() || name.contains('/') || name.starts_with('.') {
        bail!("image name {name:?} is not a plain directory name");
    }
    if images_dir.join(name).join(DEFINITION_FILE).is_file() {
        return Ok(());
    }
    let known = list_images(images_dir);
    let listed = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    bail!(
        "there is no image {name:?} in {}: the images there are {listed}.\n\
         Name one of those, or add an image as a new directory {}/{name}/ holding {DEFINITION_FILE} \
         (see images/README.md)",
        images_dir.display(),
        images_dir.display()
    )
}

/// Where `images/` is: an explicit choice, then `$SHAREDOS_RIG_IMAGES`, then `./images` when it
/// holds the image, then the source tree this binary was built from.
/// Always absolute: the builder hands these paths to mmdebstrap's hooks, which run elsewhere.
pub fn find_images_dir(explicit: Option<&Path>, image: &str) -> PathBuf {
    let found = if let Some(p) = explicit {
        p.to_path_buf()
    } else if let Some(p) = std::env::var_os("SHAREDOS_RIG_IMAGES") {
        PathBuf::from(p)
    } else if Path::new("images")
        .join(image)
        .join(DEFINITION_FILE)
        .is_file()
    {
        PathBuf::from("images")
    } else {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
    };
    std::path::absolute(&found).unwrap_or(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "# c\nsuite = bookworm\nmirror = http://m/debian\ncomponent = main\n\
        architecture = amd64\nvariant = apt\nkernel_flavour = cloud-amd64\npackage = criu\n\
        package = xterm\ndpkg_exclude = /usr/share/doc/*\ndpkg_include = /usr/share/doc/*/copyright\n\
        source_date_epoch = 1700000000\ndisk_size_mib = 1024\n";

    #[test]
    fn images_dir_is_absolute_even_when_given_relative() {
        let d = find_images_dir(Some(Path::new("images")), "bookworm");
        assert!(d.is_absolute(), "{}", d.display());
        assert!(d.ends_with("images"));
    }

    #[test]
    fn parses_lists_and_keeps_filter_order() {
        let d = Definition::parse(SAMPLE).unwrap();
        assert_eq!(d.suite, "bookworm");
        assert_eq!(
            d.include_packages(),
            ["criu", "xterm", "linux-image-cloud-amd64"]
        );
        assert_eq!(
            d.dpkg_filters,
            vec![
                (false, "/usr/share/doc/*".to_string()),
                (true, "/usr/share/doc/*/copyright".to_string())
            ]
        );
        assert_eq!(d.inodes, 65536);
    }

    #[test]
    fn takes_the_kernel_from_an_extra_suite() {
        let d = Definition::parse(&format!(
            "{SAMPLE}extra_suite = bookworm-backports\nextra_suite_package = linux-image-cloud-amd64\n"
        ))
        .unwrap();
        assert_eq!(d.extra_suite.as_deref(), Some("bookworm-backports"));
        assert_eq!(
            d.include_packages(),
            [
                "criu",
                "xterm",
                "linux-image-cloud-amd64/bookworm-backports"
            ]
        );
        assert_eq!(d.suites(), ["bookworm", "bookworm-backports"]);
        assert_eq!(Definition::parse(SAMPLE).unwrap().suites(), ["bookworm"]);
        assert!(Definition::parse(SAMPLE).unwrap().extra_packages.is_empty());

        let e = Definition::parse(&format!("{SAMPLE}extra_suite_package = criu\n")).unwrap_err();
        assert!(e.to_string().contains("extra_suite is not"), "{e}");
        let e =
            Definition::parse(&format!("{SAMPLE}extra_suite = bookworm-backports\n")).unwrap_err();
        assert!(
            e.to_string()
                .contains("extra_suite_package = linux-image-cloud-amd64"),
            "{e}"
        );
        let e = Definition::parse(&format!(
            "{SAMPLE}extra_suite = bookworm\nextra_suite_package = criu\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("the image's own suite"), "{e}");
        let e = Definition::parse(&format!(
            "{SAMPLE}extra_suite = bookworm-backports\nextra_suite_package = qemu\n"
        ))
        .unwrap_err();
        assert!(e.to_string().contains("list it as a package"), "{e}");
    }

    #[test]
    fn rejects_unknown_repeated_and_missing_keys() {
        let e = Definition::parse(&format!("{SAMPLE}colour = red\n")).unwrap_err();
        assert!(e.to_string().contains("unknown key"), "{e}");
        let e = Definition::parse(&format!("{SAMPLE}suite = trixie\n")).unwrap_err();
        assert!(e.to_string().contains("given twice"), "{e}");
        let e = Definition::parse(&SAMPLE.replace("suite = bookworm\n", "")).unwrap_err();
        assert!(e.to_string().contains("suite is missing"), "{e}");
        let e = Definition::parse(&format!("{SAMPLE}package = a b\n")).unwrap_err();
        assert!(e.to_string().contains("one word"), "{e}");
    }

    #[test]
    fn an_unknown_image_is_refused_with_the_images_that_exist() {
        let dir = std::env::temp_dir().join(format!("images-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for n in ["zeta", "alpha"] {
            std::fs::create_dir_all(dir.join(n)).unwrap();
            std::fs::write(dir.join(n).join(DEFINITION_FILE), SAMPLE).unwrap();
        }
        // A directory without a definition is not an image.
        std::fs::create_dir_all(dir.join("notes")).unwrap();
        assert_eq!(list_images(&dir), ["alpha", "zeta"]);
        assert!(require_image(&dir, "alpha").is_ok());
        let e = require_image(&dir, "nosuch").unwrap_err().to_string();
        assert!(e.contains("no image \"nosuch\""), "{e}");
        assert!(e.contains("the images there are alpha, zeta"), "{e}");
        let e = require_image(&dir, "notes").unwrap_err().to_string();
        assert!(e.contains("alpha, zeta"), "{e}");
        assert!(require_image(&dir, "../alpha").is_err());
        let e = require_image(&dir.join("missing"), "x")
            .unwrap_err()
            .to_string();
        assert!(e.contains("the images there are none"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_shipped_bookworm_definition_parses() {
        let dir = ImageDir::load(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("images"),
            "bookworm",
        )
        .unwrap();
        let pk = dir.definition.include_packages();
        for p in [
            "criu",
            "xvfb",
            "xterm",
            "openssh-server",
            "iptables",
            "linux-image-cloud-amd64",
        ] {
            assert!(pk.iter().any(|x| x == p), "{p} missing");
        }
    }
}
