//! One SSH session per run (a handshake costs 1.6-1.8 s under TCG): the guest's host key pinned
//! from the fingerprint its PID 1 printed on the serial console, login with a per-run key. Every
//! wait on the guest has a deadline and looks for an interrupt at least every [`POLL`] or so.

use anyhow::{bail, Context, Result};
use sharedos_report::digest::base64;
use sharedos_report::signals;
use ssh2::{ExtendedData, HashType, Session};
use std::cell::Cell;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// The longest one blocking read waits before it looks for an interrupt again. libssh2 counts
/// its timeout in whole seconds, so a look can come up to a second later than this.
pub const POLL: Duration = Duration::from_millis(500);

/// The bound of each blocking call on a session just opened, and of a short command as a whole.
pub const SESSION_TIMEOUT: Duration = Duration::from_secs(60);

/// Fails naming the signal when one arrived while `command` ran.
fn check_interrupt(command: &str) -> Result<()> {
    match signals::interrupted() {
        Some(sig) => bail!(
            "interrupted by {sig} while `{}` ran in the guest",
            shown(command)
        ),
        None => Ok(()),
    }
}

/// A guest command as messages name it: a long one (a whole build's shell line) cut short.
fn shown(command: &str) -> String {
    const MAX: usize = 160;
    match command.char_indices().nth(MAX) {
        Some((at, _)) => format!("{} ...", &command[..at]),
        None => command.to_string(),
    }
}

/// `SHA256:<unpadded base64>`, as `ssh-keygen -lf` prints a key's fingerprint.
pub fn fingerprint(sha256: &[u8]) -> String {
    format!("SHA256:{}", base64(sha256, false))
}

/// A fresh ed25519 key pair for one run; the private half never leaves the run directory.
pub fn keygen_cmd(private_key: &Path) -> crate::cmd::Cmd {
    crate::cmd::Cmd::new(vec![
        "ssh-keygen".into(),
        "-q".into(),
        "-t".into(),
        "ed25519".into(),
        "-N".into(),
        String::new(),
        "-C".into(),
        "sharedos-rig".into(),
        "-f".into(),
        private_key.display().to_string(),
    ])
}

pub struct Guest {
    session: Session,
    /// The fingerprint the session was pinned to.
    pub host_key: String,
    /// The bound of each blocking call, and of a short command as a whole.
    timeout: Cell<Duration>,
}

/// Why one connection attempt failed: worth another, or not.
enum Attempt {
    Again(anyhow::Error),
    Final(anyhow::Error),
}

pub struct ExecResult {
    pub status: i32,
    /// Standard output and error, merged as the guest wrote them.
    pub output: String,
}

impl Guest {
    /// Connects to 127.0.0.1:`port`, refuses any host key but `expected`, logs in as root.
    /// Retries the connection (not the key check) until `timeout`: QEMU's forward accepts
    /// before the guest's sshd is reachable through it.
    pub fn connect(port: u16, expected: &str, key: &Path, timeout: Duration) -> Result<Guest> {
        Self::connect_when(port, expected, key, timeout, &|| Ok(()))
    }

    /// [`Guest::connect`], which logs in only once `ready` says the key may be used: the
    /// handshake goes on meanwhile. An error of `ready` ends the connecting.
    pub fn connect_when(
        port: u16,
        expected: &str,
        key: &Path,
        timeout: Duration,
        ready: &dyn Fn() -> Result<()>,
    ) -> Result<Guest> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        let mut last_err = String::new();
        while started.elapsed() < timeout {
            if let Some(sig) = sharedos_report::signals::interrupted() {
                bail!("interrupted by {sig} while connecting over SSH");
            }
            // A guest that accepts the connection but never speaks (one stopped after a resume)
            // must not hold the handshake past the caller's bound.
            let left = timeout
                .saturating_sub(started.elapsed())
                .max(Duration::from_secs(1));
            match Self::try_connect(addr, expected, key, left, ready) {
                Ok(g) => return Ok(g),
                Err(Attempt::Final(e)) => return Err(e),
                Err(Attempt::Again(e)) => last_err = format!("{e:#}"),
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        bail!(
            "no SSH session to 127.0.0.1:{port} within {} s: {last_err}",
            timeout.as_secs()
        )
    }

    fn try_connect(
        addr: SocketAddr,
        expected: &str,
        key: &Path,
        left: Duration,
        ready: &dyn Fn() -> Result<()>,
    ) -> std::result::Result<Guest, Attempt> {
        let again = Attempt::Again;
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10).min(left))
            .with_context(|| format!("TCP connect to {addr}"))
            .map_err(again)?;
        let mut session = Session::new()
            .context("creating an SSH session")
            .map_err(again)?;
        session.set_tcp_stream(tcp);
        session.set_timeout(millis(left.min(SESSION_TIMEOUT)));
        let timeout = SESSION_TIMEOUT;
        session
            .handshake()
            .context("SSH handshake")
            .map_err(again)?;
        let seen = session
            .host_key_hash(HashType::Sha256)
            .map(fingerprint)
            .context("the server sent no host key")
            .map_err(again)?;
        if seen != expected {
            return Err(Attempt::Final(anyhow::anyhow!(
                "host key mismatch: the guest's console announced {expected}, the SSH server presented {seen}; refusing to log in"
            )));
        }
        ready().map_err(Attempt::Final)?;
        session
            .userauth_pubkey_file("root", None, key, None)
            .with_context(|| format!("logging in as root with {}", key.display()))
            .map_err(again)?;
        if !session.authenticated() {
            return Err(again(anyhow::anyhow!(
                "the guest did not accept the run's key"
            )));
        }
        Ok(Guest {
            session,
            host_key: seen,
            timeout: Cell::new(timeout),
        })
    }

    /// Bounds every blocking call, and a short command ([`Guest::exec`]) as a whole; a guest
    /// that stops answering fails the run instead of hanging it.
    pub fn set_timeout(&self, t: Duration) {
        self.timeout.set(t);
        self.session.set_timeout(millis(t));
    }

    fn start(&self, command: &str, stderr: ExtendedData) -> Result<ssh2::Channel> {
        let mut ch = self
            .session
            .channel_session()
            .context("opening an SSH channel")?;
        ch.handle_extended_data(stderr)
            .context("setting how the channel treats standard error")?;
        ch.exec(command)
            .with_context(|| format!("starting `{}` in the guest", shown(command)))?;
        Ok(ch)
    }

    fn finish(mut ch: ssh2::Channel, command: &str) -> Result<i32> {
        ch.wait_close()
            .with_context(|| format!("closing the channel of `{}`", shown(command)))?;
        ch.exit_status()
            .with_context(|| format!("reading the exit status of `{}`", shown(command)))
    }

    /// Runs a short command; its output (standard error merged in, so no stream can fill while
    /// the other is read) is kept up to `MAX_SHORT_OUTPUT` bytes.
    /// Within the timeout as a whole (see [`Guest::set_timeout`]).
    pub fn exec(&self, command: &str) -> Result<ExecResult> {
        let mut ch = self.start(command, ExtendedData::Merge)?;
        let deadline = Instant::now() + self.timeout.get();
        let mut out = Vec::new();
        // Whatever is past the cap is read and dropped, so the channel can close.
        self.read_each(&mut ch, command, deadline, &mut |bytes| {
            let room = (MAX_SHORT_OUTPUT as usize).saturating_sub(out.len());
            out.extend_from_slice(&bytes[..bytes.len().min(room)]);
            Ok(())
        })?;
        let status = Self::finish(ch, command)?;
        Ok(ExecResult {
            status,
            output: String::from_utf8_lossy(&out).into_owned(),
        })
    }

    /// Reads `command`'s output to its end, handing each chunk to `on_bytes`; fails once
    /// `deadline` passes or a signal arrives.
    fn read_each(
        &self,
        ch: &mut ssh2::Channel,
        command: &str,
        deadline: Instant,
        on_bytes: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<()> {
        let mut buf = vec![0u8; 1 << 16];
        let read = loop {
            match self.read_by(ch, command, deadline, &mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    if let Err(e) = on_bytes(&buf[..n]) {
                        break Err(e);
                    }
                }
                Err(e) => break Err(e),
            }
        };
        // read_by shortens the session's timeout for its own reads.
        self.session.set_timeout(millis(self.timeout.get()));
        read
    }

    /// One read of `command`'s output that gives up at `deadline` or on an interrupt. Each
    /// blocking read waits at most [`POLL`], so the interrupt is seen while the guest is silent.
    fn read_by(
        &self,
        ch: &mut ssh2::Channel,
        command: &str,
        deadline: Instant,
        buf: &mut [u8],
    ) -> Result<usize> {
        let late = || anyhow::anyhow!("`{}` was still running at its deadline", shown(command));
        loop {
            check_interrupt(command)?;
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(late());
            }
            self.session
                .set_timeout(millis(left.min(POLL).max(Duration::from_millis(1))));
            match ch.read(buf) {
                Ok(n) => return Ok(n),
                // Nothing yet: look for the deadline and for an interrupt, and read again.
                Err(e) if is_timeout(&e) => continue,
                Err(e) => {
                    // The watchdog ends QEMU on a signal, which breaks the read: name the signal.
                    check_interrupt(command)?;
                    if Instant::now() >= deadline {
                        return Err(late());
                    }
                    return Err(anyhow::Error::from(e)
                        .context(format!("reading the output of `{}`", shown(command))));
                }
            }
        }
    }

    /// Runs `command` and hands each line of its output (standard error merged in) to
    /// `on_line` as it arrives. A line longer than `max_line` bytes is cut there and marked.
    /// Fails once `deadline` passes, whatever the guest is still printing.
    pub fn exec_lines(
        &self,
        command: &str,
        deadline: Instant,
        max_line: usize,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<i32> {
        let mut ch = self.start(command, ExtendedData::Merge)?;
        let mut lines = LineSplitter::new(max_line);
        self.read_each(&mut ch, command, deadline, &mut |bytes| {
            lines.push(bytes, on_line);
            Ok(())
        })?;
        lines.finish(on_line);
        Self::finish(ch, command)
    }

    /// Starts `command` and returns its standard output to read as a stream (standard error is
    /// dropped: only the stream's bytes matter, and an unread stderr must not stall it). Read it
    /// to its end, then call `Stream::status`.
    pub fn exec_stream(&self, command: &str) -> Result<Stream> {
        Ok(Stream {
            ch: self.start(command, ExtendedData::Ignore)?,
            command: command.to_string(),
        })
    }

    /// Runs `command` and writes its standard output to `local` (created or truncated), at most
    /// `max` bytes: more fails the copy. Standard error is dropped, as by `exec_stream` (redirect
    /// it in `command` to keep it). Fails once `deadline` passes. `on_bytes` hears the running
    /// total now and then. Returns the command's exit status.
    pub fn exec_to_file(
        &self,
        command: &str,
        local: &Path,
        max: u64,
        deadline: Instant,
        on_bytes: &mut dyn FnMut(u64),
    ) -> Result<i32> {
        let mut out = std::io::BufWriter::new(
            std::fs::File::create(local)
                .with_context(|| format!("creating {}", local.display()))?,
        );
        let mut ch = self.start(command, ExtendedData::Ignore)?;
        let mut total = 0u64;
        let mut told = 0u64;
        self.read_each(&mut ch, command, deadline, &mut |bytes| {
            total += bytes.len() as u64;
            if total > max {
                bail!(
                    "`{}` wrote more than {max} bytes; stopped reading it",
                    shown(command)
                );
            }
            out.write_all(bytes)
                .with_context(|| format!("writing {}", local.display()))?;
            if total - told >= 16 << 20 {
                told = total;
                on_bytes(total);
            }
            Ok(())
        })?;
        out.flush()
            .with_context(|| format!("writing {}", local.display()))?;
        on_bytes(total);
        Self::finish(ch, command)
    }

    /// Writes `local` to `remote` with `mode` through `cat` on the guest, which every Debian
    /// has (no scp or sftp-server needed there). It lands under a temporary name and is renamed,
    /// so a broken copy never sits at `remote`.
    pub fn upload(&self, local: &Path, remote: &str, mode: u32) -> Result<()> {
        let bytes = std::fs::read(local).with_context(|| format!("reading {}", local.display()))?;
        let command = upload_command(remote, mode);
        let mut ch = self.start(&command, ExtendedData::Merge)?;
        for chunk in bytes.chunks(1 << 16) {
            check_interrupt(&command)?;
            ch.write_all(chunk)
                .with_context(|| format!("copying {} to {remote}", local.display()))?;
        }
        ch.send_eof().context("ending the copy")?;
        let mut said = Vec::new();
        let deadline = Instant::now() + self.timeout.get();
        self.read_each(&mut ch, &command, deadline, &mut |b| {
            let room = (MAX_SHORT_OUTPUT as usize).saturating_sub(said.len());
            said.extend_from_slice(&b[..b.len().min(room)]);
            Ok(())
        })?;
        let status = Self::finish(ch, &command)?;
        if status != 0 {
            bail!(
                "`{}` exited {status}: {}",
                shown(&command),
                String::from_utf8_lossy(&said).trim()
            );
        }
        Ok(())
    }
}

/// What a short guest command may print that the rig keeps.
pub const MAX_SHORT_OUTPUT: u64 = 1 << 20;

/// libssh2's own timeout, as its channel reads report it.
fn is_timeout(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::TimedOut
}

/// A duration as libssh2's timeout, which counts milliseconds in a u32.
fn millis(t: Duration) -> u32 {
    t.as_millis().min(u32::MAX as u128) as u32
}

/// The guest side of `Guest::upload`.
pub fn upload_command(remote: &str, mode: u32) -> String {
    format!("cat > {remote}.part && chmod {mode:o} {remote}.part && mv -f {remote}.part {remote}")
}

/// A guest command's standard output, read as it arrives.
pub struct Stream {
    ch: ssh2::Channel,
    command: String,
}

impl Read for Stream {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if let Err(e) = check_interrupt(&self.command) {
            return Err(std::io::Error::other(e.to_string()));
        }
        self.ch.read(buf)
    }
}

impl Stream {
    /// The command's exit status, once its output was read to the end.
    pub fn status(self) -> Result<i32> {
        Guest::finish(self.ch, &self.command)
    }
}

/// Cuts a byte stream into lines, none longer than `max` bytes: a longer one is handed on cut,
/// marked, and the rest of it skipped.
pub struct LineSplitter {
    max: usize,
    pending: Vec<u8>,
    skipping: bool,
}

impl LineSplitter {
    pub fn new(max: usize) -> LineSplitter {
        LineSplitter {
            max,
            pending: Vec::new(),
            skipping: false,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8], on_line: &mut dyn FnMut(&str)) {
        while !bytes.is_empty() {
            let nl = bytes.iter().position(|b| *b == b'\n');
            let (chunk, rest) = match nl {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if !self.skipping {
                let room = self.max - self.pending.len();
                self.pending
                    .extend_from_slice(&chunk[..chunk.len().min(room)]);
                if chunk.len() > room {
                    let cut = format!(
                        "{} [line cut at {} bytes]",
                        String::from_utf8_lossy(&self.pending).trim_end(),
                        self.max
                    );
                    on_line(&cut);
                    self.pending.clear();
                    self.skipping = true;
                }
            }
            if nl.is_some() {
                if !self.skipping {
                    on_line(String::from_utf8_lossy(&self.pending).trim_end());
                }
                self.pending.clear();
                self.skipping = false;
            }
            bytes = rest;
        }
    }

    /// Hands on a last line that had no newline.
    pub fn finish(&mut self, on_line: &mut dyn FnMut(&str)) {
        if !self.skipping && !self.pending.is_empty() {
            on_line(String::from_utf8_lossy(&self.pending).trim_end());
        }
        self.pending.clear();
        self.skipping = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_matches_ssh_keygen_format() {
        // sha256 of the empty string, as OpenSSH would print it.
        let h = sharedos_report::digest::sha256_hex(b"");
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        assert_eq!(
            fingerprint(&bytes),
            "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"
        );
    }

    fn split(max: usize, chunks: &[&[u8]]) -> Vec<String> {
        let mut out = Vec::new();
        let mut s = LineSplitter::new(max);
        for c in chunks {
            s.push(c, &mut |l| out.push(l.to_string()));
        }
        s.finish(&mut |l| out.push(l.to_string()));
        out
    }

    #[test]
    fn lines_are_split_across_chunks_and_cut_at_the_cap() {
        assert_eq!(
            split(10, &[b"gate 1", b"/10\nga", b"te 2\n"]),
            ["gate 1/10", "gate 2"]
        );
        assert_eq!(
            split(4, &[b"abcdefgh", b"ij\nok\n"]),
            ["abcd [line cut at 4 bytes]", "ok"]
        );
        assert_eq!(split(4, &[b"last"]), ["last"]);
        // A never-ending line costs no memory past the cap.
        let mut s = LineSplitter::new(8);
        let mut n = 0;
        for _ in 0..10_000 {
            s.push(&[b'x'; 1000], &mut |_| n += 1);
            assert!(s.pending.len() <= 8);
        }
        assert_eq!(n, 1);
    }

    #[test]
    fn messages_cut_a_long_command_short() {
        assert_eq!(shown("uname -r"), "uname -r");
        let long = "x".repeat(10_000);
        assert_eq!(shown(&long).len(), 164);
        assert!(shown(&"é".repeat(200)).ends_with("é ..."));
    }

    #[test]
    fn upload_lands_under_a_temporary_name_first() {
        assert_eq!(
            upload_command("/usr/local/bin/sharedos-gate", 0o755),
            "cat > /usr/local/bin/sharedos-gate.part && chmod 755 /usr/local/bin/sharedos-gate.part && mv -f /usr/local/bin/sharedos-gate.part /usr/local/bin/sharedos-gate"
        );
    }

    #[test]
    fn keygen_makes_only_ed25519_without_passphrase() {
        let a = keygen_cmd(Path::new("/run/x/id")).argv;
        assert_eq!(
            a.join(" "),
            "ssh-keygen -q -t ed25519 -N  -C sharedos-rig -f /run/x/id"
        );
        assert_eq!(a[5], "");
    }
}
