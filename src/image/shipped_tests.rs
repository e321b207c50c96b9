//! The images this repository ships, held to the bytes they build. An image's sha256 follows from
//! its effective definition, its lock and the guest files; these tests pin the first two for
//! every shipped image, so that a change to how definitions are composed (or a stray edit to a
//! shared setting) fails here in milliseconds instead of as a different image after a
//! minutes-long build. `tests/image.rs` checks the built bookworm image's own sha256.

use super::definition::{Definition, ExtraSuite, ImageDir, LOCK_FILE};
use std::path::{Path, PathBuf};

fn images() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
}

/// Every image shipped before images could take packages from several extra suites: (name,
/// suite, extra suite taking the kernel).
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
        extra_suites: extra_suite
            .map(|e| ExtraSuite {
                suite: e.to_string(),
                packages: s(&["linux-image-cloud-amd64"]),
            })
            .into_iter()
            .collect(),
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

/// trixie-bpo with forky's criu: trixie-bpo's definition, a second extra suite, and the two
/// packages forky's criu drags along that must be named (see its image.conf).
#[test]
fn trixie_bpo_criu42_is_trixie_bpo_with_criu_from_forky() {
    let image = ImageDir::load(&images(), "trixie-bpo-criu42").unwrap();
    let mut want = as_built("trixie", Some("trixie-backports"));
    want.packages
        .extend(["libc6".to_string(), "libc-bin".to_string()]);
    want.extra_suites.push(ExtraSuite {
        suite: "forky".into(),
        packages: ["criu", "nftables", "libc6", "libc-bin"]
            .map(str::to_string)
            .to_vec(),
    });
    assert_eq!(image.definition, want);
    let pk = image.definition.include_packages();
    assert_eq!(pk[0], "criu/forky");
    assert!(pk.contains(&"linux-image-cloud-amd64/trixie-backports".to_string()));
    let lock =
        super::lock::Lock::parse(&std::fs::read_to_string(image.lock_path()).unwrap()).unwrap();
    assert_eq!(lock.extra_suites, ["trixie-backports", "forky"]);
    assert_eq!(lock.get("criu").unwrap().version, "4.2.1-1");
    assert_eq!(lock.get("criu").unwrap().suite, "forky");
    assert_eq!(lock.kernel_release, "7.3.4+deb13-cloud-amd64");
    // The very kernel .debs trixie-bpo runs: only criu and what it needs differ.
    let parent = super::lock::Lock::parse(
        &std::fs::read_to_string(images().join("trixie-bpo").join(LOCK_FILE)).unwrap(),
    )
    .unwrap();
    for p in lock
        .packages
        .iter()
        .filter(|p| p.name.starts_with("linux-"))
    {
        assert_eq!(parent.get(&p.name), Some(p), "{}", p.name);
    }
}

/// The effective definition, rendered, is what an image's cache key and its manifest's
/// `definition_sha256` hash: these are the hashes of the images as built, so a change to how
/// definitions are composed or rendered that would rebuild an unchanged image fails here.
#[test]
fn every_shipped_definition_renders_to_the_bytes_its_image_was_built_from() {
    let want = [
        (
            "bookworm",
            "472cb9a43c51c9a266c00498ab43dce97ce03742c4901755466f50f70153f53b",
        ),
        (
            "bookworm-bpo",
            "e99816d78c872a069706babc5fef03cdf6d572e0966ac6c6ae787763922a9ff8",
        ),
        (
            "trixie",
            "ec97bb1f436621a689c3b87aae192e30a0fb7bb97fcb30d8d9ec5b385de4d402",
        ),
        (
            "trixie-bpo",
            "93c2f8ea3eae210db8b0ed6142a397633e682046e11c60686801cf5702f4d2ca",
        ),
        (
            "forky",
            "532a63730fd7f357cc4de77ef01f87ad01f3dbbac24a4bf3c3d249476dd31cc8",
        ),
        (
            "trixie-bpo-criu42",
            "36eb5e633ac6f1a08e9b347391bd48eb60268231595f5f2d24b4d4d532f4c8a1",
        ),
        (
            "bookworm-desktop",
            "c8ebba1ca29bf23ff96db5936828ad97d981128d507d6a5b736c7c0a56e7deb3",
        ),
        (
            "trixie-desktop",
            "cfb52d9ad627d790f10f160a6c0e3d7f78e391134324d4d1b7e6c270dc559577",
        ),
        (
            "bookworm-browser",
            "55b80c11a07ff8c32cb54f5951e4e44a6c7c80402f966845f202423bb974d9b6",
        ),
        (
            "bookworm-apps",
            "98232b16a35161ae3950acafd9ed793b815e3b4e3bac2b9bec976a93f706f739",
        ),
        (
            "trixie-apps",
            "47f441691ff98248f43c1c0dd254c83a470db31bde69127b874fcd1a5f87fddd",
        ),
        (
            "trixie-bpo-criu42-apps",
            "5aacccb62cee6bab09c88ee4f611114e4d86225414640c40456246122d8af916",
        ),
    ];
    let mut names: Vec<String> = want.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        super::definition::list_images(&images()),
        "every image under images/ has its effective definition pinned here"
    );
    for (name, sha) in want {
        let image = ImageDir::load(&images(), name).unwrap();
        assert_eq!(
            sharedos_report::digest::sha256_hex(image.definition_text.as_bytes()),
            sha,
            "{name}'s effective definition"
        );
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
        (
            "trixie-bpo-criu42",
            "feaa9ebe1cf054e18e133d5028913465506cd3cc53caf7f6118aaecd65af2be8",
        ),
        (
            "bookworm-desktop",
            "6231e7209b910b5330968c113231e7b47b478684fa546b79478152db2c019a05",
        ),
        (
            "trixie-desktop",
            "0ad6181afb50b6397efb03e6c5225e9e251b4f4d4e74e7e6a30988b2578193e9",
        ),
        (
            "bookworm-browser",
            "94e519985a13950dd917fbf8ef450c2c7c8afb45a45f0bbd0d26bcf90a8c5aeb",
        ),
        (
            "bookworm-apps",
            "f5e773fc805c0ce9eecde98f15c038b66b6d6eb9b92ec229a949f68d72cda38b",
        ),
        (
            "trixie-apps",
            "f793dcc4726b21babae3b404d3982b04df96c86c04842740063bd0d9f6c99e66",
        ),
        (
            "trixie-bpo-criu42-apps",
            "6f5747d0baf0dea2f4dc980f47482806397feeddefbda27bd185f85f3709a637",
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
    let mut names: Vec<String> = want.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(
        names,
        super::definition::list_images(&images()),
        "every image under images/ has its lock pinned here"
    );
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
