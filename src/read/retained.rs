//! States pinned for reads at an exact sequence ([`ReadAt::Exactly`]).
//!
//! [`ReadAt::Exactly`]: crate::ReadAt::Exactly

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::read::view::PublishedView;

struct Retained {
    view: Arc<PublishedView>,
    pins: u64,
    pinned_at: Instant,
    used_at: Instant,
}

/// States pinned for later reads ([`ReadAt::Exactly`]): each holds a
/// RocksDB snapshot, which keeps the versions it sees from being compacted
/// away, so both their number and their age are bounded.
pub(crate) struct RetainedViews {
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
    pub(crate) fn new(gauge: Option<prometheus::IntGauge>) -> RetainedViews {
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
    pub(crate) fn pin(&self, view: Arc<PublishedView>) -> Result<u64> {
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
    pub(crate) fn unpin(&self, seq: u64) -> bool {
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
    pub(crate) fn get(&self, seq: u64) -> Option<Arc<PublishedView>> {
        let now = Instant::now();
        let mut m = self.lock();
        self.expire(&mut m, now);
        let r = m.get_mut(&seq)?;
        r.used_at = now;
        Some(r.view.clone())
    }
}
