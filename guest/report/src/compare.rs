//! Every comparison a gate makes, as a pure function from what was observed to a check that
//! records the observed value and the expected one. The gates only gather observations; tests
//! feed these functions observations that must fail.

use crate::clock::millis as ms;
use crate::model::app::{is_token, AppState};
use crate::model::screen::{TopLevel, Window};
use crate::model::tree::{MarkedProcess, Observation, TreeRecord};
use crate::report::Check;
use serde_json::{json, Value};
use std::collections::BTreeSet;
use std::time::Duration;

pub mod session;

pub fn check(name: &str, passed: bool, value: Value, expected: &str) -> Check {
    Check {
        name: name.to_string(),
        passed,
        value,
        expected: expected.to_string(),
    }
}

/// The app's counter ticks every 100 ms.
pub const TICK_MS: u64 = 100;
/// Ticks allowed beyond the wall time since the dump-time query: rounding at both ends and
/// the clock offset a restored time namespace may carry.
pub const COUNTER_SLACK: u64 = 50;

/// The range a restored counter may hold: never below the dump-time value (a restart would
/// reset it), never above the ticks that fit in the wall time since the dump-time query was
/// sent (a mutate jumps it by a million). None when the top of the range does not fit in a
/// u64: the values came from a guest, and a counter that close to the end is no real one.
pub fn counter_range(dump_counter: u64, since_dump_query: Duration) -> Option<(u64, u64)> {
    let ticks = u64::try_from(since_dump_query.as_millis() / u128::from(TICK_MS)).ok()?;
    let max = dump_counter
        .checked_add(ticks)?
        .checked_add(COUNTER_SLACK)?;
    Some((dump_counter, max))
}

pub fn token_is_32_hex(token: &str) -> Check {
    check(
        "token_is_32_hex",
        is_token(token),
        json!(token),
        "32 lowercase hex digits",
    )
}

/// A MAC address as Linux prints it: six lowercase hex pairs joined by colons.
pub fn is_mac(s: &str) -> bool {
    let parts: Vec<&str> = s.split(':').collect();
    parts.len() == 6
        && parts.iter().all(|p| {
            p.len() == 2
                && p.chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c))
        })
}

/// A VM copy's network card has a MAC of its own: another than the saved guest's, which every
/// copy of the save comes up with.
pub fn own_mac(name: &str, fork_time: &str, seen: &str) -> Check {
    check(
        name,
        is_mac(fork_time) && is_mac(seen) && seen != fork_time,
        json!({"fork_time": fork_time, "seen": seen}),
        &format!("a MAC address other than the saved guest's {fork_time}"),
    )
}

pub fn same_token(name: &str, dump_time: &str, seen: &str) -> Check {
    check(
        name,
        !dump_time.is_empty() && seen == dump_time,
        json!({"dump_time": dump_time, "seen": seen}),
        &format!("the dump-time token {dump_time}"),
    )
}

/// A restored counter continues from the dump-time value.
pub fn counter_continues(
    name: &str,
    dump_counter: u64,
    since_dump_query: Duration,
    seen: u64,
) -> Check {
    let Some((min, max)) = counter_range(dump_counter, since_dump_query) else {
        return check(
            name,
            false,
            json!({"dump_time": dump_counter, "seen": seen,
                   "ms_since_dump_query": ms(since_dump_query)}),
            "a dump-time counter and elapsed time whose range fits in 64 bits",
        );
    };
    check(
        name,
        (min..=max).contains(&seen),
        json!({"dump_time": dump_counter, "seen": seen, "min": min, "max": max,
               "ms_since_dump_query": ms(since_dump_query)}),
        &format!("between {min} (the dump-time value) and {max} (plus the ticks since the dump-time query)"),
    )
}

/// A second query of the same app: the counter moved on and the token did not change.
pub fn counter_advances(name: &str, first: &AppState, second: Result<&AppState, String>) -> Check {
    let passed = second
        .as_ref()
        .is_ok_and(|s| s.counter > first.counter && s.token == first.token);
    let seen = match &second {
        Ok(s) => json!({"first": first.counter, "second": s.counter,
                        "first_token": first.token, "second_token": s.token}),
        Err(e) => json!({"first": first.counter, "second": null, "error": e}),
    };
    check(
        name,
        passed,
        seen,
        &format!(
            "a second query answers a counter above {} with the same token {}",
            first.counter, first.token
        ),
    )
}

/// Exactly one mapped top-level window, and it has the title.
pub fn one_mapped_window_titled(windows: &[Window], title: &str) -> Check {
    let passed = windows.len() == 1 && windows[0].title == title;
    check(
        "one_mapped_window_titled",
        passed,
        json!({"mapped_toplevels": windows}),
        &format!("exactly one mapped top-level window, titled {title}"),
    )
}

pub fn same_windows(name: &str, dump_time: &[Window], seen: &[Window]) -> Check {
    check(
        name,
        !dump_time.is_empty() && seen == dump_time,
        json!({"dump_time": dump_time, "seen": seen}),
        &format!(
            "the dump-time mapped top-level windows {}",
            window_list(dump_time)
        ),
    )
}

fn window_list(ws: &[Window]) -> String {
    let items: Vec<String> = ws
        .iter()
        .map(|w| {
            format!(
                "0x{:x} {:?} {}x{}+{}+{}",
                w.id, w.title, w.width, w.height, w.x, w.y
            )
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// Framebuffers compare by pixel hash; both PNGs are named so a reader can look.
pub fn same_framebuffer(
    name: &str,
    want: (&str, &str),
    seen: (&str, &str),
    expected_words: &str,
) -> Check {
    let ((want_sha, want_png), (seen_sha, seen_png)) = (want, seen);
    check(
        name,
        !want_sha.is_empty() && want_sha == seen_sha,
        json!({"expected_sha256": want_sha, "expected_png": want_png,
               "seen_sha256": seen_sha, "seen_png": seen_png}),
        &format!("{expected_words}: pixel sha256 {want_sha}"),
    )
}

pub fn framebuffer_changed(name: &str, before: (&str, &str), after: (&str, &str)) -> Check {
    let ((b_sha, b_png), (a_sha, a_png)) = (before, after);
    check(
        name,
        !b_sha.is_empty() && !a_sha.is_empty() && a_sha != b_sha,
        json!({"before_sha256": b_sha, "before_png": b_png, "after_sha256": a_sha, "after_png": a_png}),
        &format!("pixels that differ from {b_sha}"),
    )
}

/// A copy after our change: it answers the token its mutate returned (not the dump-time one), a
/// counter jumped by the mutate, and shows the drawn mark in pixels that differ from the dump's.
pub fn copy_changed(
    name: &str,
    mutate_reply: Option<&AppState>,
    seen: &Observation,
    dump: &Observation,
) -> Check {
    // A dump-time counter with no room for the jump cannot be followed by a jumped one.
    let jumped = dump.app.counter.checked_add(MUTATE_JUMP);
    let passed = mutate_reply.is_some_and(|m| m.token == seen.app.token)
        && seen.app.token != dump.app.token
        && jumped.is_some_and(|j| seen.app.counter >= j)
        && seen.mark_drawn
        && seen.frame_sha256 != dump.frame_sha256;
    check(
        name,
        passed,
        json!({"mutate_reply": mutate_reply, "token": seen.app.token, "counter": seen.app.counter,
               "mark_drawn": seen.mark_drawn, "framebuffer_sha256": seen.frame_sha256, "png": seen.png,
               "dump_time_token": dump.app.token, "dump_time_framebuffer_sha256": dump.frame_sha256}),
        &format!(
            "the token the mutate returned (not the dump-time {}), a counter of at least {}, and the red mark drawn",
            dump.app.token,
            jumped.map_or("(more than 64 bits hold)".to_string(), |j| j.to_string())
        ),
    )
}

/// The editor holds exactly the text typed into it, read back over the X wire.
pub fn editor_holds_typed(name: &str, typed: &str, read: Result<&str, String>) -> Check {
    let passed = !typed.is_empty() && read.as_deref() == Ok(typed);
    check(
        name,
        passed,
        match &read {
            Ok(t) => json!({"typed": typed, "read": t}),
            Err(e) => json!({"typed": typed, "error": e}),
        },
        &format!("the editor's whole text read back is the typed {typed:?}"),
    )
}

/// A copy's editor holds the dump-time text: not empty, the very text, and so none of what was
/// typed into another copy (`typed_elsewhere`, recorded so the reader sees what was looked for).
pub fn editor_same_text(
    name: &str,
    dump_time: &str,
    seen: Result<&str, String>,
    typed_elsewhere: Option<&str>,
) -> Check {
    let leaked = match (&seen, typed_elsewhere) {
        (Ok(s), Some(t)) => t.is_empty() || s.contains(t),
        _ => false,
    };
    let passed = !dump_time.is_empty() && seen.as_deref() == Ok(dump_time) && !leaked;
    let mut v = match &seen {
        Ok(s) => json!({"dump_time": dump_time, "seen": s}),
        Err(e) => json!({"dump_time": dump_time, "error": e}),
    };
    if let Some(t) = typed_elsewhere {
        v["typed_elsewhere"] = json!(t);
        v["typed_elsewhere_seen"] = json!(leaked);
    }
    check(
        name,
        passed,
        v,
        &match typed_elsewhere {
            Some(t) => format!("the dump-time editor text {dump_time:?}, without {t:?}"),
            None => format!("the dump-time editor text {dump_time:?}"),
        },
    )
}

/// A copy's editor after `typed` was typed at the end of its text: the dump-time text followed
/// by it, and nothing else.
pub fn editor_changed(
    name: &str,
    dump_time: &str,
    typed: &str,
    seen: Result<&str, String>,
) -> Check {
    let want = format!("{dump_time}{typed}");
    let passed = !dump_time.is_empty() && !typed.is_empty() && seen.as_deref() == Ok(want.as_str());
    check(
        name,
        passed,
        match &seen {
            Ok(s) => json!({"dump_time": dump_time, "typed": typed, "seen": s}),
            Err(e) => json!({"dump_time": dump_time, "typed": typed, "error": e}),
        },
        &format!("the dump-time text with the typed change at its end: {want:?}"),
    )
}

/// The page's field (`chromium`'s page) holds exactly the text typed into it, as the page's
/// title shows it: the editor's comparison, on the field, with the same recorded value.
pub fn page_field_holds_typed(name: &str, typed: &str, read: Result<&str, String>) -> Check {
    let mut c = editor_holds_typed(name, typed, read);
    c.expected = format!("the page's field, as its title shows it, holds the typed {typed:?}");
    c
}

/// A copy's page field holds the dump-time text, and none of what was typed into another copy.
pub fn page_field_same_text(
    name: &str,
    dump_time: &str,
    seen: Result<&str, String>,
    typed_elsewhere: Option<&str>,
) -> Check {
    let mut c = editor_same_text(name, dump_time, seen, typed_elsewhere);
    c.expected = match typed_elsewhere {
        Some(t) => format!("the dump-time field text {dump_time:?}, without {t:?}"),
        None => format!("the dump-time field text {dump_time:?}"),
    };
    c
}

/// A copy's page field after `typed` was typed at its end: the text before, then it.
pub fn page_field_changed(
    name: &str,
    before: &str,
    typed: &str,
    seen: Result<&str, String>,
) -> Check {
    let mut c = editor_changed(name, before, typed, seen);
    c.expected = format!("the field's text with the typed change at its end: {before:?}{typed:?}");
    c
}

/// With a window manager: its supporting window is there and names `wm`.
pub fn window_manager_running(name: &str, seen: Result<Option<String>, String>, wm: &str) -> Check {
    let passed = matches!(&seen, Ok(Some(n)) if n == wm);
    check(
        name,
        passed,
        match &seen {
            Ok(n) => json!({"supporting_wm_check_name": n}),
            Err(e) => json!({"error": e}),
        },
        &format!("the root window's _NET_SUPPORTING_WM_CHECK names a window called {wm}"),
    )
}

/// Exactly one mapped top-level window holds a client of `class`, and it is managed (a client
/// with WM_STATE below the top level).
pub fn one_managed_window_of_class(name: &str, tops: &[TopLevel], class: &str) -> Check {
    let of_class: Vec<&TopLevel> = tops.iter().filter(|t| t.class == class).collect();
    let passed = of_class.len() == 1 && of_class[0].client.is_some();
    check(
        name,
        passed,
        json!({"mapped_toplevels": tops}),
        &format!("exactly one mapped top-level window, holding a managed client of class {class}"),
    )
}

/// Exactly one mapped top-level window whose title shows the page's state.
pub fn one_window_showing_page(name: &str, tops: &[TopLevel]) -> Check {
    let showing: Vec<&TopLevel> = tops
        .iter()
        .filter(|t| crate::model::app::parse_page_title(&t.window.title).is_some())
        .collect();
    check(
        name,
        showing.len() == 1,
        json!({"mapped_toplevels": tops}),
        &format!(
            "exactly one mapped top-level window whose title holds `{} TOKEN COUNTER`",
            crate::model::app::PAGE_TITLE_WORD
        ),
    )
}

/// What the app's `mutate` adds to its counter.
pub const MUTATE_JUMP: u64 = 1_000_000;

/// The processes of one kind a check asks for: at least one, every one of them inside the
/// tree's pid namespace.
pub fn processes_in_tree(
    name: &str,
    found: &[&MarkedProcess],
    tree_pidns: Option<&str>,
    what: &str,
) -> Check {
    let inside = |p: &&&MarkedProcess| tree_pidns.is_some_and(|ns| p.in_pidns(ns));
    let n_inside = found.iter().filter(inside).count();
    let outside: Vec<Value> = found
        .iter()
        .filter(|p| !inside(p))
        .map(|p| json!({"pid": p.pid, "pidns": p.pidns}))
        .collect();
    check(
        name,
        n_inside > 0 && outside.is_empty(),
        json!({"processes": found.iter().map(|p| json!({"pid": p.pid, "ns_pid": p.ns_pid,
                   "cmdline": p.cmdline, "marker_in": p.marker_in, "pidns": p.pidns}))
                   .collect::<Vec<_>>(),
               "outside_the_tree": outside}),
        &format!(
            "{what}, carrying the marker, inside the tree's pid namespace {} (or one nested in it)",
            tree_pidns.unwrap_or("(unknown)")
        ),
    )
}

/// The census: every process that carries the marker is inside the tree's pid namespace.
pub fn all_marked_in_tree(marked: &[MarkedProcess], tree_pidns: Option<&str>) -> Check {
    let outside: Vec<Value> = marked
        .iter()
        .filter(|p| !tree_pidns.is_some_and(|ns| p.in_pidns(ns)))
        .map(|p| json!({"pid": p.pid, "program": p.program(), "pidns": p.pidns}))
        .collect();
    check(
        "marked_processes_in_tree",
        tree_pidns.is_some() && !marked.is_empty() && outside.is_empty(),
        json!({"marked": marked.len(), "outside_the_tree": outside}),
        &format!(
            "every process carrying the marker inside {} (or a pid namespace nested in it)",
            tree_pidns.unwrap_or("(unknown)")
        ),
    )
}

/// A copy's X server is a process of that copy: the peer of its socket runs in the copy's
/// pid namespace.
pub fn x_server_in_tree(
    name: &str,
    socket: &str,
    peer: Result<(i32, String), String>,
    tree_pidns: Option<&str>,
) -> Check {
    let passed = match (&peer, tree_pidns) {
        (Ok((_, ns)), Some(want)) => ns == want,
        _ => false,
    };
    let seen = match &peer {
        Ok((pid, ns)) => json!({"socket": socket, "server_pid": pid, "server_pidns": ns}),
        Err(e) => json!({"socket": socket, "error": e}),
    };
    check(
        name,
        passed,
        seen,
        &format!(
            "an X server answering on {socket} from inside the pid namespace {}",
            tree_pidns.unwrap_or("(unknown)")
        ),
    )
}

/// A restore hands back a new tree: neither its PID 1 nor its pid namespace belongs to another
/// tree still running.
pub fn fresh_copy(name: &str, copy: &TreeRecord, others: &[TreeRecord]) -> Check {
    let clashes: Vec<&TreeRecord> = others
        .iter()
        .filter(|o| o.pid == copy.pid || (copy.pidns.is_some() && o.pidns == copy.pidns))
        .collect();
    check(
        name,
        copy.pidns.is_some() && clashes.is_empty(),
        json!({"copy": copy, "running_beside_it": others, "same_as": clashes}),
        "a new tree: a PID 1 and pid namespace no other running tree has",
    )
}

/// The processes CRIU recorded (its pstree, pids inside the tree's namespace) against the
/// processes seen in the tree at dump time.
pub fn pstree_matches(recorded: &BTreeSet<i32>, seen: &BTreeSet<i32>) -> Check {
    let missing: Vec<i32> = seen.difference(recorded).copied().collect();
    let extra: Vec<i32> = recorded.difference(seen).copied().collect();
    check(
        "pstree_matches_tree",
        !seen.is_empty() && missing.is_empty() && extra.is_empty(),
        json!({"recorded_by_criu": recorded, "seen_at_dump_time": seen,
               "seen_not_recorded": missing, "recorded_not_seen": extra}),
        &format!(
            "CRIU's pstree holds exactly the tree's processes {seen:?} (pids inside the tree)"
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(token: &str, counter: u64) -> AppState {
        AppState {
            file: None,
            token: token.into(),
            counter,
            pid: 3,
        }
    }

    fn win(id: u32, title: &str) -> Window {
        Window {
            id,
            title: title.into(),
            x: 0,
            y: 0,
            width: 484,
            height: 316,
        }
    }

    fn marked(pid: i32, pidns: Option<&str>) -> MarkedProcess {
        MarkedProcess {
            pid,
            ppid: 1,
            comm: "Xvfb".into(),
            cmdline: vec!["Xvfb".into(), ":170".into()],
            marker_in: vec!["environ".into()],
            pidns: pidns.map(str::to_string),
            ns_pid: Some(2),
            pidns_parents: Vec::new(),
        }
    }

    const T: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn token_shape_and_equality() {
        assert!(token_is_32_hex(T).passed);
        assert!(!token_is_32_hex(&T.to_uppercase()).passed);
        assert!(!token_is_32_hex("").passed);
        assert!(same_token("t", T, T).passed);
        let other = "f123456789abcdef0123456789abcdef";
        let c = same_token("t", T, other);
        assert!(!c.passed);
        assert_eq!(c.value["seen"], other);
        assert!(c.expected.contains(T));
        assert!(
            !same_token("t", "", "").passed,
            "two empty tokens prove nothing"
        );
    }

    #[test]
    fn counter_must_not_restart_nor_jump() {
        let since = Duration::from_secs(3);
        assert!(counter_continues("c", 100, since, 100).passed);
        assert!(counter_continues("c", 100, since, 130).passed);
        assert!(counter_continues("c", 100, since, 180).passed);
        let restarted = counter_continues("c", 100, since, 4);
        assert!(!restarted.passed);
        assert_eq!(restarted.value["min"], 100);
        assert!(!counter_continues("c", 100, since, 99).passed);
        let jumped = counter_continues("c", 100, since, 1_000_100);
        assert!(!jumped.passed);
        assert_eq!(jumped.value["max"], 180);
        assert!(!counter_continues("c", 100, since, 181).passed);
    }

    /// The values are the guest's: a counter at the end of u64 fails the check instead of
    /// overflowing (a panic in a debug build, a wrapped range in a release one).
    #[test]
    fn counters_near_u64_max_fail_instead_of_overflowing() {
        let since = Duration::from_secs(2);
        assert_eq!(counter_range(u64::MAX - 5, since), None);
        assert_eq!(
            counter_range(u64::MAX - 70, since),
            Some((u64::MAX - 70, u64::MAX))
        );
        assert_eq!(counter_range(0, Duration::MAX), None);
        let c = counter_continues("c", u64::MAX - 5, since, u64::MAX - 3);
        assert!(!c.passed);
        assert!(c.expected.contains("64 bits"), "{}", c.expected);
        let at_end = obs(T, u64::MAX - 1, "aa", false);
        let changed = obs("f123456789abcdef0123456789abcdef", u64::MAX, "bb", true);
        let reply = app("f123456789abcdef0123456789abcdef", u64::MAX);
        let c = copy_changed("c", Some(&reply), &changed, &at_end);
        assert!(!c.passed);
        assert!(c.expected.contains("more than 64 bits"), "{}", c.expected);
    }

    #[test]
    fn counter_advance_needs_a_larger_counter_and_the_same_token() {
        let a = app(T, 10);
        assert!(counter_advances("c", &a, Ok(&app(T, 11))).passed);
        assert!(!counter_advances("c", &a, Ok(&app(T, 10))).passed);
        assert!(!counter_advances("c", &a, Ok(&app(T, 9))).passed);
        let swapped = counter_advances("c", &a, Ok(&app("f".repeat(32).as_str(), 11)));
        assert!(!swapped.passed, "a new token is another app, not a tick");
        assert!(!counter_advances("c", &a, Err("timed out".into())).passed);
    }

    #[test]
    fn exactly_one_mapped_window_with_the_title() {
        assert!(one_mapped_window_titled(&[win(1, "sharedos-spike")], "sharedos-spike").passed);
        assert!(!one_mapped_window_titled(&[], "sharedos-spike").passed);
        assert!(!one_mapped_window_titled(&[win(1, "other")], "sharedos-spike").passed);
        let extra = [win(1, "sharedos-spike"), win(2, "popup")];
        assert!(!one_mapped_window_titled(&extra, "sharedos-spike").passed);
        let twice = [win(1, "sharedos-spike"), win(2, "sharedos-spike")];
        assert!(!one_mapped_window_titled(&twice, "sharedos-spike").passed);
    }

    #[test]
    fn window_lists_compare_in_full() {
        let dump = [win(0x40_0001, "sharedos-spike")];
        assert!(same_windows("w", &dump, &dump).passed);
        assert!(!same_windows("w", &dump, &[]).passed);
        assert!(!same_windows("w", &dump, &[win(0x40_0002, "sharedos-spike")]).passed);
        assert!(!same_windows("w", &dump, &[win(0x40_0001, "renamed")]).passed);
        let mut moved = win(0x40_0001, "sharedos-spike");
        moved.x = 5;
        assert!(!same_windows("w", &dump, &[moved]).passed);
        assert!(!same_windows("w", &dump, &[dump[0].clone(), win(7, "x")]).passed);
        assert!(!same_windows("w", &[], &[]).passed, "nothing to compare");
    }

    #[test]
    fn framebuffer_hashes() {
        let a = ("aa", "png/a.png");
        let b = ("bb", "png/b.png");
        assert!(same_framebuffer("f", a, ("aa", "png/x.png"), "same").passed);
        let c = same_framebuffer("f", a, b, "same");
        assert!(!c.passed);
        assert_eq!(c.value["seen_png"], "png/b.png");
        assert!(!same_framebuffer("f", ("", ""), ("", ""), "same").passed);
        assert!(framebuffer_changed("d", a, b).passed);
        assert!(!framebuffer_changed("d", a, a).passed);
        assert!(!framebuffer_changed("d", ("", ""), b).passed);
    }

    fn obs(token: &str, counter: u64, sha: &str, mark: bool) -> Observation {
        Observation {
            app: app(token, counter),
            app_asked_at: std::time::Instant::now(),
            windows: vec![win(1, "sharedos-spike")],
            frame_sha256: sha.into(),
            mark_drawn: mark,
            png: "png/x.png".into(),
            editor_text: None,
            page: None,
            workspace: None,
        }
    }

    #[test]
    fn the_editor_must_hold_what_was_typed_and_only_that() {
        let typed = "sharedos 0123";
        assert!(editor_holds_typed("e", typed, Ok(typed)).passed);
        assert!(!editor_holds_typed("e", typed, Ok("sharedos 012")).passed);
        assert!(!editor_holds_typed("e", typed, Ok("")).passed, "lost text");
        assert!(!editor_holds_typed("e", typed, Err("no owner".into())).passed);
        assert!(
            !editor_holds_typed("e", "", Ok("")).passed,
            "nothing typed proves nothing"
        );

        assert!(editor_same_text("s", typed, Ok(typed), None).passed);
        assert!(editor_same_text("s", typed, Ok(typed), Some(" change-a")).passed);
        let lost = editor_same_text("s", typed, Ok(""), None);
        assert!(!lost.passed);
        assert_eq!(lost.value["seen"], "");
        let leaked = editor_same_text("s", typed, Ok("sharedos 0123 change-a"), Some(" change-a"));
        assert!(!leaked.passed);
        assert_eq!(leaked.value["typed_elsewhere_seen"], true);
        assert!(!editor_same_text("s", "", Ok(""), None).passed);
        assert!(!editor_same_text("s", typed, Err("timeout".into()), None).passed);
        assert!(!editor_same_text("s", typed, Ok(typed), Some("")).passed);

        assert!(editor_changed("c", typed, " change", Ok("sharedos 0123 change")).passed);
        assert!(
            !editor_changed("c", typed, " change", Ok(typed)).passed,
            "change lost"
        );
        assert!(!editor_changed("c", typed, " change", Ok(" change")).passed);
        assert!(!editor_changed("c", typed, "", Ok(typed)).passed);
        assert!(!editor_changed("c", typed, " change", Err("x".into())).passed);
    }

    #[test]
    fn the_page_field_must_hold_what_was_typed_and_stay_each_copy_s_own() {
        let typed = "0123456789abcdef";
        assert!(page_field_holds_typed("f", typed, Ok(typed)).passed);
        let lost = page_field_holds_typed("f", typed, Ok(""));
        assert!(!lost.passed);
        assert!(lost.expected.contains("field"), "{}", lost.expected);
        assert!(!page_field_holds_typed("f", typed, Ok("0123456789abcde")).passed);
        assert!(!page_field_holds_typed("f", typed, Err("no title".into())).passed);
        assert!(!page_field_holds_typed("f", "", Ok("")).passed);

        assert!(page_field_same_text("s", typed, Ok(typed), Some("-changed-ab")).passed);
        let leaked = page_field_same_text(
            "s",
            typed,
            Ok("0123456789abcdef-changed-ab"),
            Some("-changed-ab"),
        );
        assert!(!leaked.passed);
        assert_eq!(leaked.value["typed_elsewhere_seen"], true);
        assert!(!page_field_same_text("s", typed, Ok(""), None).passed);
        assert!(!page_field_same_text("s", typed, Err("x".into()), None).passed);

        assert!(page_field_changed("c", typed, "-ch", Ok("0123456789abcdef-ch")).passed);
        assert!(!page_field_changed("c", typed, "-ch", Ok(typed)).passed);
        assert!(!page_field_changed("c", typed, "-ch", Err("x".into())).passed);
    }

    #[test]
    fn the_window_manager_and_the_managed_editor_window() {
        assert!(window_manager_running("w", Ok(Some("Openbox".into())), "Openbox").passed);
        assert!(!window_manager_running("w", Ok(None), "Openbox").passed);
        assert!(!window_manager_running("w", Ok(Some("xfwm4".into())), "Openbox").passed);
        assert!(!window_manager_running("w", Err("x".into()), "Openbox").passed);
        let top = |id: u32, class: &str, client: Option<u32>| TopLevel {
            window: win(id, ""),
            client,
            class: class.into(),
        };
        let wm = top(1, "", None);
        let ed = top(2, "Mousepad", Some(3));
        assert!(one_managed_window_of_class("e", &[wm.clone(), ed.clone()], "Mousepad").passed);
        assert!(!one_managed_window_of_class("e", std::slice::from_ref(&wm), "Mousepad").passed);
        assert!(
            !one_managed_window_of_class(
                "e",
                &[ed.clone(), top(4, "Mousepad", Some(5))],
                "Mousepad"
            )
            .passed
        );
        assert!(!one_managed_window_of_class("e", &[top(2, "Mousepad", None)], "Mousepad").passed);
        let page = |id: u32, title: &str| TopLevel {
            window: win(id, title),
            client: Some(id),
            class: "firefox-esr".into(),
        };
        let shown = page(1, &format!("sharedos-page {T} 7 - Mozilla Firefox"));
        assert!(one_window_showing_page("p", std::slice::from_ref(&shown)).passed);
        assert!(!one_window_showing_page("p", &[page(1, "Mozilla Firefox")]).passed);
        assert!(!one_window_showing_page("p", &[shown.clone(), shown]).passed);
    }

    #[test]
    fn a_change_must_be_seen_in_app_and_pixels() {
        let new = "f123456789abcdef0123456789abcdef";
        let dump = obs(T, 40, "aa", false);
        let reply = app(new, 1_000_041);
        let changed = obs(new, 1_000_045, "bb", true);
        assert!(copy_changed("c", Some(&reply), &changed, &dump).passed);
        assert!(
            !copy_changed("c", None, &changed, &dump).passed,
            "no mutate answered"
        );
        let unchanged = obs(T, 45, "aa", false);
        assert!(!copy_changed("c", Some(&reply), &unchanged, &dump).passed);
        let no_jump = obs(new, 45, "bb", true);
        assert!(!copy_changed("c", Some(&reply), &no_jump, &dump).passed);
        let no_mark = obs(new, 1_000_045, "bb", false);
        assert!(!copy_changed("c", Some(&reply), &no_mark, &dump).passed);
        let same_pixels = obs(new, 1_000_045, "aa", true);
        assert!(!copy_changed("c", Some(&reply), &same_pixels, &dump).passed);
        let other_token = obs("e123456789abcdef0123456789abcdef", 1_000_045, "bb", true);
        assert!(!copy_changed("c", Some(&reply), &other_token, &dump).passed);
    }

    #[test]
    fn processes_must_be_inside_the_tree_namespace() {
        let ns = Some("pid:[4026532301]");
        let inside = marked(10, ns);
        let elsewhere = marked(11, Some("pid:[4026531836]"));
        let unread = marked(12, None);
        assert!(processes_in_tree("x", &[&inside], ns, "an Xvfb").passed);
        assert!(!processes_in_tree("x", &[], ns, "an Xvfb").passed);
        assert!(!processes_in_tree("x", &[&elsewhere], ns, "an Xvfb").passed);
        let mixed = processes_in_tree("x", &[&inside, &elsewhere], ns, "an Xvfb");
        assert!(!mixed.passed);
        assert_eq!(mixed.value["outside_the_tree"][0]["pid"], 11);
        assert!(!processes_in_tree("x", &[&inside, &unread], ns, "an Xvfb").passed);
        assert!(!processes_in_tree("x", &[&inside], None, "an Xvfb").passed);
        // A sandbox's process in a pid namespace nested in the tree's is the tree's; one
        // nested in another namespace is not.
        let mut nested = marked(13, Some("pid:[4026532400]"));
        nested.pidns_parents = vec!["pid:[4026532301]".into(), "pid:[4026531836]".into()];
        assert!(processes_in_tree("x", &[&inside, &nested], ns, "an Xvfb").passed);
        assert!(all_marked_in_tree(&[inside.clone(), nested.clone()], ns).passed);
        nested.pidns_parents = vec!["pid:[4026532999]".into(), "pid:[4026531836]".into()];
        assert!(!processes_in_tree("x", &[&inside, &nested], ns, "an Xvfb").passed);
        assert!(!all_marked_in_tree(&[inside, nested], ns).passed);
    }

    #[test]
    fn census_of_marked_processes() {
        let ns = Some("pid:[1]");
        assert!(all_marked_in_tree(&[marked(1, ns), marked(2, ns)], ns).passed);
        assert!(!all_marked_in_tree(&[marked(1, ns), marked(2, Some("pid:[9]"))], ns).passed);
        assert!(!all_marked_in_tree(&[], ns).passed);
        assert!(!all_marked_in_tree(&[marked(1, ns)], None).passed);
    }

    #[test]
    fn x_server_must_be_the_copy_s_own() {
        let ns = Some("pid:[7]");
        assert!(x_server_in_tree("x", "/s", Ok((5, "pid:[7]".into())), ns).passed);
        let other = x_server_in_tree("x", "/s", Ok((5, "pid:[8]".into())), ns);
        assert!(!other.passed);
        assert_eq!(other.value["server_pidns"], "pid:[8]");
        assert!(!x_server_in_tree("x", "/s", Err("refused".into()), ns).passed);
        assert!(!x_server_in_tree("x", "/s", Ok((5, "pid:[7]".into())), None).passed);
    }

    #[test]
    fn a_restore_must_hand_back_a_new_tree() {
        let rec = |label: &str, pid: i32, ns: Option<&str>| TreeRecord {
            label: label.into(),
            pid,
            pidns: ns.map(str::to_string),
            ended: false,
        };
        let copy = rec("copy reset", 300, Some("pid:[3]"));
        let b = rec("copy b", 200, Some("pid:[2]"));
        assert!(fresh_copy("n", &copy, std::slice::from_ref(&b)).passed);
        assert!(fresh_copy("n", &copy, &[]).passed);
        let handed_back = rec("copy reset", 200, Some("pid:[2]"));
        let c = fresh_copy("n", &handed_back, std::slice::from_ref(&b));
        assert!(!c.passed);
        assert_eq!(c.value["same_as"][0]["label"], "copy b");
        assert!(
            !fresh_copy(
                "n",
                &rec("x", 200, Some("pid:[9]")),
                std::slice::from_ref(&b)
            )
            .passed
        );
        assert!(!fresh_copy("n", &rec("x", 9, Some("pid:[2]")), &[b]).passed);
        assert!(!fresh_copy("n", &rec("x", 9, None), &[]).passed);
    }

    #[test]
    fn pstree_against_the_tree() {
        let seen: BTreeSet<i32> = [1, 2, 3, 4, 5].into();
        assert!(pstree_matches(&seen, &seen).passed);
        let fewer: BTreeSet<i32> = [1, 2, 3].into();
        let c = pstree_matches(&fewer, &seen);
        assert!(!c.passed);
        assert_eq!(c.value["seen_not_recorded"], json!([4, 5]));
        let more: BTreeSet<i32> = [1, 2, 3, 4, 5, 6].into();
        assert!(!pstree_matches(&more, &seen).passed);
        assert!(!pstree_matches(&BTreeSet::new(), &seen).passed);
        assert!(!pstree_matches(&BTreeSet::new(), &BTreeSet::new()).passed);
    }

    #[test]
    fn a_copy_keeping_the_saved_mac_fails() {
        let saved = "52:54:00:12:34:56";
        assert!(own_mac("m", saved, "52:54:9a:0b:00:01").passed);
        assert!(!own_mac("m", saved, saved).passed);
        assert!(!own_mac("m", saved, "").passed);
        assert!(!own_mac("m", "", "52:54:9a:0b:00:01").passed);
        assert!(!own_mac("m", saved, "52:54:9A:0b:00:01").passed);
        assert!(!own_mac("m", saved, "52:54:9a:0b:00").passed);
        assert!(!own_mac("m", saved, "52:54:9a:0b:00:01\n").passed);
    }
}
