//! The install step's --open-kvm and --allow-userns helpers on stand-ins for /dev/kvm, udev and
//! the AppArmor setting.

use super::{root, text, write_executable};
use crate::common;
use crate::common::scratch::Scratch;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output};

/// Runs one of the install step's helpers (.ci/open-kvm, .ci/allow-userns) with `env`, and
/// `bin` first on PATH.
fn helper(name: &str, env: &[(&str, &Path)], bin: &Path) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(root().join(".ci").join(name));
    c.env("PATH", path).env_remove("SUDO_USER");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    eprintln!("--- .ci/{name} ({}):\n{}", o.status, text(&o));
    o
}

/// A stand-in udevadm that logs its arguments and, on `trigger`, does what udev does with the
/// rule: the device gets mode 0666 if a rule in the rules directory says so. `applies` false
/// stands for a host where udev is not running.
fn stub_udevadm(bin: &Path, log: &Path, applies: bool) {
    std::fs::create_dir_all(bin).unwrap();
    let apply = if applies {
        "[ \"$1\" = trigger ] && grep -qs 'MODE=\"0666\"' \"$UDEV_RULES_DIR\"/*.rules && chmod 0666 \"$KVM_DEVICE\"\n"
    } else {
        ""
    };
    write_executable(
        &bin.join("udevadm"),
        &format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\n{apply}exit 0\n",
            log.display()
        ),
    );
}

fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

fn root_or_skip(test: &str) -> bool {
    if !common::is_root() {
        common::skip::cannot_run(
            test,
            "the install step's helpers refuse to run without root",
        );
        return false;
    }
    true
}

/// --open-kvm: where the device exists, the usual udev rule, reloaded and triggered, and the
/// device ends mode 0666; a second run changes nothing; no device, nothing written; a udev that
/// does not apply the rule fails the step with the fix.
#[test]
fn open_kvm_writes_the_rule_applies_it_and_a_second_run_changes_nothing() {
    if !root_or_skip("open_kvm_writes_the_rule_applies_it_and_a_second_run_changes_nothing") {
        return;
    }
    let s = Scratch::new("open-kvm");
    let (dev, rules, bin, log) = (
        s.0.join("kvm"),
        s.0.join("rules.d"),
        s.0.join("bin"),
        s.0.join("udevadm.log"),
    );
    stub_udevadm(&bin, &log, true);
    let env = [
        ("KVM_DEVICE", dev.as_path()),
        ("UDEV_RULES_DIR", rules.as_path()),
    ];

    // No device: nothing to do, nothing written.
    let o = helper("open-kvm", &env, &bin);
    assert!(o.status.success());
    assert!(text(&o).contains("nothing to open"), "{}", text(&o));
    assert!(!rules.exists() && !log.exists());

    // root:kvm 0660, as on a hosted runner.
    std::fs::write(&dev, b"").unwrap();
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o660)).unwrap();
    let o = helper("open-kvm", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    let rule = rules.join("65-sharedos-rig-kvm.rules");
    assert_eq!(
        std::fs::read_to_string(&rule).unwrap(),
        "KERNEL==\"kvm\", GROUP=\"kvm\", MODE=\"0666\", OPTIONS+=\"static_node=kvm\"\n"
    );
    let calls = std::fs::read_to_string(&log).unwrap();
    assert!(
        calls.starts_with("control --reload-rules\ntrigger --name-match=kvm\n"),
        "{calls}"
    );
    assert_eq!(mode(&dev), 0o666);
    assert!(text(&o).contains("wrote udev rule"), "{}", text(&o));
    assert!(text(&o).contains("mode 0660 -> 0666"), "{}", text(&o));

    // Again: nothing to change, udev left alone.
    let o = helper("open-kvm", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("nothing changed"), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), calls);

    // A udev that does not apply the rule: the step fails and says what to do.
    std::fs::remove_dir_all(&rules).unwrap();
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o660)).unwrap();
    stub_udevadm(&bin, &log, false);
    let o = helper("open-kvm", &env, &bin);
    assert!(!o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("is still mode 0660"), "{}", text(&o));
    assert!(text(&o).contains("chmod 0666"), "{}", text(&o));
}

/// --allow-userns: 1 becomes 0 and is read back; a second run changes nothing; no setting,
/// nothing to do; a setting that cannot be written fails the step with the fix.
#[test]
fn allow_userns_lifts_the_restriction_once() {
    if !root_or_skip("allow_userns_lifts_the_restriction_once") {
        return;
    }
    let s = Scratch::new("allow-userns");
    let bin = s.0.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let knob = s.0.join("apparmor_restrict_unprivileged_userns");
    let env = [("USERNS_SYSCTL", knob.as_path())];

    let o = helper("allow-userns", &env, &bin);
    assert!(o.status.success());
    assert!(text(&o).contains("nothing to lift"), "{}", text(&o));
    assert!(!knob.exists());

    std::fs::write(&knob, b"1\n").unwrap();
    let o = helper("allow-userns", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0\n");
    assert!(
        text(&o).contains("1 -> 0 until the next boot"),
        "{}",
        text(&o)
    );

    let o = helper("allow-userns", &env, &bin);
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("already lifted"), "{}", text(&o));

    // /dev/full takes no write.
    let o = helper(
        "allow-userns",
        &[("USERNS_SYSCTL", Path::new("/dev/full"))],
        &bin,
    );
    assert!(!o.status.success(), "{}", text(&o));
    assert!(
        text(&o).contains("sysctl -w kernel.apparmor_restrict_unprivileged_userns=0"),
        "{}",
        text(&o)
    );
}

/// The workflow's own install line, `.ci/install-host --open-kvm --allow-userns`, run for real
/// as root with the two helpers pointed at stand-ins: the packages part changes nothing on a
/// machine that has them, then each helper runs and says what it did.
#[test]
#[ignore = "runs the install step as root (apt-get update); run with --include-ignored"]
fn the_install_step_passes_its_flags_to_the_helpers() {
    let t = "the_install_step_passes_its_flags_to_the_helpers";
    if !root_or_skip(t) {
        return;
    }
    if !Path::new("/usr/bin/apt-get").exists() {
        common::skip::cannot_run(
            t,
            "this host has no apt-get; the install step supports Debian and Ubuntu",
        );
        return;
    }
    let s = Scratch::new("install-flags");
    let (dev, rules, bin, log, knob) = (
        s.0.join("kvm"),
        s.0.join("rules.d"),
        s.0.join("bin"),
        s.0.join("udevadm.log"),
        s.0.join("userns"),
    );
    stub_udevadm(&bin, &log, true);
    std::fs::write(&dev, b"").unwrap();
    std::fs::set_permissions(&dev, std::fs::Permissions::from_mode(0o660)).unwrap();
    std::fs::write(&knob, b"1\n").unwrap();
    let o = install_host_with(
        &["--open-kvm", "--allow-userns"],
        &[
            ("KVM_DEVICE", dev.as_path()),
            ("UDEV_RULES_DIR", rules.as_path()),
            ("USERNS_SYSCTL", knob.as_path()),
        ],
        &bin,
    );
    assert!(o.status.success(), "{}", text(&o));
    let out = text(&o);
    assert!(out.contains("install-host: QEMU"), "{out}");
    assert!(out.contains("install-host: KVM: wrote udev rule"), "{out}");
    assert!(
        out.contains("install-host: user namespaces: lifted"),
        "{out}"
    );
    assert_eq!(mode(&dev), 0o666);
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0\n");
}

fn install_host_with(args: &[&str], env: &[(&str, &Path)], bin: &Path) -> Output {
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut c = Command::new(root().join(".ci/install-host"));
    c.args(args).env("PATH", path).env_remove("SUDO_USER");
    for (k, v) in env {
        c.env(k, v);
    }
    let o = c.output().unwrap();
    eprintln!(
        "--- .ci/install-host {args:?} ({}):\n{}",
        o.status,
        text(&o)
    );
    o
}
