//! The typed operations: stat, list, walk, the mutations' shorthands,
//! cursors, and the server's watermarks.

use std::time::Duration;

use crate::bytestr::{BStr, ByteString};
use crate::client::Client;
use crate::command::Command;
use crate::cursor::CursorInfo;
use crate::error::{Error, Result};
use crate::protocol::{RequestBody, ResponseBody};
use crate::read::{Read, ReadAt};
use crate::types::{ContentSummary, DirEntry, Inode, ListPage, Xattr, XattrFlag};

pub(crate) fn unexpected(b: ResponseBody) -> Error {
    Error::Protocol(format!("unexpected reply {b:?}"))
}

impl Client {
    /// What a plain read asks for: a state at least as new as any this
    /// client's token has seen.
    fn read_at(&self) -> ReadAt {
        match self.seen_seq() {
            0 => ReadAt::Latest,
            s => ReadAt::AtLeast(s),
        }
    }

    /// Stats of many paths, sent in one write and answered together, each
    /// read-your-writes as [`Client::stat`]: a pipelined batch from one
    /// caller. The outer error is the connection's; each path has its own
    /// result.
    pub async fn stat_many(&self, paths: &[&str]) -> Result<Vec<Result<Inode>>> {
        let at = self.read_at();
        let bodies = paths
            .iter()
            .map(|p| RequestBody::StatAt {
                path: (*p).into(),
                at,
            })
            .collect();
        Ok(self
            .call_batch(bodies)
            .await?
            .into_iter()
            .map(|r| match r? {
                ResponseBody::InodeAt { inode, .. } => Ok(inode),
                other => Err(unexpected(other)),
            })
            .collect())
    }

    /// Stat at a committed state (`docs/READS.md`); the reply says which.
    pub async fn stat_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<Read<Inode>> {
        let body = RequestBody::StatAt {
            path: path.as_ref().into(),
            at,
        };
        match self.call(body).await? {
            ResponseBody::InodeAt { inode, seq } => Ok(Read { value: inode, seq }),
            other => Err(unexpected(other)),
        }
    }

    pub async fn stat_id_at(&self, id: u64, at: ReadAt) -> Result<Read<Inode>> {
        match self.call(RequestBody::StatIdAt { id, at }).await? {
            ResponseBody::InodeAt { inode, seq } => Ok(Read { value: inode, seq }),
            other => Err(unexpected(other)),
        }
    }

    /// A listing page at a committed state.
    pub async fn list_at(
        &self,
        path: impl AsRef<[u8]>,
        start_after: Option<&BStr>,
        limit: u32,
        at: ReadAt,
    ) -> Result<Read<ListPage>> {
        let body = RequestBody::ListAt {
            path: path.as_ref().into(),
            start_after: start_after.map(Into::into),
            limit,
            at,
        };
        match self.call(body).await? {
            ResponseBody::PageAt { page, seq } => Ok(Read { value: page, seq }),
            other => Err(unexpected(other)),
        }
    }

    /// Pins the server's newest state for reads at `ReadAt::Exactly`
    /// (returned); see `Treelog::pin_view` for the bounds.
    pub async fn pin_view(&self) -> Result<u64> {
        match self.call(RequestBody::PinView).await? {
            ResponseBody::Seq(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    pub async fn unpin_view(&self, seq: u64) -> Result<()> {
        match self.call(RequestBody::UnpinView { seq }).await? {
            ResponseBody::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Every entry under `dir` (directory by directory, as `ls -R` lists
    /// them) at one committed state, pinned for the walk: a tree that
    /// moves meanwhile is never seen half-moved. Returns the entries with
    /// their paths, and the state's sequence.
    pub async fn walk(&self, dir: impl AsRef<[u8]>) -> Result<Read<Vec<(ByteString, DirEntry)>>> {
        let seq = self.pin_view().await?;
        let r = self.walk_at(dir.as_ref(), seq).await;
        // Best effort: an unpinned view also expires by itself.
        let _ = self.unpin_view(seq).await;
        r.map(|value| Read { value, seq })
    }

    async fn walk_at(&self, dir: &[u8], seq: u64) -> Result<Vec<(ByteString, DirEntry)>> {
        let at = ReadAt::Exactly(seq);
        let mut out = Vec::new();
        let mut dirs = vec![crate::path::canonical(dir)?];
        while let Some(d) = dirs.pop() {
            let mut after: Option<ByteString> = None;
            let mut subdirs = Vec::new();
            loop {
                let page = self.list_at(&d, after.as_deref(), 1024, at).await?.value;
                for e in page.entries {
                    let p = crate::path::join(&d, &e.name);
                    if e.inode.attrs.kind.is_dir() {
                        subdirs.push(p.clone());
                    }
                    out.push((p, e));
                }
                match page.next_start_after {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            // Depth first, in name order: the last pushed is taken first.
            dirs.extend(subdirs.into_iter().rev());
        }
        Ok(out)
    }

    /// Stat at a state at least as new as any this client's token has
    /// seen (read-your-writes, on the leader or a replica).
    pub async fn stat(&self, path: impl AsRef<[u8]>) -> Result<Inode> {
        Ok(self.stat_at(path, self.read_at()).await?.value)
    }

    pub async fn stat_id(&self, id: u64) -> Result<Inode> {
        Ok(self.stat_id_at(id, self.read_at()).await?.value)
    }

    /// A listing page, read-your-writes as [`Client::stat`].
    pub async fn list(
        &self,
        path: impl AsRef<[u8]>,
        start_after: Option<&BStr>,
        limit: u32,
    ) -> Result<ListPage> {
        Ok(self
            .list_at(path, start_after, limit, self.read_at())
            .await?
            .value)
    }

    /// `ln -s TARGET PATH` (see `Command::Symlink`).
    pub async fn symlink(&self, target: impl AsRef<[u8]>, path: impl AsRef<[u8]>) -> Result<u64> {
        self.submit(Command::Symlink {
            target: target.as_ref().into(),
            path: path.as_ref().into(),
            parents: false,
            owner: String::new(),
            group: String::new(),
        })
        .await
    }

    pub async fn set_xattr(
        &self,
        path: impl AsRef<[u8]>,
        name: &str,
        value: &[u8],
        flag: XattrFlag,
    ) -> Result<u64> {
        self.submit(Command::SetXattr {
            path: path.as_ref().into(),
            name: name.to_owned(),
            value: value.to_vec().into(),
            flag,
        })
        .await
    }

    pub async fn remove_xattr(&self, path: impl AsRef<[u8]>, name: &str) -> Result<u64> {
        self.submit(Command::RemoveXattr {
            path: path.as_ref().into(),
            name: name.to_owned(),
        })
        .await
    }

    pub async fn set_quota(
        &self,
        path: impl AsRef<[u8]>,
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> Result<u64> {
        self.submit(Command::SetQuota {
            path: path.as_ref().into(),
            inodes,
            bytes,
        })
        .await
    }

    pub async fn clear_quota(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.submit(Command::ClearQuota {
            path: path.as_ref().into(),
        })
        .await
    }

    /// Counts the quota of `path` again (see [`Command::RecountQuota`]).
    pub async fn recount_quota(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.submit(Command::RecountQuota {
            path: path.as_ref().into(),
        })
        .await
    }

    /// A symbolic link's target, read-your-writes as [`Client::stat`].
    pub async fn readlink(&self, path: impl AsRef<[u8]>) -> Result<ByteString> {
        let body = RequestBody::Readlink {
            path: path.as_ref().into(),
            at: self.read_at(),
        };
        match self.call(body).await? {
            ResponseBody::Target { target, .. } => Ok(target),
            other => Err(unexpected(other)),
        }
    }

    /// The extended attribute `name` of `path`, or (`None`) all of them.
    pub async fn xattrs(&self, path: impl AsRef<[u8]>, name: Option<&str>) -> Result<Vec<Xattr>> {
        let body = RequestBody::GetXattrs {
            path: path.as_ref().into(),
            name: name.map(str::to_owned),
            at: self.read_at(),
        };
        match self.call(body).await? {
            ResponseBody::Xattrs { xattrs, .. } => Ok(xattrs),
            other => Err(unexpected(other)),
        }
    }

    /// The usage under `path` (`count`; see `Treelog::count`).
    pub async fn count(&self, path: impl AsRef<[u8]>) -> Result<ContentSummary> {
        let body = RequestBody::Count {
            path: path.as_ref().into(),
            at: self.read_at(),
        };
        match self.call(body).await? {
            ResponseBody::Summary { summary, .. } => Ok(summary),
            other => Err(unexpected(other)),
        }
    }

    pub async fn ack(&self, cursor: &str, seq: u64) -> Result<()> {
        self.call(RequestBody::Ack {
            cursor: cursor.to_owned(),
            seq,
        })
        .await
        .map(|_| ())
    }

    pub async fn cursors(&self) -> Result<Vec<CursorInfo>> {
        match self.call(RequestBody::ListCursors).await? {
            ResponseBody::Cursors(c) => Ok(c),
            other => Err(unexpected(other)),
        }
    }

    pub async fn drop_cursor(&self, cursor: &str) -> Result<()> {
        self.call(RequestBody::DropCursor {
            cursor: cursor.to_owned(),
        })
        .await
        .map(|_| ())
    }

    /// The server's committed sequence.
    pub async fn ping(&self) -> Result<u64> {
        match self.call(RequestBody::Ping).await? {
            ResponseBody::Seq(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }

    /// (committed sequence, log start) of the server.
    pub async fn info(&self) -> Result<(u64, u64)> {
        match self.call(RequestBody::Info).await? {
            ResponseBody::Info {
                committed_seq,
                log_start,
                ..
            } => Ok((committed_seq, log_start)),
            other => Err(unexpected(other)),
        }
    }

    /// Waits until the server's committed sequence reaches `seq`.
    pub async fn wait_for(&self, seq: u64, timeout: Duration) -> Result<u64> {
        // The server's wait is part of the request: the deadline is
        // extended by it.
        let c = match self.timeout {
            Some(t) => self.with_deadline(t + timeout),
            None => self.clone(),
        };
        match c
            .call(RequestBody::WaitFor {
                seq,
                timeout_ms: timeout.as_millis() as u64,
            })
            .await?
        {
            ResponseBody::Seq(s) => Ok(s),
            other => Err(unexpected(other)),
        }
    }
}
