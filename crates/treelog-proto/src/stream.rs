//! The change stream's vocabulary: where a subscription starts, its filter,
//! the items it delivers, and the rename-aware subtree filter itself
//! ([`filter_events`]), which a consumer outside the server can apply to
//! records it reads elsewhere. The subscriptions live in the `treelog`
//! library (`docs/STREAMS.md`).

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::bytestr::ByteString;
use crate::error::Result;
use crate::event::{Event, EventKind};
use crate::path;
use crate::types::Inode;

/// Where a subscription starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum StartFrom {
    /// The record with this sequence number (resume: last processed + 1).
    Seq(u64),
    /// The next record committed after subscribing.
    Now,
    /// A consistent snapshot of the (filtered) subtree at some sequence `S`,
    /// then the records from `S + 1`.
    Snapshot,
}

/// Which events a subscription receives.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    /// Only events inside this subtree (and the moves and ancestor changes
    /// that affect it). `None` or `/`: everything.
    pub prefix: Option<ByteString>,
    /// Only these kinds. `None`: all kinds.
    pub kinds: Option<Vec<EventKind>>,
}

impl Filter {
    /// Whether every event passes unchanged (scoped `Inside`).
    pub fn is_everything(&self) -> bool {
        self.prefix.is_none() && self.kinds.is_none()
    }

    pub fn canonical(&self) -> Result<Filter> {
        let prefix = match &self.prefix {
            Some(p) => {
                let c = path::canonical(p)?;
                (c != "/").then_some(c)
            }
            None => None,
        };
        // Sorted and deduplicated, so that equal filters compare equal
        // (and share their filtered events, see `FilterMemo`).
        let kinds = self.kinds.clone().map(|mut ks| {
            ks.sort_by_key(|k| *k as u8);
            ks.dedup();
            ks
        });
        Ok(Filter { prefix, kinds })
    }

    fn kind_ok(&self, k: EventKind) -> bool {
        self.kinds.as_ref().is_none_or(|ks| ks.contains(&k))
    }
}

/// Options of [`crate::Treelog::subscribe`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscribeOptions {
    pub from: StartFrom,
    pub filter: Filter,
    /// A durable named cursor: when it exists, the subscription resumes after
    /// its acknowledged position (and `from` is ignored); when it does not,
    /// it is created at the position `from` designates.
    pub cursor: Option<String>,
    /// Resync (re-snapshot) when a directory moves into the filtered subtree.
    /// Defaults to true when `from` is `Snapshot`.
    pub resync_on_move_in: Option<bool>,
}

impl Default for SubscribeOptions {
    fn default() -> Self {
        SubscribeOptions {
            from: StartFrom::Now,
            filter: Filter::default(),
            cursor: None,
            resync_on_move_in: None,
        }
    }
}

/// How an event relates to the subscription's subtree.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Scope {
    /// The event happened inside the subtree (or there is no filter).
    Inside,
    /// A rename brought the inode into the subtree from outside.
    MoveIn,
    /// A rename took the inode (and its descendants) out of the subtree.
    MoveOut,
    /// An ancestor of the subtree root was deleted or renamed: the subtree
    /// as the subscriber knew it is gone (or replaced).
    Ancestor,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopedEvent {
    pub scope: Scope,
    /// Shared with the tail cache and other subscribers (serialised as the
    /// plain event).
    pub event: Arc<Event>,
}

/// One item of a change stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamItem {
    /// A consistent snapshot at `seq` begins. With `resync`, the subscriber
    /// replaces its model of the subtree with the snapshot.
    SnapshotStart {
        seq: u64,
        prefix: ByteString,
        resync: bool,
    },
    /// One inode of the snapshot; parents come before their children.
    /// (Boxed: it is by far the largest variant, and items are moved
    /// several times on their way to every subscriber.)
    SnapshotEntry { path: ByteString, inode: Box<Inode> },
    /// The snapshot is complete; records from `seq + 1` follow.
    SnapshotEnd { seq: u64 },
    /// A committed record, with the events that pass the filter.
    Record {
        seq: u64,
        time_ms: u64,
        /// Shared between the subscribers that receive the same events.
        events: Arc<[ScopedEvent]>,
    },
    /// Records up to `seq` were read and none passed the filter: a position
    /// to acknowledge.
    Progress { seq: u64 },
}

impl StreamItem {
    /// The sequence number after which the stream can resume once this item
    /// has been processed, if the item completes a position.
    pub fn position(&self) -> Option<u64> {
        match self {
            StreamItem::Record { seq, .. }
            | StreamItem::Progress { seq }
            | StreamItem::SnapshotEnd { seq } => Some(*seq),
            _ => None,
        }
    }
}

/// Applies the filter to one record. Returns the delivered events and
/// whether a resync is needed (a directory moved into the subtree, or the
/// subtree root was re-rooted under a moved directory).
pub fn filter_events(events: &[Arc<Event>], f: &Filter) -> (Vec<ScopedEvent>, bool) {
    let mut out = Vec::new();
    let mut resync = false;
    for ev in events {
        let scope = match (&f.prefix, &**ev) {
            (None, _) => Some(Scope::Inside),
            (
                Some(p),
                Event::Rename {
                    old_path,
                    new_path,
                    attrs,
                    ..
                },
            ) => {
                let oi = path::is_within(old_path, p);
                let ni = path::is_within(new_path, p);
                match (oi, ni) {
                    (true, true) => Some(Scope::Inside),
                    (false, true) => {
                        if attrs.kind.is_dir() {
                            resync = true;
                        }
                        Some(Scope::MoveIn)
                    }
                    (true, false) => Some(Scope::MoveOut),
                    (false, false) => {
                        if path::is_within(p, old_path) {
                            Some(Scope::Ancestor)
                        } else if path::is_within(p, new_path) {
                            // Something became an ancestor of the subtree root:
                            // its contents now appear under the prefix.
                            resync = true;
                            Some(Scope::Ancestor)
                        } else {
                            None
                        }
                    }
                }
            }
            (Some(p), ev) => {
                let ep = ev.path();
                if path::is_within(ep, p) {
                    Some(Scope::Inside)
                } else if matches!(ev, Event::Delete { .. }) && path::is_within(p, ep) {
                    Some(Scope::Ancestor)
                } else {
                    None
                }
            }
        };
        if let Some(scope) = scope {
            if f.kind_ok(ev.kind()) {
                out.push(ScopedEvent {
                    scope,
                    event: ev.clone(),
                });
            }
        }
    }
    (out, resync)
}
