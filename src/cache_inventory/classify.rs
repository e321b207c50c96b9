//! [`classify`], the pure step: each item of a listing decided from it and this host's facts.

use super::{Facts, Item, Listing, Status, Verdict, What};
use crate::image::Manifest;
use crate::vm::snapshot;
use std::collections::BTreeSet;

fn verdict(status: Status, why: impl Into<String>) -> Verdict {
    Verdict {
        status,
        why: why.into(),
    }
}

fn held(item: &Item, stale: String) -> Verdict {
    if item.held_by.is_empty() {
        verdict(Status::Stale, stale)
    } else {
        verdict(
            Status::InUse,
            format!("{stale}; but held by PID {}", pids(&item.held_by)),
        )
    }
}

fn pids(p: &[u32]) -> String {
    p.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
}

/// Decides every item of `listing` from `facts`, in the listing's order. Pure.
///
/// - An image entry is current when it is the entry its image's current definition gives;
///   stale when another is, or its image is no longer under images/, or its manifest does not
///   read, unless a snapshot that stays needs it. With no definitions known, none is judged.
/// - A snapshot is current when the installed QEMU made it and the entry it was made from is
///   in the cache and current; stale otherwise (another QEMU, its entry gone or stale, its
///   record damaged).
/// - A verdict is current when it is of this host boot, this QEMU and a guest kernel of an
///   entry in the cache.
/// - A half-made snapshot is stale once its maker no longer runs.
/// - Anything stale that a running process holds is in use, and stays.
pub fn classify(listing: &Listing, facts: &Facts) -> Vec<Verdict> {
    // Image entries first, on their own.
    let mut out: Vec<Option<Verdict>> = listing
        .items
        .iter()
        .map(|item| match &item.what {
            What::Entry(m) => Some(entry_verdict(item, m, facts)),
            _ => None,
        })
        .collect();
    let entry_of = |media: &snapshot::Media| -> Option<(usize, &Item)> {
        listing.items.iter().enumerate().find(
            |(_, i)| matches!(&i.what, What::Entry(Ok(m)) if snapshot::Media::of(m) == *media),
        )
    };
    // Then snapshots, which need their entry.
    for (n, item) in listing.items.iter().enumerate() {
        if let What::Snapshot(r) = &item.what {
            let v = match r {
                Err(e) => held(item, format!("damaged: {e}")),
                Ok(r) => {
                    let made_by = crate::escape::line(&r.key.qemu_version);
                    let entry = entry_of(&snapshot::Media::of_key(&r.key));
                    let needs = match entry {
                        Some((_, e)) => format!("needs image entry {}", e.name),
                        None => format!(
                            "needs the image build {}",
                            &r.key.image_sha256.get(..16).unwrap_or("?")
                        ),
                    };
                    let qemu_stale = facts
                        .qemu_version
                        .as_ref()
                        .filter(|q| **q != r.key.qemu_version);
                    if let Some(q) = qemu_stale {
                        held(
                            item,
                            format!("{needs}; made by {made_by:?}, the installed QEMU is {q:?}"),
                        )
                    } else {
                        let qemu = match &facts.qemu_version {
                            Some(_) => "made by the installed QEMU".to_string(),
                            None => {
                                format!("made by {made_by:?} (no QEMU installed here to compare)")
                            }
                        };
                        match entry {
                            None => held(item, format!("{needs}, which is no longer in the cache")),
                            Some((k, _)) => match out[k].as_ref().map(|v| v.status) {
                                Some(Status::Stale) => {
                                    held(item, format!("{needs}, which is not current"))
                                }
                                Some(Status::Current) => verdict(
                                    Status::Current,
                                    format!("{needs} (present, current); {qemu}"),
                                ),
                                _ => verdict(
                                    Status::Kept,
                                    format!("{needs} (present, kept); {qemu}"),
                                ),
                            },
                        }
                    }
                }
            };
            out[n] = Some(v);
        }
    }
    // A layer reads its disk through its base's: a layer whose base is gone is stale, and a
    // stale base a layer in use was made over stays.
    let base_of = |r: &snapshot::Record| {
        r.base
            .as_ref()
            .map(|b| format!("{}/{}", snapshot::DIR, b.dir))
    };
    for (n, item) in listing.items.iter().enumerate() {
        let What::Snapshot(Ok(r)) = &item.what else {
            continue;
        };
        let Some(base) = base_of(r) else {
            continue;
        };
        let gate = r.key.gate_sha256.as_deref().unwrap_or("?");
        let layer = format!(
            "a layer holding the gate binary {} over {base}",
            gate.get(..16).unwrap_or(gate)
        );
        if listing.items.iter().any(|i| i.name == base) {
            if let Some(v) = out[n].as_mut() {
                v.why = format!("{layer}; {}", v.why);
            }
        } else {
            out[n] = Some(held(item, format!("{layer}, which is gone")));
        }
    }
    // A stale base a layer in use is made over stays; then a stale entry a staying snapshot
    // needs stays, its disk backing that snapshot's overlay.
    keep_for_snapshots_in_use(
        listing,
        &mut out,
        |i| matches!(&i.what, What::Snapshot(Ok(r)) if r.base.is_none()),
        |r, i| base_of(r).as_deref() == Some(i.name.as_str()),
        "made over it",
    );
    keep_for_snapshots_in_use(
        listing,
        &mut out,
        |i| matches!(&i.what, What::Entry(Ok(_))),
        |r, i| matches!(&i.what, What::Entry(Ok(m)) if snapshot::Media::of_key(&r.key) == snapshot::Media::of(m)),
        "made from it",
    );
    let kernels: BTreeSet<&str> = listing
        .items
        .iter()
        .filter_map(|i| match &i.what {
            What::Entry(Ok(m)) => Some(m.kernel_sha256.as_str()),
            _ => None,
        })
        .collect();
    listing
        .items
        .iter()
        .zip(out)
        .map(|(item, v)| match v {
            Some(v) => v,
            None => other_verdict(item, facts, &kernels),
        })
        .collect()
}

/// Each stale item `candidate` picks becomes in use when a snapshot in use `needs` it, naming
/// those snapshots (`how` they need it).
fn keep_for_snapshots_in_use(
    listing: &Listing,
    out: &mut [Option<Verdict>],
    candidate: impl Fn(&Item) -> bool,
    needs: impl Fn(&snapshot::Record, &Item) -> bool,
    how: &str,
) {
    for (n, item) in listing.items.iter().enumerate() {
        if !candidate(item) || out[n].as_ref().map(|v| v.status) != Some(Status::Stale) {
            continue;
        }
        let users: Vec<&str> = listing
            .items
            .iter()
            .zip(out.iter())
            .filter(|(i, v)| {
                matches!(&i.what, What::Snapshot(Ok(r)) if needs(r, item))
                    && v.as_ref().is_some_and(|v| v.status == Status::InUse)
            })
            .map(|(i, _)| i.name.as_str())
            .collect();
        if !users.is_empty() {
            let why = out[n].as_ref().map(|v| v.why.clone()).unwrap_or_default();
            out[n] = Some(verdict(
                Status::InUse,
                format!("{why}; but {} in use is {how}", users.join(", ")),
            ));
        }
    }
}

fn entry_verdict(
    item: &Item,
    m: &std::result::Result<Box<Manifest>, String>,
    facts: &Facts,
) -> Verdict {
    let m = match m {
        Ok(m) => m,
        Err(e) => return held(item, format!("its manifest does not read: {e}")),
    };
    let image = crate::escape::line(&m.image_name);
    let Some(current) = &facts.current else {
        return verdict(
            Status::Kept,
            format!("an entry of image {image:?}; no image definitions found, so not judged"),
        );
    };
    let entry = item.path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    match current.get(&m.image_name) {
        None => held(item, format!("no image {image:?} under images/ any more")),
        Some(Err(e)) => verdict(
            Status::Kept,
            format!("image {image:?}'s definition does not read ({e}), so not judged"),
        ),
        Some(Ok(key)) if key == entry => verdict(
            Status::Current,
            format!("the entry image {image:?}'s current definition gives"),
        ),
        Some(Ok(key)) => held(
            item,
            format!("image {image:?}'s current definition gives entry {key}"),
        ),
    }
}

fn other_verdict(item: &Item, facts: &Facts, kernels: &BTreeSet<&str>) -> Verdict {
    match &item.what {
        What::Making { pid, runs: true } => verdict(
            Status::Current,
            format!("being made by PID {pid}, which runs"),
        ),
        What::Making { pid, runs: false } => held(
            item,
            format!("half-made by PID {pid}, which no longer runs"),
        ),
        What::Accel(Err(e)) => held(item, format!("does not read: {e}")),
        What::Accel(Ok(r)) => {
            let boot = facts
                .host_boot_id
                .as_ref()
                .filter(|b| **b != r.key.host_boot_id)
                .map(|_| "of another host boot".to_string());
            let qemu = facts
                .qemu_version
                .as_ref()
                .filter(|q| **q != r.key.qemu_version)
                .map(|q| {
                    format!(
                        "of {:?}, the installed QEMU is {q:?}",
                        crate::escape::line(&r.key.qemu_version)
                    )
                });
            let kernel = (!kernels.contains(r.key.kernel_sha256.as_str()))
                .then(|| "its guest kernel is in no image entry of the cache".to_string());
            let stale: Vec<String> = [boot, qemu, kernel].into_iter().flatten().collect();
            if stale.is_empty() {
                verdict(
                    Status::Current,
                    format!(
                        "{} verdict of this host boot and QEMU, for a kernel in the cache",
                        crate::escape::line(&r.accel)
                    ),
                )
            } else {
                held(item, stale.join("; "))
            }
        }
        What::Peers => verdict(
            Status::Kept,
            "virtme-ng and virtiofsd, used by cargo xtask bench --peers",
        ),
        What::Lock => verdict(Status::Kept, "the cache lock"),
        What::Builder => verdict(
            Status::Kept,
            "the image builder's own (apt lists, build scratch)",
        ),
        What::Link { target, inside } => verdict(
            Status::Kept,
            format!(
                "a link to {}, not followed{}",
                target.display(),
                if *inside {
                    ""
                } else {
                    ": outside the cache root, so prune refuses this cache"
                }
            ),
        ),
        What::Other => verdict(Status::Kept, "not the rig's: left alone"),
        // Decided in `classify`.
        What::Entry(_) | What::Snapshot(_) => verdict(Status::Kept, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::super::PEERS_DIR;
    use super::*;
    use crate::image::cache;
    use crate::vm::accel_cache;
    use std::collections::BTreeMap;
    use std::path::Path;

    const QEMU: &str = "QEMU emulator version 7.2.22";

    fn key(qemu: &str, image: char) -> snapshot::Key {
        snapshot::Key {
            qemu_version: qemu.into(),
            image_sha256: image.to_string().repeat(64),
            kernel_sha256: "b".repeat(64),
            initrd_sha256: "c".repeat(64),
            argv: vec!["qemu-system-x86_64".into()],
            gate_sha256: None,
            warm_up_sha256: None,
        }
    }

    fn record(k: snapshot::Key) -> snapshot::Record {
        snapshot::record(
            k,
            crate::vm::qemu::Accel::Tcg,
            "forced",
            "console=ttyS0",
            "SHA256:x",
            ("d".repeat(64), 1),
            "e".repeat(64),
        )
    }

    fn manifest(image: char) -> Manifest {
        Manifest {
            image_name: "bookworm".into(),
            image_sha256: image.to_string().repeat(64),
            kernel_sha256: "b".repeat(64),
            initrd_sha256: "c".repeat(64),
            ..Manifest::default()
        }
    }

    fn it(name: &str, what: What) -> Item {
        Item {
            path: Path::new("/c").join(name),
            name: name.into(),
            what,
            bytes: 10,
            modified: None,
            links_out: vec![],
            held_by: vec![],
        }
    }

    fn facts() -> Facts {
        Facts {
            qemu_version: Some(QEMU.into()),
            host_boot_id: Some("boot-1".into()),
            current: Some(BTreeMap::from([(
                "bookworm".to_string(),
                Ok("bookworm-current".to_string()),
            )])),
        }
    }

    fn status_of(l: &Listing, f: &Facts) -> Vec<(String, Status)> {
        l.items
            .iter()
            .zip(classify(l, f))
            .map(|(i, v)| (i.name.clone(), v.status))
            .collect()
    }

    #[test]
    fn a_layer_over_a_gone_base_is_stale_and_a_stale_base_under_a_layer_in_use_stays() {
        let layer_of = |k: snapshot::Key, base: &str| {
            let mut r = record(k.layer(&"9".repeat(64)));
            r.base = Some(snapshot::BaseRef {
                dir: base.into(),
                state_sha256: "d".repeat(64),
                disk_sha256: "e".repeat(64),
            });
            What::Snapshot(Ok(Box::new(r)))
        };
        let old = "QEMU emulator version 6.0";
        let mut held_layer = it(
            "snapshots/bookworm-2222222222222222",
            layer_of(key(old, 'a'), "bookworm-1111111111111111"),
        );
        held_layer.held_by = vec![4242];
        let l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-current", What::Entry(Ok(Box::new(manifest('a'))))),
                it(
                    "snapshots/bookworm-0000000000000000",
                    What::Snapshot(Ok(Box::new(record(key(QEMU, 'a'))))),
                ),
                it(
                    "snapshots/bookworm-3333333333333333",
                    layer_of(key(QEMU, 'a'), "bookworm-0000000000000000"),
                ),
                it(
                    "snapshots/bookworm-4444444444444444",
                    layer_of(key(QEMU, 'a'), "bookworm-5555555555555555"),
                ),
                // Made by another QEMU: stale, but its layer is in use.
                it(
                    "snapshots/bookworm-1111111111111111",
                    What::Snapshot(Ok(Box::new(record(key(old, 'a'))))),
                ),
                held_layer,
            ],
        };
        let v = classify(&l, &facts());
        let st: Vec<Status> = v.iter().map(|v| v.status).collect();
        assert_eq!(
            st,
            [
                Status::Current,
                Status::Current,
                Status::Current,
                Status::Stale,
                Status::InUse,
                Status::InUse
            ],
            "{v:?}"
        );
        assert!(
            v[2].why.starts_with("a layer holding the gate binary 9999"),
            "{}",
            v[2].why
        );
        assert!(v[3].why.contains("which is gone"), "{}", v[3].why);
        assert!(v[4].why.contains("in use is made over it"), "{}", v[4].why);
    }

    #[test]
    fn snapshots_of_another_qemu_or_of_a_gone_entry_are_stale_and_the_current_one_stays() {
        let mut held = it(
            "snapshots/bookworm-4444444444444444",
            What::Snapshot(Ok(Box::new(record(key("QEMU emulator version 6.0", 'a'))))),
        );
        held.held_by = vec![4242];
        let l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-current", What::Entry(Ok(Box::new(manifest('a'))))),
                it("bookworm-old", What::Entry(Ok(Box::new(manifest('f'))))),
                it(
                    "snapshots/bookworm-1111111111111111",
                    What::Snapshot(Ok(Box::new(record(key(QEMU, 'a'))))),
                ),
                it(
                    "snapshots/bookworm-2222222222222222",
                    What::Snapshot(Ok(Box::new(record(key("QEMU emulator version 9.0", 'a'))))),
                ),
                it(
                    "snapshots/bookworm-3333333333333333",
                    What::Snapshot(Ok(Box::new(record(key(QEMU, '9'))))),
                ),
                held,
                it(
                    "snapshots/bookworm-5555555555555555",
                    What::Snapshot(Err("damaged".into())),
                ),
                it("snapshots/.making-1-x", What::Making { pid: 1, runs: true }),
                it(
                    "snapshots/.making-4294967294-x",
                    What::Making {
                        pid: 4294967294,
                        runs: false,
                    },
                ),
                it(PEERS_DIR, What::Peers),
                it(cache::LOCK_FILE, What::Lock),
            ],
        };
        let got = status_of(&l, &facts());
        let want = [
            Status::Current,
            Status::Stale,
            Status::Current,
            Status::Stale,
            Status::Stale,
            Status::InUse,
            Status::Stale,
            Status::Current,
            Status::Stale,
            Status::Kept,
            Status::Kept,
        ];
        assert_eq!(
            got.iter().map(|(_, s)| *s).collect::<Vec<_>>(),
            want,
            "{got:?}"
        );
        let v = classify(&l, &facts());
        assert!(
            v[3].why.contains("9.0") && v[3].why.contains("7.2.22"),
            "{v:?}"
        );
        assert!(v[4].why.contains("no longer in the cache"), "{v:?}");
        assert!(v[5].why.contains("4242"), "{v:?}");
        assert!(
            v[2].why.contains("needs image entry bookworm-current"),
            "{v:?}"
        );
    }

    #[test]
    fn an_entry_not_current_goes_unless_a_snapshot_in_use_needs_it() {
        let mut held = it(
            "snapshots/bookworm-1111111111111111",
            What::Snapshot(Ok(Box::new(record(key(QEMU, 'f'))))),
        );
        let mut l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-old", What::Entry(Ok(Box::new(manifest('f'))))),
                held.clone(),
            ],
        };
        let v = classify(&l, &facts());
        assert_eq!((v[0].status, v[1].status), (Status::Stale, Status::Stale));
        assert!(v[1].why.contains("not current"), "{v:?}");
        held.held_by = vec![77];
        l.items[1] = held;
        let v = classify(&l, &facts());
        assert_eq!((v[0].status, v[1].status), (Status::InUse, Status::InUse));
        // No definitions known: no entry is judged, and so its snapshots stay.
        let f = Facts {
            current: None,
            ..facts()
        };
        l.items[1].held_by.clear();
        let v = classify(&l, &f);
        assert_eq!((v[0].status, v[1].status), (Status::Kept, Status::Kept));
        // An image gone from images/.
        let f = Facts {
            current: Some(BTreeMap::new()),
            ..facts()
        };
        assert!(classify(&l, &f)[0].why.contains("no image"));
    }

    #[test]
    fn a_verdict_of_another_boot_or_qemu_or_kernel_is_stale() {
        let verdict_of = |boot: &str, qemu: &str, kernel: char| {
            let k = accel_cache::Key {
                host_boot_id: boot.into(),
                qemu_version: qemu.into(),
                kernel_sha256: kernel.to_string().repeat(64),
            };
            What::Accel(Ok(Box::new(accel_cache::record(
                &k,
                crate::vm::qemu::Accel::Kvm,
                "probed",
                "2026-12-02T12:00:00Z",
            ))))
        };
        let l = Listing {
            root: "/c".into(),
            items: vec![
                it("bookworm-current", What::Entry(Ok(Box::new(manifest('a'))))),
                it("accel/kernel-1.json", verdict_of("boot-1", QEMU, 'b')),
                it("accel/kernel-2.json", verdict_of("boot-0", QEMU, 'b')),
                it("accel/kernel-3.json", verdict_of("boot-1", "QEMU 5", 'b')),
                it("accel/kernel-4.json", verdict_of("boot-1", QEMU, '7')),
                it(
                    "accel/kernel-5.json",
                    What::Accel(Err("not a verdict".into())),
                ),
            ],
        };
        let got: Vec<Status> = classify(&l, &facts()).iter().map(|v| v.status).collect();
        assert_eq!(
            got,
            [
                Status::Current,
                Status::Current,
                Status::Stale,
                Status::Stale,
                Status::Stale,
                Status::Stale
            ]
        );
    }
}
