//! The build's external commands, each from a pure `*_cmd` function: mmdebstrap, genext2fs,
//! tar; and the tarball members they take out.

use super::super::contract::GUEST_INIT_PATH;
use super::super::definition::{Definition, PID1_FILE, SSHD_CONFIG_FILE, SSHD_CONFIG_PATH};
use super::super::exec::Cmd;
use super::super::initrd::BUSYBOX_IN_TAR;
use super::super::mode::BuilderMode;
use super::{WorkPaths, CANONICAL_HOSTNAME};
use sharedos_report::text::quote;
use std::path::Path;

pub(super) fn p(path: &Path) -> String {
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

/// The tarball members of the modules the initrd loads (`order` as modules.dep names them).
pub fn module_members(release: &str, order: &[String]) -> Vec<String> {
    order
        .iter()
        .map(|m| format!("./usr/lib/modules/{release}/{m}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::image::builder::tests::def;
    use crate::image::definition::ExtraSuite;

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
