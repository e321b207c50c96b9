//! What a run records as it goes. Its phases send typed [`Event`]s to [`Observed`], which keeps
//! what the report needs from them (the accelerator and its reason, the QEMU line, the phase
//! timings) and hands each one's line to the run's progress, the one place that prints.

use super::progress;
use crate::escape::line as one_line;
use crate::vm;
use sharedos_report::report::{Phase, Report, VmProvenance};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    /// What the session said.
    Vm(vm::Event),
    /// The image is being found or built.
    ImageWanted { name: String },
    /// The image's verified cache entry.
    Image { dir: PathBuf, sha256: String },
    /// A phase of the run ended (or failed) after `took`.
    Phase { name: String, took: Duration },
    /// The gate binary's command line in the guest.
    Gates { command: String },
    /// One of the guest's `gate N/M ...` progress lines.
    Gate { line: String },
    /// The gate binary in the guest is the host's (its sha256 checked there): copied in, or
    /// already there (`why`) and not copied again.
    GateBinary {
        sha256: String,
        copied: bool,
        why: String,
    },
}

impl Event {
    /// The event as a progress line; None for what only the report keeps.
    pub fn line(&self) -> Option<String> {
        match self {
            Event::Vm(e) => Some(e.line()),
            Event::ImageWanted { name } => Some(format!("image {name} ...")),
            Event::Image { dir, sha256 } => Some(format!("image {} ({sha256})", dir.display())),
            Event::Phase { .. } => None,
            Event::Gates { command } => Some(format!("gates: {command}")),
            // The guest's words: one line, escaped, however the guest wrote them.
            Event::Gate { line } => Some(format!("  {}", one_line(line))),
            Event::GateBinary {
                sha256,
                copied: true,
                why,
            } => Some(format!(
                "gate binary copied in ({why}), sha256 checked in the guest: {sha256}"
            )),
            Event::GateBinary {
                sha256,
                copied: false,
                why,
            } => Some(format!(
                "gate binary not copied again: {why}; sha256 checked in the guest: {sha256}"
            )),
        }
    }
}

/// What the run has observed so far; on a rig failure it becomes the partial report.
pub struct Observed {
    pub report_dir: PathBuf,
    pub started_at: String,
    pub vm: VmProvenance,
    /// Lines the diagnostic printed as it went (gate by gate), bounded.
    pub transcript: Vec<String>,
    pub guest_report: Option<Report>,
    /// What the fetch refused to unpack (links, FIFOs, devices, odd names): a rig error.
    pub refused: Vec<String>,
}

impl Observed {
    pub fn new(report_dir: PathBuf, vm: VmProvenance) -> Observed {
        Observed {
            report_dir,
            started_at: vm.started_at.clone(),
            vm,
            transcript: Vec::new(),
            guest_report: None,
            refused: Vec::new(),
        }
    }

    /// Records what the report needs from `e`, and shows its line.
    pub fn send(&mut self, e: Event) {
        self.record(&e);
        if let Some(line) = e.line() {
            progress().note(&line);
        }
    }

    /// A sink for the session's events.
    pub fn vm_sink(&mut self) -> impl FnMut(&vm::Event) + '_ {
        |e| self.send(Event::Vm(e.clone()))
    }

    /// A phase that began at `since` ended now.
    pub fn phase(&mut self, name: &str, since: Instant) {
        self.send(Event::Phase {
            name: name.to_string(),
            took: since.elapsed(),
        });
    }

    fn record(&mut self, e: &Event) {
        match e {
            Event::Vm(vm::Event::Accel { accel, reason }) => {
                self.vm.accel = accel.as_str().into();
                self.vm.accel_reason = reason.clone();
                self.vm.cpu_model = accel.cpu_model().into();
            }
            Event::Vm(vm::Event::Booting { argv, .. }) => {
                self.vm.qemu_argv = argv.clone();
                self.vm.tcg_tb_size_mib = vm::qemu::tb_size_of(argv);
            }
            Event::Vm(vm::Event::GuestStart(start)) => self.vm.start = Some((**start).clone()),
            Event::Vm(vm::Event::LoggedIn { after }) => self.push_phase("boot_to_ssh", *after),
            Event::Vm(vm::Event::Stage { name, took }) => self.push_phase(name, *took),
            Event::Phase { name, took } => self.push_phase(name, *took),
            _ => {}
        }
    }

    fn push_phase(&mut self, name: &str, took: Duration) {
        self.vm.phases.push(Phase {
            name: name.to_string(),
            duration_ms: took.as_millis() as u64,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::vm::qemu::Accel;

    #[test]
    fn the_report_keeps_what_the_session_said() {
        let mut o = Observed::new("/nonexistent".into(), VmProvenance::default());
        o.send(Event::Vm(vm::Event::Accel {
            accel: Accel::Tcg,
            reason: "forced with --accel tcg".into(),
        }));
        o.send(Event::Vm(vm::Event::Booting {
            pid: 1,
            port: 2,
            argv: vec!["qemu-system-x86_64".into(), "-name".into()],
        }));
        o.send(Event::Vm(vm::Event::LoggedIn {
            after: Duration::from_millis(1500),
        }));
        o.send(Event::Phase {
            name: "copy".into(),
            took: Duration::from_millis(20),
        });
        assert_eq!(o.vm.accel, "tcg");
        assert_eq!(o.vm.accel_reason, "forced with --accel tcg");
        assert_eq!(o.vm.cpu_model, "max,cx16=off");
        assert_eq!(o.vm.qemu_argv, ["qemu-system-x86_64", "-name"]);
        let phases: Vec<(&str, u64)> =
            o.vm.phases
                .iter()
                .map(|p| (p.name.as_str(), p.duration_ms))
                .collect();
        assert_eq!(phases, [("boot_to_ssh", 1500), ("copy", 20)]);
    }

    #[test]
    fn a_guest_line_is_shown_on_one_line() {
        let e = Event::Gate {
            line: "gate 1/10 prerequisites PASS 5ms: ok\r\x1b[2Jforged".into(),
        };
        let shown = e.line().unwrap();
        assert!(
            !shown.contains('\r') && !shown.contains('\x1b'),
            "{shown:?}"
        );
        assert_eq!(
            Event::Phase {
                name: "copy".into(),
                took: Duration::ZERO
            }
            .line(),
            None
        );
    }
}
