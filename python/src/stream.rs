//! The change stream: a subscription as an iterator (blocking) or an
//! async iterator, yielding typed items; `item.ack()` acknowledges a
//! position on the subscription's durable cursor.

use std::sync::Arc;
use std::time::Duration;

use pyo3::exceptions::{PyStopAsyncIteration, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use tokio::sync::Mutex;

use treelog_client::RemoteSubscription;
use treelog_proto::event::{Event as Ev, EventKind};
use treelog_proto::stream::{Filter, Scope, ScopedEvent, StartFrom, StreamItem, SubscribeOptions};

use crate::core::{self, Core};
use crate::errors::{err, value_error};
use crate::types::{Quota, Stat};
use crate::wait;

/// The subscription's options from `subscribe`'s keywords.
pub(crate) struct SubArgs {
    opts: SubscribeOptions,
}

impl SubArgs {
    pub(crate) fn new(
        prefix: Option<String>,
        cursor: Option<String>,
        snapshot: bool,
        from_seq: Option<u64>,
        kinds: Option<Vec<String>>,
        resync: Option<bool>,
    ) -> PyResult<SubArgs> {
        let from = match (snapshot, from_seq) {
            (true, Some(_)) => {
                return Err(value_error(
                    "snapshot=True and from_seq= exclude each other",
                ))
            }
            (true, None) => StartFrom::Snapshot,
            (false, Some(n)) => StartFrom::Seq(n),
            (false, None) => StartFrom::Now,
        };
        let kinds = kinds
            .map(|ks| {
                ks.iter()
                    .map(|k| {
                        EventKind::parse(k).ok_or_else(|| {
                            value_error(format!(
                                "kinds: {k:?} is not an event kind ({})",
                                EventKind::ALL.map(|k| k.as_str()).join(", ")
                            ))
                        })
                    })
                    .collect::<PyResult<Vec<_>>>()
            })
            .transpose()?;
        if let Some(c) = &cursor {
            treelog_proto::cursor::validate_cursor_name(c).map_err(err)?;
        }
        Ok(SubArgs {
            opts: SubscribeOptions {
                from,
                filter: Filter {
                    prefix: prefix.map(Into::into),
                    kinds,
                },
                cursor,
                resync_on_move_in: resync,
            },
        })
    }
}

/// What `ack()` needs: the client, the cursor, and which API to answer in.
struct Acker {
    core: Core,
    cursor: Option<String>,
    asyncio: bool,
}

fn ack(py: Python<'_>, acker: &Acker, seq: u64) -> PyResult<Py<PyAny>> {
    let Some(cursor) = acker.cursor.clone() else {
        return Err(PyValueError::new_err(
            "this subscription has no cursor: subscribe(cursor=\"name\") to acknowledge",
        ));
    };
    let fut = acker.core.clone().ack(cursor, seq);
    if acker.asyncio {
        Ok(pyo3_async_runtimes::tokio::future_into_py(py, fut)?.unbind())
    } else {
        wait(py, fut)?;
        Ok(py.None())
    }
}

struct SubState {
    core: Core,
    opts: SubscribeOptions,
    sub: Option<RemoteSubscription>,
    acker: Arc<Acker>,
    closed: bool,
}

enum Next {
    Item(ItemOut),
    Timeout,
    End,
}

impl SubState {
    async fn open(&mut self) -> PyResult<()> {
        if self.closed {
            return Err(PyValueError::new_err("the subscription is closed"));
        }
        if self.sub.is_none() {
            let cl = self.core.client().await?;
            self.sub = Some(cl.subscribe(self.opts.clone()).await.map_err(err)?);
        }
        Ok(())
    }

    async fn next(&mut self, timeout: Option<Duration>) -> PyResult<Next> {
        self.open().await?;
        let Some(sub) = self.sub.as_mut() else {
            return Ok(Next::End);
        };
        let r = match timeout {
            Some(t) => match tokio::time::timeout(t, sub.next()).await {
                Ok(r) => r,
                Err(_) => return Ok(Next::Timeout),
            },
            None => sub.next().await,
        };
        match r {
            Some(Ok(item)) => Ok(Next::Item(ItemOut {
                item,
                acker: self.acker.clone(),
            })),
            Some(Err(e)) => Err(err(e)),
            None => Ok(Next::End),
        }
    }
}

fn state(core: Core, args: SubArgs, asyncio: bool) -> Arc<Mutex<SubState>> {
    let acker = Arc::new(Acker {
        core: core.clone(),
        cursor: args.opts.cursor.clone(),
        asyncio,
    });
    Arc::new(Mutex::new(SubState {
        core,
        opts: args.opts,
        sub: None,
        acker,
        closed: false,
    }))
}

/// A subscription to the change stream (:meth:`Client.subscribe`): iterate
/// over it, or call ``next(timeout)``. It reconnects and resumes by itself.
#[pyclass(module = "treelog")]
pub(crate) struct Subscription {
    st: Arc<Mutex<SubState>>,
}

impl Subscription {
    pub(crate) fn open(py: Python<'_>, core: Core, args: SubArgs) -> PyResult<Subscription> {
        let st = state(core, args, false);
        let s = st.clone();
        wait(py, async move { s.lock().await.open().await })?;
        Ok(Subscription { st })
    }
}

fn position(st: &Mutex<SubState>) -> Option<u64> {
    st.try_lock()
        .ok()
        .and_then(|s| s.sub.as_ref().and_then(|s| s.position()))
}

fn reconnects(st: &Mutex<SubState>) -> u64 {
    st.try_lock()
        .ok()
        .and_then(|s| s.sub.as_ref().map(|s| s.reconnects()))
        .unwrap_or(0)
}

#[pymethods]
impl Subscription {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<ItemOut>> {
        let st = self.st.clone();
        match wait(py, async move { st.lock().await.next(None).await })? {
            Next::Item(i) => Ok(Some(i)),
            Next::Timeout | Next::End => Ok(None),
        }
    }

    /// The next item, or ``None`` when none came within ``timeout``
    /// seconds (``None``: wait as long as it takes).
    #[pyo3(signature = (timeout=None))]
    fn next(&self, py: Python<'_>, timeout: Option<f64>) -> PyResult<Option<ItemOut>> {
        let t = core::seconds("timeout", timeout)?;
        let st = self.st.clone();
        match wait(py, async move { st.lock().await.next(t).await })? {
            Next::Item(i) => Ok(Some(i)),
            Next::Timeout | Next::End => Ok(None),
        }
    }

    /// The position to resume after: that of the last item handed out that
    /// completes one (``None`` before).
    #[getter]
    fn position(&self) -> Option<u64> {
        position(&self.st)
    }

    /// How many times it reconnected and resumed.
    #[getter]
    fn reconnects(&self) -> u64 {
        reconnects(&self.st)
    }

    /// Ends the subscription (its connection closes).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let st = self.st.clone();
        wait(py, async move {
            let mut s = st.lock().await;
            s.sub = None;
            s.closed = true;
            Ok(())
        })
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }
}

/// The asyncio twin of :class:`Subscription`: ``async for`` over it (it
/// opens on the first item), or ``await`` it to open it now.
#[pyclass(module = "treelog")]
pub(crate) struct AsyncSubscription {
    st: Arc<Mutex<SubState>>,
}

impl AsyncSubscription {
    /// A future that opens the subscription and resolves to it.
    fn opened<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let st = slf.st.clone();
        let me: Py<AsyncSubscription> = slf.into();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            st.lock().await.open().await?;
            Ok(me)
        })
    }

    pub(crate) fn new(core: Core, args: SubArgs) -> AsyncSubscription {
        AsyncSubscription {
            st: state(core, args, true),
        }
    }
}

#[pymethods]
impl AsyncSubscription {
    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// Opens the subscription now (``await client.subscribe(...)``): the
    /// stream's start is fixed from then on.
    fn __await__<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::opened(slf)?.call_method0("__await__")
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let st = self.st.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            match st.lock().await.next(None).await? {
                Next::Item(i) => Ok(i),
                Next::Timeout | Next::End => Err(PyStopAsyncIteration::new_err(())),
            }
        })
    }

    /// The next item, or ``None`` when none came within ``timeout``
    /// seconds (a coroutine).
    #[pyo3(signature = (timeout=None))]
    fn next<'py>(&self, py: Python<'py>, timeout: Option<f64>) -> PyResult<Bound<'py, PyAny>> {
        let t = core::seconds("timeout", timeout)?;
        let st = self.st.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            match st.lock().await.next(t).await? {
                Next::Item(i) => Ok(Some(i)),
                Next::Timeout | Next::End => Ok(None),
            }
        })
    }

    #[getter]
    fn position(&self) -> Option<u64> {
        position(&self.st)
    }

    #[getter]
    fn reconnects(&self) -> u64 {
        reconnects(&self.st)
    }

    /// Ends the subscription (a coroutine).
    fn close<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let st = self.st.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            let mut s = st.lock().await;
            s.sub = None;
            s.closed = true;
            Ok(())
        })
    }

    fn __aenter__<'py>(slf: PyRef<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        Self::opened(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __aexit__<'py>(
        &self,
        py: Python<'py>,
        _args: &Bound<'py, PyTuple>,
    ) -> PyResult<Bound<'py, PyAny>> {
        self.close(py)
    }
}

/// A stream item on its way to Python (converted with the GIL held).
pub(crate) struct ItemOut {
    item: StreamItem,
    acker: Arc<Acker>,
}

impl<'py> IntoPyObject<'py> for ItemOut {
    type Target = PyAny;
    type Output = Bound<'py, PyAny>;
    type Error = PyErr;

    fn into_pyobject(self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let acker = self.acker;
        Ok(match self.item {
            StreamItem::SnapshotStart {
                seq,
                prefix,
                resync,
            } => Bound::new(
                py,
                SnapshotStart {
                    seq,
                    prefix: prefix.to_string(),
                    resync,
                },
            )?
            .into_any(),
            StreamItem::SnapshotEntry { path, inode } => Bound::new(
                py,
                SnapshotEntry {
                    path: path.to_string(),
                    stat: Stat::of(&inode),
                },
            )?
            .into_any(),
            StreamItem::SnapshotEnd { seq } => {
                Bound::new(py, SnapshotEnd { seq, acker })?.into_any()
            }
            StreamItem::Progress { seq } => Bound::new(py, Progress { seq, acker })?.into_any(),
            StreamItem::Record {
                seq,
                time_ms,
                events,
            } => {
                let evs = events
                    .iter()
                    .map(|e| Bound::new(py, Event::of(e)))
                    .collect::<PyResult<Vec<_>>>()?;
                Bound::new(
                    py,
                    Record {
                        seq,
                        time_ms,
                        events: PyTuple::new(py, evs)?.unbind(),
                        acker,
                    },
                )?
                .into_any()
            }
        })
    }
}

/// A consistent snapshot at ``seq`` begins: replace your model of the
/// subtree with the entries that follow (``resync``: a directory moved
/// into the subtree, and this snapshot replaces what you had).
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(PartialEq, Eq)]
pub(crate) struct SnapshotStart {
    seq: u64,
    prefix: String,
    resync: bool,
}

#[pymethods]
impl SnapshotStart {
    /// Not a resume point: ``None``.
    #[getter]
    fn position(&self) -> Option<u64> {
        None
    }

    fn __repr__(&self) -> String {
        format!(
            "SnapshotStart(seq={}, prefix={:?}, resync={})",
            self.seq,
            self.prefix,
            if self.resync { "True" } else { "False" }
        )
    }
}

/// One inode of a snapshot (parents before their children).
#[pyclass(frozen, get_all, eq, module = "treelog")]
#[derive(PartialEq, Eq)]
pub(crate) struct SnapshotEntry {
    path: String,
    stat: Stat,
}

#[pymethods]
impl SnapshotEntry {
    #[getter]
    fn position(&self) -> Option<u64> {
        None
    }

    fn __repr__(&self) -> String {
        format!(
            "SnapshotEntry(path={:?}, stat={})",
            self.path,
            self.stat.__repr__()
        )
    }
}

/// The snapshot is complete: records from ``seq + 1`` follow.
/// ``ack()`` after applying the snapshot.
#[pyclass(frozen, module = "treelog")]
pub(crate) struct SnapshotEnd {
    #[pyo3(get)]
    seq: u64,
    acker: Arc<Acker>,
}

#[pymethods]
impl SnapshotEnd {
    #[getter]
    fn position(&self) -> Option<u64> {
        Some(self.seq)
    }

    /// Acknowledges ``seq`` on the subscription's cursor (a coroutine
    /// with the asyncio client).
    fn ack(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        ack(py, &self.acker, self.seq)
    }

    fn __eq__(&self, o: &Bound<'_, PyAny>) -> bool {
        o.cast::<SnapshotEnd>()
            .is_ok_and(|o| o.get().seq == self.seq)
    }

    fn __repr__(&self) -> String {
        format!("SnapshotEnd(seq={})", self.seq)
    }
}

/// Records up to ``seq`` were read and none passed the filter: a position
/// to acknowledge.
#[pyclass(frozen, module = "treelog")]
pub(crate) struct Progress {
    #[pyo3(get)]
    seq: u64,
    acker: Arc<Acker>,
}

#[pymethods]
impl Progress {
    #[getter]
    fn position(&self) -> Option<u64> {
        Some(self.seq)
    }

    /// Acknowledges ``seq`` on the subscription's cursor.
    fn ack(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        ack(py, &self.acker, self.seq)
    }

    fn __eq__(&self, o: &Bound<'_, PyAny>) -> bool {
        o.cast::<Progress>().is_ok_and(|o| o.get().seq == self.seq)
    }

    fn __repr__(&self) -> String {
        format!("Progress(seq={})", self.seq)
    }
}

/// A committed record: its sequence, its commit time (ms since the epoch)
/// and the events that passed the filter (a tuple of :class:`Event`).
#[pyclass(frozen, module = "treelog")]
pub(crate) struct Record {
    #[pyo3(get)]
    seq: u64,
    #[pyo3(get)]
    time_ms: u64,
    #[pyo3(get)]
    events: Py<PyTuple>,
    acker: Arc<Acker>,
}

#[pymethods]
impl Record {
    #[getter]
    fn position(&self) -> Option<u64> {
        Some(self.seq)
    }

    /// Acknowledges ``seq`` on the subscription's cursor (after processing
    /// the record: at-least-once).
    fn ack(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        ack(py, &self.acker, self.seq)
    }

    fn __repr__(&self, py: Python<'_>) -> PyResult<String> {
        Ok(format!(
            "Record(seq={}, time_ms={}, events={})",
            self.seq,
            self.time_ms,
            self.events.bind(py).repr()?
        ))
    }
}

fn scope_name(s: Scope) -> &'static str {
    match s {
        Scope::Inside => "inside",
        Scope::MoveIn => "move_in",
        Scope::MoveOut => "move_out",
        Scope::Ancestor => "ancestor",
    }
}

/// One event of a record. ``kind`` says which (``"create"``,
/// ``"complete"``, ``"set_size"``, ``"set_attr"``, ``"delete"``,
/// ``"rename"``, ``"symlink"``, ``"set_xattr"``, ``"remove_xattr"``,
/// ``"set_quota"``, ``"clear_quota"``), ``scope`` how it relates to the
/// subscription's prefix (``"inside"``, ``"move_in"``, ``"move_out"``,
/// ``"ancestor"``). ``path`` is the inode's path after the event (a
/// rename's new path; ``old_path`` its old one). ``stat``: the inode after
/// the event (as it was, for a delete); ``old``: before an attribute
/// change. ``target``: a new link's. ``xattr``, ``value``, ``old_value``:
/// an extended attribute's name and values. ``quota``: a quota set (or
/// the one cleared). Fields an event does not have are ``None``.
#[pyclass(frozen, eq, module = "treelog")]
#[derive(PartialEq, Eq)]
pub(crate) struct Event {
    #[pyo3(get)]
    kind: &'static str,
    #[pyo3(get)]
    scope: &'static str,
    #[pyo3(get)]
    id: u64,
    #[pyo3(get)]
    path: String,
    #[pyo3(get)]
    old_path: Option<String>,
    #[pyo3(get)]
    stat: Option<Stat>,
    #[pyo3(get)]
    old: Option<Stat>,
    #[pyo3(get)]
    target: Option<String>,
    #[pyo3(get)]
    xattr: Option<String>,
    value_: Option<Vec<u8>>,
    old_value_: Option<Vec<u8>>,
    #[pyo3(get)]
    quota: Option<Quota>,
}

impl Event {
    fn of(se: &ScopedEvent) -> Event {
        let ev = &*se.event;
        let mut e = Event {
            kind: ev.kind().as_str(),
            scope: scope_name(se.scope),
            id: 0,
            path: ev.path().to_owned().to_string(),
            old_path: None,
            stat: None,
            old: None,
            target: None,
            xattr: None,
            value_: None,
            old_value_: None,
            quota: None,
        };
        match ev {
            Ev::Create {
                id,
                parent,
                name,
                attrs,
                ..
            }
            | Ev::Delete {
                id,
                parent,
                name,
                attrs,
                ..
            } => {
                e.id = *id;
                e.stat = Some(Stat::new(*id, *parent, &name.to_str_lossy(), attrs));
            }
            Ev::Complete(u) | Ev::SetSize(u) | Ev::SetAttr(u) => {
                e.id = u.id;
                e.stat = Some(Stat::new(u.id, u.parent, &u.name.to_str_lossy(), &u.new));
                e.old = Some(Stat::new(u.id, u.parent, &u.name.to_str_lossy(), &u.old));
            }
            Ev::Rename {
                id,
                old_path,
                new_parent,
                new_name,
                attrs,
                ..
            } => {
                e.id = *id;
                e.old_path = Some(old_path.clone().to_string());
                e.stat = Some(Stat::new(*id, *new_parent, &new_name.to_str_lossy(), attrs));
            }
            Ev::Symlink {
                id,
                parent,
                name,
                target,
                attrs,
                ..
            } => {
                e.id = *id;
                e.stat = Some(Stat::new(*id, *parent, &name.to_str_lossy(), attrs));
                e.target = Some(target.clone().to_string());
            }
            Ev::SetXattr {
                id,
                name,
                value,
                old,
                ..
            } => {
                e.id = *id;
                e.xattr = Some(name.clone());
                e.value_ = Some(value.0.clone());
                e.old_value_ = old.as_ref().map(|o| o.0.clone());
            }
            Ev::RemoveXattr { id, name, old, .. } => {
                e.id = *id;
                e.xattr = Some(name.clone());
                e.old_value_ = Some(old.0.clone());
            }
            Ev::SetQuota { id, quota, .. } => {
                e.id = *id;
                e.quota = Some(Quota::of(quota));
            }
            Ev::ClearQuota { id, old, .. } => {
                e.id = *id;
                e.quota = Some(Quota::of(old));
            }
        }
        e
    }
}

#[pymethods]
impl Event {
    /// A set extended attribute's value.
    #[getter]
    fn value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.value_.as_ref().map(|v| PyBytes::new(py, v))
    }

    /// The value an extended attribute had before.
    #[getter]
    fn old_value<'py>(&self, py: Python<'py>) -> Option<Bound<'py, PyBytes>> {
        self.old_value_.as_ref().map(|v| PyBytes::new(py, v))
    }

    fn __repr__(&self) -> String {
        let mut s = format!(
            "Event(kind={:?}, scope={:?}, id={}, path={:?}",
            self.kind, self.scope, self.id, self.path
        );
        if let Some(o) = &self.old_path {
            s += &format!(", old_path={o:?}");
        }
        if let Some(t) = &self.target {
            s += &format!(", target={t:?}");
        }
        if let Some(x) = &self.xattr {
            s += &format!(", xattr={x:?}");
        }
        s + ")"
    }
}
