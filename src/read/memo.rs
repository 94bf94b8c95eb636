//! Records as the stream keeps them in memory: events shared by reference
//! count, and per-record memos of filtered deliveries so that a hundred
//! subscribers do not filter and copy every event a hundred times.

use std::sync::Arc;

use crate::event::{Event, Record};
use treelog_proto::stream::{filter_events, Filter, Scope, ScopedEvent};

/// A record whose events are shared (reference counted): the form kept in
/// the tail cache and filtered by subscribers, so that a hundred
/// subscribers do not copy every event a hundred times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRecord {
    pub seq: u64,
    pub time_ms: u64,
    pub events: Vec<Arc<Event>>,
    /// The events as an unfiltered subscriber receives them, built by the
    /// first such subscriber and shared by all the others (one reference
    /// count per delivery instead of a vector and a count per event).
    pub unfiltered: std::sync::OnceLock<Arc<[ScopedEvent]>>,
    /// The events as subscribers with a filter receive them, built by the
    /// first subscriber with each filter and shared by those with an equal
    /// one (see [`FilterMemo`]).
    pub filtered: FilterMemo,
}

impl SharedRecord {
    /// Every event, scoped [`Scope::Inside`].
    pub fn unfiltered(&self) -> Arc<[ScopedEvent]> {
        self.unfiltered
            .get_or_init(|| {
                self.events
                    .iter()
                    .map(|e| ScopedEvent {
                        scope: Scope::Inside,
                        event: e.clone(),
                    })
                    .collect()
            })
            .clone()
    }
}

impl From<Record> for SharedRecord {
    fn from(r: Record) -> SharedRecord {
        SharedRecord {
            seq: r.seq,
            time_ms: r.time_ms,
            events: r.events.into_iter().map(Arc::new).collect(),
            unfiltered: Default::default(),
            filtered: Default::default(),
        }
    }
}

/// Distinct filters whose results one record keeps. Bounded so that a
/// thousand subscribers with a thousand different subtrees cost each cached
/// record no more than this; past it, subscribers filter for themselves.
const FILTER_MEMO_SLOTS: usize = 4;

type FilterSlot = (Arc<Filter>, Arc<[ScopedEvent]>, bool);

/// One record's filtered events per distinct filter: the first subscription
/// with a filter computes them, later ones with an equal filter share them
/// (one reference count per delivery instead of a filter pass and two
/// allocations). Lives in [`SharedRecord`]; a clone starts
/// empty and equality ignores it (it is a cache). Slots are set once and
/// read without a lock: a lookup is a few loads, not a lock's two atomic
/// read-modify-writes.
#[derive(Default)]
pub struct FilterMemo([std::sync::OnceLock<FilterSlot>; FILTER_MEMO_SLOTS]);

impl Clone for FilterMemo {
    fn clone(&self) -> Self {
        FilterMemo::default()
    }
}

impl PartialEq for FilterMemo {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for FilterMemo {}

impl std::fmt::Debug for FilterMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FilterMemo")
    }
}

impl SharedRecord {
    /// The record's events through `f` and whether they call for a resync
    /// (see [`filter_events`]), shared with earlier callers with an equal
    /// filter.
    pub fn filtered(&self, f: &Arc<Filter>) -> (Arc<[ScopedEvent]>, bool) {
        let compute = || {
            let (v, resync) = filter_events(&self.events, f);
            (Arc::<[ScopedEvent]>::from(v), resync)
        };
        for slot in &self.filtered.0 {
            // An empty slot takes this filter; a taken one may hold it.
            let (g, events, resync) = slot.get_or_init(|| {
                let (events, resync) = compute();
                (f.clone(), events, resync)
            });
            if Arc::ptr_eq(g, f) || **g == **f {
                return (events.clone(), *resync);
            }
        }
        compute()
    }
}
