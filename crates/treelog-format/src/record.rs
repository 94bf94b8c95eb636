//! The `log` value: a checksummed, versioned envelope around a postcard record.
//!
//! A single node writes envelope version 1; a node of a Raft cluster
//! writes version 2, which adds the kind of the Raft entry and the leader
//! that proposed it (its term and node id). The record inside is the same
//! in both, byte for byte:
//!
//! ```text
//! version 1 (6-byte header)            version 2 (9+ bytes of header)
//! off len field                        off len field
//!   0   1 envelope version = 1           0   1 envelope version = 2
//!   1   1 event schema version (*)       1   1 event schema version (*)
//!   2   4 crc32c                         2   4 crc32c
//!   6   n postcard(Record)               6   1 entry kind (0 record, 1 blank, 2 membership)
//!                                        7   . term, varint (LEB128, as postcard's u64)
//!                                        .   . leader node id, varint
//!                                        .   n postcard(Record)
//!                                        .   m kind 2 only: the membership (opaque here)
//! ```
//!
//! (*) 2 = `event::Record`; 1 = `schema1::RecordV1` (format 1's events),
//! decoded and upgraded to the current events forever.
//!
//! The CRC-32C is over every byte but its own four, u32 LE. Raft's blank
//! and membership entries hold a `Record` with no events and time 0, so
//! that every reader of the log (replay, change streams, replicas, the
//! bridge) sees one record per sequence and needs to know nothing of Raft.
//!
//! Decoding dispatches on the schema version so that records written by an
//! older build keep decoding after the schema moves on (seed 004's tolerant
//! decoding, with an explicit version instead of guessing).

use crate::error::{Error, Result};
use serde::Deserialize;

use crate::event::{Record, RecordRef, EVENT_SCHEMA_VERSION};
use crate::schema1::RecordV1;

/// The envelope of a single node's records.
pub const ENVELOPE_VERSION: u8 = 1;
/// The envelope of a Raft cluster's entries (term, leader, kind).
pub const ENVELOPE_VERSION_RAFT: u8 = 2;
/// Bytes before the payload in a version-1 envelope (the shortest header).
pub const ENVELOPE_HEADER_LEN: usize = 6;

/// What a log entry is, for Raft (envelope version 2; version 1 holds
/// records only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryKind {
    /// A command's record: namespace events.
    Record,
    /// Raft's blank entry (a new leader's first): no events.
    Blank,
    /// A membership change: no events; the membership follows the record.
    Membership,
}

impl EntryKind {
    fn code(self) -> u8 {
        match self {
            EntryKind::Record => 0,
            EntryKind::Blank => 1,
            EntryKind::Membership => 2,
        }
    }

    fn from_code(c: u8) -> Result<EntryKind> {
        match c {
            0 => Ok(EntryKind::Record),
            1 => Ok(EntryKind::Blank),
            2 => Ok(EntryKind::Membership),
            c => Err(bad(format!("unknown entry kind {c}"))),
        }
    }
}

/// The leader that proposed an entry: its term and node id. Records of
/// envelope version 1 (a single node's) are term 0, node 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
pub struct LeaderTag {
    pub term: u64,
    pub node: u64,
}

/// A log value's envelope, checked (version, checksum) and split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Envelope<'a> {
    pub version: u8,
    pub schema: u8,
    pub kind: EntryKind,
    pub leader: LeaderTag,
    /// `postcard(Record)` and, for a membership entry, the membership
    /// after it.
    pub payload: &'a [u8],
}

fn checksum(header: &[u8], payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(header), payload)
}

/// Encodes a record into its log value (the current schema).
pub fn encode_record(rec: &Record) -> Result<Vec<u8>> {
    encode_with_schema(rec, EVENT_SCHEMA_VERSION)
}

/// Encodes a schema-1 record, as format-1 builds wrote it (for the tests
/// and benchmarks of the migration).
pub fn encode_record_v1(rec: &RecordV1<'_>) -> Result<Vec<u8>> {
    encode_with_schema(rec, 1)
}

fn encode_with_schema<T: serde::Serialize>(rec: &T, schema: u8) -> Result<Vec<u8>> {
    let mut out = vec![ENVELOPE_VERSION, schema, 0, 0, 0, 0];
    let out = postcard::to_extend(rec, std::mem::take(&mut out))
        .map_err(|e| Error::corrupt("log record", format!("encode failed: {e}")))?;
    let mut out = out;
    seal(&mut out);
    Ok(out)
}

/// Writes the checksum of a value whose bytes 2..6 are its place.
fn seal(out: &mut [u8]) {
    let crc = checksum(&out[..2], &out[ENVELOPE_HEADER_LEN..]);
    out[2..6].copy_from_slice(&crc.to_le_bytes());
}

/// A record's body: `postcard(Record)` without its leading `seq`, i.e.
/// `postcard(time_ms) ++ postcard(events)`. What a Raft leader proposes
/// (the sequence is the entry's index, known only when it is appended).
pub fn record_body(rec: &Record) -> Result<Vec<u8>> {
    let full = postcard::to_stdvec(rec)
        .map_err(|e| Error::corrupt("log record", format!("encode failed: {e}")))?;
    let (_, rest) = postcard::take_from_bytes::<u64>(&full)
        .map_err(|e| Error::corrupt("log record", format!("encode failed: {e}")))?;
    Ok(rest.to_vec())
}

/// The body of a record with no events and time 0 (blank and membership
/// entries).
const EMPTY_BODY: [u8; 2] = [0, 0];

/// Encodes a Raft entry into its log value (envelope version 2): the
/// record `seq ++ body` (for a blank or membership entry, `body` is
/// ignored: the record is empty), then `membership` for a membership
/// entry. Every node encodes an entry to the same bytes.
pub fn encode_raft_entry(
    kind: EntryKind,
    leader: LeaderTag,
    seq: u64,
    schema: u8,
    body: &[u8],
    membership: &[u8],
) -> Vec<u8> {
    let body = match kind {
        EntryKind::Record => body,
        EntryKind::Blank | EntryKind::Membership => &EMPTY_BODY[..],
    };
    let mut out = Vec::with_capacity(ENVELOPE_HEADER_LEN + 24 + body.len() + membership.len());
    out.extend_from_slice(&[ENVELOPE_VERSION_RAFT, schema, 0, 0, 0, 0, kind.code()]);
    put_varint(&mut out, leader.term);
    put_varint(&mut out, leader.node);
    put_varint(&mut out, seq);
    out.extend_from_slice(body);
    if kind == EntryKind::Membership {
        out.extend_from_slice(membership);
    }
    seal(&mut out);
    out
}

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// Checks a log value's envelope (length, version, checksum) and splits
/// it. Does not decode the record.
pub fn open_envelope(b: &[u8]) -> Result<Envelope<'_>> {
    if b.len() < ENVELOPE_HEADER_LEN {
        return Err(bad(format!(
            "{} bytes is shorter than the {ENVELOPE_HEADER_LEN}-byte envelope",
            b.len()
        )));
    }
    if b[0] != ENVELOPE_VERSION && b[0] != ENVELOPE_VERSION_RAFT {
        return Err(bad(format!(
            "unknown envelope version {} (this build reads {ENVELOPE_VERSION} and \
             {ENVELOPE_VERSION_RAFT})",
            b[0]
        )));
    }
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&b[2..6]);
    let stored = u32::from_le_bytes(crc);
    let actual = checksum(&b[..2], &b[ENVELOPE_HEADER_LEN..]);
    if stored != actual {
        return Err(bad(format!(
            "checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
        )));
    }
    let rest = &b[ENVELOPE_HEADER_LEN..];
    if b[0] == ENVELOPE_VERSION {
        return Ok(Envelope {
            version: b[0],
            schema: b[1],
            kind: EntryKind::Record,
            leader: LeaderTag::default(),
            payload: rest,
        });
    }
    let (&kind, rest) = rest
        .split_first()
        .ok_or_else(|| bad("the entry kind is missing".into()))?;
    let kind = EntryKind::from_code(kind)?;
    let (term, rest) = postcard::take_from_bytes::<u64>(rest)
        .map_err(|e| bad(format!("the term does not decode: {e}")))?;
    let (node, rest) = postcard::take_from_bytes::<u64>(rest)
        .map_err(|e| bad(format!("the leader's node id does not decode: {e}")))?;
    Ok(Envelope {
        version: b[0],
        schema: b[1],
        kind,
        leader: LeaderTag { term, node },
        payload: rest,
    })
}

/// A Raft entry's parts, from its log value: the envelope, the record and
/// (membership entries) the membership's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RaftEntryParts<'a> {
    pub kind: EntryKind,
    pub leader: LeaderTag,
    pub schema: u8,
    pub seq: u64,
    /// The record's body (see [`record_body`]).
    pub body: &'a [u8],
    pub membership: &'a [u8],
}

/// Splits a log value into a Raft entry's parts (a version-1 record is a
/// record entry of term 0, node 0). Checks the envelope and that the
/// record decodes, and `expected_seq` when given.
pub fn decode_raft_entry(b: &[u8], expected_seq: Option<u64>) -> Result<RaftEntryParts<'_>> {
    let env = open_envelope(b)?;
    let (rec, rest) = decode_schema_ref(env.schema, env.payload)?;
    check_seq(rec.seq, expected_seq)?;
    check_rest(&env, &rec, rest)?;
    let (_, after_seq) = postcard::take_from_bytes::<u64>(env.payload)
        .map_err(|e| bad(format!("payload does not decode: {e}")))?;
    let body_len = after_seq.len() - rest.len();
    Ok(RaftEntryParts {
        kind: env.kind,
        leader: env.leader,
        schema: env.schema,
        seq: rec.seq,
        body: &after_seq[..body_len],
        membership: rest,
    })
}

/// Decodes a log value. `expected_seq`, when given, must match the record.
pub fn decode_record(b: &[u8], expected_seq: Option<u64>) -> Result<Record> {
    let env = open_envelope(b)?;
    let (rec, rest) = match env.schema {
        1 => {
            let (rec, rest) = take::<RecordV1<'_>>(env.payload)?;
            (rec.upgrade()?.to_owned(), rest)
        }
        s => {
            check_schema(s)?;
            take::<Record>(env.payload)?
        }
    };
    check_seq(rec.seq, expected_seq)?;
    check_rest(&env, &rec.borrowed(), rest)?;
    Ok(rec)
}

/// Decodes a log value without copying its strings (replay's form; see
/// [`RecordRef`]). The same checks as [`decode_record`].
pub fn decode_record_ref(b: &[u8], expected_seq: Option<u64>) -> Result<RecordRef<'_>> {
    let env = open_envelope(b)?;
    let (rec, rest) = decode_schema_ref(env.schema, env.payload)?;
    check_seq(rec.seq, expected_seq)?;
    check_rest(&env, &rec, rest)?;
    Ok(rec)
}

fn bad(detail: String) -> Error {
    Error::corrupt("log record", detail)
}

/// Only a membership entry has bytes after its record; Raft's own entries
/// hold no events.
fn check_rest(env: &Envelope<'_>, rec: &RecordRef<'_>, rest: &[u8]) -> Result<()> {
    if env.kind != EntryKind::Membership && !rest.is_empty() {
        return Err(bad(format!(
            "{} trailing bytes after the record",
            rest.len()
        )));
    }
    if env.kind != EntryKind::Record && (!rec.events.is_empty() || rec.time_ms != 0) {
        return Err(bad(format!(
            "a {:?} entry holds events or a time",
            env.kind
        )));
    }
    Ok(())
}

/// The event schema version of a log value, once its envelope checks out.
pub fn record_schema(b: &[u8]) -> Result<u8> {
    let env = open_envelope(b)?;
    check_schema(env.schema)?;
    Ok(env.schema)
}

/// Decodes a payload by its schema version (a schema-1 record upgraded to
/// the current events); returns the bytes after it.
fn decode_schema_ref(schema: u8, payload: &[u8]) -> Result<(RecordRef<'_>, &[u8])> {
    match schema {
        1 => {
            let (rec, rest) = take::<RecordV1<'_>>(payload)?;
            Ok((rec.upgrade()?, rest))
        }
        s => {
            check_schema(s)?;
            take::<RecordRef<'_>>(payload)
        }
    }
}

fn check_schema(schema: u8) -> Result<()> {
    match schema {
        1..=EVENT_SCHEMA_VERSION => Ok(()),
        v => Err(bad(format!(
            "unknown event schema version {v} (this build reads 1..={EVENT_SCHEMA_VERSION})"
        ))),
    }
}

fn take<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<(T, &'a [u8])> {
    postcard::take_from_bytes::<T>(payload)
        .map_err(|e| bad(format!("payload does not decode: {e}")))
}

fn check_seq(seq: u64, expected: Option<u64>) -> Result<()> {
    match expected {
        Some(want) if want != seq => Err(bad(format!("record under key {want} says seq {seq}"))),
        _ => Ok(()),
    }
}
