//! A QMP client, only as much of it as saving a snapshot needs: the greeting, the capabilities
//! handshake, and commands answered one at a time. QEMU is the rig's own process, but its
//! answers are still read line by line with a bound on each line and on each wait.

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// No QMP answer the rig asks for comes near this.
const MAX_LINE: u64 = 1 << 20;

/// Connects to a unix socket that QEMU creates as it starts, retrying until it listens or
/// `timeout` has passed. A QEMU that is still starting refuses or lacks the socket; both are
/// retried, since which one it is depends only on how far its start has got.
pub fn connect_when_listening(socket: &Path, timeout: Duration, what: &str) -> Result<UnixStream> {
    let since = Instant::now();
    loop {
        match UnixStream::connect(socket) {
            Ok(s) => return Ok(s),
            Err(e) if since.elapsed() >= timeout => {
                return Err(e).with_context(|| {
                    format!(
                        "QEMU did not listen on {what} {} within {} s",
                        socket.display(),
                        timeout.as_secs()
                    )
                })
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

pub struct Qmp {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Qmp {
    /// Connects to QEMU's QMP socket, retrying until `timeout` (QEMU makes the socket as it
    /// starts), and leaves capabilities negotiation done.
    pub fn connect(socket: &Path, timeout: Duration) -> Result<Qmp> {
        let stream = connect_when_listening(socket, timeout, "QEMU's QMP socket")?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let writer = stream.try_clone().context("cloning the QMP socket")?;
        let mut q = Qmp {
            reader: BufReader::new(stream),
            writer,
        };
        let greeting = q.read_message()?;
        if greeting.get("QMP").is_none() {
            bail!("QEMU's QMP socket did not greet: {greeting}");
        }
        q.execute("qmp_capabilities", None)?;
        Ok(q)
    }

    /// Turns one migration capability on, for the migration this QEMU sends or takes next.
    pub fn migration_capability_on(&mut self, capability: &str) -> Result<()> {
        self.execute(
            "migrate-set-capabilities",
            Some(json!({ "capabilities": [{ "capability": capability, "state": true }] })),
        )
        .map(|_| ())
    }

    /// Runs one command and returns its `return` value; QEMU's `error` becomes an error.
    /// Events that arrive meanwhile are skipped.
    pub fn execute(&mut self, command: &str, arguments: Option<Value>) -> Result<Value> {
        let msg = match arguments {
            Some(a) => json!({ "execute": command, "arguments": a }),
            None => json!({ "execute": command }),
        };
        let mut line = msg.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .with_context(|| format!("sending {command} to QEMU"))?;
        loop {
            let m = self
                .read_message()
                .with_context(|| format!("waiting for QEMU's answer to {command}"))?;
            if m.get("event").is_some() {
                continue;
            }
            if let Some(r) = m.get("return") {
                return Ok(r.clone());
            }
            if let Some(e) = m.get("error") {
                bail!("QEMU refused {command}: {}", error_text(e));
            }
            bail!("QEMU answered {command} with {m}");
        }
    }

    fn read_message(&mut self) -> Result<Value> {
        let mut line = String::new();
        let n = (&mut self.reader)
            .take(MAX_LINE)
            .read_line(&mut line)
            .context("reading from QEMU's QMP socket")?;
        if n == 0 {
            bail!("QEMU closed its QMP socket");
        }
        if !line.ends_with('\n') {
            bail!("a QMP message longer than {MAX_LINE} bytes");
        }
        serde_json::from_str(&line).context("QEMU sent a QMP message that is not JSON")
    }
}

fn error_text(e: &Value) -> String {
    match (e.get("class"), e.get("desc")) {
        (Some(c), Some(d)) => format!(
            "{} ({})",
            d.as_str().unwrap_or(""),
            c.as_str().unwrap_or("")
        ),
        _ => e.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_socket_nobody_listens_on_is_an_error_after_the_timeout() {
        let sock = std::env::temp_dir().join(format!("qmp-none-{}.sock", std::process::id()));
        let e = connect_when_listening(&sock, Duration::from_millis(100), "the test socket")
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("did not listen on the test socket"),
            "{e:#}"
        );
    }

    #[test]
    fn a_socket_that_appears_late_is_connected() {
        let dir = std::env::temp_dir().join(format!("qmp-late-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("late.sock");
        let bind_at = sock.clone();
        let server = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            let l = std::os::unix::net::UnixListener::bind(&bind_at).unwrap();
            l.accept().map(|_| ()).unwrap();
        });
        connect_when_listening(&sock, Duration::from_secs(10), "the test socket").unwrap();
        server.join().unwrap();
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_error_reads_as_qemus_words() {
        let e = json!({"class": "GenericError", "desc": "no migration in progress"});
        assert_eq!(error_text(&e), "no migration in progress (GenericError)");
        assert_eq!(error_text(&json!("odd")), "\"odd\"");
    }

    #[test]
    fn the_client_speaks_the_handshake_and_skips_events() {
        let dir = std::env::temp_dir().join(format!("qmp-test-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("qmp.sock");
        let listener = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let server = std::thread::spawn(move || {
            let (s, _) = listener.accept().unwrap();
            let mut r = BufReader::new(s.try_clone().unwrap());
            let mut w = s;
            w.write_all(b"{\"QMP\": {\"version\": {}}}\n").unwrap();
            let mut got = Vec::new();
            for answer in [
                "{\"return\": {}}\n",
                "{\"event\": \"STOP\"}\n{\"return\": {\"status\": \"completed\"}}\n",
                "{\"error\": {\"class\": \"GenericError\", \"desc\": \"nope\"}}\n",
            ] {
                let mut line = String::new();
                r.read_line(&mut line).unwrap();
                got.push(line);
                w.write_all(answer.as_bytes()).unwrap();
            }
            got
        });
        let mut q = Qmp::connect(&sock, Duration::from_secs(5)).unwrap();
        let r = q.execute("query-migrate", None).unwrap();
        assert_eq!(r["status"], "completed");
        let e = q
            .execute("migrate", Some(json!({"uri": "unix:/x"})))
            .unwrap_err();
        assert!(
            format!("{e:#}").contains("QEMU refused migrate: nope"),
            "{e:#}"
        );
        let got = server.join().unwrap();
        assert!(got[0].contains("qmp_capabilities"));
        assert!(got[2].contains("\"uri\":\"unix:/x\""));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
