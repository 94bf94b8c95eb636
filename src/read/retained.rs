//! States pinned for reads at an exact sequence ([`ReadAt::Exactly`]), and
//! who pinned them ([`ViewPins`]).
//!
//! [`ReadAt::Exactly`]: crate::ReadAt::Exactly

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::read::view::PublishedView;

/// The owner of the pins taken through [`crate::Treelog::pin_view`]: the
/// process itself, trusted, with no share of its own.
const LOCAL: u64 = 0;

struct Retained<V> {
    view: Arc<V>,
    /// Pins by owner (an owner may pin one state several times).
    pins: HashMap<u64, u64>,
    pinned_at: Instant,
    used_at: Instant,
}

struct Table<V> {
    views: BTreeMap<u64, Retained<V>>,
    /// How many states each owner holds a pin on.
    held: HashMap<u64, usize>,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table {
            views: BTreeMap::new(),
            held: HashMap::new(),
        }
    }
}

impl<V> Table<V> {
    fn release(&mut self, owner: u64) {
        if let Some(n) = self.held.get_mut(&owner) {
            *n -= 1;
            if *n == 0 {
                self.held.remove(&owner);
            }
        }
    }

    /// Drops `owner`'s pins of the state at `seq` (the state too when no
    /// one else pins it); false if it held none.
    fn drop_pins(&mut self, seq: u64, owner: u64) -> bool {
        let Some(r) = self.views.get_mut(&seq) else {
            return false;
        };
        if r.pins.remove(&owner).is_none() {
            return false;
        }
        if r.pins.is_empty() {
            self.views.remove(&seq);
        }
        self.release(owner);
        true
    }

    /// Removes the states `keep` refuses, with their owners' counts.
    fn retain(&mut self, mut keep: impl FnMut(&Retained<V>) -> bool) {
        let mut gone = Vec::new();
        self.views.retain(|_, r| {
            let k = keep(r);
            if !k {
                gone.extend(r.pins.keys().copied());
            }
            k
        });
        for owner in gone {
            self.release(owner);
        }
    }
}

/// States pinned for later reads ([`ReadAt::Exactly`]): each holds a
/// RocksDB snapshot, which keeps the versions it sees from being compacted
/// away, so their number and age are bounded, and so is each owner's
/// share: a connection may hold at most `max_per_owner` states, and when
/// the table is full an owner with fewer pins takes the oldest state of
/// the owner with the most, so no client can lock the others out.
///
/// [`ReadAt::Exactly`]: crate::ReadAt::Exactly
pub(crate) struct RetainedViews<V = PublishedView> {
    table: Mutex<Table<V>>,
    /// Most states pinned at once.
    max_views: usize,
    /// Most states one owner (a server connection) pins at once.
    max_per_owner: usize,
    /// A pinned state unused this long is released.
    idle: Duration,
    /// A pinned state is released this long after it was pinned, used or
    /// not (reads at it then fail with `ViewNotRetained`).
    max_age: Duration,
    next_owner: AtomicU64,
    gauge: Option<prometheus::IntGauge>,
}

impl<V> RetainedViews<V> {
    pub(crate) const MAX_VIEWS: usize = 1024;
    pub(crate) const MAX_PER_OWNER: usize = 64;

    pub(crate) fn new(gauge: Option<prometheus::IntGauge>) -> RetainedViews<V> {
        RetainedViews {
            table: Mutex::default(),
            max_views: Self::MAX_VIEWS,
            max_per_owner: Self::MAX_PER_OWNER,
            idle: Duration::from_secs(60),
            max_age: Duration::from_secs(600),
            next_owner: AtomicU64::new(LOCAL + 1),
            gauge,
        }
    }

    #[cfg(test)]
    fn with_limits(max_views: usize, max_per_owner: usize) -> RetainedViews<V> {
        RetainedViews {
            max_views,
            max_per_owner,
            ..RetainedViews::new(None)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table<V>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish_gauge(&self, t: &Table<V>) {
        if let Some(g) = &self.gauge {
            g.set(t.views.len() as i64);
        }
    }

    /// Drops expired states (under the lock).
    fn expire(&self, t: &mut Table<V>, now: Instant) {
        t.retain(|r| {
            now.duration_since(r.used_at) < self.idle
                && now.duration_since(r.pinned_at) < self.max_age
        });
        self.publish_gauge(t);
    }

    /// Retains `view` for `owner` (one more pin if it is retained already).
    fn pin(&self, seq: u64, view: Arc<V>, owner: u64) -> Result<u64> {
        let now = Instant::now();
        let mut t = self.lock();
        self.expire(&mut t, now);
        let held = t.held.get(&owner).copied().unwrap_or(0);
        if let Some(r) = t.views.get_mut(&seq) {
            r.used_at = now;
            let first = !r.pins.contains_key(&owner);
            if first && owner != LOCAL && held >= self.max_per_owner {
                return Err(self.owner_full(held));
            }
            *r.pins.entry(owner).or_default() += 1;
            if first {
                *t.held.entry(owner).or_default() += 1;
            }
            return Ok(seq);
        }
        if owner != LOCAL && held >= self.max_per_owner {
            return Err(self.owner_full(held));
        }
        if t.views.len() >= self.max_views && !self.take_from_largest(&mut t, owner, held) {
            return Err(Error::Busy(format!(
                "{} read views are pinned, the most allowed; unpin one or wait {:?} for one to expire",
                t.views.len(),
                self.idle
            )));
        }
        t.views.insert(
            seq,
            Retained {
                view,
                pins: HashMap::from([(owner, 1)]),
                pinned_at: now,
                used_at: now,
            },
        );
        *t.held.entry(owner).or_default() += 1;
        self.publish_gauge(&t);
        Ok(seq)
    }

    fn owner_full(&self, held: usize) -> Error {
        Error::Busy(format!(
            "this connection pins {held} read views, the most one may; unpin one first"
        ))
    }

    /// Makes room in a full table for `owner`, which holds `held` states:
    /// the owner holding the most (if more than `owner` would after this
    /// pin) loses its pin of its oldest state. False if none holds more.
    fn take_from_largest(&self, t: &mut Table<V>, owner: u64, held: usize) -> bool {
        let largest = t
            .held
            .iter()
            .filter(|(o, _)| **o != owner && **o != LOCAL)
            .max_by_key(|(o, n)| (**n, **o))
            .map(|(o, n)| (*o, *n));
        let Some((victim, n)) = largest else {
            return false;
        };
        if n <= held + 1 {
            return false;
        }
        let oldest = t
            .views
            .iter()
            .filter(|(_, r)| r.pins.contains_key(&victim))
            .min_by_key(|(seq, r)| (r.pinned_at, **seq))
            .map(|(seq, _)| *seq);
        match oldest {
            Some(seq) => {
                t.drop_pins(seq, victim);
                // Another owner's pin on the same state keeps it: only a
                // state that went away makes room.
                t.views.len() < self.max_views
            }
            None => false,
        }
    }

    /// Releases one pin of `owner` on the state at `seq`; false if it held
    /// none (another owner's pins are not its to release).
    fn unpin(&self, seq: u64, owner: u64) -> bool {
        let mut t = self.lock();
        let found = match t.views.get_mut(&seq).and_then(|r| r.pins.get_mut(&owner)) {
            Some(n) if *n > 1 => {
                *n -= 1;
                true
            }
            Some(_) => t.drop_pins(seq, owner),
            None => false,
        };
        self.expire(&mut t, Instant::now());
        found
    }

    /// Releases every pin of `owner`.
    fn release_owner(&self, owner: u64) {
        let mut t = self.lock();
        let seqs: Vec<u64> = t
            .views
            .iter()
            .filter(|(_, r)| r.pins.contains_key(&owner))
            .map(|(seq, _)| *seq)
            .collect();
        for seq in seqs {
            t.drop_pins(seq, owner);
        }
        debug_assert!(!t.held.contains_key(&owner));
        self.publish_gauge(&t);
    }

    /// Pins of the process itself ([`crate::Treelog::pin_view`]).
    pub(crate) fn pin_local(&self, seq: u64, view: Arc<V>) -> Result<u64> {
        self.pin(seq, view, LOCAL)
    }

    pub(crate) fn unpin_local(&self, seq: u64) -> bool {
        self.unpin(seq, LOCAL)
    }

    /// A new owner with its own share.
    pub(crate) fn owner(&self) -> u64 {
        self.next_owner.fetch_add(1, Ordering::Relaxed)
    }

    /// The retained state at `seq`, if any (refreshing its idle time).
    pub(crate) fn get(&self, seq: u64) -> Option<Arc<V>> {
        let now = Instant::now();
        let mut t = self.lock();
        self.expire(&mut t, now);
        let r = t.views.get_mut(&seq)?;
        r.used_at = now;
        Some(r.view.clone())
    }
}

/// The pins of one client (a server connection): counted against its own
/// share of the table, released only by it, and all released when it is
/// dropped (the connection closed).
pub struct ViewPins {
    views: Arc<RetainedViews>,
    newest: Box<dyn Fn() -> Arc<PublishedView> + Send + Sync>,
    owner: u64,
}

impl ViewPins {
    pub(crate) fn new(
        views: Arc<RetainedViews>,
        newest: Box<dyn Fn() -> Arc<PublishedView> + Send + Sync>,
    ) -> ViewPins {
        let owner = views.owner();
        ViewPins {
            views,
            newest,
            owner,
        }
    }

    /// Retains the newest committed state for reads at exactly its
    /// sequence (returned), as [`crate::Treelog::pin_view`], within this
    /// owner's share (`Busy` beyond it).
    pub fn pin(&self) -> Result<u64> {
        let view = (self.newest)();
        self.views.pin(view.seq, view, self.owner)
    }

    /// Releases one of this owner's pins of the state at `seq`; false if
    /// it holds none there (expired, taken, or never its own).
    pub fn unpin(&self, seq: u64) -> bool {
        self.views.unpin(seq, self.owner)
    }
}

impl Drop for ViewPins {
    fn drop(&mut self) {
        self.views.release_owner(self.owner);
    }
}

impl std::fmt::Debug for ViewPins {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ViewPins")
            .field("owner", &self.owner)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view(seq: u64) -> (u64, Arc<u64>) {
        (seq, Arc::new(seq))
    }

    fn pin(v: &RetainedViews<u64>, (seq, view): (u64, Arc<u64>), owner: u64) -> Result<u64> {
        v.pin(seq, view, owner)
    }

    #[test]
    fn an_owner_cannot_pin_past_its_share_nor_unpin_anothers() {
        let v = Arc::new(RetainedViews::<u64>::with_limits(8, 2));
        let (a, b) = (v.owner(), v.owner());
        pin(&v, view(1), a).unwrap();
        pin(&v, view(2), a).unwrap();
        // Again at a state it holds: one more pin, not one more state.
        pin(&v, view(2), a).unwrap();
        assert_eq!(
            pin(&v, view(3), a).unwrap_err().kind(),
            crate::ErrorKind::Busy
        );
        // Not b's to release.
        assert!(!v.unpin(1, b));
        assert!(v.get(1).is_some());
        pin(&v, view(1), b).unwrap();
        assert!(v.unpin(1, a));
        assert!(v.get(1).is_some(), "b still pins it");
        v.release_owner(b);
        assert!(v.get(1).is_none());
        assert!(v.get(2).is_some());
        v.release_owner(a);
        assert!(v.get(2).is_none());
        assert!(v.lock().held.is_empty());
    }

    #[test]
    fn a_full_table_gives_a_small_owner_the_largest_owners_oldest_state() {
        let v = Arc::new(RetainedViews::<u64>::with_limits(4, 4));
        let (big, small) = (v.owner(), v.owner());
        for s in 1..=4 {
            pin(&v, view(s), big).unwrap();
        }
        // The big owner itself is refused: it holds the most.
        assert_eq!(
            pin(&v, view(5), big).unwrap_err().kind(),
            crate::ErrorKind::Busy
        );
        pin(&v, view(6), small).unwrap();
        assert!(v.get(1).is_none(), "the oldest of the largest owner went");
        assert!(v.get(6).is_some());
        pin(&v, view(7), small).unwrap();
        // Two each: neither takes from the other any more.
        assert_eq!(
            pin(&v, view(8), small).unwrap_err().kind(),
            crate::ErrorKind::Busy
        );
        assert_eq!(v.lock().held[&big], 2);
        assert_eq!(v.lock().held[&small], 2);
    }
}
