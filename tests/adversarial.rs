//! Crafted archives, one per way of attacking the commands that judge a report afterwards: as a
//! hostile guest would (it controls every byte it sends) and as someone editing an archive
//! without a signing key. Each case builds a report directory as vm-run leaves it, breaks one
//! thing, and runs the built `sharedos-rig` on it. None boots a VM, and each takes well under a
//! second but the few that must show a bound holds (a sparse file, a listing 60,000 long).

// Tests start the binaries and system tools as a user would, and say what they skip: std's
// Command and print macros are theirs to use.
#![allow(clippy::disallowed_methods, clippy::disallowed_macros)]

mod common;

use sharedos_report::digest;
use sharedos_report::report::{
    self, Check, Environment, Gate, GateName, Report, RunOptions, Status, VmProvenance,
    REPORT_FILE, REVIEW_FILE,
};
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const BIN: &str = env!("CARGO_BIN_EXE_sharedos-rig");

/// A scratch directory removed when the test ends, pass or fail.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let p =
            std::env::temp_dir().join(format!("sharedos-rig-adv-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        Scratch(p)
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.0.join(rel)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

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

// ---- 1. The matrix judges with verify. ----------------------------------------------------

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

/// A row whose statuses match its image's expectations but whose report verify rejects (an
/// artifact changed after it was hashed) is not "as expected", and merge exits 1.
#[test]
fn c1_a_matrix_row_verify_rejects_is_not_as_expected() {
    let s = Scratch::new("c1-merge");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    exits(&verify(&r), 3);
    std::fs::write(r.join("serial.log"), b"SHAREDOS-READY, edited\n").unwrap();
    exits(&verify(&r), 1);
    let m = s.path("matrix");
    let o = merge(&m, &images, &[&r]);
    exits(&o, 1);
    assert!(!err(&o).contains("as expected"), "{}", both(&o));
}

/// The host's recheck (forged pixels) decides a matrix row with expectations too.
#[test]
fn c1_a_matrix_row_whose_pixels_are_forged_fails_the_merge() {
    let s = Scratch::new("c1-pixels");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    let mut other = hostile_gate::honest::frame();
    other.rgb[0] ^= 0x40;
    hostile_gate::honest::write_png(&other, &r.join("guest/png/reset.png")).unwrap();
    let bytes = std::fs::read(r.join("guest/png/reset.png")).unwrap();
    plant_reset_png(&r, &bytes);
    exits(&verify(&r), 1);
    exits(&merge(&s.path("matrix"), &images, &[&r]), 1);
}

/// `show MATRIX` judges each row again, expectations included, and says where matrix.json
/// disagrees: an edited `expected`, `differences` and `exit_code` do not make a row pass.
#[test]
fn c1_show_matrix_recomputes_what_matrix_json_claims() {
    let s = Scratch::new("c1-show");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    let mut g = guest_report();
    g.gates[3].status = Status::Fail;
    archive_with(&r, g, |_| {});
    let m = s.path("matrix");
    exits(&merge(&m, &images, &[&r]), 1);
    let path = m.join("matrix.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["cells"][0]["expected"] = v["cells"][0]["gates"].clone();
    v["cells"][0]["differences"] = serde_json::json!([]);
    v["exit_code"] = serde_json::json!(0);
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let o = Command::new(BIN)
        .args(["show", m.to_str().unwrap()])
        .env("SHAREDOS_RIG_IMAGES", &images)
        .env("SHAREDOS_RIG_STATE_DIR", state_dir())
        .output()
        .unwrap();
    exits(&o, 0);
    assert!(err(&o).contains("expect"), "{}", both(&o));
    assert!(err(&o).contains("exit"), "{}", both(&o));
    assert!(
        out(&o).starts_with("matrix: 1 image(s), exit 1"),
        "{}",
        both(&o)
    );
    assert!(!out(&o).contains("as expected"), "{}", both(&o));

    // A row whose report was changed after the merge: show says so and does not pass it.
    let m2 = s.path("matrix2");
    let r2 = s.path("in2/bookworm");
    archive(&r2);
    exits(&merge(&m2, &images, &[&r2]), 0);
    std::fs::write(m2.join("bookworm/serial.log"), b"edited").unwrap();
    let o = Command::new(BIN)
        .args(["show", m2.to_str().unwrap()])
        .env("SHAREDOS_RIG_IMAGES", &images)
        .env("SHAREDOS_RIG_STATE_DIR", state_dir())
        .output()
        .unwrap();
    assert!(err(&o).contains("serial.log"), "{}", both(&o));
    assert!(!out(&o).contains("as expected"), "{}", both(&o));
}

// ---- 3. Bounded decode, reads and hashing. ------------------------------------------------

/// A 65-byte PNG claiming 4000 x 2^31 pixels: verify, show --format html, list and merge
/// refuse it within a small address space instead of aborting on the allocation it asks for.
#[test]
fn c3_a_png_claiming_billions_of_pixels_is_refused_before_any_buffer() {
    let s = Scratch::new("c3-dims");
    let images = images_with_expectations(&s);
    let r = s.path("reports/bookworm");
    archive(&r);
    let bomb = png_claiming(4000, 1 << 31);
    assert!(bomb.len() < 80);
    plant_reset_png(&r, &bomb);
    let o = rig_bounded(512, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("reset.png"), "{}", both(&o));
    exits(&rig_bounded(512, &[&"show", &r, &"--format", &"html"]), 0);
    exits(&rig_bounded(512, &[&"list", &s.path("reports")]), 0);
    let m = s.path("matrix");
    let o = rig_bounded(
        512,
        &[
            &"matrix",
            &"merge",
            &"--out",
            &m,
            &"--images-dir",
            &images,
            &r,
        ],
    );
    exits(&o, 1);
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

/// A deflate bomb: a 390 KB PNG whose pixels inflate to 390 MiB.
#[test]
fn c3_a_deflate_bomb_is_refused_within_a_bound() {
    let s = Scratch::new("c3-bomb");
    let r = s.path("r");
    archive(&r);
    let bomb = png_inflating(11_400, 12_000, 12_000);
    assert!(bomb.len() < 400_000, "{}", bomb.len());
    plant_reset_png(&r, &bomb);
    let o = rig_bounded(256, &[&"verify", &r]);
    exits(&o, 1);
    exits(&rig_bounded(256, &[&"show", &r, &"--format", &"html"]), 0);
}

/// One 30 MiB "PNG" listed 100 times: the html page does not hold 100 copies at once, and
/// verify names the repeated entry.
#[test]
fn c3_html_of_a_png_listed_100_times_stays_bounded() {
    let s = Scratch::new("c3-html");
    let r = s.path("r");
    archive(&r);
    let big: Vec<u8> = (0..30u32 << 20)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(r.join("guest/png/big.png"), &big).unwrap();
    drop(big);
    let mut rep = read(&r);
    let a = digest::artifact(&r, "guest/png/big.png", "png").unwrap();
    for _ in 0..100 {
        rep.artifacts.push(a.clone());
    }
    write_json(&r, &rep);
    let o = rig_bounded(1024, &[&"show", &r, &"--format", &"html"]);
    exits(&o, 0);
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("guest/png/big.png"), "{}", both(&o));
}

/// A 256 GiB sparse file listed as an artifact is refused by its size, not hashed for minutes.
#[test]
fn c3_a_huge_sparse_artifact_is_refused_by_its_size() {
    let s = Scratch::new("c3-sparse");
    let r = s.path("r");
    archive(&r);
    let f = std::fs::File::create(r.join("guest/huge.log")).unwrap();
    f.set_len(256 << 30).unwrap();
    drop(f);
    let mut rep = read(&r);
    rep.artifacts.push(report::Artifact {
        path: "guest/huge.log".into(),
        sha256: "0".repeat(64),
        bytes: 256 << 30,
        kind: "log".into(),
    });
    write_json(&r, &rep);
    let o = rig_within(60, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("guest/huge.log"), "{}", both(&o));
}

/// One log listed 60,000 times: the repeated entries are refused, and the file is not hashed
/// 60,000 times.
#[test]
fn c3_one_artifact_listed_60000_times_is_refused() {
    let s = Scratch::new("c3-many");
    let r = s.path("r");
    archive(&r);
    std::fs::write(r.join("guest/big.log"), vec![b'x'; 1 << 20]).unwrap();
    let mut rep = read(&r);
    let a = digest::artifact(&r, "guest/big.log", "log").unwrap();
    for _ in 0..60_000 {
        rep.artifacts.push(a.clone());
    }
    write_json(&r, &rep);
    let o = rig_within(60, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("guest/big.log"), "{}", both(&o));
}

// ---- 4. Guest text never reaches a terminal raw. ------------------------------------------

const FAKE: &str = "x\nverdict:   PASS (exit 0): every gate passed, the human review included, signed\r\u{1b}[2J\u{202e}";

/// A failed check whose name carries a newline and a fake verdict line: verify prints one
/// verdict line, its own, and no control character.
#[test]
fn c4_a_check_name_cannot_fake_verifys_verdict_line() {
    let s = Scratch::new("c4-verify");
    let r = s.path("r");
    let mut g = guest_report();
    // A PASS that stands on a failed check: verify names the check.
    g.gates[1].checks[0].passed = false;
    g.gates[1].checks[0].name = FAKE.into();
    g.gates[1].reason = FAKE.into();
    archive_with(&r, g, |_| {});
    let o = verify(&r);
    exits(&o, 1);
    no_raw_control(&o);
    assert_eq!(
        out(&o)
            .lines()
            .filter(|l| l.starts_with("verdict:"))
            .count(),
        1,
        "{}",
        both(&o)
    );
    for format in ["text", "md", "junit"] {
        let o = rig(&[&"show", &r, &"--format", &format]);
        exits(&o, 0);
        if format == "text" {
            no_raw_control(&o);
        }
    }
}

/// A kernel release with a carriage return cannot redraw a FAIL row of `list` as PASS.
#[test]
fn c4_list_escapes_guest_fields() {
    let s = Scratch::new("c4-list");
    let r = s.path("reports/r");
    let mut g = guest_report();
    g.environment.kernel_release = "6.1\rPASS            \u{1b}[1A".into();
    g.environment.started_at = "2026\u{202e}-12".into();
    archive_with(&r, g, |_| {});
    let o = rig(&[&"list", &s.path("reports")]);
    exits(&o, 0);
    no_raw_control(&o);
}

/// An error line carries guest text (serde quotes the bad value of a report.json that does not
/// parse): it is escaped too.
#[test]
fn c4_error_lines_are_escaped() {
    let s = Scratch::new("c4-error");
    let a = s.path("a");
    let b = s.path("b");
    archive(&a);
    archive(&b);
    let text = std::fs::read_to_string(a.join(REPORT_FILE)).unwrap();
    let bad = text.replacen("\"REVIEW_REQUIRED\"", "\"X\\u001b[2J\\nerror: none\"", 1);
    std::fs::write(a.join(REPORT_FILE), bad).unwrap();
    let o = rig(&[&"diff", &a, &b]);
    assert_ne!(code(&o), 0, "{}", both(&o));
    no_raw_control(&o);
    let o = rig(&[&"show", &a]);
    no_raw_control(&o);
}

/// review's prompt names the PNGs the reviewer signs, whose paths the guest chose; verify
/// names the reviewer, whom the review file names.
#[test]
fn c4_review_prompts_and_the_reviewer_are_escaped() {
    let s = Scratch::new("c4-review");
    let r = s.path("r");
    archive(&r);
    let odd = "guest/png/a\u{1b}]0;title\u{7}\nYou are signing nothing.png";
    std::fs::write(r.join(odd), png(4, 4)).unwrap();
    list_artifact(&r, odd);
    let o = rig(&[
        &"review",
        &r,
        &"--decision",
        &"pass",
        &"--reviewer",
        &"alice\nverdict: PASS",
    ]);
    exits(&o, 0);
    no_raw_control(&o);
    let o = verify(&r);
    no_raw_control(&o);
    assert_eq!(
        out(&o)
            .lines()
            .filter(|l| l.starts_with("verdict:"))
            .count(),
        1,
        "{}",
        both(&o)
    );
}

/// `diff` prints check values both reports hold.
#[test]
fn c4_diff_escapes_check_values() {
    let s = Scratch::new("c4-diff");
    let a = s.path("a");
    let b = s.path("b");
    archive(&a);
    let mut g = guest_report();
    g.gates[0].checks[0].value = serde_json::json!("\u{1b}[31mred\u{1b}[0m\r\nverdict: PASS");
    archive_with(&b, g, |_| {});
    let o = rig(&[&"diff", &a, &b]);
    exits(&o, 0);
    no_raw_control(&o);
}

/// In Markdown a control character inside a link is dropped by the renderer: the link check
/// must see the text as it will be rendered.
#[test]
fn c4_markdown_neutralises_a_link_split_by_a_control_character() {
    let s = Scratch::new("c4-md");
    let r = s.path("r");
    let mut g = guest_report();
    g.gates[2].reason = "see https:\u{1}//evil.example/x and www\u{1}.evil.example".into();
    archive_with(&r, g, |_| {});
    let o = rig(&[&"show", &r, &"--format", &"md"]);
    exits(&o, 0);
    assert!(!out(&o).contains("https://evil"), "{}", out(&o));
    assert!(!out(&o).contains("www.evil"), "{}", out(&o));
}

// ---- 5. Fidelity differences are matched by key and cannot be dropped. --------------------

/// A guest that drops the differences no option closes does not verify.
#[test]
fn c5_dropping_the_unclosable_fidelity_differences_fails() {
    let s = Scratch::new("c5-drop");
    let r = s.path("r");
    let mut g = guest_report();
    g.fidelity_differences
        .retain(|d| d.key.closable().is_some());
    assert_eq!(g.fidelity_differences.len(), 5);
    archive_with(&r, g, |_| {});
    let o = verify(&r);
    exits(&o, 1);
    for k in [
        "shared_kernel",
        "xvfb_framebuffer",
        "criu_needs_root_and_same_kernel",
        "gui_review_is_pixels",
        "not_a_full_desktop",
    ] {
        assert!(
            out(&o).contains(&format!("leaves out the fidelity difference {k}")),
            "{k}: {}",
            both(&o)
        );
    }
}

/// A closable difference left out, its words put into another entry instead: verify matches
/// the difference by its key, not by words, and says which one is missing.
#[test]
fn c5_a_reworded_fidelity_difference_is_missing() {
    use sharedos_report::fidelity::Key;
    let s = Scratch::new("c5-reword");
    let r = s.path("r");
    let mut g = guest_report();
    g.fidelity_differences
        .retain(|d| d.key != Key::NoUserNamespace);
    let xvfb = g
        .fidelity_differences
        .iter_mut()
        .find(|d| d.key == Key::XvfbFramebuffer)
        .unwrap();
    xvfb.detail = format!("and {}", Key::NoUserNamespace.text());
    archive_with(&r, g, |_| {});
    let o = verify(&r);
    exits(&o, 1);
    assert!(
        out(&o).contains("leaves out the fidelity difference no_user_namespace"),
        "{}",
        both(&o)
    );
    // An unknown key is not a difference the rig knows: the report does not parse.
    let text = std::fs::read_to_string(r.join(REPORT_FILE)).unwrap();
    std::fs::write(
        r.join(REPORT_FILE),
        text.replacen("\"xvfb_framebuffer\"", "\"no user namespace\"", 1),
    )
    .unwrap();
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("unknown variant"), "{}", both(&o));
}

// ---- 6. No link at any component, no hard link. --------------------------------------------

/// The report's guest/ directory a link to a directory elsewhere: nothing is read through it.
#[test]
fn c6_a_guest_directory_that_is_a_link_is_refused() {
    let s = Scratch::new("c6-guest");
    let r = s.path("r");
    archive_with(&r, guest_report(), |h| {
        h.artifacts.retain(|a| !a.path.starts_with("guest/"));
    });
    exits(&verify(&r), 3);
    std::fs::rename(r.join("guest"), s.path("elsewhere")).unwrap();
    symlink(s.path("elsewhere"), r.join("guest")).unwrap();
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("guest"), "{}", both(&o));
}

/// A link among list's entries is named, not followed.
#[test]
fn c6_list_does_not_follow_a_linked_entry() {
    let s = Scratch::new("c6-list");
    archive(&s.path("reports/real"));
    archive(&s.path("outside"));
    symlink(s.path("outside"), s.path("reports/link")).unwrap();
    let o = rig(&[&"list", &s.path("reports")]);
    exits(&o, 0);
    let line = out(&o)
        .lines()
        .find(|l| l.contains("reports/link"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(!line.contains("REVIEW_REQUIRED"), "{}", both(&o));
    assert!(line.contains("link"), "{}", both(&o));
}

/// A matrix row that is a link to a report elsewhere is not read through.
#[test]
fn c6_a_matrix_row_that_is_a_link_is_not_read() {
    let s = Scratch::new("c6-matrix");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    let m = s.path("matrix");
    exits(&merge(&m, &images, &[&r]), 0);
    let outside = s.path("outside");
    let mut g = guest_report();
    g.gates[3].status = Status::Fail;
    archive_with(&outside, g, |_| {});
    std::fs::remove_dir_all(m.join("bookworm")).unwrap();
    symlink(&outside, m.join("bookworm")).unwrap();
    let o = Command::new(BIN)
        .args(["show", m.to_str().unwrap()])
        .env("SHAREDOS_RIG_IMAGES", &images)
        .env("SHAREDOS_RIG_STATE_DIR", state_dir())
        .output()
        .unwrap();
    assert!(err(&o).contains("symbolic link"), "{}", both(&o));
    let row = out(&o)
        .lines()
        .find(|l| l.starts_with("bookworm"))
        .map(str::to_string)
        .unwrap_or_default();
    assert!(
        !row.split_whitespace().any(|w| w == "FAIL"),
        "the row shows the linked report: {}",
        both(&o)
    );
}

/// A hard link to a file outside the report passes a plain regular-file test; it is refused,
/// and its bytes never reach the html page.
#[test]
fn c6_a_hard_link_to_a_host_file_is_refused() {
    let s = Scratch::new("c6-hard");
    let r = s.path("r");
    archive(&r);
    let secret = s.path("host-secret.png");
    std::fs::write(&secret, b"HOST SECRET BYTES, NOT A PNG").unwrap();
    std::fs::hard_link(&secret, r.join("guest/png/extra.png")).unwrap();
    list_artifact(&r, "guest/png/extra.png");
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("extra.png"), "{}", both(&o));
    let html = out(&rig(&[&"show", &r, &"--format", &"html"]));
    let leaked = digest::base64(&std::fs::read(&secret).unwrap(), true);
    assert!(!html.contains(&leaked), "the page embedded the host file");
}

/// merge copies what it judges: a hard link in a report is refused, not copied as the host
/// file's bytes into the matrix.
#[test]
fn c6_merge_refuses_a_hard_link() {
    let s = Scratch::new("c6-merge");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    archive(&r);
    let secret = s.path("host-secret.txt");
    std::fs::write(&secret, b"HOST SECRET").unwrap();
    std::fs::hard_link(&secret, r.join("guest/notes.log")).unwrap();
    let m = s.path("matrix");
    let o = merge(&m, &images, &[&r]);
    exits(&o, 2);
    assert!(!m.join("bookworm/guest/notes.log").exists());
}

// ---- 7. Signatures and reviews. ----------------------------------------------------------

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

/// A signed FAIL review, deleted with its signature, does not turn the report back into one
/// that only awaits a review.
#[test]
fn c7_a_deleted_signed_fail_review_is_noticed() {
    let s = Scratch::new("c7-deleted");
    let (r, allowed, _, alice) = signed(&s);
    exits(
        &rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]),
        3,
    );
    exits(&review(&s, &r, "fail", "alice@example", &alice), 0);
    exits(
        &rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]),
        1,
    );
    std::fs::remove_file(r.join(REVIEW_FILE)).unwrap();
    std::fs::remove_file(r.join("review.json.sig")).unwrap();
    let o = rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]);
    exits(&o, 1);
    assert!(out(&o).contains("review"), "{}", both(&o));
}

/// A review signed by a key the allowed signers file gives to another principal is refused:
/// the CI key cannot sign a review as alice.
#[test]
fn c7_a_review_by_a_principal_its_key_is_not_allowed_for_is_refused() {
    let s = Scratch::new("c7-principal");
    let (r, allowed, ci, alice) = signed(&s);
    exits(&review(&s, &r, "pass", "alice@example", &ci), 0);
    let o = rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]);
    exits(&o, 1);
    assert!(out(&o).contains("alice@example"), "{}", both(&o));
    exits(&review(&s, &r, "pass", "alice@example", &alice), 0);
    exits(
        &rig_in(&s, &[&"verify", &r, &"--allowed-signers", &allowed]),
        0,
    );
}

// ---- 8. Numbers near overflow. -----------------------------------------------------------

/// A restored counter near u64::MAX: the host's recheck of counter_continues must not
/// overflow (a debug build panics).
#[test]
fn c8_a_counter_near_u64_max_does_not_panic() {
    let s = Scratch::new("c8-counter");
    let r = s.path("r");
    archive_with(&r, guest_report(), |h| {
        let g = h.gate_mut(GateName::RestoreLiveProcess).unwrap();
        let c = g
            .checks
            .iter_mut()
            .find(|c| c.name == "counter_continues")
            .unwrap();
        c.value["dump_time"] = serde_json::json!(u64::MAX - 5);
        c.value["seen"] = serde_json::json!(u64::MAX - 3);
        c.value["max"] = serde_json::json!(u64::MAX);
    });
    let o = verify(&r);
    assert!(!err(&o).contains("panicked"), "{}", both(&o));
    exits(&o, 1);
}

/// Gate durations near 2^63: their sum does not panic in a debug build, nor wrap, and verify
/// names the problem.
#[test]
fn c8_durations_near_2_pow_63_do_not_panic_or_wrap() {
    let s = Scratch::new("c8-durations");
    let r = s.path("r");
    let mut g = guest_report();
    g.gates[0].duration_ms = 1 << 63;
    g.gates[1].duration_ms = 1 << 63;
    archive_with(&r, g, |_| {});
    for format in ["text", "md", "html", "junit"] {
        let o = rig(&[&"show", &r, &"--format", &format]);
        assert!(!err(&o).contains("panicked"), "{format}: {}", both(&o));
        exits(&o, 0);
    }
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("duration"), "{}", both(&o));
}

// ---- 9. Smaller. ----------------------------------------------------------------------------

/// A report.json that does not parse is a verdict (exit 1), not a usage error.
#[test]
fn c9_an_unparsable_report_json_exits_1() {
    let s = Scratch::new("c9-json");
    let r = s.path("r");
    archive(&r);
    std::fs::write(r.join(REPORT_FILE), b"{\"schema_version\": 2, \"gates\": [").unwrap();
    exits(&verify(&r), 1);
}

/// An artifact listed twice is refused.
#[test]
fn c9_duplicate_artifact_entries_are_refused() {
    let s = Scratch::new("c9-dup");
    let r = s.path("r");
    archive(&r);
    let mut rep = read(&r);
    let first = rep.artifacts[0].clone();
    rep.artifacts.push(first.clone());
    write_json(&r, &rep);
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains(&first.path), "{}", both(&o));
}

/// A device node in a report is refused without being opened: an inotify watch on it sees no
/// open while verify and show run.
#[test]
fn c9_a_device_node_is_never_opened() {
    if !common::is_root() {
        common::skip::cannot_run(
            "c9_a_device_node_is_never_opened",
            "making a device node needs root",
        );
        return;
    }
    use nix::libc;
    let s = Scratch::new("c9-dev");
    let r = s.path("r");
    archive(&r);
    let node = r.join("guest/console.log");
    nix::sys::stat::mknod(
        &node,
        nix::sys::stat::SFlag::S_IFCHR,
        nix::sys::stat::Mode::from_bits_truncate(0o600),
        nix::sys::stat::makedev(1, 3),
    )
    .unwrap();
    let mut rep = read(&r);
    rep.artifacts.push(report::Artifact {
        path: "guest/console.log".into(),
        sha256: digest::sha256_hex(b""),
        bytes: 0,
        kind: "log".into(),
    });
    write_json(&r, &rep);
    // SAFETY: plain syscalls on descriptors this test owns.
    let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
    assert!(fd >= 0);
    let cpath = std::ffi::CString::new(node.to_str().unwrap()).unwrap();
    let wd = unsafe { libc::inotify_add_watch(fd, cpath.as_ptr(), libc::IN_OPEN) };
    assert!(wd >= 0);
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("guest/console.log"), "{}", both(&o));
    exits(&rig(&[&"show", &r, &"--format", &"html"]), 0);
    let mut buf = [0u8; 4096];
    let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
    unsafe { libc::close(fd) };
    assert!(
        n < 0,
        "the device node was opened ({n} bytes of inotify events)"
    );
}

/// The host's report.json and the guest's own must agree on where it ran, with which options
/// and which fidelity differences, not only on the gates.
#[test]
fn c9_host_and_guest_reports_must_agree_beyond_the_gates() {
    for (what, tweak) in [
        (
            "environment",
            Box::new(|h: &mut Report| h.environment.kernel_release = "6.1.0-99-amd64".into())
                as Box<dyn Fn(&mut Report)>,
        ),
        (
            "options",
            Box::new(|h: &mut Report| h.options.cow_root = true),
        ),
        (
            "fidelity",
            Box::new(|h: &mut Report| {
                let f = h.fidelity_differences[0].clone();
                h.fidelity_differences.push(f);
            }),
        ),
        (
            "marker",
            Box::new(|h: &mut Report| h.marker = "spike-ffffffffffff".into()),
        ),
    ] {
        let s = Scratch::new(&format!("c9-host-{what}"));
        let r = s.path("r");
        archive_with(&r, guest_report(), |h| tweak(h));
        let o = verify(&r);
        exits(&o, 1);
        assert!(out(&o).contains(what), "{what}: {}", both(&o));
    }
}

// ---- Our own. ------------------------------------------------------------------------------

/// The control: an archive built here verifies as a fresh run does.
#[test]
fn own_an_honest_archive_awaits_only_the_review() {
    let s = Scratch::new("own-honest");
    let r = s.path("r");
    archive(&r);
    let o = verify(&r);
    exits(&o, 3);
    no_raw_control(&o);
}

/// report.json itself a link to a report elsewhere: a verdict on the archive, not a usage
/// error, and nothing is read through it.
#[test]
fn own_report_json_that_is_a_link_fails_the_report() {
    let s = Scratch::new("own-link");
    let r = s.path("r");
    archive(&r);
    let outside = s.path("outside");
    archive(&outside);
    std::fs::remove_file(r.join(REPORT_FILE)).unwrap();
    symlink(outside.join(REPORT_FILE), r.join(REPORT_FILE)).unwrap();
    let o = verify(&r);
    exits(&o, 1);
    assert!(out(&o).contains("symbolic link"), "{}", both(&o));
}

/// A matrix.json row label with escapes (matrix.json is as untrusted as a report) reaches the
/// terminal escaped.
#[test]
fn own_matrix_text_escapes_what_matrix_json_says() {
    let s = Scratch::new("own-matrix");
    let images = images_with_expectations(&s);
    let r = s.path("in/bookworm");
    let mut g = guest_report();
    g.environment.kernel_release = "6.1\u{1b}[2J\r".into();
    archive_with(&r, g, |_| {});
    let m = s.path("matrix");
    let o = merge(&m, &images, &[&r]);
    no_raw_control(&o);
    let path = m.join("matrix.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    v["cells"][0]["image"] =
        serde_json::json!("bookworm\u{1b}]8;;http://evil\u{7}click\u{1b}]8;;\u{7}");
    v["cells"][0]["reason"] = serde_json::json!("\u{1b}[2J");
    std::fs::write(&path, serde_json::to_vec_pretty(&v).unwrap()).unwrap();
    let o = rig(&[&"show", &m]);
    no_raw_control(&o);
}

/// The crafted PNGs above are real ones: the png crate decodes a small one to black pixels.
#[test]
fn own_the_crafted_pngs_decode() {
    for (w, h) in [(64, 40), (7, 3), (1, 1), (300, 5)] {
        let bytes = png_inflating(w, h, u64::from(h));
        let d = png::Decoder::new(std::io::Cursor::new(bytes));
        let mut r = d.read_info().unwrap();
        let mut buf = vec![1u8; r.output_buffer_size()];
        let info = r.next_frame(&mut buf).unwrap();
        assert_eq!((info.width, info.height), (w, h));
        assert!(buf.iter().all(|b| *b == 0), "{w}x{h}");
    }
    assert!(png_claiming(4000, 1 << 31).len() < 80);
}

/// A PNG of plausible size whose pixel data goes on inflating far past its last row: the
/// decode stops at the image's end instead of inflating the rest, within a small address space.
#[test]
fn own_pixel_data_past_the_last_row_is_not_inflated() {
    let s = Scratch::new("own-trailing");
    let r = s.path("r");
    archive(&r);
    let bomb = png_inflating(640, 480, (390 << 20) / (1 + 3 * 640));
    assert!(bomb.len() < 400_000, "{}", bomb.len());
    plant_reset_png(&r, &bomb);
    let o = rig_bounded(256, &[&"verify", &r]);
    exits(&o, 1);
    assert!(out(&o).contains("reset.png"), "{}", both(&o));
}
