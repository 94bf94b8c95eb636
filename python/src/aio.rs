//! The asyncio client: the same operations as the blocking one, each a
//! coroutine-like awaitable (an asyncio future resolved from the module's
//! tokio runtime through pyo3-async-runtimes).

use pyo3::prelude::*;

use treelog_proto::command::Command;

use crate::client::core_from;
use crate::core::{self, Consistency, Core, NewInode, XattrMap};
use crate::iters::{AsyncListing, AsyncWalk};
use crate::stream::{AsyncSubscription, SubArgs};

fn fut<'py, F, T>(py: Python<'py>, f: F) -> PyResult<Bound<'py, PyAny>>
where
    F: std::future::Future<Output = PyResult<T>> + Send + 'static,
    T: for<'a> IntoPyObject<'a> + Send + 'static,
{
    pyo3_async_runtimes::tokio::future_into_py(py, f)
}

/// The asyncio client: the operations of :class:`Client` under the same
/// names and arguments, each returning an awaitable; ``list``, ``walk``
/// and ``subscribe`` give async iterators (``async for``).
///
/// ``AsyncClient("host:7400")`` connects at the first request (as
/// ``redis.asyncio`` does); ``await AsyncClient.connect("host:7400")``
/// or ``async with AsyncClient(...) as c`` connects at once. Many tasks
/// may share one client: their requests are pipelined over one
/// connection. See :class:`Client` for deadlines, reconnects, leader
/// following and read consistency.
#[pyclass(frozen, module = "treelog")]
pub(crate) struct AsyncClient {
    core: Core,
}

#[pymethods]
impl AsyncClient {
    #[new]
    #[pyo3(signature = (endpoints, *, token=None, tls=None, timeout=Some(30.0), connect_timeout=5.0, follow_leader=true, leader_wait=5.0, resume_for=60.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        endpoints: &Bound<'_, PyAny>,
        token: Option<String>,
        tls: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
        connect_timeout: f64,
        follow_leader: bool,
        leader_wait: f64,
        resume_for: f64,
    ) -> PyResult<AsyncClient> {
        let core = core_from(
            endpoints,
            token,
            tls,
            timeout,
            connect_timeout,
            follow_leader,
            leader_wait,
            resume_for,
        )?;
        Ok(AsyncClient { core })
    }

    /// A client connected now (``await AsyncClient.connect("host:7400")``),
    /// with the constructor's arguments: raises if no endpoint answers.
    #[classmethod]
    #[pyo3(signature = (endpoints, **kwargs))]
    fn connect<'py>(
        cls: &Bound<'py, pyo3::types::PyType>,
        endpoints: &Bound<'py, PyAny>,
        kwargs: Option<&Bound<'py, pyo3::types::PyDict>>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = cls.py();
        let me = cls.call((endpoints,), kwargs)?;
        let core = me.cast::<AsyncClient>()?.get().core.clone();
        let me = me.unbind();
        fut(py, async move {
            core.connect().await?;
            Ok(me)
        })
    }

    fn __repr__(&self) -> String {
        format!("treelog.AsyncClient({:?})", self.core.endpoints())
    }

    fn __aenter__<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let core = slf.core.clone();
        let me: Py<AsyncClient> = slf.into();
        fut(py, async move {
            core.connect().await?;
            Ok(me)
        })
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _args: &Bound<'py, pyo3::types::PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        crate::iters::ready(py, ())
    }

    /// A client sharing this one's connection whose requests end within
    /// ``timeout`` seconds (``None``: no deadline).
    fn with_timeout(&self, timeout: Option<f64>) -> PyResult<AsyncClient> {
        Ok(AsyncClient {
            core: self.core.with_timeout(core::seconds("timeout", timeout)?),
        })
    }

    /// The request deadline in seconds (``None``: none).
    #[getter]
    fn timeout(&self) -> Option<f64> {
        self.core.timeout().map(|d| d.as_secs_f64())
    }

    /// The highest sequence this client has seen in a reply: its
    /// read-your-writes token (pass it as ``min_seq=`` to another client).
    #[getter]
    fn seen_seq(&self) -> u64 {
        self.core.connected().map_or(0, |c| c.seen_seq())
    }

    /// ``host:port`` of the server connected to (the last one while
    /// reconnecting).
    #[getter]
    fn server(&self) -> Option<String> {
        self.core.connected().map(|c| c.addr().to_string())
    }

    /// The inode at ``path`` (a symbolic link itself: paths are never
    /// resolved through links). Raises ``FileNotFoundError``.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn stat<'py>(
        &self,
        py: Python<'py>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        fut(py, self.core.clone().stat(path, c))
    }

    /// The same as :meth:`stat` (treelog never follows symbolic links).
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn lstat<'py>(
        &self,
        py: Python<'py>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.stat(py, path, consistency, min_seq)
    }

    /// Whether ``path`` exists.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn exists<'py>(
        &self,
        py: Python<'py>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        let core = self.core.clone();
        fut(py, async move {
            Ok(core.stat_many_one(path, c).await?.is_some())
        })
    }

    /// Stats of many paths sent in one write and answered together
    /// (pipelined); ``None`` for a path that does not exist.
    fn stat_many<'py>(&self, py: Python<'py>, paths: Vec<String>) -> PyResult<Bound<'py, PyAny>> {
        fut(py, self.core.clone().stat_many(paths))
    }

    /// The entries of the directory ``path`` in name order, an iterator
    /// that reads ``page_size`` entries at a time (any directory in
    /// constant memory). ``.pages()`` on it gives the pages instead.
    #[pyo3(signature = (path="/".to_owned(), *, page_size=1024, start_after=None, consistency=None, min_seq=None))]
    fn list(
        &self,
        path: String,
        page_size: u32,
        start_after: Option<String>,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<AsyncListing> {
        let c = Consistency::parse(consistency, min_seq)?;
        AsyncListing::new(self.core.clone(), path, page_size, start_after, c)
    }

    /// One page of the directory ``path``: up to ``limit`` entries after
    /// the name ``start_after``.
    #[pyo3(signature = (path, *, start_after=None, limit=1024, consistency=None, min_seq=None))]
    fn list_page<'py>(
        &self,
        py: Python<'py>,
        path: String,
        start_after: Option<String>,
        limit: u32,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        fut(py, self.core.clone().list_page(path, start_after, limit, c))
    }

    /// Every entry under the directory ``path`` (directory by directory,
    /// as ``ls -R`` lists them), all read at one committed state pinned
    /// for the walk: a tree that moves meanwhile is never seen half-moved.
    /// An iterator of :class:`DirEntry`; its ``seq`` is the state's.
    #[pyo3(signature = (path="/".to_owned(), *, page_size=1024))]
    fn walk(&self, path: String, page_size: u32) -> PyResult<AsyncWalk> {
        AsyncWalk::new(self.core.clone(), path, page_size)
    }

    /// A symbolic link's target.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn readlink<'py>(
        &self,
        py: Python<'py>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        fut(py, self.core.clone().readlink(path, c))
    }

    /// The value of the extended attribute ``name`` (``FileNotFoundError``
    /// when there is none).
    #[pyo3(signature = (path, name, *, consistency=None, min_seq=None))]
    fn getxattr<'py>(
        &self,
        py: Python<'py>,
        path: String,
        name: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        fut(py, self.core.clone().getxattr(path, name, c))
    }

    /// The names of the extended attributes of ``path``, in order.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn listxattr<'py>(
        &self,
        py: Python<'py>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        let core = self.core.clone();
        fut(py, async move {
            let xs = core.xattrs(path, None, c).await?;
            Ok(xs.into_iter().map(|(n, _)| n).collect::<Vec<_>>())
        })
    }

    /// Every extended attribute of ``path``: ``{name: value}``.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn xattrs<'py>(
        &self,
        py: Python<'py>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        let core = self.core.clone();
        fut(
            py,
            async move { core.xattrs(path, None, c).await.map(XattrMap) },
        )
    }

    /// The usage of ``path`` and everything under it (``du -s``), and its
    /// quota when it has one.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn count<'py>(
        &self,
        py: Python<'py>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let c = Consistency::parse(consistency, min_seq)?;
        fut(py, self.core.clone().count(path, c))
    }

    /// Creates the directory ``path``; with ``parents``, its missing
    /// ancestors too, and an existing directory is not an error.
    /// Returns the record's sequence.
    #[pyo3(signature = (path, *, parents=false, mode=None, owner=String::new(), group=String::new()))]
    fn mkdir<'py>(
        &self,
        py: Python<'py>,
        path: String,
        parents: bool,
        mode: Option<u32>,
        owner: String,
        group: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let o = NewInode {
            parents,
            mode,
            owner,
            group,
            block_size: None,
        };
        fut(py, self.core.clone().mkdir(path, o))
    }

    /// Creates an empty, incomplete file (``FileExistsError`` if ``path``
    /// exists); ``complete`` gives it its final size.
    #[pyo3(signature = (path, *, parents=false, mode=None, owner=String::new(), group=String::new(), block_size=None))]
    #[allow(clippy::too_many_arguments)]
    fn create<'py>(
        &self,
        py: Python<'py>,
        path: String,
        parents: bool,
        mode: Option<u32>,
        owner: String,
        group: String,
        block_size: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let o = NewInode {
            parents,
            mode,
            owner,
            group,
            block_size,
        };
        fut(py, self.core.clone().create(path, o))
    }

    /// Marks a file complete with its final size (again with the same
    /// size: nothing changes).
    fn complete<'py>(
        &self,
        py: Python<'py>,
        path: String,
        size: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        fut(
            py,
            self.core.clone().submit(Command::Complete {
                path: path.into(),
                size,
            }),
        )
    }

    /// Changes a file's size.
    fn set_size<'py>(
        &self,
        py: Python<'py>,
        path: String,
        size: u64,
    ) -> PyResult<Bound<'py, PyAny>> {
        fut(
            py,
            self.core.clone().submit(Command::SetSize {
                path: path.into(),
                size,
            }),
        )
    }

    /// Changes the permission bits.
    fn chmod<'py>(&self, py: Python<'py>, path: String, mode: u32) -> PyResult<Bound<'py, PyAny>> {
        let cmd = Command::SetAttr {
            path: path.into(),
            mode: Some(mode),
            owner: None,
            group: None,
            mtime_ms: None,
        };
        fut(py, self.core.clone().submit(cmd))
    }

    /// Changes the owner and/or the group (``None``: unchanged).
    #[pyo3(signature = (path, owner=None, group=None))]
    fn chown<'py>(
        &self,
        py: Python<'py>,
        path: String,
        owner: Option<String>,
        group: Option<String>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cmd = Command::SetAttr {
            path: path.into(),
            mode: None,
            owner,
            group,
            mtime_ms: None,
        };
        fut(py, self.core.clone().submit(cmd))
    }

    /// Sets the modification time (seconds since the epoch; ``None``: now).
    #[pyo3(signature = (path, mtime=None))]
    fn utime<'py>(
        &self,
        py: Python<'py>,
        path: String,
        mtime: Option<f64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cmd = Command::SetAttr {
            path: path.into(),
            mode: None,
            owner: None,
            group: None,
            mtime_ms: Some(core::mtime_ms(mtime)?),
        };
        fut(py, self.core.clone().submit(cmd))
    }

    /// Moves ``src`` to ``dst`` atomically; an existing ``dst`` is
    /// replaced only with ``overwrite`` (file over file, empty directory
    /// over directory).
    #[pyo3(signature = (src, dst, *, overwrite=false))]
    fn rename<'py>(
        &self,
        py: Python<'py>,
        src: String,
        dst: String,
        overwrite: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cmd = Command::Rename {
            src: src.into(),
            dst: dst.into(),
            overwrite,
        };
        fut(py, self.core.clone().submit(cmd))
    }

    /// Removes a file, a link or a directory (a non-empty one only with
    /// ``recursive``).
    #[pyo3(signature = (path, *, recursive=false))]
    fn remove<'py>(
        &self,
        py: Python<'py>,
        path: String,
        recursive: bool,
    ) -> PyResult<Bound<'py, PyAny>> {
        fut(
            py,
            self.core.clone().submit(Command::Delete {
                path: path.into(),
                recursive,
            }),
        )
    }

    /// Creates the symbolic link ``path`` pointing at ``target`` (any
    /// text; never resolved), as ``os.symlink(target, path)``.
    #[pyo3(signature = (target, path, *, parents=false, owner=String::new(), group=String::new()))]
    fn symlink<'py>(
        &self,
        py: Python<'py>,
        target: String,
        path: String,
        parents: bool,
        owner: String,
        group: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        let o = NewInode {
            parents,
            mode: None,
            owner,
            group,
            block_size: None,
        };
        fut(py, self.core.clone().symlink(target, path, o))
    }

    /// Sets an extended attribute. ``flag``: ``"either"`` (create or
    /// replace), ``"create"`` (``FileExistsError`` if it exists) or
    /// ``"replace"`` (``FileNotFoundError`` if it does not).
    #[pyo3(signature = (path, name, value, *, flag="either"))]
    fn setxattr<'py>(
        &self,
        py: Python<'py>,
        path: String,
        name: String,
        value: Vec<u8>,
        flag: &str,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cmd = Command::SetXattr {
            path: path.into(),
            name,
            value: value.into(),
            flag: core::flag(flag)?,
        };
        fut(py, self.core.clone().submit(cmd))
    }

    /// Removes an extended attribute (``FileNotFoundError`` if absent).
    fn removexattr<'py>(
        &self,
        py: Python<'py>,
        path: String,
        name: String,
    ) -> PyResult<Bound<'py, PyAny>> {
        fut(
            py,
            self.core.clone().submit(Command::RemoveXattr {
                path: path.into(),
                name,
            }),
        )
    }

    /// Gives the directory ``path`` a quota, or changes its limits: at
    /// most ``inodes`` inodes and ``bytes`` bytes in its subtree (``None``:
    /// no limit; neither: usage counters only). ``count(path).quota``
    /// reads it.
    #[pyo3(signature = (path, *, inodes=None, bytes=None))]
    fn set_quota<'py>(
        &self,
        py: Python<'py>,
        path: String,
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let cmd = Command::SetQuota {
            path: path.into(),
            inodes,
            bytes,
        };
        fut(py, self.core.clone().submit(cmd))
    }

    /// Removes a directory's quota (none: nothing to do).
    fn clear_quota<'py>(&self, py: Python<'py>, path: String) -> PyResult<Bound<'py, PyAny>> {
        fut(
            py,
            self.core
                .clone()
                .submit(Command::ClearQuota { path: path.into() }),
        )
    }

    /// Counts a quota's subtree again and sets its usage to what it found.
    fn recount_quota<'py>(&self, py: Python<'py>, path: String) -> PyResult<Bound<'py, PyAny>> {
        fut(
            py,
            self.core
                .clone()
                .submit(Command::RecountQuota { path: path.into() }),
        )
    }

    /// Subscribes to the change stream: an iterator of
    /// :class:`SnapshotStart`, :class:`SnapshotEntry`, :class:`SnapshotEnd`,
    /// :class:`Record` and :class:`Progress` items.
    ///
    /// ``prefix``: only that subtree (with the moves in and out of it).
    /// ``cursor``: a durable named cursor; an existing one resumes after
    /// its acknowledged position, a new one is created where the stream
    /// starts. ``snapshot=True``: a consistent snapshot of the subtree
    /// first; ``from_seq=N``: from the record ``N``; neither: from the
    /// next record. ``kinds``: only these event kinds (``"create"``,
    /// ``"rename"``, ...). ``resync``: re-snapshot when a directory moves
    /// into the subtree (the default with ``snapshot=True``).
    ///
    /// The subscription reconnects and resumes by itself after a lost
    /// connection (on any endpoint), without gap or duplicate. It never
    /// acknowledges: call ``item.ack()`` after processing an item.
    #[pyo3(signature = (prefix=None, *, cursor=None, snapshot=false, from_seq=None, kinds=None, resync=None))]
    #[allow(clippy::too_many_arguments)]
    fn subscribe(
        &self,
        prefix: Option<String>,
        cursor: Option<String>,
        snapshot: bool,
        from_seq: Option<u64>,
        kinds: Option<Vec<String>>,
        resync: Option<bool>,
    ) -> PyResult<AsyncSubscription> {
        let args = SubArgs::new(prefix, cursor, snapshot, from_seq, kinds, resync)?;
        Ok(AsyncSubscription::new(self.core.clone(), args))
    }

    /// Acknowledges ``seq`` on the durable cursor ``cursor``: the next
    /// subscription with it resumes after ``seq``.
    fn ack<'py>(&self, py: Python<'py>, cursor: String, seq: u64) -> PyResult<Bound<'py, PyAny>> {
        fut(py, self.core.clone().ack(cursor, seq))
    }

    /// The durable cursors.
    fn cursors<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fut(py, self.core.clone().cursors())
    }

    /// Drops a durable cursor (``FileNotFoundError`` if absent).
    fn drop_cursor<'py>(&self, py: Python<'py>, cursor: String) -> PyResult<Bound<'py, PyAny>> {
        fut(py, self.core.clone().drop_cursor(cursor))
    }

    /// The server's committed sequence.
    fn ping<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fut(py, self.core.clone().ping())
    }

    /// ``(committed sequence, log start)`` of the server.
    fn info<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        fut(py, self.core.clone().info())
    }

    /// Waits until the server has committed ``seq`` (up to ``timeout``
    /// seconds); returns its committed sequence.
    #[pyo3(signature = (seq, timeout=10.0))]
    fn wait_for<'py>(
        &self,
        py: Python<'py>,
        seq: u64,
        timeout: f64,
    ) -> PyResult<Bound<'py, PyAny>> {
        let t = core::seconds("timeout", Some(timeout))?.unwrap_or_default();
        fut(py, self.core.clone().wait_for(seq, t))
    }
}
