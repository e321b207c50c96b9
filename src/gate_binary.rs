//! The static `sharedos-gate` that vm-run copies into the guest: how cargo builds it, and the
//! check that it names no dynamic loader. A developer's step before a run, not a phase of one.

use crate::cmd::Cmd;
use crate::progress::Progress;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

/// The package vm-run copies into the guest.
pub const GATE_PACKAGE: &str = "sharedos-gate";

/// The cargo invocation that builds a package's binary statically, so it runs in any x86_64
/// guest. RUSTFLAGS reach only the target given with --target, never build scripts or proc
/// macros.
pub fn static_build_cmd(cargo: &str, package: &str) -> Cmd {
    let argv = [
        cargo,
        "build",
        "--release",
        "--package",
        package,
        "--target",
        "x86_64-unknown-linux-gnu",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    Cmd::new(argv).env("RUSTFLAGS", GATE_RUSTFLAGS)
}

/// The gate binary's build.
pub fn gate_build_cmd(cargo: &str) -> Cmd {
    static_build_cmd(cargo, GATE_PACKAGE)
}

pub const GATE_RUSTFLAGS: &str = "-C target-feature=+crt-static";

/// Builds `sharedos-gate` statically and returns its path.
pub fn build_gate_binary(workspace: &Path) -> Result<PathBuf> {
    build_static(workspace, GATE_PACKAGE)
}

/// Builds `package`'s binary (named as the package) statically and returns its path.
pub fn build_static(workspace: &Path, package: &str) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let cmd = static_build_cmd(&cargo, package);
    Progress::new("vm-run").note(&format!("building {package}: {}", cmd.display()));
    // cargo's own output is the progress here: stdin closed, stdout and stderr inherited.
    let status = cmd
        .command()
        .current_dir(workspace)
        .status()
        .with_context(|| format!("running {}", cmd.display()))?;
    if !status.success() {
        bail!(
            "building the static {package} failed ({status}): {}",
            cmd.display()
        );
    }
    let bin = static_binary_path(workspace, package);
    let bytes = std::fs::read(&bin)
        .with_context(|| format!("cargo succeeded but {} is unreadable", bin.display()))?;
    if has_interpreter(&bytes)? {
        bail!(
            "{} is dynamically linked (it names an ELF interpreter): it would not run in a guest with another libc",
            bin.display()
        );
    }
    Ok(bin)
}

/// Whether an x86_64 ELF file asks for a dynamic loader (a PT_INTERP program header). A
/// static-pie binary has none.
pub fn has_interpreter(elf: &[u8]) -> Result<bool> {
    const PT_INTERP: u32 = 3;
    if elf.len() < 64 || &elf[..4] != b"\x7fELF" || elf[4] != 2 || elf[5] != 1 {
        bail!("not a little-endian 64-bit ELF file");
    }
    let u16_at = |o: usize| u16::from_le_bytes([elf[o], elf[o + 1]]) as usize;
    let mut off_bytes = [0u8; 8];
    off_bytes.copy_from_slice(&elf[32..40]);
    let phoff = u64::from_le_bytes(off_bytes) as usize;
    let (phentsize, phnum) = (u16_at(54), u16_at(56));
    for i in 0..phnum {
        let at = phoff + i * phentsize;
        let Some(t) = elf.get(at..at + 4) else {
            bail!("truncated program header table");
        };
        if u32::from_le_bytes([t[0], t[1], t[2], t[3]]) == PT_INTERP {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Refuses a gate binary that is not there, before anything is archived or booted; the
/// fix-it names the command that builds it.
pub fn require(gate: &Path) -> Result<()> {
    if !gate.is_file() {
        bail!(
            "the gate binary {} does not exist: build it with `{}`",
            gate.display(),
            gate_build_cmd("cargo").display()
        );
    }
    Ok(())
}

/// Where `build_gate_binary` puts the static binary.
pub fn default_gate_binary(workspace: &Path) -> PathBuf {
    static_binary_path(workspace, GATE_PACKAGE)
}

fn static_binary_path(workspace: &Path, package: &str) -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace.join("target"))
        .join("x86_64-unknown-linux-gnu/release")
        .join(package)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gate_build_is_static_and_release() {
        assert_eq!(
            gate_build_cmd("cargo").display(),
            "RUSTFLAGS='-C target-feature=+crt-static' cargo build --release --package sharedos-gate --target x86_64-unknown-linux-gnu"
        );
        assert!(GATE_RUSTFLAGS.contains("+crt-static"));
    }

    #[test]
    fn interpreter_detection() {
        // This test binary is linked dynamically by cargo's default settings.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(has_interpreter(&me).unwrap());
        assert!(has_interpreter(b"#!/bin/sh\n").is_err());
    }
}
