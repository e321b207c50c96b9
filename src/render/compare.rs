//! A comparison (`compare.json`) as people read it: a column per arm it ran (CRIU, VM each, VM
//! template) side by side, per copy and per desktop, with each VM column's ratio against the
//! CRIU one and the accelerator that ran; an arm not run has no column and is said to be not
//! run. [`text`] is what vm-compare prints as it ends; `show` renders a comparison judged again
//! from its reports ([`show_text`], [`md`], [`html`] with two charts) and `diff` holds two of
//! them figure by figure ([`diff`]). Presentation only: the verdict, problems and warnings are
//! the judge's.
//!
//! Every string that came from compare.json or a report (the image, the accelerator, labels,
//! problems, warnings, the columns' descriptions, the template's features and what it keeps off)
//! is escaped for its format; the charts carry only fixed labels and numbers.

use crate::judge::compare::Summary;

fn mib(kib: f64) -> String {
    format!("{:.1} MiB", kib / 1024.0)
}

fn ms(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |m| format!("{:.2} s", m / 1000.0))
}

/// `b` against `a` as "1:x".
fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if a > 0.0 => format!("1:{:.1}", b / a),
        _ => "n/a".into(),
    }
}

/// The mark of a figure only the host holds, or of one computed from such a figure: compare.json
/// is its only record, so a reader must be able to tell it from a report's figure in every form.
/// Every form shows it as itself (Markdown escapes it to stay literal).
pub const HOST_MARK: &str = "*";

/// `figure` marked as the host's; no figure ("n/a", nothing) is left as it is.
fn host(figure: String) -> String {
    if figure.is_empty() || figure == "n/a" {
        figure
    } else {
        format!("{figure} {HOST_MARK}")
    }
}

mod diff;
mod page;
mod table;
mod text;

/// The page's two charts, drawn with plotters into SVG. Only fixed labels and numbers reach
/// them, so nothing from compare.json is drawn as text.
pub mod chart;

pub use diff::diff;
pub use page::html;
pub use text::{md, show_text, text};

#[cfg(test)]
mod tests;
