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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::random::random_hex;

    #[test]
    fn token_shape() {
        assert!(is_token(&random_hex(16).unwrap()));
        assert!(!is_token("abc"));
        assert!(!is_token(&"G".repeat(32)));
    }
}
