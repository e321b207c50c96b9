//! `vm-run`: the phases in order (image, boot to SSH, copy, gates, fetch), their timings, the
//! host's provenance, and the archive. A failure of the rig itself exits 2 and still archives
//! everything observed so far.

use crate::image::{self, BuildOptions, ImageEntry};
use crate::ssh::{self, Guest};
use crate::vm::{self, qemu, serial, AccelChoice};
use anyhow::{bail, Context, Result};
use sharedos_gate::diagnose::{collect_artifacts, shell_words};
use sharedos_gate::report::{
    Environment, Gate, GateName, Phase, Report, Status, VmProvenance, REPORT_FILE, SCHEMA_VERSION,
};
use sharedos_gate::{clock, digest, environment, signals};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Where the gate binary, its work and its report live inside the guest.
pub const GUEST_GATE: &str = "/usr/local/bin/sharedos-gate";
pub const GUEST_WORK: &str = "/root/work";
pub const GUEST_REPORT_DIR: &str = "/root/report";

pub use sharedos_gate::report::RIG_FAILURE_EXIT;

#[derive(Debug, Clone)]
pub struct VmRunOptions {
    pub image: BuildOptions,
    pub accel: AccelChoice,
    /// Report directory; default `<reports_root>/<UTC stamp>-<id>`.
    pub out: Option<PathBuf>,
    pub reports_root: PathBuf,
    pub keep_vm: bool,
    pub plan: bool,
    pub memory_mib: u64,
    pub cpus: u32,
    /// The static `sharedos-gate` to copy in.
    pub gate_binary: PathBuf,
    /// Extra arguments for `sharedos-gate diagnose`.
    pub diagnose_args: Vec<String>,
    pub command_line: Vec<String>,
}

/// Bounds that scale with the accelerator.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub boot: Duration,
    pub ssh: Duration,
    /// Passed to the guest as `--step-timeout`.
    pub guest_step: Duration,
}

pub fn bounds(accel: qemu::Accel) -> Bounds {
    let k = accel.slowdown();
    Bounds {
        boot: Duration::from_secs(45 * u64::from(k)),
        ssh: Duration::from_secs(15 * u64::from(k)),
        guest_step: Duration::from_secs(45 * u64::from(k)),
    }
}

/// The guest's command line for the diagnostic.
pub fn diagnose_argv(step: Duration, extra: &[String]) -> Vec<String> {
    let mut v: Vec<String> = vec![
        GUEST_GATE.into(),
        "diagnose".into(),
        "--work".into(),
        GUEST_WORK.into(),
        "--out".into(),
        format!("{GUEST_REPORT_DIR}/{REPORT_FILE}"),
        "--step-timeout".into(),
        step.as_secs().to_string(),
    ];
    v.extend(extra.iter().cloned());
    v
}

/// The kernel command line: the image's own plus the run's public key.
pub fn kernel_append(pubkey_line: &str) -> Result<String> {
    Ok(format!(
        "{} {}",
        image::kernel_cmdline(),
        image::authorized_key_param(pubkey_line)?
    ))
}

/// The cargo invocation that builds the gate binary statically, so it runs in any x86_64 guest.
/// RUSTFLAGS reach only the target given with --target, never build scripts or proc macros.
pub fn gate_build_argv(cargo: &str) -> Vec<String> {
    [
        cargo,
        "build",
        "--release",
        "--package",
        "sharedos-gate",
        "--target",
        "x86_64-unknown-linux-gnu",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

pub const GATE_RUSTFLAGS: &str = "-C target-feature=+crt-static";

/// Builds `sharedos-gate` statically and returns its path.
pub fn build_gate_binary(workspace: &Path) -> Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let argv = gate_build_argv(&cargo);
    eprintln!(
        "[vm-run] building the gate binary: RUSTFLAGS='{GATE_RUSTFLAGS}' {}",
        argv.join(" ")
    );
    let status = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .current_dir(workspace)
        .env("RUSTFLAGS", GATE_RUSTFLAGS)
        .status()
        .with_context(|| format!("running {}", argv.join(" ")))?;
    if !status.success() {
        bail!(
            "building the static gate binary failed ({status}): {}",
            argv.join(" ")
        );
    }
    let bin = default_gate_binary(workspace);
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

/// Where `build_gate_binary` puts the static binary.
pub fn default_gate_binary(workspace: &Path) -> PathBuf {
    std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| workspace.join("target"))
        .join("x86_64-unknown-linux-gnu/release/sharedos-gate")
}

/// A free loopback port. Another process may take it before QEMU binds it; the boot retries
/// with a new port when QEMU says so.
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free loopback port")?;
    Ok(l.local_addr()?.port())
}

fn short_id() -> String {
    sharedos_gate::stateapp::random_hex(3).unwrap_or_else(|_| format!("{:06x}", std::process::id()))
}

/// `argv` through the image builder's runner (which names argv, status and stderr on failure).
fn run_tool(argv: &[String], missing_hint: &str) -> Result<String> {
    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
    image::exec::capture(&argv).context(missing_hint.to_string())
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

/// The run's private scratch (overlay, client key): mode 0700, removed at the end.
struct RunDir {
    path: PathBuf,
    keep: bool,
}

impl RunDir {
    fn create(id: &str) -> Result<RunDir> {
        use std::os::unix::fs::DirBuilderExt;
        let path =
            std::env::temp_dir().join(format!("sharedos-rig-run-{}-{id}", std::process::id()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&path)
            .with_context(|| format!("creating the run directory {}", path.display()))?;
        Ok(RunDir { path, keep: false })
    }
}

impl Drop for RunDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// What the run has observed so far; on a rig failure it becomes the partial report.
struct Observed {
    report_dir: PathBuf,
    started_at: String,
    vm: VmProvenance,
    /// Lines the diagnostic printed as it went (gate by gate).
    transcript: Vec<String>,
    guest_report: Option<Report>,
}

impl Observed {
    fn phase(&mut self, name: &str, since: Instant) {
        self.vm.phases.push(Phase {
            name: name.to_string(),
            duration_ms: since.elapsed().as_millis() as u64,
        });
    }
}

/// One line per gate from the guest's progress output: `gate 3/10 live_state_probe PASS 123ms: ...`.
pub fn parse_gate_line(line: &str) -> Option<Gate> {
    let rest = line.strip_prefix("gate ")?;
    let mut it = rest.splitn(4, ' ');
    let _n = it.next()?;
    let name: GateName =
        serde_json::from_value(serde_json::Value::String(it.next()?.into())).ok()?;
    let status: Status =
        serde_json::from_value(serde_json::Value::String(it.next()?.into())).ok()?;
    let tail = it.next()?;
    let (ms, reason) = tail.split_once(": ").unwrap_or((tail, ""));
    let mut g = Gate::new(name, status, reason);
    g.duration_ms = ms.trim_end_matches("ms").parse().ok()?;
    Some(g)
}

pub fn host_provenance(opts: &VmRunOptions) -> VmProvenance {
    let host = environment::capture(Vec::new());
    VmProvenance {
        qemu_version: vm::qemu_version().unwrap_or_default(),
        machine_type: qemu::MACHINE.into(),
        memory_mib: opts.memory_mib,
        cpus: opts.cpus,
        host_os: host.os,
        host_kernel: format!("{} {}", host.kernel_release, host.kernel_version),
        host_hostname: host.hostname,
        image_name: opts.image.image.clone(),
        rig_version: env!("CARGO_PKG_VERSION").into(),
        rig_git_commit: env!("SHAREDOS_RIG_GIT_COMMIT").into(),
        command_line: opts.command_line.clone(),
        ..VmProvenance::default()
    }
}

fn report_dir_for(opts: &VmRunOptions) -> PathBuf {
    match &opts.out {
        Some(d) => d.clone(),
        None => opts
            .reports_root
            .join(format!("{}-{}", clock::compact_utc_now(), short_id())),
    }
}

/// Prints what a run would do: the image step, the QEMU line, the SSH steps, the guest's plan.
pub fn plan(opts: &VmRunOptions) -> Result<String> {
    let mut s = String::from("plan: sharedos-rig vm-run (nothing is started)\n");
    s.push_str("[image]\n");
    let mut img = opts.image.clone();
    img.plan = true;
    match image::plan_image(&img) {
        Ok(lines) => {
            for l in lines {
                s.push_str(&format!("    {l}\n"));
            }
        }
        Err(e) => s.push_str(&format!("    (cannot plan the image: {e:#})\n")),
    }
    let run = PathBuf::from("<run dir>");
    let report_dir = report_dir_for(opts);
    s.push_str("[keys]\n");
    s.push_str(&format!(
        "    {}\n",
        shell_words(&ssh::keygen_argv(&run.join("id_ed25519")))
    ));
    s.push_str("[overlay]\n");
    s.push_str(&format!(
        "    {}\n",
        shell_words(&qemu::overlay_argv(
            Path::new("<cache entry>/disk.img"),
            &run.join("overlay.qcow2")
        ))
    ));
    let accels: Vec<qemu::Accel> = match opts.accel {
        AccelChoice::Tcg => vec![qemu::Accel::Tcg],
        AccelChoice::Kvm => vec![qemu::Accel::Kvm],
        AccelChoice::Auto => vec![qemu::Accel::Kvm, qemu::Accel::Tcg],
    };
    for a in accels {
        let spec = qemu::QemuSpec {
            name: "sharedos-rig-<id>".into(),
            accel: a,
            memory_mib: opts.memory_mib,
            cpus: opts.cpus,
            kernel: "<cache entry>/vmlinuz".into(),
            initrd: "<cache entry>/initrd.img".into(),
            overlay: run.join("overlay.qcow2"),
            append: format!(
                "{} sharedos.authorized_key=<run key>",
                image::kernel_cmdline()
            ),
            serial_log: report_dir.join("serial.log"),
            ssh_port: 0,
        };
        let when = match (opts.accel, a) {
            (AccelChoice::Auto, qemu::Accel::Kvm) => format!(
                " (auto: only if /dev/kvm opens read-write; kept if 'Linux version' shows on the console within {} s)",
                vm::KVM_PROBE.as_secs()
            ),
            (AccelChoice::Auto, qemu::Accel::Tcg) => " (auto: otherwise)".into(),
            _ => String::new(),
        };
        s.push_str(&format!(
            "[qemu {}]{when}\n    {}\n",
            a.as_str(),
            shell_words(&qemu::qemu_argv(&spec))
        ));
    }
    let b = bounds(qemu::Accel::Tcg);
    s.push_str("[ssh] one session to 127.0.0.1:<free port>, host key pinned from SHAREDOS-HOSTKEY on the console\n");
    s.push_str(&format!(
        "    scp {} -> {GUEST_GATE} (mode 0755)\n",
        opts.gate_binary.display()
    ));
    s.push_str(&format!(
        "    sha256sum {GUEST_GATE} && date -u -s @<host epoch seconds> >/dev/null\n"
    ));
    s.push_str(&format!(
        "    {}   (--step-timeout shown for tcg; kvm uses {} s)\n",
        shell_words(&diagnose_argv(b.guest_step, &opts.diagnose_args)),
        bounds(qemu::Accel::Kvm).guest_step.as_secs()
    ));
    s.push_str("    cat /proc/meminfo\n");
    s.push_str(&format!(
        "    {}   | on the host: {}\n",
        shell_words(&fetch_argv()),
        shell_words(&unpack_argv(&report_dir))
    ));
    s.push_str("[guest plan]\n");
    let mut argv = diagnose_argv(b.guest_step, &opts.diagnose_args);
    argv[0] = opts.gate_binary.display().to_string();
    argv.push("--plan".into());
    match std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .output()
    {
        Ok(o) if o.status.success() => {
            for l in String::from_utf8_lossy(&o.stdout).lines() {
                s.push_str(&format!("    {l}\n"));
            }
        }
        Ok(o) => s.push_str(&format!(
            "    (the gate binary's plan failed: {})\n",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => s.push_str(&format!("    (cannot run {}: {e})\n", argv[0])),
    }
    s.push_str(&format!("[archive] {}\n", report_dir.display()));
    Ok(s)
}

/// The running QEMU, for the signal watchdog; 0 when none.
static QEMU_PID: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Ctrl-C and SIGTERM only set a flag; a blocking SSH read would not see it. This thread ends
/// QEMU when the flag rises, which breaks the session, so the run fails over to its partial
/// report and its cleanup at once.
fn start_signal_watchdog() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(spawn_signal_watchdog);
}

fn spawn_signal_watchdog() {
    let _ = std::thread::Builder::new()
        .name("signal-watchdog".into())
        .spawn(|| loop {
            if signals::interrupted().is_some() {
                let pid = QEMU_PID.load(std::sync::atomic::Ordering::SeqCst);
                if pid > 0 {
                    let _ = nix::sys::signal::kill(
                        nix::unistd::Pid::from_raw(pid),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                }
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        });
}

/// Runs the whole job; returns the exit code (0, 3, 1 from the diagnostic; 2 for the rig).
pub fn vm_run(opts: &VmRunOptions) -> i32 {
    if let Err(e) = signals::install() {
        eprintln!("error: installing signal handlers: {e}");
        return RIG_FAILURE_EXIT;
    }
    if opts.plan {
        return match plan(opts) {
            Ok(p) => {
                print!("{p}");
                0
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                RIG_FAILURE_EXIT
            }
        };
    }
    if !opts.gate_binary.is_file() {
        eprintln!(
            "error: the gate binary {} does not exist: build it with `cargo xtask vm-run` (which builds it) or `RUSTFLAGS='{GATE_RUSTFLAGS}' {}`",
            opts.gate_binary.display(),
            gate_build_argv("cargo").join(" ")
        );
        return RIG_FAILURE_EXIT;
    }
    let report_dir = report_dir_for(opts);
    // Never mix two runs in one directory, nor overwrite an archived report.
    if std::fs::read_dir(&report_dir).is_ok_and(|mut d| d.next().is_some()) {
        eprintln!(
            "error: the report directory {} is not empty: pass --out with a new directory, or leave --out out to get reports/<time>-<id>",
            report_dir.display()
        );
        return RIG_FAILURE_EXIT;
    }
    if let Err(e) = std::fs::create_dir_all(&report_dir) {
        eprintln!(
            "error: cannot create the report directory {}: {e}; pass --out DIR on a writable filesystem",
            report_dir.display()
        );
        return RIG_FAILURE_EXIT;
    }
    let mut obs = Observed {
        report_dir: report_dir.clone(),
        started_at: clock::now_rfc3339(),
        vm: host_provenance(opts),
        transcript: Vec::new(),
        guest_report: None,
    };
    obs.vm.started_at = obs.started_at.clone();
    start_signal_watchdog();
    let result = run_phases(opts, &mut obs);
    QEMU_PID.store(0, std::sync::atomic::Ordering::SeqCst);
    let result = match (result, signals::interrupted()) {
        (Err(e), Some(sig)) => Err(e.context(format!("interrupted by {sig}"))),
        (r, _) => r,
    };
    obs.vm.finished_at = clock::now_rfc3339();
    let (mut report, code) = match result {
        Ok(report) => {
            let code = report.exit_code;
            (report, code)
        }
        Err(e) => {
            let msg = format!("{e:#}");
            eprintln!("error: the rig failed: {msg}");
            obs.vm.rig_error = Some(msg);
            (partial_report(&obs), RIG_FAILURE_EXIT)
        }
    };
    report.vm = Some(obs.vm.clone());
    report.artifacts = collect_artifacts(&report_dir);
    report.seal();
    if code == RIG_FAILURE_EXIT {
        report.exit_code = RIG_FAILURE_EXIT;
    }
    let path = report_dir.join(REPORT_FILE);
    if let Err(e) = sharedos_gate::diagnose::write_report(&report, &path) {
        eprintln!("error: {e:#}");
        return RIG_FAILURE_EXIT;
    }
    print_summary(&report, code);
    println!("{}", report_dir.display());
    code
}

fn print_summary(r: &Report, code: i32) {
    let vm = r.vm.as_ref();
    eprintln!(
        "[vm-run] guest kernel {} on {} (boot id {}), accelerator {}, image {}",
        r.environment.kernel_release,
        r.environment.hostname,
        r.environment.boot_id,
        vm.map(|v| v.accel.as_str()).unwrap_or("?"),
        vm.map(|v| v.image_sha256.get(..16).unwrap_or(""))
            .unwrap_or("?"),
    );
    if let Some(v) = vm {
        let phases: Vec<String> = v
            .phases
            .iter()
            .map(|p| format!("{} {:.1} s", p.name, p.duration_ms as f64 / 1000.0))
            .collect();
        eprintln!("[vm-run] phases: {}", phases.join(", "));
    }
    let verdict = match code {
        0 => "PASS",
        3 => "REVIEW_REQUIRED (every gate passed; a human must review the PNGs)",
        RIG_FAILURE_EXIT => "RIG FAILURE (partial report archived)",
        _ => "FAIL",
    };
    eprintln!("[vm-run] verdict: {verdict}, exit {code}");
}

/// A report for a run whose rig failed: what the diagnostic said as it went, the rest NOT_RUN.
fn partial_report(obs: &Observed) -> Report {
    if let Some(r) = &obs.guest_report {
        return r.clone();
    }
    let error = obs.vm.rig_error.clone().unwrap_or_default();
    let seen: Vec<Gate> = obs
        .transcript
        .iter()
        .filter_map(|l| parse_gate_line(l))
        .collect();
    let gates = GateName::ALL
        .iter()
        .map(|n| match seen.iter().find(|g| g.name == *n) {
            Some(g) => {
                let mut g = g.clone();
                g.reason = format!(
                    "{} (from the guest's progress line; its full report was not retrieved: see diagnose-transcript.log)",
                    g.reason
                );
                g
            }
            None => Gate::new(
                *n,
                Status::NotRun,
                format!("the rig failed before this gate reported: {error}"),
            ),
        })
        .collect();
    let console = serial::read(&obs.report_dir.join("serial.log"));
    Report {
        schema_version: SCHEMA_VERSION,
        marker: String::new(),
        all_gates_pass: false,
        exit_code: RIG_FAILURE_EXIT,
        gates,
        environment: Environment {
            kernel_release: console.kernel_release.unwrap_or_default(),
            started_at: obs.started_at.clone(),
            finished_at: clock::now_rfc3339(),
            ..Environment::default()
        },
        artifacts: Vec::new(),
        fidelity_differences: Vec::new(),
        vm: None,
    }
}

fn run_phases(opts: &VmRunOptions, obs: &mut Observed) -> Result<Report> {
    let report_dir = obs.report_dir.clone();
    let serial_log = report_dir.join("serial.log");
    let qemu_log = report_dir.join("qemu.log");

    let t = Instant::now();
    eprintln!("[vm-run] image {} ...", opts.image.image);
    let entry = image::ensure_image(&opts.image);
    obs.phase("image", t);
    let entry: ImageEntry = entry.context("ensuring the guest image")?;
    let m = &entry.manifest;
    obs.vm.image_sha256 = m.image_sha256.clone();
    obs.vm.image_lock_sha256 = m.lock_sha256.clone();
    obs.vm.kernel_release_pinned = m.kernel_release.clone();
    obs.vm.image_builder_mode = m.builder_mode.clone();
    eprintln!(
        "[vm-run] image {} ({})",
        entry.dir.display(),
        &m.image_sha256
    );

    let (gate_sha, _) = digest::sha256_file(&opts.gate_binary)?;
    obs.vm.gate_binary_sha256 = gate_sha.clone();

    let id = short_id();
    let mut run_dir = RunDir::create(&id)?;
    run_dir.keep = opts.keep_vm;
    let key = run_dir.path.join("id_ed25519");
    let keygen = ssh::keygen_argv(&key);
    run_tool(
        &keygen,
        "making the run's SSH key (ssh-keygen comes with openssh-client)",
    )?;
    let pubkey = std::fs::read_to_string(run_dir.path.join("id_ed25519.pub"))?;
    let append = kernel_append(&pubkey)?;

    let overlay = run_dir.path.join("overlay.qcow2");
    let ov = qemu::overlay_argv(&entry.disk(), &overlay);
    run_tool(
        &ov,
        "making the run's overlay (qemu-img comes with qemu-utils)",
    )?;

    let t_boot = Instant::now();
    let mut attempt = 0;
    let (mut booted, port, console) = loop {
        attempt += 1;
        let port = free_port()?;
        let spec = qemu::QemuSpec {
            name: format!("sharedos-rig-{id}"),
            accel: qemu::Accel::Tcg,
            memory_mib: opts.memory_mib,
            cpus: opts.cpus,
            kernel: entry.kernel(),
            initrd: entry.initrd(),
            overlay: overlay.clone(),
            append: append.clone(),
            serial_log: serial_log.clone(),
            ssh_port: port,
        };
        let booted = vm::boot(opts.accel, &spec, &qemu_log, opts.keep_vm, &mut |s| {
            eprintln!("[vm-run] {s}")
        });
        let mut booted = match booted {
            Ok(b) => b,
            Err(e) => {
                obs.phase("boot_to_ssh", t_boot);
                return Err(e);
            }
        };
        if !opts.keep_vm {
            QEMU_PID.store(booted.qemu.pid as i32, std::sync::atomic::Ordering::SeqCst);
        }
        obs.vm.accel = booted.accel.as_str().into();
        obs.vm.accel_reason = booted.accel_reason.clone();
        obs.vm.cpu_model = booted.accel.cpu_model().into();
        obs.vm.qemu_argv = booted.argv.clone();
        let b = bounds(booted.accel);
        eprintln!(
            "[vm-run] booting (QEMU pid {}, ssh port {port}) ...",
            booted.qemu.pid
        );
        match vm::wait_ready(&mut booted, &serial_log, b.boot) {
            Ok(s) => break (booted, port, s),
            Err(e) => {
                let log = std::fs::read_to_string(&qemu_log).unwrap_or_default();
                // Another process took the port between our probe and QEMU's bind.
                if attempt < 3 && log.contains("hostfwd") {
                    eprintln!("[vm-run] port {port} was taken; retrying with another");
                    continue;
                }
                obs.phase("boot_to_ssh", t_boot);
                let qemu_said = sharedos_gate::exec::tail(&log, 5, 1500);
                if qemu_said.is_empty() {
                    return Err(e);
                }
                return Err(e.context(format!("QEMU said: {qemu_said}")));
            }
        }
    };
    let b = bounds(booted.accel);
    let host_key = console
        .host_key
        .clone()
        .context("no host key on the console")?;
    eprintln!("[vm-run] guest ready; host key {host_key}; connecting");
    let guest = Guest::connect(port, &host_key, &key, b.ssh);
    obs.phase("boot_to_ssh", t_boot);
    let guest = guest.context("opening the SSH session to the guest")?;

    let t = Instant::now();
    guest.set_timeout(b.ssh * 4);
    guest
        .upload(&opts.gate_binary, GUEST_GATE, 0o755)
        .context("copying the gate binary into the guest")?;
    // One round trip (each costs a second or so under TCG): check the binary, and stamp the
    // guest clock from the host so the report's timestamps are true (the guest has only the
    // emulated RTC).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let prep = guest.exec(&format!(
        "sha256sum {GUEST_GATE} && date -u -s @{now} >/dev/null"
    ))?;
    let in_guest = prep.stdout.split_whitespace().next().unwrap_or("");
    if in_guest != gate_sha {
        bail!(
            "the gate binary arrived corrupted: sha256 on the host {gate_sha}, in the guest {in_guest:?} ({})",
            prep.stderr.trim()
        );
    }
    if prep.status != 0 {
        bail!("setting the guest clock failed: {}", prep.stderr.trim());
    }
    obs.phase("copy", t);

    let t = Instant::now();
    let argv = diagnose_argv(b.guest_step, &opts.diagnose_args);
    eprintln!("[vm-run] gates: {}", shell_words(&argv));
    // No single gate step may outlast its bound; the session's read timeout covers a whole gate.
    guest.set_timeout(b.guest_step * 6);
    let transcript = &mut obs.transcript;
    let ran = guest.exec_streaming(&shell_words(&argv), &mut |line| {
        if line.starts_with("gate ") {
            eprintln!("[vm-run]   {line}");
        }
        transcript.push(line.to_string());
    });
    obs.phase("gates", t);
    std::fs::write(
        report_dir.join("diagnose-transcript.log"),
        obs.transcript.join("\n") + "\n",
    )?;
    let ran = ran.context("running the gates in the guest")?;
    if ![0, 1, 3].contains(&ran.status) {
        bail!(
            "the diagnostic exited {} (not a verdict): {}",
            ran.status,
            sharedos_gate::exec::tail(&ran.stderr, 8, 2000)
        );
    }

    let meminfo = guest.exec("cat /proc/meminfo")?;
    let (total, avail) = parse_meminfo(&meminfo.stdout);
    obs.vm.guest_mem_total_mib = total;
    obs.vm.guest_mem_used_mib = total.zip(avail).map(|(t, a)| t.saturating_sub(a));

    let t = Instant::now();
    // One archive instead of one copy per file: each SSH channel costs a round trip.
    let (status, archive, err) = guest
        .exec_bytes(&shell_words(&fetch_argv()))
        .context("fetching the report")?;
    if status != 0 {
        bail!("archiving the guest's report failed: {}", err.trim());
    }
    unpack(&archive, &report_dir)?;
    let text = std::fs::read_to_string(report_dir.join(REPORT_FILE))
        .context("the guest wrote no report.json")?;
    let guest_report: Report =
        serde_json::from_str(&text).context("parsing the guest's report.json")?;
    obs.guest_report = Some(guest_report.clone());
    let bad = digest::verify_artifacts(&report_dir, &guest_report.artifacts);
    if !bad.is_empty() {
        let list: Vec<String> = bad
            .iter()
            .map(|m| format!("{}: {}", m.path, m.problem))
            .collect();
        bail!(
            "fetched artifacts do not match the guest's report: {}",
            list.join("; ")
        );
    }
    obs.phase("fetch", t);

    if opts.keep_vm {
        booted.qemu.keep = true;
        eprintln!(
            "[vm-run] --keep-vm: QEMU pid {} keeps running; ssh -i {} -p {port} -o StrictHostKeyChecking=no root@127.0.0.1 (host key {host_key}); run dir {}",
            booted.qemu.pid,
            key.display(),
            run_dir.path.display()
        );
    } else {
        booted.qemu.stop();
    }
    Ok(guest_report)
}

/// The guest side of the fetch: the report directory as a tar stream on stdout.
pub fn fetch_argv() -> Vec<String> {
    vec![
        "tar".into(),
        "-C".into(),
        GUEST_REPORT_DIR.into(),
        "-cf".into(),
        "-".into(),
        ".".into(),
    ]
}

/// The host side: GNU tar refuses absolute names and `..` by default, so nothing lands outside
/// the report directory; every file is then checked against the report's sha256.
pub fn unpack_argv(dir: &Path) -> Vec<String> {
    vec![
        "tar".into(),
        "-C".into(),
        dir.display().to_string(),
        "--no-same-owner".into(),
        "-xf".into(),
        "-".into(),
    ]
}

fn unpack(archive: &[u8], dir: &Path) -> Result<()> {
    use std::io::Write;
    let argv = unpack_argv(dir);
    let mut child = std::process::Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .context("running tar to unpack the report")?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(archive)
            .context("feeding the report archive to tar")?;
    }
    let out = child.wait_with_output().context("waiting for tar")?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            argv.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
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
    fn tcg_bounds_are_wider() {
        let (k, t) = (bounds(qemu::Accel::Kvm), bounds(qemu::Accel::Tcg));
        assert!(t.boot > k.boot && t.ssh > k.ssh && t.guest_step > k.guest_step);
    }

    #[test]
    fn diagnose_line() {
        let a = diagnose_argv(
            Duration::from_secs(180),
            &["--display".into(), ":171".into()],
        );
        assert_eq!(
            a.join(" "),
            "/usr/local/bin/sharedos-gate diagnose --work /root/work --out /root/report/report.json --step-timeout 180 --display :171"
        );
    }

    #[test]
    fn gate_build_is_static_and_release() {
        assert_eq!(
            gate_build_argv("cargo").join(" "),
            "cargo build --release --package sharedos-gate --target x86_64-unknown-linux-gnu"
        );
        assert!(GATE_RUSTFLAGS.contains("+crt-static"));
    }

    #[test]
    fn gate_lines_parse() {
        let g =
            parse_gate_line("gate 3/10 live_state_probe PASS 123ms: all 8 live-state checks hold")
                .unwrap();
        assert_eq!(g.name, GateName::LiveStateProbe);
        assert_eq!(g.status, Status::Pass);
        assert_eq!(g.duration_ms, 123);
        assert_eq!(g.reason, "all 8 live-state checks hold");
        let g = parse_gate_line("gate 4/10 dump NOT_RUN 0ms: CRIU is not usable: x").unwrap();
        assert_eq!(g.status, Status::NotRun);
        assert_eq!(g.reason, "CRIU is not usable: x");
        assert!(parse_gate_line("sharedos-gate: marker x").is_none());
        assert!(parse_gate_line("gate 1/10 bogus PASS 1ms: x").is_none());
    }

    #[test]
    fn interpreter_detection() {
        // This test binary is linked dynamically by cargo's default settings.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        assert!(has_interpreter(&me).unwrap());
        assert!(has_interpreter(b"#!/bin/sh\n").is_err());
    }

    #[test]
    fn meminfo() {
        let (t, a) = parse_meminfo(
            "MemTotal:        1000000 kB\nMemFree: 1 kB\nMemAvailable:     800000 kB\n",
        );
        assert_eq!((t, a), (Some(976), Some(781)));
    }

    #[test]
    fn append_carries_the_key_without_spaces() {
        let a = kernel_append("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE1 sharedos-rig\n").unwrap();
        assert!(a.ends_with("sharedos.authorized_key=ssh-ed25519,AAAAC3NzaC1lZDI1NTE5AAAAIE1"));
        assert!(a.contains("console=ttyS0"));
    }
}
