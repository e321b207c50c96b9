//! The fidelity differences, defined once: every way a run of the diagnostic differs from the
//! shared-OS runtime it stands in for, each under a stable key. The guest records the keys that
//! applied to its run (with the run's own detail: the kernel, or why an option did not close a
//! difference); the host requires every key no option closed, and matches keys, never words.
//! What a difference says is this module's text for its key, so a guest cannot reword one.

use crate::report::{Gate, GateName, RunOptions};
use serde::{Deserialize, Serialize};
use std::fmt;

/// A difference from the runtime, by its stable key (the name report.json carries).
#[derive(Serialize, Deserialize, Clone, Copy, PartialEq, Eq, Debug, Hash, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum Key {
    /// The tree runs on the kernel of the machine that runs the diagnostic.
    SharedKernel,
    /// The X server is Xvfb, a software framebuffer.
    XvfbFramebuffer,
    /// Closed by `--userns`.
    NoUserNamespace,
    /// Closed by `--cgroup`.
    NoCgroupLimits,
    /// Closed by `--cow-root`.
    SharedRoot,
    /// CRIU restores need root and the very kernel and CRIU build that dumped.
    CriuNeedsRootAndSameKernel,
    /// The GUI gate compares pixels and asks a human.
    GuiReviewIsPixels,
    /// Closed by `--workload desktop`.
    NoDesktopApplication,
    /// Closed by `--workload browser` (with the browser's sandbox on).
    NoBrowser,
    /// Closed by `--workload session` (an XFCE session) when its copies kept its state.
    NotAFullDesktop,
}

impl Key {
    /// Every key, in the order a report lists them.
    pub const ALL: [Key; 10] = [
        Key::SharedKernel,
        Key::XvfbFramebuffer,
        Key::NoUserNamespace,
        Key::NoCgroupLimits,
        Key::SharedRoot,
        Key::CriuNeedsRootAndSameKernel,
        Key::GuiReviewIsPixels,
        Key::NoDesktopApplication,
        Key::NoBrowser,
        Key::NotAFullDesktop,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Key::SharedKernel => "shared_kernel",
            Key::XvfbFramebuffer => "xvfb_framebuffer",
            Key::NoUserNamespace => "no_user_namespace",
            Key::NoCgroupLimits => "no_cgroup_limits",
            Key::SharedRoot => "shared_root",
            Key::CriuNeedsRootAndSameKernel => "criu_needs_root_and_same_kernel",
            Key::GuiReviewIsPixels => "gui_review_is_pixels",
            Key::NoDesktopApplication => "no_desktop_application",
            Key::NoBrowser => "no_browser",
            Key::NotAFullDesktop => "not_a_full_desktop",
        }
    }

    /// What the difference is, in the rig's words.
    pub fn text(self) -> &'static str {
        match self {
            Key::SharedKernel => "the tree shares the kernel of the machine it ran on",
            Key::XvfbFramebuffer => "Xvfb software framebuffer, no GPU",
            Key::NoUserNamespace => "no user namespace: root in the tree is root of the machine",
            Key::NoCgroupLimits => "no cgroup CPU or memory limits",
            Key::SharedRoot => {
                "the tree's root is a read-only bind of the machine's /; only /dev, /dev/shm, \
                 /tmp and /var/lib/xkb are private"
            }
            Key::CriuNeedsRootAndSameKernel => {
                "CRIU restore needs root and the same kernel and CRIU build that dumped"
            }
            Key::GuiReviewIsPixels => {
                "the GUI state gate compares framebuffer pixels and asks a human; it is not proof \
                 of application state"
            }
            Key::NoDesktopApplication => {
                "no window manager, GTK application holding a user's input, or D-Bus session bus \
                 in the tree"
            }
            Key::NoBrowser => "no web browser, with its own sandbox on, in the tree",
            Key::NotAFullDesktop => {
                "the tree is a handful of processes, not a full desktop session (a GNOME session, \
                 a file manager, an agent's guest server: a hundred-plus processes and gigabytes \
                 per desktop)"
            }
        }
    }

    /// The option that can close this difference, when one can.
    pub fn closable(self) -> Option<&'static Closable> {
        CLOSABLE.iter().find(|c| c.key == self)
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One difference as a report lists it: the key, and what applied to this run (the kernel it
/// shared, or why an option did not close it). What the difference is comes from the key.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Difference {
    pub key: Key,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub detail: String,
}

impl Difference {
    pub fn new(key: Key, detail: impl Into<String>) -> Difference {
        Difference {
            key,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Difference {
    /// The rig's text for the key, then the run's detail in parentheses.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.key.text())?;
        if !self.detail.is_empty() {
            write!(f, " ({})", self.detail)?;
        }
        Ok(())
    }
}

#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FidelityOption {
    Cgroup,
    CowRoot,
    Userns,
    /// `--workload desktop`.
    DesktopWorkload,
    /// `--workload browser` or `--workload chromium`: a browser with its sandbox on; the
    /// `-nosandbox` variants close nothing.
    BrowserWorkload,
    /// `--workload session`.
    SessionWorkload,
}

/// A difference an option can close, and the checks that must have passed in the restored
/// copies (isolation's two, reset's one) before a report may leave it out.
#[derive(Clone, Copy, Debug)]
pub struct Closable {
    pub key: Key,
    pub option: FidelityOption,
    pub flag: &'static str,
    pub checks: &'static [(GateName, &'static str)],
}

pub const CLOSABLE: [Closable; 6] = [
    Closable {
        key: Key::NoUserNamespace,
        option: FidelityOption::Userns,
        flag: "--userns",
        checks: &[
            (GateName::Isolation, "a_userns_mapped"),
            (GateName::Isolation, "b_userns_mapped"),
            (GateName::Isolation, "copies_own_userns"),
            (GateName::Reset, "userns_mapped"),
        ],
    },
    Closable {
        key: Key::NoCgroupLimits,
        option: FidelityOption::Cgroup,
        flag: "--cgroup",
        checks: &[
            (GateName::Isolation, "a_cgroup_limits"),
            (GateName::Isolation, "b_cgroup_limits"),
            (GateName::Isolation, "copies_own_cgroups"),
            (GateName::Reset, "cgroup_limits"),
        ],
    },
    Closable {
        key: Key::SharedRoot,
        option: FidelityOption::CowRoot,
        flag: "--cow-root",
        checks: &[
            (GateName::Isolation, "a_cow_file_written"),
            (GateName::Isolation, "b_cow_file_absent"),
            (GateName::Reset, "cow_file_discarded"),
        ],
    },
    // The editor's text, typed before the dump, read back from each restored copy over the X
    // wire: the application state a user made survives, and stays each copy's own.
    // `--workload office` does not close it, though its checks are the same kind: LibreOffice
    // runs on VCL's plain X11 backend (no GTK) with no session bus, and the difference names both.
    Closable {
        key: Key::NoDesktopApplication,
        option: FidelityOption::DesktopWorkload,
        flag: "--workload desktop",
        checks: &[
            (GateName::RestoreLiveProcess, "editor_same_text"),
            (GateName::Isolation, "a_editor_changed"),
            (GateName::Isolation, "b_editor_same_text"),
            (GateName::Reset, "editor_same_text"),
        ],
    },
    // The page's token and counter, read from the browser window's title in each restored copy.
    Closable {
        key: Key::NoBrowser,
        option: FidelityOption::BrowserWorkload,
        flag: "--workload browser",
        checks: &[
            (GateName::RestoreLiveProcess, "page_same_token"),
            (GateName::Isolation, "b_page_same_token"),
            (GateName::Reset, "page_same_token"),
        ],
    },
    // A desktop session's own state, the window manager's current workspace switched at the
    // live probe, read from each restored copy over the X wire; copy A's switch stays its own.
    Closable {
        key: Key::NotAFullDesktop,
        option: FidelityOption::SessionWorkload,
        flag: "--workload session",
        checks: &[
            (GateName::RestoreLiveProcess, "workspace_same"),
            (GateName::Isolation, "a_workspace_changed"),
            (GateName::Isolation, "b_workspace_same"),
            (GateName::Reset, "workspace_same"),
        ],
    },
];

/// Why `c` still applies to a run with `options` and these gates, or None when the run closed
/// it: the option was requested and every one of its checks is present and passed.
pub fn still_differs(c: &Closable, options: &RunOptions, gates: &[Gate]) -> Option<String> {
    if !options.requested(c.option) {
        if c.option == FidelityOption::BrowserWorkload
            && options.workload == crate::report::Workload::BrowserNosandbox
        {
            return Some(
                "the browser ran with its sandbox off (--workload browser-nosandbox)".into(),
            );
        }
        if c.option == FidelityOption::BrowserWorkload
            && options.workload == crate::report::Workload::ChromiumNosandbox
        {
            return Some(
                "the browser ran with its sandbox off (--workload chromium-nosandbox)".into(),
            );
        }
        return Some(format!("{} was not requested", c.flag));
    }
    let short: Vec<String> = c
        .checks
        .iter()
        .filter_map(|(gate, name)| {
            match gates
                .iter()
                .find(|g| g.name == *gate)
                .and_then(|g| g.check(name))
            {
                Some(ch) if ch.passed => None,
                Some(_) => Some(format!("{gate}.{name} failed")),
                None => Some(format!("{gate}.{name} did not run")),
            }
        })
        .collect();
    (!short.is_empty()).then(|| format!("{} was requested, but {}", c.flag, short.join(", ")))
}

/// The differences that applied to a run on `kernel` with `options` whose gates ended as
/// `gates`: every key, but a closable one whose option closed it.
pub fn differences(kernel: &str, options: &RunOptions, gates: &[Gate]) -> Vec<Difference> {
    Key::ALL
        .iter()
        .filter_map(|k| match (k, k.closable()) {
            (Key::SharedKernel, _) => Some(Difference::new(*k, kernel)),
            (_, Some(c)) => still_differs(c, options, gates).map(|why| Difference::new(*k, why)),
            (_, None) => Some(Difference::new(*k, "")),
        })
        .collect()
}

/// What is wrong with a report's list, in words: a key listed twice, and a key left out that no
/// option closed. A closable difference that is listed though its option closed it is only
/// cautious, not wrong.
pub fn problems(listed: &[Difference], options: &RunOptions, gates: &[Gate]) -> Vec<String> {
    let mut out = Vec::new();
    for k in Key::ALL {
        let n = listed.iter().filter(|d| d.key == k).count();
        if n > 1 {
            out.push(format!("lists the fidelity difference {k} {n} times"));
        }
        if n > 0 {
            continue;
        }
        let why = match k.closable() {
            None => Some("no option closes it".to_string()),
            Some(c) => still_differs(c, options, gates),
        };
        if let Some(why) = why {
            out.push(format!(
                "leaves out the fidelity difference {k} (\"{}\"), but {why}",
                k.text()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::{CgroupLimits, Check, Status};

    fn gate_with(name: GateName, checks: &[(&str, bool)]) -> Gate {
        let mut g = Gate::new(name, Status::Pass, "x");
        for (n, passed) in checks {
            g.checks.push(Check {
                name: n.to_string(),
                passed: *passed,
                value: serde_json::json!(null),
                expected: String::new(),
            });
        }
        g
    }

    fn cgroup_passing() -> Vec<Gate> {
        vec![
            gate_with(
                GateName::Isolation,
                &[
                    ("a_cgroup_limits", true),
                    ("b_cgroup_limits", true),
                    ("copies_own_cgroups", true),
                ],
            ),
            gate_with(GateName::Reset, &[("cgroup_limits", true)]),
        ]
    }

    fn with_cgroup() -> RunOptions {
        RunOptions {
            cgroup: Some(CgroupLimits {
                cpu_quota_us: 100_000,
                memory_max_bytes: 512 << 20,
            }),
            ..RunOptions::default()
        }
    }

    fn detail(v: &[Difference], k: Key) -> Option<String> {
        v.iter().find(|d| d.key == k).map(|d| d.detail.clone())
    }

    #[test]
    fn keys_serialize_as_named_and_each_has_its_text() {
        for k in Key::ALL {
            assert_eq!(serde_json::to_value(k).unwrap(), k.as_str());
            assert!(!k.text().is_empty());
        }
        let d: Difference =
            serde_json::from_str(r#"{"key": "shared_kernel", "detail": "6.1.0"}"#).unwrap();
        assert_eq!(
            d.to_string(),
            "the tree shares the kernel of the machine it ran on (6.1.0)"
        );
        assert!(serde_json::from_str::<Difference>(r#"{"key": "no user namespace"}"#).is_err());
        let closable: Vec<Key> = Key::ALL
            .into_iter()
            .filter(|k| k.closable().is_some())
            .collect();
        assert_eq!(
            closable,
            [
                Key::NoUserNamespace,
                Key::NoCgroupLimits,
                Key::SharedRoot,
                Key::NoDesktopApplication,
                Key::NoBrowser,
                Key::NotAFullDesktop
            ]
        );
    }

    #[test]
    fn a_difference_leaves_only_with_its_option_and_passing_checks() {
        let passing = cgroup_passing();
        let plain = differences("k", &RunOptions::default(), &passing);
        assert_eq!(plain.len(), Key::ALL.len());
        assert_eq!(detail(&plain, Key::SharedKernel).as_deref(), Some("k"));
        assert_eq!(
            detail(&plain, Key::NoCgroupLimits).as_deref(),
            Some("--cgroup was not requested")
        );
        let closed = differences("k", &with_cgroup(), &passing);
        assert_eq!(detail(&closed, Key::NoCgroupLimits), None);
        assert_eq!(closed.len(), Key::ALL.len() - 1);
        let mut failing = passing.clone();
        failing[0].checks[1].passed = false;
        let kept = detail(
            &differences("k", &with_cgroup(), &failing),
            Key::NoCgroupLimits,
        );
        assert!(kept.unwrap().contains("isolation.b_cgroup_limits failed"));
        let kept = detail(
            &differences("k", &with_cgroup(), &passing[..1]),
            Key::NoCgroupLimits,
        );
        assert!(kept.unwrap().contains("reset.cgroup_limits did not run"));
    }

    #[test]
    fn a_workload_closes_its_difference_only_when_its_copies_showed_the_state() {
        use crate::report::Workload;
        let desktop = RunOptions {
            workload: Workload::Desktop,
            ..RunOptions::default()
        };
        let passing = vec![
            gate_with(GateName::RestoreLiveProcess, &[("editor_same_text", true)]),
            gate_with(
                GateName::Isolation,
                &[("a_editor_changed", true), ("b_editor_same_text", true)],
            ),
            gate_with(GateName::Reset, &[("editor_same_text", true)]),
        ];
        let d = differences("k", &desktop, &passing);
        assert_eq!(detail(&d, Key::NoDesktopApplication), None);
        assert!(detail(&d, Key::NoBrowser).is_some());
        assert!(detail(&d, Key::NotAFullDesktop).is_some());
        let mut failing = passing.clone();
        failing[1].checks[1].passed = false;
        let kept = detail(
            &differences("k", &desktop, &failing),
            Key::NoDesktopApplication,
        );
        assert!(kept
            .unwrap()
            .contains("isolation.b_editor_same_text failed"));
        // The office workload's passing document checks close no difference: its application
        // is not a GTK one and it has no session bus.
        let office = RunOptions {
            workload: Workload::Office,
            ..RunOptions::default()
        };
        let document = vec![
            gate_with(GateName::RestoreLiveProcess, &[("office_same_text", true)]),
            gate_with(
                GateName::Isolation,
                &[("a_office_changed", true), ("b_office_same_text", true)],
            ),
            gate_with(GateName::Reset, &[("office_same_text", true)]),
        ];
        let o = differences("k", &office, &document);
        assert!(detail(&o, Key::NoDesktopApplication)
            .unwrap()
            .contains("--workload desktop was not requested"));
        // Without its sandbox the browser closes nothing, and the detail says why.
        let nosandbox = RunOptions {
            workload: Workload::BrowserNosandbox,
            ..RunOptions::default()
        };
        let page = vec![
            gate_with(GateName::RestoreLiveProcess, &[("page_same_token", true)]),
            gate_with(GateName::Isolation, &[("b_page_same_token", true)]),
            gate_with(GateName::Reset, &[("page_same_token", true)]),
        ];
        let kept = detail(&differences("k", &nosandbox, &page), Key::NoBrowser).unwrap();
        assert!(kept.contains("sandbox off"), "{kept}");
        let browser = RunOptions {
            workload: Workload::Browser,
            ..RunOptions::default()
        };
        assert_eq!(
            detail(&differences("k", &browser, &page), Key::NoBrowser),
            None
        );
        // The session closes `not_a_full_desktop` only with its workspace kept in every copy.
        let session = RunOptions {
            workload: Workload::Session,
            ..RunOptions::default()
        };
        let workspace = vec![
            gate_with(GateName::RestoreLiveProcess, &[("workspace_same", true)]),
            gate_with(
                GateName::Isolation,
                &[("a_workspace_changed", true), ("b_workspace_same", true)],
            ),
            gate_with(GateName::Reset, &[("workspace_same", true)]),
        ];
        assert_eq!(
            detail(
                &differences("k", &session, &workspace),
                Key::NotAFullDesktop
            ),
            None
        );
        assert!(detail(
            &differences("k", &desktop, &workspace),
            Key::NotAFullDesktop
        )
        .is_some());
        let mut lost = workspace.clone();
        lost[2].checks[0].passed = false;
        let kept = detail(&differences("k", &session, &lost), Key::NotAFullDesktop).unwrap();
        assert!(kept.contains("reset.workspace_same failed"), "{kept}");
        let kept = detail(
            &differences("k", &session, &workspace[..1]),
            Key::NotAFullDesktop,
        );
        assert!(kept.unwrap().contains("did not run"));
        // Chromium with its sandbox on closes it on the same page checks; without, never.
        let chromium = RunOptions {
            workload: Workload::Chromium,
            ..RunOptions::default()
        };
        assert_eq!(
            detail(&differences("k", &chromium, &page), Key::NoBrowser),
            None
        );
        let failing_page = vec![page[0].clone(), page[1].clone()];
        let kept = detail(&differences("k", &chromium, &failing_page), Key::NoBrowser).unwrap();
        assert!(kept.contains("reset.page_same_token did not run"), "{kept}");
        let chromium_off = RunOptions {
            workload: Workload::ChromiumNosandbox,
            ..RunOptions::default()
        };
        let kept = detail(&differences("k", &chromium_off, &page), Key::NoBrowser).unwrap();
        assert!(kept.contains("chromium-nosandbox"), "{kept}");
    }

    #[test]
    fn the_host_requires_every_key_no_option_closed() {
        let gates = cgroup_passing();
        let opts = RunOptions::default();
        let full = differences("k", &opts, &gates);
        assert!(problems(&full, &opts, &gates).is_empty());
        // Each key left out in turn: named, with why it had to stay.
        for k in Key::ALL {
            let short: Vec<Difference> = full.iter().filter(|d| d.key != k).cloned().collect();
            let p = problems(&short, &opts, &gates);
            assert_eq!(p.len(), 1, "{k}: {p:?}");
            assert!(p[0].contains(&format!("leaves out the fidelity difference {k}")));
        }
        let unclosable: Vec<Difference> = full
            .iter()
            .filter(|d| d.key.closable().is_some())
            .cloned()
            .collect();
        assert_eq!(problems(&unclosable, &opts, &gates).len(), 4);
        // Twice is named too.
        let mut twice = full.clone();
        twice.push(full[1].clone());
        assert_eq!(
            problems(&twice, &opts, &gates),
            ["lists the fidelity difference xvfb_framebuffer 2 times"]
        );
        // A closed difference may be left out, and may be listed.
        let closed = differences("k", &with_cgroup(), &gates);
        assert!(problems(&closed, &with_cgroup(), &gates).is_empty());
        assert!(problems(&full, &with_cgroup(), &gates).is_empty());
        let mut failed = gates.clone();
        failed[1].checks[0].passed = false;
        let p = problems(&closed, &with_cgroup(), &failed);
        assert!(p[0].contains("reset.cgroup_limits failed"), "{p:?}");
    }
}
