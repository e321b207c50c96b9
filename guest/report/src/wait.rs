//! Waiting for conditions with a deadline, never for a fixed time.

use crate::signals;
use std::fmt;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub enum WaitError {
    TimedOut { what: String, after: Duration },
    Interrupted { what: String, signal: String },
}

impl fmt::Display for WaitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WaitError::TimedOut { what, after } => {
                write!(
                    f,
                    "timed out after {:.1} s waiting for {what}",
                    after.as_secs_f64()
                )
            }
            WaitError::Interrupted { what, signal } => {
                write!(f, "interrupted by {signal} while waiting for {what}")
            }
        }
    }
}

impl std::error::Error for WaitError {}

const POLL: Duration = Duration::from_millis(50);

/// Polls `probe` until it yields a value, the timeout passes, or a signal interrupts the run.
pub fn until<T>(
    what: &str,
    timeout: Duration,
    probe: impl FnMut() -> Option<T>,
) -> Result<T, WaitError> {
    poll(what, timeout, true, probe)
}

/// As `until`, but an interruption of the run does not end the wait: for cleanup, which runs
/// because of the signal and must still wait for what it ended to be gone.
pub fn until_through_signals<T>(
    what: &str,
    timeout: Duration,
    probe: impl FnMut() -> Option<T>,
) -> Result<T, WaitError> {
    poll(what, timeout, false, probe)
}

fn poll<T>(
    what: &str,
    timeout: Duration,
    interruptible: bool,
    mut probe: impl FnMut() -> Option<T>,
) -> Result<T, WaitError> {
    let start = Instant::now();
    loop {
        if let Some(v) = probe() {
            return Ok(v);
        }
        if let Some(sig) = signals::interrupted().filter(|_| interruptible) {
            return Err(WaitError::Interrupted {
                what: what.to_string(),
                signal: sig.to_string(),
            });
        }
        if start.elapsed() >= timeout {
            return Err(WaitError::TimedOut {
                what: what.to_string(),
                after: start.elapsed(),
            });
        }
        std::thread::sleep(POLL);
    }
}

/// Runs `f` on its own thread and gives up after `timeout`. Used for X requests, which block
/// without a bound when the server is frozen; the abandoned thread ends with the process.
pub fn bounded<T: Send + 'static>(
    what: &str,
    timeout: Duration,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name(what.chars().take(15).collect())
        .spawn(move || {
            let _ = tx.send(f());
        })?;
    match rx.recv_timeout(timeout) {
        Ok(r) => r,
        Err(_) => anyhow::bail!("{what}: no answer within {:.1} s", timeout.as_secs_f64()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn until_returns_value_once_condition_holds() {
        let mut n = 0;
        let v = until("n to reach 3", Duration::from_secs(5), || {
            n += 1;
            (n >= 3).then_some(n)
        })
        .unwrap();
        assert_eq!(v, 3);
    }

    #[test]
    fn until_times_out_with_what_it_waited_for() {
        let e = until::<()>("never", Duration::from_millis(120), || None).unwrap_err();
        assert!(e.to_string().contains("waiting for never"), "{e}");
    }

    #[test]
    fn bounded_gives_up() {
        let e = bounded("sleeper", Duration::from_millis(50), || {
            std::thread::sleep(Duration::from_secs(2));
            Ok(())
        })
        .unwrap_err();
        assert!(e.to_string().contains("sleeper"));
    }
}
