//! Value types shared by the API, the events and the CLI.

use serde::{Deserialize, Serialize};

/// File or directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum FileType {
    File,
    Directory,
}

impl FileType {
    pub fn is_dir(self) -> bool {
        self == FileType::Directory
    }
}

/// The attributes of an inode, with owner and group as strings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attrs {
    pub kind: FileType,
    pub size: u64,
    pub block_size: u64,
    pub ctime_ms: u64,
    pub mtime_ms: u64,
    pub mode: u32,
    pub complete: bool,
    pub owner: String,
    pub group: String,
}

/// [`Attrs`] borrowing its owner and group: replay's form, decoded from a
/// log value without copying (see [`crate::event::RecordRef`]). Field for
/// field the same as `Attrs`, so the two decode the same bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct AttrsRef<'a> {
    pub kind: FileType,
    pub size: u64,
    pub block_size: u64,
    pub ctime_ms: u64,
    pub mtime_ms: u64,
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
            mode: self.mode,
            complete: self.complete,
            owner: &self.owner,
            group: &self.group,
        }
    }
}

/// An inode as a caller sees it (`stat`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub id: u64,
    /// 0 for the root.
    pub parent: u64,
    /// "" for the root.
    pub name: String,
    pub attrs: Attrs,
}

/// One entry of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub inode: Inode,
}

/// One page of a directory listing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    pub entries: Vec<DirEntry>,
    /// Pass as `start_after` to get the next page; `None` when this page is the last.
    pub next_start_after: Option<String>,
}

/// Default mode of a new directory.
pub const DEFAULT_DIR_MODE: u32 = 0o755;
/// Default mode of a new file.
pub const DEFAULT_FILE_MODE: u32 = 0o644;
/// Default block size of a new file (128 MiB, as HDFS).
pub const DEFAULT_BLOCK_SIZE: u64 = 128 << 20;
