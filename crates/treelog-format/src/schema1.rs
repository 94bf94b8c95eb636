//! Event schema 1: the records format-1 builds wrote (envelope byte 1 =
//! 1). They decode forever: into these types, which mirror schema 1 field
//! for field and variant for variant (postcard numbers fields and
//! variants by position), then into today's [`crate::event`] types with
//! the fields schema 2 added left empty: no parent times, no quotas,
//! `change_ms = mtime_ms`. Applied with those empty fields, a record does
//! exactly what schema 1's rules did (the index gains the change time only).
//!
//! The types serialize too, so that tests and benchmarks can write a
//! database as format-1 code did.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::event::{EventRef, RecordRef, UpdateRef};
use crate::types::{AttrsRef, FileType};

/// Schema 1's `Record`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordV1<'a> {
    pub seq: u64,
    pub time_ms: u64,
    #[serde(borrow)]
    pub events: Vec<EventV1<'a>>,
}

/// Schema 1's `Attrs`: no change time; `kind` a file or a directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttrsV1<'a> {
    pub kind: FileType,
    pub size: u64,
    pub block_size: u64,
    pub ctime_ms: u64,
    pub mtime_ms: u64,
    pub mode: u32,
    pub complete: bool,
    pub owner: &'a str,
    pub group: &'a str,
}

/// Schema 1's `Update`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UpdateV1<'a> {
    pub id: u64,
    pub parent: u64,
    pub name: &'a str,
    pub path: &'a str,
    #[serde(borrow)]
    pub old: AttrsV1<'a>,
    #[serde(borrow)]
    pub new: AttrsV1<'a>,
}

/// Schema 1's `Event`: six variants.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventV1<'a> {
    Create {
        id: u64,
        parent: u64,
        name: &'a str,
        path: &'a str,
        #[serde(borrow)]
        attrs: AttrsV1<'a>,
    },
    #[serde(borrow)]
    Complete(UpdateV1<'a>),
    #[serde(borrow)]
    SetSize(UpdateV1<'a>),
    #[serde(borrow)]
    SetAttr(UpdateV1<'a>),
    Delete {
        id: u64,
        parent: u64,
        name: &'a str,
        path: &'a str,
        #[serde(borrow)]
        attrs: AttrsV1<'a>,
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
        attrs: AttrsV1<'a>,
    },
}

fn attrs<'a>(a: &AttrsV1<'a>) -> Result<AttrsRef<'a>> {
    if a.kind.is_symlink() {
        return Err(Error::corrupt(
            "log record",
            "a schema-1 record names a symbolic link (schema 1 had none)",
        ));
    }
    Ok(AttrsRef {
        kind: a.kind,
        size: a.size,
        block_size: a.block_size,
        ctime_ms: a.ctime_ms,
        mtime_ms: a.mtime_ms,
        change_ms: a.mtime_ms,
        mode: a.mode,
        complete: a.complete,
        owner: a.owner,
        group: a.group,
    })
}

fn update<'a>(u: &UpdateV1<'a>) -> Result<UpdateRef<'a>> {
    Ok(UpdateRef {
        id: u.id,
        parent: u.parent,
        name: u.name.as_bytes(),
        path: u.path.as_bytes(),
        old: attrs(&u.old)?,
        new: attrs(&u.new)?,
        quotas: Vec::new(),
    })
}

impl<'a> EventV1<'a> {
    /// The event as today's types hold it (see the module documentation).
    pub fn upgrade(&self) -> Result<EventRef<'a>> {
        Ok(match self {
            EventV1::Create {
                id,
                parent,
                name,
                path,
                attrs: a,
            } => EventRef::Create {
                id: *id,
                parent: *parent,
                name: name.as_bytes(),
                path: path.as_bytes(),
                attrs: attrs(a)?,
                parent_mtime_ms: None,
                quotas: Vec::new(),
            },
            EventV1::Complete(u) => EventRef::Complete(update(u)?),
            EventV1::SetSize(u) => EventRef::SetSize(update(u)?),
            EventV1::SetAttr(u) => EventRef::SetAttr(update(u)?),
            EventV1::Delete {
                id,
                parent,
                name,
                path,
                attrs: a,
            } => EventRef::Delete {
                id: *id,
                parent: *parent,
                name: name.as_bytes(),
                path: path.as_bytes(),
                attrs: attrs(a)?,
                parent_mtime_ms: None,
                quotas: Vec::new(),
            },
            EventV1::Rename {
                id,
                old_parent,
                old_name,
                old_path,
                new_parent,
                new_name,
                new_path,
                attrs: a,
            } => EventRef::Rename {
                id: *id,
                old_parent: *old_parent,
                old_name: old_name.as_bytes(),
                old_path: old_path.as_bytes(),
                new_parent: *new_parent,
                new_name: new_name.as_bytes(),
                new_path: new_path.as_bytes(),
                attrs: attrs(a)?,
                parent_mtime_ms: None,
                quotas_from: Vec::new(),
                quotas_to: Vec::new(),
                usage: Default::default(),
            },
        })
    }
}

impl<'a> RecordV1<'a> {
    pub fn upgrade(&self) -> Result<RecordRef<'a>> {
        Ok(RecordRef {
            seq: self.seq,
            time_ms: self.time_ms,
            events: self
                .events
                .iter()
                .map(EventV1::upgrade)
                .collect::<Result<_>>()?,
        })
    }
}
