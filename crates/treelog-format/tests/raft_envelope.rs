//! The log envelope's version 2 (a Raft cluster's entries): golden bytes,
//! what each decoder makes of them, and corrupt input refused.

mod common;
use common::tiny_record;
use treelog_format::record::{
    decode_raft_entry, decode_record, decode_record_ref, encode_raft_entry, encode_record,
    open_envelope, record_body, EntryKind, LeaderTag,
};
use treelog_proto::error::ErrorKind;
use treelog_proto::event::{Event, Record};
use treelog_proto::types::{Attrs, FileType};

fn unhex(s: &str) -> Vec<u8> {
    hex::decode(s.replace(' ', "")).unwrap()
}

/// Its postcard bytes (seq 01, then the body).
const PAYLOAD: &str = "01 02 01 00 02 01 0161 022f61 00 00 00 02 02 02 a403 00 00 00 0102 00";

fn crc_of(value: &[u8]) -> [u8; 4] {
    let c = crc32c::crc32c_append(crc32c::crc32c(&value[..2]), &value[6..]);
    c.to_le_bytes()
}

const LEADER: LeaderTag = LeaderTag { term: 3, node: 2 };

#[test]
fn a_record_entry_holds_the_single_node_record_byte_for_byte() {
    let rec = tiny_record();
    let body = record_body(&rec).unwrap();
    // The body is the record without its sequence.
    assert_eq!(hex::encode(&body), hex::encode(&unhex(PAYLOAD)[1..]));
    let v = encode_raft_entry(EntryKind::Record, LEADER, 1, 2, &body, &[]);
    // version 2, schema 2, CRC, kind 0, term 3, node 2, the record.
    let mut want = unhex("02 02 00000000 00 03 02");
    want.extend(unhex(PAYLOAD));
    let crc = crc_of(&want);
    want[2..6].copy_from_slice(&crc);
    assert_eq!(hex::encode(&v), hex::encode(&want));
    // The same payload as version 1 writes.
    let v1 = encode_record(&rec).unwrap();
    assert_eq!(&v[9..], &v1[6..]);
    // Every decoder reads it.
    assert_eq!(decode_record(&v, Some(1)).unwrap(), rec);
    assert_eq!(decode_record_ref(&v, Some(1)).unwrap(), rec.borrowed());
    let p = decode_raft_entry(&v, Some(1)).unwrap();
    assert_eq!(
        (p.kind, p.leader, p.schema, p.seq),
        (EntryKind::Record, LEADER, 2, 1)
    );
    assert_eq!(p.body, &body[..]);
    assert!(p.membership.is_empty());
    let env = open_envelope(&v).unwrap();
    assert_eq!(
        (env.version, env.kind, env.leader),
        (2, EntryKind::Record, LEADER)
    );
}

#[test]
fn a_single_node_record_is_a_record_entry_of_term_0() {
    let v1 = encode_record(&tiny_record()).unwrap();
    let p = decode_raft_entry(&v1, Some(1)).unwrap();
    assert_eq!(
        (p.kind, p.leader, p.seq),
        (EntryKind::Record, LeaderTag { term: 0, node: 0 }, 1)
    );
    // Re-encoded as a Raft entry of term 0, its record is unchanged.
    let v2 = encode_raft_entry(p.kind, p.leader, p.seq, p.schema, p.body, &[]);
    assert_eq!(&v2[9..], &v1[6..]);
}

#[test]
fn raft_s_own_entries_are_records_without_events() {
    // A blank entry at seq 5: the record {5, 0, []}.
    let blank = encode_raft_entry(EntryKind::Blank, LEADER, 5, 2, b"ignored", &[]);
    let mut want = unhex("02 02 00000000 01 03 02 05 00 00");
    let crc = crc_of(&want);
    want[2..6].copy_from_slice(&crc);
    assert_eq!(hex::encode(&blank), hex::encode(&want));
    let r = decode_record(&blank, Some(5)).unwrap();
    assert_eq!((r.seq, r.time_ms, r.events.len()), (5, 0, 0));
    // A membership entry: the empty record, then the membership's bytes.
    let m = encode_raft_entry(EntryKind::Membership, LEADER, 6, 2, &[], b"members");
    let p = decode_raft_entry(&m, Some(6)).unwrap();
    assert_eq!(
        (p.kind, p.membership),
        (EntryKind::Membership, &b"members"[..])
    );
    assert!(decode_record(&m, Some(6)).unwrap().events.is_empty());
    // Terms and node ids of any size.
    let big = LeaderTag {
        term: u64::MAX,
        node: 1 << 40,
    };
    let v = encode_raft_entry(EntryKind::Blank, big, u64::MAX - 1, 2, &[], &[]);
    let p = decode_raft_entry(&v, Some(u64::MAX - 1)).unwrap();
    assert_eq!(p.leader, big);
}

#[test]
fn corrupt_entries_are_errors_not_panics() {
    let body = record_body(&tiny_record()).unwrap();
    let values = [
        encode_raft_entry(EntryKind::Record, LEADER, 1, 2, &body, &[]),
        encode_raft_entry(EntryKind::Blank, LEADER, 1, 2, &[], &[]),
        encode_raft_entry(EntryKind::Membership, LEADER, 1, 2, &[], b"m"),
    ];
    for v in &values {
        for n in 0..v.len() {
            assert!(
                decode_raft_entry(&v[..n], None).is_err(),
                "truncated to {n}"
            );
            // A membership entry's own bytes may be cut and still be
            // bytes: the checksum catches it.
            assert!(decode_record(&v[..n], None).is_err(), "truncated to {n}");
        }
        for i in 0..v.len() {
            for bit in 0..8 {
                let mut c = v.clone();
                c[i] ^= 1 << bit;
                assert_eq!(
                    decode_raft_entry(&c, None).unwrap_err().kind(),
                    ErrorKind::Corruption
                );
            }
        }
    }
    // Well-formed envelopes around what no entry holds.
    let reseal = |mut v: Vec<u8>| {
        let crc = crc_of(&v);
        v[2..6].copy_from_slice(&crc);
        v
    };
    let mut unknown_kind = values[1].clone();
    unknown_kind[6] = 9;
    let e = decode_record(&reseal(unknown_kind), None).unwrap_err();
    assert!(e.to_string().contains("kind"), "{e}");
    // A blank entry holding events, and a record with bytes after it.
    let mut with_events = unhex("02 02 00000000 01 03 02");
    with_events.extend(unhex(PAYLOAD));
    assert_eq!(
        decode_record(&reseal(with_events), None)
            .unwrap_err()
            .kind(),
        ErrorKind::Corruption
    );
    let mut trailing = values[0].clone();
    trailing.push(0);
    assert_eq!(
        decode_record(&reseal(trailing), None).unwrap_err().kind(),
        ErrorKind::Corruption
    );
    // An envelope version this build does not know.
    let mut v3 = values[0].clone();
    v3[0] = 3;
    let e = decode_record(&reseal(v3), None).unwrap_err();
    assert!(e.to_string().contains("envelope version 3"), "{e}");
}

/// FORMAT.md §11's vectors: record 1 of a new database (`mkdir /data`) as
/// an entry of term 3 proposed by node 2, and a blank entry.
#[test]
fn the_documented_golden_vectors() {
    let rec = Record {
        seq: 1,
        time_ms: 1_700_000_000_000,
        events: vec![Event::Create {
            id: 2,
            parent: 1,
            name: "data".into(),
            path: "/data".into(),
            attrs: Attrs {
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
            },
            parent_mtime_ms: Some(1_700_000_000_000),
            quotas: vec![],
        }],
    };
    let v = encode_raft_entry(
        EntryKind::Record,
        LEADER,
        1,
        2,
        &record_body(&rec).unwrap(),
        &[],
    );
    let want = "0202 2b70b095 00 03 02 01 80d095ffbc31 01 00 02 01 04 64617461 05 2f64617461 \
                01 00 00 80d095ffbc31 80d095ffbc31 80d095ffbc31 ed03 01 00 00 01 80d095ffbc31 00";
    assert_eq!(hex::encode(&v), hex::encode(unhex(want)));
    assert_eq!(v.len(), 65);
    let blank = encode_raft_entry(EntryKind::Blank, LEADER, 5, 2, &[], &[]);
    assert_eq!(hex::encode(&blank), "02025cdfaded010302050000");
}
