//! The image builder's host tools: which package provides each, and which are missing.

// The builder's commands and progress are the crate's one command and progress type.
pub use crate::cmd::{capture, run, succeeds, Cmd};
pub use crate::progress::{Progress, Stage};

/// Host tools and the Debian/Ubuntu package that provides each.
pub const TOOL_PACKAGES: &[(&str, &str)] = &[
    ("mmdebstrap", "mmdebstrap"),
    ("genext2fs", "genext2fs"),
    ("tar", "tar"),
    ("apt-get", "apt"),
    ("dpkg", "dpkg"),
    ("gpgv", "gpgv"),
    ("unshare", "util-linux"),
    ("newuidmap", "uidmap"),
    ("newgidmap", "uidmap"),
    ("fakechroot", "fakechroot"),
    ("fakeroot", "fakeroot"),
];

/// Names every missing tool with the package to install.
pub fn missing_tools(tools: &[&str]) -> Vec<String> {
    tools
        .iter()
        .filter(|t| sharedos_report::which::find_program(t).is_none())
        .map(|t| {
            let pkg = TOOL_PACKAGES
                .iter()
                .find(|(n, _)| n == t)
                .map(|(_, p)| *p)
                .unwrap_or(t);
            format!("{t} (apt install {pkg})")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_tools_name_their_package() {
        let m = missing_tools(&["sh", "newuidmap-surely-absent", "genext2fs-nope"]);
        assert_eq!(m.len(), 2);
        assert!(m[0].contains("newuidmap-surely-absent"));
        let m = missing_tools(&["sh"]);
        assert!(m.is_empty());
        assert!(TOOL_PACKAGES.contains(&("newuidmap", "uidmap")));
    }
}
