//! Text both sides show: the end of a command's output, a command line a shell would split back
//! into the same words, and the kind an artifact's name says it is.

/// The last `max_lines` lines, at most `max_bytes` bytes.
pub fn tail(s: &str, max_lines: usize, max_bytes: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let start = lines.len().saturating_sub(max_lines);
    let t = lines[start..].join("\n");
    if t.len() <= max_bytes {
        return t;
    }
    let mut cut = t.len() - max_bytes;
    while !t.is_char_boundary(cut) {
        cut += 1;
    }
    t[cut..].to_string()
}

/// One word as a POSIX shell reads it back: as it is when every character is safe unquoted,
/// else in single quotes.
pub fn quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

/// A command line to paste into a shell: each word quoted as `quote` does.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

pub fn artifact_kind(rel: &str) -> &'static str {
    if rel.ends_with(".png") {
        "png"
    } else if rel.starts_with("criu/") && rel.ends_with(".log") {
        "criu-log"
    } else if rel.starts_with("criu/") {
        "criu-images"
    } else if rel.ends_with(".log") {
        "log"
    } else {
        "file"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_end() {
        assert_eq!(tail("a\nb\nc", 2, 100), "b\nc");
        assert_eq!(tail("abcdef", 10, 3), "def");
    }

    #[test]
    fn artifact_kinds() {
        assert_eq!(artifact_kind("png/live.png"), "png");
        assert_eq!(artifact_kind("criu/dump.log"), "criu-log");
        assert_eq!(artifact_kind("criu/dump-images.txt"), "criu-images");
        assert_eq!(artifact_kind("serial.log"), "log");
    }

    #[test]
    fn shell_quoting() {
        let a: Vec<String> = ["sh", "-c", "echo x; exec sleep infinity", "it's"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(
            shell_words(&a),
            "sh -c 'echo x; exec sleep infinity' 'it'\\''s'"
        );
    }
}
