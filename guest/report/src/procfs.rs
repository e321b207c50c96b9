//! Memory as /proc tells it: smaps_rollup and meminfo, parsed by one set of rules on both
//! sides. The guest's density gate reads its copies' processes this way, and the host reads
//! its QEMU processes the same way for the VM-each column.

use crate::model::density::Mem;
use anyhow::{bail, Context, Result};
use std::io::Read;

/// Far above a real smaps_rollup or meminfo (a few hundred bytes to a few KiB).
const MAX_PROC_READ: u64 = 64 * 1024;

/// `Name:   1234 kB` lines: the value of each wanted name, which must appear exactly once.
fn kib_fields<const N: usize>(text: &str, names: [&str; N], what: &str) -> Result<[u64; N]> {
    let mut out = [None; N];
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let Some(i) = names.iter().position(|n| *n == name.trim()) else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let v = words
            .next()
            .and_then(|w| w.parse::<u64>().ok())
            .filter(|_| words.next() == Some("kB") && words.next().is_none())
            .with_context(|| format!("{what}: the line {line:?} is not `{}: N kB`", names[i]))?;
        if out[i].replace(v).is_some() {
            bail!("{what}: {} appears twice", names[i]);
        }
    }
    let mut vals = [0; N];
    for (i, v) in out.iter().enumerate() {
        vals[i] = v.with_context(|| format!("{what}: no {} line", names[i]))?;
    }
    Ok(vals)
}

pub fn parse_smaps_rollup(text: &str) -> Result<Mem> {
    let [rss, pss, clean, dirty] = kib_fields(
        text,
        ["Rss", "Pss", "Private_Clean", "Private_Dirty"],
        "smaps_rollup",
    )?;
    let uss = clean
        .checked_add(dirty)
        .context("smaps_rollup: Private_Clean + Private_Dirty overflows")?;
    if uss > rss || pss > rss {
        bail!("smaps_rollup: Pss {pss} kB or USS {uss} kB exceeds Rss {rss} kB");
    }
    Ok(Mem {
        rss_kib: rss,
        pss_kib: pss,
        uss_kib: uss,
    })
}

/// MemTotal and MemAvailable, in KiB.
pub fn parse_meminfo(text: &str) -> Result<(u64, u64)> {
    let [total, avail] = kib_fields(text, ["MemTotal", "MemAvailable"], "/proc/meminfo")?;
    if avail > total || total == 0 {
        bail!("/proc/meminfo: MemAvailable {avail} kB against MemTotal {total} kB");
    }
    Ok((total, avail))
}

/// A bounded read of a /proc file (no symlink is followed: O_NOFOLLOW on the last component).
pub fn read_proc(path: &str) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("opening {path}"))?;
    let mut s = String::new();
    f.take(MAX_PROC_READ)
        .read_to_string(&mut s)
        .with_context(|| format!("reading {path}"))?;
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const ROLLUP: &str =
        "55d1c0a4b000-7ffd9a5f6000 ---p 00000000 00:00 0                          [rollup]
Rss:                3912 kB
Pss:                1203 kB
Pss_Anon:            712 kB
Shared_Clean:       2900 kB
Private_Clean:       100 kB
Private_Dirty:       712 kB
Referenced:         3912 kB
Swap:                  0 kB
";

    #[test]
    fn smaps_rollup_parses_and_uss_is_the_private_pages() {
        let m = parse_smaps_rollup(ROLLUP).unwrap();
        assert_eq!(
            m,
            Mem {
                rss_kib: 3912,
                pss_kib: 1203,
                uss_kib: 812
            }
        );
    }

    #[test]
    fn bad_smaps_rollup_is_refused() {
        let no_pss = ROLLUP.replace("Pss:                1203 kB\n", "");
        assert!(format!("{:#}", parse_smaps_rollup(&no_pss).unwrap_err()).contains("no Pss"));
        let words = ROLLUP.replace("1203 kB", "lots kB");
        assert!(parse_smaps_rollup(&words).is_err());
        let unit = ROLLUP.replace("1203 kB", "1203 MB");
        assert!(parse_smaps_rollup(&unit).is_err());
        let twice = format!("{ROLLUP}Rss: 1 kB\n");
        assert!(format!("{:#}", parse_smaps_rollup(&twice).unwrap_err()).contains("twice"));
        let more_than_rss = ROLLUP.replace("Private_Dirty:       712", "Private_Dirty:     99712");
        assert!(parse_smaps_rollup(&more_than_rss).is_err());
        assert!(parse_smaps_rollup("").is_err());
        assert!(parse_smaps_rollup("\u{0}\u{1}garbage").is_err());
    }

    #[test]
    fn meminfo_parses_and_refuses_nonsense() {
        let t = "MemTotal:        1001234 kB\nMemFree:          500000 kB\nMemAvailable:     700000 kB\n";
        assert_eq!(parse_meminfo(t).unwrap(), (1_001_234, 700_000));
        assert!(parse_meminfo("MemTotal: 10 kB\nMemAvailable: 20 kB\n").is_err());
        assert!(parse_meminfo("MemTotal: 10 kB\n").is_err());
    }

    #[test]
    fn this_process_reads() {
        let m = parse_smaps_rollup(&read_proc("/proc/self/smaps_rollup").unwrap()).unwrap();
        assert!(m.rss_kib > 0 && m.pss_kib <= m.rss_kib);
        let (total, avail) = parse_meminfo(&read_proc("/proc/meminfo").unwrap()).unwrap();
        assert!(total >= avail);
    }
}
