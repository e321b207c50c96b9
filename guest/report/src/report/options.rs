//! The run options a report records: the density gate's copies, the workload, the fidelity
//! options and the cgroup limits.

use super::GateName;
use crate::fidelity::FidelityOption;
use serde::{Deserialize, Serialize};
use std::fmt;

/// The options of `diagnose`: the density gate's copies, and the fidelity options that close a
/// fidelity difference when their checks pass in the restored copies.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    /// `--copies N|max`: the density gate runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copies: Option<Copies>,
    /// `--max-copies N` (with `--copies max`): the search's cap, lower than the most there is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_copies: Option<u32>,
    /// `--cgroup`: the tree and every copy in a cgroup v2 group of their own with these limits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup: Option<CgroupLimits>,
    /// `--cow-root`: a private writable overlay over the read-only root, per copy.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cow_root: bool,
    /// `--userns`: the tree in a user namespace of its own with root mapped to an unprivileged
    /// range.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub userns: bool,
    /// `--workload NAME`: what the tree runs besides Xvfb and the state app; absent for the
    /// default `xterm`, so a plain run's report reads as before the option existed.
    #[serde(default, skip_serializing_if = "Workload::is_default")]
    pub workload: Workload,
    /// `--guest-ksm` (with `--copies N`): the density gate's copies opt in to the guest's KSM,
    /// and are read again with it merging their pages.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub guest_ksm: bool,
}

/// What the tree runs beside Xvfb and the state app (`diagnose --workload NAME`).
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[serde(rename_all = "kebab-case")]
pub enum Workload {
    /// The SPEC's tree: an xterm.
    #[default]
    Xterm,
    /// A window manager (openbox), a GTK 3 editor (mousepad) holding text typed into it, and a
    /// D-Bus session bus.
    Desktop,
    /// A real browser (Firefox ESR) with its own sandbox on, showing a local page whose script
    /// keeps a token and a counter.
    Browser,
    /// The same browser with every one of its sandboxes switched off: named apart, so that a
    /// result without the sandbox is never taken for one with it.
    BrowserNosandbox,
    /// A full XFCE session: xfce4-session starting its window manager (xfwm4), panel and
    /// settings daemon, with xfconfd on demand over its D-Bus session bus.
    Session,
    /// LibreOffice Writer, on the plain X11 backend under a window manager (openbox), holding
    /// text typed into an unsaved document.
    Office,
    /// Debian's Chromium with its sandbox on, run as an unprivileged user inside the tree (it
    /// refuses root with the sandbox on), showing a local page whose script keeps a token, a
    /// counter and the text typed into its field.
    Chromium,
    /// The same Chromium and page with `--no-sandbox`: named apart, like `browser-nosandbox`.
    ChromiumNosandbox,
}

impl Workload {
    pub const ALL: [Workload; 8] = [
        Workload::Xterm,
        Workload::Desktop,
        Workload::Browser,
        Workload::BrowserNosandbox,
        Workload::Session,
        Workload::Office,
        Workload::Chromium,
        Workload::ChromiumNosandbox,
    ];

    pub fn is_default(&self) -> bool {
        *self == Workload::Xterm
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Workload::Xterm => "xterm",
            Workload::Desktop => "desktop",
            Workload::Browser => "browser",
            Workload::BrowserNosandbox => "browser-nosandbox",
            Workload::Session => "session",
            Workload::Office => "office",
            Workload::Chromium => "chromium",
            Workload::ChromiumNosandbox => "chromium-nosandbox",
        }
    }

    pub fn parse(s: &str) -> Option<Workload> {
        Workload::ALL.into_iter().find(|w| w.as_str() == s)
    }

    /// How many step timeouts the tree may take to come up: Firefox's first start under TCG
    /// took more than three minutes (its graphics probe alone a minute), where Xvfb, openbox
    /// and mousepad take seconds.
    /// LibreOffice's first start builds its profile: OFFICE_READY_STEPS says what it took.
    pub fn ready_steps(self) -> u32 {
        if self.is_browser() {
            4
        } else if self == Workload::Office {
            OFFICE_READY_STEPS
        } else if self == Workload::Session {
            // The session came up in 22 s and in 80 s of a 180 s step under TCG, the second
            // from cold caches beside another guest: two steps keep it clear of the bound.
            2
        } else {
            1
        }
    }

    /// The word the checks of the text typed into the workload's editor are named with
    /// (`{word}_holds_typed_text`, `{word}_same_text`, `a_{word}_changed`,
    /// `{word}_change_seen`); None for a workload without an editor.
    pub fn typed_text_word(self) -> Option<&'static str> {
        match self {
            Workload::Desktop => Some("editor"),
            Workload::Office => Some("office"),
            Workload::Xterm
            | Workload::Browser
            | Workload::BrowserNosandbox
            | Workload::Session
            | Workload::Chromium
            | Workload::ChromiumNosandbox => None,
        }
    }

    /// Whether the tree runs a browser (Firefox or Chromium, with its sandbox or without).
    pub fn is_browser(self) -> bool {
        matches!(self, Workload::Browser | Workload::BrowserNosandbox) || self.is_chromium()
    }

    /// Whether the tree runs Chromium (with its sandbox or without).
    pub fn is_chromium(self) -> bool {
        matches!(self, Workload::Chromium | Workload::ChromiumNosandbox)
    }

    /// The workload's own programs, each with the Debian package that brings it: the guest's
    /// prerequisites gate looks for the programs, the host for the packages in an image's
    /// definition before anything boots.
    pub fn programs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Workload::Xterm => &[],
            Workload::Desktop => &[
                ("openbox", "openbox"),
                ("mousepad", "mousepad"),
                ("dbus-daemon", "dbus-daemon"),
            ],
            Workload::Browser | Workload::BrowserNosandbox => &[("firefox-esr", "firefox-esr")],
            Workload::Session => &[
                ("xfce4-session", "xfce4-session"),
                ("xfwm4", "xfwm4"),
                ("xfce4-panel", "xfce4-panel"),
                ("xfsettingsd", "xfce4-settings"),
                ("dbus-daemon", "dbus-daemon"),
            ],
            Workload::Office => &[("openbox", "openbox"), ("soffice", "libreoffice-writer")],
            // The setpriv that drops it to an unprivileged user is util-linux's, which every
            // Debian installs (it is Essential), so no image definition names it.
            Workload::Chromium | Workload::ChromiumNosandbox => &[("chromium", "chromium")],
        }
    }
}

/// The step timeouts the office workload may take to come up: LibreOffice's first start,
/// which builds its profile in the tree's /tmp, took the launch gate 19.7 s under TCG
/// (bookworm-apps, 2 vCPUs, the machine shared), openbox and Xvfb included; the second step is
/// room for a machine busier than that one.
const OFFICE_READY_STEPS: u32 = 2;

impl fmt::Display for Workload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RunOptions {
    pub fn is_plain(&self) -> bool {
        *self == RunOptions::default()
    }

    /// The gates a run with these options has, in order.
    pub fn gates(&self) -> Vec<GateName> {
        GateName::sequence(self.copies.is_some())
    }

    /// The options as diagnose's arguments; empty for a plain run.
    pub fn args(&self) -> Vec<String> {
        let mut v = Vec::new();
        if let Some(c) = self.copies {
            v.extend(["--copies".to_string(), c.to_string()]);
        }
        if let Some(n) = self.max_copies {
            v.extend(["--max-copies".to_string(), n.to_string()]);
        }
        if self.userns {
            v.push("--userns".into());
        }
        if let Some(l) = self.cgroup {
            v.extend(["--cgroup".to_string(), l.to_string()]);
        }
        if self.cow_root {
            v.push("--cow-root".into());
        }
        if !self.workload.is_default() {
            v.extend(["--workload".to_string(), self.workload.to_string()]);
        }
        if self.guest_ksm {
            v.push("--guest-ksm".into());
        }
        v
    }

    pub fn requested(&self, option: FidelityOption) -> bool {
        match option {
            FidelityOption::Cgroup => self.cgroup.is_some(),
            FidelityOption::CowRoot => self.cow_root,
            FidelityOption::Userns => self.userns,
            FidelityOption::DesktopWorkload => self.workload == Workload::Desktop,
            FidelityOption::SessionWorkload => self.workload == Workload::Session,
            // Either browser as users run it, with its sandbox on.
            FidelityOption::BrowserWorkload => {
                self.workload == Workload::Browser || self.workload == Workload::Chromium
            }
        }
    }
}

/// How many copies the density gate restores at once.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Copies {
    /// Exactly this many.
    Count(u32),
    /// As many as fit: a bounded search upward.
    Max,
}

impl fmt::Display for Copies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Copies::Count(n) => write!(f, "{n}"),
            Copies::Max => f.write_str("max"),
        }
    }
}

/// cgroup v2 limits: `cpu.max` is `cpu_quota_us 100000`, `memory.max` is `memory_max_bytes`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub struct CgroupLimits {
    pub cpu_quota_us: u64,
    pub memory_max_bytes: u64,
}

/// The cgroup v2 CPU period the quota is counted in.
pub const CPU_PERIOD_US: u64 = 100_000;

/// `cpu=N,memory=SIZE`, both required: N CPUs of quota (a fraction allowed, at least 0.01),
/// SIZE in bytes with an optional K, M, G or T suffix (powers of 1024). Both, because the
/// report's `CgroupLimits` records both limits and the checks compare both; "no limit" has no
/// value there.
pub fn parse_cgroup_limits(s: &str) -> Result<CgroupLimits, String> {
    const FORM: &str = "write it as cpu=N,memory=SIZE, e.g. --cgroup cpu=1,memory=512M";
    let mut cpu = None;
    let mut mem = None;
    for part in s.split(',') {
        let Some((k, v)) = part.split_once('=') else {
            return Err(format!("`{part}` in --cgroup {s} is not KEY=VALUE: {FORM}"));
        };
        match k.trim() {
            "cpu" if cpu.is_none() => {
                cpu = Some(parse_cpus(v.trim()).map_err(|e| format!("{e}: {FORM}"))?)
            }
            "memory" if mem.is_none() => {
                mem = Some(parse_size(v.trim()).map_err(|e| format!("{e}: {FORM}"))?)
            }
            "cpu" | "memory" => return Err(format!("--cgroup {s} gives {k} twice: {FORM}")),
            other => {
                return Err(format!(
                    "--cgroup knows cpu and memory, not `{other}`: {FORM}"
                ))
            }
        }
    }
    match (cpu, mem) {
        (Some(cpu_quota_us), Some(memory_max_bytes)) => Ok(CgroupLimits {
            cpu_quota_us,
            memory_max_bytes,
        }),
        (None, _) => Err(format!(
            "--cgroup {s} gives no cpu=: it needs both cpu and memory; {FORM}"
        )),
        (_, None) => Err(format!(
            "--cgroup {s} gives no memory=: it needs both cpu and memory; {FORM}"
        )),
    }
}

fn parse_cpus(v: &str) -> Result<u64, String> {
    let n: f64 = v
        .parse()
        .map_err(|_| format!("cpu={v} is not a number of CPUs"))?;
    let quota = (n * CPU_PERIOD_US as f64).round();
    // The kernel refuses quotas under 1 ms.
    if !(1000.0..=1e12).contains(&quota) {
        return Err(format!("cpu={v} is out of range (0.01 to 10000000 CPUs)"));
    }
    Ok(quota as u64)
}

fn parse_size(v: &str) -> Result<u64, String> {
    let (num, mult) = match v.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m: u64 = match c.to_ascii_uppercase() {
                'K' => 1 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                'T' => 1 << 40,
                _ => {
                    return Err(format!(
                        "memory={v} has an unknown suffix (use K, M, G or T)"
                    ))
                }
            };
            (&v[..i], m)
        }
        _ => (v, 1),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("memory={v} is not a whole size"))?;
    let bytes = n
        .checked_mul(mult)
        .ok_or_else(|| format!("memory={v} is too large"))?;
    // Below a few MiB Xvfb alone cannot start; it would be an OOM, not a finding.
    if bytes < 16 << 20 {
        return Err(format!("memory={v} is below 16M, too little for Xvfb"));
    }
    Ok(bytes)
}

impl fmt::Display for CgroupLimits {
    /// As `--cgroup` takes it: `cpu=N,memory=SIZE`, SIZE in the largest whole unit.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cpus = self.cpu_quota_us as f64 / CPU_PERIOD_US as f64;
        let m = self.memory_max_bytes;
        let (n, unit) = [(40, "T"), (30, "G"), (20, "M"), (10, "K")]
            .into_iter()
            .find(|(shift, _)| m >= 1 << shift && m % (1 << shift) == 0)
            .map_or((m, ""), |(shift, u)| (m >> shift, u));
        write!(f, "cpu={cpus},memory={n}{unit}")
    }
}
