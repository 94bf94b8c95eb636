//! Events and log records: the facts the writer decided.
//!
//! A command is what a caller asks; an event is what happened. Each event
//! carries everything needed to apply it to the index *and* what a consumer
//! needs without querying the store: ids, names, full paths at commit time,
//! the new attributes and, for updates, renames and deletes, the old ones.
//! The schema is documented in `docs/EVENTS.md`; its version is
//! [`EVENT_SCHEMA_VERSION`]. Records written under schema 1 decode into
//! these types (`treelog_format::record`), with the fields schema 2 added
//! empty: no parent times (`None`), no quotas, `change_ms = mtime_ms`; the
//! index applies them by schema 1's rules, which those empty fields are.

use serde::{Deserialize, Serialize};

use crate::bytestr::ByteString;
use crate::types::{Attrs, AttrsRef, Bytes, Quota, Usage};

/// Version of the record/event schema written by this build. Schema 2
/// added the last five [`Event`] variants and the parent times and quota
/// fields of the others; schema 1 records keep decoding (see the module
/// documentation).
pub const EVENT_SCHEMA_VERSION: u8 = 2;

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
    pub name: ByteString,
    pub path: ByteString,
    pub old: Attrs,
    pub new: Attrs,
    /// The directories with a quota whose usage the change of size moves
    /// (by `new.size - old.size` bytes): the inode's ancestors that have
    /// one. Empty when the size did not change.
    pub quotas: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    /// A file or directory was created.
    Create {
        id: u64,
        parent: u64,
        name: ByteString,
        path: ByteString,
        attrs: Attrs,
        /// The parent's new modification and change time (the record's
        /// time); `None` in schema-1 records, which left the parent alone.
        parent_mtime_ms: Option<u64>,
        /// The ancestors with a quota, whose usage grows by this inode.
        quotas: Vec<u64>,
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
        name: ByteString,
        path: ByteString,
        attrs: Attrs,
        /// The parent's new modification and change time, when the parent
        /// stays (`None` for an inode whose parent the same record
        /// deletes, and in schema-1 records).
        parent_mtime_ms: Option<u64>,
        /// The ancestors with a quota, whose usage shrinks by this inode
        /// (those above the deleted subtree: the ones inside go with it).
        quotas: Vec<u64>,
    },
    /// An inode moved. For a directory, every descendant's path changed too
    /// (from `old_path/...` to `new_path/...`).
    Rename {
        id: u64,
        old_parent: u64,
        old_name: ByteString,
        old_path: ByteString,
        new_parent: u64,
        new_name: ByteString,
        new_path: ByteString,
        /// The inode's attributes after the move (its change time is the
        /// record's).
        attrs: Attrs,
        /// Both parents' new modification and change time; `None` in
        /// schema-1 records.
        parent_mtime_ms: Option<u64>,
        /// Quotas the moved subtree leaves (ancestors of the old place,
        /// not of the new), whose usage shrinks by `usage`.
        quotas_from: Vec<u64>,
        /// Quotas it enters, whose usage grows by `usage`.
        quotas_to: Vec<u64>,
        /// The moved inode and everything under it; zero when both lists
        /// are empty.
        usage: Usage,
    },
    /// A symbolic link was created (schema 2).
    Symlink {
        id: u64,
        parent: u64,
        name: ByteString,
        path: ByteString,
        target: ByteString,
        attrs: Attrs,
        parent_mtime_ms: u64,
        quotas: Vec<u64>,
    },
    /// An extended attribute was set (schema 2); the inode's change time
    /// becomes `change_ms`.
    SetXattr {
        id: u64,
        path: ByteString,
        name: String,
        value: Bytes,
        /// The value it replaced.
        old: Option<Bytes>,
        change_ms: u64,
    },
    /// An extended attribute was removed (schema 2).
    RemoveXattr {
        id: u64,
        path: ByteString,
        name: String,
        old: Bytes,
        change_ms: u64,
    },
    /// A directory's quota was set or changed (schema 2): its limits, and
    /// the usage of its subtree then (counted by the command, or kept from
    /// the quota it replaces).
    SetQuota {
        id: u64,
        path: ByteString,
        quota: Quota,
    },
    /// A directory's quota was removed (schema 2), with what it was.
    ClearQuota {
        id: u64,
        path: ByteString,
        old: Quota,
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
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordRef<'a> {
    pub seq: u64,
    pub time_ms: u64,
    #[serde(borrow)]
    pub events: Vec<EventRef<'a>>,
}

/// [`Update`], borrowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateRef<'a> {
    pub id: u64,
    pub parent: u64,
    pub name: &'a [u8],
    pub path: &'a [u8],
    #[serde(borrow)]
    pub old: AttrsRef<'a>,
    #[serde(borrow)]
    pub new: AttrsRef<'a>,
    pub quotas: Vec<u64>,
}

/// [`Event`], borrowed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventRef<'a> {
    Create {
        id: u64,
        parent: u64,
        name: &'a [u8],
        path: &'a [u8],
        #[serde(borrow)]
        attrs: AttrsRef<'a>,
        parent_mtime_ms: Option<u64>,
        quotas: Vec<u64>,
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
        name: &'a [u8],
        path: &'a [u8],
        #[serde(borrow)]
        attrs: AttrsRef<'a>,
        parent_mtime_ms: Option<u64>,
        quotas: Vec<u64>,
    },
    Rename {
        id: u64,
        old_parent: u64,
        old_name: &'a [u8],
        old_path: &'a [u8],
        new_parent: u64,
        new_name: &'a [u8],
        new_path: &'a [u8],
        #[serde(borrow)]
        attrs: AttrsRef<'a>,
        parent_mtime_ms: Option<u64>,
        quotas_from: Vec<u64>,
        quotas_to: Vec<u64>,
        usage: Usage,
    },
    Symlink {
        id: u64,
        parent: u64,
        name: &'a [u8],
        path: &'a [u8],
        target: &'a [u8],
        #[serde(borrow)]
        attrs: AttrsRef<'a>,
        parent_mtime_ms: u64,
        quotas: Vec<u64>,
    },
    SetXattr {
        id: u64,
        path: &'a [u8],
        name: &'a str,
        value: &'a [u8],
        old: Option<&'a [u8]>,
        change_ms: u64,
    },
    RemoveXattr {
        id: u64,
        path: &'a [u8],
        name: &'a str,
        old: &'a [u8],
        change_ms: u64,
    },
    SetQuota {
        id: u64,
        path: &'a [u8],
        quota: Quota,
    },
    ClearQuota {
        id: u64,
        path: &'a [u8],
        old: Quota,
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
            quotas: self.quotas.clone(),
        }
    }
}

impl UpdateRef<'_> {
    pub fn to_owned(&self) -> Update {
        Update {
            id: self.id,
            parent: self.parent,
            name: self.name.into(),
            path: self.path.into(),
            old: self.old.to_owned(),
            new: self.new.to_owned(),
            quotas: self.quotas.clone(),
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

impl RecordRef<'_> {
    pub fn to_owned(&self) -> Record {
        Record {
            seq: self.seq,
            time_ms: self.time_ms,
            events: self.events.iter().map(EventRef::to_owned).collect(),
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
    Symlink,
    SetXattr,
    RemoveXattr,
    SetQuota,
    ClearQuota,
}

impl EventKind {
    /// Every kind, in order.
    pub const ALL: [EventKind; 11] = [
        EventKind::Create,
        EventKind::Complete,
        EventKind::SetSize,
        EventKind::SetAttr,
        EventKind::Delete,
        EventKind::Rename,
        EventKind::Symlink,
        EventKind::SetXattr,
        EventKind::RemoveXattr,
        EventKind::SetQuota,
        EventKind::ClearQuota,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Create => "create",
            EventKind::Complete => "complete",
            EventKind::SetSize => "set_size",
            EventKind::SetAttr => "set_attr",
            EventKind::Delete => "delete",
            EventKind::Rename => "rename",
            EventKind::Symlink => "symlink",
            EventKind::SetXattr => "set_xattr",
            EventKind::RemoveXattr => "remove_xattr",
            EventKind::SetQuota => "set_quota",
            EventKind::ClearQuota => "clear_quota",
        }
    }

    /// The kind named `s` (as [`EventKind::as_str`] writes it).
    pub fn parse(s: &str) -> Option<EventKind> {
        EventKind::ALL.into_iter().find(|k| k.as_str() == s)
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
            Event::Symlink { .. } => EventKind::Symlink,
            Event::SetXattr { .. } => EventKind::SetXattr,
            Event::RemoveXattr { .. } => EventKind::RemoveXattr,
            Event::SetQuota { .. } => EventKind::SetQuota,
            Event::ClearQuota { .. } => EventKind::ClearQuota,
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
                parent_mtime_ms,
                quotas,
            } => EventRef::Create {
                id: *id,
                parent: *parent,
                name,
                path,
                attrs: attrs.borrowed(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas: quotas.clone(),
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
                parent_mtime_ms,
                quotas,
            } => EventRef::Delete {
                id: *id,
                parent: *parent,
                name,
                path,
                attrs: attrs.borrowed(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas: quotas.clone(),
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
                parent_mtime_ms,
                quotas_from,
                quotas_to,
                usage,
            } => EventRef::Rename {
                id: *id,
                old_parent: *old_parent,
                old_name,
                old_path,
                new_parent: *new_parent,
                new_name,
                new_path,
                attrs: attrs.borrowed(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas_from: quotas_from.clone(),
                quotas_to: quotas_to.clone(),
                usage: *usage,
            },
            Event::Symlink {
                id,
                parent,
                name,
                path,
                target,
                attrs,
                parent_mtime_ms,
                quotas,
            } => EventRef::Symlink {
                id: *id,
                parent: *parent,
                name,
                path,
                target,
                attrs: attrs.borrowed(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas: quotas.clone(),
            },
            Event::SetXattr {
                id,
                path,
                name,
                value,
                old,
                change_ms,
            } => EventRef::SetXattr {
                id: *id,
                path,
                name,
                value,
                old: old.as_deref(),
                change_ms: *change_ms,
            },
            Event::RemoveXattr {
                id,
                path,
                name,
                old,
                change_ms,
            } => EventRef::RemoveXattr {
                id: *id,
                path,
                name,
                old,
                change_ms: *change_ms,
            },
            Event::SetQuota { id, path, quota } => EventRef::SetQuota {
                id: *id,
                path,
                quota: *quota,
            },
            Event::ClearQuota { id, path, old } => EventRef::ClearQuota {
                id: *id,
                path,
                old: *old,
            },
        }
    }

    /// The inode the event is about.
    pub fn id(&self) -> u64 {
        match self {
            Event::Create { id, .. }
            | Event::Delete { id, .. }
            | Event::Rename { id, .. }
            | Event::Symlink { id, .. }
            | Event::SetXattr { id, .. }
            | Event::RemoveXattr { id, .. }
            | Event::SetQuota { id, .. }
            | Event::ClearQuota { id, .. } => *id,
            Event::Complete(u) | Event::SetSize(u) | Event::SetAttr(u) => u.id,
        }
    }

    /// The path of the inode the event is about (after a rename, the new
    /// one).
    pub fn path(&self) -> &ByteString {
        match self {
            Event::Create { path, .. }
            | Event::Delete { path, .. }
            | Event::Symlink { path, .. }
            | Event::SetXattr { path, .. }
            | Event::RemoveXattr { path, .. }
            | Event::SetQuota { path, .. }
            | Event::ClearQuota { path, .. } => path,
            Event::Complete(u) | Event::SetSize(u) | Event::SetAttr(u) => &u.path,
            Event::Rename { new_path, .. } => new_path,
        }
    }
}

impl EventRef<'_> {
    pub fn to_owned(&self) -> Event {
        match self {
            EventRef::Create {
                id,
                parent,
                name,
                path,
                attrs,
                parent_mtime_ms,
                quotas,
            } => Event::Create {
                id: *id,
                parent: *parent,
                name: (*name).to_owned().into(),
                path: (*path).to_owned().into(),
                attrs: attrs.to_owned(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas: quotas.clone(),
            },
            EventRef::Complete(u) => Event::Complete(u.to_owned()),
            EventRef::SetSize(u) => Event::SetSize(u.to_owned()),
            EventRef::SetAttr(u) => Event::SetAttr(u.to_owned()),
            EventRef::Delete {
                id,
                parent,
                name,
                path,
                attrs,
                parent_mtime_ms,
                quotas,
            } => Event::Delete {
                id: *id,
                parent: *parent,
                name: (*name).to_owned().into(),
                path: (*path).to_owned().into(),
                attrs: attrs.to_owned(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas: quotas.clone(),
            },
            EventRef::Rename {
                id,
                old_parent,
                old_name,
                old_path,
                new_parent,
                new_name,
                new_path,
                attrs,
                parent_mtime_ms,
                quotas_from,
                quotas_to,
                usage,
            } => Event::Rename {
                id: *id,
                old_parent: *old_parent,
                old_name: (*old_name).to_owned().into(),
                old_path: (*old_path).to_owned().into(),
                new_parent: *new_parent,
                new_name: (*new_name).to_owned().into(),
                new_path: (*new_path).to_owned().into(),
                attrs: attrs.to_owned(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas_from: quotas_from.clone(),
                quotas_to: quotas_to.clone(),
                usage: *usage,
            },
            EventRef::Symlink {
                id,
                parent,
                name,
                path,
                target,
                attrs,
                parent_mtime_ms,
                quotas,
            } => Event::Symlink {
                id: *id,
                parent: *parent,
                name: (*name).to_owned().into(),
                path: (*path).to_owned().into(),
                target: (*target).to_owned().into(),
                attrs: attrs.to_owned(),
                parent_mtime_ms: *parent_mtime_ms,
                quotas: quotas.clone(),
            },
            EventRef::SetXattr {
                id,
                path,
                name,
                value,
                old,
                change_ms,
            } => Event::SetXattr {
                id: *id,
                path: (*path).to_owned().into(),
                name: (*name).to_owned(),
                value: Bytes(value.to_vec()),
                old: old.map(|o| Bytes(o.to_vec())),
                change_ms: *change_ms,
            },
            EventRef::RemoveXattr {
                id,
                path,
                name,
                old,
                change_ms,
            } => Event::RemoveXattr {
                id: *id,
                path: (*path).to_owned().into(),
                name: (*name).to_owned(),
                old: Bytes(old.to_vec()),
                change_ms: *change_ms,
            },
            EventRef::SetQuota { id, path, quota } => Event::SetQuota {
                id: *id,
                path: (*path).to_owned().into(),
                quota: *quota,
            },
            EventRef::ClearQuota { id, path, old } => Event::ClearQuota {
                id: *id,
                path: (*path).to_owned().into(),
                old: *old,
            },
        }
    }
}
