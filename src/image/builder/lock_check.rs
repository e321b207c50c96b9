//! The lock check: a lock against the definition's suites, and what the bootstrap installed
//! against the lock, or as the new lock.

use super::super::definition::Definition;
use super::super::exec::Progress;
use super::super::index;
use super::super::lock::{parse_debs, parse_installed, DebHashes, Lock, PkgKey};
use super::{read, BuildPlan};
use anyhow::{bail, Result};

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

/// The lock the image was built to, and the new one when the build wrote it (`--update-lock`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    pub lock: Lock,
    pub new_lock: Option<Lock>,
}

/// Stage "lock check": what the bootstrap installed, against the lock or as the new lock.
pub(super) fn check_installed(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::builder::tests::{def, small_lock};
    use crate::image::definition::ExtraSuite;

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
}
