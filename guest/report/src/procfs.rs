//! Memory as /proc tells it: smaps_rollup and meminfo, parsed by one set of rules on both
//! sides. The guest's density gate reads its copies' processes this way, and the host reads
//! its QEMU processes the same way for the VM-each column.

use crate::model::density::Mem;
use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::io::Read;

/// Far above a real smaps_rollup or meminfo (a few hundred bytes to a few KiB).
const MAX_PROC_READ: u64 = 64 * 1024;

/// The number of a `Name:   1234 kB` line, `rest` being what follows its colon.
fn kib_value(line: &str, rest: &str, name: &str, what: &str) -> Result<u64> {
    let mut words = rest.split_whitespace();
    words
        .next()
        .and_then(|w| w.parse::<u64>().ok())
        .filter(|_| words.next() == Some("kB") && words.next().is_none())
        .with_context(|| format!("{what}: the line {line:?} is not `{name}: N kB`"))
}

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
        let v = kib_value(line, rest, names[i], what)?;
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

/// A QEMU process's memory by what holds it, each part summed over its mappings of
/// `/proc/PID/smaps`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct QemuMem {
    /// The guest's RAM: the mappings QEMU marks mergeable (VmFlags `mg`), which it does to guest
    /// RAM only.
    pub guest_ram: Mem,
    /// TCG's translation cache: anonymous mappings both writable and executable (VmFlags `wr`
    /// and `ex`), which is how TCG maps its code buffers. None under KVM.
    pub translation_cache: Mem,
    /// Everything else: QEMU's own code and libraries, heap and device state.
    pub qemu_own: Mem,
}

/// The bound on one QEMU's smaps: each mapping is a few hundred bytes, and TCG alone makes
/// some hundred of them.
pub const MAX_SMAPS_READ: u64 = 16 << 20;

/// Splits a QEMU process's `/proc/PID/smaps` into [`QemuMem`]. Every mapping must carry Rss,
/// Pss, Private_Clean, Private_Dirty and VmFlags, once each.
pub fn parse_qemu_smaps(text: &str) -> Result<QemuMem> {
    let mut out = QemuMem::default();
    let mut fields: [Option<u64>; 4] = [None; 4];
    let mut mappings = 0u64;
    const NAMES: [&str; 4] = ["Rss", "Pss", "Private_Clean", "Private_Dirty"];
    for line in text.lines() {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        let name = name.trim();
        if name == "VmFlags" {
            let flags: Vec<&str> = rest.split_whitespace().collect();
            let [Some(rss), Some(pss), Some(clean), Some(dirty)] = fields else {
                bail!("smaps: a mapping ends (VmFlags) without all of Rss, Pss, Private_Clean and Private_Dirty");
            };
            fields = [None; 4];
            let uss = clean
                .checked_add(dirty)
                .context("smaps: Private_Clean + Private_Dirty overflows")?;
            if uss > rss || pss > rss {
                bail!("smaps: Pss {pss} kB or USS {uss} kB exceeds Rss {rss} kB");
            }
            let part = if flags.contains(&"mg") {
                &mut out.guest_ram
            } else if flags.contains(&"wr") && flags.contains(&"ex") {
                &mut out.translation_cache
            } else {
                &mut out.qemu_own
            };
            let add = |a: u64, b: u64| a.checked_add(b).context("smaps: a sum overflows");
            *part = Mem {
                rss_kib: add(part.rss_kib, rss)?,
                pss_kib: add(part.pss_kib, pss)?,
                uss_kib: add(part.uss_kib, uss)?,
            };
            mappings += 1;
            continue;
        }
        let Some(i) = NAMES.iter().position(|n| *n == name) else {
            continue;
        };
        let v = kib_value(line, rest, NAMES[i], "smaps")?;
        if fields[i].replace(v).is_some() {
            bail!("smaps: {} appears twice in one mapping", NAMES[i]);
        }
    }
    if fields.iter().any(Option::is_some) {
        bail!("smaps: the last mapping has no VmFlags line (cut short?)");
    }
    if mappings == 0 {
        bail!("smaps: no mapping");
    }
    Ok(out)
}

/// MemTotal and MemAvailable, in KiB.
pub fn parse_meminfo(text: &str) -> Result<(u64, u64)> {
    let [total, avail] = kib_fields(text, ["MemTotal", "MemAvailable"], "/proc/meminfo")?;
    if avail > total || total == 0 {
        bail!("/proc/meminfo: MemAvailable {avail} kB against MemTotal {total} kB");
    }
    Ok((total, avail))
}

/// This machine's MemTotal and MemAvailable now, in KiB: the guest's for its copies, the
/// host's for its VMs.
pub fn read_meminfo() -> Result<(u64, u64)> {
    parse_meminfo(&read_proc("/proc/meminfo")?)
}

/// A bounded read of a /proc file (no symlink is followed: O_NOFOLLOW on the last component).
pub fn read_proc(path: &str) -> Result<String> {
    read_proc_up_to(path, MAX_PROC_READ)
}

/// [`read_proc`] with a bound of `cap` bytes; a file that reaches it is refused, not cut.
pub fn read_proc_up_to(path: &str, cap: u64) -> Result<String> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("opening {path}"))?;
    let mut s = String::new();
    f.take(cap)
        .read_to_string(&mut s)
        .with_context(|| format!("reading {path}"))?;
    if s.len() as u64 >= cap {
        bail!("{path} holds {cap} bytes or more: not read");
    }
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

    /// Three mappings as a TCG QEMU's smaps shows them: guest RAM, a code buffer, a library.
    const SMAPS: &str = "7f4a97e00000-7f4ad7e00000 rw-p 00000000 00:00 0
Size:            1048576 kB
Rss:              300000 kB
Pss:              290000 kB
Private_Clean:         0 kB
Private_Dirty:    280000 kB
VmFlags: rd wr mr mw me dc ac hg mg
7f4ae0000000-7f4ae3fff000 rwxp 00000000 00:00 0
Size:              65532 kB
Rss:               20480 kB
Pss:               20480 kB
Private_Clean:         0 kB
Private_Dirty:     20480 kB
VmFlags: rd wr ex mr mw me ac hg
7f4b30000000-7f4b30100000 r-xp 00000000 08:01 1234                       /usr/bin/qemu-system-x86_64
Size:               1024 kB
Rss:                1000 kB
Pss:                 500 kB
Private_Clean:         0 kB
Private_Dirty:         0 kB
VmFlags: rd ex mr mw me
";

    #[test]
    fn a_qemu_s_smaps_splits_into_guest_ram_translation_cache_and_its_own() {
        let m = parse_qemu_smaps(SMAPS).unwrap();
        assert_eq!(m.guest_ram.pss_kib, 290_000);
        assert_eq!(m.guest_ram.uss_kib, 280_000);
        assert_eq!(m.translation_cache.pss_kib, 20_480);
        assert_eq!(m.qemu_own.rss_kib, 1000);
        assert_eq!(m.qemu_own.pss_kib, 500);
    }

    #[test]
    fn bad_smaps_is_refused() {
        let cut = &SMAPS[..SMAPS.rfind("VmFlags").unwrap()];
        assert!(format!("{:#}", parse_qemu_smaps(cut).unwrap_err()).contains("cut short"));
        let no_pss = SMAPS.replacen("Pss:              290000 kB\n", "", 1);
        assert!(parse_qemu_smaps(&no_pss).is_err());
        let twice = SMAPS.replacen("Rss:", "Rss: 1 kB\nRss:", 1);
        assert!(format!("{:#}", parse_qemu_smaps(&twice).unwrap_err()).contains("twice"));
        let more = SMAPS.replacen("Pss:              290000", "Pss:              390000", 1);
        assert!(parse_qemu_smaps(&more).is_err());
        // Two mappings of guest RAM whose sizes add past 64 bits.
        let huge = SMAPS
            .replacen("300000 kB", "18446744073709551615 kB", 1)
            .replacen("Rss:               20480", "Rss:   18446744073709551615", 1)
            .replacen("rd wr ex mr mw me ac hg", "rd wr mr mw me ac hg mg", 1);
        assert!(parse_qemu_smaps(&huge).is_err());
        assert!(parse_qemu_smaps("").is_err());
    }

    #[test]
    fn a_proc_file_at_its_bound_is_refused_not_cut() {
        let e = read_proc_up_to("/proc/self/smaps", 64).unwrap_err();
        assert!(format!("{e:#}").contains("not read"), "{e:#}");
        assert!(
            parse_qemu_smaps(&read_proc_up_to("/proc/self/smaps", MAX_SMAPS_READ).unwrap()).is_ok()
        );
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
