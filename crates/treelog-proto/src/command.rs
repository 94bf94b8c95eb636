//! Commands: what a caller asks the writer to do.

use serde::{Deserialize, Serialize};

use crate::bytestr::ByteString;
use crate::types::{Bytes, XattrFlag, SYMLINK_MODE};

/// A namespace mutation request. Paths are absolute.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    /// Create a directory. With `parents`, missing ancestors are created and
    /// an existing directory at `path` is not an error.
    Mkdir {
        path: ByteString,
        parents: bool,
        mode: u32,
        owner: String,
        group: String,
    },
    /// Create an empty, incomplete file. Fails if `path` exists. With
    /// `parents`, missing ancestors are created as directories.
    Create {
        path: ByteString,
        parents: bool,
        mode: u32,
        owner: String,
        group: String,
        block_size: u64,
    },
    /// Mark a file complete with its final size. Repeating it with the same
    /// size is a no-op.
    Complete { path: ByteString, size: u64 },
    /// Change a file's size.
    SetSize { path: ByteString, size: u64 },
    /// Change any of mode, owner, group and modification time.
    SetAttr {
        path: ByteString,
        mode: Option<u32>,
        owner: Option<String>,
        group: Option<String>,
        mtime_ms: Option<u64>,
    },
    /// Remove a file or directory; a non-empty directory only with `recursive`.
    Delete { path: ByteString, recursive: bool },
    /// Move `src` to `dst` atomically. An existing `dst` is replaced only with
    /// `overwrite`, and only file-over-file or empty-directory-over-directory.
    Rename {
        src: ByteString,
        dst: ByteString,
        overwrite: bool,
    },
    /// Create the symbolic link `path` pointing at `target` (any text of
    /// 1…4,096 bytes without NUL; never resolved). With `parents`, missing
    /// ancestors are created as directories.
    Symlink {
        target: ByteString,
        path: ByteString,
        parents: bool,
        owner: String,
        group: String,
    },
    /// Set an extended attribute (Linux's names and limits, see
    /// `docs/EVENTS.md`).
    SetXattr {
        path: ByteString,
        name: String,
        value: Bytes,
        flag: XattrFlag,
    },
    /// Remove an extended attribute (`NotFound` if it has none of that name).
    RemoveXattr { path: ByteString, name: String },
    /// Give a directory a quota, or change its limits: at most `inodes`
    /// inodes and `bytes` bytes of files in its subtree (`None`: no limit;
    /// a quota without limits keeps the usage counters alone).
    SetQuota {
        path: ByteString,
        inodes: Option<u64>,
        bytes: Option<u64>,
    },
    /// Remove a directory's quota (`NotFound` if it has none).
    ClearQuota { path: ByteString },
    /// Count a quota's subtree again, entry by entry, and set its usage to
    /// what the walk found (an admin's repair when `admin verify` reports
    /// a counter that disagrees with its subtree; nothing to do when they
    /// agree). `NotFound` if the directory has no quota.
    RecountQuota { path: ByteString },
}

/// The feature level of a command whose paths or target are not UTF-8
/// (names as bytes).
pub const BYTE_NAMES_LEVEL: u32 = 3;

/// What a command that makes an entry (mkdir, create, symlink) asks of
/// the entry it makes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Creation<'a> {
    pub path: &'a [u8],
    pub parents: bool,
    /// [`SYMLINK_MODE`] for a symbolic link.
    pub mode: u32,
    pub dir: bool,
    pub owner: &'a str,
    pub group: &'a str,
}

impl Command {
    /// The entry the command makes, if it makes one.
    pub fn creation(&self) -> Option<Creation<'_>> {
        let (path, parents, mode, dir, owner, group) = match self {
            Command::Mkdir {
                path,
                parents,
                mode,
                owner,
                group,
            } => (path, *parents, *mode, true, owner, group),
            Command::Create {
                path,
                parents,
                mode,
                owner,
                group,
                ..
            } => (path, *parents, *mode, false, owner, group),
            Command::Symlink {
                path,
                parents,
                owner,
                group,
                ..
            } => (path, *parents, SYMLINK_MODE, false, owner, group),
            _ => return None,
        };
        Some(Creation {
            path: path.as_ref(),
            parents,
            mode,
            dir,
            owner,
            group,
        })
    }

    /// The same command with the new entry's `mode` (not a symbolic
    /// link's: it has none of its own), `owner` and `group` replaced; any
    /// other command as it is.
    pub fn with_creation(&self, mode: u32, owner: String, group: String) -> Command {
        let mut cmd = self.clone();
        match &mut cmd {
            Command::Mkdir {
                mode: m,
                owner: o,
                group: g,
                ..
            }
            | Command::Create {
                mode: m,
                owner: o,
                group: g,
                ..
            } => (*m, *o, *g) = (mode, owner, group),
            Command::Symlink {
                owner: o, group: g, ..
            } => (*o, *g) = (owner, group),
            _ => {}
        }
        cmd
    }

    /// The cluster feature level ([`crate::FEATURE_LEVEL`]) every member
    /// of a Raft cluster must be at before the leader takes this command:
    /// a member of a lower level would not know how to apply it. The
    /// release before feature levels (level 1) knew every command there
    /// is today, with names that are UTF-8; a path or target that is not
    /// needs [`BYTE_NAMES_LEVEL`] (a release whose names were `String`
    /// cannot decode its record).
    pub fn feature_level(&self) -> u32 {
        if self.names_are_utf8() {
            1
        } else {
            BYTE_NAMES_LEVEL
        }
    }

    /// Whether every path and target the command names is UTF-8.
    pub fn names_are_utf8(&self) -> bool {
        let (a, b) = self.byte_strings();
        a.is_utf8() && b.is_none_or(|b| b.is_utf8())
    }

    /// The paths and the target the command carries.
    fn byte_strings(&self) -> (&ByteString, Option<&ByteString>) {
        match self {
            Command::Mkdir { path, .. }
            | Command::Create { path, .. }
            | Command::Complete { path, .. }
            | Command::SetSize { path, .. }
            | Command::SetAttr { path, .. }
            | Command::Delete { path, .. }
            | Command::SetXattr { path, .. }
            | Command::RemoveXattr { path, .. }
            | Command::SetQuota { path, .. }
            | Command::ClearQuota { path }
            | Command::RecountQuota { path } => (path, None),
            Command::Rename { src, dst, .. } => (src, Some(dst)),
            Command::Symlink { target, path, .. } => (path, Some(target)),
        }
    }

    /// A short lower-case name for metrics and logs.
    pub fn name(&self) -> &'static str {
        match self {
            Command::Mkdir { .. } => "mkdir",
            Command::Create { .. } => "create",
            Command::Complete { .. } => "complete",
            Command::SetSize { .. } => "set_size",
            Command::SetAttr { .. } => "set_attr",
            Command::Delete { .. } => "delete",
            Command::Rename { .. } => "rename",
            Command::Symlink { .. } => "symlink",
            Command::SetXattr { .. } => "set_xattr",
            Command::RemoveXattr { .. } => "remove_xattr",
            Command::SetQuota { .. } => "set_quota",
            Command::ClearQuota { .. } => "clear_quota",
            Command::RecountQuota { .. } => "recount_quota",
        }
    }

    /// Rough size in bytes, for the writer's per-group byte budget.
    pub fn approx_bytes(&self) -> usize {
        64 + match self {
            Command::Mkdir {
                path, owner, group, ..
            }
            | Command::Create {
                path, owner, group, ..
            } => path.len() + owner.len() + group.len(),
            Command::Complete { path, .. }
            | Command::SetSize { path, .. }
            | Command::Delete { path, .. } => path.len(),
            Command::SetAttr {
                path, owner, group, ..
            } => {
                path.len()
                    + owner.as_ref().map_or(0, |s| s.len())
                    + group.as_ref().map_or(0, |s| s.len())
            }
            Command::Rename { src, dst, .. } => src.len() + dst.len(),
            Command::Symlink {
                target,
                path,
                owner,
                group,
                ..
            } => target.len() + path.len() + owner.len() + group.len(),
            Command::SetXattr {
                path, name, value, ..
            } => path.len() + name.len() + value.len(),
            Command::RemoveXattr { path, name } => path.len() + name.len(),
            Command::SetQuota { path, .. }
            | Command::ClearQuota { path }
            | Command::RecountQuota { path } => path.len(),
        }
    }
}
