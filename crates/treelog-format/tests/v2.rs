//! Format 2's layouts (docs/FORMAT.md §4): golden vectors written from the
//! document's tables (not from the encoder), key order, and corrupt or
//! short input returning errors, never panicking.

use proptest::prelude::*;
use treelog_format::v2::*;

fn file() -> InodeEntryV2 {
    InodeEntryV2 {
        parent_id: 2,
        size: 4096,
        block_size: 134_217_728,
        ctime_ms: 1_700_000_000_000,
        mtime_ms: 1_700_000_000_009,
        change_ms: 1_700_000_000_010,
        mode: 0o644,
        kind: KIND_FILE,
        flags: FLAG_COMPLETE_V2 | FLAG_HAS_XATTRS,
        owner_id: 300,
        group_id: 70_000,
        name: b"a.txt".to_vec(),
        target: Vec::new(),
    }
}

fn symlink() -> InodeEntryV2 {
    InodeEntryV2 {
        size: 8,
        block_size: 0,
        kind: KIND_SYMLINK,
        flags: FLAG_COMPLETE_V2,
        mode: 0o777,
        name: b"ln".to_vec(),
        target: b"../a.txt".to_vec(),
        ..file()
    }
}

#[test]
fn inode_entry_golden_vector() {
    let want = [
        "0200000000000000", // parent_id 2
        "0010000000000000", // size 4096
        "0000000800000000", // block_size 128 MiB
        "0068e5cf8b010000", // ctime_ms 1700000000000
        "0968e5cf8b010000", // mtime_ms …009
        "0a68e5cf8b010000", // change_ms …010
        "a4010000",         // mode 0o644
        "00",               // kind file
        "03",               // flags complete | has xattrs
        "05",               // name_len
        "00",               // padding
        "2c010000",         // owner_id 300
        "70110100",         // group_id 70000
        "612e747874",       // "a.txt"
    ]
    .concat();
    assert_eq!(hex::encode(file().encode()), want);
    assert_eq!(
        InodeEntryV2::decode(&hex::decode(&want).unwrap()).unwrap(),
        file()
    );
    let s = symlink();
    let enc = s.encode();
    assert_eq!(enc.len(), 64 + 2 + 8);
    assert_eq!(&enc[52..56], &[KIND_SYMLINK, FLAG_COMPLETE_V2, 2, 0]);
    assert_eq!(&enc[64..], b"ln../a.txt");
    assert_eq!(InodeEntryV2::decode(&enc).unwrap(), s);
}

#[test]
fn short_and_corrupt_entries_are_errors() {
    for v in [file().encode(), symlink().encode()] {
        for n in 0..v.len() {
            assert!(
                InodeEntryV2::decode(&v[..n]).is_err(),
                "{n} of {} bytes decoded",
                v.len()
            );
        }
    }
    let good = file().encode();
    let with = |i: usize, b: u8| {
        let mut v = good.clone();
        v[i] = b;
        v
    };
    assert!(InodeEntryV2::decode(&with(52, 3)).is_err(), "unknown kind");
    assert!(
        InodeEntryV2::decode(&with(53, 0b1000)).is_err(),
        "unknown flag"
    );
    assert!(InodeEntryV2::decode(&with(55, 1)).is_err(), "padding");
    assert!(
        InodeEntryV2::decode(&with(54, 200)).is_err(),
        "name longer than the value"
    );
    let mut long = good.clone();
    long.push(b'!');
    assert!(
        InodeEntryV2::decode(&long).is_err(),
        "bytes after a file's name"
    );
    let mut sym = symlink().encode();
    sym[8] = 3; // size says 3, the target has 8
    assert!(InodeEntryV2::decode(&sym).is_err());
}

#[test]
fn keys_sort_the_inode_then_its_attributes_then_the_next_inode() {
    let mut keys: Vec<Vec<u8>> = vec![
        3u64.to_be_bytes().to_vec(),
        quota_key(2).to_vec(),
        quota_key(300).to_vec(),
        xattrs_key(2).to_vec(),
        xattrs_key(3).to_vec(),
        2u64.to_be_bytes().to_vec(),
        dict_by_id_key(true, 256).to_vec(),
        dict_by_id_key(true, 1).to_vec(),
        dict_count_key(true).to_vec(),
        dict_by_name_key(true, b"alice"),
        dict_count_key(false).to_vec(),
        treelog_format::NEXT_ID_KEY.to_be_bytes().to_vec(),
    ];
    keys.sort();
    let names: Vec<String> = keys
        .iter()
        .map(|k| format!("{:?}", decode_key_v2(k).unwrap()))
        .collect();
    assert_eq!(
        names,
        [
            "Inode(2)",
            "Xattrs(2)",
            "Inode(3)",
            "Xattrs(3)",
            "DictCount { owner: true }",
            "DictById { owner: true, id: 1 }",
            "DictById { owner: true, id: 256 }",
            "DictByName { owner: true, name: [97, 108, 105, 99, 101] }",
            "DictCount { owner: false }",
            "NextId",
            "Quota(2)",
            "Quota(300)",
        ]
    );
    // The quotas are one range, after every other key: an open reads them
    // all with one scan.
    let qs: Vec<&Vec<u8>> = keys
        .iter()
        .filter(|k| k.starts_with(&quota_prefix()))
        .collect();
    assert_eq!(qs.len(), 2);
    assert_eq!(
        hex::encode(quota_key(2)),
        "ffffffffffffffff010000000000000002"
    );
    assert_eq!(hex::encode(xattrs_key(2)), "000000000000000201");
    assert_eq!(
        hex::encode(dict_by_id_key(false, 300)),
        "fffffffffffffffe010000012c"
    );
    assert_eq!(
        hex::encode(dict_by_name_key(true, b"bob")),
        "fffffffffffffffd02626f62"
    );
}

#[test]
fn bad_keys_are_errors() {
    let mut dict_id = dict_by_id_key(true, 1).to_vec();
    dict_id.push(0);
    let mut quota = quota_key(2).to_vec();
    quota.pop();
    for k in [
        vec![],
        vec![0; 7],
        [2u64.to_be_bytes().to_vec(), vec![0x03]].concat(),
        [2u64.to_be_bytes().to_vec(), vec![SUFFIX_XATTRS, 0]].concat(),
        [2u64.to_be_bytes().to_vec(), vec![0x02]].concat(),
        quota,
        [quota_key(2).to_vec(), vec![0]].concat(),
        dict_id,
        [dict_count_key(true).to_vec(), vec![DICT_BY_NAME]].concat(),
        [dict_count_key(true).to_vec(), vec![0x07]].concat(),
        [dict_count_key(true).to_vec(), vec![SUFFIX_XATTRS]].concat(),
    ] {
        assert!(decode_key_v2(&k).is_err(), "{k:?}");
    }
}

#[test]
fn xattr_list_golden_vector_and_corrupt_input() {
    let mut l = XattrList::default();
    assert_eq!(l.set(b"user.b", b"\x00\xff"), None);
    assert_eq!(l.set(b"trusted.a", b"v"), None);
    assert_eq!(l.set(b"user.b", b"hi"), Some(b"\x00\xff".to_vec()));
    let want = [
        "0200",               // 2 attributes
        "09",                 // name length 9
        "747275737465642e61", // "trusted.a"
        "01000000",           // value length 1
        "76",                 // "v"
        "06",                 // name length 6
        "757365722e62",       // "user.b"
        "02000000",           // value length 2
        "6869",               // "hi"
    ]
    .concat();
    let b = l.encode();
    assert_eq!(hex::encode(&b), want);
    assert_eq!(XattrList::decode(&b).unwrap(), l);
    assert_eq!(l.get(b"trusted.a"), Some(&b"v"[..]));
    assert_eq!(l.payload_bytes(), 9 + 1 + 6 + 2);
    for n in 0..b.len() {
        assert!(XattrList::decode(&b[..n]).is_err(), "{n} bytes decoded");
    }
    let mut trailing = b.clone();
    trailing.push(0);
    assert!(XattrList::decode(&trailing).is_err());
    // Out of order, repeated, empty name, oversized value.
    let swap = hex::decode(
        [
            "0200",
            "06",
            "757365722e62",
            "02000000",
            "6869",
            "09",
            "747275737465642e61",
            "01000000",
            "76",
        ]
        .concat(),
    )
    .unwrap();
    assert!(XattrList::decode(&swap).is_err());
    let twice =
        hex::decode(["0200", "01", "61", "00000000", "01", "61", "00000000"].concat()).unwrap();
    assert!(XattrList::decode(&twice).is_err());
    assert!(XattrList::decode(&hex::decode("01000000000000").unwrap()).is_err());
    let big = hex::decode(["0100", "01", "61", "01000100"].concat()).unwrap();
    assert!(XattrList::decode(&big).is_err(), "a 65,537-byte value");
    assert_eq!(XattrList::decode(&[0, 0]).unwrap(), XattrList::default());
    assert_eq!(l.remove(b"user.b"), Some(b"hi".to_vec()));
    assert_eq!(l.remove(b"user.b"), None);
}

#[test]
fn the_migration_marker_round_trips_and_refuses_bad_lengths() {
    use treelog_format::meta::Migration;
    let m = Migration {
        from: 1,
        to: 2,
        next_id: 1002,
    };
    assert_eq!(
        hex::encode(m.encode()),
        "0000000000000001000000000000000200000000000003ea"
    );
    assert_eq!(Migration::decode(&m.encode()).unwrap(), m);
    assert!(Migration::decode(&m.encode()[..23]).is_err());
    assert!(Migration::decode(&[0; 25]).is_err());
}

#[test]
fn an_empty_namespace_of_format_2() {
    let got: Vec<(String, String)> = treelog_format::empty_namespace_inodes()
        .iter()
        .map(|(k, v)| (hex::encode(k), hex::encode(v)))
        .collect();
    let root = [
        "0000000000000000", // parent 0
        "0000000000000000",
        "0000000000000000",
        "0000000000000000",
        "0000000000000000",
        "0000000000000000", // change_ms
        "ed010000",         // mode 0o755
        "01",               // directory
        "01",               // complete
        "00",               // no name
        "00",
        "00000000",
        "00000000",
    ]
    .concat();
    assert_eq!(
        got,
        [
            ("0000000000000001".to_owned(), root),
            ("fffffffffffffffd".to_owned(), "00000000".to_owned()),
            ("fffffffffffffffe".to_owned(), "00000000".to_owned()),
            ("ffffffffffffffff".to_owned(), "0200000000000000".to_owned()),
        ]
    );
}

#[test]
fn quota_entry_round_trips_and_refuses_bad_lengths() {
    let q = QuotaEntry {
        limit_inodes: 1_000_000,
        limit_bytes: NO_LIMIT,
        files: 10,
        directories: 3,
        symlinks: 1,
        bytes: 4096,
        reserved: 0,
    };
    let b = q.encode();
    assert_eq!(
        hex::encode(b),
        [
            "40420f0000000000",
            "ffffffffffffffff",
            "0a00000000000000",
            "0300000000000000",
            "0100000000000000",
            "0010000000000000",
            "0000000000000000",
        ]
        .concat()
    );
    assert_eq!(QuotaEntry::decode(&b).unwrap(), q);
    assert_eq!(q.inodes(), 14);
    assert!(QuotaEntry::decode(&b[..55]).is_err());
    let mut r = b;
    r[48] = 1;
    assert!(QuotaEntry::decode(&r).is_err());
    assert!(decode_u32_le("dict count", &[1, 0, 0]).is_err());
    assert_eq!(decode_u32_le("dict count", &[1, 1, 0, 0]).unwrap(), 257);
}

proptest! {
    #[test]
    fn entries_round_trip(
        parent in any::<u64>(), size in any::<u64>(), mode in 0u32..0o7777,
        kind in 0u8..=2, flags in 0u8..8, owner in any::<u32>(), group in any::<u32>(),
        name in proptest::collection::vec(any::<u8>(), 0..=255),
        target in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let target = if kind == KIND_SYMLINK { target } else { Vec::new() };
        let e = InodeEntryV2 {
            parent_id: parent,
            size: if kind == KIND_SYMLINK { target.len() as u64 } else { size },
            block_size: 7, ctime_ms: 1, mtime_ms: 2, change_ms: 3, mode, kind, flags,
            owner_id: owner, group_id: group, name, target,
        };
        prop_assert_eq!(InodeEntryV2::decode(&e.encode()).unwrap(), e);
    }

    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
        let _ = InodeEntryV2::decode(&b);
        let _ = decode_key_v2(&b);
        let _ = QuotaEntry::decode(&b);
        let _ = XattrList::decode(&b);
        let _ = treelog_format::meta::Migration::decode(&b);
    }

    #[test]
    fn xattr_lists_round_trip(
        attrs in proptest::collection::btree_map(
            proptest::collection::vec(any::<u8>(), 1..=255),
            proptest::collection::vec(any::<u8>(), 0..100),
            0..20,
        )
    ) {
        let l = XattrList { attrs: attrs.into_iter().collect() };
        prop_assert_eq!(XattrList::decode(&l.encode()).unwrap(), l);
    }
}
