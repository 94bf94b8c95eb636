//! Format 2's layouts of the `inodes` column family (docs/FORMAT.md §4):
//! the format this build writes.
//!
//! ```text
//! inodes key                       value
//!   id (8B BE)                     InodeEntry v2: 64-byte header, name, symlink target
//!   id 01                          the inode's extended attributes (XattrList)
//!   fffffffffffffffd               owners: highest id given (u32 LE)
//!   fffffffffffffffd 01 id(u32BE)  owner name
//!   fffffffffffffffd 02 name       owner id (u32 LE)
//!   fffffffffffffffe ...           the same for groups
//!   ffffffffffffffff               next_id (format 1's key and value)
//!   ffffffffffffffff 01 id(u64BE)  QuotaEntry (56 bytes) of directory id
//! ```
//!
//! Everything the index applies reads one key at a time (a replay cannot
//! scan what it has not written yet): an inode's attributes are one value,
//! and the quotas are together under one prefix, which an open reads to
//! know them all.
//!
//! Decoders never panic: short, long or malformed input is `Corruption`.

use crate::error::{Error, Result};
use crate::keys::{GROUP_DICT_KEY, OWNER_DICT_KEY};

pub const INODE_HEADER_LEN_V2: usize = 64;
pub const KIND_FILE: u8 = 0;
pub const KIND_DIRECTORY: u8 = 1;
pub const KIND_SYMLINK: u8 = 2;
pub const FLAG_COMPLETE_V2: u8 = 0b001;
pub const FLAG_HAS_XATTRS: u8 = 0b010;
pub const FLAG_HAS_QUOTA: u8 = 0b100;
const KNOWN_FLAGS_V2: u8 = FLAG_COMPLETE_V2 | FLAG_HAS_XATTRS | FLAG_HAS_QUOTA;

/// The suffix byte of an inode's extended attributes key (`id 01`).
pub const SUFFIX_XATTRS: u8 = 0x01;
/// After the `next_id` key: a directory's quota (`ff…ff 01 id`).
pub const QUOTA_TAG: u8 = 0x01;
/// Under a dictionary key: id → name.
pub const DICT_BY_ID: u8 = 0x01;
/// Under a dictionary key: name → id.
pub const DICT_BY_NAME: u8 = 0x02;

/// One `inodes` value of format 2 (owner and group as dictionary ids).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeEntryV2<B = Vec<u8>> {
    pub parent_id: u64,
    pub size: u64,
    pub block_size: u64,
    /// Creation time (format 1's `creation_time_ms`).
    pub ctime_ms: u64,
    pub mtime_ms: u64,
    /// POSIX ctime: the last change of content or attributes.
    pub change_ms: u64,
    pub mode: u32,
    pub kind: u8,
    pub flags: u8,
    pub owner_id: u32,
    pub group_id: u32,
    pub name: B,
    /// A symlink's target (empty for other kinds).
    pub target: B,
}

fn corrupt(detail: String) -> Error {
    Error::corrupt("inode entry v2", detail)
}

impl<B: AsRef<[u8]>> InodeEntryV2<B> {
    pub fn encoded_len(&self) -> usize {
        INODE_HEADER_LEN_V2 + self.name.as_ref().len() + self.target.as_ref().len()
    }

    /// Appends the value to `out`. The name is at most 255 bytes and only a
    /// symlink has a target (asserted: the engine validates both first).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let name = self.name.as_ref();
        assert!(name.len() <= 255, "a name is at most 255 bytes");
        assert!(
            self.kind == KIND_SYMLINK || self.target.as_ref().is_empty(),
            "only a symlink has a target"
        );
        out.reserve(self.encoded_len());
        for v in [
            self.parent_id,
            self.size,
            self.block_size,
            self.ctime_ms,
            self.mtime_ms,
            self.change_ms,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.mode.to_le_bytes());
        out.extend_from_slice(&[self.kind, self.flags, name.len() as u8, 0]);
        out.extend_from_slice(&self.owner_id.to_le_bytes());
        out.extend_from_slice(&self.group_id.to_le_bytes());
        out.extend_from_slice(name);
        out.extend_from_slice(self.target.as_ref());
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.encoded_len());
        self.encode_into(&mut v);
        v
    }
}

impl<'a> InodeEntryV2<&'a [u8]> {
    /// Decodes a value whose name and target borrow `b`.
    pub fn decode_ref(b: &'a [u8]) -> Result<InodeEntryV2<&'a [u8]>> {
        if b.len() < INODE_HEADER_LEN_V2 {
            return Err(corrupt(format!(
                "{} bytes is shorter than the {INODE_HEADER_LEN_V2}-byte header",
                b.len()
            )));
        }
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        let (kind, flags, name_len, pad) = (b[52], b[53], b[54] as usize, b[55]);
        if kind > KIND_SYMLINK {
            return Err(corrupt(format!("unknown kind {kind}")));
        }
        if flags & !KNOWN_FLAGS_V2 != 0 {
            return Err(corrupt(format!("unknown flag bits {flags:#04x}")));
        }
        if pad != 0 {
            return Err(corrupt(format!("padding byte is {pad:#04x}, expected 0")));
        }
        let rest = &b[INODE_HEADER_LEN_V2..];
        if rest.len() < name_len {
            return Err(corrupt(format!(
                "name of {name_len} bytes, {} left",
                rest.len()
            )));
        }
        let (name, target) = rest.split_at(name_len);
        if kind != KIND_SYMLINK && !target.is_empty() {
            return Err(corrupt(format!(
                "{} bytes after the name of a non-symlink",
                target.len()
            )));
        }
        if kind == KIND_SYMLINK && u64_at(8) != target.len() as u64 {
            return Err(corrupt(format!(
                "a symlink of size {} with a {}-byte target",
                u64_at(8),
                target.len()
            )));
        }
        Ok(InodeEntryV2 {
            parent_id: u64_at(0),
            size: u64_at(8),
            block_size: u64_at(16),
            ctime_ms: u64_at(24),
            mtime_ms: u64_at(32),
            change_ms: u64_at(40),
            mode: u32_at(48),
            kind,
            flags,
            owner_id: u32_at(56),
            group_id: u32_at(60),
            name,
            target,
        })
    }
}

impl InodeEntryV2 {
    pub fn decode(b: &[u8]) -> Result<InodeEntryV2> {
        let e = InodeEntryV2::decode_ref(b)?;
        Ok(InodeEntryV2 {
            parent_id: e.parent_id,
            size: e.size,
            block_size: e.block_size,
            ctime_ms: e.ctime_ms,
            mtime_ms: e.mtime_ms,
            change_ms: e.change_ms,
            mode: e.mode,
            kind: e.kind,
            flags: e.flags,
            owner_id: e.owner_id,
            group_id: e.group_id,
            name: e.name.to_vec(),
            target: e.target.to_vec(),
        })
    }
}

/// `id 01`: the extended attributes of inode `id`.
pub fn xattrs_key(id: u64) -> [u8; 9] {
    let mut k = [0u8; 9];
    k[..8].copy_from_slice(&id.to_be_bytes());
    k[8] = SUFFIX_XATTRS;
    k
}

/// `ffffffffffffffff 01`: the prefix of every quota key.
pub fn quota_prefix() -> [u8; 9] {
    let mut k = [0u8; 9];
    k[..8].copy_from_slice(&crate::keys::NEXT_ID_KEY.to_be_bytes());
    k[8] = QUOTA_TAG;
    k
}

/// `ffffffffffffffff 01 id`: the quota of directory `id`.
pub fn quota_key(id: u64) -> [u8; 17] {
    let mut k = [0u8; 17];
    k[..9].copy_from_slice(&quota_prefix());
    k[9..].copy_from_slice(&id.to_be_bytes());
    k
}

/// What an `inodes` key of format 2 names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyV2<'a> {
    Inode(u64),
    /// The extended attributes of an inode.
    Xattrs(u64),
    /// The quota of a directory.
    Quota(u64),
    /// A dictionary's counter; `owner` tells which.
    DictCount {
        owner: bool,
    },
    DictById {
        owner: bool,
        id: u32,
    },
    DictByName {
        owner: bool,
        name: &'a [u8],
    },
    /// `next_id` (format 1's key, unchanged).
    NextId,
}

pub fn decode_key_v2(k: &[u8]) -> Result<KeyV2<'_>> {
    let bad = |d: String| Error::corrupt("inode key v2", d);
    if k.len() < 8 {
        return Err(bad(format!("{} bytes", k.len())));
    }
    let id = u64::from_be_bytes(k[..8].try_into().expect("8 bytes"));
    let rest = &k[8..];
    let dict = (id == OWNER_DICT_KEY || id == GROUP_DICT_KEY).then_some(id == OWNER_DICT_KEY);
    let next_id = id == crate::keys::NEXT_ID_KEY;
    match (dict, rest.first()) {
        (_, None) if next_id => Ok(KeyV2::NextId),
        (_, Some(&QUOTA_TAG)) if next_id && rest.len() == 9 => Ok(KeyV2::Quota(
            u64::from_be_bytes(rest[1..9].try_into().expect("8 bytes")),
        )),
        (Some(owner), None) => Ok(KeyV2::DictCount { owner }),
        (Some(owner), Some(&DICT_BY_ID)) if rest.len() == 5 => Ok(KeyV2::DictById {
            owner,
            id: u32::from_be_bytes(rest[1..5].try_into().expect("4 bytes")),
        }),
        (Some(owner), Some(&DICT_BY_NAME)) if (2..=256).contains(&rest.len()) => {
            Ok(KeyV2::DictByName {
                owner,
                name: &rest[1..],
            })
        }
        (None, None) if id <= crate::keys::MAX_INODE_ID => Ok(KeyV2::Inode(id)),
        (None, Some(&SUFFIX_XATTRS)) if id <= crate::keys::MAX_INODE_ID && rest.len() == 1 => {
            Ok(KeyV2::Xattrs(id))
        }
        _ => Err(bad(format!(
            "unknown key {}",
            k.iter().map(|b| format!("{b:02x}")).collect::<String>()
        ))),
    }
}

/// `fffffffffffffffd` / `…fe`: a dictionary's counter.
pub fn dict_count_key(owner: bool) -> [u8; 8] {
    (if owner {
        OWNER_DICT_KEY
    } else {
        GROUP_DICT_KEY
    })
    .to_be_bytes()
}

/// `… 01 id`: the name of dictionary id `id`.
pub fn dict_by_id_key(owner: bool, id: u32) -> [u8; 13] {
    let mut k = [0u8; 13];
    k[..8].copy_from_slice(&dict_count_key(owner));
    k[8] = DICT_BY_ID;
    k[9..].copy_from_slice(&id.to_be_bytes());
    k
}

/// `… 02 name`: the id of `name`.
pub fn dict_by_name_key(owner: bool, name: &[u8]) -> Vec<u8> {
    let mut k = Vec::with_capacity(9 + name.len());
    k.extend_from_slice(&dict_count_key(owner));
    k.push(DICT_BY_NAME);
    k.extend_from_slice(name);
    k
}

/// A u32 LE value (a dictionary counter or id).
pub fn decode_u32_le(what: &'static str, b: &[u8]) -> Result<u32> {
    let a: [u8; 4] = b
        .try_into()
        .map_err(|_| Error::corrupt(what, format!("expected 4 bytes, got {}", b.len())))?;
    Ok(u32::from_le_bytes(a))
}

/// A directory's quota and the usage of its subtree (the directory itself
/// excluded). `u64::MAX` is "no limit". Little-endian, seven `u64`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuotaEntry {
    pub limit_inodes: u64,
    pub limit_bytes: u64,
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub bytes: u64,
    /// Reserved (0): room for a limit on another resource.
    pub reserved: u64,
}

pub const QUOTA_ENTRY_LEN: usize = 56;
pub const NO_LIMIT: u64 = u64::MAX;

impl QuotaEntry {
    pub fn inodes(&self) -> u64 {
        self.files + self.directories + self.symlinks
    }

    pub fn encode(&self) -> [u8; QUOTA_ENTRY_LEN] {
        let mut out = [0u8; QUOTA_ENTRY_LEN];
        let fields = [
            self.limit_inodes,
            self.limit_bytes,
            self.files,
            self.directories,
            self.symlinks,
            self.bytes,
            self.reserved,
        ];
        for (i, v) in fields.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<QuotaEntry> {
        if b.len() != QUOTA_ENTRY_LEN {
            return Err(Error::corrupt(
                "quota entry",
                format!("expected {QUOTA_ENTRY_LEN} bytes, got {}", b.len()),
            ));
        }
        let f = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let q = QuotaEntry {
            limit_inodes: f(0),
            limit_bytes: f(1),
            files: f(2),
            directories: f(3),
            symlinks: f(4),
            bytes: f(5),
            reserved: f(6),
        };
        if q.reserved != 0 {
            return Err(Error::corrupt("quota entry", "reserved field is not 0"));
        }
        Ok(q)
    }
}

impl QuotaEntry {
    /// The entry of a quota as the API describes it.
    pub fn from_quota(q: &crate::types::Quota) -> QuotaEntry {
        QuotaEntry {
            limit_inodes: q.limit_inodes.unwrap_or(NO_LIMIT),
            limit_bytes: q.limit_bytes.unwrap_or(NO_LIMIT),
            files: q.usage.files,
            directories: q.usage.directories,
            symlinks: q.usage.symlinks,
            bytes: q.usage.bytes,
            reserved: 0,
        }
    }

    pub fn to_quota(&self) -> crate::types::Quota {
        let limit = |v| (v != NO_LIMIT).then_some(v);
        crate::types::Quota {
            limit_inodes: limit(self.limit_inodes),
            limit_bytes: limit(self.limit_bytes),
            usage: crate::types::Usage {
                files: self.files,
                directories: self.directories,
                symlinks: self.symlinks,
                bytes: self.bytes,
            },
        }
    }
}

/// Longest extended attribute name, its namespace prefix included (Linux's
/// `XATTR_NAME_MAX`).
pub const XATTR_NAME_MAX: usize = 255;
/// Largest extended attribute value (Linux's `XATTR_SIZE_MAX`).
pub const XATTR_VALUE_MAX: usize = 65_536;
/// Most extended attributes of one inode.
pub const XATTRS_MAX: usize = 128;
/// Most bytes of names and values of one inode's extended attributes.
pub const XATTR_BYTES_MAX: usize = 256 << 10;

/// An inode's extended attributes, one value (`id 01`):
///
/// ```text
/// count        u16 LE
/// count times, names in byte order, each once:
///   name_len   u8 (1…255)
///   name       bytes
///   value_len  u32 LE (0…65536)
///   value      bytes
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct XattrList {
    /// (name, value), sorted by name, names unique.
    pub attrs: Vec<(Vec<u8>, Vec<u8>)>,
}

impl XattrList {
    pub fn get(&self, name: &[u8]) -> Option<&[u8]> {
        self.find(name).ok().map(|i| self.attrs[i].1.as_slice())
    }

    fn find(&self, name: &[u8]) -> std::result::Result<usize, usize> {
        self.attrs.binary_search_by(|(n, _)| n.as_slice().cmp(name))
    }

    /// Sets `name` to `value`; returns the value it replaced.
    pub fn set(&mut self, name: &[u8], value: &[u8]) -> Option<Vec<u8>> {
        match self.find(name) {
            Ok(i) => Some(std::mem::replace(&mut self.attrs[i].1, value.to_vec())),
            Err(i) => {
                self.attrs.insert(i, (name.to_vec(), value.to_vec()));
                None
            }
        }
    }

    /// Removes `name`; returns its value.
    pub fn remove(&mut self, name: &[u8]) -> Option<Vec<u8>> {
        self.find(name).ok().map(|i| self.attrs.remove(i).1)
    }

    /// Bytes of names and values (what [`XATTR_BYTES_MAX`] bounds).
    pub fn payload_bytes(&self) -> usize {
        self.attrs.iter().map(|(n, v)| n.len() + v.len()).sum()
    }

    pub fn encode(&self) -> Vec<u8> {
        assert!(self.attrs.len() <= u16::MAX as usize, "too many attributes");
        let mut out = Vec::with_capacity(2 + self.attrs.len() * 5 + self.payload_bytes());
        out.extend_from_slice(&(self.attrs.len() as u16).to_le_bytes());
        for (n, v) in &self.attrs {
            assert!(
                !n.is_empty() && n.len() <= XATTR_NAME_MAX && v.len() <= XATTR_VALUE_MAX,
                "the engine checks names and values first"
            );
            out.push(n.len() as u8);
            out.extend_from_slice(n);
            out.extend_from_slice(&(v.len() as u32).to_le_bytes());
            out.extend_from_slice(v);
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<XattrList> {
        let bad = |d: String| Error::corrupt("extended attributes", d);
        let take = |b: &mut &[u8], n: usize, what: &str| -> Result<Vec<u8>> {
            if b.len() < n {
                return Err(bad(format!("{what}: needs {n} bytes, {} left", b.len())));
            }
            let (h, t) = b.split_at(n);
            *b = t;
            Ok(h.to_vec())
        };
        let mut rest = b;
        let count = take(&mut rest, 2, "count")?;
        let count = u16::from_le_bytes([count[0], count[1]]) as usize;
        let mut attrs: Vec<(Vec<u8>, Vec<u8>)> = Vec::with_capacity(count.min(XATTRS_MAX));
        for i in 0..count {
            let len = take(&mut rest, 1, "name length")?[0] as usize;
            if len == 0 {
                return Err(bad(format!("attribute {i} has an empty name")));
            }
            let name = take(&mut rest, len, "name")?;
            let vl = take(&mut rest, 4, "value length")?;
            let vl = u32::from_le_bytes([vl[0], vl[1], vl[2], vl[3]]) as usize;
            if vl > XATTR_VALUE_MAX {
                return Err(bad(format!("attribute {i} has a {vl}-byte value")));
            }
            let value = take(&mut rest, vl, "value")?;
            if attrs.last().is_some_and(|(p, _)| *p >= name) {
                return Err(bad(format!("attribute {i} is out of order or repeated")));
            }
            attrs.push((name, value));
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} trailing bytes", rest.len())));
        }
        Ok(XattrList { attrs })
    }
}
