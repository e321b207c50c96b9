//! A scratch directory removed when the test ends, pass or fail: the report-directory tests
//! (tests/adversarial, tests/cli_reports, tests/forged_archives, tests/workflow) write their
//! constructed archives and stand-ins there.

use std::path::PathBuf;

/// A directory of its own under the temp dir, named by the test binary, the process and `name`,
/// so that no two tests (nor two binaries run at once) share one.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(name: &str) -> Scratch {
        let p = std::env::temp_dir().join(format!(
            "sharedos-rig-{}-{}-{name}",
            env!("CARGO_CRATE_NAME"),
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    /// `rel` under the directory.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
