//! A report's list of artifacts held against the files in its directory: the listing itself
//! first (names that leave the report, a name listed twice, more entries than a report holds),
//! then each listed file read once through the one reader and held against its sha256 and size.

use super::reader::ReportDir;
use sharedos_report::digest;
use sharedos_report::report::Artifact;
use std::collections::{BTreeMap, BTreeSet};

/// The most artifacts a report may list: what vm-run's fetch lets a guest send.
pub const MAX_ARTIFACTS: usize = 10_000;

/// One listed artifact whose file does not match the report, or a fault of the listing.
#[derive(Debug, Clone, PartialEq)]
pub struct Mismatch {
    pub path: String,
    pub problem: String,
}

impl Mismatch {
    fn new(path: &str, problem: impl Into<String>) -> Mismatch {
        Mismatch {
            path: path.to_string(),
            problem: problem.into(),
        }
    }
}

/// What is wrong with the listing, before any file is read.
pub fn listing_problems(list: &[Artifact]) -> Vec<Mismatch> {
    let mut out = Vec::new();
    if list.len() > MAX_ARTIFACTS {
        out.push(Mismatch::new(
            "artifacts",
            format!(
                "report.json lists {} artifacts, more than the {MAX_ARTIFACTS} a report holds; \
                 none was read",
                list.len()
            ),
        ));
    }
    out.extend(
        list.iter()
            .filter(|a| !digest::relative_name_ok(&a.path))
            .map(|a| Mismatch::new(&a.path, "path leaves the report directory")),
    );
    let mut count: BTreeMap<&str, usize> = BTreeMap::new();
    for a in list {
        *count.entry(a.path.as_str()).or_default() += 1;
    }
    out.extend(
        count
            .into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(p, n)| Mismatch::new(p, format!("listed {n} times: a file is listed once"))),
    );
    out
}

/// The listing's problems, and, when `rehash`, each file it names read and held against the
/// listed sha256 and size (each name once, however often it is listed).
pub fn check(dir: &ReportDir, list: &[Artifact], rehash: bool) -> Vec<Mismatch> {
    let mut out = listing_problems(list);
    if !rehash || list.len() > MAX_ARTIFACTS {
        return out;
    }
    let mut seen = BTreeSet::new();
    for a in list {
        if !digest::relative_name_ok(&a.path) || !seen.insert(a.path.as_str()) {
            continue;
        }
        match dir.file(&a.path) {
            Ok(f) if f.sha256 != a.sha256 => out.push(Mismatch::new(
                &a.path,
                format!("sha256 is {}, report says {}", f.sha256, a.sha256),
            )),
            Ok(f) if f.len != a.bytes => out.push(Mismatch::new(
                &a.path,
                format!("it is {} bytes, report says {}", f.len, a.bytes),
            )),
            Ok(_) => {}
            Err(e) => out.push(Mismatch::new(&a.path, e)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn art(path: &str, bytes: &[u8]) -> Artifact {
        Artifact {
            path: path.into(),
            sha256: digest::sha256_hex(bytes),
            bytes: bytes.len() as u64,
            kind: "log".into(),
        }
    }

    #[test]
    fn changed_missing_escaping_repeated_and_resized_files_are_named() {
        let d = std::env::temp_dir().join(format!("artifacts-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("a.txt"), b"abc").unwrap();
        std::fs::write(d.join("b.txt"), b"abd").unwrap();
        let dir = ReportDir::open(&d).unwrap();
        let good = art("a.txt", b"abc");
        assert!(check(&dir, std::slice::from_ref(&good), true).is_empty());
        let mut wrong_size = art("a.txt", b"abc");
        wrong_size.bytes = 4;
        let list = vec![
            good.clone(),
            art("b.txt", b"abc"),
            art("gone.png", b"x"),
            art("../x", b"x"),
            good.clone(),
            good.clone(),
        ];
        let bad = check(&dir, &list, true);
        let paths: Vec<(&str, &str)> = bad
            .iter()
            .map(|m| (m.path.as_str(), m.problem.as_str()))
            .collect();
        assert_eq!(paths.len(), 4, "{paths:?}");
        assert_eq!(paths[0], ("../x", "path leaves the report directory"));
        assert_eq!(paths[1], ("a.txt", "listed 3 times: a file is listed once"));
        assert!(paths[2].1.starts_with("sha256 is"), "{paths:?}");
        assert_eq!(paths[3], ("gone.png", "gone.png does not exist"));
        assert_eq!(
            dir.reads()["a.txt"],
            1,
            "a name listed three times is read once"
        );
        assert!(check(&dir, &[wrong_size], true)[0]
            .problem
            .contains("3 bytes, report says 4"));
        // Without re-hashing, only the listing is judged.
        assert_eq!(check(&dir, &list, false).len(), 2);
        // Too many entries: none is read, and the repeated one is still named.
        let many = vec![good; MAX_ARTIFACTS + 1];
        let bad = check(&dir, &many, true);
        assert_eq!(bad.len(), 2, "{bad:?}");
        assert!(bad[0].problem.contains("more than the 10000"), "{bad:?}");
        assert_eq!(bad[1].problem, "listed 10001 times: a file is listed once");
        std::fs::remove_dir_all(&d).unwrap();
    }
}
