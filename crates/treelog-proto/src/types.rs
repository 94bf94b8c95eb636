//! Value types shared by the API, the events and the CLI.

use serde::{Deserialize, Serialize};

use crate::bytestr::ByteString;

/// File, directory or symbolic link.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileType {
    #[default]
    File,
    Directory,
    /// A symbolic link (event schema 2): its target is read with
    /// `readlink`; paths are never resolved through it.
    Symlink,
}

impl FileType {
    pub fn is_dir(self) -> bool {
        self == FileType::Directory
    }

    pub fn is_symlink(self) -> bool {
        self == FileType::Symlink
    }

    /// The kind's name in messages.
    pub fn as_str(self) -> &'static str {
        match self {
            FileType::File => "file",
            FileType::Directory => "directory",
            FileType::Symlink => "symbolic link",
        }
    }
}

/// The attributes of an inode, with owner and group as strings (the
/// default: an empty file, mode 0, the default owner and group).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attrs {
    pub kind: FileType,
    pub size: u64,
    pub block_size: u64,
    /// Creation time, ms since the epoch.
    pub ctime_ms: u64,
    /// Modification time: of a file's content, of a directory's entries.
    pub mtime_ms: u64,
    /// Change time (POSIX `ctime`): the last change of content or
    /// attributes. Records of event schema 1 did not carry it: their
    /// inodes have `change_ms = mtime_ms`.
    pub change_ms: u64,
    pub mode: u32,
    pub complete: bool,
    pub owner: String,
    pub group: String,
}

/// [`Attrs`] borrowing its owner and group: replay's form, decoded from a
/// log value without copying (see [`crate::event::RecordRef`]). Field for
/// field the same as `Attrs`, so the two decode the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttrsRef<'a> {
    pub kind: FileType,
    pub size: u64,
    pub block_size: u64,
    pub ctime_ms: u64,
    pub mtime_ms: u64,
    pub change_ms: u64,
    pub mode: u32,
    pub complete: bool,
    pub owner: &'a str,
    pub group: &'a str,
}

impl Attrs {
    pub fn borrowed(&self) -> AttrsRef<'_> {
        AttrsRef {
            kind: self.kind,
            size: self.size,
            block_size: self.block_size,
            ctime_ms: self.ctime_ms,
            mtime_ms: self.mtime_ms,
            change_ms: self.change_ms,
            mode: self.mode,
            complete: self.complete,
            owner: &self.owner,
            group: &self.group,
        }
    }
}

impl AttrsRef<'_> {
    pub fn to_owned(&self) -> Attrs {
        Attrs {
            kind: self.kind,
            size: self.size,
            block_size: self.block_size,
            ctime_ms: self.ctime_ms,
            mtime_ms: self.mtime_ms,
            change_ms: self.change_ms,
            mode: self.mode,
            complete: self.complete,
            owner: self.owner.to_owned(),
            group: self.group.to_owned(),
        }
    }

    /// What this inode counts for in a quota's usage: one inode of its
    /// kind, and a file's size in bytes.
    pub fn usage(&self) -> Usage {
        let mut u = Usage::default();
        match self.kind {
            FileType::File => {
                u.files = 1;
                u.bytes = self.size;
            }
            FileType::Directory => u.directories = 1,
            FileType::Symlink => u.symlinks = 1,
        }
        u
    }
}

/// An inode as a caller sees it (`stat`).
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub id: u64,
    /// 0 for the root.
    pub parent: u64,
    /// "" for the root.
    pub name: ByteString,
    pub attrs: Attrs,
}

/// One entry of a directory listing.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: ByteString,
    pub inode: Inode,
}

/// One page of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    pub entries: Vec<DirEntry>,
    /// Pass as `start_after` to get the next page; `None` when this page is the last.
    pub next_start_after: Option<ByteString>,
}

/// Inodes and bytes of a subtree: what a directory quota counts and what
/// `count` reports. Bytes are the sizes of files (directories and
/// symbolic links count as inodes only).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Usage {
    pub files: u64,
    pub directories: u64,
    pub symlinks: u64,
    pub bytes: u64,
}

impl Usage {
    pub fn inodes(&self) -> u64 {
        self.files
            .saturating_add(self.directories)
            .saturating_add(self.symlinks)
    }

    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    /// `self + o`, `None` on overflow.
    pub fn checked_add(&self, o: &Usage) -> Option<Usage> {
        Some(Usage {
            files: self.files.checked_add(o.files)?,
            directories: self.directories.checked_add(o.directories)?,
            symlinks: self.symlinks.checked_add(o.symlinks)?,
            bytes: self.bytes.checked_add(o.bytes)?,
        })
    }

    /// `self - o`, `None` below zero.
    pub fn checked_sub(&self, o: &Usage) -> Option<Usage> {
        Some(Usage {
            files: self.files.checked_sub(o.files)?,
            directories: self.directories.checked_sub(o.directories)?,
            symlinks: self.symlinks.checked_sub(o.symlinks)?,
            bytes: self.bytes.checked_sub(o.bytes)?,
        })
    }
}

/// A directory quota: its limits (`None`: unlimited; a quota with neither
/// only keeps the usage counters) and the usage of the directory's subtree,
/// the directory itself excluded.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Quota {
    pub limit_inodes: Option<u64>,
    pub limit_bytes: Option<u64>,
    pub usage: Usage,
}

/// What `count` reports of a path (`du -s`, HDFS `getContentSummary`):
/// the path itself and everything under it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContentSummary {
    pub usage: Usage,
    /// The path's own quota, when it has one.
    pub quota: Option<Quota>,
    /// Directories whose usage came from their quota's counters instead
    /// of a walk (the path's own included).
    pub from_counters: u64,
    /// Inodes whose entries were read (1 when the path's own counters
    /// answered).
    pub walked: u64,
}

/// One extended attribute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Xattr {
    pub name: String,
    pub value: Bytes,
}

/// How `setxattr` treats an existing attribute (Linux's flags).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum XattrFlag {
    /// Create it or replace it.
    #[default]
    Either,
    /// Fail (`AlreadyExists`) if it exists (`XATTR_CREATE`).
    Create,
    /// Fail (`NotFound`) if it does not (`XATTR_REPLACE`).
    Replace,
}

/// Bytes: postcard writes them as a length and the bytes; JSON as a string
/// of lowercase hex digits.
#[derive(Clone, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Bytes(pub Vec<u8>);

impl std::fmt::Debug for Bytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Bytes({})", hex_string(&self.0))
    }
}

impl std::ops::Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl From<Vec<u8>> for Bytes {
    fn from(v: Vec<u8>) -> Bytes {
        Bytes(v)
    }
}

/// Lowercase hex digits of `b`.
pub fn hex_string(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}

/// The bytes of a string of hex digit pairs.
pub fn parse_hex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            s.serialize_str(&hex_string(&self.0))
        } else {
            s.serialize_bytes(&self.0)
        }
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Bytes, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes (or a string of hex digits)")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_byte_buf<E: serde::de::Error>(self, v: Vec<u8>) -> Result<Bytes, E> {
                Ok(Bytes(v))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Bytes, E> {
                parse_hex(v)
                    .map(Bytes)
                    .ok_or_else(|| E::custom("not a string of hex digit pairs"))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Bytes, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = a.next_element::<u8>()? {
                    v.push(b);
                }
                Ok(Bytes(v))
            }
        }
        if d.is_human_readable() {
            d.deserialize_any(V)
        } else {
            d.deserialize_byte_buf(V)
        }
    }
}

/// Default mode of a new directory.
pub const DEFAULT_DIR_MODE: u32 = 0o755;
/// Default mode of a new file.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// Mode of a symbolic link (as Linux shows them; never checked).
pub const SYMLINK_MODE: u32 = 0o777;
/// Default block size of a new file (128 MiB, as HDFS).
pub const DEFAULT_BLOCK_SIZE: u64 = 128 << 20;
