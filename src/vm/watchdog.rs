//! Every guest QEMU the rig runs is watched by one thread. Ctrl-C and SIGTERM only set a flag,
//! which a blocking SSH read or a write to a hung guest would not see for a while: the watchdog
//! ends every watched QEMU when the flag rises, which breaks those calls at once, so the client
//! fails over to its partial report and its cleanup. It ends a QEMU the same way when its
//! guest's console passes [`CONSOLE_CAP`]: a guest must not fill the host's disk through its UART.

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use sharedos_report::signals;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The most a guest's serial console may write. QEMU writes the file itself, so the cap is
/// enforced by stopping QEMU: an honest boot and run write well under 1 MiB, and a guest writing
/// flat out under TCG (about 0.6 MB/s here) passes the cap by at most one interval's worth.
pub const CONSOLE_CAP: u64 = 16 << 20;

const INTERVAL: Duration = Duration::from_millis(100);

struct Watched {
    id: u64,
    pid: i32,
    console: PathBuf,
}

static WATCHED: Mutex<Vec<Watched>> = Mutex::new(Vec::new());
static NEXT_ID: AtomicU64 = AtomicU64::new(1);
/// Set when the watchdog stopped a QEMU because its console passed [`CONSOLE_CAP`].
static CONSOLE_FLOODED: AtomicBool = AtomicBool::new(false);

/// A QEMU under watch until this is dropped. Drop it before QEMU is reaped: the watchdog signals
/// by pid, and a reaped pid may name another process.
#[derive(Debug)]
pub struct Watch {
    id: u64,
}

/// Puts the QEMU `pid`, whose guest console is the file `console`, under watch.
pub fn watch(pid: u32, console: &Path) -> Watch {
    start();
    let id = NEXT_ID.fetch_add(1, Ordering::SeqCst);
    if let Ok(mut w) = WATCHED.lock() {
        w.push(Watched {
            id,
            pid: pid as i32,
            console: console.to_path_buf(),
        });
    }
    Watch { id }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Ok(mut w) = WATCHED.lock() {
            w.retain(|x| x.id != self.id);
        }
    }
}

/// Whether the watchdog stopped a QEMU of this process for writing too much to its console.
pub fn console_flooded() -> bool {
    CONSOLE_FLOODED.load(Ordering::SeqCst)
}

fn over_cap(console: &Path) -> bool {
    std::fs::symlink_metadata(console).is_ok_and(|m| m.len() > CONSOLE_CAP)
}

/// One look at every watched QEMU.
fn patrol() {
    let interrupted = signals::interrupted().is_some();
    let Ok(watched) = WATCHED.lock() else {
        return;
    };
    for w in watched.iter() {
        let flooded = !interrupted && over_cap(&w.console);
        if flooded {
            CONSOLE_FLOODED.store(true, Ordering::SeqCst);
        }
        if interrupted || flooded {
            let _ = kill(Pid::from_raw(w.pid), Signal::SIGKILL);
        }
    }
}

fn start() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let _ = std::thread::Builder::new()
            .name("qemu-watchdog".into())
            .spawn(|| loop {
                patrol();
                std::thread::sleep(INTERVAL);
            });
    });
}
