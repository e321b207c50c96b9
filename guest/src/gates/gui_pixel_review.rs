//! gui_pixel_review: a pixel hash is not evidence of application state, so this gate waits for a
//! human who looks at every PNG and records a decision citing their sha256.

use super::Ctx;
use serde_json::json;
use sharedos_report::report::{Gate, GateName, Status};

pub fn run(ctx: &mut Ctx) -> Gate {
    let dir = ctx.cfg.report_dir();
    let mut pngs: Vec<String> = std::fs::read_dir(dir.join("png"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_str().map(|n| format!("png/{n}")))
                .filter(|n| n.ends_with(".png"))
                .collect()
        })
        .unwrap_or_default();
    pngs.sort();
    if pngs.is_empty() {
        return Gate::new(
            GateName::GuiPixelReview,
            Status::NotRun,
            "no PNG was captured, so there is nothing to review",
        );
    }
    let mut g = Gate::new(
        GateName::GuiPixelReview,
        Status::ReviewRequired,
        // The report directory is named generically: after vm-run it lives on another machine.
        format!(
            "a human must look at the {} PNGs and record a decision citing their sha256: `sharedos-rig review REPORT_DIR --decision pass|fail --reviewer NAME`",
            pngs.len()
        ),
    );
    g.data.insert("pngs".into(), json!(pngs));
    g
}
