//! Listings and walks as iterators (blocking and asyncio) that read one
//! page at a time: any directory, any tree, in the memory of a page (and,
//! for a walk, of the directories still to visit).

use std::collections::VecDeque;
use std::sync::Arc;

use pyo3::exceptions::PyStopAsyncIteration;
use pyo3::prelude::*;
use tokio::sync::Mutex;

use treelog_proto::read::ReadAt;

use crate::core::{Consistency, Core};
use crate::errors::{err, value_error};
use crate::types::{DirEntry, Page};
use crate::{runtime, wait};

/// An awaitable already done with `v` (an item a buffer held).
pub(crate) fn ready<'py, T: IntoPyObject<'py>>(
    py: Python<'py>,
    v: T,
) -> PyResult<Bound<'py, PyAny>> {
    let f = pyo3_async_runtimes::get_running_loop(py)?.call_method0("create_future")?;
    f.call_method1("set_result", (v,))?;
    Ok(f)
}

pub(crate) struct ListState {
    core: Core,
    path: String,
    page_size: u32,
    c: Consistency,
    after: Option<String>,
    done: bool,
    buf: VecDeque<DirEntry>,
}

impl ListState {
    async fn page(&mut self) -> PyResult<Option<Page>> {
        if self.done {
            return Ok(None);
        }
        let p = self
            .core
            .clone()
            .list_page(
                self.path.clone(),
                self.after.clone(),
                self.page_size,
                self.c,
            )
            .await?;
        match &p.next_start_after {
            Some(n) => self.after = Some(n.clone()),
            None => self.done = true,
        }
        Ok(Some(p))
    }

    async fn next_entry(&mut self) -> PyResult<Option<DirEntry>> {
        while self.buf.is_empty() {
            match self.page().await? {
                Some(p) => self.buf.extend(p.entries),
                None => return Ok(None),
            }
        }
        Ok(self.buf.pop_front())
    }
}

fn list_state(
    core: Core,
    path: String,
    page_size: u32,
    start_after: Option<String>,
    c: Consistency,
) -> PyResult<Arc<Mutex<ListState>>> {
    if page_size == 0 {
        return Err(value_error("page_size: at least 1"));
    }
    Ok(Arc::new(Mutex::new(ListState {
        core,
        path,
        page_size,
        c,
        after: start_after,
        done: false,
        buf: VecDeque::new(),
    })))
}

/// The entries of a directory (:meth:`Client.list`), read a page at a
/// time. ``pages()`` iterates over the pages (:class:`Page`) instead.
#[pyclass(module = "treelog")]
pub(crate) struct Listing {
    st: Arc<Mutex<ListState>>,
    pages: bool,
}

impl Listing {
    pub(crate) fn new(
        core: Core,
        path: String,
        page_size: u32,
        start_after: Option<String>,
        c: Consistency,
    ) -> PyResult<Listing> {
        Ok(Listing {
            st: list_state(core, path, page_size, start_after, c)?,
            pages: false,
        })
    }
}

#[pymethods]
impl Listing {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// This listing as an iterator of pages.
    fn pages(&self) -> Listing {
        Listing {
            st: self.st.clone(),
            pages: true,
        }
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyAny>>> {
        if !self.pages {
            // Entries already read need no wait.
            if let Ok(mut s) = self.st.try_lock() {
                if let Some(e) = s.buf.pop_front() {
                    return Ok(Some(e.into_pyobject(py)?.into_any().unbind()));
                }
            }
        }
        let st = self.st.clone();
        if self.pages {
            let p = wait(py, async move { st.lock().await.page().await })?;
            p.map(|p| Ok(p.into_pyobject(py)?.into_any().unbind()))
                .transpose()
        } else {
            let e = wait(py, async move { st.lock().await.next_entry().await })?;
            e.map(|e| Ok(e.into_pyobject(py)?.into_any().unbind()))
                .transpose()
        }
    }
}

/// The asyncio twin of :class:`Listing` (``async for``).
#[pyclass(module = "treelog")]
pub(crate) struct AsyncListing {
    st: Arc<Mutex<ListState>>,
    pages: bool,
}

impl AsyncListing {
    pub(crate) fn new(
        core: Core,
        path: String,
        page_size: u32,
        start_after: Option<String>,
        c: Consistency,
    ) -> PyResult<AsyncListing> {
        Ok(AsyncListing {
            st: list_state(core, path, page_size, start_after, c)?,
            pages: false,
        })
    }
}

#[pymethods]
impl AsyncListing {
    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// This listing as an async iterator of pages.
    fn pages(&self) -> AsyncListing {
        AsyncListing {
            st: self.st.clone(),
            pages: true,
        }
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        let st = self.st.clone();
        if self.pages {
            return pyo3_async_runtimes::tokio::future_into_py(py, async move {
                st.lock()
                    .await
                    .page()
                    .await?
                    .ok_or_else(|| PyStopAsyncIteration::new_err(()))
            });
        }
        if let Ok(mut s) = self.st.try_lock() {
            if let Some(e) = s.buf.pop_front() {
                return ready(py, e);
            }
        }
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            st.lock()
                .await
                .next_entry()
                .await?
                .ok_or_else(|| PyStopAsyncIteration::new_err(()))
        })
    }
}

pub(crate) struct WalkState {
    core: Core,
    root: String,
    page_size: u32,
    /// The pinned state, once the walk started.
    seq: Option<u64>,
    /// Directories still to list (the last pushed is taken first).
    stack: Vec<String>,
    /// The directory being listed: its path, the page cursor, its
    /// subdirectories seen so far.
    cur: Option<(String, Option<String>, Vec<String>)>,
    buf: VecDeque<DirEntry>,
    done: bool,
}

impl WalkState {
    async fn next_entry(&mut self) -> PyResult<Option<DirEntry>> {
        while self.buf.is_empty() {
            if self.done {
                return Ok(None);
            }
            let seq = match self.seq {
                Some(s) => s,
                None => {
                    let root = treelog_proto::path::canonical(&self.root).map_err(err)?;
                    let s = self.core.pin_view().await?;
                    self.seq = Some(s);
                    self.stack.push(root.to_string());
                    s
                }
            };
            let (dir, after, mut subdirs) = match self.cur.take() {
                Some(c) => c,
                None => match self.stack.pop() {
                    Some(d) => (d, None, Vec::new()),
                    None => {
                        self.done = true;
                        // Best effort: an unpinned view also expires.
                        let _ = self.core.unpin_view(seq).await;
                        return Ok(None);
                    }
                },
            };
            let cl = self.core.client().await?;
            let page = match self
                .core
                .list_page_at(
                    &cl,
                    dir.clone(),
                    after.clone(),
                    self.page_size,
                    ReadAt::Exactly(seq),
                )
                .await
            {
                Ok(p) => p,
                Err(e) => {
                    // Kept, so that a retry lists the same page again.
                    self.cur = Some((dir, after, subdirs));
                    return Err(e);
                }
            };
            for e in page.entries {
                if e.stat.kind == "directory" {
                    subdirs.push(e.path.clone());
                }
                self.buf.push_back(e);
            }
            match page.next_start_after {
                Some(n) => self.cur = Some((dir, Some(n), subdirs)),
                // Depth first, in name order.
                None => self.stack.extend(subdirs.into_iter().rev()),
            }
        }
        Ok(self.buf.pop_front())
    }
}

impl Drop for WalkState {
    fn drop(&mut self) {
        if let (Some(seq), false) = (self.seq, self.done) {
            let core = self.core.clone();
            runtime().spawn(async move {
                let _ = core.unpin_view(seq).await;
            });
        }
    }
}

fn walk_state(core: Core, root: String, page_size: u32) -> PyResult<Arc<Mutex<WalkState>>> {
    if page_size == 0 {
        return Err(value_error("page_size: at least 1"));
    }
    Ok(Arc::new(Mutex::new(WalkState {
        core,
        root,
        page_size,
        seq: None,
        stack: Vec::new(),
        cur: None,
        buf: VecDeque::new(),
        done: false,
    })))
}

/// Every entry under a directory at one pinned state (:meth:`Client.walk`).
#[pyclass(module = "treelog")]
pub(crate) struct Walk {
    st: Arc<Mutex<WalkState>>,
}

impl Walk {
    pub(crate) fn new(core: Core, root: String, page_size: u32) -> PyResult<Walk> {
        Ok(Walk {
            st: walk_state(core, root, page_size)?,
        })
    }
}

#[pymethods]
impl Walk {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    /// The sequence of the state walked (``None`` before the first entry).
    #[getter]
    fn seq(&self) -> Option<u64> {
        self.st.try_lock().ok().and_then(|s| s.seq)
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<DirEntry>> {
        if let Ok(mut s) = self.st.try_lock() {
            if let Some(e) = s.buf.pop_front() {
                return Ok(Some(e));
            }
        }
        let st = self.st.clone();
        wait(py, async move { st.lock().await.next_entry().await })
    }
}

/// The asyncio twin of :class:`Walk` (``async for``).
#[pyclass(module = "treelog")]
pub(crate) struct AsyncWalk {
    st: Arc<Mutex<WalkState>>,
}

impl AsyncWalk {
    pub(crate) fn new(core: Core, root: String, page_size: u32) -> PyResult<AsyncWalk> {
        Ok(AsyncWalk {
            st: walk_state(core, root, page_size)?,
        })
    }
}

#[pymethods]
impl AsyncWalk {
    fn __aiter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    #[getter]
    fn seq(&self) -> Option<u64> {
        self.st.try_lock().ok().and_then(|s| s.seq)
    }

    fn __anext__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        if let Ok(mut s) = self.st.try_lock() {
            if let Some(e) = s.buf.pop_front() {
                return ready(py, e);
            }
        }
        let st = self.st.clone();
        pyo3_async_runtimes::tokio::future_into_py(py, async move {
            st.lock()
                .await
                .next_entry()
                .await?
                .ok_or_else(|| PyStopAsyncIteration::new_err(()))
        })
    }
}
