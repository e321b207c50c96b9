//! Causes: what a failing program, or the guest's kernel, said about the failure, quoted from its
//! own log. A cause is for people to read beside a status and nothing else: no verdict reads it,
//! and every reader bounds it again ([`Cause::bounded`], [`KernelOops::bounded`]) because the
//! side that wrote it may lie or flood.

use serde::{Deserialize, Serialize};

/// Lines quoted before the first error: enough to show what CRIU was doing when it failed.
pub const CONTEXT_LINES: usize = 8;
/// Characters kept of one quoted line; a longer one is cut and ends in `...`.
pub const LINE_CHARS: usize = 300;
/// Characters kept of a cause's source (`criu dump`) and log path.
pub const NAME_CHARS: usize = 64;

/// A failing program's own first error line and the lines that led to it.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct Cause {
    /// Who said it: `criu dump`, `criu restore`.
    pub source: String,
    /// The log it was quoted from, relative to the report directory (`criu/dump.log`).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub log: String,
    /// The first error line, as the log has it.
    pub error: String,
    /// Up to [`CONTEXT_LINES`] lines just before it, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub before: Vec<String>,
}

impl Cause {
    /// Within the bounds whoever wrote it was meant to keep: the last [`CONTEXT_LINES`] lines
    /// before the error, every line cut to [`LINE_CHARS`].
    pub fn bounded(self) -> Cause {
        let skip = self.before.len().saturating_sub(CONTEXT_LINES);
        Cause {
            source: cut(&self.source, NAME_CHARS),
            log: cut(&self.log, NAME_CHARS),
            error: cut(&self.error, LINE_CHARS),
            before: self
                .before
                .into_iter()
                .skip(skip)
                .map(|l| cut(&l, LINE_CHARS))
                .collect(),
        }
    }

    /// `criu dump: Can't dump nested ipc namespace for 1234`: the source and the error's
    /// message without its time stamp and source location. Not escaped.
    pub fn headline(&self) -> String {
        format!("{}: {}", self.source, message(&self.error))
    }
}

/// The message of a log line without what CRIU puts before it: its time stamp `(00.123456)`
/// and its level and location `Error (criu/sockets.c:813):`.
pub fn message(line: &str) -> &str {
    let mut m = line.trim();
    if let Some(rest) = m.strip_prefix('(') {
        if let Some((stamp, after)) = rest.split_once(')') {
            if stamp
                .chars()
                .all(|c| c.is_ascii_digit() || c == '.' || c == ' ')
            {
                m = after.trim_start();
            }
        }
    }
    for level in ["Error (", "Warn  (", "Warn ("] {
        if let Some(rest) = m.strip_prefix(level) {
            if let Some((_, after)) = rest.split_once("):") {
                m = after.trim_start();
            }
        }
    }
    m
}

/// At most `max` characters of `s`, trimmed; a cut string ends in `...`.
pub fn cut(s: &str, max: usize) -> String {
    let s = s.trim();
    if s.chars().count() <= max {
        return s.to_string();
    }
    let mut out: String = s.chars().take(max.saturating_sub(3)).collect();
    out.push_str("...");
    out
}

/// A guest kernel oops as the host read it from the serial console: its first line, the RIP
/// line after it, and the panic line when the kernel went on to panic.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
pub struct KernelOops {
    /// `Oops: ...`, `BUG: ...`, `general protection fault ...`, `double fault ...`.
    pub first: String,
    /// `RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0`; empty when the console has none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rip: String,
    /// `Kernel panic - not syncing: ...`; empty when the guest kept going.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub panic: String,
}

impl KernelOops {
    pub fn bounded(self) -> KernelOops {
        KernelOops {
            first: cut(&self.first, LINE_CHARS),
            rip: cut(&self.rip, LINE_CHARS),
            panic: cut(&self.panic, LINE_CHARS),
        }
    }

    /// The function the RIP line names, with its offset: `kmem_cache_alloc_noprof+0x9d/0x2f0`.
    pub fn rip_function(&self) -> Option<&str> {
        let after = self.rip.split_once("RIP:")?.1.trim();
        // `0010:function+off/len`: the code segment, then the function.
        let f = after.split_once(':').map_or(after, |(_, f)| f);
        f.split_whitespace().next().filter(|f| !f.is_empty())
    }

    /// `kernel oops: RIP kmem_cache_alloc_noprof+0x9d/0x2f0`, or its first line when the
    /// console has no RIP line. Not escaped.
    pub fn headline(&self) -> String {
        match self.rip_function() {
            Some(f) => format!("kernel oops: RIP {f}"),
            None => format!("kernel oops: {}", kernel_message(&self.first)),
        }
    }
}

/// A console line without the kernel's `[    2.712345] ` time stamp.
pub fn kernel_message(line: &str) -> &str {
    let l = line.trim();
    match l.strip_prefix('[').and_then(|r| r.split_once(']')) {
        Some((stamp, after)) if stamp.trim().chars().all(|c| c.is_ascii_digit() || c == '.') => {
            after.trim_start()
        }
        _ => l,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_lose_their_stamp_and_location_only() {
        assert_eq!(
            message("(00.123456) Error (criu/sockets.c:813): sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2"),
            "sockets: Sockects collect procedure family AF_INET proto IPPROTO_UDPLITE: -2"
        );
        assert_eq!(
            message("Error (criu/namespaces.c:463): Can't dump nested ipc namespace for 1234"),
            "Can't dump nested ipc namespace for 1234"
        );
        assert_eq!(message("(00.2) Dumping FAILED."), "Dumping FAILED.");
        assert_eq!(message("(not a stamp) x"), "(not a stamp) x");
    }

    #[test]
    fn a_flooded_cause_is_bounded_again() {
        let c = Cause {
            source: "s".repeat(1000),
            log: String::new(),
            error: "e".repeat(10_000),
            before: (0..100).map(|i| format!("line {i}")).collect(),
        }
        .bounded();
        assert_eq!(c.source.chars().count(), NAME_CHARS);
        assert_eq!(c.error.chars().count(), LINE_CHARS);
        assert!(c.error.ends_with("..."));
        assert_eq!(c.before.len(), CONTEXT_LINES);
        assert_eq!(c.before.last().map(String::as_str), Some("line 99"));
        assert_eq!(cut("short", 10), "short");
    }

    #[test]
    fn the_oops_headline_names_the_function() {
        let o = KernelOops {
            first: "[    2.712999] double fault: 0000 [#1] PREEMPT SMP NOPTI".into(),
            rip: "[    2.713300] RIP: 0010:kmem_cache_alloc_noprof+0x9d/0x2f0".into(),
            panic: String::new(),
        };
        assert_eq!(o.rip_function(), Some("kmem_cache_alloc_noprof+0x9d/0x2f0"));
        assert_eq!(
            o.headline(),
            "kernel oops: RIP kmem_cache_alloc_noprof+0x9d/0x2f0"
        );
        let no_rip = KernelOops {
            rip: String::new(),
            ..o
        };
        assert_eq!(
            no_rip.headline(),
            "kernel oops: double fault: 0000 [#1] PREEMPT SMP NOPTI"
        );
    }
}
