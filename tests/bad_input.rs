//! Bad input stays cheap: `xtask vm-run --image NAME` for a name that is not an image exits 2
//! at once, says which images exist, builds nothing (not even the gate binary) and archives
//! nothing. Runs in a plain `cargo test`: nothing here boots or builds.

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use std::path::Path;
use std::process::Command;

#[test]
fn vm_run_of_an_unknown_image_exits_2_before_building_anything() {
    let scratch = std::env::temp_dir().join(format!("sharedos-bad-input-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).unwrap();
    let images = Path::new(env!("CARGO_MANIFEST_DIR")).join("images");
    let out_dir = scratch.join("report");
    let cache = scratch.join("cache");
    let xtask = common::xtask_binary();
    for sub in ["vm-run", "vm-exec"] {
        let mut args = vec![
            sub.to_string(),
            "--image".into(),
            "nosuch".into(),
            "--images-dir".into(),
            images.display().to_string(),
            "--cache-dir".into(),
            cache.display().to_string(),
        ];
        if sub == "vm-run" {
            args.extend(["--out".into(), out_dir.display().to_string()]);
        } else {
            args.extend(["--".into(), "true".into()]);
        }
        let started = std::time::Instant::now();
        let out = Command::new(&xtask)
            .args(&args)
            // A gate binary build would run this cargo and fail naming it.
            .env("CARGO", scratch.join("no-cargo-here"))
            .current_dir(&scratch)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{sub}: {stderr}");
        assert!(stderr.contains("no image \"nosuch\""), "{sub}: {stderr}");
        assert!(
            stderr.contains("bookworm"),
            "{sub}: the images are not listed: {stderr}"
        );
        assert!(
            !stderr.contains("no-cargo-here"),
            "{sub}: built something: {stderr}"
        );
        assert!(
            !stderr.contains("building"),
            "{sub}: built something: {stderr}"
        );
        assert!(
            out.stdout.is_empty(),
            "{sub}: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        assert!(!out_dir.exists(), "{sub}: archived a report");
        assert!(!cache.exists(), "{sub}: touched the cache");
        assert!(
            !scratch.join("reports").exists(),
            "{sub}: archived a report"
        );
        assert!(
            started.elapsed().as_secs() < 10,
            "{sub}: took {:?}",
            started.elapsed()
        );
    }
    std::fs::remove_dir_all(&scratch).unwrap();
}
