//! QEMU and qemu-img command lines, built by pure functions so the plan prints exactly what runs.

use crate::cmd::Cmd;
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

    /// Under TCG every feature is emulated, so `max` costs nothing, except CMPXCHG16B: QEMU
    /// before 8.0 computes that instruction's flags from a stale condition-code state, so the
    /// guest sees garbage in EFLAGS (TF, DF, AC, reserved bits) after it. Linux's per-CPU
    /// slab fast path runs it on every allocation; the 6.12 kernel of bookworm-backports
    /// double-faults in kmem_cache_alloc at boot (5 of 5 boots with `max`, 0 of 12 without
    /// CX16). Without the flag the kernel takes its own fallback and userland its baseline
    /// code. Under KVM `host` passes the real CPU through.
    pub fn cpu_model(self) -> &'static str {
        match self {
            Accel::Kvm => "host",
            Accel::Tcg => "max,cx16=off",
        }
    }

    /// Emulation is 2.5-6x slower than KVM (measured here and in public reports): every bound scales with it.
    pub fn slowdown(self) -> u32 {
        match self {
            Accel::Kvm => 1,
            Accel::Tcg => 4,
        }
    }
}

/// The guest's network: QEMU's user network either way, the host reaching the guest's sshd only
/// through one forwarded loopback port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Network {
    /// `restrict=on`: the guest reaches nothing. Every guest a gate run examines gets this.
    Restricted,
    /// The guest reaches out through QEMU's NAT, so apt in it reaches the mirror. Only the image
    /// builder's VM gets it: it runs the pinned bookworm image and Debian's packages, never the
    /// guest a gate run examines.
    Outbound,
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
    pub network: Network,
    /// QEMU's seccomp filter, where this QEMU was built with it (`vm::sandbox_available`).
    pub sandbox: bool,
    /// The QMP socket the rig saves a snapshot through.
    pub qmp: PathBuf,
    /// Resume: the socket QEMU takes the saved state from, instead of booting the kernel.
    pub incoming: Option<PathBuf>,
    /// `-S`: the guest stays stopped after the resume (only the tests ask for this, to show a
    /// resume that never answers falling back to a cold boot).
    pub stopped: bool,
    /// The guest's RAM in a file (a templated VM's); None: QEMU's own anonymous memory.
    pub ram: Option<RamFile>,
    /// The bound on TCG's translation cache (MiB); None: QEMU's default.
    pub tb_size_mib: Option<u64>,
}

/// A guest RAM held in a file instead of QEMU's anonymous memory: a template's, which it writes
/// through (`share=on`), or a clone's, which maps the template's file private (`share=off`):
/// copy-on-write, so a clone holds only the pages it writes, and its state arrives without any
/// RAM (the `x-ignore-shared` capability, set over QMP before the deferred incoming starts).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RamFile {
    pub path: PathBuf,
    /// The template writes its RAM to the file; a clone never does.
    pub share: bool,
}

impl RamFile {
    /// A clone takes its state after QMP set the capability: its incoming is deferred.
    pub fn deferred_incoming(&self) -> bool {
        !self.share
    }
}

/// QEMU's id for a pc machine's RAM block, which `-m` gives its own backend as well: the saved
/// state names its RAM by it, so a guest saved with anonymous RAM resumes into a file-backed
/// one, and the other way round.
pub const RAM_ID: &str = "pc.ram";

/// The migration capability that leaves shared file-backed RAM out of the saved state.
pub const IGNORE_SHARED: &str = "x-ignore-shared";

/// The guest's RAM as a file-backed memory backend of `memory_mib`, named as `-m` names its
/// own, so that the saved state's RAM block is this one.
pub fn ram_args(ram: Option<&RamFile>, memory_mib: u64) -> Vec<String> {
    let Some(ram) = ram else {
        return Vec::new();
    };
    vec![
        "-object".into(),
        format!(
            "memory-backend-file,id={RAM_ID},size={memory_mib}M,mem-path={},share={}",
            // QEMU's option syntax takes a comma in a value doubled.
            p(&ram.path).replace(',', ",,"),
            if ram.share { "on" } else { "off" }
        ),
        "-machine".into(),
        format!("memory-backend={RAM_ID}"),
    ]
}

fn p(path: &Path) -> String {
    path.display().to_string()
}

/// The bound on TCG's translation cache (MiB) in every VM the rig starts. QEMU's default is a
/// GiB (or an eighth of the host's memory), of which a VM pays the pages it fills: part of a
/// TCG VM's memory that a KVM deployment does not have. Bounded, so that the share is known
/// and alike in every arm; measured at 45 MiB filled for an idle desktop guest, so the bound
/// leaves the guest room and is not what a run waits on.
pub const TB_SIZE_MIB: u64 = 256;

/// `-accel`'s value: the accelerator, and under TCG the bound on its translation cache.
pub fn accel_arg(accel: Accel, tb_size_mib: Option<u64>) -> String {
    match (accel, tb_size_mib) {
        (Accel::Tcg, Some(mib)) => format!("tcg,tb-size={mib}"),
        _ => accel.as_str().into(),
    }
}

/// The translation cache bound a QEMU line gives TCG (`-accel tcg,tb-size=N`), or None.
pub fn tb_size_of(argv: &[String]) -> Option<u64> {
    let i = argv.iter().position(|w| w == "-accel")?;
    let value = argv.get(i.checked_add(1)?)?;
    let mut opts = value.split(',');
    if opts.next() != Some("tcg") {
        return None;
    }
    opts.find_map(|o| o.strip_prefix("tb-size="))
        .and_then(|n| n.parse().ok())
}

/// `-machine`, the accelerator (with TCG's cache bound) and its CPU model, memory and CPUs.
pub fn machine_args(
    accel: Accel,
    memory_mib: u64,
    cpus: u32,
    tb_size_mib: Option<u64>,
) -> Vec<String> {
    vec![
        "-machine".into(),
        MACHINE.into(),
        "-accel".into(),
        accel_arg(accel, tb_size_mib),
        "-cpu".into(),
        accel.cpu_model().into(),
        "-m".into(),
        memory_mib.to_string(),
        "-smp".into(),
        cpus.to_string(),
    ]
}

/// No default devices, no host config, no display or monitor; the serial console goes to a
/// file. `-no-reboot` turns a guest reset (a `panic=-1` panic included) into QEMU's exit. A
/// resumed guest's console is appended to the saved boot's, so its log holds the guest's whole
/// console.
pub fn console_args(serial_log: &Path, append: bool) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "-nodefaults".into(),
        "-no-user-config".into(),
        "-display".into(),
        "none".into(),
        "-monitor".into(),
        "none".into(),
        "-no-reboot".into(),
    ];
    if append {
        v.extend([
            "-chardev".into(),
            format!("file,id=console,path={},append=on", p(serial_log)),
            "-serial".into(),
            "chardev:console".into(),
        ]);
    } else {
        v.extend(["-serial".into(), format!("file:{}", p(serial_log))]);
    }
    v
}

/// Direct kernel boot.
pub fn kernel_args(kernel: &Path, initrd: Option<&Path>, append: &str) -> Vec<String> {
    let mut v = vec!["-kernel".into(), p(kernel)];
    if let Some(initrd) = initrd {
        v.extend(["-initrd".into(), p(initrd)]);
    }
    v.extend(["-append".into(), append.to_string()]);
    v
}

/// The run's overlay as a virtio disk.
pub fn drive_args(overlay: &Path) -> Vec<String> {
    vec![
        "-drive".into(),
        format!("file={},if=virtio,format=qcow2,cache=unsafe", p(overlay)),
    ]
}

/// QEMU's user network with the one forwarded loopback port to the guest's sshd.
pub fn net_args(network: Network, ssh_port: u16) -> Vec<String> {
    let restrict = match network {
        Network::Restricted => "restrict=on,",
        Network::Outbound => "",
    };
    vec![
        "-netdev".into(),
        format!("user,id=n0,{restrict}hostfwd=tcp:127.0.0.1:{ssh_port}-:22"),
        "-device".into(),
        "virtio-net-pci,netdev=n0".into(),
    ]
}

/// A VM generation ID that QEMU makes new at every start: a guest resumed from a snapshot
/// sees it change and reseeds its random number generator, so two resumes of one snapshot do
/// not draw the same numbers.
pub fn vmgenid_args() -> Vec<String> {
    vec!["-device".into(), "vmgenid,guid=auto".into()]
}

/// A balloon that only carries free page reporting: once the guest's `virtio_balloon` driver is
/// loaded, the pages it frees are handed back to the host (QEMU discards them), so a VM's host
/// memory can shrink to what the guest uses. The guest loads the driver only when asked to give
/// memory back (vm-compare); until then the device is idle.
pub fn balloon_args() -> Vec<String> {
    vec![
        "-device".into(),
        "virtio-balloon-pci,free-page-reporting=on".into(),
    ]
}

/// The QMP socket, in the run's private directory.
pub fn qmp_args(socket: &Path) -> Vec<String> {
    vec![
        "-qmp".into(),
        format!("unix:{},server=on,wait=off", p(socket)),
    ]
}

/// A resume: QEMU listens on `socket` for the saved state and runs the guest once it is in
/// (unless `stopped`). `deferred`: QEMU waits for QMP's `migrate-incoming`, which names the
/// socket, so that capabilities can be set first.
pub fn incoming_args(socket: Option<&Path>, stopped: bool, deferred: bool) -> Vec<String> {
    let mut v = Vec::new();
    if let Some(socket) = socket {
        let from = if deferred {
            "defer".to_string()
        } else {
            format!("unix:{}", p(socket))
        };
        v.extend(["-incoming".into(), from]);
        if stopped {
            v.push("-S".into());
        }
    }
    v
}

/// QEMU's own seccomp filter: no obsolete system calls, no privilege changes, no new processes,
/// no scheduler or affinity changes. A guest that broke out of the emulator would meet it.
pub fn sandbox_args(on: bool) -> Vec<String> {
    if !on {
        return Vec::new();
    }
    vec![
        "-sandbox".into(),
        "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny".into(),
    ]
}

/// The guest agent's port (a virtio-serial port by this name), and its host end: a socket QEMU
/// listens on beside the QMP one.
pub const AGENT_PORT: &str = "org.sharedos.agent";
pub const AGENT_SOCKET: &str = "agent.sock";

/// The guest agent's channel (`sharedos-init` starts the agent on the port). A resumed guest is
/// set up through it, by a program already running in the snapshot, where a command over SSH
/// would start one: under TCG, `sh` and `perl` started cold cost 0.3 s of every resume. The
/// guest's end blocks while the host's is not connected, so a guest nobody sets up (a cold boot)
/// has its agent asleep.
pub fn agent_args(socket: &Path) -> Vec<String> {
    vec![
        "-chardev".into(),
        format!("socket,id=agent,path={},server=on,wait=off", p(socket)),
        "-device".into(),
        "virtio-serial-pci,id=agent-serial".into(),
        "-device".into(),
        format!("virtserialport,bus=agent-serial.0,chardev=agent,name={AGENT_PORT}"),
    ]
}

/// A session's QEMU: a vm-run's, a vm-exec's, the image builder's.
pub fn qemu_cmd(s: &QemuSpec) -> Cmd {
    let mut v = vec![QEMU.into(), "-name".into(), s.name.clone()];
    v.extend(machine_args(s.accel, s.memory_mib, s.cpus, s.tb_size_mib));
    v.extend(ram_args(s.ram.as_ref(), s.memory_mib));
    v.extend(console_args(&s.serial_log, s.incoming.is_some()));
    v.extend(kernel_args(&s.kernel, Some(&s.initrd), &s.append));
    v.extend(drive_args(&s.overlay));
    v.extend(net_args(s.network, s.ssh_port));
    v.extend(vmgenid_args());
    v.extend(balloon_args());
    v.extend(agent_args(&s.qmp.with_file_name(AGENT_SOCKET)));
    v.extend(qmp_args(&s.qmp));
    let deferred = s.ram.as_ref().is_some_and(RamFile::deferred_incoming);
    v.extend(incoming_args(s.incoming.as_deref(), s.stopped, deferred));
    v.extend(sandbox_args(s.sandbox));
    Cmd::new(v)
}

/// The floor's kernel command line: with no initrd and no disk the kernel cannot mount a root
/// filesystem and panics; `panic=-1` resets at once, which `-no-reboot` turns into QEMU's exit.
pub const FLOOR_APPEND: &str = "console=ttyS0 panic=-1";

/// The benchmark's floor: the same machine and console as a vm-run, the image's kernel booted
/// bare (no initrd, no drive, no network) to its no-root panic. Whatever a vm-run's boot costs
/// beyond this is the rig's and the guest's own. It runs under the same sandbox as the run.
pub fn floor_cmd(
    accel: Accel,
    memory_mib: u64,
    cpus: u32,
    kernel: &Path,
    serial_log: &Path,
    sandbox: bool,
) -> Cmd {
    let mut v = vec![QEMU.into()];
    v.extend(machine_args(accel, memory_mib, cpus, Some(TB_SIZE_MIB)));
    v.extend(console_args(serial_log, false));
    v.extend(kernel_args(kernel, None, FLOOR_APPEND));
    v.extend(sandbox_args(sandbox));
    Cmd::new(v)
}

/// A copy-on-write overlay: the cached image is only ever read.
pub fn overlay_cmd(disk: &Path, overlay: &Path) -> Cmd {
    overlay_on_cmd(disk, "raw", overlay)
}

/// A copy-on-write overlay on `backing` of format `format` (a snapshot's own overlay is qcow2).
pub fn overlay_on_cmd(backing: &Path, format: &str, overlay: &Path) -> Cmd {
    Cmd::new(vec![
        "qemu-img".into(),
        "create".into(),
        "-q".into(),
        "-f".into(),
        "qcow2".into(),
        "-F".into(),
        format.into(),
        "-b".into(),
        p(backing),
        p(overlay),
    ])
}

/// Exits 0 without starting a machine exactly when this QEMU knows `-sandbox`.
pub fn sandbox_probe_cmd() -> Cmd {
    let mut v = vec![QEMU.to_string()];
    v.extend(sandbox_args(true));
    v.push("-version".into());
    Cmd::new(v)
}

pub fn version_cmd() -> Cmd {
    Cmd::new(vec![QEMU.into(), "--version".into()])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qemu_argv(s: &QemuSpec) -> Vec<String> {
        qemu_cmd(s).argv
    }

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
            ram: None,
            tb_size_mib: Some(TB_SIZE_MIB),
            network: Network::Restricted,
            sandbox: false,
            qmp: "/r/qmp.sock".into(),
            incoming: None,
            stopped: false,
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
        assert_eq!(after(&a, "-accel"), "tcg,tb-size=256");
        assert_eq!(after(&a, "-cpu"), "max,cx16=off");
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
    fn vm_run_line_is_unchanged() {
        let a = qemu_argv(&spec(Accel::Tcg));
        let want = [
            "qemu-system-x86_64",
            "-name",
            "sharedos-rig-ab12",
            "-machine",
            "pc",
            "-accel",
            "tcg,tb-size=256",
            "-cpu",
            "max,cx16=off",
            "-m",
            "1024",
            "-smp",
            "2",
            "-nodefaults",
            "-no-user-config",
            "-display",
            "none",
            "-monitor",
            "none",
            "-no-reboot",
            "-serial",
            "file:/r/serial.log",
            "-kernel",
            "/c/vmlinuz",
            "-initrd",
            "/c/initrd.img",
            "-append",
            "console=ttyS0 root=/dev/vda",
            "-drive",
            "file=/r/overlay.qcow2,if=virtio,format=qcow2,cache=unsafe",
            "-netdev",
            "user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:40022-:22",
            "-device",
            "virtio-net-pci,netdev=n0",
            "-device",
            "vmgenid,guid=auto",
            "-device",
            "virtio-balloon-pci,free-page-reporting=on",
            "-chardev",
            "socket,id=agent,path=/r/agent.sock,server=on,wait=off",
            "-device",
            "virtio-serial-pci,id=agent-serial",
            "-device",
            "virtserialport,bus=agent-serial.0,chardev=agent,name=org.sharedos.agent",
            "-qmp",
            "unix:/r/qmp.sock,server=on,wait=off",
        ];
        assert_eq!(a, want);
    }

    #[test]
    fn a_template_writes_its_ram_file_and_a_clone_maps_it_private_deferring_its_state() {
        let resume = QemuSpec {
            incoming: Some("/r/incoming.sock".into()),
            ..spec(Accel::Tcg)
        };
        let ram = |share| RamFile {
            path: "/dev/shm/t.ram".into(),
            share,
        };
        let plain = qemu_argv(&resume);
        let template = qemu_argv(&QemuSpec {
            ram: Some(ram(true)),
            ..resume.clone()
        });
        assert_eq!(template.len(), plain.len() + 4);
        assert_eq!(
            after(&template, "-object"),
            "memory-backend-file,id=pc.ram,size=1024M,mem-path=/dev/shm/t.ram,share=on"
        );
        assert!(template.contains(&"memory-backend=pc.ram".to_string()));
        // The template resumes the image's snapshot, saved with anonymous RAM, as any resume.
        assert_eq!(after(&template, "-incoming"), "unix:/r/incoming.sock");
        let clone = qemu_argv(&QemuSpec {
            ram: Some(ram(false)),
            ..resume
        });
        assert_eq!(
            after(&clone, "-object"),
            "memory-backend-file,id=pc.ram,size=1024M,mem-path=/dev/shm/t.ram,share=off"
        );
        assert_eq!(after(&clone, "-incoming"), "defer");
        assert!(ram_args(None, 1024).is_empty());
    }

    #[test]
    fn a_resume_is_the_same_line_taking_its_state_from_a_socket() {
        let cold = qemu_argv(&spec(Accel::Tcg));
        let resume = QemuSpec {
            incoming: Some("/r/incoming.sock".into()),
            ..spec(Accel::Tcg)
        };
        let a = qemu_argv(&resume);
        assert_eq!(a.len(), cold.len() + 4);
        let console = a.iter().position(|w| w == "-chardev").unwrap();
        assert_eq!(
            a[console..console + 4],
            [
                "-chardev",
                "file,id=console,path=/r/serial.log,append=on",
                "-serial",
                "chardev:console"
            ]
        );
        assert_eq!(a[a.len() - 2..], ["-incoming", "unix:/r/incoming.sock"]);
        let stopped = qemu_argv(&QemuSpec {
            stopped: true,
            ..resume
        });
        assert_eq!(stopped.last().map(String::as_str), Some("-S"));
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
    fn machine_follows_the_accelerator() {
        assert_eq!(
            machine_args(Accel::Tcg, 512, 1, None).join(" "),
            "-machine pc -accel tcg -cpu max,cx16=off -m 512 -smp 1"
        );
        assert_eq!(
            machine_args(Accel::Tcg, 512, 1, Some(256)).join(" "),
            "-machine pc -accel tcg,tb-size=256 -cpu max,cx16=off -m 512 -smp 1"
        );
        // KVM has no translation cache to bound.
        assert_eq!(accel_arg(Accel::Kvm, Some(256)), "kvm");
        // The report reads the bound back from the line that ran.
        let line = |a: Accel, tb| machine_args(a, 512, 1, tb);
        assert_eq!(tb_size_of(&line(Accel::Tcg, Some(256))), Some(256));
        assert_eq!(tb_size_of(&line(Accel::Tcg, None)), None);
        assert_eq!(tb_size_of(&line(Accel::Kvm, Some(256))), None);
        assert_eq!(tb_size_of(&["-accel".to_string()]), None);
        assert_eq!(
            machine_args(Accel::Kvm, 2048, 4, Some(256)).join(" "),
            "-machine pc -accel kvm -cpu host -m 2048 -smp 4"
        );
    }

    #[test]
    fn console_goes_to_the_file_and_never_reboots() {
        assert_eq!(
            console_args(Path::new("/r/serial.log"), false).join(" "),
            "-nodefaults -no-user-config -display none -monitor none -no-reboot -serial file:/r/serial.log"
        );
    }

    #[test]
    fn kernel_with_and_without_initrd() {
        let with = kernel_args(
            Path::new("/c/vmlinuz"),
            Some(Path::new("/c/initrd.img")),
            "console=ttyS0 root=/dev/vda",
        );
        assert_eq!(
            with,
            [
                "-kernel",
                "/c/vmlinuz",
                "-initrd",
                "/c/initrd.img",
                "-append",
                "console=ttyS0 root=/dev/vda"
            ]
        );
        let bare = kernel_args(Path::new("/c/vmlinuz"), None, "console=ttyS0");
        assert_eq!(bare, ["-kernel", "/c/vmlinuz", "-append", "console=ttyS0"]);
    }

    #[test]
    fn drive_and_net() {
        assert_eq!(
            drive_args(Path::new("/r/o.qcow2")),
            [
                "-drive",
                "file=/r/o.qcow2,if=virtio,format=qcow2,cache=unsafe"
            ]
        );
        assert_eq!(
            net_args(Network::Restricted, 2222).join(" "),
            "-netdev user,id=n0,restrict=on,hostfwd=tcp:127.0.0.1:2222-:22 -device virtio-net-pci,netdev=n0"
        );
    }

    #[test]
    fn floor_is_the_same_machine_booted_bare() {
        let f = floor_cmd(
            Accel::Tcg,
            1024,
            2,
            Path::new("/c/vmlinuz"),
            Path::new("/r/serial.log"),
            false,
        )
        .argv;
        assert_eq!(
            f.join(" "),
            "qemu-system-x86_64 -machine pc -accel tcg,tb-size=256 -cpu max,cx16=off -m 1024 -smp 2 \
             -nodefaults -no-user-config -display none -monitor none -no-reboot -serial file:/r/serial.log \
             -kernel /c/vmlinuz -append console=ttyS0 panic=-1"
        );
        for absent in ["-initrd", "-drive", "-netdev", "-device"] {
            assert!(!f.iter().any(|a| a == absent), "{absent} in the floor");
        }
        // The same machine and console as the vm-run it is the floor of.
        let run = qemu_argv(&spec(Accel::Tcg));
        assert_eq!(f[1..22], run[3..24]);
        let sandboxed = floor_cmd(
            Accel::Tcg,
            1024,
            2,
            Path::new("/c/vmlinuz"),
            Path::new("/r/serial.log"),
            true,
        )
        .argv;
        assert_eq!(sandboxed[sandboxed.len() - 2..], sandbox_args(true)[..]);
    }

    #[test]
    fn sandbox_is_appended_only_when_available() {
        let off = qemu_argv(&spec(Accel::Tcg));
        assert!(!off.iter().any(|a| a == "-sandbox"));
        let on = qemu_argv(&QemuSpec {
            sandbox: true,
            ..spec(Accel::Tcg)
        });
        assert_eq!(
            after(&on, "-sandbox"),
            "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny"
        );
        assert_eq!(
            &on[..off.len()],
            &off[..],
            "the sandbox only adds to the line"
        );
    }

    #[test]
    fn only_the_builder_vm_reaches_out() {
        let run = qemu_argv(&spec(Accel::Tcg));
        let b = qemu_argv(&QemuSpec {
            network: Network::Outbound,
            ..spec(Accel::Tcg)
        });
        assert_eq!(
            after(&b, "-netdev"),
            "user,id=n0,hostfwd=tcp:127.0.0.1:40022-:22"
        );
        assert!(!after(&b, "-netdev").contains("restrict"));
        assert!(after(&run, "-netdev").contains("restrict=on"));
        // Everything else is the vm-run's line.
        let i = b.iter().position(|a| a == "-netdev").unwrap();
        assert_eq!(b.len(), run.len());
        assert_eq!(b[..=i], run[..=i]);
        assert_eq!(b[i + 2..], run[i + 2..]);
    }

    #[test]
    fn overlay_never_writes_the_base() {
        let a = overlay_cmd(Path::new("/cache/disk.img"), Path::new("/run/o.qcow2")).argv;
        assert_eq!(
            a.join(" "),
            "qemu-img create -q -f qcow2 -F raw -b /cache/disk.img /run/o.qcow2"
        );
    }
}
