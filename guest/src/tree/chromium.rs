//! The `chromium` and `chromium-nosandbox` workloads: Debian's Chromium, as an unprivileged user
//! inside the tree, showing a local page whose script keeps a token, a counter and the text
//! typed into its field, and shows all three in the document title.
//!
//! Chromium refuses to run as root with its sandbox on, and everything in the tree runs as
//! root; so setpriv starts it as `CHROMIUM_UID`, with a HOME of its own in the tree's /tmp. The
//! sandbox stays on (`chromium`): Debian ships no setuid helper, so Chromium's namespace
//! sandbox is the one it uses, its zygote and renderers in user, pid and network namespaces
//! nested in the tree's. `chromium-nosandbox` passes `--no-sandbox` and nothing else changes.

use super::workload::{Program, TreeFile};
use sharedos_report::report::Workload as Kind;

/// The page Chromium shows, in the tree's /tmp (readable by everyone: PID 1 writes it as root).
pub const CHROMIUM_PAGE: &str = "/tmp/sharedos-chromium-page.html";
/// Chromium's HOME and, below it, its profile; made by Chromium itself, so they are its user's.
pub const CHROMIUM_HOME: &str = "/tmp/sharedos-chromium";
/// The unprivileged user Chromium runs as: Debian's `nobody`, which owns no file.
pub const CHROMIUM_UID: u32 = 65534;

/// The page: the Firefox page's token and counter, and a text field whose text the script
/// shows after them (`field=TEXT`) whenever it changes. The field has the focus from the start
/// so that keys typed into the window reach it; its caret is transparent, so that an idle page
/// stays still between two frame grabs.
pub fn chromium_page_html() -> String {
    format!(
        r#"<!doctype html>
<html><head><meta charset="utf-8"><title>{w}</title></head>
<body style="margin:0;background:#fff;color:#000;font:16px sans-serif">
<p style="margin:40px 40px 16px">sharedos chromium workload: this page's script keeps a token and a counter in memory and shows them, with the field's text, in the title.</p>
<input id="field" autofocus style="margin:0 40px;width:400px;caret-color:transparent;font:16px monospace">
<script>
const bytes = new Uint8Array(16);
crypto.getRandomValues(bytes);
const token = Array.from(bytes, b => b.toString(16).padStart(2, "0")).join("");
const field = document.getElementById("field");
let counter = 0;
const show = () => {{ document.title = "{w} " + token + " " + counter + " {f}" + field.value; }};
field.addEventListener("input", show);
field.focus();
show();
setInterval(() => {{ counter += 1; show(); }}, {tick});
</script>
</body></html>
"#,
        w = sharedos_report::model::app::PAGE_TITLE_WORD,
        f = sharedos_report::model::app::PAGE_FIELD_PREFIX,
        tick = sharedos_report::compare::TICK_MS
    )
}

/// Chromium's command line: setpriv to the unprivileged user, then Debian's launcher. An app
/// window (no tab strip or address bar, its title the page's), 520x360 at the top left, clear
/// of the mark isolation and reset draw at 560,400. No first-run pages, GPU, component updates,
/// sync, translation or other network probes: the tree's network namespace has only loopback.
/// A child process's wait for the browser is raised from 15 s to 600 s (below).
pub fn chromium_argv(sandbox: bool) -> Vec<String> {
    let id = CHROMIUM_UID.to_string();
    let mut v: Vec<String> = vec![
        "setpriv".into(),
        format!("--reuid={id}"),
        format!("--regid={id}"),
        "--clear-groups".into(),
        "--".into(),
        "chromium".into(),
        "--ozone-platform=x11".into(),
        "--no-first-run".into(),
        "--no-default-browser-check".into(),
        "--disable-gpu".into(),
        format!("--user-data-dir={CHROMIUM_HOME}/profile"),
        "--password-store=basic".into(),
        "--disable-background-networking".into(),
        "--disable-component-update".into(),
        "--disable-sync".into(),
        "--disable-features=Translate,MediaRouter,OptimizationHints,DialMediaRouteProvider".into(),
        // A child waits 15 s for the browser's connection, then kills itself. Under TCG in
        // the tree's network namespace the network service's wait ran out every time (and
        // the page never loaded in 12 minutes); in the guest's own namespace it did not.
        "--ipc-connection-timeout=600".into(),
        "--window-position=0,0".into(),
        "--window-size=520,360".into(),
    ];
    if !sandbox {
        v.push("--no-sandbox".into());
    }
    v.push(format!("--app=file://{CHROMIUM_PAGE}"));
    v
}

/// What the tree adds for `w` (one of the Chromium workloads): the page, and Chromium.
pub fn chromium_parts(w: Kind) -> (Vec<TreeFile>, Program) {
    let files = vec![TreeFile {
        path: CHROMIUM_PAGE,
        text: chromium_page_html(),
    }];
    let mut p = Program::new("chromium", chromium_argv(w == Kind::Chromium));
    p.env.push(("HOME".into(), CHROMIUM_HOME.into()));
    (files, p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sandbox_is_off_only_in_the_variant_named_so_and_root_never_runs_it() {
        let (files, on) = chromium_parts(Kind::Chromium);
        let (_, off) = chromium_parts(Kind::ChromiumNosandbox);
        assert!(!on.argv.iter().any(|a| a.contains("sandbox")));
        assert_eq!(off.argv.iter().filter(|a| a.contains("sandbox")).count(), 1);
        for p in [&on, &off] {
            assert_eq!(
                p.argv[..5],
                [
                    "setpriv",
                    "--reuid=65534",
                    "--regid=65534",
                    "--clear-groups",
                    "--"
                ]
            );
            assert_eq!(p.argv[5], "chromium");
            assert!(p.argv.last().unwrap().ends_with(CHROMIUM_PAGE));
            assert!(p.env.contains(&("HOME".into(), CHROMIUM_HOME.into())));
        }
        assert_eq!(files[0].path, CHROMIUM_PAGE);
        let page = chromium_page_html();
        assert!(page.contains(r#"" field=" + field.value"#), "{page}");
        assert!(page.contains("caret-color:transparent"));
    }
}
