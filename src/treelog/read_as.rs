//! [`Treelog`]'s reads made for a user: each read checked with POSIX's
//! permission rules as that user (`engine::access`), in the same closure
//! and so at the same committed state as the read itself. Without a
//! caller, the plain read.

use crate::bytestr::{BStr, ByteString};
use crate::caller::Caller;
use crate::engine::{self, access, access::ReadNeed};
use crate::error::Result;
use crate::read::{Read, ReadAt};
use crate::treelog::Treelog;
use crate::types::{ContentSummary, Inode, ListPage, Xattr};

impl Treelog {
    /// [`Treelog::stat_at`] for `caller`: search on the directories above.
    pub fn stat_as(&self, caller: Option<&Caller>, path: &[u8], at: ReadAt) -> Result<Read<Inode>> {
        let Some(c) = caller else {
            return self.stat_at(path, at);
        };
        let r = self.read_at(at, |idx, dicts| {
            access::check_read(idx, dicts, path, c, ReadNeed::Lookup)?;
            engine::resolve(idx, dicts, path)
        });
        self.count_read(0, depth(path), &r);
        r
    }

    /// [`Treelog::list_at`] for `caller`: also read on the directory.
    pub fn list_as(
        &self,
        caller: Option<&Caller>,
        dir: &[u8],
        start_after: Option<&BStr>,
        limit: usize,
        at: ReadAt,
    ) -> Result<Read<ListPage>> {
        let Some(c) = caller else {
            return self.list_at(dir, start_after, limit, at);
        };
        let r = self.read_at(at, |idx, dicts| {
            access::check_read(idx, dicts, dir, c, ReadNeed::List)?;
            super::read::list_page(idx, dicts, dir, start_after, limit)
        });
        self.count_read(2, depth(dir), &r);
        r
    }

    /// [`Treelog::readlink_at`] for `caller`.
    pub fn readlink_as(
        &self,
        caller: Option<&Caller>,
        path: &[u8],
        at: ReadAt,
    ) -> Result<Read<ByteString>> {
        let Some(c) = caller else {
            return self.readlink_at(path, at);
        };
        self.read_at(at, |idx, names| {
            access::check_read(idx, names, path, c, ReadNeed::Lookup)?;
            engine::readlink(idx, names, path)
        })
    }

    /// [`Treelog::xattrs_at`] for `caller`: reading one named `user.`
    /// attribute needs read permission on the entry (listing them, as
    /// Linux's `listxattr`, does not).
    pub fn xattrs_as(
        &self,
        caller: Option<&Caller>,
        path: &[u8],
        name: Option<&str>,
        at: ReadAt,
    ) -> Result<Read<Vec<Xattr>>> {
        let Some(c) = caller else {
            return self.xattrs_at(path, name, at);
        };
        let need = match name {
            Some(n) if n.starts_with("user.") => ReadNeed::UserXattr,
            _ => ReadNeed::Lookup,
        };
        self.read_at(at, |idx, names| {
            access::check_read(idx, names, path, c, need)?;
            engine::get_xattrs(idx, names, path, name)
        })
    }

    /// [`Treelog::count_at`] for `caller`: search on the directories
    /// above, checked at the state the count reads or one before it (a
    /// count is a walk of its own). Unlike `du`, it counts directories the
    /// caller may not read.
    pub fn count_as(
        &self,
        caller: Option<&Caller>,
        path: &[u8],
        at: ReadAt,
    ) -> Result<Read<ContentSummary>> {
        if let Some(c) = caller {
            self.read_at(at, |idx, names| {
                access::check_read(idx, names, path, c, ReadNeed::Lookup)
            })?;
        }
        self.count_at(path, at)
    }
}

fn depth(path: &[u8]) -> u64 {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty()).count() as u64
}
