//! Reads CRIU's pstree.img: the processes a dump recorded, with their pids inside the dumped
//! pid namespace. Just enough of CRIU's image format and of protobuf to list them, so the dump
//! gate needs neither `crit` nor Python in the guest.
//!
//! The file: two little-endian u32 magics (the common image magic, then the pstree magic), then
//! entries, each a little-endian u32 length and a protobuf `pstree_entry`
//! { uint32 pid = 1; uint32 ppid = 2; uint32 pgid = 3; uint32 sid = 4; repeated uint32 threads = 5 }.

use anyhow::{bail, Context, Result};
use std::path::Path;

pub const IMG_COMMON_MAGIC: u32 = 0x5456_4319;
pub const PSTREE_MAGIC: u32 = 0x5027_3030;

#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct PstreeEntry {
    pub pid: u32,
    pub ppid: u32,
    pub pgid: u32,
    pub sid: u32,
    pub threads: Vec<u32>,
}

pub fn read(path: &Path) -> Result<Vec<PstreeEntry>> {
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    parse(&bytes).with_context(|| format!("parsing {}", path.display()))
}

fn u32_le(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at + 4)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

/// Where each entry sits in the file, its length prefix included: (start, end).
pub fn entry_spans(b: &[u8]) -> Result<Vec<(usize, usize)>> {
    let (Some(common), Some(magic)) = (u32_le(b, 0), u32_le(b, 4)) else {
        bail!("{} bytes: too short for the image magics", b.len());
    };
    if common != IMG_COMMON_MAGIC || magic != PSTREE_MAGIC {
        bail!("magics {common:#x} {magic:#x} are not those of a pstree image ({IMG_COMMON_MAGIC:#x} {PSTREE_MAGIC:#x})");
    }
    let mut at = 8;
    let mut out = Vec::new();
    while at < b.len() {
        let len =
            u32_le(b, at).with_context(|| format!("truncated entry length at byte {at}"))? as usize;
        let end = at + 4 + len;
        if end > b.len() {
            bail!("entry of {len} bytes at byte {at} runs past the end");
        }
        out.push((at, end));
        at = end;
    }
    Ok(out)
}

pub fn parse(b: &[u8]) -> Result<Vec<PstreeEntry>> {
    entry_spans(b)?
        .into_iter()
        .map(|(start, end)| {
            entry(&b[start + 4..end]).with_context(|| format!("entry at byte {start}"))
        })
        .collect()
}

fn varint(b: &[u8], at: &mut usize) -> Result<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at).context("truncated varint")?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
    }
    bail!("varint longer than 10 bytes")
}

fn entry(b: &[u8]) -> Result<PstreeEntry> {
    let mut e = PstreeEntry::default();
    let mut seen_pid = false;
    let mut at = 0;
    while at < b.len() {
        let key = varint(b, &mut at)?;
        let (field, wire) = (key >> 3, key & 7);
        match wire {
            0 => {
                let v = u32::try_from(varint(b, &mut at)?).context("value above u32")?;
                match field {
                    1 => {
                        e.pid = v;
                        seen_pid = true;
                    }
                    2 => e.ppid = v,
                    3 => e.pgid = v,
                    4 => e.sid = v,
                    5 => e.threads.push(v),
                    _ => {}
                }
            }
            2 => {
                let len = varint(b, &mut at)? as usize;
                let body = b
                    .get(at..at + len)
                    .context("length-delimited field runs past the entry")?;
                at += len;
                if field == 5 {
                    // Packed repeated threads.
                    let mut p = 0;
                    while p < body.len() {
                        let v = u32::try_from(varint(body, &mut p)?).context("value above u32")?;
                        e.threads.push(v);
                    }
                }
            }
            1 => at += 8,
            5 => at += 4,
            w => bail!("field {field} has unknown wire type {w}"),
        }
    }
    if !seen_pid {
        bail!("entry without a pid");
    }
    Ok(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written by criu 3.17.1's own `crit encode` from
    /// {pid 1 ppid 0}, {pid 8 ppid 1 threads [8, 9]}, {pid 300 ppid 1 threads [300]}.
    const CRIT_ENCODED: [u8; 52] = [
        0x19, 0x43, 0x56, 0x54, 0x30, 0x30, 0x27, 0x50, 0x08, 0x00, 0x00, 0x00, 0x08, 0x01, 0x10,
        0x00, 0x18, 0x01, 0x20, 0x01, 0x0c, 0x00, 0x00, 0x00, 0x08, 0x08, 0x10, 0x01, 0x18, 0x01,
        0x20, 0x01, 0x28, 0x08, 0x28, 0x09, 0x0c, 0x00, 0x00, 0x00, 0x08, 0xac, 0x02, 0x10, 0x01,
        0x18, 0x01, 0x20, 0x01, 0x28, 0xac, 0x02,
    ];

    #[test]
    fn reads_what_crit_wrote() {
        let es = parse(&CRIT_ENCODED).unwrap();
        let pids: Vec<u32> = es.iter().map(|e| e.pid).collect();
        assert_eq!(pids, [1, 8, 300]);
        assert_eq!(es[0].ppid, 0);
        assert_eq!(es[1].ppid, 1);
        assert_eq!(es[1].threads, [8, 9]);
        assert_eq!(es[2].threads, [300]);
        assert_eq!(es[2].sid, 1);
    }

    #[test]
    fn packed_threads() {
        let mut b = CRIT_ENCODED[..8].to_vec();
        let body = [0x08, 0x05, 0x2a, 0x02, 0x05, 0x06];
        b.extend_from_slice(&(body.len() as u32).to_le_bytes());
        b.extend_from_slice(&body);
        let es = parse(&b).unwrap();
        assert_eq!(es[0].pid, 5);
        assert_eq!(es[0].threads, [5, 6]);
    }

    #[test]
    fn refuses_what_is_not_a_pstree() {
        assert!(parse(&[]).is_err());
        let mut other = CRIT_ENCODED.to_vec();
        other[4] = 0;
        assert!(parse(&other).unwrap_err().to_string().contains("magics"));
        assert!(parse(&CRIT_ENCODED[..30]).is_err(), "truncated");
        let only_magics = &CRIT_ENCODED[..8];
        assert_eq!(parse(only_magics).unwrap(), vec![]);
        let mut no_pid = CRIT_ENCODED[..8].to_vec();
        no_pid.extend_from_slice(&[2, 0, 0, 0, 0x10, 0x01]);
        assert!(parse(&no_pid).is_err());
    }
}
