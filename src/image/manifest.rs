//! `manifest.json` of a cache entry: what the entry holds, what it was built from, by what.

use super::exec;
use super::mode::BuilderMode;
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

pub const MANIFEST_FILE: &str = "manifest.json";
pub const DISK_FILE: &str = "disk.img";
pub const KERNEL_FILE: &str = "vmlinuz";
pub const INITRD_FILE: &str = "initrd.img";
/// Bumped when the manifest's fields change meaning; older entries are rebuilt.
pub const MANIFEST_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageVersion {
    pub name: String,
    pub version: String,
}

/// An input that decides the image's bytes: `image.conf` (the effective definition, rendered
/// canonically), `packages.lock` or a guest file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InputFile {
    pub path: String,
    pub sha256: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub manifest_version: u32,
    pub image_name: String,
    /// The cache key: derived from the definition, the lock and the guest files.
    pub key: String,
    pub suite: String,
    pub architecture: String,
    pub image_sha256: String,
    pub image_bytes: u64,
    pub kernel_sha256: String,
    pub initrd_sha256: String,
    pub lock_sha256: String,
    pub definition_sha256: String,
    pub inputs: Vec<InputFile>,
    pub kernel_release: String,
    pub packages: Vec<PackageVersion>,
    /// The mirror the packages came from this time (the image names the canonical one).
    pub mirror: String,
    pub source_date_epoch: u64,
    pub builder: String,
    /// "unshare", "fakechroot" or "guest".
    pub builder_mode: String,
    pub tool_versions: BTreeMap<String, String>,
    pub built_at: String,
    pub build_seconds: f64,
    pub disk_image: String,
    pub kernel: String,
    pub initrd: String,
    /// Where PID 1 is, and the kernel command line the image is meant to boot with; the VM adds
    /// `sharedos.authorized_key=`.
    pub init_path: String,
    pub kernel_cmdline: String,
}

impl Manifest {
    pub fn read(path: &Path) -> Result<Manifest> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    pub fn write(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).context("serialising the manifest")?;
        std::fs::write(path, format!("{text}\n"))
            .with_context(|| format!("writing {}", path.display()))
    }

    /// The locked version of `name` in the image, if it is there.
    pub fn package_version(&self, name: &str) -> Option<&str> {
        self.packages
            .iter()
            .find(|p| p.name == name)
            .map(|p| p.version.as_str())
    }

    /// (file name, expected sha256) of every file the entry must hold.
    pub fn hashed_files(&self) -> [(&str, &str); 3] {
        [
            (self.disk_image.as_str(), self.image_sha256.as_str()),
            (self.kernel.as_str(), self.kernel_sha256.as_str()),
            (self.initrd.as_str(), self.initrd_sha256.as_str()),
        ]
    }
}

/// First line of each tool's version output; a tool that will not say is recorded as such.
pub fn tool_versions(mode: BuilderMode) -> BTreeMap<String, String> {
    let mut v = BTreeMap::new();
    let mut ask = |name: &str, argv: &[&str]| {
        let line = exec::capture(&exec::Cmd::new(
            argv.iter().map(|s| s.to_string()).collect(),
        ))
        .ok()
        .and_then(|o| {
            o.lines()
                .find(|l| !l.trim().is_empty())
                .map(|l| l.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into());
        v.insert(name.to_string(), line);
    };
    ask("mmdebstrap", &["mmdebstrap", "--version"]);
    ask("genext2fs", &["genext2fs", "--version"]);
    ask("tar", &["tar", "--version"]);
    ask("apt", &["apt-get", "--version"]);
    ask("dpkg", &["dpkg-query", "-W", "-f=${Version}", "mmdebstrap"]);
    match mode {
        BuilderMode::Unshare => ask("uidmap", &["dpkg-query", "-W", "-f=${Version}", "uidmap"]),
        BuilderMode::Fakechroot => {
            ask("fakechroot", &["fakechroot", "--version"]);
            ask("fakeroot", &["fakeroot", "--version"]);
        }
        BuilderMode::Guest => ask("qemu", &["qemu-system-x86_64", "--version"]),
    }
    v.insert("sharedos-rig".into(), env!("CARGO_PKG_VERSION").into());
    v
}
