//! What a session tells its client as it goes: typed values sent to a sink the client gives.
//! The client records what it needs from them (the report's accelerator and its reason, the
//! QEMU line, the timings) and prints each one's line through its progress: nothing in vm/
//! prints.

use super::qemu::Accel;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// The accelerator QEMU runs under, and why (a failed KVM attempt included).
    Accel { accel: Accel, reason: String },
    /// What `auto` did with its cached verdict: used it, probed for want of one, kept a new
    /// one, or could not.
    AccelCache { note: String },
    /// QEMU started under that accelerator; `argv` is its line, `port` the host's end of the
    /// forward to the guest's sshd.
    Booting {
        pid: u32,
        port: u16,
        argv: Vec<String>,
    },
    /// QEMU could not bind `port` (another process took it after it was found free): booting
    /// again on another.
    PortRetry { port: u16, attempt: u32 },
    /// How the guest came up: cold, or resumed from a snapshot, and why.
    GuestStart(Box<sharedos_report::report::GuestStart>),
    /// A stage of a resume took `took`: where a resume's time goes (the state into QEMU, the
    /// guest's first answer, its setup over that first session).
    Stage { name: &'static str, took: Duration },
    /// No layer over the snapshot `base` holds the session's file (`why`): one is being made
    /// (the base resumed, the file put in and checked, when `warmed` the layer's warm-up run,
    /// the guest saved).
    LayerMaking {
        base: PathBuf,
        why: String,
        warmed: bool,
    },
    /// A snapshot of this image and these settings was saved, for this and later runs.
    SnapshotMade { dir: PathBuf, state_bytes: u64 },
    /// Once a snapshot was made: another of the image's snapshots, which no run here can use
    /// any more (`why`), was removed, freeing `bytes`.
    SnapshotRemoved {
        dir: PathBuf,
        why: String,
        bytes: u64,
    },
    /// A stale snapshot was left: a running rig holds it, or removing it failed (`left`).
    SnapshotLeft {
        dir: PathBuf,
        why: String,
        left: String,
    },
    /// The guest's init said it is ready and announced its host key.
    Ready { host_key: String },
    /// One SSH session, pinned to that host key and logged in; `after` counts from QEMU's
    /// first start (the KVM probe, a port retry and the guest's boot included).
    LoggedIn { after: Duration },
    /// `--keep-vm` at the end of a session that reached it: QEMU keeps running.
    Kept {
        pid: u32,
        port: u16,
        key: PathBuf,
        host_key: String,
        run_dir: PathBuf,
    },
    /// `--keep-vm`, but a signal arrived: QEMU was ended anyway.
    NotKept { signal: String },
}

/// Where a session's events go.
pub type Sink<'a> = &'a mut dyn FnMut(&Event);

impl Event {
    /// The event as a progress line.
    pub fn line(&self) -> String {
        match self {
            Event::Accel { accel, reason } => format!("accelerator: {} ({reason})", accel.as_str()),
            Event::AccelCache { note } => note.clone(),
            Event::Booting { pid, port, .. } => {
                format!("booting (QEMU pid {pid}, ssh port {port}) ...")
            }
            Event::PortRetry { port, attempt } => {
                format!("port {port} was taken; retrying with another (attempt {attempt})")
            }
            Event::GuestStart(s) => match &s.snapshot {
                Some(snap) if snap.gate_sha256.is_some() => format!(
                    "resumed snapshot layer {} (gate binary {}) made at {} ({})",
                    &snap.state_sha256[..snap.state_sha256.len().min(12)],
                    snap.gate_sha256.as_deref().unwrap_or(""),
                    snap.made_at,
                    s.reason
                ),
                Some(snap) => format!(
                    "resumed snapshot {} made at {} ({})",
                    &snap.state_sha256[..snap.state_sha256.len().min(12)],
                    snap.made_at,
                    s.reason
                ),
                None => format!("booted cold ({})", s.reason),
            },
            Event::Stage { name, took } => {
                format!("{name}: {:.2} s", took.as_secs_f64())
            }
            Event::LayerMaking { base, why, warmed } => format!(
                "{why}: making it over snapshot {}: resume, copy the gate binary in, check its sha256, {}save ...",
                base.display(),
                if *warmed {
                    "run the gates once to warm its caches, "
                } else {
                    ""
                }
            ),
            Event::SnapshotMade { dir, state_bytes } => format!(
                "snapshot saved: {} ({} MiB of machine state)",
                dir.display(),
                state_bytes >> 20
            ),
            Event::SnapshotRemoved { dir, why, bytes } => format!(
                "stale snapshot removed: {} ({} MiB; {why})",
                dir.display(),
                bytes >> 20
            ),
            Event::SnapshotLeft { dir, why, left } => {
                format!("stale snapshot left: {} ({why}; {left})", dir.display())
            }
            Event::Ready { host_key } => format!("guest ready; host key {host_key}; connecting"),
            Event::LoggedIn { after } => format!(
                "logged in over SSH {:.1} s after QEMU's start",
                after.as_secs_f64()
            ),
            Event::Kept {
                pid,
                port,
                key,
                host_key,
                run_dir,
            } => format!(
                "--keep-vm: QEMU pid {pid} keeps running; ssh -i {} -p {port} -o StrictHostKeyChecking=no root@127.0.0.1 (host key {host_key}); run dir {}",
                key.display(),
                run_dir.display()
            ),
            Event::NotKept { signal } => format!("--keep-vm: not kept, {signal} arrived"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_layer_is_said_to_be_warmed_only_when_it_is() {
        let making = |warmed| Event::LayerMaking {
            base: "/s/bookworm-0123".into(),
            why: "there was none".into(),
            warmed,
        };
        assert!(making(true)
            .line()
            .contains("check its sha256, run the gates once to warm its caches, save ..."));
        let cold = making(false).line();
        assert!(
            cold.ends_with("check its sha256, save ...") && !cold.contains("warm"),
            "{cold}"
        );
    }

    #[test]
    fn lines_say_what_happened() {
        let e = Event::Accel {
            accel: Accel::Tcg,
            reason: "forced with --accel tcg".into(),
        };
        assert_eq!(e.line(), "accelerator: tcg (forced with --accel tcg)");
        let e = Event::Booting {
            pid: 7,
            port: 40022,
            argv: vec!["qemu-system-x86_64".into()],
        };
        assert_eq!(e.line(), "booting (QEMU pid 7, ssh port 40022) ...");
        let e = Event::Kept {
            pid: 7,
            port: 40022,
            key: "/tmp/r/id_ed25519".into(),
            host_key: "SHA256:x".into(),
            run_dir: "/tmp/r".into(),
        };
        assert!(
            e.line().contains("ssh -i /tmp/r/id_ed25519 -p 40022"),
            "{}",
            e.line()
        );
    }
}
