//! Ctrl-C and SIGTERM turn into a flag that every wait loop checks, so an interrupted run still
//! reaches the cleanup gate and writes its report.

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::sync::atomic::{AtomicI32, Ordering};

static INTERRUPTED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: i32) {
    INTERRUPTED.store(sig, Ordering::SeqCst);
}

pub fn install() -> nix::Result<()> {
    let act = SigAction::new(
        SigHandler::Handler(on_signal),
        SaFlags::empty(),
        SigSet::empty(),
    );
    for s in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
        unsafe { sigaction(s, &act)? };
    }
    Ok(())
}

/// The signal that interrupted the run, if any.
pub fn interrupted() -> Option<Signal> {
    match INTERRUPTED.load(Ordering::SeqCst) {
        0 => None,
        n => Signal::try_from(n).ok(),
    }
}
