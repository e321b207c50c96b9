//! Signed reports: report.json and review.json signed as OpenSSH signatures (SSHSIG, namespace
//! `sharedos-rig`, beside the file as `<file>.sig`), which `ssh-keygen -Y verify` accepts, and
//! checked against an OpenSSH allowed_signers file. A signature ties the report to whoever held
//! the key when the run ended: editing it afterwards, even re-hashing its artifacts, breaks it.

use super::reader::ReportDir;
use anyhow::{bail, Context, Result};
use sharedos_report::digest;
use ssh_key::{HashAlg, LineEnding, PrivateKey, PublicKey, SshSig};
use std::fmt;
use std::path::Path;

pub const NAMESPACE: &str = "sharedos-rig";

/// Far above report.json's and review.json's real sizes.
const MAX_SIGNED_BYTES: u64 = 16 << 20;
const MAX_SIG_BYTES: u64 = 64 << 10;

pub fn sig_name(file: &str) -> String {
    format!("{file}.sig")
}

/// Reads the unencrypted OpenSSH private key at `key`; vm-run checks it before the run, so a
/// bad key costs no run.
pub fn load_key(key: &Path) -> Result<PrivateKey> {
    let k = PrivateKey::read_openssh_file(key).with_context(|| {
        format!(
            "reading the signing key {}: give an OpenSSH private key (ssh-keygen -t ed25519 -f KEY)",
            key.display()
        )
    })?;
    if k.is_encrypted() {
        bail!(
            "{} is protected by a passphrase, which sharedos-rig cannot ask for; sign by hand instead: ssh-keygen -Y sign -n {NAMESPACE} -f {} {}",
            key.display(),
            key.display(),
            "FILE"
        );
    }
    Ok(k)
}

/// Signs `dir/file` with the key at `key`, writing `dir/file.sig`. Returns the key's SHA256
/// fingerprint.
pub fn sign(dir: &Path, file: &str, key: &Path) -> Result<String> {
    let k = load_key(key)?;
    let read = ReportDir::open(dir)
        .and_then(|d| d.bytes(file, MAX_SIGNED_BYTES))
        .map_err(anyhow::Error::msg)?;
    let signed = sign_bytes(dir, file, read.bytes().unwrap_or_default(), &k)?;
    Ok(signed.fingerprint)
}

/// A signature written beside the file it signs.
#[derive(Debug, Clone)]
pub struct Signed {
    pub fingerprint: String,
    /// The `.sig` file's bytes.
    pub pem: Vec<u8>,
}

/// Signs `bytes`, which the caller wrote to `dir/file` (so that exactly those bytes are
/// signed), and writes `dir/file.sig`.
pub fn sign_bytes(dir: &Path, file: &str, bytes: &[u8], k: &PrivateKey) -> Result<Signed> {
    let sig = k
        .sign(NAMESPACE, HashAlg::Sha512, bytes)
        .with_context(|| format!("signing {file}"))?;
    let pem = sig
        .to_pem(LineEnding::LF)
        .context("encoding the signature")?;
    digest::replace_in_report(dir, &sig_name(file), pem.as_bytes())?;
    Ok(Signed {
        fingerprint: k.public_key().fingerprint(HashAlg::Sha256).to_string(),
        pem: pem.into_bytes(),
    })
}

/// One line of an allowed_signers file.
#[derive(Debug, Clone)]
pub struct AllowedSigner {
    pub principals: String,
    pub key: PublicKey,
    /// The `namespaces="..."` option; None allows every namespace.
    pub namespaces: Option<Vec<String>>,
}

fn is_key_type(word: &str) -> bool {
    word.starts_with("ssh-") || word.starts_with("ecdsa-") || word.starts_with("sk-")
}

/// Splits an options field on commas outside double quotes.
fn split_options(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let (mut cur, mut quoted) = (String::new(), false);
    for c in s.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                cur.push(c);
            }
            ',' if !quoted => out.push(std::mem::take(&mut cur)),
            c => cur.push(c),
        }
    }
    out.push(cur);
    out
}

/// Reads OpenSSH's allowed_signers format: `principals [options] keytype base64 [comment]`.
/// Options other than `namespaces` are refused rather than ignored, since ignoring
/// `cert-authority` or a validity window would accept what ssh-keygen would not.
pub fn parse_allowed_signers(text: &str) -> Result<Vec<AllowedSigner>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let n = i + 1;
        let (principals, rest) = line
            .split_once(char::is_whitespace)
            .with_context(|| format!("line {n}: no key after the principals"))?;
        let rest = rest.trim_start();
        let (options, key_text) = if is_key_type(rest) {
            (None, rest)
        } else {
            // The options field ends at the first space outside quotes.
            let mut quoted = false;
            let end = rest
                .char_indices()
                .find(|(_, c)| {
                    if *c == '"' {
                        quoted = !quoted;
                    }
                    c.is_whitespace() && !quoted
                })
                .map(|(i, _)| i)
                .with_context(|| format!("line {n}: no key after the options"))?;
            (Some(&rest[..end]), rest[end..].trim_start())
        };
        let mut namespaces = None;
        for opt in options.map(split_options).unwrap_or_default() {
            match opt.split_once('=') {
                Some((k, v)) if k.eq_ignore_ascii_case("namespaces") => {
                    namespaces = Some(
                        v.trim_matches('"')
                            .split(',')
                            .map(|s| s.trim().to_string())
                            .collect(),
                    );
                }
                _ => bail!(
                    "line {n}: the option {opt:?} is not supported by sharedos-rig (only namespaces=\"...\")"
                ),
            }
        }
        let mut words = key_text.split_whitespace();
        let (kind, b64) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let key = PublicKey::from_openssh(&format!("{kind} {b64}"))
            .with_context(|| format!("line {n}: {kind:?} is not a public key this rig reads"))?;
        out.push(AllowedSigner {
            principals: principals.to_string(),
            key,
            namespaces,
        });
    }
    if out.is_empty() {
        bail!("the allowed signers file names no key");
    }
    Ok(out)
}

pub fn read_allowed_signers(path: &Path) -> Result<Vec<AllowedSigner>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the allowed signers file {}", path.display()))?;
    parse_allowed_signers(&text).with_context(|| format!("in {}", path.display()))
}

/// What a file's signature proves.
#[derive(Debug, Clone, PartialEq)]
pub enum SigState {
    Unsigned,
    /// Present, but no allowed signers were given to check it against.
    NotChecked,
    Valid {
        principals: String,
        fingerprint: String,
    },
    Invalid(String),
}

/// One signed file and its state.
#[derive(Debug, Clone, PartialEq)]
pub struct Signature {
    pub file: String,
    pub state: SigState,
}

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.state {
            SigState::Unsigned => write!(f, "{}: unsigned", self.file),
            SigState::NotChecked => write!(
                f,
                "{}: signed, not checked (pass --allowed-signers FILE)",
                self.file
            ),
            SigState::Valid {
                principals,
                fingerprint,
            } => write!(f, "{}: signed by {principals} ({fingerprint})", self.file),
            SigState::Invalid(why) => write!(f, "{}: signature rejected: {why}", self.file),
        }
    }
}

/// Checks `file.sig` in `dir` against `signers` (None: only says whether a signature is
/// there). The bytes checked are the reader's one read of `file`, the ones the verdict parsed.
/// With `principal` (a review's reviewer), the line allowing the key must name that principal.
pub fn check(
    dir: &ReportDir,
    file: &str,
    signers: Option<&[AllowedSigner]>,
    principal: Option<&str>,
) -> Signature {
    let state = match dir.kind(&sig_name(file)) {
        Ok(None) => SigState::Unsigned,
        Err(e) => SigState::Invalid(e),
        Ok(Some(_)) => match signers {
            None => SigState::NotChecked,
            Some(s) => match check_with(dir, file, s, principal) {
                Ok((principals, fingerprint)) => SigState::Valid {
                    principals,
                    fingerprint,
                },
                Err(e) => SigState::Invalid(format!("{e:#}")),
            },
        },
    };
    Signature {
        file: file.to_string(),
        state,
    }
}

fn check_with(
    dir: &ReportDir,
    file: &str,
    signers: &[AllowedSigner],
    principal: Option<&str>,
) -> Result<(String, String)> {
    let pem = dir
        .bytes(&sig_name(file), MAX_SIG_BYTES)
        .map_err(anyhow::Error::msg)?;
    let sig =
        SshSig::from_pem(pem.bytes().unwrap_or_default()).context("it is not an SSH signature")?;
    if sig.namespace() != NAMESPACE {
        bail!(
            "it was made for namespace {:?}, not {NAMESPACE:?}",
            sig.namespace()
        );
    }
    let for_key: Vec<&AllowedSigner> = signers
        .iter()
        .filter(|s| {
            s.key.key_data() == sig.public_key()
                && s.namespaces
                    .as_ref()
                    .map_or(true, |n| n.iter().any(|x| x == NAMESPACE))
        })
        .collect();
    if for_key.is_empty() {
        bail!("its key is not one the allowed signers file allows for this namespace");
    }
    let signer = match principal {
        None => for_key[0],
        Some(who) => for_key
            .iter()
            .find(|s| principal_allowed(&s.principals, who))
            .copied()
            .with_context(|| {
                format!(
                    "it is signed by a key the allowed signers file gives to {}, not to its \
                     reviewer {who}: a review is signed with its reviewer's own key",
                    for_key
                        .iter()
                        .map(|s| s.principals.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?,
    };
    let bytes = dir
        .bytes(file, MAX_SIGNED_BYTES)
        .map_err(anyhow::Error::msg)?;
    signer
        .key
        .verify(NAMESPACE, bytes.bytes().unwrap_or_default(), &sig)
        .map_err(|_| anyhow::anyhow!("{file} changed after it was signed"))?;
    Ok((
        signer.principals.clone(),
        signer.key.fingerprint(HashAlg::Sha256).to_string(),
    ))
}

/// Whether `who` is among an allowed_signers line's principals, as OpenSSH matches them: a
/// comma-separated list of patterns (`*` and `?` wildcards), where a matching `!pattern`
/// refuses.
pub fn principal_allowed(principals: &str, who: &str) -> bool {
    let mut allowed = false;
    for p in principals.split(',') {
        match p.strip_prefix('!') {
            Some(neg) if glob(neg, who) => return false,
            Some(_) => {}
            None => allowed |= glob(p, who),
        }
    }
    allowed
}

fn glob(pattern: &str, s: &str) -> bool {
    let (p, s): (Vec<char>, Vec<char>) = (pattern.chars().collect(), s.chars().collect());
    // Iterative match with one backtrack point for the last `*`.
    let (mut i, mut j, mut star, mut mark) = (0, 0, None, 0);
    while j < s.len() {
        if i < p.len() && (p[i] == '?' || p[i] == s[j]) {
            i += 1;
            j += 1;
        } else if i < p.len() && p[i] == '*' {
            star = Some(i);
            mark = j;
            i += 1;
        } else if let Some(st) = star {
            i = st + 1;
            mark += 1;
            j = mark;
        } else {
            return false;
        }
    }
    p[i..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("sign-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn keygen(dir: &Path, name: &str) -> (std::path::PathBuf, String) {
        let key = dir.join(name);
        let st = crate::cmd::Cmd::new(vec!["ssh-keygen".into()])
            .command()
            .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
            .arg(&key)
            .status()
            .expect("ssh-keygen (openssh-client)");
        assert!(st.success());
        let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
        (key, public.trim().to_string())
    }

    #[test]
    fn a_signature_verifies_and_breaks_on_one_changed_byte() {
        let d = scratch("roundtrip");
        let (key, public) = keygen(&d, "k");
        std::fs::write(d.join("report.json"), b"{\"a\": 1}\n").unwrap();
        sign(&d, "report.json", &key).unwrap();
        let signers = parse_allowed_signers(&format!(
            "ci@example namespaces=\"sharedos-rig\" {public}\n"
        ))
        .unwrap();
        let check = |file: &str, signers: Option<&[AllowedSigner]>| {
            check(&ReportDir::open(&d).unwrap(), file, signers, None)
        };
        let ok = check("report.json", Some(&signers));
        assert!(
            matches!(&ok.state, SigState::Valid { principals, .. } if principals == "ci@example"),
            "{ok}"
        );
        assert_eq!(check("report.json", None).state, SigState::NotChecked);
        assert_eq!(
            check("review.json", Some(&signers)).state,
            SigState::Unsigned
        );

        std::fs::write(d.join("report.json"), b"{\"a\": 2}\n").unwrap();
        let bad = check("report.json", Some(&signers));
        assert_eq!(
            bad.state,
            SigState::Invalid("report.json changed after it was signed".into())
        );

        // Another key, or the right key kept out of this namespace, is refused.
        let (_, other) = keygen(&d, "other");
        let other = parse_allowed_signers(&format!("x {other}")).unwrap();
        assert!(matches!(
            check("report.json", Some(&other)).state,
            SigState::Invalid(ref w) if w.contains("not one the allowed signers file allows")
        ));
        let elsewhere =
            parse_allowed_signers(&format!("ci namespaces=\"git,file\" {public}")).unwrap();
        assert!(matches!(
            check("report.json", Some(&elsewhere)).state,
            SigState::Invalid(_)
        ));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn principals_match_as_openssh_matches_them() {
        assert!(principal_allowed("alice@example", "alice@example"));
        assert!(!principal_allowed("alice@example", "alice"));
        assert!(principal_allowed(
            "ci@example,alice@example",
            "alice@example"
        ));
        assert!(principal_allowed("*@example", "alice@example"));
        assert!(principal_allowed("al?ce@*", "alice@example"));
        assert!(!principal_allowed("*@example,!alice@*", "alice@example"));
        assert!(principal_allowed("*", "anyone"));
        assert!(!principal_allowed("", "alice"));
        assert!(!principal_allowed("a*b", "ac"));
    }

    /// A review's signature holds only when the line allowing its key names its reviewer.
    #[test]
    fn a_review_is_signed_by_its_reviewers_own_key() {
        let d = scratch("principal");
        let (ci, ci_pub) = keygen(&d, "ci");
        let (_, alice_pub) = keygen(&d, "alice");
        std::fs::write(d.join("review.json"), b"{}\n").unwrap();
        sign(&d, "review.json", &ci).unwrap();
        let signers =
            parse_allowed_signers(&format!("ci@example {ci_pub}\nalice@example {alice_pub}\n"))
                .unwrap();
        let dir = ReportDir::open(&d).unwrap();
        let as_alice = check(&dir, "review.json", Some(&signers), Some("alice@example"));
        assert!(
            matches!(&as_alice.state, SigState::Invalid(w) if w.contains("gives to ci@example, not to its reviewer alice@example")),
            "{as_alice}"
        );
        let as_ci = check(&dir, "review.json", Some(&signers), Some("ci@example"));
        assert!(matches!(as_ci.state, SigState::Valid { .. }), "{as_ci}");
        std::fs::remove_dir_all(&d).unwrap();
    }

    /// The signature is OpenSSH's own format: ssh-keygen verifies it.
    #[test]
    fn ssh_keygen_accepts_the_signature() {
        let d = scratch("interop");
        let (key, public) = keygen(&d, "k");
        std::fs::write(d.join("report.json"), b"{}\n").unwrap();
        sign(&d, "report.json", &key).unwrap();
        std::fs::write(d.join("allowed"), format!("ci@example {public}\n")).unwrap();
        let verify = |data: &[u8]| {
            let mut c = crate::cmd::Cmd::new(vec!["ssh-keygen".into()])
                .command()
                .args(["-Y", "verify", "-f"])
                .arg(d.join("allowed"))
                .args(["-I", "ci@example", "-n", NAMESPACE, "-s"])
                .arg(d.join("report.json.sig"))
                .stdin(std::process::Stdio::piped())
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap();
            use std::io::Write;
            c.stdin.take().unwrap().write_all(data).unwrap();
            c.wait_with_output().unwrap()
        };
        let ok = verify(b"{}\n");
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
        assert!(!verify(b"{ }\n").status.success());
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn allowed_signers_lines_are_read_or_refused_clearly() {
        let d = scratch("parse");
        let (_, public) = keygen(&d, "k");
        let mut words = public.split_whitespace();
        let key = format!("{} {}", words.next().unwrap(), words.next().unwrap());
        let s = parse_allowed_signers(&format!(
            "# comment\n\na@x,b@y {key} comment\nc namespaces=\"sharedos-rig,git\" {key}\n"
        ))
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].principals, "a@x,b@y");
        assert_eq!(s[0].namespaces, None);
        assert_eq!(
            s[1].namespaces,
            Some(vec!["sharedos-rig".to_string(), "git".to_string()])
        );
        let e = format!(
            "{:#}",
            parse_allowed_signers(&format!("a cert-authority {key}")).unwrap_err()
        );
        assert!(e.contains("\"cert-authority\" is not supported"), "{e}");
        assert!(parse_allowed_signers("# nothing\n").is_err());
        assert!(parse_allowed_signers("a ssh-ed25519 notbase64").is_err());
        std::fs::remove_dir_all(&d).unwrap();
    }
}
