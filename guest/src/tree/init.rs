//! The tree's PID 1 (`tree-init`): it starts the workload's programs in order, each once what
//! it waits for is there, and reaps.

use super::{workload, After, Program, TreeSpec};
use anyhow::{Context, Result};
use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

extern "C" fn exit_on_term(_: i32) {
    // SAFETY: _exit is async-signal-safe. PID 1 exiting takes the whole namespace with it.
    unsafe { nix::libc::_exit(0) }
}

fn start(p: &Program) -> Result<u32> {
    let (argv, log) = (&p.argv, p.log());
    let out = std::fs::File::create(&log).with_context(|| format!("creating {log}"))?;
    let err = out.try_clone()?;
    let mut cmd = crate::exec::command(&argv[0]);
    if p.refuse_pidfd_open {
        super::session::refuse_pidfd_open(&mut cmd);
    }
    let child = cmd
        .args(&argv[1..])
        .envs(p.env.iter().cloned())
        .stdin(Stdio::null())
        .stdout(out)
        .stderr(err)
        .spawn()
        .with_context(|| format!("starting {}", argv.join(" ")))?;
    Ok(child.id())
}

/// Waits (bounded, as for the X socket) for `after` before `program` starts; the X server is
/// reached at `x_socket`.
fn wait_for(
    after: After,
    x_socket: &str,
    program: &str,
) -> Result<(), sharedos_report::wait::WaitError> {
    let bound = Duration::from_secs(300);
    match after {
        After::Path(path) => {
            sharedos_report::wait::until(&format!("{path} before {program}"), bound, || {
                Path::new(path).exists().then_some(())
            })
        }
        After::WindowManager => {
            let mut x = None;
            sharedos_report::wait::until(
                &format!("a window manager before {program}"),
                bound,
                || {
                    if x.is_none() {
                        x = crate::x11::XConn::connect(Path::new(x_socket)).ok();
                    }
                    let name = x.as_ref()?.window_manager_name();
                    match name {
                        Ok(Some(n)) if !n.is_empty() => Some(()),
                        Ok(_) => None,
                        // A broken connection is made again at the next look.
                        Err(_) => {
                            x = None;
                            None
                        }
                    }
                },
            )
        }
    }
}

/// `tree-init`: PID 1 of the tree, already inside its own root. Starts the workload, then
/// reaps, for ever; what it does goes to `log`, a line at a time (PID 1's stdout is its log).
pub fn init_main(spec: &TreeSpec, log: &mut dyn FnMut(&str)) -> Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let act = SigAction::new(
        SigHandler::Handler(exit_on_term),
        SaFlags::empty(),
        SigSet::empty(),
    );
    // SAFETY: the handler only calls _exit.
    unsafe { sigaction(Signal::SIGTERM, &act) }.context("SIGTERM handler")?;

    let w = workload(spec);
    for f in &w.files {
        let p = Path::new(f.path);
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir).with_context(|| format!("mkdir {}", dir.display()))?;
        }
        std::fs::write(p, &f.text).with_context(|| format!("writing {}", f.path))?;
    }
    log(&format!("{} pid {}", w.x_server.name, start(&w.x_server)?));
    let socket = format!("/tmp/.X11-unix/X{}", spec.display);
    // Bounded so a broken X server cannot keep PID 1 from starting the rest; the outside
    // observer reports what did not come up.
    let up = sharedos_report::wait::until("the X socket", Duration::from_secs(300), || {
        Path::new(&socket).exists().then_some(())
    });
    if let Err(e) = up {
        log(&e.to_string());
    }
    for p in &w.clients {
        for after in &p.after {
            if let Err(e) = wait_for(*after, &socket, p.name) {
                log(&e.to_string());
            }
        }
        log(&format!("{} pid {}", p.name, start(p)?));
    }
    loop {
        match nix::sys::wait::wait() {
            Ok(status) => log(&format!("reaped {status:?}")),
            Err(nix::errno::Errno::EINTR) => {}
            Err(_) => {
                nix::unistd::pause();
            }
        }
    }
}
