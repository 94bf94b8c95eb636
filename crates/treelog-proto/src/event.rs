//! Events and log records: the facts the writer decided.
//!
//! A command is what a caller asks; an event is what happened. Each event
//! carries everything needed to apply it to the index *and* what a consumer
//! needs without querying the store: ids, names, full paths at commit time,
//! the new attributes and, for updates, renames and deletes, the old ones.
//! The schema is documented in `docs/EVENTS.md`; its version is
//! [`EVENT_SCHEMA_VERSION`].

use serde::{Deserialize, Serialize};

use crate::types::{Attrs, AttrsRef};

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

/// A [`Record`] decoded without copying: its names, paths, owners and
/// groups borrow the log value's bytes. Replay's form: it reads millions
/// of records and keeps none, and four owned strings per event were about
/// a fifth of its reading thread.
///
/// These types mirror [`Record`], [`Event`], [`Update`] and
/// [`crate::types::Attrs`] field for field, variant for variant, so they
/// decode the same postcard bytes; `record::tests` hold the two together.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct RecordRef<'a> {
    pub seq: u64,
    pub time_ms: u64,
    #[serde(borrow)]
    pub events: Vec<EventRef<'a>>,
}

/// [`Update`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub struct UpdateRef<'a> {
    pub id: u64,
    pub parent: u64,
    pub name: &'a str,
    pub path: &'a str,
    #[serde(borrow)]
    pub old: AttrsRef<'a>,
    #[serde(borrow)]
    pub new: AttrsRef<'a>,
}

/// [`Event`], borrowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub enum EventRef<'a> {
    Create {
        id: u64,
        parent: u64,
        name: &'a str,
        path: &'a str,
        #[serde(borrow)]
        attrs: AttrsRef<'a>,
    },
    #[serde(borrow)]
    Complete(UpdateRef<'a>),
    #[serde(borrow)]
    SetSize(UpdateRef<'a>),
    #[serde(borrow)]
    SetAttr(UpdateRef<'a>),
    Delete {
        id: u64,
        parent: u64,
        name: &'a str,
        path: &'a str,
        #[serde(borrow)]
        attrs: AttrsRef<'a>,
    },
    Rename {
        id: u64,
        old_parent: u64,
        old_name: &'a str,
        old_path: &'a str,
        new_parent: u64,
        new_name: &'a str,
        new_path: &'a str,
        #[serde(borrow)]
        attrs: AttrsRef<'a>,
    },
}

impl Update {
    pub fn borrowed(&self) -> UpdateRef<'_> {
        UpdateRef {
            id: self.id,
            parent: self.parent,
            name: &self.name,
            path: &self.path,
            old: self.old.borrowed(),
            new: self.new.borrowed(),
        }
    }
}

impl Record {
    pub fn borrowed(&self) -> RecordRef<'_> {
        RecordRef {
            seq: self.seq,
            time_ms: self.time_ms,
            events: self.events.iter().map(Event::borrowed).collect(),
        }
    }
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

    pub fn borrowed(&self) -> EventRef<'_> {
        match self {
            Event::Create {
                id,
                parent,
                name,
                path,
                attrs,
            } => EventRef::Create {
                id: *id,
                parent: *parent,
                name,
                path,
                attrs: attrs.borrowed(),
            },
            Event::Complete(u) => EventRef::Complete(u.borrowed()),
            Event::SetSize(u) => EventRef::SetSize(u.borrowed()),
            Event::SetAttr(u) => EventRef::SetAttr(u.borrowed()),
            Event::Delete {
                id,
                parent,
                name,
                path,
                attrs,
            } => EventRef::Delete {
                id: *id,
                parent: *parent,
                name,
                path,
                attrs: attrs.borrowed(),
            },
            Event::Rename {
                id,
                old_parent,
                old_name,
                old_path,
                new_parent,
                new_name,
                new_path,
                attrs,
            } => EventRef::Rename {
                id: *id,
                old_parent: *old_parent,
                old_name,
                old_path,
                new_parent: *new_parent,
                new_name,
                new_path,
                attrs: attrs.borrowed(),
            },
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
