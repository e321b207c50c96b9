//! The one escaping rule for text the rig did not write itself (a guest's strings, an archive's
//! names, an error that quotes either): a character a reader would not see as itself is shown
//! as its `\u{..}` escape, so it cannot drive a terminal (ANSI and OSC sequences), fake a line
//! of its own (a newline, a carriage return, a line or paragraph separator) or reorder what is
//! read (a bidirectional mark, embedding, override or isolate). Which characters those are is
//! decided by class, from the standard's tables (`unicode-general-category`), not by a list of
//! the ones known to be harmful: every control (Cc), every format character (Cf) and every line
//! and paragraph separator (Zl, Zp). Every line a command prints that carries such text goes
//! through [`line`] (error lines through [`error_chain`]); Markdown, HTML and XML apply the same
//! rule first and their own syntax after it, so what they check (a link, a tag) is the text as
//! it will be rendered.

use unicode_general_category::{get_general_category, GeneralCategory};

/// A character that must not reach a reader as itself.
pub fn is_hidden(ch: char) -> bool {
    matches!(
        get_general_category(ch),
        GeneralCategory::Control
            | GeneralCategory::Format
            | GeneralCategory::LineSeparator
            | GeneralCategory::ParagraphSeparator
    )
}

/// Text for one line of a terminal: whitespace runs (newlines included) become one space, and
/// every hidden character its escape. A line or paragraph separator is whitespace too, but is
/// shown as its escape: a reader should see that the guest tried to break the line.
pub fn line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut gap = false;
    for ch in s.chars() {
        let separator = matches!(
            get_general_category(ch),
            GeneralCategory::LineSeparator | GeneralCategory::ParagraphSeparator
        );
        if ch.is_whitespace() && !separator {
            gap = true;
            continue;
        }
        if gap && !out.is_empty() {
            out.push(' ');
        }
        gap = false;
        push_char(&mut out, ch);
    }
    out
}

/// Text that keeps its lines (a command's output in a `<pre>`): newlines and tabs stay, every
/// other hidden character is escaped.
pub fn lines(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        if ch == '\n' || ch == '\t' {
            out.push(ch);
        } else {
            push_char(&mut out, ch);
        }
    }
    out
}

fn push_visible(out: &mut String, s: &str) {
    for ch in s.chars() {
        push_char(out, ch);
    }
}

fn push_char(out: &mut String, ch: char) {
    if is_hidden(ch) {
        out.extend(ch.escape_unicode());
    } else {
        out.push(ch);
    }
}

/// An error and its causes as the commands print them: `error: ...` then one
/// `  caused by: ...` line per cause, each escaped.
pub fn error_chain(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for (i, cause) in e.chain().enumerate() {
        let head = if i == 0 { "error: " } else { "  caused by: " };
        push_message(&mut out, head, &cause.to_string());
    }
    out
}

/// One message of an error chain: its first line after `head`, and every further line (a
/// command's output tail, say) indented under it, so that only the rig starts a line with
/// `error:` or `caused by:`, whatever a line of the message says.
fn push_message(out: &mut String, head: &str, msg: &str) {
    for (i, l) in msg.lines().enumerate() {
        out.push_str(if i == 0 { head } else { "      | " });
        push_visible(out, l.trim_end());
        out.push('\n');
    }
    if msg.is_empty() {
        out.push_str(head);
        out.push('\n');
    }
}

/// Text made inert in GitHub-flavoured Markdown, on one line: it opens no tag, link, emphasis
/// or table cell. Links and `@mentions` are neutralised on the text as it will be rendered:
/// after the escaping rule, so a control character the renderer would drop cannot hide
/// `https://` from the check.
pub fn markdown(t: &str) -> String {
    // A zero-width space, as an entity so that it is visible in the Markdown source, keeps a
    // pull-request comment from pinging `@someone` or linking a bare URL the guest wrote.
    const ZWSP: &str = "&#8203;";
    let t = line(t);
    let mut out = String::with_capacity(t.len());
    for (i, ch) in t.char_indices() {
        let rest = &t[i + ch.len_utf8()..];
        match ch {
            '@' => {
                out.push('@');
                out.push_str(ZWSP);
            }
            ':' if rest.starts_with("//") => {
                out.push(':');
                out.push_str(ZWSP);
            }
            '.' if out
                .get(out.len().saturating_sub(3)..)
                .is_some_and(|w| w.eq_ignore_ascii_case("www")) =>
            {
                out.push_str(ZWSP);
                out.push('.');
            }
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '|' => out.push_str("\\|"),
            '\\' | '`' | '*' | '_' | '[' | ']' | '#' | '~' | '!' => {
                out.push('\\');
                out.push(ch);
            }
            c => out.push(c),
        }
    }
    out
}

/// Text for HTML element content and quoted attributes; newlines stay (for `<pre>`).
pub fn html(t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    for ch in lines(t).chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Text for XML 1.0 content and attributes (JUnit), where most control characters may not
/// appear even as references: escaped by the rule, newlines and tabs kept as references (so
/// attribute-value normalisation does not turn them into spaces), then the XML entities.
pub fn xml(t: &str) -> String {
    let mut out = String::with_capacity(t.len());
    for ch in lines(t).chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\t' => out.push_str("&#9;"),
            '\u{fffe}' | '\u{ffff}' => out.extend(ch.escape_unicode()),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use unicode_general_category::{get_general_category, GeneralCategory as G};

    /// Whether the standard's tables put `c` in a class that must never reach a reader raw:
    /// controls (Cc), format characters (Cf: the bidirectional marks, embeddings, overrides and
    /// isolates among them), line and paragraph separators (Zl, Zp). Written out here rather
    /// than by calling `is_hidden`, so that the test holds the rule to the classes.
    fn in_hidden_class(c: char) -> bool {
        matches!(
            get_general_category(c),
            G::Control | G::Format | G::LineSeparator | G::ParagraphSeparator
        )
    }

    /// Every code point of those classes.
    pub(crate) fn every_hidden() -> Vec<char> {
        (0..=u32::from(char::MAX))
            .filter_map(char::from_u32)
            .filter(|&c| in_hidden_class(c))
            .collect()
    }

    /// Every character of those classes in `out` but those a form keeps on purpose (`kept`:
    /// the newline and tab of text that keeps its lines).
    pub(crate) fn raw_hidden(out: &str, kept: &[char]) -> Vec<char> {
        let mut raw: Vec<char> = out
            .chars()
            .filter(|&c| in_hidden_class(c) && !kept.contains(&c))
            .collect();
        raw.dedup();
        raw
    }

    /// One output form of the rule.
    type Form = fn(&str) -> String;

    #[test]
    fn every_control_format_and_separator_character_is_escaped_in_every_form() {
        let hidden = every_hidden();
        // The table behind the rule holds what the rule promises, the bidirectional controls
        // included (LRM, RLM, ALM, the embeddings and overrides, the isolates).
        for c in [
            '\u{200e}', '\u{200f}', '\u{61c}', '\u{202a}', '\u{202e}', '\u{2066}', '\u{2069}',
        ]
        .into_iter()
        .chain([
            '\u{2028}',
            '\u{2029}',
            '\u{feff}',
            '\u{200b}',
            '\u{e0001}',
            '\u{85}',
        ]) {
            assert!(hidden.contains(&c), "{:?}", c);
        }
        let forms: [(&str, Form, &[char]); 6] = [
            ("line", line, &[]),
            ("lines", lines, &['\n', '\t']),
            ("markdown", markdown, &[]),
            ("html", html, &['\n', '\t']),
            ("xml", xml, &[]),
            (
                "error_chain",
                |s| error_chain(&anyhow::anyhow!("{s}")),
                &['\n'],
            ),
        ];
        let all: String = hidden.iter().collect();
        for (name, form, kept) in forms {
            let out = form(&all);
            assert_eq!(raw_hidden(&out, kept), Vec::<char>::new(), "{name}");
            for &c in &hidden {
                let out = form(&format!("a{c}b"));
                assert!(
                    raw_hidden(&out, kept).is_empty(),
                    "{name}: {c:?} raw in {out:?}"
                );
                // Shown as itself escaped, where the form does not keep it as layout: the
                // one-line forms join whitespace into one space, XML keeps a newline and a tab
                // as character references.
                let one_line = matches!(name, "line" | "markdown");
                let shown = kept.contains(&c)
                    || (one_line && c.is_control() && c.is_whitespace())
                    || (name == "xml" && matches!(c, '\n' | '\t'));
                assert!(
                    shown || out.contains(&c.escape_unicode().to_string()),
                    "{name}: {c:?} not shown as its escape: {out:?}"
                );
            }
        }
    }

    const HOSTILE: &str = "\u{1b}[2J\u{1b}]0;title\u{7}ok\rverdict: PASS (exit 0)\u{202e}x\u{9b}1m";

    #[test]
    fn a_line_stays_one_line_and_shows_what_is_hidden() {
        let l = line(HOSTILE);
        assert_eq!(
            l,
            "\\u{1b}[2J\\u{1b}]0;title\\u{7}ok verdict: PASS (exit 0)\\u{202e}x\\u{9b}1m"
        );
        assert!(!l.chars().any(is_hidden));
        assert_eq!(line("a\nb\t c"), "a b c");
        assert_eq!(line("é 日本"), "é 日本");
    }

    #[test]
    fn lines_keep_newlines_and_nothing_else() {
        assert_eq!(lines("a\nb\r\u{1b}"), "a\nb\\u{d}\\u{1b}");
    }

    #[test]
    fn an_error_chain_is_escaped_line_by_line() {
        let e = anyhow::anyhow!("unknown variant `X\u{1b}[2J\nerror: none`")
            .context("reading report A at /r");
        let t = error_chain(&e);
        assert_eq!(
            t,
            "error: reading report A at /r\n  caused by: unknown variant `X\\u{1b}[2J\n      | error: none`\n"
        );
        let heads = t.lines().filter(|l| l.starts_with("error:")).count();
        assert_eq!(heads, 1, "only the rig starts a line with error: {t}");
    }

    #[test]
    fn markdown_is_inert_and_links_are_checked_as_rendered() {
        assert_eq!(markdown("a|b\nc<d>&"), "a\\|b c&lt;d&gt;&amp;");
        assert_eq!(markdown("*x* [l](u)"), "\\*x\\* \\[l\\](u)");
        assert_eq!(markdown("cc @octocat"), "cc @&#8203;octocat");
        assert_eq!(markdown("me@example.com"), "me@&#8203;example.com");
        assert_eq!(
            markdown("see https://evil.example/x"),
            "see https:&#8203;//evil.example/x"
        );
        assert_eq!(markdown("WWW.evil.example"), "WWW&#8203;.evil.example");
        assert_eq!(markdown("a: b. c"), "a: b. c");
        // A control character the renderer would drop is shown instead, so no link survives.
        let m = markdown("https:\u{1}//evil.example and w\u{1}ww.evil");
        assert!(!m.contains("https://") && !m.contains("www."), "{m}");
        assert!(!m.chars().any(is_hidden), "{m}");
        let m = markdown("https:\u{202e}//evil.example");
        assert!(!m.contains("https://"), "{m}");
    }

    #[test]
    fn html_and_xml_escape_markup_and_hidden_characters() {
        assert_eq!(
            html("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
        assert_eq!(html("a\n\u{1b}b"), "a\n\\u{1b}b");
        assert_eq!(
            xml("a<b>\n\u{0}'\"\r\u{ffff}"),
            "a&lt;b&gt;&#10;\\u{0}&apos;&quot;\\u{d}\\u{ffff}"
        );
    }
}
