//! `cargo xtask bench` and `cargo xtask bench-image`: the cached image no-op, then the floor (the
//! image's kernel booted bare to its no-root panic) and warm vm-runs and `vm-exec -- true`, each
//! both resumed from the image's snapshot and booted cold, interleaved so that a change in the
//! machine's load hits all of them. Each phase is reported as a median and as a multiple of the
//! floor's median, because absolute seconds differ between machines and between sittings on one
//! machine. Reports; asserts nothing.

use crate::peers;
use anyhow::{bail, Context, Result};
use sharedos_report::{clock, environment, signals};
use sharedos_rig::image::{self, BuildOptions};
use sharedos_rig::judge::{reader::ReportDir, verdict};
use sharedos_rig::progress::Progress;
use sharedos_rig::run::{self, VmRunOptions, RIG_FAILURE_EXIT};
use sharedos_rig::vm::{self, floor};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

/// Targets the benchmark reports against, as multiples of the floor: a resumed first command
/// in half a bare kernel boot, a resumed warm vm-run in six.
pub const TARGET_RESUMED_FIRST_COMMAND_X: f64 = 0.5;
pub const TARGET_RESUMED_RUN_X: f64 = 6.0;

/// The phases of a vm-run's report, in the order they run, then the run as a whole. A resumed
/// run's boot_to_ssh is its three resume stages.
const PHASES: [&str; 8] = [
    "image",
    "boot_to_ssh",
    "resume_load",
    "resume_setup",
    "resume_answer",
    "copy",
    "gates",
    "fetch",
];
const END_TO_END: &str = "end_to_end";

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn min(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::NEG_INFINITY, f64::max)
}

/// The cached image no-op, timed `runs` times: median, min and max.
pub fn bench_image(opts: &BuildOptions, runs: usize) -> Result<String> {
    let t = image::bench_cached_image(opts, runs)?;
    let ms: Vec<f64> = t.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
    Ok(format!(
        "cached image no-op: median {:.1} ms over {} runs (min {:.1}, max {:.1})\n",
        median(ms.clone()),
        ms.len(),
        min(&ms),
        max(&ms)
    ))
}

/// How many of each to time.
#[derive(Debug, Clone, Copy)]
pub struct Counts {
    pub image_runs: usize,
    pub runs: usize,
    pub floor_runs: usize,
}

/// Everything the summary prints, as measured.
#[derive(Debug, Clone, Default)]
pub struct Measured {
    pub machine: String,
    pub qemu_version: String,
    /// The accelerator of each floor boot and each warm run, with the first one's reason.
    pub floor_accels: Vec<String>,
    pub run_accels: Vec<String>,
    pub accel_reason: String,
    /// The cached image no-op's line.
    pub image_line: String,
    /// Seconds from QEMU's spawn to its exit, one per floor boot.
    pub floor: Vec<f64>,
    /// Seconds per phase name, one per counted warm run; `end_to_end` is the whole vm-run.
    /// Resumed runs, then cold ones.
    pub phases: BTreeMap<String, Vec<f64>>,
    pub cold_phases: BTreeMap<String, Vec<f64>>,
    /// Seconds per gate of the resumed runs, in the order the gates ran.
    pub gates: Vec<(String, Vec<f64>)>,
    /// Warm runs left out of the medians, and why.
    pub excluded: Vec<String>,
    /// Seconds for `vm-exec -- true`, the whole command: resumed, then cold.
    pub first_command: Vec<f64>,
    pub first_command_cold: Vec<f64>,
    /// virtme-ng's `vng --run KERNEL -- true`, with --peers.
    pub vng: PeerTimes,
    pub reports: PathBuf,
}

/// A peer's timings in one sitting, or why it has none.
#[derive(Debug, Clone, Default)]
pub struct PeerTimes {
    /// Whether --peers asked for it.
    pub asked: bool,
    /// Why it could not be set up or run here, when it could not.
    pub not_run: Option<String>,
    /// A line on how it ran, e.g. without virtiofsd.
    pub note: Option<String>,
    /// Seconds per boot that exited 0.
    pub times: Vec<f64>,
    /// The boots that did not, and why: none of them is a timing.
    pub failures: Vec<String>,
}

fn distinct(v: &[String]) -> Vec<String> {
    let mut d: Vec<String> = Vec::new();
    for a in v {
        if !d.contains(a) {
            d.push(a.clone());
        }
    }
    d
}

/// The benchmark's text. Pure, so its layout is tested with fixed numbers.
pub fn summary(m: &Measured) -> String {
    let mut out = String::new();
    out.push_str(&format!("machine: {}\n", m.machine));
    out.push_str(&format!("qemu: {}\n", m.qemu_version));
    let (fa, ra) = (distinct(&m.floor_accels), distinct(&m.run_accels));
    if fa == ra && fa.len() == 1 {
        out.push_str(&format!("accelerator: {} ({})\n", fa[0], m.accel_reason));
    } else {
        out.push_str(&format!(
            "accelerator: floor {}, runs {} (they differ, so the ratios compare unlike boots; pass --accel tcg or --accel kvm)\n",
            fa.join("/"),
            ra.join("/")
        ));
    }
    out.push_str(&m.image_line);
    let floor = median(m.floor.clone());
    out.push_str(&format!(
        "floor (bare kernel, spawn to exit after its no-root panic): median {floor:.2} s, min {:.2}, max {:.2}, n {}\n",
        min(&m.floor),
        max(&m.floor),
        m.floor.len()
    ));
    let runs = m.phases.get(END_TO_END).map_or(0, Vec::len);
    let cold_runs = m.cold_phases.get(END_TO_END).map_or(0, Vec::len);
    out.push_str(&format!(
        "warm vm-run ({runs} resumed, {cold_runs} cold, interleaved with the floor boots), medians:\n"
    ));
    for e in &m.excluded {
        out.push_str(&format!("  not counted: {e}\n"));
    }
    out.push_str(&format!("  {:<12} {:>16} {:>16}\n", "", "resumed", "cold"));
    let cell = |v: Option<&Vec<f64>>| match v {
        Some(v) if !v.is_empty() => {
            let med = median(v.clone());
            format!("{med:>7.2} s {:>5.2}x", med / floor)
        }
        _ => format!("{:>16}", "-"),
    };
    for name in PHASES.iter().chain([END_TO_END].iter()) {
        let (r, c) = (m.phases.get(*name), m.cold_phases.get(*name));
        if r.is_none() && c.is_none() {
            continue;
        }
        let target = match (*name, r) {
            (END_TO_END, Some(v)) if !v.is_empty() => format!(
                "  (target resumed <= {TARGET_RESUMED_RUN_X}x floor: {})",
                verdict(median(v.clone()) / floor, TARGET_RESUMED_RUN_X)
            ),
            _ => String::new(),
        };
        out.push_str(&format!("  {name:<12} {} {}{target}\n", cell(r), cell(c)));
    }
    if !m.gates.is_empty() {
        out.push_str("gates of the resumed runs, medians:\n");
        for (name, v) in &m.gates {
            let med = median(v.clone());
            out.push_str(&format!(
                "  {name:<22} {med:>7.2} s {:>6.2}x floor\n",
                med / floor
            ));
        }
    }
    for (how, v) in [
        ("resumed", &m.first_command),
        ("cold", &m.first_command_cold),
    ] {
        if v.is_empty() {
            continue;
        }
        let med = median(v.clone());
        let target = if how == "resumed" {
            format!(
                "  (target <= {TARGET_RESUMED_FIRST_COMMAND_X}x floor: {})",
                verdict(med / floor, TARGET_RESUMED_FIRST_COMMAND_X)
            )
        } else {
            String::new()
        };
        out.push_str(&format!(
            "first command, {how} (vm-exec -- true, {} runs): median {med:.2} s, {:.2}x floor{target}\n",
            v.len(),
            med / floor
        ));
    }
    out.push_str(&peer_lines(&m.vng, floor));
    out.push_str(&format!("reports: {}\n", m.reports.display()));
    out
}

/// virtme-ng's lines of the summary: its median, or plainly why it was not run here.
fn peer_lines(p: &PeerTimes, floor: f64) -> String {
    if !p.asked {
        return "virtme-ng: not measured (--peers sets it up and times it)\n".into();
    }
    if let Some(why) = &p.not_run {
        return format!("virtme-ng: not run here: {why}\n");
    }
    let mut out = String::new();
    if p.times.is_empty() {
        out.push_str(&format!(
            "virtme-ng: not run here: vng failed on all {} of its boots: {}\n",
            p.failures.len(),
            p.failures.first().map_or("", String::as_str)
        ));
    } else {
        let med = median(p.times.clone());
        out.push_str(&format!(
            "virtme-ng (vng --run KERNEL -- true, {} runs): median {med:.2} s, {:.2}x floor\n",
            p.times.len(),
            med / floor
        ));
        for f in &p.failures {
            out.push_str(&format!("  not counted: {f}\n"));
        }
    }
    if let Some(n) = &p.note {
        out.push_str(&format!("  {n}\n"));
    }
    out
}

/// Whether a ratio met its target, in words.
fn verdict(ratio: f64, target: f64) -> String {
    if ratio <= target {
        format!("{ratio:.2}x, met")
    } else {
        format!("{ratio:.2}x, not met")
    }
}

fn machine_line() -> String {
    let host = environment::capture(Vec::new());
    format!(
        "{} cores, {}, kernel {}, {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        host.os,
        host.kernel_release,
        run::provenance::cpu_model_name(),
    )
}

/// `cargo xtask bench`: the cached image no-op, then floor boots and warm vm-runs in turn.
pub fn bench(opts: &VmRunOptions, n: Counts, peers: bool) -> Result<String> {
    signals::install().context("installing signal handlers")?;
    let mut m = Measured {
        machine: machine_line(),
        qemu_version: vm::qemu_version()?,
        image_line: bench_image(&opts.image, n.image_runs)?,
        ..Measured::default()
    };
    let entry = image::ensure_image(&opts.image).context("finding the cached guest image")?;
    let progress = Progress::new("bench");
    let mut peer = None;
    if peers {
        m.vng.asked = true;
        let root = match &opts.image.cache_dir {
            Some(d) => d.clone(),
            None => image::cache_root()?,
        };
        // Set up before the alternation, untimed: a build is not a boot.
        match peers::set_up(&peers::peers_dir(&root), &entry, &progress) {
            Ok(p) => {
                m.vng.note.clone_from(&p.note);
                peer = Some(p);
            }
            Err(why) => {
                progress.note(&format!("virtme-ng: not run here: {why}"));
                m.vng.not_run = Some(why);
            }
        }
    }
    let sitting = Sitting {
        peer,
        opts,
        kernel: entry.kernel(),
        accel_cache: vm::accel_cache::Spot::of_image(&entry),
        root: opts.out.clone().unwrap_or_else(|| {
            opts.reports_root
                .join(format!("bench-{}", clock::compact_utc_now()))
        }),
        progress,
    };
    m.reports = sitting.root.clone();
    // The snapshot is made here, untimed, so that every timed resume is a plain one.
    let mut warm = opts.clone();
    warm.cold = false;
    if run::vm_exec(
        &warm,
        &["true".to_string()],
        std::time::Duration::from_secs(300),
    ) != 0
    {
        bail!("the untimed first vm-exec, which makes the image's snapshot, failed");
    }
    for i in 0..n.floor_runs.max(n.runs) {
        if i < n.floor_runs {
            sitting.floor_boot(i, n.floor_runs, &mut m)?;
        }
        if i < n.runs {
            sitting.warm_run(i, n.runs, &mut m)?;
        }
    }
    if m.phases.is_empty() {
        bail!(
            "no warm run passed its gates, so there is nothing to time: {}",
            m.excluded.join("; ")
        );
    }
    Ok(summary(&m))
}

/// What every measurement of one sitting shares.
struct Sitting<'a> {
    opts: &'a VmRunOptions,
    /// The image's kernel, which the floor boots bare.
    kernel: PathBuf,
    /// Where `auto` keeps its verdict for that kernel, as vm-run's sessions do.
    accel_cache: Option<vm::accel_cache::Spot>,
    /// Where the runs' reports and the floor's logs go.
    root: PathBuf,
    progress: Progress,
    /// virtme-ng, when --peers set it up.
    peer: Option<peers::Peer>,
}

impl Sitting<'_> {
    /// Floor boot `i` of `of`, into `m`.
    fn floor_boot(&self, i: usize, of: usize, m: &mut Measured) -> Result<()> {
        let dir = self.root.join(format!("floor-{i}"));
        let o = self.opts;
        let f = floor::boot_bare(
            o.accel,
            self.accel_cache.as_ref(),
            o.memory_mib,
            o.cpus,
            &self.kernel,
            &dir,
            &mut |e| {
                self.progress
                    .note(&format!("floor {}/{of}: {}", i + 1, e.line()))
            },
        )
        .with_context(|| {
            format!(
                "floor boot {} (console and QEMU log in {})",
                i + 1,
                dir.display()
            )
        })?;
        self.progress.note(&format!(
            "floor {}/{of}: {:.2} s under {}: {}",
            i + 1,
            f.elapsed.as_secs_f64(),
            f.accel.as_str(),
            f.panic
        ));
        if m.accel_reason.is_empty() {
            m.accel_reason = f.accel_reason.clone();
        }
        m.floor_accels.push(f.accel.as_str().into());
        m.floor.push(f.elapsed.as_secs_f64());
        Ok(())
    }

    /// Warm run `i` of `of`, resumed and cold, then `vm-exec -- true` both ways and
    /// virtme-ng with --peers, into `m`.
    fn warm_run(&self, i: usize, of: usize, m: &mut Measured) -> Result<()> {
        for cold in [false, true] {
            let how = if cold { "cold" } else { "resumed" };
            let dir = self.root.join(format!("run-{i}-{how}"));
            let mut o = self.opts.clone();
            o.out = Some(dir.clone());
            o.cold = cold;
            self.progress.note(&format!(
                "warm run {}/{of}, {how} -> {}",
                i + 1,
                dir.display()
            ));
            self.timed_vm_run(&o, i, m)?;
            // The first command alone: no gate binary to copy in first.
            o.gate_binary = PathBuf::new();
            let started = Instant::now();
            let code = run::vm_exec(
                &o,
                &["true".to_string()],
                std::time::Duration::from_secs(300),
            );
            if code != 0 {
                bail!("vm-exec -- true {} ({how}) exited {code}", i + 1);
            }
            let t = started.elapsed().as_secs_f64();
            if cold {
                m.first_command_cold.push(t);
            } else {
                m.first_command.push(t);
            }
        }
        if let Some(peer) = &self.peer {
            self.time_peer(peer, i, of, m)?;
        }
        Ok(())
    }

    /// Boot `i` of `of` of virtme-ng on the image's kernel, under the accelerator the floor
    /// last used so the two boots are alike.
    fn time_peer(&self, peer: &peers::Peer, i: usize, of: usize, m: &mut Measured) -> Result<()> {
        let disable_kvm = m.floor_accels.last().is_none_or(|a| a != "kvm");
        let cmd = peers::vng_cmd(peer, disable_kvm, self.opts.memory_mib, self.opts.cpus);
        let log = self.root.join(format!("vng-{i}.log"));
        self.progress
            .note(&format!("virtme-ng {}/{of} -> {}", i + 1, log.display()));
        match peers::time_vng(&cmd, &log)? {
            Ok(t) => {
                self.progress
                    .note(&format!("virtme-ng {}/{of}: {t:.2} s", i + 1));
                m.vng.times.push(t);
            }
            Err(why) => {
                self.progress
                    .note(&format!("virtme-ng {}/{of} failed: {why}", i + 1));
                m.vng.failures.push(format!("vng run {}: {why}", i + 1));
            }
        }
        Ok(())
    }

    /// One vm-run into `o.out`, its phases and its whole time into `m`; false when it is left
    /// out of the medians.
    fn timed_vm_run(&self, o: &VmRunOptions, i: usize, m: &mut Measured) -> Result<bool> {
        let dir = o.out.clone().unwrap_or_default();
        let started = Instant::now();
        let code = run::vm_run(o);
        let total = started.elapsed().as_secs_f64();
        if code == RIG_FAILURE_EXIT {
            bail!("warm run {} failed (exit 2): see {}", i + 1, dir.display());
        }
        // Exit 1 means a gate failed, and the gates that depend on it did not run: that run
        // timed a shorter job, so its figures would drag the medians down.
        if !matches!(code, 0 | 3) {
            m.excluded.push(format!(
                "run {} (exit {code}: a gate failed, so gates after it may not have run; see {})",
                i + 1,
                dir.display()
            ));
            return Ok(false);
        }
        let r = ReportDir::open(&dir)
            .and_then(|d| verdict::read_report(&d))
            .map_err(anyhow::Error::msg)?
            .report;
        let Some(vmp) = r.vm else {
            bail!(
                "warm run {}'s report has no vm section: see {}",
                i + 1,
                dir.display()
            );
        };
        let phases = if o.cold {
            &mut m.cold_phases
        } else {
            for g in &r.gates {
                let secs = g.duration_ms as f64 / 1000.0;
                let name = g.name.to_string();
                match m.gates.iter_mut().find(|(n, _)| *n == name) {
                    Some((_, v)) => v.push(secs),
                    None => m.gates.push((name, vec![secs])),
                }
            }
            &mut m.phases
        };
        for p in vmp.phases {
            phases
                .entry(p.name)
                .or_default()
                .push(p.duration_ms as f64 / 1000.0);
        }
        phases.entry(END_TO_END.into()).or_default().push(total);
        m.run_accels.push(vmp.accel);
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), 2.5);
    }

    fn measured() -> Measured {
        let mut phases = BTreeMap::new();
        for (name, v) in [
            ("image", vec![0.0, 0.0, 0.0]),
            ("boot_to_ssh", vec![9.0, 10.0, 9.5]),
            ("copy", vec![5.0, 4.0, 4.5]),
            ("gates", vec![30.0, 31.0, 29.0]),
            ("fetch", vec![0.5, 0.6, 0.4]),
            ("end_to_end", vec![46.0, 47.0, 45.0]),
        ] {
            phases.insert(name.to_string(), v);
        }
        Measured {
            machine: "2 cores, Debian GNU/Linux 12 (bookworm), kernel 6.18.0, AMD EPYC".into(),
            qemu_version: "QEMU emulator version 7.2.22".into(),
            floor_accels: vec!["tcg".into(); 3],
            run_accels: vec!["tcg".into(); 3],
            accel_reason: "forced with --accel tcg".into(),
            image_line: "cached image no-op: median 1.2 ms over 10 runs (min 1.0, max 1.5)\n"
                .into(),
            floor: vec![2.5, 2.0, 3.0],
            cold_phases: phases
                .iter()
                .map(|(k, v)| (k.clone(), v.iter().map(|x| x * 2.0).collect()))
                .collect(),
            phases,
            gates: vec![
                ("prerequisites".into(), vec![3.0, 4.0, 3.5]),
                ("dump".into(), vec![12.0, 11.0, 13.0]),
            ],
            excluded: Vec::new(),
            first_command: vec![1.0, 1.5, 1.2],
            first_command_cold: vec![6.0, 5.0, 7.0],
            vng: PeerTimes::default(),
            reports: "reports/bench-x".into(),
        }
    }

    #[test]
    fn summary_layout() {
        assert_eq!(
            summary(&measured()),
            "\
machine: 2 cores, Debian GNU/Linux 12 (bookworm), kernel 6.18.0, AMD EPYC
qemu: QEMU emulator version 7.2.22
accelerator: tcg (forced with --accel tcg)
cached image no-op: median 1.2 ms over 10 runs (min 1.0, max 1.5)
floor (bare kernel, spawn to exit after its no-root panic): median 2.50 s, min 2.00, max 3.00, n 3
warm vm-run (3 resumed, 3 cold, interleaved with the floor boots), medians:
                        resumed             cold
  image           0.00 s  0.00x    0.00 s  0.00x
  boot_to_ssh     9.50 s  3.80x   19.00 s  7.60x
  copy            4.50 s  1.80x    9.00 s  3.60x
  gates          30.00 s 12.00x   60.00 s 24.00x
  fetch           0.50 s  0.20x    1.00 s  0.40x
  end_to_end     46.00 s 18.40x   92.00 s 36.80x  (target resumed <= 6x floor: 18.40x, not met)
gates of the resumed runs, medians:
  prerequisites             3.50 s   1.40x floor
  dump                     12.00 s   4.80x floor
first command, resumed (vm-exec -- true, 3 runs): median 1.20 s, 0.48x floor  (target <= 0.5x floor: 0.48x, met)
first command, cold (vm-exec -- true, 3 runs): median 6.00 s, 2.40x floor
virtme-ng: not measured (--peers sets it up and times it)
reports: reports/bench-x
"
        );
    }

    #[test]
    fn summary_names_the_runs_it_left_out() {
        let mut m = measured();
        m.excluded.push(
            "run 2 (exit 1: a gate failed, so gates after it may not have run; see x)".into(),
        );
        let s = summary(&m);
        assert!(
            s.contains(
                "medians:\n  not counted: run 2 (exit 1: a gate failed, so gates after it may not have run; see x)\n          "
            ),
            "{s}"
        );
    }

    #[test]
    fn summary_says_when_accelerators_differ() {
        let mut m = measured();
        m.run_accels[1] = "kvm".into();
        let s = summary(&m);
        assert!(
            s.contains("accelerator: floor tcg, runs tcg/kvm (they differ"),
            "{s}"
        );
    }

    #[test]
    fn summary_gives_the_peers_median_against_the_floor() {
        let mut m = measured();
        m.vng = PeerTimes {
            asked: true,
            times: vec![10.0, 9.0, 9.5],
            failures: vec!["vng run 2: vng exited 255: Kernel panic".into()],
            ..PeerTimes::default()
        };
        let s = summary(&m);
        assert!(
            s.contains(
                "virtme-ng (vng --run KERNEL -- true, 3 runs): median 9.50 s, 3.80x floor\n  not counted: vng run 2: vng exited 255: Kernel panic\nreports:"
            ),
            "{s}"
        );
        assert!(!s.contains("not run here"), "{s}");
    }

    #[test]
    fn summary_says_plainly_why_the_peer_did_not_run() {
        let mut m = measured();
        m.vng = PeerTimes {
            asked: true,
            not_run: Some("udevd is missing (apt-get install udev: ...)".into()),
            ..PeerTimes::default()
        };
        assert!(summary(&m).contains(
            "virtme-ng: not run here: udevd is missing (apt-get install udev: ...)\nreports:"
        ));
        // Boots that all failed are no timing either.
        m.vng = PeerTimes {
            asked: true,
            failures: vec!["vng run 1: vng exited 255: VFS: Unable to mount root fs".into(); 2],
            ..PeerTimes::default()
        };
        let s = summary(&m);
        assert!(
            s.contains("virtme-ng: not run here: vng failed on all 2 of its boots: vng run 1: vng exited 255: VFS: Unable to mount root fs\n"),
            "{s}"
        );
        assert!(!s.contains("median 0"), "{s}");
    }

    #[test]
    fn summary_notes_how_the_peer_ran() {
        let mut m = measured();
        m.vng = PeerTimes {
            asked: true,
            times: vec![9.0],
            note: Some("without virtiofsd, which could not be built (x): vng used 9p".into()),
            ..PeerTimes::default()
        };
        let s = summary(&m);
        assert!(
            s.contains(
                "3.60x floor\n  without virtiofsd, which could not be built (x): vng used 9p\n"
            ),
            "{s}"
        );
    }
}
