//! Where the diagnostic runs, read from the machine itself.

use crate::report::Environment;

fn read_trim(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

fn os_pretty_name() -> String {
    let text = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_default()
}

/// Everything but the tool versions, which the prerequisites gate fills in as it finds them.
pub fn capture(command_line: Vec<String>) -> Environment {
    let uts = nix::sys::utsname::uname().ok();
    let field = |f: fn(&nix::sys::utsname::UtsName) -> &std::ffi::OsStr| {
        uts.as_ref()
            .map(|u| f(u).to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    Environment {
        kernel_release: field(|u| u.release()),
        kernel_version: field(|u| u.version()),
        machine: field(|u| u.machine()),
        hostname: field(|u| u.nodename()),
        boot_id: read_trim("/proc/sys/kernel/random/boot_id"),
        os: os_pretty_name(),
        euid: nix::unistd::geteuid().as_raw(),
        started_at: crate::clock::now_rfc3339(),
        finished_at: String::new(),
        criu_version: None,
        xvfb_version: None,
        xterm_version: None,
        // Every crate of the workspace carries the one workspace version, so this is the gate's.
        gate_version: env!("CARGO_PKG_VERSION").to_string(),
        command_line,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reads_this_machine() {
        let e = super::capture(vec!["x".into()]);
        assert!(!e.kernel_release.is_empty());
        assert_eq!(e.boot_id.len(), 36, "{}", e.boot_id);
        assert!(!e.hostname.is_empty());
        assert!(e.started_at.ends_with('Z'));
    }
}
