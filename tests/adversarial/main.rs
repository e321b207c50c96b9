//! Crafted archives, one per way of attacking the commands that judge a report afterwards: as a
//! hostile guest would (it controls every byte it sends) and as someone editing an archive
//! without a signing key. Each case builds a report directory as vm-run leaves it, breaks one
//! thing, and runs the built `sharedos-rig` on it. None boots a VM, and each takes well under a
//! second but the few that must show a bound holds (a sparse file, a listing 60,000 long).

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

// The shared test helpers, as the single-file tests take them with `mod common;`.
#[path = "../common/mod.rs"]
mod common;

mod bounds;
mod escaping;
mod fidelity;
mod links;
mod matrix;
mod overflow;
mod own;
mod signatures;
mod smaller;

use common::scratch::Scratch;
use sharedos_report::digest;
use sharedos_report::report::{
    self, Check, Environment, Gate, GateName, Report, RunOptions, Status, VmProvenance,
    REPORT_FILE, REVIEW_FILE,
};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sharedos-rig");

/// The guest's own report as diagnose writes it: nine gates PASS on a recorded check, the GUI
/// gate REVIEW_REQUIRED, and the fidelity differences the guest's own function gives.
fn guest_report() -> Report {
    let gates: Vec<Gate> = GateName::ALL
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let status = if *n == GateName::GuiPixelReview {
                Status::ReviewRequired
            } else {
                Status::Pass
            };
            let mut g = Gate::new(*n, status, format!("{n} did what it should"));
            g.duration_ms = 100 * (i as u64 + 1);
            if status == Status::Pass {
                g.checks.push(Check {
                    name: format!("{n}_holds"),
                    passed: true,
                    value: serde_json::json!(true),
                    expected: "true".into(),
                });
            }
            g
        })
        .collect();
    let kernel = "6.1.0-50-cloud-amd64";
    let options = RunOptions::default();
    // A marker of its own per archive: the review ledger keys reviews by report.json's sha256,
    // and one test's signed review must not bind another's report.
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    Report {
        schema_version: report::SCHEMA_VERSION,
        marker: format!("spike-{:06x}{n:06x}", std::process::id()),
        all_gates_pass: false,
        exit_code: 0,
        fidelity_differences: sharedos_gate::diagnose::fidelity_differences(
            kernel, &options, &gates,
        ),
        gates,
        environment: Environment {
            kernel_release: kernel.into(),
            kernel_version: "#1 SMP PREEMPT_DYNAMIC Debian 6.1.176-1".into(),
            machine: "x86_64".into(),
            hostname: "sharedos-guest".into(),
            boot_id: "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0".into(),
            os: "Debian GNU/Linux 12 (bookworm)".into(),
            euid: 0,
            started_at: "2026-12-02T06:00:00.000Z".into(),
            finished_at: "2026-12-02T06:01:00.000Z".into(),
            criu_version: Some("Version: 3.17.1".into()),
            xvfb_version: Some("21.1.7".into()),
            xterm_version: Some("XTerm(379)".into()),
            gate_version: "0.1.0".into(),
            command_line: vec!["sharedos-gate".into(), "diagnose".into()],
        },
        artifacts: Vec::new(),
        options,
        vm: None,
    }
}

fn vm(image: &str) -> VmProvenance {
    VmProvenance {
        accel: "tcg".into(),
        accel_reason: "chosen with --accel tcg".into(),
        qemu_version: "QEMU emulator version 7.2.15".into(),
        image_name: image.into(),
        image_sha256: "5e".repeat(32),
        command_line: ["xtask", "vm-run", "--image", image]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        ..Default::default()
    }
}

/// Every regular file under `dir` but report.json and review.json, as vm-run lists them.
fn files(dir: &Path, rel: &str, out: &mut Vec<String>) {
    let mut names: Vec<String> = std::fs::read_dir(dir.join(rel))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for n in names {
        let r = if rel.is_empty() {
            n
        } else {
            format!("{rel}/{n}")
        };
        let m = std::fs::symlink_metadata(dir.join(&r)).unwrap();
        if m.is_dir() {
            files(dir, &r, out);
        } else if m.is_file() && r != REPORT_FILE && r != REVIEW_FILE {
            out.push(r);
        }
    }
}

fn kind(rel: &str) -> &'static str {
    sharedos_report::text::artifact_kind(rel.strip_prefix("guest/").unwrap_or(rel))
}

/// Writes `dir` as vm-run archives a run of `guest`: guest/ with the guest's PNGs (those the
/// host's own checks judge) and its report.json, the host's evidence, and the host's
/// report.json listing every file. `host` changes the host's report before it is written.
fn archive_with(dir: &Path, mut guest: Report, host: impl FnOnce(&mut Report)) -> Report {
    let gdir = dir.join(report::GUEST_DIR);
    std::fs::create_dir_all(&gdir).unwrap();
    hostile_gate::honest::add_to(&mut guest, &gdir).unwrap();
    guest.seal();
    std::fs::write(
        gdir.join(REPORT_FILE),
        serde_json::to_vec_pretty(&guest).unwrap(),
    )
    .unwrap();
    std::fs::write(dir.join("serial.log"), b"SHAREDOS-READY\n").unwrap();
    let mut r = guest.clone();
    r.vm = Some(vm("bookworm"));
    let mut list = Vec::new();
    files(dir, "", &mut list);
    r.artifacts = list
        .iter()
        .map(|rel| digest::artifact(dir, rel, kind(rel)).unwrap())
        .collect();
    r.seal();
    host(&mut r);
    write_json(dir, &r);
    r
}

fn archive(dir: &Path) -> Report {
    archive_with(dir, guest_report(), |_| {})
}

fn write_json(dir: &Path, r: &Report) {
    std::fs::write(dir.join(REPORT_FILE), serde_json::to_vec_pretty(r).unwrap()).unwrap();
}

/// Lists a file written after the archive, as if vm-run had hashed it.
fn list_artifact(dir: &Path, rel: &str) {
    let mut r: Report = read(dir);
    r.artifacts
        .push(digest::artifact(dir, rel, kind(rel)).unwrap());
    write_json(dir, &r);
}

fn read(dir: &Path) -> Report {
    serde_json::from_slice(&std::fs::read(dir.join(REPORT_FILE)).unwrap()).unwrap()
}

/// The review ledger every run of the binary here reads: none is there, and only the signing
/// cases (which bring a ledger of their own, in their scratch directory) write one.
fn state_dir() -> PathBuf {
    std::env::temp_dir().join(format!("sharedos-rig-adv-{}-no-ledger", std::process::id()))
}

fn rig(args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(BIN);
    for a in args {
        c.arg(a);
    }
    c.env("SHAREDOS_RIG_STATE_DIR", state_dir());
    c.output().unwrap()
}

/// The binary with its address space bounded, so an allocation the size the input claims makes
/// it abort instead of passing on a machine with memory to spare.
fn rig_bounded(mib: u64, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new("prlimit");
    c.arg(format!("--as={}", mib << 20)).arg("--").arg(BIN);
    for a in args {
        c.arg(a);
    }
    c.env("SHAREDOS_RIG_STATE_DIR", state_dir());
    c.output().unwrap()
}

/// The binary under `timeout`: a liveness bound, far above what the work takes.
fn rig_within(secs: u32, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new("timeout");
    c.arg("--kill-after=5").arg(secs.to_string()).arg(BIN);
    for a in args {
        c.arg(a);
    }
    c.env("SHAREDOS_RIG_STATE_DIR", state_dir());
    c.output().unwrap()
}

fn out(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn err(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn both(o: &Output) -> String {
    format!("stdout:\n{}\nstderr:\n{}", out(o), err(o))
}

fn code(o: &Output) -> i32 {
    o.status.code().unwrap_or(-1)
}

fn verify(dir: &Path) -> Output {
    rig(&[&"verify", &dir])
}

/// Fails with the output when `o` did not exit `want`.
fn exits(o: &Output, want: i32) {
    assert_eq!(code(o), want, "{}", both(o));
}

/// Fails when `o` printed a control character other than a newline, or a bidirectional override.
fn no_raw_control(o: &Output) {
    for (what, text) in [("stdout", out(o)), ("stderr", err(o))] {
        let bad: Vec<char> = text
            .chars()
            .filter(|c| {
                (c.is_control() && *c != '\n')
                    || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
            })
            .collect();
        assert!(bad.is_empty(), "{what} carries raw {bad:?}:\n{text}");
    }
}

fn png(w: u32, h: u32) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut e = png::Encoder::new(&mut out, w, h);
        e.set_color(png::ColorType::Rgb);
        e.set_depth(png::BitDepth::Eight);
        let mut wr = e.write_header().unwrap();
        wr.write_image_data(&vec![0u8; (w * h * 3) as usize])
            .unwrap();
    }
    out
}

/// A PNG whose header claims `w` x `h` pixels and whose only IDAT holds a few bytes: what a
/// 65-byte file may claim.
fn png_claiming(w: u32, h: u32) -> Vec<u8> {
    fn chunk(out: &mut Vec<u8>, kind: &[u8; 4], data: &[u8]) {
        out.extend((data.len() as u32).to_be_bytes());
        let mut crc_in = kind.to_vec();
        crc_in.extend(data);
        out.extend(kind);
        out.extend(data);
        out.extend(crc32(&crc_in).to_be_bytes());
    }
    let mut out = b"\x89PNG\r\n\x1a\n".to_vec();
    let mut ihdr = Vec::new();
    ihdr.extend(w.to_be_bytes());
    ihdr.extend(h.to_be_bytes());
    ihdr.extend([8, 2, 0, 0, 0]);
    chunk(&mut out, b"IHDR", &ihdr);
    chunk(
        &mut out,
        b"IDAT",
        &[0x78, 0x9c, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01],
    );
    chunk(&mut out, b"IEND", &[]);
    out
}

fn crc32(data: &[u8]) -> u32 {
    let mut c = 0xffff_ffffu32;
    for b in data {
        c ^= u32::from(*b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                0xedb8_8320 ^ (c >> 1)
            } else {
                c >> 1
            };
        }
    }
    !c
}

/// Replaces the PNG the reset copy's framebuffer check names with `bytes`, and makes the
/// check and the listing cite it, as a guest that wrote it would.
fn plant_reset_png(dir: &Path, bytes: &[u8]) {
    let rel = "guest/png/reset.png";
    std::fs::write(dir.join(rel), bytes).unwrap();
    let mut r = read(dir);
    let a = digest::artifact(dir, rel, "png").unwrap();
    for x in r.artifacts.iter_mut().filter(|x| x.path == rel) {
        *x = a.clone();
    }
    write_json(dir, &r);
}

fn images_with_expectations(s: &Scratch) -> PathBuf {
    let images = s.path("images");
    std::fs::create_dir_all(images.join("bookworm")).unwrap();
    std::fs::write(images.join("bookworm/image.conf"), "").unwrap();
    let expect: String = GateName::ALL
        .iter()
        .map(|g| match g {
            GateName::GuiPixelReview => format!("{g} REVIEW_REQUIRED\n"),
            _ => format!("{g} PASS\n"),
        })
        .collect();
    std::fs::write(images.join("bookworm/expected-gates"), expect).unwrap();
    images
}

fn merge(out: &Path, images: &Path, reports: &[&Path]) -> Output {
    let mut args: Vec<&dyn AsRef<std::ffi::OsStr>> = vec![
        &"matrix",
        &"merge",
        &"--out",
        &out,
        &"--images-dir",
        &images,
    ];
    for r in reports {
        args.push(r);
    }
    rig(&args)
}

/// A zlib stream of `n` zero bytes at deflate's best ratio (1032:1): one dynamic Huffman block
/// in which a length-258, distance-1 copy costs two bits.
fn zlib_zeros(n: u64) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        len: u32,
    }
    impl Bits {
        fn put(&mut self, v: u64, n: u32) {
            self.acc |= v << self.len;
            self.len += n;
            while self.len >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.len -= 8;
            }
        }
        /// A Huffman code, most significant bit first.
        fn code(&mut self, c: u64, n: u32) {
            for i in (0..n).rev() {
                self.put((c >> i) & 1, 1);
            }
        }
    }
    let mut b = Bits {
        out: vec![0x78, 0x01],
        acc: 0,
        len: 0,
    };
    b.put(1, 1); // the final block
    b.put(2, 2); // dynamic Huffman codes
    b.put(29, 5); // 286 literal/length codes
    b.put(0, 5); // one distance code
    b.put(14, 4); // 18 code length codes
                  // Code lengths in RFC 1951's order 16 17 18 0 8 7 9 6 10 5 11 4 12 3 13 2 14 1: 18 gets one
                  // bit, 1 and 2 get two.
    for l in [0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 2] {
        b.put(l, 3);
    }
    // Codes: 18 = 0, 1 = 10, 2 = 11. Literal 0 gets 2 bits, 1-255 none, end of block 2 bits,
    // 257-284 none, length 258 (285) one bit; distance 1 one bit.
    b.code(0b11, 2);
    b.code(0, 1);
    b.put(127, 7);
    b.code(0, 1);
    b.put(106, 7);
    b.code(0b11, 2);
    b.code(0, 1);
    b.put(17, 7);
    b.code(0b10, 2);
    b.code(0b10, 2);
    // Data: literal 0 = 10, end of block = 11, length 258 = 0, distance 1 = 0.
    b.code(0b10, 2);
    let copies = (n - 1) / 258;
    for _ in 0..(n - 1) % 258 {
        b.code(0b10, 2);
    }
    for _ in 0..copies % 4 {
        b.put(0, 2);
    }
    // Four copies are one zero byte, whatever the bit offset.
    let whole = (copies / 4) as usize;
    let (acc, len) = (b.acc, b.len);
    b.out.extend(std::iter::repeat(0u8).take(whole));
    b.acc = acc;
    b.len = len;
    b.code(0b11, 2);
    if b.len > 0 {
        b.out.push(b.acc as u8);
    }
    let adler = ((n % 65521) << 16) | 1;
    b.out.extend((adler as u32).to_be_bytes());
    b.out
}

/// A PNG of `w` x `h` black RGB pixels whose IDAT inflates to `rows` rows of them.
fn png_inflating(w: u32, h: u32, rows: u64) -> Vec<u8> {
    let mut out = png_claiming(w, h);
    // Keep the signature and IHDR; a fresh IDAT and IEND follow.
    out.truncate(8 + 25);
    let idat = zlib_zeros(rows * (1 + 3 * u64::from(w)));
    for (kind, data) in [(b"IDAT", &idat[..]), (b"IEND", &[][..])] {
        out.extend((data.len() as u32).to_be_bytes());
        let mut crc_in = kind.to_vec();
        crc_in.extend(data);
        out.extend(kind);
        out.extend(data);
        out.extend(crc32(&crc_in).to_be_bytes());
    }
    out
}

fn keygen(s: &Scratch, name: &str) -> (PathBuf, String) {
    let key = s.path(name);
    let st = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", name, "-f"])
        .arg(&key)
        .status()
        .expect("ssh-keygen (openssh-client)");
    assert!(st.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    (key, public.trim().to_string())
}

/// A report vm-run signed with the CI key, and an allowed_signers file with the CI key and
/// alice's.
fn signed(s: &Scratch) -> (PathBuf, PathBuf, PathBuf, PathBuf) {
    let r = s.path("r");
    archive(&r);
    let (ci, ci_pub) = keygen(s, "ci");
    let (alice, alice_pub) = keygen(s, "alice");
    sign_report(&r, &ci);
    let allowed = s.path("allowed_signers");
    std::fs::write(
        &allowed,
        format!("ci@example {ci_pub}\nalice@example {alice_pub}\n"),
    )
    .unwrap();
    (r, allowed, ci, alice)
}

fn sign_report(dir: &Path, key: &Path) {
    sharedos_rig::judge::sign::sign(dir, REPORT_FILE, key).unwrap();
}

/// The binary with the scratch directory's own review ledger, removed with it.
fn rig_in(s: &Scratch, args: &[&dyn AsRef<std::ffi::OsStr>]) -> Output {
    let mut c = Command::new(BIN);
    for a in args {
        c.arg(a);
    }
    c.env("SHAREDOS_RIG_STATE_DIR", s.path("state"));
    c.output().unwrap()
}

fn review(s: &Scratch, dir: &Path, decision: &str, reviewer: &str, key: &Path) -> Output {
    rig_in(
        s,
        &[
            &"review",
            &dir,
            &"--decision",
            &decision,
            &"--reviewer",
            &reviewer,
            &"--sign-key",
            &key,
            &"--force",
        ],
    )
}
