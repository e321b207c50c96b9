//! The comparisons of the `session` workload (an XFCE session): its window manager's current
//! workspace, switched as a pager would and read from the root's `_NET_CURRENT_DESKTOP`, and
//! its settings daemon's XSETTINGS selection.

use super::check;
use crate::report::Check;
use serde_json::json;

/// The live probe asked the window manager to switch to workspace `asked` (of `count`, not the
/// one it showed, `before`), and the root then showed it.
pub fn workspace_switched(
    name: &str,
    before: u32,
    asked: u32,
    count: u32,
    seen: Result<u32, String>,
) -> Check {
    let passed = asked != before && asked < count && seen.as_ref() == Ok(&asked);
    check(
        name,
        passed,
        match &seen {
            Ok(s) => json!({"before": before, "asked": asked, "count": count, "seen": s}),
            Err(e) => json!({"before": before, "asked": asked, "count": count, "error": e}),
        },
        &format!(
            "the root's _NET_CURRENT_DESKTOP moves from {before} to the asked {asked} (of {count})"
        ),
    )
}

/// A copy's current workspace is the dump-time one, which is not the first (the live probe
/// moved away from it, so a fresh session would not show it), and not the one another copy
/// switched to (`switched_elsewhere`, recorded so the reader sees what was looked for).
pub fn same_workspace(
    name: &str,
    dump_time: u32,
    seen: Result<u32, String>,
    switched_elsewhere: Option<u32>,
) -> Check {
    let passed =
        dump_time != 0 && seen.as_ref() == Ok(&dump_time) && switched_elsewhere != Some(dump_time);
    let mut v = match &seen {
        Ok(s) => json!({"dump_time": dump_time, "seen": s}),
        Err(e) => json!({"dump_time": dump_time, "error": e}),
    };
    if let Some(w) = switched_elsewhere {
        v["switched_elsewhere"] = json!(w);
    }
    check(
        name,
        passed,
        v,
        &match switched_elsewhere {
            Some(w) => format!(
                "the dump-time workspace {dump_time} (not the first), not the {w} another copy switched to"
            ),
            None => format!("the dump-time workspace {dump_time} (not the first)"),
        },
    )
}

/// A changed copy shows the workspace it was switched to, not the one it held before.
pub fn workspace_changed(name: &str, before: u32, asked: u32, seen: Result<u32, String>) -> Check {
    let passed = asked != before && seen.as_ref() == Ok(&asked);
    check(
        name,
        passed,
        match &seen {
            Ok(s) => json!({"before": before, "asked": asked, "seen": s}),
            Err(e) => json!({"before": before, "asked": asked, "error": e}),
        },
        &format!("the copy's workspace moved from {before} to the asked {asked}"),
    )
}

/// The settings daemon owns the XSETTINGS selection: the selection has an owner window, and
/// that window publishes the settings (its `_XSETTINGS_SETTINGS` property, as the XSETTINGS
/// specification has the manager do) with `needle` among them: a value only the session's own
/// settings store holds, so the owner serves the session's settings.
pub fn owns_selection(
    name: &str,
    selection: &str,
    owner: Result<Option<(u32, Vec<u8>)>, String>,
    needle: &str,
) -> Check {
    let holds =
        |b: &[u8]| !needle.is_empty() && b.windows(needle.len()).any(|w| w == needle.as_bytes());
    let passed = matches!(&owner, Ok(Some((w, b))) if *w != 0 && holds(b));
    check(
        name,
        passed,
        match &owner {
            Ok(Some((w, b))) => json!({"selection": selection, "owner": w,
                "settings_bytes": b.len(), "holds": holds(b)}),
            Ok(None) => json!({"selection": selection, "owner": null}),
            Err(e) => json!({"selection": selection, "error": e}),
        },
        &format!(
            "the {selection} selection owned by a window whose _XSETTINGS_SETTINGS holds {needle:?}"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_switch_counts_only_when_the_root_shows_another_asked_workspace() {
        assert!(workspace_switched("w", 0, 2, 4, Ok(2)).passed);
        assert!(!workspace_switched("w", 0, 2, 4, Ok(0)).passed);
        assert!(!workspace_switched("w", 2, 2, 4, Ok(2)).passed);
        assert!(!workspace_switched("w", 0, 4, 4, Ok(4)).passed);
        assert!(!workspace_switched("w", 0, 2, 4, Err("gone".into())).passed);
    }

    #[test]
    fn a_copy_keeps_the_dump_time_workspace_and_not_another_copys() {
        assert!(same_workspace("w", 2, Ok(2), None).passed);
        assert!(same_workspace("w", 2, Ok(2), Some(3)).passed);
        // A copy that came back on the first workspace lost the switch: a fresh session.
        assert!(!same_workspace("w", 2, Ok(0), None).passed);
        assert!(!same_workspace("w", 0, Ok(0), None).passed);
        // Copy A's switch seen in B.
        let leaked = same_workspace("b_w", 2, Ok(3), Some(3));
        assert!(!leaked.passed);
        assert_eq!(leaked.value["switched_elsewhere"], 3);
        assert!(!same_workspace("w", 2, Err("no property".into()), None).passed);
        assert!(workspace_changed("c", 2, 3, Ok(3)).passed);
        assert!(!workspace_changed("c", 2, 3, Ok(2)).passed);
        assert!(!workspace_changed("c", 2, 2, Ok(2)).passed);
    }

    #[test]
    fn the_selection_must_be_owned_by_a_window_serving_the_sessions_settings() {
        let n = "Adwaita";
        let served = b"\0\0Net/ThemeName\0\0Adwaita\0".to_vec();
        assert!(owns_selection("s", "_XSETTINGS_S0", Ok(Some((7, served.clone()))), n).passed);
        assert!(!owns_selection("s", "_XSETTINGS_S0", Ok(None), n).passed);
        assert!(!owns_selection("s", "_XSETTINGS_S0", Ok(Some((7, b"Xfce".to_vec()))), n).passed);
        assert!(!owns_selection("s", "_XSETTINGS_S0", Ok(Some((0, served))), n).passed);
        assert!(!owns_selection("s", "_XSETTINGS_S0", Err("x".into()), n).passed);
    }
}
