//! One SSH session per run (a handshake costs 1.6-1.8 s under TCG): the guest's host key pinned
//! from the fingerprint its PID 1 printed on the serial console, login with a per-run key.

use anyhow::{bail, Context, Result};
use sharedos_gate::digest::base64;
use ssh2::{HashType, Session};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// `SHA256:<unpadded base64>`, as `ssh-keygen -lf` prints a key's fingerprint.
pub fn fingerprint(sha256: &[u8]) -> String {
    format!("SHA256:{}", base64(sha256, false))
}

/// A fresh ed25519 key pair for one run; the private half never leaves the run directory.
pub fn keygen_argv(private_key: &Path) -> Vec<String> {
    vec![
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
    ]
}

pub struct Guest {
    session: Session,
    /// The fingerprint the session was pinned to.
    pub host_key: String,
}

pub struct ExecResult {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Guest {
    /// Connects to 127.0.0.1:`port`, refuses any host key but `expected`, logs in as root.
    /// Retries the connection (not the key check) until `timeout`: QEMU's forward accepts
    /// before the guest's sshd is reachable through it.
    pub fn connect(port: u16, expected: &str, key: &Path, timeout: Duration) -> Result<Guest> {
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let started = Instant::now();
        let mut last_err = String::new();
        while started.elapsed() < timeout {
            if let Some(sig) = sharedos_gate::signals::interrupted() {
                bail!("interrupted by {sig} while connecting over SSH");
            }
            match Self::try_connect(addr, expected, key) {
                Ok(g) => return Ok(g),
                Err(e) if e.to_string().contains("host key mismatch") => return Err(e),
                Err(e) => last_err = format!("{e:#}"),
            }
            std::thread::sleep(Duration::from_millis(300));
        }
        bail!(
            "no SSH session to 127.0.0.1:{port} within {} s: {last_err}",
            timeout.as_secs()
        )
    }

    fn try_connect(addr: SocketAddr, expected: &str, key: &Path) -> Result<Guest> {
        let tcp = TcpStream::connect_timeout(&addr, Duration::from_secs(10))
            .with_context(|| format!("TCP connect to {addr}"))?;
        let mut session = Session::new().context("creating an SSH session")?;
        session.set_tcp_stream(tcp);
        session.set_timeout(60_000);
        session.handshake().context("SSH handshake")?;
        let seen = session
            .host_key_hash(HashType::Sha256)
            .map(fingerprint)
            .context("the server sent no host key")?;
        if seen != expected {
            bail!(
                "host key mismatch: the guest's console announced {expected}, the SSH server presented {seen}; refusing to log in"
            );
        }
        session
            .userauth_pubkey_file("root", None, key, None)
            .with_context(|| format!("logging in as root with {}", key.display()))?;
        if !session.authenticated() {
            bail!("the guest did not accept the run's key");
        }
        Ok(Guest {
            session,
            host_key: seen,
        })
    }

    /// Bounds every blocking call; a guest that stops answering fails the run instead of hanging it.
    pub fn set_timeout(&self, t: Duration) {
        self.session
            .set_timeout(t.as_millis().min(u32::MAX as u128) as u32);
    }

    fn start(&self, command: &str) -> Result<ssh2::Channel> {
        let mut ch = self
            .session
            .channel_session()
            .context("opening an SSH channel")?;
        ch.exec(command)
            .with_context(|| format!("starting `{command}` in the guest"))?;
        Ok(ch)
    }

    pub fn exec(&self, command: &str) -> Result<ExecResult> {
        self.exec_streaming(command, &mut |_| {})
    }

    /// Runs `command`, handing each line of its standard error to `on_line` as it arrives.
    pub fn exec_streaming(
        &self,
        command: &str,
        on_line: &mut dyn FnMut(&str),
    ) -> Result<ExecResult> {
        let mut ch = self.start(command)?;
        let mut stderr = String::new();
        {
            let mut r = BufReader::new(ch.stderr());
            let mut line = String::new();
            loop {
                line.clear();
                let n = r
                    .read_line(&mut line)
                    .with_context(|| format!("reading the output of `{command}`"))?;
                if n == 0 {
                    break;
                }
                on_line(line.trim_end());
                stderr.push_str(&line);
            }
        }
        let mut stdout = String::new();
        ch.read_to_string(&mut stdout)
            .with_context(|| format!("reading the output of `{command}`"))?;
        ch.wait_close().context("closing the channel")?;
        let status = ch.exit_status().context("reading the exit status")?;
        Ok(ExecResult {
            status,
            stdout,
            stderr,
        })
    }

    /// Runs `command` and returns its standard output as bytes (an archive, say).
    pub fn exec_bytes(&self, command: &str) -> Result<(i32, Vec<u8>, String)> {
        let mut ch = self.start(command)?;
        let mut out = Vec::new();
        ch.read_to_end(&mut out)
            .with_context(|| format!("reading the output of `{command}`"))?;
        let mut err = String::new();
        ch.stderr()
            .read_to_string(&mut err)
            .with_context(|| format!("reading the errors of `{command}`"))?;
        ch.wait_close().context("closing the channel")?;
        let status = ch.exit_status().context("reading the exit status")?;
        Ok((status, out, err))
    }

    pub fn upload(&self, local: &Path, remote: &str, mode: i32) -> Result<()> {
        let bytes = std::fs::read(local).with_context(|| format!("reading {}", local.display()))?;
        let mut ch = self
            .session
            .scp_send(Path::new(remote), mode, bytes.len() as u64, None)
            .with_context(|| format!("starting the copy to {remote}"))?;
        ch.write_all(&bytes)
            .with_context(|| format!("copying {} to {remote}", local.display()))?;
        ch.send_eof()?;
        ch.wait_eof()?;
        ch.close()?;
        ch.wait_close()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_matches_ssh_keygen_format() {
        // sha256 of the empty string, as OpenSSH would print it.
        let h = sharedos_gate::digest::sha256_hex(b"");
        let bytes: Vec<u8> = (0..32)
            .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
            .collect();
        assert_eq!(
            fingerprint(&bytes),
            "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU"
        );
    }

    #[test]
    fn keygen_makes_only_ed25519_without_passphrase() {
        let a = keygen_argv(Path::new("/run/x/id"));
        assert_eq!(
            a.join(" "),
            "ssh-keygen -q -t ed25519 -N  -C sharedos-rig -f /run/x/id"
        );
        assert_eq!(a[5], "");
    }
}
