//! The image definition: what an image is made of, read from `key = value` files under
//! `images/`. Every image builds on `images/base/` (the settings every image shares and the
//! guest files that go into every image and initrd), optionally on other images, and adds its own
//! `images/<name>/image.conf`; [`compose`] says how those files are merged.

use super::compose::{self, Layer, Level};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

pub const DEFINITION_FILE: &str = "image.conf";
pub const LOCK_FILE: &str = "packages.lock";
/// The directory under images/ every image builds on: its image.conf holds the shared
/// settings, and the guest files live there, once. It is not an image itself.
pub const BASE_DIR: &str = "base";
/// The guest's PID 1, installed at [`GUEST_INIT_PATH`](super::contract::GUEST_INIT_PATH).
pub const PID1_FILE: &str = "sharedos-init";
/// The initrd's /init.
pub const INITRD_INIT_FILE: &str = "initrd-init";
/// sshd config, installed at [`SSHD_CONFIG_PATH`].
pub const SSHD_CONFIG_FILE: &str = "sshd_config";

pub const SSHD_CONFIG_PATH: &str = "/etc/ssh/sharedos_sshd_config";

/// The files of images/base/ that decide every image's bytes, besides definitions and locks.
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
    /// Further suites on the same mirror and components (e.g. `bookworm-backports`), each with
    /// the packages taken from it; everything else still comes from `suite`.
    pub extra_suites: Vec<ExtraSuite>,
    /// dpkg path filters in file order: (is_include, glob).
    pub dpkg_filters: Vec<(bool, String)>,
    pub source_date_epoch: u64,
    pub disk_size_mib: u64,
    pub inodes: u64,
}

/// A suite besides the image's own, and the packages taken from it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtraSuite {
    pub suite: String,
    /// Taken from `suite` (with whatever of their dependencies only it has), in file order.
    pub packages: Vec<String>,
}

impl Definition {
    /// The extra suite a package is taken from, if any.
    pub fn extra_suite_of(&self, package: &str) -> Option<&str> {
        self.extra_suites
            .iter()
            .find(|e| e.packages.iter().any(|p| p == package))
            .map(|e| e.suite.as_str())
    }

    /// Every package taken from an extra suite, with that suite: (package, suite).
    pub fn extra_packages(&self) -> Vec<(String, String)> {
        self.extra_suites
            .iter()
            .flat_map(|e| e.packages.iter().map(|p| (p.clone(), e.suite.clone())))
            .collect()
    }

    /// The extra suites' names, in order.
    pub fn extra_suite_names(&self) -> Vec<String> {
        self.extra_suites.iter().map(|e| e.suite.clone()).collect()
    }

    /// The kernel meta package, e.g. `linux-image-cloud-amd64`.
    pub fn kernel_package(&self) -> String {
        format!("linux-image-{}", self.kernel_flavour)
    }

    /// The requested packages plus the kernel, in file order, without repeats. A package taken
    /// from an extra suite is written `name/suite`, apt's way of choosing a package's suite (apt
    /// then takes from that suite the dependencies only it can satisfy).
    pub fn include_packages(&self) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for p in self.packages.iter().cloned().chain([self.kernel_package()]) {
            let p = match self.extra_suite_of(&p) {
                Some(extra) => format!("{p}/{extra}"),
                None => p,
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

    /// Every suite the image takes packages from: `suite` first, then the extra ones in order.
    pub fn suites(&self) -> Vec<String> {
        std::iter::once(self.suite.clone())
            .chain(self.extra_suite_names())
            .collect()
    }

    /// A complete definition in one text, composed of nothing else (see [`compose`] for the
    /// rules of a file and for how an image's files are merged).
    pub fn parse(text: &str) -> Result<Definition> {
        compose::compose(&[Layer::parse(text, Level::Whole, "")?])
    }

    /// What a definition must hold whichever files it was composed from.
    pub(super) fn check(&self) -> Result<()> {
        if self.components.is_empty() {
            bail!("no component given");
        }
        let wanted = self.include_packages_plain();
        let several = self.extra_suites.len() > 1;
        for (i, e) in self.extra_suites.iter().enumerate() {
            let s = &e.suite;
            if *s == self.suite {
                bail!("extra_suite = {s} is the image's own suite");
            }
            if self.extra_suites[..i].iter().any(|x| x.suite == *s) {
                bail!("extra_suite = {s} is given twice");
            }
            if e.packages.is_empty() {
                // With one extra suite a bare name is enough; with several, each names its own.
                let example = if several {
                    format!("{}/{s}", self.kernel_package())
                } else {
                    self.kernel_package()
                };
                bail!(
                    "extra_suite = {s} takes no package: add `extra_suite_package = NAME` lines, \
                     e.g. extra_suite_package = {example}"
                );
            }
            for p in &e.packages {
                if !wanted.contains(p) {
                    bail!(
                        "extra_suite_package = {p} is neither a `package` nor the kernel {}: \
                         list it as a package too",
                        self.kernel_package()
                    );
                }
                if let Some(other) = self.extra_suites[..i]
                    .iter()
                    .find(|x| x.packages.contains(p))
                {
                    bail!(
                        "{p} is taken from two extra suites, {} and {s}: keep one \
                         (`extra_suite_package = !{p}/{}` removes the other)",
                        other.suite,
                        other.suite
                    );
                }
            }
        }
        if self.disk_size_mib < 256 {
            bail!(
                "disk_size_mib {} is too small for a Debian root",
                self.disk_size_mib
            );
        }
        Ok(())
    }

    /// The definition as one self-contained `key = value` text, every key in a fixed order and
    /// every list in its order: equal definitions render to equal bytes, whatever files they
    /// were composed from, so the cache key changes with what an image is and not with how its
    /// files are laid out or commented. [`Definition::parse`] reads it back to the same value.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let mut put = |k: &str, v: &str| {
            out.push_str(k);
            out.push_str(" = ");
            out.push_str(v);
            out.push('\n');
        };
        put("suite", &self.suite);
        for e in &self.extra_suites {
            put("extra_suite", &e.suite);
        }
        // One extra suite: bare names, as every definition of one extra suite has always
        // rendered (the cache keys of those images stay). Several: each names its suite.
        let several = self.extra_suites.len() > 1;
        for e in &self.extra_suites {
            for p in &e.packages {
                if several {
                    put("extra_suite_package", &format!("{p}/{}", e.suite));
                } else {
                    put("extra_suite_package", p);
                }
            }
        }
        put("mirror", &self.mirror);
        for c in &self.components {
            put("component", c);
        }
        put("architecture", &self.architecture);
        put("variant", &self.variant);
        put("kernel_flavour", &self.kernel_flavour);
        for p in &self.packages {
            put("package", p);
        }
        for (include, glob) in &self.dpkg_filters {
            put(
                if *include {
                    "dpkg_include"
                } else {
                    "dpkg_exclude"
                },
                glob,
            );
        }
        put("source_date_epoch", &self.source_date_epoch.to_string());
        put("disk_size_mib", &self.disk_size_mib.to_string());
        put("inodes", &self.inodes.to_string());
        out
    }
}

/// An image: its own directory (its lock, its expected gates), the base's (the guest files) and
/// the definition composed from the base, the images it inherits and its own image.conf.
#[derive(Debug, Clone)]
pub struct ImageDir {
    pub name: String,
    /// `images/<name>/`.
    pub dir: PathBuf,
    /// `images/base/`, where the guest files are.
    pub base_dir: PathBuf,
    pub definition: Definition,
    /// The effective definition rendered canonically ([`Definition::render`]): what the cache key
    /// and the manifest hash.
    pub definition_text: String,
    /// The image.conf files composed, base first and this image's own last.
    pub sources: Vec<PathBuf>,
}

impl ImageDir {
    pub fn load(images_dir: &Path, name: &str) -> Result<ImageDir> {
        require_image(images_dir, name)?;
        let base_dir = images_dir.join(BASE_DIR);
        let base_path = base_dir.join(DEFINITION_FILE);
        let base = read_layer(&base_path, Level::Base).with_context(|| {
            format!(
                "every image builds on {}: restore it from the repository (see images/README.md)",
                base_path.display()
            )
        })?;
        let chain = compose::image_chain(name, &mut |n: &str| {
            require_image(images_dir, n)?;
            let dir = images_dir.join(n);
            refuse_guest_files(&dir, &base_dir)?;
            read_layer(&dir.join(DEFINITION_FILE), Level::Image)
        })?;
        let mut sources = vec![base_path];
        sources.extend(
            chain
                .iter()
                .map(|(n, _)| images_dir.join(n).join(DEFINITION_FILE)),
        );
        let layers: Vec<Layer> = std::iter::once(base)
            .chain(chain.into_iter().map(|(_, l)| l))
            .collect();
        let definition = compose::compose(&layers)
            .with_context(|| format!("composing the definition of image {name}"))?;
        Ok(ImageDir {
            name: name.to_string(),
            dir: images_dir.join(name),
            base_dir,
            definition_text: definition.render(),
            definition,
            sources,
        })
    }

    pub fn lock_path(&self) -> PathBuf {
        self.dir.join(LOCK_FILE)
    }

    /// A guest file ([`GUEST_FILES`]): every image's is the base's.
    pub fn file(&self, name: &str) -> PathBuf {
        self.base_dir.join(name)
    }
}

fn read_layer(path: &Path, level: Level) -> Result<Layer> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the image definition {}", path.display()))?;
    let source = path.display().to_string();
    Layer::parse(&text, level, &source).with_context(|| format!("parsing {source}"))
}

/// An image directory holding its own copy of a guest file would look like it replaces the
/// base's, while the build takes the base's: refused, so that the shared file stays the one.
fn refuse_guest_files(dir: &Path, base_dir: &Path) -> Result<()> {
    for f in GUEST_FILES {
        let path = dir.join(f);
        if path.exists() {
            bail!(
                "{} is a guest file, and every image's guest files are the base's ({}): delete \
                 the copy, or change the base's for every image",
                path.display(),
                base_dir.join(f).display()
            );
        }
    }
    Ok(())
}

/// The images under `images_dir`: the directories holding an image.conf, except the base,
/// sorted by name.
pub fn list_images(images_dir: &Path) -> Vec<String> {
    let Ok(rd) = std::fs::read_dir(images_dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = rd
        .flatten()
        .filter(|e| e.path().join(DEFINITION_FILE).is_file())
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| !n.starts_with('.') && n != BASE_DIR)
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
    if name != BASE_DIR && images_dir.join(name).join(DEFINITION_FILE).is_file() {
        return Ok(());
    }
    let known = list_images(images_dir);
    let listed = if known.is_empty() {
        "none".to_string()
    } else {
        known.join(", ")
    };
    if name == BASE_DIR {
        bail!(
            "{}/{BASE_DIR}/ is not an image but what every image builds on: name an image \
             (the images there are {listed})",
            images_dir.display()
        );
    }
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
        assert_eq!(d.extra_suite_names(), ["bookworm-backports"]);
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
        assert!(Definition::parse(SAMPLE)
            .unwrap()
            .extra_packages()
            .is_empty());

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
        // A directory without a definition is not an image, and neither is the base.
        std::fs::create_dir_all(dir.join("notes")).unwrap();
        std::fs::create_dir_all(dir.join(BASE_DIR)).unwrap();
        std::fs::write(dir.join(BASE_DIR).join(DEFINITION_FILE), "").unwrap();
        assert_eq!(list_images(&dir), ["alpha", "zeta"]);
        let e = require_image(&dir, BASE_DIR).unwrap_err().to_string();
        assert!(
            e.contains("base/ is not an image but what every image builds on"),
            "{e}"
        );
        assert!(e.contains("the images there are alpha, zeta"), "{e}");
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

    #[test]
    fn the_canonical_rendering_reads_back_to_the_same_definition() {
        let d = Definition::parse(&format!(
            "{SAMPLE}extra_suite = bookworm-backports\nextra_suite_package = criu\ninodes = 9000\n"
        ))
        .unwrap();
        let text = d.render();
        assert_eq!(Definition::parse(&text).unwrap(), d);
        assert_eq!(Definition::parse(&text).unwrap().render(), text);
        // Comments, blank lines and the order of different keys do not reach it.
        let shuffled = "disk_size_mib = 1024\npackage = criu\n\n# x\nsuite = bookworm\n\
            mirror = http://m/debian\npackage = xterm\ncomponent = main\narchitecture = amd64\n\
            dpkg_exclude = /usr/share/doc/*\nvariant = apt\nkernel_flavour = cloud-amd64\n\
            source_date_epoch = 1700000000\ndpkg_include = /usr/share/doc/*/copyright\n";
        assert_eq!(
            Definition::parse(shuffled).unwrap().render(),
            Definition::parse(SAMPLE).unwrap().render()
        );
    }

    /// A scratch images directory with a base and the given images' image.conf files.
    fn scratch(tag: &str, images: &[(&str, &str)]) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("images-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let base: String = SAMPLE
            .lines()
            .filter(|l| !l.starts_with("suite"))
            .map(|l| format!("{l}\n"))
            .collect();
        std::fs::create_dir_all(dir.join(BASE_DIR)).unwrap();
        std::fs::write(dir.join(BASE_DIR).join(DEFINITION_FILE), base).unwrap();
        for (name, text) in images {
            std::fs::create_dir_all(dir.join(name)).unwrap();
            std::fs::write(dir.join(name).join(DEFINITION_FILE), text).unwrap();
        }
        dir
    }

    #[test]
    fn an_image_is_loaded_from_the_base_its_parents_and_itself() {
        let dir = scratch(
            "load",
            &[
                ("bookworm", "suite = bookworm\n"),
                (
                    "desktop",
                    "inherit = bookworm\npackage = openbox\ndisk_size_mib = 2048\n",
                ),
            ],
        );
        let img = ImageDir::load(&dir, "desktop").unwrap();
        assert_eq!(img.definition.packages, ["criu", "xterm", "openbox"]);
        assert_eq!(img.definition.disk_size_mib, 2048);
        assert_eq!(img.definition_text, img.definition.render());
        assert_eq!(img.lock_path(), dir.join("desktop").join(LOCK_FILE));
        assert_eq!(img.file(PID1_FILE), dir.join(BASE_DIR).join(PID1_FILE));
        assert_eq!(
            img.sources,
            [
                dir.join("base/image.conf"),
                dir.join("bookworm/image.conf"),
                dir.join("desktop/image.conf")
            ]
        );
        assert_eq!(list_images(&dir), ["bookworm", "desktop"]);

        // A parent that is not there is named with the line naming it and the images there are.
        std::fs::write(
            dir.join("desktop").join(DEFINITION_FILE),
            "# c\ninherit = bookwrom\n",
        )
        .unwrap();
        let e = format!("{:#}", ImageDir::load(&dir, "desktop").unwrap_err());
        assert!(
            e.contains("desktop/image.conf line 2: desktop inherits bookwrom: there is no image \"bookwrom\""),
            "{e}"
        );
        assert!(e.contains("the images there are bookworm, desktop"), "{e}");

        // An error inside a file names the file and its line.
        std::fs::write(
            dir.join("desktop").join(DEFINITION_FILE),
            "inherit = bookworm\nvariant = minbase\n",
        )
        .unwrap();
        let e = format!("{:#}", ImageDir::load(&dir, "desktop").unwrap_err());
        assert!(
            e.contains("desktop/image.conf: line 2: variant is set once for every image"),
            "{e}"
        );

        // A copy of a guest file in an image (or a parent) would never be used: refused.
        std::fs::write(
            dir.join("desktop").join(DEFINITION_FILE),
            "inherit = bookworm\n",
        )
        .unwrap();
        std::fs::write(dir.join("bookworm").join(SSHD_CONFIG_FILE), "").unwrap();
        let e = format!("{:#}", ImageDir::load(&dir, "desktop").unwrap_err());
        assert!(
            e.contains("bookworm/sshd_config is a guest file, and every image's guest files are the base's"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn without_a_base_no_image_loads() {
        let dir = scratch("nobase", &[("bookworm", "suite = bookworm\n")]);
        std::fs::remove_dir_all(dir.join(BASE_DIR)).unwrap();
        let e = format!("{:#}", ImageDir::load(&dir, "bookworm").unwrap_err());
        assert!(e.contains("every image builds on"), "{e}");
        assert!(e.contains("base/image.conf"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
