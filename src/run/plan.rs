//! `--plan`: every step a run would take, printed from the same builders the run executes, with
//! placeholders only where a value exists once the run is under way (its id, port, key).

use super::{archive, boot, bounds, fetch, gates, Resolved, GUEST_GATE};
use crate::cmd::{self, Cmd};
use crate::image;
use crate::vm::{qemu, session, ssh, GuestMedia};
use anyhow::Result;
use sharedos_report::text::shell_words;
use std::fmt::Write;
use std::path::Path;

/// The image's files, where the run will find them once the image phase has run.
fn media() -> GuestMedia {
    GuestMedia {
        kernel: "<cache entry>/vmlinuz".into(),
        initrd: "<cache entry>/initrd.img".into(),
        disk: "<cache entry>/disk.img".into(),
    }
}

pub fn plan(r: &Resolved) -> Result<String> {
    let mut s = String::from("plan: sharedos-rig vm-run (nothing is started)\n");
    let report_dir = archive::report_dir_for(&r.archiving);
    // fmt::Write into a String cannot fail.
    let _ = write_boot(&mut s, r, &report_dir);
    let _ = write_run(&mut s, r, &report_dir);
    Ok(s)
}

/// vm-exec's plan: the same boot, then the one command.
pub fn plan_exec(r: &Resolved, command: &[String]) -> String {
    let mut s = String::from("plan: sharedos-rig vm-exec (nothing is started)\n");
    let _ = write_boot(&mut s, r, Path::new("<scratch dir>"));
    let _ = writeln!(s, "    {}", command.join(" "));
    s
}

/// Image, key, overlay, QEMU and the SSH login: what every boot does.
fn write_boot(s: &mut String, r: &Resolved, report_dir: &Path) -> std::fmt::Result {
    writeln!(s, "[image]")?;
    let mut img = r.boot.image.clone();
    img.plan = true;
    match image::plan_image(&img) {
        Ok(lines) => {
            for l in lines {
                writeln!(s, "    {l}")?;
            }
        }
        Err(e) => writeln!(s, "    (cannot plan the image: {e:#})")?,
    }
    let p = session::plan(&boot::spec(&r.boot, "<id>", report_dir), &media());
    writeln!(s, "[keys]\n    {}", p.keygen.display())?;
    writeln!(s, "[overlay]\n    {}", p.overlay.display())?;
    for (accel, when, cmd) in &p.qemu {
        let when = match when.is_empty() {
            true => String::new(),
            false => format!(" ({when})"),
        };
        writeln!(s, "[qemu {}]{when}\n    {}", accel.as_str(), cmd.display())?;
    }
    if !p.sandbox {
        writeln!(
            s,
            "    (this QEMU has no -sandbox: it was built without seccomp)"
        )?;
    }
    if let Some((overlay, lines)) = &p.resume {
        writeln!(
            s,
            "[snapshot] resumed from the image's snapshot for these settings (snapshots/ in the image cache); when there is none, or it fails its checks, the cold boot above makes it, saved over QMP once the guest is ready; --cold boots without one"
        )?;
        writeln!(s, "[resume overlay]\n    {}", overlay.display())?;
        for (accel, cmd) in lines {
            writeln!(s, "[resume {}]\n    {}", accel.as_str(), cmd.display())?;
        }
        writeln!(s, "[resume agent] through the guest's agent, on its port {} (<run dir>/{}): the clock, host entropy and a CRNG reseed, this run's key, a nonce echoed; meanwhile the SSH handshake, then one session with this run's key", crate::vm::qemu::AGENT_PORT, crate::vm::qemu::AGENT_SOCKET)?;
        if !r.gate.binary.as_os_str().is_empty() {
            writeln!(
                s,
                "[snapshot layer] the layer over that snapshot keyed also by the gate binary's sha256 is resumed instead, the same way; when there is none, or it fails its checks (its base's disk included), it is made first: the snapshot resumed onto the layer's own overlay, the binary copied in and checked, the gates run once to warm the guest's caches (their report thrown away), then saved over QMP; layers of the same snapshot with another binary go unless a running rig holds them\n    {}\n    {}   (stdin: {})\n    {}\n    {}",
                qemu::overlay_on_cmd(
                    Path::new("../<snapshot>/disk.qcow2"),
                    "qcow2",
                    Path::new("<layer being made>/disk.qcow2")
                )
                .display(),
                ssh::upload_command(GUEST_GATE, 0o755),
                r.gate.binary.display(),
                session::sha256_command(GUEST_GATE),
                boot::warm_up_command()
            )?;
        }
    }
    writeln!(s, "[ssh] one session to 127.0.0.1:<free port>, host key pinned from SHAREDOS-HOSTKEY on the console")
}

/// What vm-run does over the session, the guest's own plan, and where the report goes.
fn write_run(s: &mut String, r: &Resolved, report_dir: &Path) -> std::fmt::Result {
    let b = bounds(qemu::Accel::Tcg);
    writeln!(
        s,
        "    (the copy below is left out for a guest resumed from the layer that holds this binary; the prep then checks it, and a binary of another sha256 is copied in and checked again with `{}`)",
        session::sha256_command(GUEST_GATE)
    )?;
    writeln!(
        s,
        "    {}   (stdin: {})",
        ssh::upload_command(GUEST_GATE, 0o755),
        r.gate.binary.display()
    )?;
    writeln!(s, "    {}", gates::prep_command("<host epoch seconds>"))?;
    writeln!(
        s,
        "    {}   (--step-timeout shown for tcg; kvm uses {} s; the whole gate phase is bounded by {} s under tcg)",
        shell_words(&gates::diagnose_argv(b.guest_step, &r.gate.diagnose_args)),
        bounds(qemu::Accel::Kvm).guest_step.as_secs(),
        b.gates.as_secs()
    )?;
    writeln!(s, "    {}", gates::MEMINFO)?;
    writeln!(
        s,
        "    {}   | on the host: unpacked into {} (regular files and directories only)",
        shell_words(&fetch::fetch_argv()),
        report_dir.join(fetch::GUEST_DIR).display()
    )?;
    writeln!(s, "[guest plan]")?;
    for l in guest_plan(r, b) {
        writeln!(s, "    {l}")?;
    }
    writeln!(s, "[archive] {}", report_dir.display())
}

/// The gate binary's own plan, run here with the very arguments the guest gets. Its lines name
/// the binary where it will be in the guest, not where it is on this host.
fn guest_plan(r: &Resolved, b: super::Bounds) -> Vec<String> {
    let argv = gates::diagnose_argv(b.guest_step, &r.gate.diagnose_args);
    let local = r.gate.binary.display().to_string();
    let mut run_here = vec![local.clone()];
    run_here.extend(argv[1..].iter().cloned());
    run_here.push("--plan".into());
    match cmd::capture(&Cmd::new(run_here)) {
        Ok(out) => out.lines().map(|l| l.replace(&local, GUEST_GATE)).collect(),
        Err(e) => vec![format!("(the gate binary's plan failed: {e:#})")],
    }
}
