//! Fetch: the guest's report directory arrives as one tar stream and is unpacked by a Rust reader
//! into `guest/` inside the report. The guest is output, not a trusted party, so the reader takes
//! only regular files and directories under plain relative names, creates every file fresh with
//! the rig's own mode, and stops at a size cap or a deadline. Everything else (links, FIFOs,
//! devices, odd names, a name sent twice) is skipped and named, for the report to list as a rig
//! error.

use super::{Bounds, Observed, GUEST_REPORT_DIR};
use crate::judge::{artifacts, reader::ReportDir, verdict};
use crate::vm::ssh::Guest;
use anyhow::{bail, Context, Result};
use sharedos_report::report::{Report, REPORT_FILE};
use sharedos_report::text::shell_words;
use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

pub use sharedos_report::report::GUEST_DIR;

/// How much the guest may send. A real report is a few tens of MiB (CRIU images are listed, not
/// fetched).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub per_file: u64,
    pub total: u64,
    pub entries: usize,
    pub deadline: Instant,
}

impl Limits {
    pub fn new(within: Duration) -> Limits {
        Limits {
            per_file: 256 << 20,
            total: 1 << 30,
            entries: 10_000,
            deadline: Instant::now() + within,
        }
    }
}

/// The guest side: its report directory as a tar stream on stdout. tar is in every Debian.
pub fn fetch_argv() -> Vec<String> {
    vec![
        "tar".into(),
        "-C".into(),
        GUEST_REPORT_DIR.into(),
        "-cf".into(),
        "-".into(),
        ".".into(),
    ]
}

/// Brings the guest's report into `guest/`, checks every artifact it lists against its sha256,
/// and returns it. What the reader refused is kept in `obs` and fails the run as a rig error.
pub fn fetch(guest: &Guest, b: Bounds, obs: &mut Observed) -> Result<Report> {
    let t = Instant::now();
    let limits = Limits::new(b.fetch);
    guest.set_timeout(b.fetch);
    let command = shell_words(&fetch_argv());
    let mut stream = guest.exec_stream(&command).context("fetching the report")?;
    let dest = obs.report_dir.join(GUEST_DIR);
    let unpacked = unpack(&mut stream, &dest, &limits).context("fetching the report")?;
    // GNU tar pads its stream past the end-of-archive blocks the reader stops at.
    std::io::copy(&mut (&mut stream).take(1 << 20), &mut std::io::sink())
        .context("reading the end of the report stream")?;
    let status = stream.status()?;
    obs.refused = unpacked.refused;
    if status != 0 {
        bail!("`{command}` in the guest exited {status}");
    }
    let files = ReportDir::open(&dest).map_err(anyhow::Error::msg)?;
    let bytes = files
        .bytes(REPORT_FILE, verdict::MAX_REPORT_BYTES)
        .map_err(anyhow::Error::msg)
        .context("the guest sent no readable report.json")?;
    let report = verdict::parse_report(bytes.bytes().unwrap_or_default())
        .context("reading the guest's report.json")?;
    obs.guest_report = Some(report.clone());
    let bad = artifacts::check(&files, &report.artifacts, true);
    if !bad.is_empty() {
        let list: Vec<String> = bad
            .iter()
            .map(|m| format!("{}: {}", m.path, m.problem))
            .collect();
        bail!(
            "fetched artifacts do not match the guest's report: {}",
            list.join("; ")
        );
    }
    if !obs.refused.is_empty() {
        bail!(
            "the guest's report held what the rig refuses to unpack: {}",
            obs.refused.join("; ")
        );
    }
    obs.phase("fetch", t);
    Ok(report)
}

/// What was unpacked, and what was refused (each with the reason), in stream order.
#[derive(Debug, Default, PartialEq)]
pub struct Unpacked {
    pub files: Vec<String>,
    pub refused: Vec<String>,
}

/// Counts the raw stream against the total cap and checks the deadline on every read; the
/// channel's own timeout bounds each single read.
struct Bounded<R> {
    inner: R,
    left: u64,
    total: u64,
    deadline: Instant,
}

impl<R: Read> Read for Bounded<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        if Instant::now() >= self.deadline {
            return Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the report stream did not end before the fetch deadline",
            ));
        }
        let n = self.inner.read(buf)?;
        self.left = self.left.checked_sub(n as u64).ok_or_else(|| {
            std::io::Error::other(format!(
                "the report stream went past {} bytes, the cap for a whole report",
                self.total
            ))
        })?;
        Ok(n)
    }
}

/// A name the report may hold: UTF-8 without control characters, relative, with no empty, `.`
/// or `..` component. A leading `./` (GNU tar's way) is dropped. None for the archive's root.
fn clean_name(raw: &[u8]) -> Result<Option<String>, String> {
    let name = std::str::from_utf8(raw).map_err(|_| format!("{raw:?}: not UTF-8"))?;
    if name.chars().any(char::is_control) {
        return Err(format!("{name:?}: a control character in the name"));
    }
    let trimmed = name.trim_start_matches("./").trim_end_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return Ok(None);
    }
    if sharedos_report::digest::relative_name_ok(trimmed) {
        Ok(Some(trimmed.to_string()))
    } else {
        Err(format!("{name:?}: not a plain relative path"))
    }
}

fn kind_name(t: tar::EntryType) -> String {
    match t {
        tar::EntryType::Symlink => "a symbolic link".into(),
        tar::EntryType::Link => "a hard link".into(),
        tar::EntryType::Fifo => "a FIFO".into(),
        tar::EntryType::Char => "a character device".into(),
        tar::EntryType::Block => "a block device".into(),
        other => format!("a tar entry of type {:?}", other.as_byte() as char),
    }
}

/// Unpacks `stream` into `dest`, which must not exist yet. Err when a limit is passed or the
/// stream is not tar; what was unpacked until then stays on disk.
pub fn unpack(stream: &mut impl Read, dest: &Path, limits: &Limits) -> Result<Unpacked> {
    std::fs::create_dir(dest).with_context(|| format!("creating {}", dest.display()))?;
    let mut archive = tar::Archive::new(Bounded {
        inner: stream,
        left: limits.total,
        total: limits.total,
        deadline: limits.deadline,
    });
    let mut out = Unpacked::default();
    let mut seen = std::collections::HashSet::new();
    let entries = archive
        .entries()
        .context("reading the guest's report stream")?;
    for (i, entry) in entries.enumerate() {
        if i >= limits.entries {
            bail!(
                "the guest's report stream holds more than {} entries",
                limits.entries
            );
        }
        let mut entry = entry.context("reading the guest's report stream")?;
        let raw = entry.path_bytes().into_owned();
        let name = match clean_name(&raw) {
            Ok(Some(n)) => n,
            Ok(None) => continue,
            Err(why) => {
                out.refused.push(why);
                continue;
            }
        };
        if !seen.insert(name.clone()) {
            out.refused.push(format!("{name}: sent twice"));
            continue;
        }
        let path = dest.join(&name);
        match entry.header().entry_type() {
            tar::EntryType::Directory => {
                std::fs::create_dir_all(&path)
                    .with_context(|| format!("creating {}", path.display()))?;
            }
            tar::EntryType::Regular | tar::EntryType::Continuous => {
                let size = entry.header().size().context("a tar header's size")?;
                if size > limits.per_file {
                    bail!(
                        "the guest sent {name} of {size} bytes, over the {} bytes allowed for one file",
                        limits.per_file
                    );
                }
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent)
                        .with_context(|| format!("creating {}", parent.display()))?;
                }
                write_fresh(&path, &mut entry, size)
                    .with_context(|| format!("unpacking {name}"))?;
                out.files.push(name);
            }
            other => out.refused.push(format!("{name}: {}", kind_name(other))),
        }
    }
    Ok(out)
}

/// Creates `path` (never through a link: every directory under `dest` was made here) and copies
/// exactly `size` bytes into it.
fn write_fresh(path: &Path, from: &mut impl Read, size: u64) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(nix::libc::O_NOFOLLOW | nix::libc::O_CLOEXEC)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let n = std::io::copy(&mut from.take(size), &mut f)?;
    if n != size {
        bail!("the stream ended after {n} of {size} bytes");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kind: tar::EntryType, size: u64) -> tar::Header {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(kind);
        h.set_size(size);
        h.set_mode(0o4777);
        h.set_cksum();
        h
    }

    /// A tar stream, built entry by entry with raw names (the builder would refuse `..`).
    fn archive(entries: &[(&str, tar::EntryType, &[u8], Option<&str>)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, kind, data, link) in entries {
            let mut h = header(*kind, data.len() as u64);
            let gnu = h.as_gnu_mut().unwrap();
            gnu.name[..name.len()].copy_from_slice(name.as_bytes());
            if let Some(l) = link {
                gnu.linkname[..l.len()].copy_from_slice(l.as_bytes());
            }
            h.set_cksum();
            out.extend_from_slice(h.as_bytes());
            out.extend_from_slice(data);
            out.resize(out.len().next_multiple_of(512), 0);
        }
        out.resize(out.len() + 1024, 0);
        out
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("fetch-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    use tar::EntryType as T;

    #[test]
    fn regular_files_and_directories_land_with_the_rigs_own_mode() {
        let d = scratch("ok");
        let a = archive(&[
            ("./", T::Directory, b"", None),
            ("./report.json", T::Regular, b"{}", None),
            ("./png/live.png", T::Regular, b"png", None),
            ("./logs/", T::Directory, b"", None),
        ]);
        let u = unpack(
            &mut &a[..],
            &d.join("guest"),
            &Limits::new(Duration::from_secs(30)),
        )
        .unwrap();
        assert_eq!(u.files, vec!["report.json", "png/live.png"]);
        assert!(u.refused.is_empty());
        assert_eq!(std::fs::read(d.join("guest/png/live.png")).unwrap(), b"png");
        assert!(d.join("guest/logs").is_dir());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(d.join("guest/report.json"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(
            mode & 0o7777,
            0o644,
            "the guest's setuid bits must not survive"
        );
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn links_fifos_devices_odd_names_and_repeats_are_refused_and_named() {
        let d = scratch("refused");
        let outside = d.join("outside");
        std::fs::write(&outside, b"host file").unwrap();
        let a = archive(&[
            (
                "./png/x.png",
                T::Symlink,
                b"",
                Some("/root/.ssh/id_ed25519"),
            ),
            ("./report.json", T::Link, b"", Some("/etc/passwd")),
            ("./logs/criu.log", T::Fifo, b"", None),
            ("./dev/null", T::Char, b"", None),
            ("../outside", T::Regular, b"overwritten", None),
            ("/tmp/abs", T::Regular, b"x", None),
            ("./a\x1b[2Jb", T::Regular, b"x", None),
            ("./ok.log", T::Regular, b"1", None),
            ("./ok.log", T::Regular, b"2", None),
        ]);
        let u = unpack(
            &mut &a[..],
            &d.join("guest"),
            &Limits::new(Duration::from_secs(30)),
        )
        .unwrap();
        assert_eq!(u.files, vec!["ok.log"]);
        let r = u.refused.join("\n");
        for needle in [
            "png/x.png: a symbolic link",
            "report.json: a hard link",
            "logs/criu.log: a FIFO",
            "dev/null: a character device",
            "\"../outside\": not a plain relative path",
            "\"/tmp/abs\": not a plain relative path",
            "a control character in the name",
            "ok.log: sent twice",
        ] {
            assert!(r.contains(needle), "{needle} not in:\n{r}");
        }
        assert_eq!(std::fs::read(&outside).unwrap(), b"host file");
        assert_eq!(std::fs::read(d.join("guest/ok.log")).unwrap(), b"1");
        assert!(!d.join("guest/png/x.png").exists() && !d.join("guest/logs/criu.log").exists());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn size_caps_entry_count_and_deadline_stop_the_fetch() {
        let d = scratch("caps");
        let big = vec![7u8; 4096];
        let a = archive(&[("./big.log", T::Regular, &big, None)]);
        let mut l = Limits::new(Duration::from_secs(30));
        l.per_file = 1000;
        let e = format!("{:#}", unpack(&mut &a[..], &d.join("g1"), &l).unwrap_err());
        assert!(
            e.contains("big.log of 4096 bytes, over the 1000 bytes allowed"),
            "{e}"
        );

        let mut l = Limits::new(Duration::from_secs(30));
        l.total = 2048;
        let e = format!("{:#}", unpack(&mut &a[..], &d.join("g2"), &l).unwrap_err());
        assert!(e.contains("went past 2048 bytes"), "{e}");

        let many: Vec<(String, T, &[u8], Option<&str>)> = (0..5)
            .map(|i| (format!("./f{i}"), T::Regular, &b"x"[..], None))
            .collect();
        let refs: Vec<(&str, T, &[u8], Option<&str>)> = many
            .iter()
            .map(|(n, t, b, l)| (n.as_str(), *t, *b, *l))
            .collect();
        let mut l = Limits::new(Duration::from_secs(30));
        l.entries = 3;
        let e = format!(
            "{:#}",
            unpack(&mut &archive(&refs)[..], &d.join("g3"), &l).unwrap_err()
        );
        assert!(e.contains("more than 3 entries"), "{e}");

        // A guest that never ends its stream: a file announced as 1 TiB, trickling a byte at a
        // time as a slow guest would.
        struct Trickle;
        impl Read for Trickle {
            fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
                std::thread::sleep(Duration::from_millis(1));
                buf[0] = b'x';
                Ok(1)
            }
        }
        let mut named = header(T::Regular, 1 << 40);
        named.as_gnu_mut().unwrap().name[..9].copy_from_slice(b"./end.log");
        named.set_cksum();
        let mut stream = (&named.as_bytes()[..]).chain(Trickle);
        let mut l = Limits::new(Duration::from_millis(300));
        l.total = u64::MAX;
        l.per_file = u64::MAX;
        let started = Instant::now();
        let e = format!("{:#}", unpack(&mut stream, &d.join("g4"), &l).unwrap_err());
        assert!(e.contains("before the fetch deadline"), "{e}");
        assert!(started.elapsed() < Duration::from_secs(60));
        std::fs::remove_dir_all(&d).unwrap();
    }
}
