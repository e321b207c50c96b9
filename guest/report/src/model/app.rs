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
}

/// The first word of the page's title, before its token and counter.
pub const PAGE_TITLE_WORD: &str = "sharedos-page";

/// The page's state from a window title that holds `sharedos-page TOKEN COUNTER` (a browser
/// adds its own name after it); None when the title holds no such words.
pub fn parse_page_title(title: &str) -> Option<PageState> {
    let mut words = title.split_whitespace();
    words.find(|w| *w == PAGE_TITLE_WORD)?;
    let token = words.next().filter(|t| is_token(t))?.to_string();
    let counter = words.next()?.parse().ok()?;
    Some(PageState { token, counter })
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
    }

    #[test]
    fn token_shape() {
        assert!(is_token(&random_hex(16).unwrap()));
        assert!(!is_token("abc"));
        assert!(!is_token(&"G".repeat(32)));
    }
}
