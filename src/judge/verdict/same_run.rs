//! One run in two places. A report copied byte for byte into a second row, or a second
//! migration, passes every check of its own there: what tells the copy apart is what only one
//! run has, which both places then carry. Shared by a migration's verdict (its two halves),
//! `show MATRIX` (rows) and `matrix pairs` (migrations).

use super::Outcome;

/// What only one run has, as its judged report records it: the sha256 of its report.json (a
/// byte-for-byte copy shares it), the client key the host made for its session, and the nonce
/// the host gave its resume, which the guest echoed.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunId {
    marks: Vec<(&'static str, String)>,
}

impl RunId {
    pub fn of(o: &Outcome) -> RunId {
        let start = o.report.vm.as_ref().and_then(|v| v.start.as_ref());
        let nonce = start.and_then(|s| match (&s.nonce, &s.nonce_echo) {
            (Some(n), Some(e)) if n == e => Some(n.clone()),
            _ => None,
        });
        let marks = [
            ("the report.json sha256", o.report_sha256.clone()),
            ("the resume nonce", nonce),
            (
                "the session's client key",
                start.map(|s| s.client_key.clone()),
            ),
        ]
        .into_iter()
        .filter_map(|(what, v)| v.filter(|v| !v.is_empty()).map(|v| (what, v)))
        .collect();
        RunId { marks }
    }

    /// What `self` shares with `other`, in words; None when they are two runs.
    pub fn shared(&self, other: &RunId) -> Option<String> {
        self.marks
            .iter()
            .find(|m| other.marks.contains(m))
            .map(|(what, v)| format!("{what} {v}"))
    }
}

/// Each run an earlier one repeats, as (the later's index, the first's index, what they share).
pub fn repeats(ids: &[Option<RunId>]) -> Vec<(usize, usize, String)> {
    let mut out = Vec::new();
    for (later, id) in ids.iter().enumerate() {
        let Some(id) = id else { continue };
        let first = ids[..later]
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.as_ref().and_then(|e| id.shared(e)).map(|w| (i, w)));
        if let Some((first, what)) = first {
            out.push((later, first, what));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::review::tests::fresh_report;
    use crate::judge::verdict::evaluate_report;
    use sharedos_report::report::{GuestStart, VmProvenance};

    fn run(key: &str, nonce: Option<&str>, sha: Option<&str>) -> RunId {
        let mut r = fresh_report();
        r.vm = Some(VmProvenance {
            start: Some(GuestStart {
                client_key: key.into(),
                nonce: nonce.map(str::to_string),
                nonce_echo: nonce.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        });
        let mut o = evaluate_report(&r, None);
        o.report_sha256 = sha.map(str::to_string);
        RunId::of(&o)
    }

    #[test]
    fn a_run_is_repeated_by_any_mark_only_one_run_has() {
        let ids = vec![
            Some(run("ssh-ed25519 A", Some("n1"), Some("s1"))),
            None,
            Some(run("ssh-ed25519 B", Some("n2"), Some("s2"))),
            Some(run("ssh-ed25519 C", None, Some("s1"))),
            Some(run("ssh-ed25519 B", None, Some("s4"))),
            Some(run("", Some("n1"), None)),
            Some(run("", None, None)),
            Some(run("", None, None)),
        ];
        assert_eq!(
            repeats(&ids),
            [
                (3, 0, "the report.json sha256 s1".to_string()),
                (4, 2, "the session's client key ssh-ed25519 B".to_string()),
                (5, 0, "the resume nonce n1".to_string()),
            ]
        );
    }
}
