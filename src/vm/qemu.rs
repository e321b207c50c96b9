//! QEMU and qemu-img command lines, built by pure functions so the plan prints exactly what runs.

use std::path::{Path, PathBuf};

pub const QEMU: &str = "qemu-system-x86_64";
/// i440fx: the most widely supported machine type, with virtio disk and network.
pub const MACHINE: &str = "pc";

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
pub enum Accel {
    Kvm,
    Tcg,
}

impl Accel {
    pub fn as_str(self) -> &'static str {
        match self {
            Accel::Kvm => "kvm",
            Accel::Tcg => "tcg",
        }
    }

    /// Under TCG every feature is emulated, so `max` costs nothing; under KVM `host` passes the
    /// real CPU through.
    pub fn cpu_model(self) -> &'static str {
        match self {
            Accel::Kvm => "host",
            Accel::Tcg => "max",
        }
    }

    /// Emulation is 2.5-6x slower than KVM (FIELD-NOTES): every bound scales with it.
    pub fn slowdown(self) -> u32 {
        match self {
            Accel::Kvm => 1,
            Accel::Tcg => 4,
        }
    }
}

/// Everything that varies between boots.
#[derive(Clone, Debug)]
pub struct QemuSpec {
    pub name: String,
    pub accel: Accel,
    pub memory_mib: u64,
    pub cpus: u32,
    pub kernel: PathBuf,
    pub initrd: PathBuf,
    pub overlay: PathBuf,
    pub append: String,
    pub serial_log: PathBuf,
    pub ssh_port: u16,
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The guest's network is QEMU's user network with `restrict=on`: the guest reaches nothing,
/// and the host reaches its sshd only through the one forwarded loopback port.
pub fn qemu_argv(s: &QemuSpec) -> Vec<String> {
    vec![
        QEMU.into(),
        "-name".into(),
        s.name.clone(),
        "-machine".into(),
        MACHINE.into(),
        "-accel".into(),
        s.accel.as_str().into(),
        "-cpu".into(),
        s.accel.cpu_model().into(),
        "-m".into(),
        s.memory_mib.to_string(),
        "-smp".into(),
        s.cpus.to_string(),
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-monitor".into(),
        "none".into(),
        "-no-reboot".into(),
        "-serial".into(),
        format!("file:{}", p(&s.serial_log)),
        "-kernel".into(),
        p(&s.kernel),
        "-initrd".into(),
        p(&s.initrd),
        "-append".into(),
        s.append.clone(),
        "-drive".into(),
        format!("file={},if=virtio,format=qcow2,cache=unsafe", p(&s.overlay)),
        "-netdev".into(),
        format!(
            "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:{}-:22",
            s.ssh_port
        ),
        "-device".into(),
        "virtio-net-pci,netdev=n0".into(),
    ]
}

/// A copy-on-write overlay: the cached image is only ever read.
pub fn overlay_argv(disk: &Path, overlay: &Path) -> Vec<String> {
    vec![
        "qemu-img".into(),
        "create".into(),
        "-q".into(),
        "-f".into(),
        "qcow2".into(),
        "-F".into(),
        "raw".into(),
        "-b".into(),
        p(disk),
        p(overlay),
    ]
}

pub fn version_argv() -> Vec<String> {
    vec![QEMU.into(), "--version".into()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(accel: Accel) -> QemuSpec {
        QemuSpec {
            name: "sharedos-rig-ab12".into(),
            accel,
            memory_mib: 1024,
            cpus: 2,
            kernel: "/c/vmlinuz".into(),
            initrd: "/c/initrd.img".into(),
            overlay: "/r/overlay.qcow2".into(),
            append: "console=ttyS0 root=/dev/vda".into(),
            serial_log: "/r/serial.log".into(),
            ssh_port: 40022,
        }
    }

    fn after<'a>(argv: &'a [String], flag: &str) -> &'a str {
        let i = argv.iter().position(|a| a == flag).unwrap();
        &argv[i + 1]
    }

    #[test]
    fn tcg_line() {
        let a = qemu_argv(&spec(Accel::Tcg));
        assert_eq!(a[0], "qemu-system-x86_64");
        assert_eq!(after(&a, "-accel"), "tcg");
        assert_eq!(after(&a, "-cpu"), "max");
        assert_eq!(after(&a, "-m"), "1024");
        assert_eq!(after(&a, "-smp"), "2");
        assert_eq!(after(&a, "-kernel"), "/c/vmlinuz");
        assert_eq!(after(&a, "-initrd"), "/c/initrd.img");
        assert_eq!(after(&a, "-serial"), "file:/r/serial.log");
        assert_eq!(
            after(&a, "-drive"),
            "file=/r/overlay.qcow2,if=virtio,format=qcow2,cache=unsafe"
        );
    }

    #[test]
    fn network_is_restricted_to_one_loopback_forward() {
        let a = qemu_argv(&spec(Accel::Kvm));
        assert_eq!(
            after(&a, "-netdev"),
            "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:40022-:22"
        );
        assert_eq!(after(&a, "-accel"), "kvm");
        assert_eq!(after(&a, "-cpu"), "host");
    }

    #[test]
    fn overlay_never_writes_the_base() {
        let a = overlay_argv(Path::new("/cache/disk.img"), Path::new("/run/o.qcow2"));
        assert_eq!(
            a.join(" "),
            "qemu-img create -q -f qcow2 -F raw -b /cache/disk.img /run/o.qcow2"
        );
    }
}
