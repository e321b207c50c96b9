//! The guest's state in and out of QEMU: saved over QMP to a socket the rig listens on
//! (hashed and bounded as it arrives), and fed back into a resuming QEMU.

use super::STATE;
use crate::vm::qmp::Qmp;
use anyhow::{bail, Context, Result};
use sharedos_report::digest;
use std::io::{Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Saves the running guest behind `qmp` into `into/state`: QEMU migrates it to a socket the rig
/// listens on, and stops the guest itself for the last pass, so the disk and the memory are of
/// one moment. The guest stays stopped; the caller ends that QEMU. Returns the state's sha256
/// and size.
/// `max` bounds the state: QEMU's stream is the guest's memory and a little of each device, so
/// the caller passes the guest's memory with room for the rest.
pub fn save(
    qmp: &mut Qmp,
    socket: &Path,
    into: &Path,
    max: u64,
    timeout: Duration,
) -> Result<(String, u64)> {
    let _ = std::fs::remove_file(socket);
    let listener = UnixListener::bind(socket)
        .with_context(|| format!("listening on {} for the guest's state", socket.display()))?;
    let out = into.join(STATE);
    let receiver = std::thread::spawn(move || receive(listener, &out, max, timeout));
    let uri = format!("unix:{}", socket.display());
    let asked = qmp.execute("migrate", Some(serde_json::json!({ "uri": uri })));
    if let Err(e) = asked {
        // Nothing will connect: wake the receiver so its thread ends.
        let _ = UnixStream::connect(socket);
        let _ = receiver.join();
        return Err(e);
    }
    let since = Instant::now();
    loop {
        let r = qmp.execute("query-migrate", None)?;
        match r.get("status").and_then(|s| s.as_str()) {
            Some("completed") => break,
            Some("failed") | Some("cancelled") => bail!(
                "QEMU's migration to the snapshot failed: {}",
                r.get("error-desc")
                    .and_then(|s| s.as_str())
                    .unwrap_or("no reason given")
            ),
            _ if since.elapsed() >= timeout => {
                let _ = qmp.execute("migrate_cancel", None);
                bail!(
                    "the guest's state was not saved within {} s",
                    timeout.as_secs()
                )
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
        if let Some(sig) = sharedos_report::signals::interrupted() {
            let _ = qmp.execute("migrate_cancel", None);
            bail!("interrupted by {sig} while saving the snapshot");
        }
    }
    receiver
        .join()
        .map_err(|_| anyhow::anyhow!("the thread receiving the guest's state panicked"))?
}

fn receive(
    listener: UnixListener,
    out: &Path,
    max: u64,
    timeout: Duration,
) -> Result<(String, u64)> {
    let (mut conn, _) = listener.accept().context("accepting QEMU's migration")?;
    conn.set_read_timeout(Some(timeout))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(out)
        .with_context(|| format!("creating {}", out.display()))?;
    let (sha, n) = copy_hashing(&mut (&mut conn).take(max.saturating_add(1)), &mut file)
        .context("receiving the guest's state from QEMU")?;
    if n > max {
        bail!("QEMU sent more than {max} bytes of state; the snapshot was not kept");
    }
    Ok((sha, n))
}

/// A saved state that did not hash as its record says: the snapshot is damaged, and the guest it
/// was fed to never ran. The text is the check's, `damaged: ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damaged(pub String);

impl std::fmt::Display for Damaged {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Damaged {}

/// Streams the saved state into the resuming QEMU's socket, which QEMU creates as it starts,
/// hashing it on the way: the state is checked here rather than before QEMU starts, so that the
/// hashing overlaps QEMU's start and its load (0.1 s for 120 MB). QEMU was started stopped
/// (`-S`), and its guest is let go only after this returned: a state that does not hash as
/// `want` says is a [`Damaged`] error, and that guest never ran. Gives up when `timeout`
/// passes before the socket accepts.
pub fn feed(state: &Path, socket: &Path, want: &str, timeout: Duration) -> Result<u64> {
    let mut conn = crate::vm::qmp::connect_when_listening(socket, timeout, "the state socket")?;
    conn.set_write_timeout(Some(timeout))?;
    let mut file = {
        use std::os::unix::fs::OpenOptionsExt;
        std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(nix::fcntl::OFlag::O_NOFOLLOW.bits())
            .open(state)
            .with_context(|| format!("opening {} (no link followed)", state.display()))?
    };
    let (got, n) = copy_hashing(&mut file, &mut conn).context("sending the saved state to QEMU")?;
    state_matches(&got, want)?;
    Ok(n)
}

/// The fed state's sha256 against its record's.
fn state_matches(got: &str, want: &str) -> std::result::Result<(), Damaged> {
    if got == want {
        return Ok(());
    }
    Err(Damaged(format!(
        "damaged: {STATE} has sha256 {got}, its record says {want}"
    )))
}

/// Copies `from` into `to` whole and returns the bytes' sha256 and count. The hashing runs on a
/// thread of its own, a few chunks behind the copy, so that it costs the copy no time: a
/// resume's QEMU takes its state in at the pace the bytes come (the layer's 295 MB state took
/// 0.99 s to load hashed in line, against 0.76 s unhashed).
fn copy_hashing(from: &mut dyn Read, to: &mut dyn Write) -> Result<(String, u64)> {
    use sha2::{Digest, Sha256};
    const CHUNK: usize = 1 << 20;
    let (tx, rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(8);
    std::thread::scope(|s| {
        let hasher = s.spawn(move || {
            let mut h = Sha256::new();
            for chunk in rx {
                h.update(&chunk);
            }
            digest::hex(&h.finalize())
        });
        let copied = (|| -> Result<u64> {
            let mut n: u64 = 0;
            loop {
                // Whole chunks, so that a socket's short reads do not each cost a chunk.
                let mut buf = vec![0u8; CHUNK];
                let mut k = 0;
                while k < CHUNK {
                    match from.read(&mut buf[k..]) {
                        Ok(0) => break,
                        Ok(got) => k += got,
                        Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                if k == 0 {
                    break;
                }
                buf.truncate(k);
                to.write_all(&buf)?;
                n = n.saturating_add(k as u64);
                tx.send(buf)
                    .map_err(|_| anyhow::anyhow!("the hashing thread ended early"))?;
            }
            to.flush()?;
            Ok(n)
        })();
        // The hasher ends once the sender is gone, whatever the copy's outcome.
        drop(tx);
        let sha = hasher
            .join()
            .map_err(|_| anyhow::anyhow!("the hashing thread panicked"))?;
        Ok((sha, copied?))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::snapshot::tests::scratch;

    #[test]
    fn state_streams_through_a_socket_whole() {
        let root = scratch("feed");
        std::fs::write(root.join(STATE), vec![7u8; 3 << 20]).unwrap();
        let sock = root.join("in.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let out = root.join("got");
        let t =
            std::thread::spawn(move || receive(listener, &out, 3 << 20, Duration::from_secs(5)));
        let want = digest::sha256_file(&root.join(STATE)).unwrap().0;
        let n = feed(&root.join(STATE), &sock, &want, Duration::from_secs(5)).unwrap();
        let (sha, got) = t.join().unwrap().unwrap();
        assert_eq!((n, got), (3 << 20, 3 << 20));
        assert_eq!(sha, want);
        assert!(feed(
            &root.join(STATE),
            &root.join("nobody.sock"),
            &want,
            Duration::from_millis(100)
        )
        .is_err());
        // One byte past the bound is refused.
        let sock2 = root.join("in2.sock");
        let listener = UnixListener::bind(&sock2).unwrap();
        let out = root.join("got2");
        let t = std::thread::spawn(move || {
            receive(listener, &out, (3 << 20) - 1, Duration::from_secs(5))
        });
        let _ = feed(&root.join(STATE), &sock2, &want, Duration::from_secs(5));
        assert!(format!("{:#}", t.join().unwrap().unwrap_err()).contains("more than"));
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// A state that does not hash as its record says is sent whole (QEMU, started stopped,
    /// never runs it) and then refused as damaged, in the words a snapshot's check uses.
    #[test]
    fn a_fed_state_that_hashes_otherwise_is_damaged() {
        let root = scratch("feed-damaged");
        std::fs::write(root.join(STATE), b"machine statf").unwrap();
        let sock = root.join("in.sock");
        let listener = UnixListener::bind(&sock).unwrap();
        let out = root.join("got");
        let t =
            std::thread::spawn(move || receive(listener, &out, 1 << 20, Duration::from_secs(5)));
        let want = digest::hex(&<sha2::Sha256 as sha2::Digest>::digest(b"machine state"));
        let e = feed(&root.join(STATE), &sock, &want, Duration::from_secs(5)).unwrap_err();
        let d = e.downcast_ref::<Damaged>().expect("a Damaged error");
        assert!(d.0.starts_with("damaged: state has sha256 "), "{d}");
        assert!(d.0.ends_with(&format!("its record says {want}")), "{d}");
        assert_eq!(t.join().unwrap().unwrap().1, 13);
        assert_eq!(state_matches(&want, &want), Ok(()));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
