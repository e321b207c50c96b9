//! The workload definitions: the programs each workload's PID 1 starts, in order and with what
//! each waits for, the files put in the tree for them, and the processes a probe expects.

use super::argv::{browser_argv, dbus_argv, stateapp_argv, xterm_argv, xvfb_argv};
use super::{Kind, TreeSpec};

/// One program the tree's PID 1 starts; it writes its output to `/tmp/NAME.log` in the tree.
pub struct Program {
    pub name: &'static str,
    pub argv: Vec<String>,
    /// Set for this program only, beside the tree's environment.
    pub env: Vec<(String, String)>,
    /// What PID 1 waits for (each bounded) before starting it.
    pub after: Vec<After>,
    /// Whether `pidfd_open(2)` fails with ENOSYS in it and everything it starts (a seccomp
    /// filter): see `session::refuse_pidfd_open`.
    pub refuse_pidfd_open: bool,
}

/// A condition PID 1 waits for before it starts a program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum After {
    /// A path in the tree: a socket the program needs at once.
    Path(&'static str),
    /// A window manager announced on the display (`_NET_SUPPORTING_WM_CHECK`). Started beside
    /// openbox, mousepad ran with no window of it viewable in 3 of 20 desktop launches under
    /// TCG: its map request, redirected to a manager still starting, is the likely loss.
    WindowManager,
}

impl Program {
    pub(super) fn new(name: &'static str, argv: Vec<String>) -> Program {
        Program {
            name,
            argv,
            env: Vec::new(),
            after: Vec::new(),
            refuse_pidfd_open: false,
        }
    }

    pub fn log(&self) -> String {
        format!("/tmp/{}.log", self.name)
    }
}

/// A file PID 1 writes into the tree's private /tmp before it starts anything.
pub struct TreeFile {
    pub path: &'static str,
    pub text: String,
}

/// What the tree runs under its PID 1: an X server, the clients PID 1 starts once the server's
/// socket is there, and the files they read. The default workload: Xvfb, the
/// state app and an xterm.
pub struct Workload {
    pub x_server: Program,
    pub clients: Vec<Program>,
    pub files: Vec<TreeFile>,
}

impl Workload {
    /// Every program, in the order PID 1 starts them.
    pub fn programs(&self) -> impl Iterator<Item = &Program> {
        std::iter::once(&self.x_server).chain(&self.clients)
    }
}

/// The desktop workload's session bus, a socket in the tree's /tmp.
pub const BUS_SOCKET: &str = "/tmp/sharedos-bus";
/// The window manager's name as it announces itself (`_NET_SUPPORTING_WM_CHECK`), and the
/// editor's WM_CLASS class.
pub const WM_NAME: &str = "Openbox";
pub const EDITOR_CLASS: &str = "Mousepad";
/// The browser's local page and its profile, in the tree's /tmp.
pub const PAGE: &str = "/tmp/sharedos-page.html";
pub const BROWSER_PROFILE: &str = "/tmp/sharedos-firefox";

/// What the tree's processes are, per workload: the program name (argv[0]'s basename) each
/// live-state check looks for, the check's name, and what it is in words.
pub fn expected_processes(w: Kind) -> Vec<(&'static str, &'static str, &'static str)> {
    let mut v = vec![("Xvfb", "xvfb_process", "an Xvfb")];
    match w {
        Kind::Xterm => v.push(("xterm", "xterm_process", "an xterm")),
        Kind::Desktop => v.extend([
            (
                "dbus-daemon",
                "dbus_process",
                "the session bus (dbus-daemon)",
            ),
            ("openbox", "wm_process", "the window manager (openbox)"),
            ("mousepad", "editor_process", "the editor (mousepad)"),
        ]),
        Kind::Browser | Kind::BrowserNosandbox => v.push((
            "firefox-esr",
            "browser_process",
            "the browser (firefox-esr)",
        )),
        Kind::Session => v.extend(super::session::session_processes()),
        Kind::Office => v.extend([
            ("openbox", "wm_process", "the window manager (openbox)"),
            (
                "oosplash",
                "office_launcher_process",
                "LibreOffice's launcher (oosplash)",
            ),
            ("soffice.bin", "office_process", "LibreOffice (soffice.bin)"),
        ]),
        Kind::Chromium | Kind::ChromiumNosandbox => {
            v.push(("chromium", "browser_process", "the browser (chromium)"))
        }
    }
    v
}

/// GTK's settings in the tree's $HOME: no blinking cursor and no animations, so that an idle
/// screen stays still between two grabs (the framebuffer checks compare pixels).
const GTK_SETTINGS: &str = "[Settings]\ngtk-cursor-blink = false\ngtk-enable-animations = false\n";

/// The page: its script keeps a random token and a counter that ticks every 100 ms in memory
/// only, and shows both in the document title; the body stays still.
pub fn page_html() -> String {
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>{w}</title></head>
<body style="margin:0;background:#fff;color:#000;font:16px sans-serif">
<p style="margin:40px">sharedos browser workload: this page's script keeps a token and a counter in memory and shows them in the title.</p>
<script>
const bytes = new Uint8Array(16);
crypto.getRandomValues(bytes);
const token = Array.from(bytes, b => b.toString(16).padStart(2, "0")).join("");
let counter = 0;
const show = () => {{ document.title = "{w} " + token + " " + counter; }};
show();
setInterval(() => {{ counter += 1; show(); }}, {tick});
</script>
</body></html>
"#,
        w = sharedos_report::model::app::PAGE_TITLE_WORD,
        tick = sharedos_report::compare::TICK_MS
    )
}

/// Firefox's preferences for the run: no first-run pages, telemetry, update or network
/// probes (the tree's network namespace has only loopback). With `sandbox` false, the content
/// sandbox level is 0 as well.
pub fn browser_prefs(sandbox: bool) -> String {
    let mut prefs = vec![
        r#"user_pref("browser.shell.checkDefaultBrowser", false);"#,
        r#"user_pref("browser.startup.homepage_override.mstone", "ignore");"#,
        r#"user_pref("browser.aboutwelcome.enabled", false);"#,
        r#"user_pref("datareporting.policy.dataSubmissionEnabled", false);"#,
        r#"user_pref("toolkit.telemetry.reportingpolicy.firstRun", false);"#,
        r#"user_pref("browser.sessionstore.resume_from_crash", false);"#,
        r#"user_pref("app.normandy.enabled", false);"#,
        r#"user_pref("app.update.enabled", false);"#,
        r#"user_pref("browser.safebrowsing.update.enabled", false);"#,
        r#"user_pref("network.captive-portal-service.enabled", false);"#,
        r#"user_pref("network.connectivity-service.enabled", false);"#,
        r#"user_pref("extensions.update.enabled", false);"#,
    ];
    if !sandbox {
        prefs.push(r#"user_pref("security.sandbox.content.level", 0);"#);
    }
    prefs.join("\n") + "\n"
}

/// The environment that switches every Firefox sandbox off: only `browser-nosandbox` sets it.
pub const BROWSER_NO_SANDBOX_ENV: [&str; 6] = [
    "MOZ_DISABLE_CONTENT_SANDBOX",
    "MOZ_DISABLE_GMP_SANDBOX",
    "MOZ_DISABLE_RDD_SANDBOX",
    "MOZ_DISABLE_SOCKET_PROCESS_SANDBOX",
    "MOZ_DISABLE_UTILITY_SANDBOX",
    "MOZ_DISABLE_VR_SANDBOX",
];

pub fn workload(spec: &TreeSpec) -> Workload {
    let mut clients = vec![Program::new(
        "stateapp",
        stateapp_argv(&spec.exe, &spec.marker),
    )];
    let mut files = Vec::new();
    match spec.workload {
        Kind::Xterm => clients.push(Program::new("xterm", xterm_argv(&spec.marker))),
        Kind::Desktop => {
            files.push(TreeFile {
                path: "/tmp/.config/gtk-3.0/settings.ini",
                text: GTK_SETTINGS.into(),
            });
            clients.push(Program::new("dbus", dbus_argv()));
            clients.push(Program::new("openbox", vec!["openbox".into()]));
            let mut editor = Program::new("mousepad", vec!["mousepad".into()]);
            editor.after = vec![After::Path(BUS_SOCKET), After::WindowManager];
            clients.push(editor);
        }
        Kind::Browser | Kind::BrowserNosandbox => {
            let sandbox = spec.workload == Kind::Browser;
            files.push(TreeFile {
                path: PAGE,
                text: page_html(),
            });
            files.push(TreeFile {
                path: "/tmp/sharedos-firefox/user.js",
                text: browser_prefs(sandbox),
            });
            let mut browser = Program::new("firefox", browser_argv());
            browser
                .env
                .push(("MOZ_CRASHREPORTER_DISABLE".into(), "1".into()));
            if !sandbox {
                browser.env.extend(
                    BROWSER_NO_SANDBOX_ENV
                        .iter()
                        .map(|k| (k.to_string(), "1".to_string())),
                );
            }
            clients.push(browser);
        }
        Kind::Session => {
            files.extend(super::session::session_files(GTK_SETTINGS));
            clients.extend(super::session::session_programs());
        }
        Kind::Office => {
            let (programs, own) = super::office::office_programs();
            clients.extend(programs);
            files.extend(own);
        }
        Kind::Chromium | Kind::ChromiumNosandbox => {
            let (page, chromium) = super::chromium::chromium_parts(spec.workload);
            files.extend(page);
            clients.push(chromium);
        }
    }
    Workload {
        x_server: Program::new("xvfb", xvfb_argv(spec.display)),
        clients,
        files,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::tests::spec;
    use crate::tree::{init_argv, tree_env};

    #[test]
    fn each_workload_runs_its_programs_and_the_default_is_unchanged() {
        let names = |w: Kind| -> Vec<&'static str> {
            let s = TreeSpec {
                workload: w,
                ..spec()
            };
            workload(&s).programs().map(|p| p.name).collect()
        };
        assert_eq!(names(Kind::Xterm), ["xvfb", "stateapp", "xterm"]);
        assert_eq!(
            names(Kind::Desktop),
            ["xvfb", "stateapp", "dbus", "openbox", "mousepad"]
        );
        assert_eq!(names(Kind::Browser), ["xvfb", "stateapp", "firefox"]);
        assert_eq!(
            names(Kind::Office),
            ["xvfb", "stateapp", "openbox", "soffice"]
        );
        assert!(expected_processes(Kind::Office)
            .iter()
            .any(|(p, name, _)| *p == "soffice.bin" && *name == "office_process"));
        // The editor maps its window only once the manager is up to take its map request.
        let desktop = workload(&TreeSpec {
            workload: Kind::Desktop,
            ..spec()
        });
        let editor = desktop
            .clients
            .iter()
            .find(|p| p.name == "mousepad")
            .unwrap();
        assert_eq!(
            editor.after,
            [After::Path(BUS_SOCKET), After::WindowManager]
        );
        assert!(!init_argv(&spec()).contains(&"--workload".to_string()));
        let desktop = TreeSpec {
            workload: Kind::Desktop,
            ..spec()
        };
        assert!(init_argv(&desktop)
            .join(" ")
            .ends_with("--workload desktop"));
        assert!(tree_env(&desktop)
            .iter()
            .any(|(k, v)| k == "DBUS_SESSION_BUS_ADDRESS" && v == "unix:path=/tmp/sharedos-bus"));
        assert!(!tree_env(&spec()).iter().any(|(k, _)| k.starts_with("DBUS")));
        // The sandbox is off only in the variant named so.
        let env = |w: Kind| -> Vec<(String, String)> {
            let s = TreeSpec {
                workload: w,
                ..spec()
            };
            workload(&s)
                .clients
                .iter()
                .flat_map(|p| p.env.clone())
                .collect()
        };
        assert!(!env(Kind::Browser)
            .iter()
            .any(|(k, _)| k.contains("SANDBOX")));
        assert_eq!(
            env(Kind::BrowserNosandbox)
                .iter()
                .filter(|(k, _)| k.contains("SANDBOX"))
                .count(),
            BROWSER_NO_SANDBOX_ENV.len()
        );
        assert!(browser_prefs(false).contains("security.sandbox.content.level"));
        assert!(!browser_prefs(true).contains("sandbox"));
        assert!(page_html().contains("document.title = \"sharedos-page \" + token"));
    }
}
