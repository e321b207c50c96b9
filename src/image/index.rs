//! The mirror's package index, fetched with the host's apt into a private directory (no root,
//! signatures checked against the Debian archive keyring), so a stale pin fails in seconds
//! instead of after a full bootstrap.

use super::definition::Definition;
use super::lock::{Lock, PkgKey};
use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub const DEBIAN_KEYRING: &str = "/usr/share/keyrings/debian-archive-keyring.gpg";

/// (name, version, architecture) -> sha256 of the .deb, from every Packages file fetched.
pub type Index = super::lock::DebHashes;

/// The mirror's index with the suites each package version is in.
#[derive(Debug, Default, Clone)]
pub struct SuiteIndex {
    pub debs: Index,
    pub suites: std::collections::BTreeMap<PkgKey, Vec<String>>,
}

impl SuiteIndex {
    pub fn suites_of(&self, key: &PkgKey) -> Vec<String> {
        self.suites.get(key).cloned().unwrap_or_default()
    }
}

/// The sources entries both apt here and mmdebstrap use, one line per suite (one line, as
/// ever, for an image of one suite).
pub fn sources_line(def: &Definition, mirror: &str) -> String {
    // Valid-Until is off because dated snapshot mirrors serve long-expired Release files; the
    // lock's sha256 pins are what make the content trustworthy, not the Release's age.
    def.suites()
        .iter()
        .map(|suite| {
            format!(
                "deb [signed-by={DEBIAN_KEYRING} check-valid-until=no] {mirror} {suite} {}",
                def.components.join(" ")
            )
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `apt-get update` into `dir` only. Host apt.conf.d may still be read (apt reads it before any
/// option), so everything that decides where files land is set on the command line.
pub fn apt_update_argv(dir: &Path, arch: &str) -> Vec<String> {
    let d = dir.display();
    let mut v = vec!["apt-get".to_string()];
    for o in [
        format!("Dir::Etc::SourceList={d}/sources.list"),
        "Dir::Etc::SourceParts=-".to_string(),
        format!("Dir::State={d}/state"),
        format!("Dir::State::Lists={d}/state/lists"),
        format!("Dir::State::status={d}/state/status"),
        format!("Dir::Cache={d}/cache"),
        format!("APT::Architecture={arch}"),
        format!("APT::Architectures={arch}"),
        "Acquire::Languages=none".to_string(),
        "Acquire::GzipIndexes=false".to_string(),
        "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false".to_string(),
        "Debug::NoLocking=true".to_string(),
        "APT::Sandbox::User=".to_string(),
    ] {
        v.push("-o".to_string());
        v.push(o);
    }
    v.extend(["-q".to_string(), "update".to_string()]);
    v
}

/// Prepares the private apt tree for one mirror.
pub fn prepare_dir(dir: &Path, def: &Definition, mirror: &str) -> Result<()> {
    for sub in ["state/lists/partial", "cache/archives/partial"] {
        std::fs::create_dir_all(dir.join(sub))
            .with_context(|| format!("creating {}", dir.join(sub).display()))?;
    }
    std::fs::write(dir.join("state/status"), b"").context("writing apt's empty status file")?;
    std::fs::write(
        dir.join("sources.list"),
        format!("{}\n", sources_line(def, mirror)),
    )
    .context("writing the private sources.list")?;
    Ok(())
}

/// The suite a lists file belongs to: apt names it `<mirror>_dists_<suite>_<component>_..._Packages`.
pub fn suite_of_list_file<'a>(name: &str, suites: &'a [String]) -> Option<&'a str> {
    let rest = &name[name.rfind("_dists_")? + "_dists_".len()..];
    suites
        .iter()
        .find(|s| {
            rest.strip_prefix(s.as_str())
                .is_some_and(|r| r.starts_with('_'))
        })
        .map(String::as_str)
}

/// Reads every `*_Packages` file apt left in `lists`, noting each version's suites.
pub fn read_index(lists: &Path, suites: &[String]) -> Result<SuiteIndex> {
    let mut index = SuiteIndex::default();
    let mut files = 0;
    for e in std::fs::read_dir(lists).with_context(|| format!("listing {}", lists.display()))? {
        let p: PathBuf = e?.path();
        let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.ends_with("_Packages") {
            files += 1;
            let suite = suite_of_list_file(name, suites).with_context(|| {
                format!("{name} belongs to none of the suites {}", suites.join(", "))
            })?;
            let text =
                std::fs::read_to_string(&p).with_context(|| format!("reading {}", p.display()))?;
            let mut one = Index::new();
            parse_packages(&text, &mut one);
            for (k, h) in one {
                let s = index.suites.entry(k.clone()).or_default();
                if !s.iter().any(|x| x == suite) {
                    s.push(suite.to_string());
                }
                index.debs.insert(k, h);
            }
        }
    }
    anyhow::ensure!(
        files > 0,
        "apt fetched no Packages file into {}",
        lists.display()
    );
    Ok(index)
}

/// Parses Debian `Packages` stanzas into (name, version, arch) -> SHA256.
pub fn parse_packages(text: &str, into: &mut Index) {
    for stanza in text.split("\n\n") {
        let (mut n, mut v, mut a, mut h) = (None, None, None, None);
        for line in stanza.lines() {
            if let Some((k, val)) = line.split_once(": ") {
                match k {
                    "Package" => n = Some(val.trim()),
                    "Version" => v = Some(val.trim()),
                    "Architecture" => a = Some(val.trim()),
                    "SHA256" => h = Some(val.trim()),
                    _ => {}
                }
            }
        }
        if let (Some(n), Some(v), Some(a), Some(h)) = (n, v, a, h) {
            into.insert((n.into(), v.into(), a.into()), h.to_ascii_lowercase());
        }
    }
}

/// Every locked package must be on the mirror at its exact version with the locked sha256, in
/// the suite the lock names.
pub fn missing_pins(lock: &Lock, sindex: &SuiteIndex) -> Vec<String> {
    let mut out = Vec::new();
    let index = &sindex.debs;
    for p in &lock.packages {
        let key = (p.name.clone(), p.version.clone(), p.architecture.clone());
        match index.get(&key) {
            Some(h) if *h == p.sha256 => {
                let has = sindex.suites_of(&key);
                if !has.contains(&p.suite) {
                    out.push(format!(
                        "{} {} is on the mirror in {}, not in {} where the lock has it",
                        p.name,
                        p.version,
                        has.join(", "),
                        p.suite
                    ));
                }
            }
            Some(h) => out.push(format!(
                "{} {} is on the mirror with sha256 {h}, the lock says {}",
                p.name, p.version, p.sha256
            )),
            None => {
                let others: Vec<&str> = index
                    .keys()
                    .filter(|k| k.0 == p.name && k.2 == p.architecture)
                    .map(|k| k.1.as_str())
                    .collect();
                let has = if others.is_empty() {
                    "the mirror has no version of it".to_string()
                } else {
                    format!("the mirror has {}", others.join(", "))
                };
                out.push(format!(
                    "{} {} is not on the mirror ({has})",
                    p.name, p.version
                ));
            }
        }
    }
    out
}

/// apt preferences that make the locked version win even where the mirror offers a newer one.
pub fn pin_preferences(lock: &Lock) -> String {
    let mut s = String::new();
    for p in &lock.packages {
        s.push_str(&format!(
            "Package: {}\nPin: version {}\nPin-Priority: 1001\n\n",
            p.name, p.version
        ));
    }
    s
}

/// apt preferences for resolving a new lock: every extra suite at priority 100, below the main
/// suite's 500, so that apt takes from an extra suite only the packages named `name/suite` and
/// the dependencies only it can satisfy. Backports suites already have 100 from their Release
/// file (NotAutomatic, ButAutomaticUpgrades), but an ordinary suite such as forky has 500: with
/// it beside trixie, apt would otherwise take the newer forky version of nearly every package.
/// Each suite is matched by codename and by archive name, so `forky`, `testing` and `sid` alike
/// are caught. Empty for an image of one suite.
pub fn extra_suite_preferences(def: &Definition) -> String {
    let mut s = String::new();
    for suite in def.extra_suite_names() {
        for field in ["n", "a"] {
            s.push_str(&format!(
                "Package: *\nPin: release {field}={suite}\nPin-Priority: 100\n\n"
            ));
        }
    }
    s
}

/// The message for pins the mirror no longer has, saying how to go on.
pub fn stale_pins_message(image: &str, mirror: &str, problems: &[String]) -> String {
    format!(
        "the lock of image {image} does not match the mirror {mirror}:\n  {}\n\
         To go on, either rewrite the lock from the mirror (and review the change):\n  \
         cargo xtask image --image {image} --update-lock\n\
         or build the locked versions from a dated snapshot archive that still has them:\n  \
         cargo xtask image --image {image} --mirror http://snapshot.debian.org/archive/debian/<YYYYMMDDTHHMMSSZ>",
        problems.join("\n  ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn apt_update_argv_keeps_everything_in_the_private_dir() {
        let v = apt_update_argv(Path::new("/c/apt/x"), "amd64");
        assert_eq!(v[0], "apt-get");
        assert_eq!(v[v.len() - 1], "update");
        assert!(v.contains(&"Dir::State::Lists=/c/apt/x/state/lists".to_string()));
        assert!(v.contains(&"Dir::Etc::SourceList=/c/apt/x/sources.list".to_string()));
        assert!(v.contains(&"Acquire::GzipIndexes=false".to_string()));
        for w in v.windows(2) {
            if w[1].starts_with("Dir::") {
                assert_eq!(w[0], "-o");
            }
        }
    }

    #[test]
    fn parses_stanzas_and_reports_missing_pins() {
        let text = "Package: criu\nVersion: 3.17.1-2+deb12u2\nArchitecture: amd64\nSHA256: AB\n\
                    Description: x\n continued: line\n\nPackage: xterm\nVersion: 379-1\n\
                    Architecture: amd64\nSHA256: cd\n";
        let mut idx = Index::new();
        parse_packages(text, &mut idx);
        assert_eq!(idx.len(), 2);
        assert_eq!(
            idx[&("criu".into(), "3.17.1-2+deb12u2".into(), "amd64".into())],
            "ab"
        );

        let h = |c: char| -> String { std::iter::repeat(c).take(64).collect() };
        let lock_text = format!(
            "suite bookworm\narchitecture amd64\nkernel-release 6.1.0-1-cloud-amd64\n\
             package linux-image-6.1.0-1-cloud-amd64 1 amd64 {}\n\
             package criu 3.17.1-2+deb12u9 amd64 {}\npackage xterm 379-1 amd64 {}\n",
            h('1'),
            h('2'),
            h('3')
        );
        let lock = Lock::parse(&lock_text).unwrap();
        let sidx = SuiteIndex {
            suites: idx
                .keys()
                .map(|k| (k.clone(), vec!["bookworm".to_string()]))
                .collect(),
            debs: idx,
        };
        let m = missing_pins(&lock, &sidx).join("\n");
        assert!(
            m.contains(
                "criu 3.17.1-2+deb12u9 is not on the mirror (the mirror has 3.17.1-2+deb12u2)"
            ),
            "{m}"
        );
        assert!(
            m.contains("xterm 379-1 is on the mirror with sha256 cd"),
            "{m}"
        );
        assert!(
            m.contains(
                "linux-image-6.1.0-1-cloud-amd64 1 is not on the mirror (the mirror has no version"
            ),
            "{m}"
        );
    }

    #[test]
    fn list_files_name_their_suite_and_pins_their_suite() {
        let suites = ["bookworm".to_string(), "bookworm-backports".to_string()];
        let f = |n: &str| suite_of_list_file(n, &suites);
        assert_eq!(
            f("deb.debian.org_debian_dists_bookworm_main_binary-amd64_Packages"),
            Some("bookworm")
        );
        assert_eq!(
            f("deb.debian.org_debian_dists_bookworm-backports_main_binary-amd64_Packages"),
            Some("bookworm-backports")
        );
        assert_eq!(
            f("snapshot.debian.org_archive_debian_20251201T000000Z_dists_bookworm-backports_main_binary-amd64_Packages"),
            Some("bookworm-backports")
        );
        assert_eq!(
            f("deb.debian.org_debian_dists_trixie_main_binary-amd64_Packages"),
            None
        );

        let h = |c: char| -> String { std::iter::repeat(c).take(64).collect() };
        let lock = Lock::parse(&format!(
            "suite bookworm\nextra-suite bookworm-backports\narchitecture amd64\n\
             kernel-release 6.12.1-cloud-amd64\n\
             package linux-image-6.12.1-cloud-amd64 6.12.1-1 amd64 {} bookworm-backports\n",
            h('1')
        ))
        .unwrap();
        let key = (
            "linux-image-6.12.1-cloud-amd64".to_string(),
            "6.12.1-1".to_string(),
            "amd64".to_string(),
        );
        let mut sidx = SuiteIndex::default();
        sidx.debs.insert(key.clone(), h('1'));
        sidx.suites
            .insert(key.clone(), vec!["bookworm-backports".into()]);
        assert!(missing_pins(&lock, &sidx).is_empty());
        sidx.suites.insert(key, vec!["bookworm".into()]);
        let m = missing_pins(&lock, &sidx).join("\n");
        assert!(
            m.contains("is on the mirror in bookworm, not in bookworm-backports"),
            "{m}"
        );

        let def = super::super::definition::Definition::parse(
            "suite = bookworm\nextra_suite = bookworm-backports\nextra_suite_package = linux-image-cloud-amd64\n\
             mirror = http://m\ncomponent = main\narchitecture = amd64\nvariant = apt\n\
             kernel_flavour = cloud-amd64\nsource_date_epoch = 1\ndisk_size_mib = 1024\n",
        )
        .unwrap();
        let lines = sources_line(&def, "http://m");
        assert_eq!(lines.lines().count(), 2, "{lines}");
        assert!(
            lines
                .lines()
                .nth(1)
                .unwrap()
                .ends_with("http://m bookworm-backports main"),
            "{lines}"
        );
    }

    #[test]
    fn preferences_pin_each_package() {
        let lock = Lock::parse(&format!(
            "suite s\narchitecture amd64\nkernel-release 1-k\npackage linux-image-1-k 1:2 amd64 {}\n",
            "0".repeat(64)
        ))
        .unwrap();
        assert_eq!(
            pin_preferences(&lock),
            "Package: linux-image-1-k\nPin: version 1:2\nPin-Priority: 1001\n\n"
        );
    }

    #[test]
    fn extra_suites_rank_below_the_main_suite_when_a_lock_is_resolved() {
        let parse = |extra: &str| {
            super::super::definition::Definition::parse(&format!(
                "suite = trixie\n{extra}mirror = http://m\ncomponent = main\n\
                 architecture = amd64\nvariant = apt\nkernel_flavour = cloud-amd64\n\
                 package = criu\nsource_date_epoch = 1\ndisk_size_mib = 1024\n"
            ))
            .unwrap()
        };
        assert_eq!(extra_suite_preferences(&parse("")), "");
        let d = parse(
            "extra_suite = trixie-backports\nextra_suite = forky\n\
             extra_suite_package = linux-image-cloud-amd64/trixie-backports\n\
             extra_suite_package = criu/forky\n",
        );
        let p = extra_suite_preferences(&d);
        assert_eq!(
            p,
            "Package: *\nPin: release n=trixie-backports\nPin-Priority: 100\n\n\
             Package: *\nPin: release a=trixie-backports\nPin-Priority: 100\n\n\
             Package: *\nPin: release n=forky\nPin-Priority: 100\n\n\
             Package: *\nPin: release a=forky\nPin-Priority: 100\n\n"
        );
        assert!(
            !p.contains("release n=trixie\n"),
            "the main suite keeps its priority"
        );
    }

    #[test]
    fn stale_pin_message_says_how_to_go_on() {
        let m = stale_pins_message(
            "bookworm",
            "http://m",
            &["criu 9 is not on the mirror".into()],
        );
        assert!(m.contains("criu 9 is not on the mirror"));
        assert!(m.contains("--update-lock"));
        assert!(m.contains("--mirror http://snapshot.debian.org/archive/debian/"));
    }
}
