//! The blocking client: every call waits for its reply with the GIL
//! released (other Python threads run meanwhile).

use std::path::PathBuf;
use std::sync::Arc;

use pyo3::prelude::*;

use treelog_client::ClientTls;
use treelog_proto::command::Command;

use crate::core::{self, Consistency, Core, NewInode, XattrMap};
use crate::iters::{Listing, Walk};
use crate::stream::{SubArgs, Subscription};
use crate::types::{Cursor, Page, Stat, Summary};
use crate::wait;

/// TLS towards the servers: the CA their certificates must chain to,
/// optionally this client's certificate and key (mutual TLS), and the name
/// the servers' certificates must carry when it is not the endpoint's host.
#[pyclass(frozen, name = "TLS", module = "treelog")]
pub(crate) struct Tls {
    pub(crate) inner: Arc<ClientTls>,
}

#[pymethods]
impl Tls {
    #[new]
    #[pyo3(signature = (ca, cert=None, key=None, server_name=None))]
    fn new(
        ca: PathBuf,
        cert: Option<PathBuf>,
        key: Option<PathBuf>,
        server_name: Option<&str>,
    ) -> PyResult<Tls> {
        let pair = match (&cert, &key) {
            (Some(c), Some(k)) => Some((c.as_path(), k.as_path())),
            (None, None) => None,
            _ => return Err(crate::errors::value_error("cert and key go together")),
        };
        let mut t = ClientTls::load(&ca, pair).map_err(bad)?;
        if let Some(n) = server_name {
            t = t.with_server_name(n).map_err(bad)?;
        }
        Ok(Tls { inner: Arc::new(t) })
    }
}

fn bad(e: impl std::fmt::Display) -> PyErr {
    crate::errors::value_error(e.to_string())
}

/// Builds the shared core from the constructor's arguments.
#[allow(clippy::too_many_arguments)]
pub(crate) fn core_from(
    endpoints: &Bound<'_, PyAny>,
    token: Option<String>,
    tls: Option<&Bound<'_, PyAny>>,
    timeout: Option<f64>,
    connect_timeout: f64,
    follow_leader: bool,
    leader_wait: f64,
    resume_for: f64,
) -> PyResult<Core> {
    let tls = match tls {
        None => None,
        Some(t) if t.is_none() => None,
        Some(t) => {
            if let Ok(t) = t.cast::<Tls>() {
                Some(t.get().inner.clone())
            } else if let Ok(ca) = t.extract::<PathBuf>() {
                // A CA file alone: `tls="ca.pem"`.
                Some(Tls::new(ca, None, None, None)?.inner)
            } else {
                return Err(pyo3::exceptions::PyTypeError::new_err(
                    "tls: a treelog.TLS or the path of a CA file",
                ));
            }
        }
    };
    let opts = core::options(
        token,
        tls,
        timeout,
        connect_timeout,
        follow_leader,
        leader_wait,
        resume_for,
    )?;
    let c = Core::new(core::endpoints(endpoints)?, opts);
    Ok(match timeout {
        None => c.with_timeout(None),
        Some(_) => c,
    })
}

/// A client of a treelog server, or of any of a list of them (a cluster's
/// nodes, a leader and its replicas).
///
/// ``Client("host:7400")`` connects at once (the first endpoint that
/// answers) and raises if none does; later requests reconnect by
/// themselves, trying the endpoints in turn with back-off, within each
/// request's deadline (``timeout``, 30 s; ``None``: no deadline). Reads
/// lost with a connection are sent again; a mutation that may have been
/// applied raises :class:`treelog.OutcomeUnknown`. With ``follow_leader``
/// (the default) a mutation refused by a replica or a follower goes to
/// the leader.
///
/// Every read sees at least the newest state this client has seen
/// (read-your-writes), unless ``consistency=`` says otherwise:
/// ``"latest"`` (the node's newest state) or ``"linearizable"``;
/// ``min_seq=N`` asks for a state at least as new as sequence ``N`` (a
/// mutation's return value, from any client). Every mutation returns the
/// sequence number of its record.
///
/// Paths are absolute and never resolved through symbolic links.
/// Calls block with the GIL released; Ctrl-C interrupts them.
/// Thread-safe: one client may serve many threads (its requests are
/// pipelined over one connection).
#[pyclass(frozen, module = "treelog")]
pub(crate) struct Client {
    pub(crate) core: Core,
}

#[pymethods]
impl Client {
    #[new]
    #[pyo3(signature = (endpoints, *, token=None, tls=None, timeout=Some(30.0), connect_timeout=5.0, follow_leader=true, leader_wait=5.0, resume_for=60.0))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        endpoints: &Bound<'_, PyAny>,
        token: Option<String>,
        tls: Option<&Bound<'_, PyAny>>,
        timeout: Option<f64>,
        connect_timeout: f64,
        follow_leader: bool,
        leader_wait: f64,
        resume_for: f64,
    ) -> PyResult<Client> {
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
        wait(py, core.clone().connect())?;
        Ok(Client { core })
    }

    fn __repr__(&self) -> String {
        format!("treelog.Client({:?})", self.core.endpoints())
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, pyo3::types::PyTuple>) {}

    /// A client sharing this one's connection whose requests end within
    /// ``timeout`` seconds (``None``: no deadline).
    fn with_timeout(&self, timeout: Option<f64>) -> PyResult<Client> {
        Ok(Client {
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
    fn stat(
        &self,
        py: Python<'_>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Stat> {
        let c = Consistency::parse(consistency, min_seq)?;
        wait(py, self.core.clone().stat(path, c))
    }

    /// The same as :meth:`stat` (treelog never follows symbolic links).
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn lstat(
        &self,
        py: Python<'_>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Stat> {
        self.stat(py, path, consistency, min_seq)
    }

    /// Whether ``path`` exists.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn exists(
        &self,
        py: Python<'_>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<bool> {
        match self.stat(py, path, consistency, min_seq) {
            Ok(_) => Ok(true),
            Err(e) if e.is_instance_of::<pyo3::exceptions::PyFileNotFoundError>(py) => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Stats of many paths sent in one write and answered together
    /// (pipelined); ``None`` for a path that does not exist.
    fn stat_many(&self, py: Python<'_>, paths: Vec<String>) -> PyResult<Vec<Option<Stat>>> {
        wait(py, self.core.clone().stat_many(paths))
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
    ) -> PyResult<Listing> {
        let c = Consistency::parse(consistency, min_seq)?;
        Listing::new(self.core.clone(), path, page_size, start_after, c)
    }

    /// One page of the directory ``path``: up to ``limit`` entries after
    /// the name ``start_after``.
    #[pyo3(signature = (path, *, start_after=None, limit=1024, consistency=None, min_seq=None))]
    fn list_page(
        &self,
        py: Python<'_>,
        path: String,
        start_after: Option<String>,
        limit: u32,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Page> {
        let c = Consistency::parse(consistency, min_seq)?;
        wait(py, self.core.clone().list_page(path, start_after, limit, c))
    }

    /// Every entry under the directory ``path`` (directory by directory,
    /// as ``ls -R`` lists them), all read at one committed state pinned
    /// for the walk: a tree that moves meanwhile is never seen half-moved.
    /// An iterator of :class:`DirEntry`; its ``seq`` is the state's.
    #[pyo3(signature = (path="/".to_owned(), *, page_size=1024))]
    fn walk(&self, path: String, page_size: u32) -> PyResult<Walk> {
        Walk::new(self.core.clone(), path, page_size)
    }

    /// A symbolic link's target.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn readlink(
        &self,
        py: Python<'_>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<String> {
        let c = Consistency::parse(consistency, min_seq)?;
        wait(py, self.core.clone().readlink(path, c))
    }

    /// The value of the extended attribute ``name`` (``FileNotFoundError``
    /// when there is none).
    #[pyo3(signature = (path, name, *, consistency=None, min_seq=None))]
    fn getxattr(
        &self,
        py: Python<'_>,
        path: String,
        name: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Vec<u8>> {
        let c = Consistency::parse(consistency, min_seq)?;
        wait(py, self.core.clone().getxattr(path, name, c))
    }

    /// The names of the extended attributes of ``path``, in order.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn listxattr(
        &self,
        py: Python<'_>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Vec<String>> {
        let c = Consistency::parse(consistency, min_seq)?;
        let xs = wait(py, self.core.clone().xattrs(path, None, c))?;
        Ok(xs.into_iter().map(|(n, _)| n).collect())
    }

    /// Every extended attribute of ``path``: ``{name: value}``.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn xattrs(
        &self,
        py: Python<'_>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<XattrMap> {
        let c = Consistency::parse(consistency, min_seq)?;
        wait(py, self.core.clone().xattrs(path, None, c)).map(XattrMap)
    }

    /// The usage of ``path`` and everything under it (``du -s``), and its
    /// quota when it has one.
    #[pyo3(signature = (path, *, consistency=None, min_seq=None))]
    fn count(
        &self,
        py: Python<'_>,
        path: String,
        consistency: Option<&str>,
        min_seq: Option<u64>,
    ) -> PyResult<Summary> {
        let c = Consistency::parse(consistency, min_seq)?;
        wait(py, self.core.clone().count(path, c))
    }

    /// Creates the directory ``path``; with ``parents``, its missing
    /// ancestors too, and an existing directory is not an error.
    /// Returns the record's sequence.
    #[pyo3(signature = (path, *, parents=false, mode=None, owner=String::new(), group=String::new()))]
    fn mkdir(
        &self,
        py: Python<'_>,
        path: String,
        parents: bool,
        mode: Option<u32>,
        owner: String,
        group: String,
    ) -> PyResult<u64> {
        let o = NewInode {
            parents,
            mode,
            owner,
            group,
            block_size: None,
        };
        wait(py, self.core.clone().mkdir(path, o))
    }

    /// Creates an empty, incomplete file (``FileExistsError`` if ``path``
    /// exists); ``complete`` gives it its final size.
    #[pyo3(signature = (path, *, parents=false, mode=None, owner=String::new(), group=String::new(), block_size=None))]
    #[allow(clippy::too_many_arguments)]
    fn create(
        &self,
        py: Python<'_>,
        path: String,
        parents: bool,
        mode: Option<u32>,
        owner: String,
        group: String,
        block_size: Option<u64>,
    ) -> PyResult<u64> {
        let o = NewInode {
            parents,
            mode,
            owner,
            group,
            block_size,
        };
        wait(py, self.core.clone().create(path, o))
    }

    /// Marks a file complete with its final size (again with the same
    /// size: nothing changes).
    fn complete(&self, py: Python<'_>, path: String, size: u64) -> PyResult<u64> {
        wait(
            py,
            self.core.clone().submit(Command::Complete {
                path: path.into(),
                size,
            }),
        )
    }

    /// Changes a file's size.
    fn set_size(&self, py: Python<'_>, path: String, size: u64) -> PyResult<u64> {
        wait(
            py,
            self.core.clone().submit(Command::SetSize {
                path: path.into(),
                size,
            }),
        )
    }

    /// Changes the permission bits.
    fn chmod(&self, py: Python<'_>, path: String, mode: u32) -> PyResult<u64> {
        let cmd = Command::SetAttr {
            path: path.into(),
            mode: Some(mode),
            owner: None,
            group: None,
            mtime_ms: None,
        };
        wait(py, self.core.clone().submit(cmd))
    }

    /// Changes the owner and/or the group (``None``: unchanged).
    #[pyo3(signature = (path, owner=None, group=None))]
    fn chown(
        &self,
        py: Python<'_>,
        path: String,
        owner: Option<String>,
        group: Option<String>,
    ) -> PyResult<u64> {
        let cmd = Command::SetAttr {
            path: path.into(),
            mode: None,
            owner,
            group,
            mtime_ms: None,
        };
        wait(py, self.core.clone().submit(cmd))
    }

    /// Sets the modification time (seconds since the epoch; ``None``: now).
    #[pyo3(signature = (path, mtime=None))]
    fn utime(&self, py: Python<'_>, path: String, mtime: Option<f64>) -> PyResult<u64> {
        let cmd = Command::SetAttr {
            path: path.into(),
            mode: None,
            owner: None,
            group: None,
            mtime_ms: Some(core::mtime_ms(mtime)?),
        };
        wait(py, self.core.clone().submit(cmd))
    }

    /// Moves ``src`` to ``dst`` atomically; an existing ``dst`` is
    /// replaced only with ``overwrite`` (file over file, empty directory
    /// over directory).
    #[pyo3(signature = (src, dst, *, overwrite=false))]
    fn rename(&self, py: Python<'_>, src: String, dst: String, overwrite: bool) -> PyResult<u64> {
        let cmd = Command::Rename {
            src: src.into(),
            dst: dst.into(),
            overwrite,
        };
        wait(py, self.core.clone().submit(cmd))
    }

    /// Removes a file, a link or a directory (a non-empty one only with
    /// ``recursive``).
    #[pyo3(signature = (path, *, recursive=false))]
    fn remove(&self, py: Python<'_>, path: String, recursive: bool) -> PyResult<u64> {
        wait(
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
    fn symlink(
        &self,
        py: Python<'_>,
        target: String,
        path: String,
        parents: bool,
        owner: String,
        group: String,
    ) -> PyResult<u64> {
        let o = NewInode {
            parents,
            mode: None,
            owner,
            group,
            block_size: None,
        };
        wait(py, self.core.clone().symlink(target, path, o))
    }

    /// Sets an extended attribute. ``flag``: ``"either"`` (create or
    /// replace), ``"create"`` (``FileExistsError`` if it exists) or
    /// ``"replace"`` (``FileNotFoundError`` if it does not).
    #[pyo3(signature = (path, name, value, *, flag="either"))]
    fn setxattr(
        &self,
        py: Python<'_>,
        path: String,
        name: String,
        value: Vec<u8>,
        flag: &str,
    ) -> PyResult<u64> {
        let cmd = Command::SetXattr {
            path: path.into(),
            name,
            value: value.into(),
            flag: core::flag(flag)?,
        };
        wait(py, self.core.clone().submit(cmd))
    }

    /// Removes an extended attribute (``FileNotFoundError`` if absent).
    fn removexattr(&self, py: Python<'_>, path: String, name: String) -> PyResult<u64> {
        wait(
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
    fn set_quota(
        &self,
        py: Python<'_>,
        path: String,
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> PyResult<u64> {
        let cmd = Command::SetQuota {
            path: path.into(),
            inodes,
            bytes,
        };
        wait(py, self.core.clone().submit(cmd))
    }

    /// Removes a directory's quota (none: nothing to do).
    fn clear_quota(&self, py: Python<'_>, path: String) -> PyResult<u64> {
        wait(
            py,
            self.core
                .clone()
                .submit(Command::ClearQuota { path: path.into() }),
        )
    }

    /// Counts a quota's subtree again and sets its usage to what it found.
    fn recount_quota(&self, py: Python<'_>, path: String) -> PyResult<u64> {
        wait(
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
        py: Python<'_>,
        prefix: Option<String>,
        cursor: Option<String>,
        snapshot: bool,
        from_seq: Option<u64>,
        kinds: Option<Vec<String>>,
        resync: Option<bool>,
    ) -> PyResult<Subscription> {
        let args = SubArgs::new(prefix, cursor, snapshot, from_seq, kinds, resync)?;
        Subscription::open(py, self.core.clone(), args)
    }

    /// Acknowledges ``seq`` on the durable cursor ``cursor``: the next
    /// subscription with it resumes after ``seq``.
    fn ack(&self, py: Python<'_>, cursor: String, seq: u64) -> PyResult<()> {
        wait(py, self.core.clone().ack(cursor, seq))
    }

    /// The durable cursors.
    fn cursors(&self, py: Python<'_>) -> PyResult<Vec<Cursor>> {
        wait(py, self.core.clone().cursors())
    }

    /// Drops a durable cursor (``FileNotFoundError`` if absent).
    fn drop_cursor(&self, py: Python<'_>, cursor: String) -> PyResult<()> {
        wait(py, self.core.clone().drop_cursor(cursor))
    }

    /// The server's committed sequence.
    fn ping(&self, py: Python<'_>) -> PyResult<u64> {
        wait(py, self.core.clone().ping())
    }

    /// ``(committed sequence, log start)`` of the server.
    fn info(&self, py: Python<'_>) -> PyResult<(u64, u64)> {
        wait(py, self.core.clone().info())
    }

    /// Waits until the server has committed ``seq`` (up to ``timeout``
    /// seconds); returns its committed sequence.
    #[pyo3(signature = (seq, timeout=10.0))]
    fn wait_for(&self, py: Python<'_>, seq: u64, timeout: f64) -> PyResult<u64> {
        let t = core::seconds("timeout", Some(timeout))?.unwrap_or_default();
        wait(py, self.core.clone().wait_for(seq, t))
    }
}
