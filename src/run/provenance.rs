//! Where the run happened: the host, QEMU, the image and the guest's memory, as the report's
//! `vm` object records them.

use super::Boot;
use crate::image::ImageEntry;
use crate::vm::{self, qemu};
use sharedos_report::environment;
use sharedos_report::report::VmProvenance;

/// What is known about the host before anything starts, and how the run was asked for.
pub fn host(boot: &Boot, command_line: &[String]) -> VmProvenance {
    let host = environment::capture(Vec::new());
    VmProvenance {
        qemu_version: vm::qemu_version().unwrap_or_default(),
        machine_type: qemu::MACHINE.into(),
        memory_mib: boot.memory_mib,
        cpus: boot.cpus,
        host_os: host.os,
        host_kernel: format!("{} {}", host.kernel_release, host.kernel_version),
        host_hostname: host.hostname,
        image_name: boot.image.image.clone(),
        rig_version: env!("CARGO_PKG_VERSION").into(),
        rig_git_commit: env!("SHAREDOS_RIG_GIT_COMMIT").into(),
        command_line: command_line.to_vec(),
        ..VmProvenance::default()
    }
}

/// The image the guest booted from.
pub fn image(vm: &mut VmProvenance, entry: &ImageEntry) {
    let m = &entry.manifest;
    vm.image_sha256 = m.image_sha256.clone();
    vm.image_lock_sha256 = m.lock_sha256.clone();
    vm.kernel_release_pinned = m.kernel_release.clone();
    vm.image_builder_mode = m.builder_mode.clone();
}

/// The guest's memory after the gates, from its /proc/meminfo.
pub fn guest_memory(vm: &mut VmProvenance, meminfo: &str) {
    let (total, avail) = parse_meminfo(meminfo);
    vm.guest_mem_total_mib = total;
    vm.guest_mem_used_mib = total.zip(avail).map(|(t, a)| t.saturating_sub(a));
}

/// The host CPU's model name from /proc/cpuinfo; empty where it has none.
pub fn cpu_model_name() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|rest| rest.split_once(':'))
        .map(|(_, name)| name.trim().to_string())
        .unwrap_or_default()
}

/// (MemTotal, MemAvailable) in MiB.
pub fn parse_meminfo(text: &str) -> (Option<u64>, Option<u64>) {
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|r| r.split_whitespace().next())
            .and_then(|kb| kb.parse::<u64>().ok())
            .map(|kb| kb / 1024)
    };
    (field("MemTotal:"), field("MemAvailable:"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo() {
        let (t, a) = parse_meminfo(
            "MemTotal:        1000000 kB\nMemFree: 1 kB\nMemAvailable:     800000 kB\n",
        );
        assert_eq!((t, a), (Some(976), Some(781)));
        let mut vm = VmProvenance::default();
        guest_memory(&mut vm, "MemTotal: 2048 kB\nMemAvailable: 1024 kB\n");
        assert_eq!(
            (vm.guest_mem_total_mib, vm.guest_mem_used_mib),
            (Some(2), Some(1))
        );
    }
}
