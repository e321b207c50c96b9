//! The stateful probe app: a random token and a counter that advances on its own, held in memory
//! only, answered one request per connection on a unix socket under the tree's private /tmp.
//! One request per connection means no connection is open when CRIU freezes the tree.

use anyhow::{bail, Context, Result};
use sharedos_report::compare::MUTATE_JUMP;
use sharedos_report::model::app::{AppState, RootFile};
use sharedos_report::random::random_hex;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::AsFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Where the app listens, as the tree sees it.
pub const SOCKET: &str = "/tmp/sharedos-app.sock";
const TICK: Duration = Duration::from_millis(100);

/// Where `file-write NAME` writes, as the tree sees it: on the root, outside every private mount.
pub fn root_file_path(name: &str) -> Option<String> {
    let ok = !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    ok.then(|| format!("/var/tmp/sharedos-file-{name}"))
}

fn root_file(name: &str, write: Option<&str>) -> Option<RootFile> {
    let path = root_file_path(name)?;
    let mut error = None;
    if let Some(text) = write {
        if let Err(e) = std::fs::write(&path, text) {
            error = Some(format!("writing {path}: {e}"));
        }
    }
    let content = match std::fs::read_to_string(&path) {
        Ok(s) => Some(s),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => {
            error.get_or_insert(format!("reading {path}: {e}"));
            None
        }
    };
    Some(RootFile {
        path,
        content,
        error,
    })
}

/// The app's main loop. Single-threaded on purpose. The counter ticks on the monotonic clock,
/// which CRIU restores in a time namespace that continues from the dump, so a restored counter
/// continues from the frozen value; queries, however frequent, do not hold it back.
pub fn serve(socket: &Path) -> Result<()> {
    let _ = std::fs::remove_file(socket);
    let listener =
        UnixListener::bind(socket).with_context(|| format!("binding {}", socket.display()))?;
    let mut token = random_hex(16)?;
    let mut counter: u64 = 0;
    let pid = std::process::id() as i32;
    let mut next_tick = Instant::now() + TICK;
    loop {
        let now = Instant::now();
        while now >= next_tick {
            counter += 1;
            next_tick += TICK;
        }
        let wait_ms = (next_tick - now).as_millis().min(u16::MAX as u128) as u16 + 1;
        let mut fds = [nix::poll::PollFd::new(
            listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(wait_ms)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => return Err(e).context("poll on the app socket"),
        }
        let Ok((stream, _)) = listener.accept() else {
            continue;
        };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
        let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
        let mut line = String::new();
        if BufReader::new(&stream).read_line(&mut line).is_err() {
            continue;
        }
        let request = line.trim();
        let mut file = None;
        match request.split_once(' ') {
            Some(("file-write", name)) => match root_file(name, Some(&token)) {
                Some(f) => file = Some(f),
                None => continue,
            },
            Some(("file-read", name)) => match root_file(name, None) {
                Some(f) => file = Some(f),
                None => continue,
            },
            _ => {}
        }
        match request {
            _ if file.is_some() => {}
            "get" => {}
            // Isolation changes the state of one copy: a new token and a jump of the counter
            // that no amount of ticking in the other copy could produce.
            "mutate" => {
                token = random_hex(16)?;
                counter += MUTATE_JUMP;
            }
            _ => continue,
        }
        let reply = AppState {
            token: token.clone(),
            counter,
            pid,
            file,
        };
        if let Ok(mut text) = serde_json::to_string(&reply) {
            text.push('\n');
            let _ = (&stream).write_all(text.as_bytes());
        }
    }
}

/// Asks the app over `socket` (a path seen from outside the tree, through /proc/PID/root).
pub fn query(socket: &Path, command: &str, timeout: Duration) -> Result<AppState> {
    let stream = UnixStream::connect(socket)
        .with_context(|| format!("connecting to the app at {}", socket.display()))?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    (&stream)
        .write_all(format!("{command}\n").as_bytes())
        .context("sending the request")?;
    let mut line = String::new();
    BufReader::new(&stream)
        .read_line(&mut line)
        .context("reading the app's answer")?;
    if line.trim().is_empty() {
        bail!("the app closed the connection without answering `{command}`");
    }
    serde_json::from_str(line.trim()).with_context(|| format!("parsing the app's answer {line:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sharedos_report::model::app::is_token;

    #[test]
    fn serves_get_and_mutate() {
        let dir = std::env::temp_dir().join(format!("app-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("app.sock");
        let s2 = sock.clone();
        std::thread::spawn(move || serve(&s2));
        let a = sharedos_report::wait::until("app", Duration::from_secs(5), || {
            query(&sock, "get", Duration::from_secs(2)).ok()
        })
        .unwrap();
        assert!(is_token(&a.token));
        let b = sharedos_report::wait::until("counter to advance", Duration::from_secs(5), || {
            query(&sock, "get", Duration::from_secs(2))
                .ok()
                .filter(|b| b.counter > a.counter)
        })
        .unwrap();
        assert_eq!(a.token, b.token);
        let m = query(&sock, "mutate", Duration::from_secs(2)).unwrap();
        assert_ne!(m.token, a.token);
        assert!(m.counter >= b.counter + 1_000_000);
        assert_eq!(m.file, None);
        // Only the shape of the name is tested here: the path lies on the machine's /var/tmp.
        assert!(query(&sock, "file-read ../etc", Duration::from_secs(2)).is_err());
        assert_eq!(
            root_file_path("copy-a").as_deref(),
            Some("/var/tmp/sharedos-file-copy-a")
        );
        assert_eq!(root_file_path("A"), None);
    }
}
