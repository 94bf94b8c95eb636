//! Events and log records: the facts the writer decided.
//!
//! A command is what a caller asks; an event is what happened. Each event
//! carries everything needed to apply it to the index *and* what a consumer
//! needs without querying the store: ids, names, full paths at commit time,
//! the new attributes and, for updates, renames and deletes, the old ones.
//! The schema is documented in `docs/EVENTS.md`; its version is
//! [`EVENT_SCHEMA_VERSION`].

use serde::{Deserialize, Serialize};

use crate::types::Attrs;

/// Version of the record/event schema written by this build.
pub const EVENT_SCHEMA_VERSION: u8 = 1;

/// One committed command: its sequence number, commit time and events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    pub seq: u64,
    /// Commit time, milliseconds since the Unix epoch. Never decreases along
    /// the log. Every time in the record's events was taken from it.
    pub time_ms: u64,
    pub events: Vec<Event>,
}

/// An attribute change of one inode (complete, set size, set attributes).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    pub id: u64,
    pub parent: u64,
    pub name: String,
    pub path: String,
    pub old: Attrs,
    pub new: Attrs,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A file or directory was created.
    Create {
        id: u64,
        parent: u64,
        name: String,
        path: String,
        attrs: Attrs,
    },
    /// A file was completed with its final size.
    Complete(Update),
    /// A file's size changed.
    SetSize(Update),
    /// Mode, owner, group or modification time changed.
    SetAttr(Update),
    /// An inode was removed. A recursive delete emits one event per inode,
    /// children before their parent; a rename that replaces its destination
    /// emits one for the replaced inode before the `Rename`.
    Delete {
        id: u64,
        parent: u64,
        name: String,
        path: String,
        attrs: Attrs,
    },
    /// An inode moved. For a directory, every descendant's path changed too
    /// (from `old_path/...` to `new_path/...`).
    Rename {
        id: u64,
        old_parent: u64,
        old_name: String,
        old_path: String,
        new_parent: u64,
        new_name: String,
        new_path: String,
        attrs: Attrs,
    },
}

/// The kind of an event, for filters and metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EventKind {
    Create,
    Complete,
    SetSize,
    SetAttr,
    Delete,
    Rename,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Create => "create",
            EventKind::Complete => "complete",
            EventKind::SetSize => "set_size",
            EventKind::SetAttr => "set_attr",
            EventKind::Delete => "delete",
            EventKind::Rename => "rename",
        }
    }
}

impl Event {
    pub fn kind(&self) -> EventKind {
        match self {
            Event::Create { .. } => EventKind::Create,
            Event::Complete(_) => EventKind::Complete,
            Event::SetSize(_) => EventKind::SetSize,
            Event::SetAttr(_) => EventKind::SetAttr,
            Event::Delete { .. } => EventKind::Delete,
            Event::Rename { .. } => EventKind::Rename,
        }
    }

    /// The inode the event is about.
    pub fn id(&self) -> u64 {
        match self {
            Event::Create { id, .. } | Event::Delete { id, .. } | Event::Rename { id, .. } => *id,
            Event::Complete(u) | Event::SetSize(u) | Event::SetAttr(u) => u.id,
        }
    }
}

/// A record whose events are shared (reference counted): the form kept in
/// the tail cache and filtered by subscribers, so that a hundred
/// subscribers do not copy every event a hundred times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedRecord {
    pub seq: u64,
    pub time_ms: u64,
    pub events: Vec<std::sync::Arc<Event>>,
    /// The events as an unfiltered subscriber receives them, built by the
    /// first such subscriber and shared by all the others (one reference
    /// count per delivery instead of a vector and a count per event).
    pub unfiltered: std::sync::OnceLock<std::sync::Arc<[crate::stream::ScopedEvent]>>,
    /// The events as subscribers with a filter receive them, built by the
    /// first subscriber with each filter and shared by those with an equal
    /// one (see [`crate::stream::FilterMemo`]).
    pub filtered: crate::stream::FilterMemo,
}

impl SharedRecord {
    /// Every event, scoped [`crate::stream::Scope::Inside`].
    pub fn unfiltered(&self) -> std::sync::Arc<[crate::stream::ScopedEvent]> {
        self.unfiltered
            .get_or_init(|| {
                self.events
                    .iter()
                    .map(|e| crate::stream::ScopedEvent {
                        scope: crate::stream::Scope::Inside,
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
            events: r.events.into_iter().map(std::sync::Arc::new).collect(),
            unfiltered: Default::default(),
            filtered: Default::default(),
        }
    }
}
