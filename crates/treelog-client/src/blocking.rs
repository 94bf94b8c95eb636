//! A synchronous client for callers without an async runtime: the async
//! [`crate::Client`] driven by a small runtime of its own.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::bytestr::{BStr, ByteString};
use crate::command::Command;
use crate::cursor::CursorInfo;
use crate::error::{Error, Result};
use crate::options::ClientOptions;
use crate::protocol::{RequestBody, ResponseBody};
use crate::read::{Read, ReadAt};
use crate::stream::{StreamItem, SubscribeOptions};
use crate::types::{ContentSummary, DirEntry, Inode, ListPage, Xattr, XattrFlag};

/// The blocking twin of [`crate::Client`]: the same operations, each
/// returning when done. Clones share the connection and the runtime. Do
/// not call it from inside an async runtime (it blocks the thread).
#[derive(Clone)]
pub struct Client {
    rt: Arc<tokio::runtime::Runtime>,
    inner: crate::Client,
}

fn runtime() -> Result<Arc<tokio::runtime::Runtime>> {
    // One worker: the connection's reader, writer and watchdog keep
    // running between calls (a ping is answered, a loss is noticed).
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("treelog-client")
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(Error::Io)
}

impl Client {
    /// See [`crate::Client::connect`].
    pub fn connect(addr: SocketAddr, opts: ClientOptions) -> Result<Client> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Client::connect(addr, opts))?;
        Ok(Client { rt, inner })
    }

    /// See [`crate::Client::connect_to`].
    pub fn connect_to(endpoints: &str, opts: ClientOptions) -> Result<Client> {
        let rt = runtime()?;
        let inner = rt.block_on(crate::Client::connect_to(endpoints, opts))?;
        Ok(Client { rt, inner })
    }

    /// The async client underneath (for use with [`Client::block_on`]).
    pub fn async_client(&self) -> &crate::Client {
        &self.inner
    }

    /// Runs a future on this client's runtime.
    pub fn block_on<F: std::future::Future>(&self, f: F) -> F::Output {
        self.rt.block_on(f)
    }

    /// See [`crate::Client::with_deadline`].
    pub fn with_deadline(&self, d: Duration) -> Client {
        Client {
            rt: self.rt.clone(),
            inner: self.inner.with_deadline(d),
        }
    }

    /// See [`crate::Client::without_deadline`].
    pub fn without_deadline(&self) -> Client {
        Client {
            rt: self.rt.clone(),
            inner: self.inner.without_deadline(),
        }
    }

    /// See [`crate::Client::for_caller`].
    pub fn for_caller(&self, caller: crate::Caller) -> Client {
        Client {
            rt: self.rt.clone(),
            inner: self.inner.for_caller(caller),
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.inner.addr()
    }

    pub fn seen_seq(&self) -> u64 {
        self.inner.seen_seq()
    }

    pub fn call(&self, body: RequestBody) -> Result<ResponseBody> {
        self.rt.block_on(self.inner.call(body))
    }

    pub fn submit(&self, cmd: Command) -> Result<u64> {
        self.rt.block_on(self.inner.submit(cmd))
    }

    pub fn stat(&self, path: impl AsRef<[u8]>) -> Result<Inode> {
        self.rt.block_on(self.inner.stat(path))
    }

    pub fn stat_id(&self, id: u64) -> Result<Inode> {
        self.rt.block_on(self.inner.stat_id(id))
    }

    pub fn stat_at(&self, path: impl AsRef<[u8]>, at: ReadAt) -> Result<Read<Inode>> {
        self.rt.block_on(self.inner.stat_at(path, at))
    }

    pub fn stat_many(&self, paths: &[&str]) -> Result<Vec<Result<Inode>>> {
        self.rt.block_on(self.inner.stat_many(paths))
    }

    pub fn list(
        &self,
        path: impl AsRef<[u8]>,
        start_after: Option<&BStr>,
        limit: u32,
    ) -> Result<ListPage> {
        self.rt.block_on(self.inner.list(path, start_after, limit))
    }

    pub fn list_at(
        &self,
        path: impl AsRef<[u8]>,
        start_after: Option<&BStr>,
        limit: u32,
        at: ReadAt,
    ) -> Result<Read<ListPage>> {
        self.rt
            .block_on(self.inner.list_at(path, start_after, limit, at))
    }

    pub fn walk(&self, dir: impl AsRef<[u8]>) -> Result<Read<Vec<(ByteString, DirEntry)>>> {
        self.rt.block_on(self.inner.walk(dir))
    }

    pub fn readlink(&self, path: impl AsRef<[u8]>) -> Result<ByteString> {
        self.rt.block_on(self.inner.readlink(path))
    }

    pub fn xattrs(&self, path: impl AsRef<[u8]>, name: Option<&str>) -> Result<Vec<Xattr>> {
        self.rt.block_on(self.inner.xattrs(path, name))
    }

    pub fn count(&self, path: impl AsRef<[u8]>) -> Result<ContentSummary> {
        self.rt.block_on(self.inner.count(path))
    }

    pub fn symlink(&self, target: impl AsRef<[u8]>, path: impl AsRef<[u8]>) -> Result<u64> {
        self.rt.block_on(self.inner.symlink(target, path))
    }

    pub fn set_xattr(
        &self,
        path: impl AsRef<[u8]>,
        name: &str,
        value: &[u8],
        flag: XattrFlag,
    ) -> Result<u64> {
        self.rt
            .block_on(self.inner.set_xattr(path, name, value, flag))
    }

    pub fn remove_xattr(&self, path: impl AsRef<[u8]>, name: &str) -> Result<u64> {
        self.rt.block_on(self.inner.remove_xattr(path, name))
    }

    pub fn set_quota(
        &self,
        path: impl AsRef<[u8]>,
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> Result<u64> {
        self.rt.block_on(self.inner.set_quota(path, inodes, bytes))
    }

    pub fn clear_quota(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.rt.block_on(self.inner.clear_quota(path))
    }

    pub fn recount_quota(&self, path: impl AsRef<[u8]>) -> Result<u64> {
        self.rt.block_on(self.inner.recount_quota(path))
    }

    pub fn ack(&self, cursor: &str, seq: u64) -> Result<()> {
        self.rt.block_on(self.inner.ack(cursor, seq))
    }

    pub fn cursors(&self) -> Result<Vec<CursorInfo>> {
        self.rt.block_on(self.inner.cursors())
    }

    pub fn drop_cursor(&self, cursor: &str) -> Result<()> {
        self.rt.block_on(self.inner.drop_cursor(cursor))
    }

    pub fn ping(&self) -> Result<u64> {
        self.rt.block_on(self.inner.ping())
    }

    pub fn info(&self) -> Result<(u64, u64)> {
        self.rt.block_on(self.inner.info())
    }

    pub fn wait_for(&self, seq: u64, timeout: Duration) -> Result<u64> {
        self.rt.block_on(self.inner.wait_for(seq, timeout))
    }

    /// See [`crate::Client::subscribe`].
    pub fn subscribe(&self, opts: SubscribeOptions) -> Result<Subscription> {
        let sub = self.rt.block_on(self.inner.subscribe(opts))?;
        Ok(Subscription {
            rt: self.rt.clone(),
            sub,
        })
    }
}

/// The blocking twin of [`crate::RemoteSubscription`].
pub struct Subscription {
    rt: Arc<tokio::runtime::Runtime>,
    sub: crate::RemoteSubscription,
}

impl Subscription {
    /// The next item, waiting for it (see [`crate::RemoteSubscription::next`]).
    pub fn next_item(&mut self) -> Option<Result<StreamItem>> {
        self.rt.block_on(self.sub.next())
    }

    /// The next item, or `None` when none came within `wait` (the
    /// subscription stays as it was).
    pub fn next_within(&mut self, wait: Duration) -> Option<Option<Result<StreamItem>>> {
        self.rt
            .block_on(async { tokio::time::timeout(wait, self.sub.next()).await.ok() })
    }

    pub fn position(&self) -> Option<u64> {
        self.sub.position()
    }

    pub fn reconnects(&self) -> u64 {
        self.sub.reconnects()
    }
}
