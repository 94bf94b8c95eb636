//! Read views: every read sees one committed state.
//!
//! The publisher (see `writer`) makes each committed round visible in one
//! step that readers can tell apart: with `publishing` odd, it stores the
//! round's RocksDB snapshot with its sequence ([`PublishedView`]), updates
//! the readers' cache, the tail cache and the committed watermark; then it
//! makes `publishing` even again. A read ([`read_consistent`]) notes the
//! count, reads (through the cache, at the published snapshot), and keeps
//! its result only if the count did not move: no key it read can then come
//! from another state, and its sequence is the view's. A read that keeps
//! meeting publishes reads at one pinned snapshot without the cache, which
//! is consistent by construction, so no read starves.
//!
//! Reads can also ask for a state ([`ReadAt`]): no older than a sequence (a
//! token from a write, or from another read), or exactly one — the current
//! state, or one retained by [`RetainedViews::pin`] for a bounded time (a
//! paged or recursive listing pins the state of its first page and reads
//! every later page at it).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::index::IndexRead;
use crate::names::Names;
use crate::store::{IndexSnapshot, Store};

/// A committed state as readers see it: the index at a RocksDB snapshot,
/// and the sequence of the last record it holds.
pub struct PublishedView {
    pub snap: IndexSnapshot,
    pub seq: u64,
}

pub use treelog_proto::read::{Read, ReadAt};

/// Reads that met a publish this many times read at a pinned snapshot.
const FAST_ATTEMPTS: usize = 3;

/// Runs `read` against one committed state: first through the readers'
/// cache (`cached`), validated against `publishing` (see the module docs),
/// then, if publishes keep landing inside it, at `view`'s pinned snapshot
/// of `store` alone. Returns the value and the state's sequence.
pub fn read_consistent<T, C: IndexRead>(
    publishing: &AtomicU64,
    view: &arc_swap::ArcSwap<PublishedView>,
    names: &Names,
    store: &Store,
    cached: impl Fn() -> C,
    mut read: impl FnMut(&dyn IndexRead, &Names) -> Result<T>,
) -> Result<(T, u64)> {
    // Bounded in time too, should the publisher die inside a publish (the
    // count would then stay odd).
    let give_up = Instant::now() + Duration::from_millis(100);
    // Waits for a count outside a publish; odd if the wait gave up.
    let between = || {
        let mut c = publishing.load(Ordering::SeqCst);
        while c % 2 == 1 && Instant::now() < give_up {
            std::thread::yield_now();
            c = publishing.load(Ordering::SeqCst);
        }
        c
    };
    for _ in 0..FAST_ATTEMPTS {
        let before = between();
        if before % 2 == 1 {
            break;
        }
        let seq = view.load().seq;
        let r = read(&cached(), names);
        if publishing.load(Ordering::SeqCst) == before {
            return r.map(|v| (v, seq));
        }
    }
    // A view stored by a publish still under way may be ahead of the
    // watermark: take one from between publishes.
    between();
    let v = view.load_full();
    let r = read(&store.index_at(&v.snap), names);
    r.map(|value| (value, v.seq))
}

struct Retained {
    view: Arc<PublishedView>,
    pins: u64,
    pinned_at: Instant,
    used_at: Instant,
}

/// States pinned for later reads ([`ReadAt::Exactly`]): each holds a
/// RocksDB snapshot, which keeps the versions it sees from being compacted
/// away, so both their number and their age are bounded.
pub struct RetainedViews {
    views: Mutex<BTreeMap<u64, Retained>>,
    /// Most states pinned at once; pinning one more fails with `Busy`.
    pub max_views: usize,
    /// A pinned state unused this long is released.
    pub idle: Duration,
    /// A pinned state is released this long after it was pinned, used or
    /// not (reads at it then fail with `Compacted`).
    pub max_age: Duration,
    gauge: Option<prometheus::IntGauge>,
}

impl RetainedViews {
    pub fn new(gauge: Option<prometheus::IntGauge>) -> RetainedViews {
        RetainedViews {
            views: Mutex::default(),
            max_views: 1024,
            idle: Duration::from_secs(60),
            max_age: Duration::from_secs(600),
            gauge,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Retained>> {
        self.views.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Drops expired states (under the lock).
    fn expire(&self, m: &mut BTreeMap<u64, Retained>, now: Instant) {
        m.retain(|_, r| {
            now.duration_since(r.used_at) < self.idle
                && now.duration_since(r.pinned_at) < self.max_age
        });
        if let Some(g) = &self.gauge {
            g.set(m.len() as i64);
        }
    }

    /// Retains `view` (one more pin if it is retained already).
    pub fn pin(&self, view: Arc<PublishedView>) -> Result<u64> {
        let now = Instant::now();
        let mut m = self.lock();
        self.expire(&mut m, now);
        let seq = view.seq;
        if let Some(r) = m.get_mut(&seq) {
            r.pins += 1;
            r.used_at = now;
            return Ok(seq);
        }
        if m.len() >= self.max_views {
            return Err(Error::Busy(format!(
                "{} read views are pinned, the most allowed; unpin one or wait {:?} for one to expire",
                m.len(),
                self.idle
            )));
        }
        m.insert(
            seq,
            Retained {
                view,
                pins: 1,
                pinned_at: now,
                used_at: now,
            },
        );
        if let Some(g) = &self.gauge {
            g.set(m.len() as i64);
        }
        Ok(seq)
    }

    /// Releases one pin of the state at `seq`; false if it was not pinned.
    pub fn unpin(&self, seq: u64) -> bool {
        let mut m = self.lock();
        let found = match m.get_mut(&seq) {
            Some(r) if r.pins > 1 => {
                r.pins -= 1;
                true
            }
            Some(_) => m.remove(&seq).is_some(),
            None => false,
        };
        self.expire(&mut m, Instant::now());
        found
    }

    /// The retained state at `seq`, if any (refreshing its idle time).
    pub fn get(&self, seq: u64) -> Option<Arc<PublishedView>> {
        let now = Instant::now();
        let mut m = self.lock();
        self.expire(&mut m, now);
        let r = m.get_mut(&seq)?;
        r.used_at = now;
        Some(r.view.clone())
    }
}

/// The error of a read at a state that is neither the newest nor retained.
pub fn not_retained(seq: u64, latest: u64) -> Error {
    Error::ViewNotRetained { seq, latest }
}

/// A walk of the directories under one directory, depth first and a page of
/// children at a time (each entry before its children, names in byte order
/// within a directory): it holds one page per directory level. The caller
/// reads every step at the same state (a pinned snapshot) for a consistent
/// walk; the snapshot subscription and [`crate::Treelog::walk`] use it.
pub struct TreeWalk {
    stack: Vec<WalkFrame>,
    page: usize,
}

struct WalkFrame {
    id: u64,
    path: String,
    buf: std::collections::VecDeque<crate::types::DirEntry>,
    after: Option<String>,
    done: bool,
}

impl WalkFrame {
    fn new(id: u64, path: String) -> WalkFrame {
        WalkFrame {
            id,
            path,
            buf: Default::default(),
            after: None,
            done: false,
        }
    }
}

impl TreeWalk {
    /// A walk of the children of directory `id`, whose path is `path`,
    /// reading `page` entries at a time.
    pub fn new(id: u64, path: String, page: usize) -> TreeWalk {
        TreeWalk {
            stack: vec![WalkFrame::new(id, path)],
            page,
        }
    }

    /// The next entry and its path, or `None` at the end.
    pub fn next(
        &mut self,
        idx: &(impl IndexRead + ?Sized),
        names: &Names,
    ) -> Result<Option<(String, crate::types::DirEntry)>> {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return Ok(None);
            };
            let Some(e) = top.buf.pop_front() else {
                if top.done {
                    self.stack.pop();
                    continue;
                }
                let (page, more) = crate::engine::list_children(
                    idx,
                    names,
                    top.id,
                    top.after.as_deref(),
                    self.page,
                )?;
                top.done = !more;
                top.after = page.last().map(|e| e.name.clone());
                top.buf.extend(page);
                continue;
            };
            let p = crate::path::join(&top.path, &e.name);
            if e.inode.attrs.kind.is_dir() {
                self.stack.push(WalkFrame::new(e.inode.id, p.clone()));
            }
            return Ok(Some((p, e)));
        }
    }
}
