//! The pure engine: commands in, events out; events in, index writes out.
//!
//! No I/O happens here. [`Engine::execute`] validates a command against an
//! index view (the stored index plus the group's earlier changes), decides
//! the events (ids, times, paths, the quotas they charge), and applies them
//! to the overlay so the next command of the group sees them.
//! [`apply_events`] is the only code that turns events into index bytes;
//! the writer, recovery replay, rebuild and followers all use it, which is
//! what makes the index a deterministic function of the log.
//!
//! Applying reads the index one key at a time (a parent whose times move,
//! a quota whose usage moves, a dictionary name, the entry an update
//! rewrites), never a range: replay reads through the keys it has written
//! itself (see `recovery`), which cannot answer a scan.

use std::collections::{BTreeMap, BTreeSet};

use crate::bytestr::{BStr, ByteString};
use crate::command::Command;
use crate::error::{DictKind, Error, Result};
use crate::event::{Event, EventRef, Update};
use crate::format::v2::{
    self, InodeEntryV2, QuotaEntry, XattrList, FLAG_COMPLETE_V2, FLAG_HAS_QUOTA, FLAG_HAS_XATTRS,
    KIND_DIRECTORY, KIND_FILE, KIND_SYMLINK,
};
use crate::format::{
    self, edge_key, edge_key_into, edge_prefix, edge_value, inode_key, next_id_value,
    GROUP_DICT_KEY, ID_BLOCK, MAX_INODE_ID, NEXT_ID_KEY, OWNER_DICT_KEY, ROOT_ID,
};
use crate::index::{Cf, IndexRead, IndexWrite, Overlay};
use crate::path;
use crate::types::{
    Attrs, AttrsRef, Bytes, ContentSummary, DirEntry, FileType, Inode, Quota, Usage, Xattr,
    XattrFlag, DEFAULT_DIR_MODE, SYMLINK_MODE,
};
use names::Names;
use treelog_proto::caller::Caller;

pub(crate) mod access;
pub(crate) mod names;

mod apply;
mod plan;
mod read;
mod rules;
mod state;
mod subtree;

pub(crate) use apply::*;
pub(crate) use plan::*;
pub(crate) use read::*;
use rules::*;
pub(crate) use state::*;
pub use subtree::*;

#[cfg(test)]
mod tests;
