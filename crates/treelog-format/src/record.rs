//! The `log` value: a checksummed, versioned envelope around a postcard record.
//!
//! ```text
//! off len field
//!   0   1 envelope version   = 1
//!   1   1 event schema version (2 = event::Record; 1 = schema1::RecordV1)
//!   2   4 crc32c             over bytes [0..2] ++ payload, u32 LE
//!   6   n payload            postcard(Record)
//! ```
//!
//! Decoding dispatches on the schema version so that records written by an
//! older build keep decoding after the schema moves on (seed 004's tolerant
//! decoding, with an explicit version instead of guessing).

use crate::error::{Error, Result};
use serde::Deserialize;

use crate::event::{Record, RecordRef, EVENT_SCHEMA_VERSION};
use crate::schema1::RecordV1;

pub const ENVELOPE_VERSION: u8 = 1;
pub const ENVELOPE_HEADER_LEN: usize = 6;

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
    let crc = checksum(&out[..2], &out[ENVELOPE_HEADER_LEN..]);
    out[2..6].copy_from_slice(&crc.to_le_bytes());
    Ok(out)
}

/// Decodes a log value. `expected_seq`, when given, must match the record.
pub fn decode_record(b: &[u8], expected_seq: Option<u64>) -> Result<Record> {
    let rec = match decode_payload(b)? {
        (1, payload) => take_all::<RecordV1<'_>>(payload)?.upgrade()?.to_owned(),
        (_, payload) => take_all::<Record>(payload)?,
    };
    check_seq(rec.seq, expected_seq)?;
    Ok(rec)
}

/// Decodes a log value without copying its strings (replay's form; see
/// [`RecordRef`]). The same checks as [`decode_record`].
pub fn decode_record_ref(b: &[u8], expected_seq: Option<u64>) -> Result<RecordRef<'_>> {
    let rec = match decode_payload(b)? {
        (1, payload) => take_all::<RecordV1<'_>>(payload)?.upgrade()?,
        (_, payload) => take_all::<RecordRef<'_>>(payload)?,
    };
    check_seq(rec.seq, expected_seq)?;
    Ok(rec)
}

/// The event schema version of a log value, once its envelope checks out.
pub fn record_schema(b: &[u8]) -> Result<u8> {
    decode_payload(b).map(|(schema, _)| schema)
}

fn bad(detail: String) -> Error {
    Error::corrupt("log record", detail)
}

/// Checks the envelope; returns its schema version (one this build
/// decodes) and payload.
fn decode_payload(b: &[u8]) -> Result<(u8, &[u8])> {
    if b.len() < ENVELOPE_HEADER_LEN {
        return Err(bad(format!(
            "{} bytes is shorter than the {ENVELOPE_HEADER_LEN}-byte envelope",
            b.len()
        )));
    }
    if b[0] != ENVELOPE_VERSION {
        return Err(bad(format!(
            "unknown envelope version {} (this build reads {ENVELOPE_VERSION})",
            b[0]
        )));
    }
    let mut crc = [0u8; 4];
    crc.copy_from_slice(&b[2..6]);
    let stored = u32::from_le_bytes(crc);
    let payload = &b[ENVELOPE_HEADER_LEN..];
    let actual = checksum(&b[..2], payload);
    if stored != actual {
        return Err(bad(format!(
            "checksum mismatch: stored {stored:#010x}, computed {actual:#010x}"
        )));
    }
    match b[1] {
        v @ 1..=EVENT_SCHEMA_VERSION => Ok((v, payload)),
        v => Err(bad(format!(
            "unknown event schema version {v} (this build reads 1..={EVENT_SCHEMA_VERSION})"
        ))),
    }
}

/// Decodes the whole payload as a `T`.
fn take_all<'a, T: Deserialize<'a>>(payload: &'a [u8]) -> Result<T> {
    let (rec, rest) = postcard::take_from_bytes::<T>(payload)
        .map_err(|e| bad(format!("payload does not decode: {e}")))?;
    if !rest.is_empty() {
        return Err(bad(format!(
            "{} trailing bytes after the record",
            rest.len()
        )));
    }
    Ok(rec)
}

fn check_seq(seq: u64, expected: Option<u64>) -> Result<()> {
    match expected {
        Some(want) if want != seq => Err(bad(format!("record under key {want} says seq {seq}"))),
        _ => Ok(()),
    }
}
