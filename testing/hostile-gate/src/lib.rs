//! Test support, never shipped: what the tests' constructed reports share.

pub mod honest {
    //! The checks the host judges again (sharedos-rig's `recheck`) as an honest run records
    //! them: values made by the guest's own comparisons, and the PNGs they name written where
    //! the host looks for them.

    use sharedos_gate::x11::FrameExt;
    use sharedos_report::compare;
    use sharedos_report::digest;
    use sharedos_report::model::app::AppState;
    use sharedos_report::model::screen::{Frame, Window};
    use sharedos_report::report::{Artifact, Check, GateName, Report, GUEST_DIR};
    use std::path::Path;
    use std::time::Duration;

    /// The dump-time token of the app.
    pub const TOKEN: &str = "0123456789abcdef0123456789abcdef";

    /// The PNGs the checks name, relative to the guest's report directory.
    pub const PNGS: [&str; 6] = [
        "png/live-first.png",
        "png/live-second.png",
        "png/dump-time.png",
        "png/restored-a.png",
        "png/isolation-b.png",
        "png/reset.png",
    ];

    /// One small frame, the same in every PNG: an idle screen restored as it was.
    pub fn frame() -> Frame {
        Frame {
            width: 8,
            height: 6,
            rgb: (0..8 * 6u32).flat_map(|i| [i as u8, 40, 200]).collect(),
        }
    }

    /// Each gate's rechecked checks, passing, as the guest's comparisons make them.
    pub fn checks() -> Vec<(GateName, Check)> {
        let sha = frame().sha256();
        let app = |counter| AppState {
            token: TOKEN.into(),
            counter,
            pid: 7,
            file: None,
        };
        let windows = vec![Window {
            id: 0x40_0001,
            title: "sharedos-spike".into(),
            x: 0,
            y: 0,
            width: 8,
            height: 6,
        }];
        let mut v = vec![
            (
                GateName::LiveStateProbe,
                compare::counter_advances("counter_advances", &app(10), Ok(&app(12))),
            ),
            (
                GateName::LiveStateProbe,
                compare::same_framebuffer(
                    "framebuffer_stable_when_idle",
                    (&sha, PNGS[0]),
                    (&sha, PNGS[1]),
                    "a second grab equal to the first",
                ),
            ),
        ];
        for (gate_app, gate_x, prefix, png) in [
            (
                GateName::RestoreLiveProcess,
                GateName::RestoreXState,
                "",
                PNGS[3],
            ),
            (GateName::Isolation, GateName::Isolation, "b_", PNGS[4]),
            (GateName::Reset, GateName::Reset, "", PNGS[5]),
        ] {
            let name = |n: &str| format!("{prefix}{n}");
            v.extend([
                (
                    gate_app,
                    compare::same_token(&name("same_token"), TOKEN, TOKEN),
                ),
                (
                    gate_app,
                    compare::counter_continues(
                        &name("counter_continues"),
                        20,
                        Duration::from_secs(2),
                        25,
                    ),
                ),
                (
                    gate_app,
                    compare::counter_advances(&name("counter_advances"), &app(25), Ok(&app(27))),
                ),
                (
                    gate_x,
                    compare::same_windows(&name("same_windows"), &windows, &windows),
                ),
                (
                    gate_x,
                    compare::same_framebuffer(
                        &name("same_framebuffer"),
                        (&sha, PNGS[2]),
                        (&sha, png),
                        "the dump-time pixels",
                    ),
                ),
            ]);
        }
        v
    }

    /// Writes `frame` as the guest writes the PNG of a grab.
    pub fn write_png(frame: &Frame, path: &Path) -> std::io::Result<()> {
        frame
            .write_png(path)
            .map_err(|e| std::io::Error::other(format!("{e:#}")))
    }

    /// Writes the PNGs under `base` (the guest's report directory).
    pub fn write_pngs(base: &Path) -> std::io::Result<()> {
        std::fs::create_dir_all(base.join("png"))?;
        let f = frame();
        for rel in PNGS {
            write_png(&f, &base.join(rel))?;
        }
        Ok(())
    }

    /// Adds the checks to `r`'s gates (those it has), writes the PNGs where the host looks for
    /// them (under `guest/` in a vm-run report) and lists them as artifacts.
    pub fn add_to(r: &mut Report, dir: &Path) -> std::io::Result<()> {
        let prefix = if r.vm.is_some() {
            format!("{GUEST_DIR}/")
        } else {
            String::new()
        };
        write_pngs(&dir.join(&prefix))?;
        for (gate, c) in checks() {
            if let Some(g) = r.gates.iter_mut().find(|g| g.name == gate) {
                g.checks.push(c);
            }
        }
        for rel in PNGS {
            let a: Artifact = digest::artifact(dir, &format!("{prefix}{rel}"), "png")
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
            r.artifacts.push(a);
        }
        Ok(())
    }
}
