use super::Summary;
use crate::judge::compare::{Arm, VmEach};
use plotters::prelude::*;
use sharedos_report::model::density::median;
use sharedos_report::report::Status;

/// Each design's colour, the same in both charts; a test finds them on a screenshot.
pub const SHARED_OS: RGBColor = RGBColor(0x09, 0x69, 0xda);
pub const VM_EACH: RGBColor = RGBColor(0xbc, 0x4c, 0x00);
pub const IDLE_VM: RGBColor = RGBColor(0x8c, 0x95, 0x9f);
pub const VM_RESET: RGBColor = RGBColor(0x82, 0x50, 0xdf);
pub const VM_KSM: RGBColor = RGBColor(0x1a, 0x7f, 0x37);
pub const SHARED_OS_RESET: RGBColor = RGBColor(0x54, 0xae, 0xff);
pub const VM_TEMPLATE: RGBColor = RGBColor(0xbf, 0x39, 0x89);
pub const VM_TEMPLATE_HOST: RGBColor = RGBColor(0x9a, 0x67, 0x00);
pub const VM_TEMPLATE_RESET: RGBColor = RGBColor(0xe8, 0x7f, 0xc0);

const SIZE: (u32, u32) = (760, 380);

pub struct Series {
    pub label: &'static str,
    pub colour: RGBColor,
    pub points: Vec<(f64, f64)>,
}

/// The sums of the first k values, k = 1.., in MiB.
fn running_mib(kib: impl Iterator<Item = Option<u64>>) -> Vec<(f64, f64)> {
    let mut sum = 0.0f64;
    let mut out = Vec::new();
    for (i, v) in kib.enumerate() {
        // A copy without a figure ends the line: a sum past it would undercount.
        let Some(v) = v else { break };
        sum += v as f64 / 1024.0;
        out.push(((i + 1) as f64, sum));
    }
    out
}

/// The series of the memory chart, of the arms run: for k desktops, the shared-OS copies' PSS
/// summed, each VM column's QEMU PSS summed, the templated arm's clones' private memory with
/// its template's, and k guests running nothing.
pub fn memory_series(s: &Summary) -> Vec<Series> {
    let n = s.widest().max(1);
    let mut out = Vec::new();
    if s.ran(Arm::Criu) {
        out.push(Series {
            label: "shared-OS: sum of the copies' PSS",
            colour: SHARED_OS,
            points: running_mib(s.shared_os.per_copy.iter().map(|m| Some(m.pss_kib))),
        });
    }
    let pss = |vm: &VmEach| running_mib(vm.copies.iter().map(|c| c.host_mem.map(|m| m.pss_kib)));
    for (arm, vm) in s.vm_columns() {
        match arm {
            Arm::VmTemplate => {
                out.push(Series {
                    label: "VM template: sum of the QEMUs' PSS (host) *",
                    colour: VM_TEMPLATE,
                    points: pss(vm),
                });
                // What k clones cost the host: their private pages, and the template's pages
                // however few of them map those, from the first clone on.
                if let Some(t) = &vm.template {
                    let resident = t.resident_bytes as f64 / (1 << 20) as f64;
                    out.push(Series {
                        label: "VM template: the QEMUs' USS and the template's RAM (host) *",
                        colour: VM_TEMPLATE_HOST,
                        points: running_mib(
                            vm.copies.iter().map(|c| c.host_mem.map(|m| m.uss_kib)),
                        )
                        .into_iter()
                        .map(|(k, y)| (k, y + resident))
                        .collect(),
                    });
                }
            }
            _ => {
                out.push(Series {
                    label: "VM each: sum of the QEMUs' PSS (host) *",
                    colour: VM_EACH,
                    points: pss(vm),
                });
                // Only a reading taken of every copy is drawn: a partial one is no sum over k.
                let ksm = &vm.ksm;
                if ksm.status == Status::Pass && ksm.per_copy.len() == vm.copies.len() {
                    out.push(Series {
                        label: "VM each, host KSM merging (host) *",
                        colour: VM_KSM,
                        points: running_mib(ksm.per_copy.iter().map(|m| Some(m.pss_kib))),
                    });
                }
            }
        }
    }
    if let Some(idle) = s.vm_columns().iter().find_map(|(_, vm)| vm.idle_guest) {
        out.push(Series {
            label: "VMs running nothing (idle guest's PSS, host) *",
            colour: IDLE_VM,
            points: running_mib((1..=n).map(|_| Some(idle.pss_kib))),
        });
    }
    out
}

/// The series of the latency chart, of the arms run: each copy's fork time in seconds, every
/// design, and each design's reset (its median) across the copies.
pub fn latency_series(s: &Summary) -> Vec<Series> {
    let secs = |xs: &mut dyn Iterator<Item = u64>| -> Vec<(f64, f64)> {
        xs.enumerate()
            .map(|(i, v)| ((i + 1) as f64, v as f64 / 1000.0))
            .collect()
    };
    let across = |ms: f64| {
        vec![
            (1.0, ms / 1000.0),
            (f64::from(s.widest().max(1)), ms / 1000.0),
        ]
    };
    let mut out = Vec::new();
    if s.ran(Arm::Criu) {
        out.push(Series {
            label: "shared-OS: CRIU restore",
            colour: SHARED_OS,
            points: secs(&mut s.shared_os.restore_ms.iter().copied()),
        });
    }
    for (arm, vm) in s.vm_columns() {
        let (resume, colour, reset, reset_colour) = match arm {
            Arm::VmTemplate => (
                "VM template: clone resumed to SSH (host) *",
                VM_TEMPLATE,
                "VM template reset: a clone put back (host) *",
                VM_TEMPLATE_RESET,
            ),
            _ => (
                "VM each: resume to SSH (host) *",
                VM_EACH,
                "VM reset: a copy put back (host) *",
                VM_RESET,
            ),
        };
        out.push(Series {
            label: resume,
            colour,
            points: secs(&mut vm.copies.iter().map(|c| c.resume_ms)),
        });
        if let Some(r) = &vm.reset {
            out.push(Series {
                label: reset,
                colour: reset_colour,
                points: across(r.resume_ms as f64),
            });
        }
    }
    if let (true, Some(ms)) = (s.ran(Arm::Criu), median(&s.shared_os.reset_ms)) {
        out.push(Series {
            label: "shared-OS reset: a copy restored again",
            colour: SHARED_OS_RESET,
            points: across(ms),
        });
    }
    out
}

pub fn memory(s: &Summary) -> Result<String, String> {
    draw(
        (
            "Memory for k desktops (* the host's)",
            "desktops (k)",
            "MiB",
        ),
        0,
        s.widest(),
        &memory_series(s),
    )
}

pub fn latency(s: &Summary) -> Result<String, String> {
    draw(
        ("Fork latency per copy (* the host's)", "copy", "seconds"),
        1,
        s.widest(),
        &latency_series(s),
    )
}

/// A chart of `series` over 1..=copies: its caption and axes' names, and the decimals of
/// the y axis's labels.
fn draw(
    (caption, x_desc, y_desc): (&'static str, &'static str, &'static str),
    y_places: usize,
    copies: u32,
    series: &[Series],
) -> Result<String, String> {
    let n = copies.max(1);
    let top = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .filter(|y| y.is_finite())
        .fold(0.0f64, f64::max);
    let top = if top > 0.0 { top * 1.15 } else { 1.0 };
    let mut svg = String::new();
    {
        let e = |e: DrawingAreaErrorKind<_>| format!("{e}");
        let root = SVGBackend::with_string(&mut svg, SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(e)?;
        let mut c = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 26))
            .margin(12)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.5f64..f64::from(n) + 0.5, 0f64..top)
            .map_err(e)?;
        c.configure_mesh()
            .x_desc(x_desc)
            .y_desc(y_desc)
            .label_style(("sans-serif", 16))
            .y_label_formatter(&|y| format!("{y:.y_places$}"))
            .x_labels(usize::try_from(n.min(16)).unwrap_or(16).saturating_add(1))
            .x_label_formatter(&|x| {
                if x.fract().abs() < 1e-9 {
                    format!("{x:.0}")
                } else {
                    String::new()
                }
            })
            .draw()
            .map_err(e)?;
        for s in series {
            let colour = s.colour;
            c.draw_series(LineSeries::new(
                s.points.iter().copied(),
                colour.stroke_width(3),
            ))
            .map_err(e)?
            .label(s.label)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(3))
            });
            c.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, colour.filled())))
                .map_err(e)?;
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperLeft)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 16))
            .draw()
            .map_err(e)?;
        root.present().map_err(e)?;
    }
    // Inline in HTML an svg element is in the SVG namespace already: the page names no
    // address, not even the namespace's.
    Ok(svg.replacen(" xmlns=\"http://www.w3.org/2000/svg\"", "", 1))
}
