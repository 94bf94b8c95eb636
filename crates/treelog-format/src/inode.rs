//! The `inodes` value: a 48-byte fixed header followed by the name.
//!
//! ```text
//! off len field
//!   0   8 parent_id             u64 LE
//!   8   8 size                  u64 LE
//!  16   8 block_size            u64 LE
//!  24   8 creation_time_ms      u64 LE
//!  32   8 modification_time_ms  u64 LE
//!  40   4 mode                  u32 LE
//!  44   1 flags                 bit0 directory, bit1 complete
//!  45   1 owner_id              owner dictionary id (0 = "")
//!  46   1 group_id              group dictionary id (0 = "")
//!  47   1 padding               0
//!  48   n name                  raw bytes (UTF-8 in treelog)
//! ```

use crate::error::{Error, Result};

pub const INODE_HEADER_LEN: usize = 48;
pub const FLAG_DIRECTORY: u8 = 0b01;
pub const FLAG_COMPLETE: u8 = 0b10;
const KNOWN_FLAGS: u8 = FLAG_DIRECTORY | FLAG_COMPLETE;

/// One `inodes` value as stored (owner and group still dictionary ids).
/// The name is owned when decoded; the engine encodes entries whose name
/// borrows an event's (`InodeEntry<&[u8]>`), without copying it first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeEntry<N = Vec<u8>> {
    pub parent_id: u64,
    pub size: u64,
    pub block_size: u64,
    pub creation_time_ms: u64,
    pub modification_time_ms: u64,
    pub mode: u32,
    pub flags: u8,
    pub owner_id: u8,
    pub group_id: u8,
    pub name: N,
}

impl<N: AsRef<[u8]>> InodeEntry<N> {
    pub fn is_dir(&self) -> bool {
        self.flags & FLAG_DIRECTORY != 0
    }

    pub fn is_complete(&self) -> bool {
        self.flags & FLAG_COMPLETE != 0
    }

    pub fn encoded_len(&self) -> usize {
        INODE_HEADER_LEN + self.name.as_ref().len()
    }

    pub fn encode_into(&self, out: &mut Vec<u8>) {
        out.reserve(self.encoded_len());
        out.extend_from_slice(&self.parent_id.to_le_bytes());
        out.extend_from_slice(&self.size.to_le_bytes());
        out.extend_from_slice(&self.block_size.to_le_bytes());
        out.extend_from_slice(&self.creation_time_ms.to_le_bytes());
        out.extend_from_slice(&self.modification_time_ms.to_le_bytes());
        out.extend_from_slice(&self.mode.to_le_bytes());
        out.push(self.flags);
        out.push(self.owner_id);
        out.push(self.group_id);
        out.push(0);
        out.extend_from_slice(self.name.as_ref());
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut v);
        v
    }
}

impl InodeEntry {
    pub fn decode(b: &[u8]) -> Result<InodeEntry> {
        let e = InodeEntry::decode_ref(b)?;
        Ok(InodeEntry {
            parent_id: e.parent_id,
            size: e.size,
            block_size: e.block_size,
            creation_time_ms: e.creation_time_ms,
            modification_time_ms: e.modification_time_ms,
            mode: e.mode,
            flags: e.flags,
            owner_id: e.owner_id,
            group_id: e.group_id,
            name: e.name.to_vec(),
        })
    }
}

impl<'a> InodeEntry<&'a [u8]> {
    /// Decodes an entry whose name borrows `b`.
    pub fn decode_ref(b: &'a [u8]) -> Result<InodeEntry<&'a [u8]>> {
        if b.len() < INODE_HEADER_LEN {
            return Err(Error::corrupt(
                "inode entry",
                format!(
                    "{} bytes is shorter than the {INODE_HEADER_LEN}-byte header",
                    b.len()
                ),
            ));
        }
        let u64_at = |o: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[o..o + 8]);
            u64::from_le_bytes(a)
        };
        let mut m = [0u8; 4];
        m.copy_from_slice(&b[40..44]);
        let flags = b[44];
        if flags & !KNOWN_FLAGS != 0 {
            return Err(Error::corrupt(
                "inode entry",
                format!("unknown flag bits {flags:#04x}"),
            ));
        }
        if b[47] != 0 {
            return Err(Error::corrupt(
                "inode entry",
                format!("padding byte is {:#04x}, expected 0", b[47]),
            ));
        }
        Ok(InodeEntry {
            parent_id: u64_at(0),
            size: u64_at(8),
            block_size: u64_at(16),
            creation_time_ms: u64_at(24),
            modification_time_ms: u64_at(32),
            mode: u32::from_le_bytes(m),
            flags,
            owner_id: b[45],
            group_id: b[46],
            name: &b[INODE_HEADER_LEN..],
        })
    }
}
