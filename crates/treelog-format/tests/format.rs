//! Codec tests: format 1's layouts (seed 000, docs/FORMAT.md §14: what the
//! migration decodes), the keys formats 1 and 2 share, and the log record
//! envelope with both event schemas: golden byte vectors, round trips, key
//! order, and malformed input returning errors.

mod common;
use common::tiny_record;
use proptest::prelude::*;
use treelog_format::record::{decode_record, decode_record_ref, encode_record};
use treelog_format::*;
use treelog_proto::error::{DictKind, ErrorKind};
use treelog_proto::event::{Event, Record, Update};
use treelog_proto::types::{Attrs, Bytes, FileType, Quota, Usage};

fn unhex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    hex::decode(s).unwrap()
}

fn sample_entry() -> InodeEntry {
    InodeEntry {
        parent_id: 1,
        size: 4096,
        block_size: 134_217_728,
        creation_time_ms: 1_700_000_000_000,
        modification_time_ms: 1_700_000_000_000,
        mode: 0o644,
        flags: FLAG_COMPLETE,
        owner_id: 1,
        group_id: 2,
        name: b"a.txt".to_vec(),
    }
}

const SAMPLE_ENTRY_HEX: &str = "
    0100000000000000  0010000000000000  0000000800000000
    0068e5cf8b010000  0068e5cf8b010000  a4010000
    02 01 02 00
    612e747874";

#[test]
fn golden_inode_entry() {
    let bytes = sample_entry().encode();
    assert_eq!(hex::encode(&bytes), hex::encode(unhex(SAMPLE_ENTRY_HEX)));
    assert_eq!(bytes.len(), INODE_HEADER_LEN + 5);
    assert_eq!(InodeEntry::decode(&bytes).unwrap(), sample_entry());
}

#[test]
fn golden_header_is_48_bytes_with_empty_name() {
    let mut e = sample_entry();
    e.name.clear();
    assert_eq!(e.encode().len(), 48);
}

#[test]
fn golden_keys() {
    assert_eq!(hex::encode(inode_key(2)), "0000000000000002");
    assert_eq!(
        hex::encode(edge_key(1, b"data")),
        "000000000000000164617461"
    );
    assert_eq!(hex::encode(edge_value(3)), "0000000000000003");
    assert_eq!(hex::encode(inode_key(OWNER_DICT_KEY)), "fffffffffffffffd");
    assert_eq!(hex::encode(inode_key(GROUP_DICT_KEY)), "fffffffffffffffe");
    assert_eq!(hex::encode(inode_key(NEXT_ID_KEY)), "ffffffffffffffff");
    assert_eq!(hex::encode(next_id_value(1002)), "ea03000000000000");
    assert_eq!(
        decode_next_id_value(&unhex("ea03000000000000")).unwrap(),
        1002
    );
    assert_eq!(
        decode_edge_key(&unhex("000000000000000164617461")).unwrap(),
        (1, &b"data"[..])
    );
    assert_eq!(hex::encode(log_key(1)), "0000000000000001");
}

#[test]
fn golden_dictionary() {
    let mut d = Dict::default();
    assert_eq!(d.intern(DictKind::Owner, "alice").unwrap(), (1, true));
    assert_eq!(d.intern(DictKind::Owner, "bob").unwrap(), (2, true));
    assert_eq!(d.intern(DictKind::Owner, "alice").unwrap(), (1, false));
    assert_eq!(d.intern(DictKind::Owner, "").unwrap(), (0, false));
    assert_eq!(hex::encode(d.encode()), "0205616c69636503626f62");
    let back = Dict::decode(&unhex("0205616c69636503626f62")).unwrap();
    assert_eq!(back, d);
    assert_eq!(back.lookup(2).unwrap(), "bob");
    assert_eq!(back.lookup(0).unwrap(), "");
    assert_eq!(back.lookup(3).unwrap_err().kind(), ErrorKind::Corruption);
    assert_eq!(hex::encode(Dict::default().encode()), "00");
}

#[test]
fn dictionary_full_is_a_clear_error() {
    let mut d = Dict::default();
    for i in 0..255 {
        let (id, added) = d.intern(DictKind::Group, &format!("g{i}")).unwrap();
        assert!(added);
        assert_eq!(id as usize, i + 1);
    }
    let e = d.intern(DictKind::Group, "one-too-many").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::DictionaryFull);
    assert!(e.to_string().contains("group dictionary is full"), "{e}");
    // Existing strings still resolve; the dictionary was not changed.
    assert_eq!(d.intern(DictKind::Group, "g7").unwrap(), (8, false));
    assert_eq!(d.len(), 255);
    let enc = d.encode();
    assert_eq!(enc[0], 255);
    assert_eq!(Dict::decode(&enc).unwrap(), d);
    // Too-long strings are refused, not truncated.
    let long = "x".repeat(256);
    assert_eq!(
        Dict::default()
            .intern(DictKind::Owner, &long)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn malformed_dictionaries_are_errors() {
    for bad in [
        "",
        "01",
        "0105616c6963",
        "0100",
        "0205616c69636505616c696365",
        "0001",
        "01 01 ff",
    ] {
        let r = Dict::decode(&unhex(bad));
        assert_eq!(r.unwrap_err().kind(), ErrorKind::Corruption, "{bad}");
    }
}

#[test]
fn malformed_entries_are_errors() {
    let good = sample_entry().encode();
    for n in 0..INODE_HEADER_LEN {
        assert_eq!(
            InodeEntry::decode(&good[..n]).unwrap_err().kind(),
            ErrorKind::Corruption
        );
    }
    let mut bad_flags = good.clone();
    bad_flags[44] = 0x84;
    assert_eq!(
        InodeEntry::decode(&bad_flags).unwrap_err().kind(),
        ErrorKind::Corruption
    );
    let mut bad_pad = good.clone();
    bad_pad[47] = 1;
    assert_eq!(
        InodeEntry::decode(&bad_pad).unwrap_err().kind(),
        ErrorKind::Corruption
    );
    assert!(decode_edge_key(&[1, 2, 3]).is_err());
    assert!(decode_edge_value(&[0; 7]).is_err());
    assert!(decode_edge_value(&[0; 9]).is_err());
    assert!(decode_next_id_value(&[0; 4]).is_err());
    assert!(decode_inode_key(&[]).is_err());
}

fn attrs() -> Attrs {
    Attrs {
        kind: FileType::File,
        size: 7,
        block_size: 128 << 20,
        ctime_ms: 5,
        mtime_ms: 6,
        change_ms: 8,
        mode: 0o640,
        complete: false,
        owner: "alice".into(),
        group: "ml".into(),
    }
}

fn sample_record() -> Record {
    let a = attrs();
    let mut b = attrs();
    b.size = 99;
    Record {
        seq: 42,
        time_ms: 1_700_000_000_123,
        events: vec![
            Event::Create {
                id: 7,
                parent: 1,
                name: "f".into(),
                path: "/f".into(),
                attrs: a.clone(),
                parent_mtime_ms: Some(5),
                quotas: vec![],
            },
            Event::SetSize(Update {
                id: 7,
                parent: 1,
                name: "f".into(),
                path: "/f".into(),
                old: a.clone(),
                new: b.clone(),
                quotas: vec![1],
            }),
            Event::Rename {
                id: 7,
                old_parent: 1,
                old_name: "f".into(),
                old_path: "/f".into(),
                new_parent: 1,
                new_name: "g".into(),
                new_path: "/g".into(),
                attrs: b.clone(),
                parent_mtime_ms: Some(9),
                quotas_from: vec![],
                quotas_to: vec![],
                usage: Usage::default(),
            },
            Event::Delete {
                id: 7,
                parent: 1,
                name: "g".into(),
                path: "/g".into(),
                attrs: b,
                parent_mtime_ms: None,
                quotas: vec![1],
            },
        ],
    }
}

#[test]
fn record_round_trip_and_envelope() {
    let rec = sample_record();
    let v = encode_record(&rec).unwrap();
    assert_eq!(v[0], 1, "envelope version");
    assert_eq!(v[1], 2, "event schema version");
    assert_eq!(decode_record(&v, Some(42)).unwrap(), rec);
    assert_eq!(decode_record(&v, None).unwrap(), rec);
    // Wrong key for the record.
    assert_eq!(
        decode_record(&v, Some(43)).unwrap_err().kind(),
        ErrorKind::Corruption
    );
}

/// Every event variant, with a distinct value in every field, so that a
/// variant or field out of order in the borrowed mirror decodes to
/// something else.
fn every_variant_record() -> Record {
    let mut n = 0u64;
    let mut next = || {
        n += 1;
        n
    };
    let mut attrs = |dir: bool| Attrs {
        kind: if dir {
            FileType::Directory
        } else {
            FileType::File
        },
        size: next(),
        block_size: next(),
        ctime_ms: next(),
        mtime_ms: next(),
        change_ms: next(),
        mode: next() as u32,
        complete: !dir,
        owner: format!("owner{}", next()),
        group: format!("group{}", next()),
    };
    let (a, b, c, d, e, f, g, h, i, j) = (
        attrs(true),
        attrs(false),
        attrs(false),
        attrs(true),
        attrs(false),
        attrs(true),
        attrs(false),
        attrs(false),
        attrs(true),
        attrs(false),
    );
    let usage = Usage {
        files: next(),
        directories: next(),
        symlinks: next(),
        bytes: next(),
    };
    let quota = Quota {
        limit_inodes: Some(next()),
        limit_bytes: None,
        usage,
    };
    let update = |id: u64, old: Attrs, new: Attrs| Update {
        id,
        parent: id + 100,
        name: format!("name{id}").into(),
        path: format!("/path{id}").into(),
        old,
        new,
        quotas: vec![id + 1, id + 2],
    };
    Record {
        seq: 9_000_000_001,
        time_ms: 1_700_000_000_999,
        events: vec![
            Event::Create {
                id: 11,
                parent: 12,
                name: "created".into(),
                path: "/dir/created".into(),
                attrs: a,
                parent_mtime_ms: Some(13),
                quotas: vec![14],
            },
            Event::Complete(update(21, b, c)),
            Event::SetSize(update(31, d, e)),
            Event::SetAttr(update(41, f, g)),
            Event::Delete {
                id: 51,
                parent: 52,
                name: "deleted".into(),
                path: "/dir/deleted".into(),
                attrs: h,
                parent_mtime_ms: None,
                quotas: vec![53, 54],
            },
            Event::Rename {
                id: 61,
                old_parent: 62,
                old_name: "before".into(),
                old_path: "/a/before".into(),
                new_parent: 63,
                new_name: "after".into(),
                new_path: "/b/after".into(),
                attrs: i,
                parent_mtime_ms: Some(64),
                quotas_from: vec![65],
                quotas_to: vec![66, 67],
                usage,
            },
            Event::Symlink {
                id: 71,
                parent: 72,
                name: "link".into(),
                path: "/dir/link".into(),
                target: "../target".into(),
                attrs: j,
                parent_mtime_ms: 73,
                quotas: vec![74],
            },
            Event::SetXattr {
                id: 81,
                path: "/x".into(),
                name: "user.k".into(),
                value: Bytes(vec![0, 1, 2]),
                old: Some(Bytes(vec![3])),
                change_ms: 82,
            },
            Event::RemoveXattr {
                id: 91,
                path: "/y".into(),
                name: "trusted.t".into(),
                old: Bytes(vec![4, 5]),
                change_ms: 92,
            },
            Event::SetQuota {
                id: 101,
                path: "/q".into(),
                quota,
            },
            Event::ClearQuota {
                id: 111,
                path: "/r".into(),
                old: Quota {
                    limit_inodes: None,
                    limit_bytes: Some(112),
                    usage: Usage::default(),
                },
            },
        ],
    }
}

#[test]
fn the_borrowed_record_decodes_the_same_bytes() {
    // Replay decodes `RecordRef`, everything else `Record`: the mirror
    // must read every variant and field of the owned form's bytes.
    for rec in [every_variant_record(), sample_record()] {
        let v = encode_record(&rec).unwrap();
        let borrowed = decode_record_ref(&v, Some(rec.seq)).unwrap();
        assert_eq!(borrowed, rec.borrowed());
        assert_eq!(borrowed.events.len(), rec.events.len());
        assert_eq!(
            decode_record_ref(&v, Some(rec.seq + 1)).unwrap_err().kind(),
            ErrorKind::Corruption
        );
    }
}

#[test]
fn record_golden_bytes() {
    // A tiny record whose postcard bytes are easy to check by hand:
    // seq=1 (varint 01), time_ms=2 (02), one event: variant 0 = Create (00),
    // id=2, parent=1, name "a" (01 61), path "/a" (02 2f61), attrs: kind
    // File (00), size 0, block_size 0, ctime 2, mtime 2, change 2, mode
    // 0o644 = 420 (varint a4 03), complete false (00), owner "" (00), group
    // "" (00); parent_mtime_ms Some(2) (01 02), quotas [] (00).
    let rec = tiny_record();
    let payload = "0102 01 00 02 01 0161 022f61 00 00 00 02 02 02 a403 00 00 00 0102 00";
    let v = encode_record(&rec).unwrap();
    assert_eq!(hex::encode(&v[6..]), hex::encode(unhex(payload)));
    assert_eq!(decode_record_ref(&v, Some(1)).unwrap(), rec.borrowed());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&[1, 2]), &unhex(payload));
    assert_eq!(&v[2..6], &crc.to_le_bytes());
    assert_eq!(record::record_schema(&v).unwrap(), 2);
}

#[test]
fn schema_1_records_keep_decoding_with_the_fields_schema_2_added_empty() {
    // The same command as format 1 wrote it: envelope byte 1 = 1, Attrs
    // without a change time, Create without parents' times or quotas.
    let payload = unhex("0102 01 00 02 01 0161 022f61 00 00 00 02 02 a403 00 00 00");
    let mut v = vec![1, 1];
    v.extend_from_slice(&crc32c::crc32c_append(crc32c::crc32c(&[1, 1]), &payload).to_le_bytes());
    v.extend_from_slice(&payload);
    let mut want = tiny_record();
    if let Event::Create {
        parent_mtime_ms, ..
    } = &mut want.events[0]
    {
        *parent_mtime_ms = None;
    }
    assert_eq!(decode_record(&v, Some(1)).unwrap(), want);
    assert_eq!(decode_record_ref(&v, Some(1)).unwrap(), want.borrowed());
    assert_eq!(record::record_schema(&v).unwrap(), 1);
    // `encode_record_v1` writes those bytes.
    let v1 = schema1::RecordV1 {
        seq: 1,
        time_ms: 2,
        events: vec![schema1::EventV1::Create {
            id: 2,
            parent: 1,
            name: "a",
            path: "/a",
            attrs: schema1::AttrsV1 {
                kind: FileType::File,
                size: 0,
                block_size: 0,
                ctime_ms: 2,
                mtime_ms: 2,
                mode: 0o644,
                complete: false,
                owner: "",
                group: "",
            },
        }],
    };
    assert_eq!(record::encode_record_v1(&v1).unwrap(), v);
    // Schema 1 has no symbolic links: a record that names one is corrupt.
    let mut link = v1.clone();
    if let schema1::EventV1::Create { attrs, .. } = &mut link.events[0] {
        attrs.kind = FileType::Symlink;
    }
    let b = record::encode_record_v1(&link).unwrap();
    assert_eq!(
        decode_record(&b, None).unwrap_err().kind(),
        ErrorKind::Corruption
    );
    // A schema-2 payload under schema byte 1 does not decode as schema 1.
    let two = encode_record(&tiny_record()).unwrap();
    let mut as_one = vec![1, 1];
    as_one.extend_from_slice(
        &crc32c::crc32c_append(crc32c::crc32c(&[1, 1]), &two[6..]).to_le_bytes(),
    );
    as_one.extend_from_slice(&two[6..]);
    assert!(decode_record(&as_one, None).is_err());
}

#[test]
fn every_event_of_schema_1_decodes_into_today_s_types() {
    // Format 1's golden fixture holds records of every schema-1 kind; the
    // fixtures test replays them. Here: each variant's conversion.
    let a = schema1::AttrsV1 {
        kind: FileType::Directory,
        size: 1,
        block_size: 2,
        ctime_ms: 3,
        mtime_ms: 4,
        mode: 5,
        complete: true,
        owner: "o",
        group: "g",
    };
    let u = schema1::UpdateV1 {
        id: 1,
        parent: 2,
        name: "n",
        path: "/n",
        old: a,
        new: a,
    };
    let rec = schema1::RecordV1 {
        seq: 3,
        time_ms: 4,
        events: vec![
            schema1::EventV1::Complete(u),
            schema1::EventV1::SetSize(u),
            schema1::EventV1::SetAttr(u),
            schema1::EventV1::Delete {
                id: 1,
                parent: 2,
                name: "n",
                path: "/n",
                attrs: a,
            },
            schema1::EventV1::Rename {
                id: 1,
                old_parent: 2,
                old_name: "n",
                old_path: "/n",
                new_parent: 3,
                new_name: "m",
                new_path: "/m",
                attrs: a,
            },
        ],
    };
    let got = decode_record(&record::encode_record_v1(&rec).unwrap(), Some(3)).unwrap();
    assert_eq!(got.events.len(), 5);
    for ev in &got.events {
        match ev {
            Event::Complete(u) | Event::SetSize(u) | Event::SetAttr(u) => {
                assert_eq!((u.new.change_ms, u.old.change_ms), (4, 4));
                assert!(u.quotas.is_empty());
            }
            Event::Delete {
                attrs,
                parent_mtime_ms,
                quotas,
                ..
            } => assert_eq!(
                (attrs.change_ms, *parent_mtime_ms, quotas.len()),
                (4, None, 0)
            ),
            Event::Rename {
                parent_mtime_ms,
                quotas_from,
                quotas_to,
                usage,
                new_path,
                ..
            } => {
                assert_eq!(new_path, "/m");
                assert_eq!(*parent_mtime_ms, None);
                assert!(quotas_from.is_empty() && quotas_to.is_empty() && usage.is_zero());
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn corrupt_records_are_errors_not_panics() {
    let v = encode_record(&sample_record()).unwrap();
    // Every truncation.
    for n in 0..v.len() {
        assert!(decode_record(&v[..n], None).is_err(), "truncated to {n}");
        assert!(
            decode_record_ref(&v[..n], None).is_err(),
            "truncated to {n}"
        );
    }
    // Every single-bit flip is caught (by the CRC or the header checks).
    for i in 0..v.len() {
        for bit in 0..8 {
            let mut c = v.clone();
            c[i] ^= 1 << bit;
            assert_eq!(
                decode_record(&c, None).unwrap_err().kind(),
                ErrorKind::Corruption
            );
            assert_eq!(
                decode_record_ref(&c, None).unwrap_err().kind(),
                ErrorKind::Corruption
            );
        }
    }
    // Unknown versions are named in the error.
    let mut c = v.clone();
    c[1] = 9;
    let e = decode_record(&c, None).unwrap_err().to_string();
    assert!(e.contains("checksum") || e.contains("version"), "{e}");
}

proptest! {
    #[test]
    fn inode_entry_round_trips(parent in any::<u64>(), size in any::<u64>(), bs in any::<u64>(),
                               ct in any::<u64>(), mt in any::<u64>(), mode in any::<u32>(),
                               flags in 0u8..4, o in any::<u8>(), g in any::<u8>(),
                               name in proptest::collection::vec(any::<u8>(), 0..300)) {
        let e = InodeEntry { parent_id: parent, size, block_size: bs, creation_time_ms: ct,
            modification_time_ms: mt, mode, flags, owner_id: o, group_id: g, name };
        let b = e.encode();
        prop_assert_eq!(b.len(), 48 + e.name.len());
        prop_assert_eq!(InodeEntry::decode(&b).unwrap(), e);
    }

    #[test]
    fn key_order_is_numeric_order(a in any::<u64>(), b in any::<u64>()) {
        prop_assert_eq!(inode_key(a).cmp(&inode_key(b)), a.cmp(&b));
        prop_assert_eq!(log_key(a).cmp(&log_key(b)), a.cmp(&b));
    }

    #[test]
    fn edge_keys_group_by_parent_then_name(p1 in any::<u64>(), p2 in any::<u64>(),
                                           n1 in "[a-z]{1,8}", n2 in "[a-z]{1,8}") {
        let k1 = edge_key(p1, n1.as_bytes());
        let k2 = edge_key(p2, n2.as_bytes());
        prop_assert_eq!(k1.cmp(&k2), (p1, n1.as_bytes()).cmp(&(p2, n2.as_bytes())));
        prop_assert!(k1.starts_with(&edge_prefix(p1)));
        let (p, n) = decode_edge_key(&k1).unwrap();
        prop_assert_eq!(p, p1);
        prop_assert_eq!(n, n1.as_bytes());
    }

    #[test]
    fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = InodeEntry::decode(&bytes);
        let _ = Dict::decode(&bytes);
        let _ = decode_record(&bytes, None);
        let _ = decode_record_ref(&bytes, None);
        let _ = decode_edge_key(&bytes);
        let _ = decode_edge_value(&bytes);
        let _ = decode_next_id_value(&bytes);
    }

    #[test]
    fn dictionary_round_trips(names in proptest::collection::btree_set("[a-zA-Z0-9_]{1,20}", 0..255)) {
        let mut d = Dict::default();
        for n in &names {
            d.intern(DictKind::Owner, n).unwrap();
        }
        prop_assert_eq!(Dict::decode(&d.encode()).unwrap(), d);
    }
}

/// docs/FORMAT.md §11 and §14.3: record 1 of a new database, `mkdir /data`
/// at 1700000000000, as schema 2 writes it and as schema 1 wrote it.
#[test]
fn the_documented_record_1_in_both_schemas() {
    let attrs = Attrs {
        kind: FileType::Directory,
        size: 0,
        block_size: 0,
        ctime_ms: 1_700_000_000_000,
        mtime_ms: 1_700_000_000_000,
        change_ms: 1_700_000_000_000,
        mode: 0o755,
        complete: true,
        owner: String::new(),
        group: String::new(),
    };
    let rec = |t: Option<u64>| Record {
        seq: 1,
        time_ms: 1_700_000_000_000,
        events: vec![Event::Create {
            id: 2,
            parent: 1,
            name: "data".into(),
            path: "/data".into(),
            attrs: attrs.clone(),
            parent_mtime_ms: t,
            quotas: vec![],
        }],
    };
    let two = unhex(
        "01 02 9076e37c 01 80d095ffbc31 01 00 02 01 04 64617461 05 2f64617461 01 00 00
         80d095ffbc31 80d095ffbc31 80d095ffbc31 ed03 01 00 00 01 80d095ffbc31 00",
    );
    assert_eq!(two.len(), 62);
    assert_eq!(
        hex::encode(encode_record(&rec(Some(1_700_000_000_000))).unwrap()),
        hex::encode(&two)
    );
    let one = unhex(
        "01 01 8835fe29 01 80d095ffbc31 01 00 02 01 04 64617461 05 2f64617461 01 00 00
         80d095ffbc31 80d095ffbc31 ed03 01 00 00",
    );
    assert_eq!(one.len(), 48);
    assert_eq!(decode_record(&one, Some(1)).unwrap(), rec(None));
}
