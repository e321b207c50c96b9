//! What the stateful probe app answers.

use serde::{Deserialize, Serialize};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct AppState {
    pub token: String,
    pub counter: u64,
    /// The app's pid inside its namespace.
    pub pid: i32,
    /// The answer to `file-write NAME` or `file-read NAME`; absent for the other requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<RootFile>,
}

/// A file the app keeps on the tree's root, outside the private /tmp: written with the app's
/// token, read back as it is now.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct RootFile {
    pub path: String,
    /// The file's content; None when it does not exist.
    pub content: Option<String>,
    /// Why writing or reading failed (a read-only root, say).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

pub fn is_token(s: &str) -> bool {
    s.len() == 32
        && s.bytes()
            .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
}

/// What the browser workload's page shows in its document title: the token and counter its
/// script keeps in memory.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct PageState {
    pub token: String,
    pub counter: u64,
    /// The text in the page's field, where the page has one (`chromium`'s): the word after the
    /// counter, `field=TEXT`. None for a title without it (Firefox's page).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

/// What precedes the field's text in a page title that shows it.
pub const PAGE_FIELD_PREFIX: &str = "field=";

/// The first word of the page's title, before its token and counter.
pub const PAGE_TITLE_WORD: &str = "sharedos-page";

/// The page's state from a window title that holds `sharedos-page TOKEN COUNTER` (a browser
/// adds its own name after it), and `field=TEXT` after them where the page has a field; None
/// when the title holds no such words. The field's text is one word: what is typed into it
/// holds no whitespace, so a text that does is cut at it and compares unequal.
pub fn parse_page_title(title: &str) -> Option<PageState> {
    let mut words = title.split_whitespace();
    words.find(|w| *w == PAGE_TITLE_WORD)?;
    let token = words.next().filter(|t| is_token(t))?.to_string();
    let counter = words.next()?.parse().ok()?;
    let field = words
        .next()
        .and_then(|w| w.strip_prefix(PAGE_FIELD_PREFIX))
        .map(str::to_string);
    Some(PageState {
        token,
        counter,
        field,
    })
}

/// A window title with the page's counter (which moves on by design) replaced by `<counter>`,
/// so window lists compare by the rest; any other title unchanged.
pub fn title_without_counter(title: &str) -> String {
    let Some(p) = parse_page_title(title) else {
        return title.to_string();
    };
    let at = format!("{PAGE_TITLE_WORD} {} {}", p.token, p.counter);
    title.replacen(&at, &format!("{PAGE_TITLE_WORD} {} <counter>", p.token), 1)
}

impl PageState {
    /// As the app's state, so the app's comparisons judge the page too.
    pub fn as_app(&self) -> AppState {
        AppState {
            token: self.token.clone(),
            counter: self.counter,
            pid: 0,
            file: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::random_hex;

    #[test]
    fn page_titles() {
        let t = "0123456789abcdef0123456789abcdef";
        let p =
            parse_page_title(&format!("sharedos-page {t} 42 \u{2014} Mozilla Firefox")).unwrap();
        assert_eq!((p.token.as_str(), p.counter), (t, 42));
        assert_eq!(parse_page_title(&format!("sharedos-page {t}")), None);
        assert_eq!(parse_page_title("sharedos-page abc 42"), None);
        assert_eq!(parse_page_title(&format!("{t} 42")), None);
        assert_eq!(parse_page_title(&format!("sharedos-page {t} -1")), None);
        assert_eq!(p.as_app().counter, 42);
        assert_eq!(
            title_without_counter(&format!("sharedos-page {t} 42 - Firefox")),
            format!("sharedos-page {t} <counter> - Firefox")
        );
        assert_eq!(title_without_counter("sharedos-spike"), "sharedos-spike");
        assert_eq!(p.field, None);
        let with_field = |f: &str| parse_page_title(&format!("sharedos-page {t} 42 {f}")).unwrap();
        assert_eq!(with_field("field=abc").field.as_deref(), Some("abc"));
        assert_eq!(with_field("field=").field.as_deref(), Some(""));
        assert_eq!(with_field("feld=abc").field, None);
        assert_eq!(
            title_without_counter(&format!("sharedos-page {t} 42 field=ab")),
            format!("sharedos-page {t} <counter> field=ab")
        );
    }

    #[test]
    fn token_shape() {
        assert!(is_token(&random_hex(16).unwrap()));
        assert!(!is_token("abc"));
        assert!(!is_token(&"G".repeat(32)));
    }
}
