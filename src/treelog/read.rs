//! [`Treelog`]'s reads: straight to RocksDB on the caller's thread, at one
//! committed state each, never waiting for the writer (docs/READS.md).

use std::time::Duration;

use crate::bytestr::{BStr, ByteString};
use crate::engine::{self, names::Names};
use crate::error::{Error, Result};
use crate::format::ROOT_ID;
use crate::index::IndexRead;
use crate::path;
use crate::read::retained::ViewPins;
use crate::read::walk::TreeWalk;
use crate::read::{Read, ReadAt};
use crate::treelog::Treelog;
use crate::types::{Bytes, ContentSummary, Inode, ListPage, Xattr};

impl Treelog {
    pub(super) fn count_read<T>(&self, op: usize, lookups: u64, r: &Result<T>) {
        if let Some(m) = self.shared.metrics() {
            m.read
                .count(op, r.as_ref().err().map(|e| e.kind().as_str()), lookups);
        }
    }

    pub fn stat(&self, path: impl AsRef<[u8]>) -> Result<Inode> {
        let path = path.as_ref();
        self.stat_at(path, ReadAt::Latest).map(|r| r.value)
    }

    /// Stat at a committed state (see [`ReadAt`]); the reply says which.
    pub fn stat_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<Read<Inode>> {
        let path = path.as_ref();
        let r = self.read_at(at, |idx, dicts| engine::resolve(idx, dicts, path));
        self.count_read(
            0,
            path.split(|b| *b == b'/').filter(|c| !c.is_empty()).count() as u64,
            &r,
        );
        r
    }

    pub fn stat_id(&self, id: u64) -> Result<Inode> {
        self.stat_id_at(id, ReadAt::Latest).map(|r| r.value)
    }

    pub fn stat_id_at(&self, id: u64, at: ReadAt) -> Result<Read<Inode>> {
        let r = self.read_at(at, |idx, dicts| {
            engine::get_inode(idx, dicts, id)?.ok_or(Error::InodeNotFound(id))
        });
        self.count_read(1, 0, &r);
        r
    }

    /// The current path of an inode.
    pub fn path_of(&self, id: u64) -> Result<ByteString> {
        self.read_at(ReadAt::Latest, |idx, _| engine::path_of(idx, id))
            .map(|r| r.value)
    }

    /// One page of a directory listing: names after `start_after` in byte
    /// order, at most `limit` of them.
    pub fn list(
        &self,
        dir: impl AsRef<[u8]>,
        start_after: Option<&BStr>,
        limit: usize,
    ) -> Result<ListPage> {
        let dir = dir.as_ref();
        self.list_at(dir, start_after, limit, ReadAt::Latest)
            .map(|r| r.value)
    }

    /// A listing page at a committed state (see [`ReadAt`]): the next page
    /// of a consistent listing asks for `ReadAt::Exactly(page.seq)`, after
    /// [`Treelog::pin_view`] if the state may move meanwhile.
    pub fn list_at(
        &self,
        dir: impl AsRef<[u8]>,
        start_after: Option<&BStr>,
        limit: usize,
        at: ReadAt,
    ) -> Result<Read<ListPage>> {
        let dir = dir.as_ref();
        let r = self.read_at(at, |idx, dicts| {
            list_page(idx, dicts, dir, start_after, limit)
        });
        self.count_read(
            2,
            dir.split(|b| *b == b'/').filter(|c| !c.is_empty()).count() as u64,
            &r,
        );
        r
    }

    /// The target of the symbolic link at `path`.
    pub fn readlink(&self, path: impl AsRef<[u8]>) -> Result<ByteString> {
        let path = path.as_ref();
        self.readlink_at(path, ReadAt::Latest).map(|r| r.value)
    }

    pub fn readlink_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<Read<ByteString>> {
        let path = path.as_ref();
        self.read_at(at, |idx, names| engine::readlink(idx, names, path))
    }

    /// The extended attribute `name` of `path` (`NotFound` without it).
    pub fn get_xattr(&self, path: impl AsRef<[u8]>, name: &str) -> Result<Bytes> {
        let path = path.as_ref();
        let mut all = self.xattrs_at(path, Some(name), ReadAt::Latest)?.value;
        Ok(all.pop().map(|x| x.value).unwrap_or_default())
    }

    /// Every extended attribute of `path`, in name order.
    pub fn list_xattrs(&self, path: impl AsRef<[u8]>) -> Result<Vec<Xattr>> {
        let path = path.as_ref();
        self.xattrs_at(path, None, ReadAt::Latest).map(|r| r.value)
    }

    /// The extended attribute `name` of `path`, or all of them.
    pub fn xattrs_at(
        &self,
        path: impl AsRef<[u8]>,
        name: Option<&str>,
        at: ReadAt,
    ) -> Result<Read<Vec<Xattr>>> {
        let path = path.as_ref();
        self.read_at(at, |idx, names| engine::get_xattrs(idx, names, path, name))
    }

    /// The usage under `path`, the path itself included (`count`, `du
    /// -s`): from its quota's counters when it has one, else by a walk of
    /// at most [`Options::max_count_inodes`] inodes at one state.
    pub fn count(&self, path: impl AsRef<[u8]>) -> Result<ContentSummary> {
        let path = path.as_ref();
        self.count_at(path, ReadAt::Latest).map(|r| r.value)
    }

    pub fn count_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<Read<ContentSummary>> {
        let path = path.as_ref();
        let max = self.max_count_inodes;
        if let ReadAt::Latest = at {
            // A walk reads many keys: at one pinned state, not through the
            // cache that moves under it.
            let view = self.publication().view();
            let value = self
                .publication()
                .read_at(self.store(), &view, |idx, names| {
                    engine::content_summary(idx, names, path, max)
                })?;
            return Ok(Read {
                value,
                seq: view.seq,
            });
        }
        self.read_at(at, |idx, names| {
            engine::content_summary(idx, names, path, max)
        })
    }

    /// Runs `read` at the state `at` asks for.
    pub(super) fn read_at<T>(
        &self,
        at: ReadAt,
        mut read: impl FnMut(&dyn IndexRead, &Names) -> Result<T>,
    ) -> Result<Read<T>> {
        match at {
            ReadAt::Latest => {}
            // A node of a Raft cluster serves a linearizable read as
            // `AtLeast` the leader's read index (`treelog-raft`); alone, the
            // newest committed state is linearizable. A replica's newest
            // state may be behind its source's: not linearizable.
            ReadAt::Linearizable => {
                if let Some(r) = self.replication().replica_state() {
                    return Err(Error::NotLeader {
                        leader: Some(r.leader()),
                    });
                }
            }
            ReadAt::AtLeast(seq) => {
                let publication = self.publication();
                if !publication.watermark().wait_for(seq, self.min_seq_wait) {
                    return Err(self.replication().not_caught_up(seq, self.min_seq_wait));
                }
            }
            ReadAt::Exactly(seq) => {
                let view = self.publication().exactly(seq)?;
                let value = self.publication().read_at(self.store(), &view, &mut read)?;
                return Ok(Read { value, seq });
            }
        }
        let (value, seq) = self.shared.read(read)?;
        Ok(Read { value, seq })
    }

    /// Retains the newest committed state for reads at
    /// `ReadAt::Exactly(seq)` (returned) until [`Treelog::unpin_view`],
    /// or until it has been idle for a minute or is ten minutes old. At
    /// most 1,024 states are pinned at once (`Busy` beyond).
    pub fn pin_view(&self) -> Result<u64> {
        self.publication().pin()
    }

    /// Releases a pin of [`Treelog::pin_view`]; false if it had expired.
    pub fn unpin_view(&self, seq: u64) -> bool {
        self.publication().unpin(seq)
    }

    /// A pin owner for one client (a server connection): its pins count
    /// against its own share of the table (64 states), only it releases
    /// them, and dropping it releases them all. When the table is full, a
    /// client holding fewer pins takes the oldest state of the one holding
    /// the most, so one client cannot lock the others' listings out.
    pub fn view_pins(&self) -> ViewPins {
        let shared = self.shared.clone();
        ViewPins::new(
            self.publication().retained().clone(),
            Box::new(move || shared.publication().view()),
        )
    }

    /// Every entry of a directory (all pages), at one committed state.
    pub fn list_all(&self, dir: impl AsRef<[u8]>) -> Result<Vec<crate::types::DirEntry>> {
        let dir = dir.as_ref();
        let mut out = Vec::new();
        self.visit_all(dir, &mut |e| {
            out.push(std::mem::take(e));
            Ok(())
        })?;
        Ok(out)
    }

    /// Lends every entry of a directory to `f`, in name order, at one
    /// committed state (whose sequence it returns): each entry is decoded
    /// into the same `DirEntry`, so that a caller that keeps nothing
    /// allocates nothing per entry, and a directory of any size is listed
    /// in the memory of a page. An error from `f` stops the listing.
    pub fn list_each(
        &self,
        dir: impl AsRef<[u8]>,
        mut f: impl FnMut(&crate::types::DirEntry) -> Result<()>,
    ) -> Result<u64> {
        let dir = dir.as_ref();
        self.visit_all(dir, &mut |e| f(e))
    }

    /// Every page of `dir` at one state, each entry lent to `f` mutably
    /// (`list_all` takes them, `list_each` only looks).
    fn visit_all(
        &self,
        dir: &[u8],
        f: &mut dyn FnMut(&mut crate::types::DirEntry) -> Result<()>,
    ) -> Result<u64> {
        let view = self.publication().view();
        let mut entry = crate::types::DirEntry::default();
        let mut after: Option<ByteString> = None;
        loop {
            // At a pinned state the read runs once: `f` sees each entry once.
            after = self
                .publication()
                .read_at(self.store(), &view, |idx, dicts| {
                    let id = resolve_dir(idx, dicts, dir)?;
                    let after = after.as_ref().map(|a| a.as_bytes());
                    engine::visit_children(idx, dicts, id, after, 1024, &mut entry, f)
                })?;
            if after.is_none() {
                return Ok(view.seq);
            }
        }
    }

    /// Visits `dir` and everything under it, depth first and in name order
    /// within each directory, at one committed state (whose sequence is
    /// returned): a tree that moves meanwhile is never seen half-moved.
    /// `visit` gets each entry's path and entry; the walk holds one page of
    /// each directory on its path in memory.
    pub fn walk(
        &self,
        dir: impl AsRef<[u8]>,
        mut visit: impl FnMut(&ByteString, &crate::types::DirEntry) -> Result<()>,
    ) -> Result<u64> {
        let dir = dir.as_ref();
        let publication = self.publication();
        let view = publication.view();
        let root = publication.read_at(self.store(), &view, |idx, dicts| {
            engine::resolve(idx, dicts, dir)
        })?;
        if !root.attrs.kind.is_dir() {
            return Err(Error::NotADirectory(path::canonical(dir)?.to_string()));
        }
        let mut walk = TreeWalk::new(root.id, path::canonical(dir)?, 1024);
        while let Some((p, e)) =
            publication.read_at(self.store(), &view, |idx, dicts| walk.next(idx, dicts))?
        {
            visit(&p, &e)?;
        }
        Ok(view.seq)
    }

    pub fn root(&self) -> Result<Inode> {
        self.stat_id(ROOT_ID)
    }

    /// Waits until the committed watermark reaches `seq` (a token returned by
    /// a mutation, possibly on another handle).
    pub fn wait_for_seq(&self, seq: u64, timeout: Duration) -> bool {
        self.publication().watermark().wait_for(seq, timeout)
    }
}

/// The id of the directory at `dir` (`NotADirectory` for another kind).
fn resolve_dir(idx: &dyn IndexRead, dicts: &Names, dir: &[u8]) -> Result<u64> {
    let ino = engine::resolve(idx, dicts, dir)?;
    if !ino.attrs.kind.is_dir() {
        return Err(Error::NotADirectory(path::canonical(dir)?.to_string()));
    }
    Ok(ino.id)
}

/// One listing page of `dir` read through `idx`.
pub(super) fn list_page(
    idx: &dyn IndexRead,
    dicts: &Names,
    dir: &[u8],
    start_after: Option<&BStr>,
    limit: usize,
) -> Result<ListPage> {
    let id = resolve_dir(idx, dicts, dir)?;
    if let Some(s) = start_after {
        path::validate_name(s)?;
    }
    let (entries, more) = engine::list_children(idx, dicts, id, start_after.map(|s| &**s), limit)?;
    let next_start_after = if more {
        entries.last().map(|e| e.name.clone())
    } else {
        None
    };
    Ok(ListPage {
        entries,
        next_start_after,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{CreateOptions, Durability, Options};

    /// `list_each` lends exactly the entries the paged listing returns, in
    /// order, across pages, with owners set on some entries and not on
    /// their neighbours (the reused entry must not carry one over), with
    /// ids out of name order (renames); an error from the callback stops
    /// it and is returned.
    #[test]
    fn list_each_lends_what_the_pages_return() {
        let dir = tempfile::tempdir().unwrap();
        let t = Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
        t.mkdir_p("/d").unwrap();
        let n = 2_500;
        for i in 0..n {
            let owner = if i % 3 == 0 {
                format!("u{}", i % 7)
            } else {
                String::new()
            };
            t.create(
                format!("/d/f{i:05}"),
                CreateOptions {
                    owner,
                    ..Default::default()
                },
            )
            .unwrap();
        }
        // Later names for early ids: name order is no longer id order.
        for i in (0..n).step_by(5) {
            t.rename(format!("/d/f{i:05}"), format!("/d/z{i:05}"), false)
                .unwrap();
        }
        let mut paged = Vec::new();
        let mut after: Option<ByteString> = None;
        loop {
            let page = t.list("/d", after.as_deref(), 700).unwrap();
            paged.extend(page.entries);
            match page.next_start_after {
                Some(a) => after = Some(a),
                None => break,
            }
        }
        assert_eq!(paged.len(), n);
        let mut lent = Vec::new();
        let seq = t
            .list_each("/d", |e| {
                lent.push(e.clone());
                Ok(())
            })
            .unwrap();
        assert_eq!(seq, t.committed_seq());
        assert_eq!(lent, paged);
        assert_eq!(t.list_all("/d").unwrap(), paged);

        let mut seen = 0;
        let e = t
            .list_each("/d", |_| {
                seen += 1;
                if seen == 1_500 {
                    Err(Error::InvalidArgument("enough".into()))
                } else {
                    Ok(())
                }
            })
            .unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        assert_eq!(seen, 1_500);
        assert!(matches!(
            t.list_each("/d/f00001", |_| Ok(())),
            Err(Error::NotADirectory(_))
        ));
    }
}
