//! The one reader of report directories on the host. Everything in a report came from a guest
//! or travelled as an archive, so a report is read as hostile input:
//!
//! - The directory is opened once, and every file is reached from that handle: each directory
//!   on the way is opened beneath the last without following a link (`openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS` where the kernel has it, else one `openat` with
//!   `O_NOFOLLOW` per component), so a link at any depth is refused, never followed.
//! - A file is looked at (`fstatat`, then an `O_PATH` handle, which opens nothing) before it is
//!   opened: a FIFO, a device, a socket or a link is refused without being opened, and so is a
//!   regular file with more than one link (a hard link to a file outside the report passes
//!   every other test). It is then opened through that same handle (`/proc/self/fd`), so what
//!   is read is the file that was looked at.
//! - Each file has a size cap, the whole judgement has a total, and only files small enough are
//!   kept in memory; the rest are hashed as they stream by.
//! - Each file is read once per judgement: the bytes parsed, hashed and checked against a
//!   signature are the same bytes. A second request is answered from the first read.

use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use sha2::{Digest, Sha256};
use sharedos_report::digest;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::fmt;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// How much one judgement reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Caps {
    /// The largest file read at all.
    pub per_file: u64,
    /// The bytes of every file read, together.
    pub total: u64,
    /// The largest file kept in memory (a report.json, a PNG); larger ones are only hashed.
    pub kept_per_file: u64,
    /// The bytes kept in memory, together.
    pub kept_total: u64,
    /// The most entries one directory listing returns.
    pub entries: usize,
}

impl Caps {
    /// What vm-run's fetch lets a guest send (256 MiB a file, 1 GiB in all, 10,000 entries):
    /// anything vm-run archived can be judged, and nothing larger is read.
    pub const REPORT: Caps = Caps {
        per_file: 256 << 20,
        total: 1 << 30,
        kept_per_file: 32 << 20,
        kept_total: 256 << 20,
        entries: 10_000,
    };
}

/// What a name in a report directory is, seen without following it or opening it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    File { len: u64, links: u64 },
    Dir,
    Link,
    Fifo,
    CharDevice,
    BlockDevice,
    Socket,
    Other,
}

impl Kind {
    fn of(st: &FileStat) -> Kind {
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFREG => Kind::File {
                len: u64::try_from(st.st_size).unwrap_or(0),
                links: st.st_nlink,
            },
            SFlag::S_IFDIR => Kind::Dir,
            SFlag::S_IFLNK => Kind::Link,
            SFlag::S_IFIFO => Kind::Fifo,
            SFlag::S_IFCHR => Kind::CharDevice,
            SFlag::S_IFBLK => Kind::BlockDevice,
            SFlag::S_IFSOCK => Kind::Socket,
            _ => Kind::Other,
        }
    }

    /// "a symbolic link", "a FIFO", ...: what a refusal names.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File { .. } => "a regular file",
            Kind::Dir => "a directory",
            Kind::Link => "a symbolic link",
            Kind::Fifo => "a FIFO",
            Kind::CharDevice => "a character device",
            Kind::BlockDevice => "a block device",
            Kind::Socket => "a socket",
            Kind::Other => "neither a file nor a directory",
        }
    }
}

/// One file as read: its size and sha256, and its bytes when it was small enough to keep.
#[derive(Clone, PartialEq, Eq)]
pub struct FileRead {
    pub rel: String,
    pub len: u64,
    pub sha256: String,
    bytes: Option<Vec<u8>>,
}

impl FileRead {
    /// The bytes read, None for a file too large to keep in memory.
    pub fn bytes(&self) -> Option<&[u8]> {
        self.bytes.as_deref()
    }
}

impl fmt::Debug for FileRead {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "FileRead({}, {} bytes, {})",
            self.rel, self.len, self.sha256
        )
    }
}

type Hook = Box<dyn Fn(&str)>;

#[derive(Default)]
struct State {
    read_total: u64,
    kept_total: u64,
    files: BTreeMap<String, Result<Rc<FileRead>, String>>,
    opened: BTreeMap<String, u32>,
    after_read: Option<Hook>,
}

/// A report directory, opened once.
pub struct ReportDir {
    root: OwnedFd,
    shown: PathBuf,
    caps: Caps,
    state: RefCell<State>,
}

impl fmt::Debug for ReportDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ReportDir({})", self.shown.display())
    }
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

impl ReportDir {
    /// The directory `path` names, as the person running the command named it (a link they
    /// give on the command line is theirs to give); everything beneath it is read without
    /// following a link.
    pub fn open(path: &Path) -> Result<ReportDir, String> {
        Self::open_with(path, Caps::REPORT)
    }

    pub fn open_with(path: &Path, caps: Caps) -> Result<ReportDir, String> {
        let fd = nix::fcntl::open(
            path,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| match e {
            Errno::ENOENT => format!("{} does not exist", path.display()),
            Errno::ENOTDIR => format!("{} is not a directory", path.display()),
            e => format!("opening {}: {e}", path.display()),
        })?;
        Ok(ReportDir {
            root: fd,
            shown: path.to_path_buf(),
            caps,
            state: RefCell::default(),
        })
    }

    /// A directory beneath this one (a report in a list, a row of a matrix), reached without
    /// following a link at any component; it has its own caps and reads.
    pub fn open_beneath(&self, rel: &str) -> Result<ReportDir, String> {
        let parts = split(rel)?;
        let fd = self.dir_fd(&parts)?;
        Ok(ReportDir {
            root: fd,
            shown: self.shown.join(rel),
            caps: self.caps,
            state: RefCell::default(),
        })
    }

    /// Where the directory was opened, for messages.
    pub fn path(&self) -> &Path {
        &self.shown
    }

    /// `rel` read once: later requests get the first read's result, error included.
    pub fn file(&self, rel: &str) -> Result<Rc<FileRead>, String> {
        if let Some(done) = self.state.borrow().files.get(rel) {
            return done.clone();
        }
        let read = self.read(rel, None).map(Rc::new);
        self.state
            .borrow_mut()
            .files
            .insert(rel.to_string(), read.clone());
        if let Some(hook) = &self.state.borrow().after_read {
            hook(rel);
        }
        read
    }

    /// `rel` read once, as `file` does, and its bytes, which must be at most `cap`.
    pub fn bytes(&self, rel: &str, cap: u64) -> Result<Rc<FileRead>, String> {
        let f = self.file(rel)?;
        if f.len > cap {
            return Err(format!(
                "{rel} is {} bytes, more than the {cap} this rig reads of it",
                f.len
            ));
        }
        if f.bytes.is_none() {
            return Err(format!(
                "{rel} ({} bytes) was too large to keep in memory while the report was judged",
                f.len
            ));
        }
        Ok(f)
    }

    /// Streams `rel` into `out` (a copy), with the same refusals and caps as `file`; the copy
    /// is its read, so nothing is cached.
    pub fn copy(&self, rel: &str, out: &mut dyn Write) -> Result<FileRead, String> {
        self.read(rel, Some(out))
    }

    /// What `rel` is, without following it or opening it; None when there is nothing there.
    pub fn kind(&self, rel: &str) -> Result<Option<Kind>, String> {
        let parts = split(rel)?;
        let (last, parents) = parts.split_last().ok_or("an empty name")?;
        let dir = match self.dir_fd(parents) {
            Ok(d) => d,
            Err(e) if e.ends_with("does not exist") => return Ok(None),
            Err(e) => return Err(e),
        };
        match fstatat(&dir, *last, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(Kind::of(&st))),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(format!("looking at {rel}: {e}")),
        }
    }

    /// The entries of the directory `rel` ("" for this one), sorted, each with what it is.
    pub fn entries(&self, rel: &str) -> Result<Vec<(String, Kind)>, String> {
        let parts = if rel.is_empty() {
            Vec::new()
        } else {
            split(rel)?
        };
        let fd = self.dir_fd(&parts)?;
        let listed = nix::dir::Dir::from_fd(
            fd.try_clone()
                .map_err(|e| format!("listing {}: {e}", self.shown_rel(rel)))?,
        )
        .map_err(|e| format!("listing {}: {e}", self.shown_rel(rel)))?;
        let mut out = Vec::new();
        for e in listed {
            let e = e.map_err(|e| format!("listing {}: {e}", self.shown_rel(rel)))?;
            let raw = e.file_name().to_bytes();
            if raw == b"." || raw == b".." {
                continue;
            }
            let Ok(name) = std::str::from_utf8(raw) else {
                return Err(format!(
                    "{} holds a name that is not UTF-8 ({})",
                    self.shown_rel(rel),
                    String::from_utf8_lossy(raw).escape_debug()
                ));
            };
            if out.len() >= self.caps.entries {
                return Err(format!(
                    "{} holds more than {} entries",
                    self.shown_rel(rel),
                    self.caps.entries
                ));
            }
            let st = fstatat(&fd, name, AtFlags::AT_SYMLINK_NOFOLLOW)
                .map_err(|e| format!("looking at {name} in {}: {e}", self.shown_rel(rel)))?;
            out.push((name.to_string(), Kind::of(&st)));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// How many times each file was opened for reading: once each, whatever asked for it.
    pub fn reads(&self) -> BTreeMap<String, u32> {
        self.state.borrow().opened.clone()
    }

    /// Calls `hook` after each file is first read: a test swaps a file there, to show that
    /// nothing reads it again.
    pub fn after_read(&self, hook: impl Fn(&str) + 'static) {
        self.state.borrow_mut().after_read = Some(Box::new(hook));
    }

    fn shown_rel(&self, rel: &str) -> String {
        if rel.is_empty() {
            self.shown.display().to_string()
        } else {
            rel.to_string()
        }
    }

    /// The directory reached by `parts` from the root, no link followed at any component.
    fn dir_fd(&self, parts: &[&str]) -> Result<OwnedFd, String> {
        if parts.is_empty() {
            return openat(&self.root, ".", DIR_FLAGS, Mode::empty())
                .map_err(|e| format!("reopening {}: {e}", self.shown.display()));
        }
        let joined = parts.join("/");
        let how = nix::fcntl::OpenHow::new().flags(DIR_FLAGS).resolve(
            nix::fcntl::ResolveFlag::RESOLVE_BENEATH
                | nix::fcntl::ResolveFlag::RESOLVE_NO_SYMLINKS
                | nix::fcntl::ResolveFlag::RESOLVE_NO_MAGICLINKS,
        );
        match nix::fcntl::openat2(&self.root, joined.as_str(), how) {
            Ok(fd) => Ok(fd),
            // Where openat2 is missing (before Linux 5.6, or filtered), or refused a link: one
            // component at a time, which also names the component at fault.
            Err(_) => self.walk(parts),
        }
    }

    fn walk(&self, parts: &[&str]) -> Result<OwnedFd, String> {
        let mut at = openat(&self.root, ".", DIR_FLAGS, Mode::empty())
            .map_err(|e| format!("reopening {}: {e}", self.shown.display()))?;
        for (i, p) in parts.iter().enumerate() {
            let so_far = parts[..=i].join("/");
            let next = match openat(&at, *p, DIR_FLAGS, Mode::empty()) {
                Ok(fd) => fd,
                Err(Errno::ENOENT) => return Err(format!("{so_far} does not exist")),
                Err(e) => {
                    let what = fstatat(&at, *p, AtFlags::AT_SYMLINK_NOFOLLOW)
                        .map(|st| Kind::of(&st).describe())
                        .unwrap_or("unreadable");
                    return Err(if what == "a directory" {
                        format!("opening the directory {so_far}: {e}")
                    } else {
                        format!("{so_far} is {what}, not a directory (a link is never followed)")
                    });
                }
            };
            at = next;
        }
        Ok(at)
    }

    /// Looks at `rel`, refuses what is not a plain file of this report, opens it through the
    /// handle it looked at, and reads it within the caps: hashed, kept when small, or copied.
    fn read(&self, rel: &str, copy: Option<&mut dyn Write>) -> Result<FileRead, String> {
        let parts = split(rel)?;
        let (last, parents) = parts.split_last().ok_or("an empty name")?;
        let dir = self.dir_fd(parents)?;
        let seen = match fstatat(&dir, *last, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            Err(Errno::ENOENT) => return Err(format!("{rel} does not exist")),
            Err(e) => return Err(format!("looking at {rel}: {e}")),
        };
        let len = self.admit(rel, &seen)?;
        // O_PATH opens nothing: a file swapped for a device since fstatat is still not opened.
        let handle = openat(
            &dir,
            *last,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("opening {rel}: {e}"))?;
        same_file(
            rel,
            &seen,
            &fstat(&handle).map_err(|e| format!("{rel}: {e}"))?,
        )?;
        let fd = reopen(&handle, &dir, last).map_err(|e| format!("opening {rel}: {e}"))?;
        same_file(rel, &seen, &fstat(&fd).map_err(|e| format!("{rel}: {e}"))?)?;
        *self
            .state
            .borrow_mut()
            .opened
            .entry(rel.to_string())
            .or_default() += 1;
        self.stream(rel, std::fs::File::from(fd), len, copy)
    }

    /// The size `rel` may be read at, or why it is refused, from what fstatat saw.
    fn admit(&self, rel: &str, st: &FileStat) -> Result<u64, String> {
        let (len, links) = match Kind::of(st) {
            Kind::File { len, links } => (len, links),
            k => return Err(format!("{rel} is {}, not a regular file", k.describe())),
        };
        if links > 1 {
            return Err(format!(
                "{rel} has {links} hard links: a file of a report has one, and this one may be a \
                 file from outside it"
            ));
        }
        if len > self.caps.per_file {
            return Err(format!(
                "{rel} is {len} bytes, more than the {} this rig reads of one file",
                self.caps.per_file
            ));
        }
        let total = self.state.borrow().read_total;
        if total.saturating_add(len) > self.caps.total {
            return Err(format!(
                "reading {rel} ({len} bytes) would take what this rig reads of one report past \
                 {} bytes",
                self.caps.total
            ));
        }
        Ok(len)
    }

    fn stream(
        &self,
        rel: &str,
        f: std::fs::File,
        len: u64,
        mut copy: Option<&mut dyn Write>,
    ) -> Result<FileRead, String> {
        let keep = copy.is_none()
            && len <= self.caps.kept_per_file
            && self.state.borrow().kept_total.saturating_add(len) <= self.caps.kept_total;
        let mut kept = keep.then(|| Vec::with_capacity(usize::try_from(len).unwrap_or(0)));
        let mut h = Sha256::new();
        let mut n = 0u64;
        // The file may grow after fstatat: what is read is bounded by what was admitted.
        let mut src = f.take(len.saturating_add(1));
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let k = src
                .read(&mut buf)
                .map_err(|e| format!("reading {rel}: {e}"))?;
            if k == 0 {
                break;
            }
            n = n.saturating_add(k as u64);
            if n > len {
                return Err(format!("{rel} grew while it was read"));
            }
            h.update(&buf[..k]);
            if let Some(v) = kept.as_mut() {
                v.extend_from_slice(&buf[..k]);
            }
            if let Some(w) = copy.as_mut() {
                w.write_all(&buf[..k])
                    .map_err(|e| format!("copying {rel}: {e}"))?;
            }
        }
        let mut st = self.state.borrow_mut();
        st.read_total = st.read_total.saturating_add(n);
        if kept.is_some() {
            st.kept_total = st.kept_total.saturating_add(n);
        }
        Ok(FileRead {
            rel: rel.to_string(),
            len: n,
            sha256: digest::hex(&h.finalize()),
            bytes: kept,
        })
    }
}

/// A plain relative name's components, or why it is not one.
fn split(rel: &str) -> Result<Vec<&str>, String> {
    if !digest::relative_name_ok(rel) {
        return Err(format!(
            "{rel:?} is not a plain relative path inside the report directory"
        ));
    }
    Ok(rel.split('/').collect())
}

/// The file behind an O_PATH handle, opened for reading. Through /proc/self/fd the open reaches
/// the very inode the handle holds; without /proc, by name again, checked by the caller against
/// what was looked at.
fn reopen(handle: &OwnedFd, dir: &OwnedFd, last: &str) -> Result<OwnedFd, Errno> {
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC;
    let proc = format!("/proc/self/fd/{}", handle.as_fd().as_raw_fd());
    match nix::fcntl::open(proc.as_str(), flags, Mode::empty()) {
        Err(Errno::ENOENT) => openat(dir, last, flags | OFlag::O_NOFOLLOW, Mode::empty()),
        r => r,
    }
}

/// The file opened is the one looked at: same inode, still one regular file with one link.
fn same_file(rel: &str, seen: &FileStat, now: &FileStat) -> Result<(), String> {
    if (seen.st_dev, seen.st_ino) != (now.st_dev, now.st_ino) {
        return Err(format!("{rel} was replaced while it was opened"));
    }
    match Kind::of(now) {
        Kind::File { links: 1, .. } => Ok(()),
        Kind::File { links, .. } => Err(format!("{rel} has {links} hard links")),
        k => Err(format!("{rel} is {}, not a regular file", k.describe())),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A scratch directory removed when the test ends, pass or fail.
    pub(crate) struct Scratch(pub(crate) PathBuf);

    impl Scratch {
        pub(crate) fn new(name: &str) -> Scratch {
            let p = std::env::temp_dir().join(format!("reader-{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&p);
            std::fs::create_dir_all(&p).unwrap();
            Scratch(p)
        }
    }

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn reads_a_file_once_and_keeps_small_ones() {
        let s = Scratch::new("once");
        std::fs::create_dir_all(s.0.join("png")).unwrap();
        std::fs::write(s.0.join("png/a.png"), b"abc").unwrap();
        let d = ReportDir::open(&s.0).unwrap();
        let f = d.file("png/a.png").unwrap();
        assert_eq!(f.bytes(), Some(&b"abc"[..]));
        assert_eq!(f.sha256, digest::sha256_hex(b"abc"));
        // The second request is the first read: a change on disk since is not seen.
        std::fs::write(s.0.join("png/a.png"), b"xyz").unwrap();
        assert_eq!(d.bytes("png/a.png", 3).unwrap().bytes(), Some(&b"abc"[..]));
        assert_eq!(d.reads()["png/a.png"], 1);
        assert!(d
            .bytes("png/a.png", 2)
            .unwrap_err()
            .contains("more than the 2"));
        // A failure is remembered too.
        assert!(d
            .file("png/none.png")
            .unwrap_err()
            .contains("does not exist"));
        std::fs::write(s.0.join("png/none.png"), b"late").unwrap();
        assert!(d.file("png/none.png").is_err());
    }

    #[test]
    fn no_link_is_followed_at_any_component() {
        let s = Scratch::new("links");
        let outside = Scratch::new("links-outside");
        std::fs::write(outside.0.join("secret"), b"host key").unwrap();
        std::fs::create_dir_all(outside.0.join("dir")).unwrap();
        std::fs::write(outside.0.join("dir/report.json"), b"{}").unwrap();
        std::fs::create_dir_all(s.0.join("guest")).unwrap();
        symlink(outside.0.join("secret"), s.0.join("guest/link.png")).unwrap();
        symlink(outside.0.join("dir"), s.0.join("linkdir")).unwrap();
        symlink("../..", s.0.join("guest/up")).unwrap();
        let d = ReportDir::open(&s.0).unwrap();
        let err = |rel: &str| d.file(rel).unwrap_err();
        assert!(
            err("guest/link.png").contains("guest/link.png is a symbolic link"),
            "{}",
            err("guest/link.png")
        );
        assert!(
            err("linkdir/report.json").contains("linkdir is a symbolic link, not a directory"),
            "{}",
            err("linkdir/report.json")
        );
        assert!(err("guest/up/etc/passwd").contains("guest/up is a symbolic link"));
        assert!(err("../x").contains("not a plain relative path"));
        assert!(err("/etc/passwd").contains("not a plain relative path"));
        assert!(err("guest//x").contains("not a plain relative path"));
        assert!(err("guest").contains("is a directory, not a regular file"));
        assert!(d
            .open_beneath("linkdir")
            .unwrap_err()
            .contains("symbolic link"));
        assert_eq!(d.kind("linkdir").unwrap(), Some(Kind::Link));
        assert_eq!(d.kind("nothing/here").unwrap(), None);
        assert!(d.reads().is_empty(), "nothing was opened for reading");
    }

    #[test]
    fn hard_links_and_special_files_are_refused_without_being_opened() {
        let s = Scratch::new("special");
        let outside = Scratch::new("special-outside");
        std::fs::write(outside.0.join("secret"), b"host key").unwrap();
        std::fs::hard_link(outside.0.join("secret"), s.0.join("hard.log")).unwrap();
        nix::unistd::mkfifo(&s.0.join("fifo.log"), Mode::S_IRUSR).unwrap();
        let d = ReportDir::open(&s.0).unwrap();
        assert!(d.file("hard.log").unwrap_err().contains("has 2 hard links"));
        // A plain open() of a FIFO waits for a writer; this returns at once.
        assert!(d
            .file("fifo.log")
            .unwrap_err()
            .contains("fifo.log is a FIFO, not a regular file"));
        assert!(d.reads().is_empty());
        let listed = d.entries("").unwrap();
        assert_eq!(
            listed,
            [
                ("fifo.log".to_string(), Kind::Fifo),
                ("hard.log".to_string(), Kind::File { len: 8, links: 2 })
            ]
        );
    }

    #[test]
    fn sizes_are_capped_per_file_and_in_all_and_large_files_are_only_hashed() {
        let s = Scratch::new("caps");
        std::fs::write(s.0.join("a"), vec![1u8; 100]).unwrap();
        std::fs::write(s.0.join("b"), vec![2u8; 100]).unwrap();
        std::fs::write(s.0.join("c"), vec![3u8; 300]).unwrap();
        let f = std::fs::File::create(s.0.join("sparse")).unwrap();
        f.set_len(1 << 40).unwrap();
        let caps = Caps {
            per_file: 250,
            total: 250,
            kept_per_file: 80,
            kept_total: 1000,
            entries: 3,
        };
        let d = ReportDir::open_with(&s.0, caps).unwrap();
        let a = d.file("a").unwrap();
        assert_eq!((a.len, a.bytes()), (100, None), "hashed, not kept");
        assert_eq!(a.sha256, digest::sha256_hex(&[1u8; 100]));
        assert!(d
            .bytes("a", 1000)
            .unwrap_err()
            .contains("too large to keep"));
        assert!(d
            .file("c")
            .unwrap_err()
            .contains("300 bytes, more than the 250"));
        assert!(d
            .file("sparse")
            .unwrap_err()
            .contains("1099511627776 bytes"));
        d.file("b").unwrap();
        let e = ReportDir::open_with(&s.0, caps).unwrap();
        e.file("a").unwrap();
        e.file("b").unwrap();
        std::fs::write(s.0.join("d"), vec![4u8; 60]).unwrap();
        assert!(e.file("d").unwrap_err().contains("past 250 bytes"));
        assert!(e.entries("").unwrap_err().contains("more than 3 entries"));
        assert_eq!(e.reads().len(), 2);
    }

    #[test]
    fn a_copy_streams_what_it_reads() {
        let s = Scratch::new("copy");
        std::fs::write(s.0.join("a"), vec![7u8; 5000]).unwrap();
        let d = ReportDir::open(&s.0).unwrap();
        let mut out = Vec::new();
        let f = d.copy("a", &mut out).unwrap();
        assert_eq!(out, vec![7u8; 5000]);
        assert_eq!((f.len, f.bytes()), (5000, None));
    }

    #[test]
    fn a_directory_beneath_is_opened_without_links_and_reads_apart() {
        let s = Scratch::new("beneath");
        std::fs::create_dir_all(s.0.join("rows/bookworm")).unwrap();
        std::fs::write(s.0.join("rows/bookworm/report.json"), b"{}").unwrap();
        let d = ReportDir::open(&s.0).unwrap();
        let row = d.open_beneath("rows/bookworm").unwrap();
        assert_eq!(row.file("report.json").unwrap().bytes(), Some(&b"{}"[..]));
        assert_eq!(row.path(), s.0.join("rows/bookworm"));
        assert!(d.reads().is_empty());
        assert!(ReportDir::open(&s.0.join("rows/bookworm/report.json"))
            .unwrap_err()
            .contains("is not a directory"));
        assert!(ReportDir::open(&s.0.join("none"))
            .unwrap_err()
            .contains("does not exist"));
    }

    /// The component walk, which runs where openat2 is missing, reaches what openat2 reaches
    /// and refuses what it refuses, naming the component.
    #[test]
    fn the_walk_without_openat2_reaches_and_refuses_the_same() {
        let s = Scratch::new("walk");
        std::fs::create_dir_all(s.0.join("guest/png")).unwrap();
        std::fs::write(s.0.join("guest/png/a.png"), b"a").unwrap();
        symlink(s.0.join("guest"), s.0.join("link")).unwrap();
        std::fs::write(s.0.join("file"), b"x").unwrap();
        let d = ReportDir::open(&s.0).unwrap();
        let fd = d.walk(&["guest", "png"]).unwrap();
        assert!(fstatat(&fd, "a.png", AtFlags::AT_SYMLINK_NOFOLLOW).is_ok());
        assert!(d
            .walk(&["link", "png"])
            .unwrap_err()
            .contains("link is a symbolic link"));
        assert!(d
            .walk(&["guest", "none"])
            .unwrap_err()
            .contains("guest/none does not exist"));
        assert!(d
            .walk(&["file"])
            .unwrap_err()
            .contains("file is a regular file, not a directory"));
    }

    #[test]
    fn the_hook_runs_after_the_one_read() {
        let s = Scratch::new("hook");
        std::fs::write(s.0.join("report.json"), b"first").unwrap();
        let d = ReportDir::open(&s.0).unwrap();
        let p = s.0.join("report.json");
        d.after_read(move |rel| {
            assert_eq!(rel, "report.json");
            std::fs::write(&p, b"second").unwrap();
        });
        assert_eq!(d.file("report.json").unwrap().bytes(), Some(&b"first"[..]));
        assert_eq!(d.file("report.json").unwrap().bytes(), Some(&b"first"[..]));
        assert_eq!(std::fs::read(s.0.join("report.json")).unwrap(), b"second");
    }
}
