//! Key encodings of the `inodes`, `edges` and `log` column families.

use crate::error::{Error, Result};

/// `inodes` special key holding the owner dictionary.
pub const OWNER_DICT_KEY: u64 = 0xFFFF_FFFF_FFFF_FFFD;
/// `inodes` special key holding the group dictionary.
pub const GROUP_DICT_KEY: u64 = 0xFFFF_FFFF_FFFF_FFFE;
/// `inodes` special key holding the `next_id` counter.
pub const NEXT_ID_KEY: u64 = 0xFFFF_FFFF_FFFF_FFFF;
/// Inode ids at or above this value are reserved for the special keys.
pub const MAX_INODE_ID: u64 = OWNER_DICT_KEY - 1;

/// 8-byte big-endian encoding: byte order equals numeric order.
#[inline]
pub fn encode_u64_be(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

/// Decodes exactly 8 big-endian bytes.
pub fn decode_u64_be(what: &'static str, b: &[u8]) -> Result<u64> {
    let arr: [u8; 8] = b
        .try_into()
        .map_err(|_| Error::corrupt(what, format!("expected 8 bytes, got {}", b.len())))?;
    Ok(u64::from_be_bytes(arr))
}

/// `inodes` key of an inode.
#[inline]
pub fn inode_key(id: u64) -> [u8; 8] {
    encode_u64_be(id)
}

pub fn decode_inode_key(b: &[u8]) -> Result<u64> {
    decode_u64_be("inode key", b)
}

/// `edges` key: `[parent 8B BE][name bytes]`, no separator.
pub fn edge_key(parent: u64, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(8 + name.len());
    edge_key_into(parent, name, &mut k);
    k
}

/// [`edge_key`], appended to `out`.
pub fn edge_key_into(parent: u64, name: &[u8], out: &mut Vec<u8>) {
    out.extend_from_slice(&parent.to_be_bytes());
    out.extend_from_slice(name);
}

/// The prefix shared by every edge of one directory.
#[inline]
pub fn edge_prefix(parent: u64) -> [u8; 8] {
    encode_u64_be(parent)
}

/// Splits an edge key into (parent, name bytes).
pub fn decode_edge_key(b: &[u8]) -> Result<(u64, &[u8])> {
    if b.len() < 8 {
        return Err(Error::corrupt(
            "edge key",
            format!("expected at least 8 bytes, got {}", b.len()),
        ));
    }
    let (p, name) = b.split_at(8);
    Ok((decode_u64_be("edge key", p)?, name))
}

/// `edges` value: the child id, 8 bytes big-endian.
#[inline]
pub fn edge_value(child: u64) -> [u8; 8] {
    encode_u64_be(child)
}

pub fn decode_edge_value(b: &[u8]) -> Result<u64> {
    decode_u64_be("edge value", b)
}

/// `next_id` value: 8 bytes **little**-endian (seed 000 §2.1).
#[inline]
pub fn next_id_value(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

pub fn decode_next_id_value(b: &[u8]) -> Result<u64> {
    let arr: [u8; 8] = b.try_into().map_err(|_| {
        Error::corrupt(
            "next_id value",
            format!("expected 8 bytes, got {}", b.len()),
        )
    })?;
    Ok(u64::from_le_bytes(arr))
}

/// `log` key: the record's sequence number, 8 bytes big-endian.
#[inline]
pub fn log_key(seq: u64) -> [u8; 8] {
    encode_u64_be(seq)
}

pub fn decode_log_key(b: &[u8]) -> Result<u64> {
    decode_u64_be("log key", b)
}
