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

/// `e` as the run reports it: named after the signal when one arrived. The cleanup a signal
/// starts (QEMU ended under an SSH call, say) breaks whatever was waiting, and that break is
/// otherwise all the message would say.
pub fn naming_interrupt(e: anyhow::Error) -> anyhow::Error {
    named_after(e, interrupted())
}

fn named_after(e: anyhow::Error, sig: Option<Signal>) -> anyhow::Error {
    match sig {
        Some(sig) if !e.chain().any(|c| c.to_string().contains("interrupted by")) => {
            e.context(format!("interrupted by {sig}"))
        }
        _ => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_after_a_signal_is_named_after_it_once() {
        let broken = || anyhow::anyhow!("[Session(-43)] Failed waiting for channel success");
        let e = named_after(broken(), Some(Signal::SIGINT));
        assert_eq!(e.to_string(), "interrupted by SIGINT");
        assert_eq!(e.root_cause().to_string(), broken().to_string());
        // Already named: not named twice.
        let e = named_after(
            anyhow::anyhow!("interrupted by SIGINT while `x` ran in the guest"),
            Some(Signal::SIGINT),
        );
        assert_eq!(e.chain().count(), 1);
        // No signal: the error as it was.
        assert_eq!(named_after(broken(), None).chain().count(), 1);
    }
}
