//! The images this repository ships, held to the bytes they build. An image's sha256 follows from
//! its effective definition, its lock and the guest files; these tests pin the first two for
//! every shipped image, so that a change to how definitions are composed (or a stray edit to a
//! shared setting) fails here in milliseconds instead of as a different image after a
//! minutes-long build. `tests/image.rs` checks the built bookworm image's own sha256.

use super::definition::{Definition, ImageDir, LOCK_FILE};
use std::path::{Path, PathBuf};

fn images() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
}

/// Every shipped image: (name, suite, extra suite taking the kernel).
const SHIPPED: [(&str, &str, Option<&str>); 5] = [
    ("bookworm", "bookworm", None),
    ("bookworm-bpo", "bookworm", Some("bookworm-backports")),
    ("trixie", "trixie", None),
    ("trixie-bpo", "trixie", Some("trixie-backports")),
    ("forky", "forky", None),
];

/// The definition every shipped image had when each one was a complete image.conf of its own,
/// written out value by value: a changed, dropped, added or reordered item (the package and
/// filter order reach mmdebstrap's argv) makes it differ.
fn as_built(suite: &str, extra_suite: Option<&str>) -> Definition {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<String>>();
    Definition {
        suite: suite.into(),
        mirror: "http://deb.debian.org/debian".into(),
        components: s(&["main"]),
        architecture: "amd64".into(),
        variant: "apt".into(),
        kernel_flavour: "cloud-amd64".into(),
        packages: s(&[
            "criu",
            "iptables",
            "nftables",
            "xvfb",
            "xterm",
            "x11-utils",
            "xfonts-base",
            "openssh-server",
            "iproute2",
            "kmod",
            "procps",
            "util-linux",
            "mount",
            "busybox-static",
        ]),
        extra_suite: extra_suite.map(str::to_string),
        extra_packages: match extra_suite {
            Some(_) => s(&["linux-image-cloud-amd64"]),
            None => Vec::new(),
        },
        dpkg_filters: vec![
            (false, "/usr/share/man/*".into()),
            (false, "/usr/share/info/*".into()),
            (false, "/usr/share/locale/*".into()),
            (false, "/usr/share/doc/*".into()),
            (false, "/usr/share/lintian/*".into()),
            (true, "/usr/share/doc/*/copyright".into()),
        ],
        source_date_epoch: 1_700_000_000,
        disk_size_mib: 1536,
        inodes: 65536,
    }
}

#[test]
fn every_shipped_image_defines_what_it_always_has() {
    for (name, suite, extra) in SHIPPED {
        let image = ImageDir::load(&images(), name).unwrap();
        assert_eq!(image.definition, as_built(suite, extra), "{name}");
    }
}

/// Locks change only through `--update-lock`, reviewed on their own; a change of layout or of
/// how definitions are read leaves every one of them byte for byte as it was.
#[test]
fn every_shipped_lock_is_the_one_its_image_was_built_from() {
    let want = [
        (
            "bookworm",
            "d517b1d8766b0391b14e8052745a3e7f64297cad9aa0792a4ee4beb370b8d30e",
        ),
        (
            "bookworm-bpo",
            "0c3eff6fbe9b5d138a3d00370f99aa9a8a566987749f7e638cd33e8ffb32d860",
        ),
        (
            "trixie",
            "ae8fb3440086691e923ade02c67df581204976b6a48d2fdb95759e9e39d654d8",
        ),
        (
            "trixie-bpo",
            "5be000dd9d99afa518fa4de222f4aab990175cd8c9697f3745d451e37daa49cb",
        ),
        (
            "forky",
            "13eefad98c0263d1e6d737960ea07c6d555b6a1bf0ef153faeb81285fd03f87e",
        ),
    ];
    for (name, sha) in want {
        let bytes = std::fs::read(images().join(name).join(LOCK_FILE)).unwrap();
        assert_eq!(
            sharedos_report::digest::sha256_hex(&bytes),
            sha,
            "{name}'s lock"
        );
    }
    assert_eq!(want.len(), SHIPPED.len());
}

/// The guest files live once, in images/base/: a copy anywhere else (under its own name or
/// another) would be a second place to fix, and the build would not even read it.
#[test]
fn every_guest_file_exists_once_in_the_base() {
    use super::definition::{BASE_DIR, GUEST_FILES};
    let root = images();
    let base = root.join(BASE_DIR);
    let shared: Vec<(PathBuf, Vec<u8>)> = GUEST_FILES
        .iter()
        .map(|f| (base.join(f), std::fs::read(base.join(f)).unwrap()))
        .collect();
    let mut stack = vec![root.clone()];
    let mut seen = 0;
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            seen += 1;
            let name = path.file_name().unwrap().to_str().unwrap();
            let bytes = std::fs::read(&path).unwrap();
            for (original, content) in &shared {
                if path != *original {
                    assert!(
                        original.file_name().unwrap() != name && *content != bytes,
                        "{} repeats {}",
                        path.display(),
                        original.display()
                    );
                }
            }
        }
    }
    assert!(seen > GUEST_FILES.len());
}
