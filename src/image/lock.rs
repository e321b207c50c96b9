//! The package lock: every package the image holds, its exact version, architecture and the
//! sha256 of its .deb, and the kernel release. Plain text, one package per line, so a change
//! reviews as a diff.
//!
//! The suite each package comes from: a lock of one suite names it once (`suite S`) and its
//! package lines have five fields, as every lock written before extra suites existed; a lock
//! whose image also takes packages from extra suites has one `extra-suite S` line per suite, in
//! the definition's order, and names the suite at the end of every package line.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// (name, version, architecture) of one package.
pub type PkgKey = (String, String, String);
/// sha256 of the .deb each package came from.
pub type DebHashes = BTreeMap<PkgKey, String>;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockedPackage {
    pub name: String,
    pub version: String,
    pub architecture: String,
    pub sha256: String,
    /// The suite the .deb came from: the lock's `suite` unless its line names another.
    #[serde(default)]
    pub suite: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lock {
    pub suite: String,
    /// The further suites some packages come from (e.g. `bookworm-backports`), in the
    /// definition's order.
    pub extra_suites: Vec<String>,
    pub architecture: String,
    pub kernel_release: String,
    /// Sorted by name; names are unique.
    pub packages: Vec<LockedPackage>,
}

impl Lock {
    pub fn parse(text: &str) -> Result<Lock> {
        let mut suite = None;
        let mut extra_suites: Vec<String> = Vec::new();
        let mut arch = None;
        let mut kernel = None;
        let mut packages: BTreeMap<String, LockedPackage> = BTreeMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            let n = i + 1;
            match (f[0], f.len()) {
                ("suite", 2) => suite = Some(f[1].to_string()),
                ("extra-suite", 2) => {
                    if extra_suites.iter().any(|s| s == f[1]) {
                        bail!("line {n}: extra-suite {} given twice", f[1]);
                    }
                    extra_suites.push(f[1].to_string());
                }
                ("architecture", 2) => arch = Some(f[1].to_string()),
                ("kernel-release", 2) => kernel = Some(f[1].to_string()),
                ("package", 5 | 6) => {
                    if f[4].len() != 64 || !f[4].bytes().all(|b| b.is_ascii_hexdigit()) {
                        bail!("line {n}: {:?} is not a sha256", f[4]);
                    }
                    let p = LockedPackage {
                        name: f[1].to_string(),
                        version: f[2].to_string(),
                        architecture: f[3].to_string(),
                        sha256: f[4].to_ascii_lowercase(),
                        // Filled in below, once the `suite` line is known.
                        suite: f.get(5).map(|s| s.to_string()).unwrap_or_default(),
                    };
                    if packages.insert(p.name.clone(), p).is_some() {
                        bail!("line {n}: package {} locked twice", f[1]);
                    }
                }
                _ => bail!(
                    "line {n}: expected `suite S`, `architecture A`, `kernel-release R` or \
                     `extra-suite S`, `package NAME VERSION ARCH SHA256 [SUITE]`, got {raw:?}"
                ),
            }
        }
        let suite = suite.context("the lock has no `suite` line")?;
        let mut packages: Vec<LockedPackage> = packages.into_values().collect();
        for p in &mut packages {
            if p.suite.is_empty() {
                p.suite = suite.clone();
            } else if p.suite != suite && !extra_suites.contains(&p.suite) {
                bail!(
                    "package {} comes from suite {}, which is neither the lock's suite {suite} \
                     nor one of its extra-suite lines{}",
                    p.name,
                    p.suite,
                    if extra_suites.is_empty() {
                        " (there is none)".to_string()
                    } else {
                        format!(" ({})", extra_suites.join(", "))
                    }
                );
            }
        }
        let lock = Lock {
            suite,
            extra_suites,
            architecture: arch.context("the lock has no `architecture` line")?,
            kernel_release: kernel.context("the lock has no `kernel-release` line")?,
            packages,
        };
        let kernel_pkg = format!("linux-image-{}", lock.kernel_release);
        if lock.get(&kernel_pkg).is_none() {
            bail!(
                "the lock names kernel release {} but does not lock {kernel_pkg}",
                lock.kernel_release
            );
        }
        Ok(lock)
    }

    pub fn render(&self, image: &str) -> String {
        let mut s = format!(
            "# Package lock of image {image}: exactly these packages at these versions, from .debs\n\
             # with these sha256. Written by `cargo xtask image --image {image} --update-lock`.\n"
        );
        let _ = writeln!(s, "suite {}", self.suite);
        for extra in &self.extra_suites {
            let _ = writeln!(s, "extra-suite {extra}");
        }
        let _ = writeln!(s, "architecture {}", self.architecture);
        let _ = writeln!(s, "kernel-release {}", self.kernel_release);
        for p in &self.packages {
            let _ = write!(
                s,
                "package {} {} {} {}",
                p.name, p.version, p.architecture, p.sha256
            );
            // A lock of one suite keeps the five-field lines every earlier lock has, so its
            // bytes (and the image cache key made from them) do not change.
            if !self.extra_suites.is_empty() {
                let _ = write!(s, " {}", p.suite);
            }
            s.push('\n');
        }
        s
    }

    pub fn get(&self, name: &str) -> Option<&LockedPackage> {
        self.packages
            .binary_search_by(|p| p.name.as_str().cmp(name))
            .ok()
            .map(|i| &self.packages[i])
    }

    /// Builds a lock from what a build installed: (name, version, arch) from dpkg and the
    /// sha256 of each downloaded .deb keyed by (name, version, arch).
    pub fn from_installed(
        suite: &str,
        architecture: &str,
        kernel_flavour: &str,
        installed: &[PkgKey],
        debs: &DebHashes,
    ) -> Result<Lock> {
        let mut packages = Vec::new();
        for key in installed {
            let sha256 = debs.get(key).with_context(|| {
                format!(
                    "{} {} was installed but no .deb for it was downloaded",
                    key.0, key.1
                )
            })?;
            packages.push(LockedPackage {
                name: key.0.clone(),
                version: key.1.clone(),
                architecture: key.2.clone(),
                sha256: sha256.clone(),
                suite: suite.to_string(),
            });
        }
        packages.sort_by(|a, b| a.name.cmp(&b.name));
        let kernel_release = kernel_release_of(&packages, kernel_flavour)?;
        Ok(Lock {
            suite: suite.to_string(),
            extra_suites: Vec::new(),
            architecture: architecture.to_string(),
            kernel_release,
            packages,
        })
    }

    /// Names each package's suite from where the mirror's index has it: the image's own suite
    /// when it has that version there; else, for a package the definition takes from an extra
    /// suite, that suite; else the first extra suite (in the definition's order) that has it.
    /// `extra_packages` (package, suite) must come from their suite: a kernel the definition
    /// takes from backports that resolved to the main suite's is a wrong image, not a detail.
    pub fn assign_suites(
        &mut self,
        extra_suites: &[String],
        extra_packages: &[(String, String)],
        suites_of: &dyn Fn(&PkgKey) -> Vec<String>,
    ) -> Result<()> {
        self.extra_suites = extra_suites.to_vec();
        let declared = |name: &str| {
            extra_packages
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, s)| s.as_str())
        };
        let mut problems = Vec::new();
        for p in &mut self.packages {
            let key = (p.name.clone(), p.version.clone(), p.architecture.clone());
            let has = suites_of(&key);
            let found = if has.contains(&self.suite) {
                Some(self.suite.as_str())
            } else if let Some(d) = declared(&p.name).filter(|d| has.iter().any(|h| h == d)) {
                Some(d)
            } else {
                extra_suites
                    .iter()
                    .find(|e| has.contains(e))
                    .map(String::as_str)
            };
            match found {
                Some(s) => p.suite = s.to_string(),
                None => problems.push(format!(
                    "{} {} is in none of the suites {}",
                    p.name,
                    p.version,
                    std::iter::once(self.suite.as_str())
                        .chain(extra_suites.iter().map(String::as_str))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        for (name, e) in extra_packages {
            match self.get(name) {
                Some(p) if p.suite == *e => {}
                Some(p) => problems.push(format!(
                    "{name} {} came from {}, but the definition takes it from {e}",
                    p.version, p.suite
                )),
                None => problems.push(format!("{name} is to come from {e} but was not installed")),
            }
        }
        if !problems.is_empty() {
            bail!(
                "cannot name every package's suite:\n  {}",
                problems.join("\n  ")
            );
        }
        Ok(())
    }

    /// Compares what a build installed with the lock; every difference is one line.
    pub fn check_installed(&self, installed: &[PkgKey], debs: &DebHashes) -> Vec<String> {
        let mut problems = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for (name, version, arch) in installed {
            seen.insert(name.as_str());
            match self.get(name) {
                None => problems.push(format!("{name} {version} is installed but not locked")),
                Some(p) if p.version != *version || p.architecture != *arch => {
                    problems.push(format!(
                        "{name} is installed at {version} ({arch}), the lock says {} ({})",
                        p.version, p.architecture
                    ))
                }
                Some(p) => match debs.get(&(name.clone(), version.clone(), arch.clone())) {
                    None => problems.push(format!(
                        "{name} {version}: its .deb was not seen, so its sha256 is unchecked"
                    )),
                    Some(h) if *h != p.sha256 => problems.push(format!(
                        "{name} {version}: the .deb has sha256 {h}, the lock says {}",
                        p.sha256
                    )),
                    Some(_) => {}
                },
            }
        }
        for p in &self.packages {
            if !seen.contains(p.name.as_str()) {
                problems.push(format!(
                    "{} {} is locked but was not installed",
                    p.name, p.version
                ));
            }
        }
        problems
    }
}

/// The kernel release is the version-specific image package's name without `linux-image-`:
/// `linux-image-6.1.0-50-cloud-amd64` gives `6.1.0-50-cloud-amd64`.
pub fn kernel_release_of(packages: &[LockedPackage], flavour: &str) -> Result<String> {
    let meta = format!("linux-image-{flavour}");
    let suffix = format!("-{flavour}");
    let found: Vec<&str> = packages
        .iter()
        .map(|p| p.name.as_str())
        .filter(|n| *n != meta && n.starts_with("linux-image-") && n.ends_with(&suffix))
        .filter(|n| n.as_bytes().get(12).is_some_and(u8::is_ascii_digit))
        .collect();
    match found.as_slice() {
        [one] => Ok(one["linux-image-".len()..].to_string()),
        [] => bail!("no linux-image-<release>{suffix} package was installed"),
        many => bail!("more than one kernel installed: {}", many.join(", ")),
    }
}

/// What `--update-lock` changed, one line per package.
pub fn diff(old: Option<&Lock>, new: &Lock) -> Vec<String> {
    let mut out = Vec::new();
    let empty = Vec::new();
    let old_pk = old.map(|l| &l.packages).unwrap_or(&empty);
    let o: BTreeMap<&str, &LockedPackage> = old_pk.iter().map(|p| (p.name.as_str(), p)).collect();
    let n: BTreeMap<&str, &LockedPackage> =
        new.packages.iter().map(|p| (p.name.as_str(), p)).collect();
    if let Some(old) = old {
        if old.kernel_release != new.kernel_release {
            out.push(format!(
                "kernel-release {} -> {}",
                old.kernel_release, new.kernel_release
            ));
        }
    }
    for (name, np) in &n {
        match o.get(name) {
            None => out.push(format!("+ {name} {}", np.version)),
            Some(op) if op.version != np.version => {
                out.push(format!("~ {name} {} -> {}", op.version, np.version))
            }
            Some(op) if op.suite != np.suite => out.push(format!(
                "~ {name} {} from {} -> {}",
                np.version, op.suite, np.suite
            )),
            Some(op) if op.sha256 != np.sha256 || op.architecture != np.architecture => out.push(
                format!("~ {name} {} (same version, different .deb)", np.version),
            ),
            Some(_) => {}
        }
    }
    for (name, op) in &o {
        if !n.contains_key(name) {
            out.push(format!("- {name} {}", op.version));
        }
    }
    out
}

/// Parses the hook's `dpkg-query` output: `name version arch` per line.
pub fn parse_installed(text: &str) -> Result<Vec<PkgKey>> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 3 {
            bail!("unexpected dpkg-query line {line:?}");
        }
        out.push((f[0].to_string(), f[1].to_string(), f[2].to_string()));
    }
    Ok(out)
}

/// Parses `sha256sum *.deb` of apt's archive: the file name is `name_version_arch.deb`
/// with the version's `:` written as `%3a`.
pub fn parse_debs(text: &str) -> Result<DebHashes> {
    let mut out = DebHashes::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let (hash, file) = line
            .split_once("  ")
            .with_context(|| format!("unexpected sha256sum line {line:?}"))?;
        let stem = file
            .trim()
            .strip_suffix(".deb")
            .with_context(|| format!("not a .deb: {file}"))?;
        let parts: Vec<&str> = stem.split('_').collect();
        if parts.len() != 3 {
            bail!("unexpected .deb name {file}");
        }
        let version = unescape(parts[1]);
        out.insert(
            (parts[0].to_string(), version, parts[2].to_string()),
            hash.to_ascii_lowercase(),
        );
    }
    Ok(out)
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Some(v) = std::str::from_utf8(&b[i + 1..i + 3])
                .ok()
                .and_then(|h| u8::from_str_radix(h, 16).ok())
            {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(c: char) -> String {
        std::iter::repeat(c).take(64).collect()
    }

    fn sample() -> Lock {
        let text = format!(
            "# x\nsuite bookworm\narchitecture amd64\nkernel-release 6.1.0-50-cloud-amd64\n\
             package criu 3.17.1-2+deb12u2 amd64 {}\n\
             package linux-image-6.1.0-50-cloud-amd64 6.1.176-1 amd64 {}\n\
             package adduser 3.134 all {}\n",
            h('a'),
            h('b'),
            h('c')
        );
        Lock::parse(&text).unwrap()
    }

    fn installed(l: &Lock) -> (Vec<PkgKey>, DebHashes) {
        let inst: Vec<_> = l
            .packages
            .iter()
            .map(|p| (p.name.clone(), p.version.clone(), p.architecture.clone()))
            .collect();
        let debs = l
            .packages
            .iter()
            .map(|p| {
                (
                    (p.name.clone(), p.version.clone(), p.architecture.clone()),
                    p.sha256.clone(),
                )
            })
            .collect();
        (inst, debs)
    }

    #[test]
    fn parse_sorts_and_render_round_trips() {
        let l = sample();
        assert_eq!(l.packages[0].name, "adduser");
        assert_eq!(Lock::parse(&l.render("bookworm")).unwrap(), l);
        assert_eq!(l.get("criu").unwrap().version, "3.17.1-2+deb12u2");
        assert!(l.get("xterm").is_none());
    }

    #[test]
    fn the_shipped_bookworm_lock_renders_to_its_own_bytes() {
        let text = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("images/bookworm/packages.lock"),
        )
        .unwrap();
        let l = Lock::parse(&text).unwrap();
        assert!(l.extra_suites.is_empty());
        assert!(l.packages.iter().all(|p| p.suite == "bookworm"));
        assert_eq!(l.render("bookworm"), text, "the bookworm lock would change");
    }

    fn backports_lock_text() -> String {
        format!(
            "suite bookworm\nextra-suite bookworm-backports\narchitecture amd64\n\
             kernel-release 6.12.48+bpo-cloud-amd64\n\
             package criu 3.17.1-2+deb12u2 amd64 {} bookworm\n\
             package linux-image-6.12.48+bpo-cloud-amd64 6.12.48-1~bpo12+1 amd64 {} bookworm-backports\n",
            h('a'),
            h('b')
        )
    }

    #[test]
    fn a_lock_with_an_extra_suite_names_each_packages_suite() {
        let l = Lock::parse(&backports_lock_text()).unwrap();
        assert_eq!(l.extra_suites, ["bookworm-backports"]);
        assert_eq!(l.get("criu").unwrap().suite, "bookworm");
        assert_eq!(
            l.get("linux-image-6.12.48+bpo-cloud-amd64").unwrap().suite,
            "bookworm-backports"
        );
        let text = l.render("bookworm-bpo");
        assert!(
            text.contains("\nextra-suite bookworm-backports\n"),
            "{text}"
        );
        assert!(
            text.lines()
                .filter(|x| x.starts_with("package "))
                .all(|x| x.split(' ').count() == 6),
            "{text}"
        );
        assert_eq!(Lock::parse(&text).unwrap(), l);
        // A five-field line in such a lock is from the main suite.
        let short = backports_lock_text()
            .replace(&format!("{} bookworm\n", h('a')), &format!("{}\n", h('a')));
        assert_ne!(short, backports_lock_text());
        assert_eq!(
            Lock::parse(&short).unwrap().get("criu").unwrap().suite,
            "bookworm"
        );
        // A suite the lock does not declare is refused.
        let sid = format!(
            "{}package xterm 379-1 amd64 {} sid\n",
            backports_lock_text(),
            h('c')
        );
        let e = Lock::parse(&sid).unwrap_err();
        assert!(e.to_string().contains("comes from suite sid"), "{e}");
        let e = Lock::parse(&backports_lock_text().replace("extra-suite bookworm-backports\n", ""))
            .unwrap_err();
        assert!(e.to_string().contains("(there is none)"), "{e}");
    }

    #[test]
    fn suites_come_from_the_index_and_extra_packages_must_come_from_the_extra_suite() {
        let mut l = sample();
        let kernel = "linux-image-6.1.0-50-cloud-amd64";
        let in_bpo = |k: &PkgKey| -> Vec<String> {
            if k.0 == "linux-image-6.1.0-50-cloud-amd64" {
                vec!["bookworm-backports".into()]
            } else {
                vec!["bookworm".into(), "bookworm-backports".into()]
            }
        };
        let bpo = ["bookworm-backports".to_string()];
        let from_bpo = |n: &str| vec![(n.to_string(), bpo[0].clone())];
        l.assign_suites(&bpo, &from_bpo(kernel), &in_bpo).unwrap();
        assert_eq!(l.get(kernel).unwrap().suite, "bookworm-backports");
        assert_eq!(
            l.get("criu").unwrap().suite,
            "bookworm",
            "the main suite wins"
        );
        assert_eq!(Lock::parse(&l.render("x")).unwrap(), l);

        let mut l = sample();
        let e = l
            .assign_suites(&bpo, &from_bpo("criu"), &in_bpo)
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("criu 3.17.1-2+deb12u2 came from bookworm, but the definition takes it from bookworm-backports"),
            "{e}"
        );
        let mut l = sample();
        let e = l
            .assign_suites(&[], &[], &|_: &PkgKey| vec!["sid".to_string()])
            .unwrap_err();
        assert!(
            e.to_string().contains("is in none of the suites bookworm"),
            "{e}"
        );
        let mut l = sample();
        l.assign_suites(&[], &[], &|_: &PkgKey| vec!["bookworm".to_string()])
            .unwrap();
        assert_eq!(l, sample(), "a one-suite lock is unchanged");
    }

    #[test]
    fn a_lock_of_several_extra_suites_names_them_in_order() {
        let text = format!(
            "{}package criu 4.2.1-1 amd64 {} forky
",
            backports_lock_text()
                .replace("criu 3.17.1-2+deb12u2 amd64", "iproute2 6.1.0-3 amd64")
                .replace(
                    "extra-suite bookworm-backports\n",
                    "extra-suite bookworm-backports\nextra-suite forky\n"
                ),
            h('c')
        );
        let l = Lock::parse(&text).unwrap();
        assert_eq!(l.extra_suites, ["bookworm-backports", "forky"]);
        assert_eq!(l.get("criu").unwrap().suite, "forky");
        assert_eq!(l.get("iproute2").unwrap().suite, "bookworm");
        let out = l.render("x");
        assert!(
            out.contains("suite bookworm\nextra-suite bookworm-backports\nextra-suite forky\n"),
            "{out}"
        );
        assert_eq!(Lock::parse(&out).unwrap(), l);
        let e = Lock::parse(&text.replace("extra-suite forky\n", ""))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("criu comes from suite forky, which is neither the lock's suite bookworm nor one of its extra-suite lines (bookworm-backports)"),
            "{e}"
        );
        let e = Lock::parse(&text.replace(
            "extra-suite forky\n",
            "extra-suite forky\nextra-suite forky\n",
        ))
        .unwrap_err()
        .to_string();
        assert!(e.contains("extra-suite forky given twice"), "{e}");
    }

    #[test]
    fn parse_rejects_bad_lines() {
        let base = sample().render("b");
        assert!(Lock::parse(&format!("{base}package x 1 amd64 nothex\n")).is_err());
        assert!(Lock::parse(&format!("{base}package criu 1 amd64 {}\n", h('d'))).is_err());
        assert!(
            Lock::parse(&base.replace("kernel-release 6.1.0-50", "kernel-release 6.1.0-51"))
                .is_err()
        );
    }

    #[test]
    fn check_installed_finds_every_kind_of_drift() {
        let l = sample();
        let (inst, debs) = installed(&l);
        assert!(l.check_installed(&inst, &debs).is_empty());

        let mut inst2 = inst.clone();
        inst2[1].1 = "3.17.1-2+deb12u3".into();
        inst2.push(("xterm".into(), "379-1".into(), "amd64".into()));
        inst2.retain(|p| p.0 != "adduser");
        let mut debs2 = debs.clone();
        debs2.insert(inst2[0].clone(), h('e'));
        let p = l.check_installed(&inst2, &debs2);
        let all = p.join("\n");
        assert!(
            all.contains("criu is installed at 3.17.1-2+deb12u3"),
            "{all}"
        );
        assert!(
            all.contains("xterm 379-1 is installed but not locked"),
            "{all}"
        );
        assert!(
            all.contains("adduser 3.134 is locked but was not installed"),
            "{all}"
        );
        assert_eq!(p.len(), 3, "{all}");

        let mut debs3 = debs;
        debs3.insert(inst[0].clone(), h('f'));
        let p = l.check_installed(&inst, &debs3);
        assert!(p[0].contains("the .deb has sha256"), "{p:?}");
    }

    #[test]
    fn from_installed_finds_the_kernel_release() {
        let l = sample();
        let (inst, debs) = installed(&l);
        let mut inst = inst;
        inst.push((
            "linux-image-cloud-amd64".into(),
            "6.1.176-1".into(),
            "amd64".into(),
        ));
        let mut debs = debs;
        debs.insert(inst.last().unwrap().clone(), h('9'));
        let n = Lock::from_installed("bookworm", "amd64", "cloud-amd64", &inst, &debs).unwrap();
        assert_eq!(n.kernel_release, "6.1.0-50-cloud-amd64");
        assert_eq!(
            diff(Some(&l), &n),
            vec!["+ linux-image-cloud-amd64 6.1.176-1"]
        );
        inst.pop();
        inst.pop();
        assert!(Lock::from_installed("bookworm", "amd64", "cloud-amd64", &inst, &debs).is_err());
    }

    #[test]
    fn diff_names_changes() {
        let old = sample();
        let mut new = old.clone();
        new.packages[1].version = "3.18".into();
        new.packages.remove(0);
        let d = diff(Some(&old), &new);
        assert_eq!(
            d,
            vec!["~ criu 3.17.1-2+deb12u2 -> 3.18", "- adduser 3.134"]
        );
    }

    #[test]
    fn parses_hook_outputs() {
        let i = parse_installed("adduser 3.134 all\nopenssh-server 1:9.2p1-2+deb12u10 amd64\n")
            .unwrap();
        assert_eq!(i[1].1, "1:9.2p1-2+deb12u10");
        assert!(parse_installed("a b\n").is_err());
        let d = parse_debs(
            "AB  openssh-server_1%3a9.2p1-2+deb12u10_amd64.deb\ncd  adduser_3.134_all.deb\n",
        )
        .unwrap();
        assert_eq!(
            d[&(
                "openssh-server".into(),
                "1:9.2p1-2+deb12u10".into(),
                "amd64".into()
            )],
            "ab"
        );
        assert_eq!(d.len(), 2);
        assert!(parse_debs("ab  weird.deb\n").is_err());
    }
}
