//! Protocol 1, still served (docs/PROTOCOL.md, "Protocol 1, still
//! served"): the messages of the protocol before event schema 2 where they
//! differ from the current ones, and the translation of a connection that
//! speaks it. Postcard is positional: the variant order of every enum and
//! the field order of every struct below are protocol 1's format, frozen.
//!
//! Requests translate without loss (protocol 1's are a subset of today's).
//! Replies lose what protocol 1 has no field for (`change_ms`, quota ids,
//! parents' times); a reply protocol 1 cannot express at all (a symbolic
//! link, a Raft follower's role) becomes an `Incompatible` error, and
//! stream events about extended attributes and quotas, which are not part
//! of protocol 1's namespace, are left out of the records it is sent.

use serde::{Deserialize, Serialize};

use crate::bytestr::ByteString;
use crate::command::Command as Current;
use crate::cursor::CursorInfo;
use crate::error::{Error, Result};
use crate::event::{Event as CurrentEvent, Update as CurrentUpdate};
use crate::protocol::{self, Hello, NodeStatus as CurrentStatus, ReplicateFrom};
use crate::read::ReadAt as CurrentReadAt;
use crate::stream::{self as cur, Scope, StartFrom};
use crate::types;

/// The version a protocol-1 `Hello` and `Welcome` carry.
pub const VERSION: u16 = 1;

/// The error kinds of protocol 1 (today's first 22).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorKind {
    NotFound,
    AlreadyExists,
    NotADirectory,
    IsADirectory,
    NotEmpty,
    InvalidName,
    InvalidPath,
    InvalidArgument,
    DictionaryFull,
    NotLeader,
    Compacted,
    CursorExpired,
    Corruption,
    Incompatible,
    WriterStopped,
    ShuttingDown,
    Protocol,
    Unauthorized,
    Busy,
    Io,
    OutcomeUnknown,
    Lagging,
}

impl ErrorKind {
    /// The protocol-1 kind nearest to `k`: a quota's refusal was an
    /// invalid argument (nothing written, not worth retrying), a role's
    /// refusal an unauthorized request.
    pub fn from_current(k: crate::ErrorKind) -> ErrorKind {
        use crate::ErrorKind as K;
        match k {
            K::NotFound => ErrorKind::NotFound,
            K::AlreadyExists => ErrorKind::AlreadyExists,
            K::NotADirectory => ErrorKind::NotADirectory,
            K::IsADirectory => ErrorKind::IsADirectory,
            K::NotEmpty => ErrorKind::NotEmpty,
            K::InvalidName => ErrorKind::InvalidName,
            K::InvalidPath => ErrorKind::InvalidPath,
            K::InvalidArgument | K::QuotaExceeded => ErrorKind::InvalidArgument,
            K::DictionaryFull => ErrorKind::DictionaryFull,
            K::NotLeader => ErrorKind::NotLeader,
            K::Compacted => ErrorKind::Compacted,
            K::CursorExpired => ErrorKind::CursorExpired,
            K::Corruption => ErrorKind::Corruption,
            K::Incompatible => ErrorKind::Incompatible,
            K::WriterStopped => ErrorKind::WriterStopped,
            K::ShuttingDown => ErrorKind::ShuttingDown,
            K::Protocol => ErrorKind::Protocol,
            K::Unauthorized | K::PermissionDenied | K::NotPermitted => ErrorKind::Unauthorized,
            // A client's own deadline is never a server's reply; were it
            // one, nothing was applied: retry later, as Busy says.
            K::Busy | K::DeadlineExceeded => ErrorKind::Busy,
            K::Io => ErrorKind::Io,
            K::OutcomeUnknown => ErrorKind::OutcomeUnknown,
            K::Lagging => ErrorKind::Lagging,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum FileType {
    File,
    Directory,
}

/// Protocol 1's attributes: no `change_ms`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Attrs {
    pub kind: FileType,
    pub size: u64,
    pub block_size: u64,
    pub ctime_ms: u64,
    pub mtime_ms: u64,
    pub mode: u32,
    pub complete: bool,
    pub owner: String,
    pub group: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Inode {
    pub id: u64,
    pub parent: u64,
    pub name: String,
    pub attrs: Attrs,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirEntry {
    pub name: String,
    pub inode: Inode,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ListPage {
    pub entries: Vec<DirEntry>,
    pub next_start_after: Option<String>,
}

/// Protocol 1's commands: today's first seven, unchanged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Command {
    Mkdir {
        path: String,
        parents: bool,
        mode: u32,
        owner: String,
        group: String,
    },
    Create {
        path: String,
        parents: bool,
        mode: u32,
        owner: String,
        group: String,
        block_size: u64,
    },
    Complete {
        path: String,
        size: u64,
    },
    SetSize {
        path: String,
        size: u64,
    },
    SetAttr {
        path: String,
        mode: Option<u32>,
        owner: Option<String>,
        group: Option<String>,
        mtime_ms: Option<u64>,
    },
    Delete {
        path: String,
        recursive: bool,
    },
    Rename {
        src: String,
        dst: String,
        overwrite: bool,
    },
}

/// No `Linearizable` (it came with Raft).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ReadAt {
    Latest,
    AtLeast(u64),
    Exactly(u64),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum EventKind {
    Create,
    Complete,
    SetSize,
    SetAttr,
    Delete,
    Rename,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Filter {
    pub prefix: Option<String>,
    pub kinds: Option<Vec<EventKind>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SubscribeOptions {
    pub from: StartFrom,
    pub filter: Filter,
    pub cursor: Option<String>,
    pub resync_on_move_in: Option<bool>,
}

/// Protocol 1's requests: today's first twenty-three.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum RequestBody {
    Mutate(Command),
    Stat {
        path: String,
    },
    StatId {
        id: u64,
    },
    List {
        path: String,
        start_after: Option<String>,
        limit: u32,
    },
    Subscribe(SubscribeOptions),
    Cancel {
        target: u64,
    },
    Ack {
        cursor: String,
        seq: u64,
    },
    ListCursors,
    DropCursor {
        cursor: String,
    },
    WaitFor {
        seq: u64,
        timeout_ms: u64,
    },
    Ping,
    Info,
    StatAt {
        path: String,
        at: ReadAt,
    },
    StatIdAt {
        id: u64,
        at: ReadAt,
    },
    ListAt {
        path: String,
        start_after: Option<String>,
        limit: u32,
        at: ReadAt,
    },
    PinView,
    UnpinView {
        seq: u64,
    },
    BackupBegin {
        resume: Option<u64>,
    },
    BackupChunk {
        id: u64,
        file: String,
        offset: u64,
        len: u32,
    },
    BackupEnd {
        id: u64,
    },
    Replicate(ReplicateFrom),
    Status,
    SubscribeAt {
        opts: SubscribeOptions,
        min_seq: u64,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ClientMsg {
    Hello(Hello),
    Request { id: u64, body: RequestBody },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Update {
    pub id: u64,
    pub parent: u64,
    pub name: String,
    pub path: String,
    pub old: Attrs,
    pub new: Attrs,
}

/// Event schema 1's events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Event {
    Create {
        id: u64,
        parent: u64,
        name: String,
        path: String,
        attrs: Attrs,
    },
    Complete(Update),
    SetSize(Update),
    SetAttr(Update),
    Delete {
        id: u64,
        parent: u64,
        name: String,
        path: String,
        attrs: Attrs,
    },
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

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ScopedEvent {
    pub scope: Scope,
    pub event: Event,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum StreamItem {
    SnapshotStart {
        seq: u64,
        prefix: String,
        resync: bool,
    },
    SnapshotEntry {
        path: String,
        inode: Box<Inode>,
    },
    SnapshotEnd {
        seq: u64,
    },
    Record {
        seq: u64,
        time_ms: u64,
        events: Vec<ScopedEvent>,
    },
    Progress {
        seq: u64,
    },
}

/// No `Follower` (it came with Raft).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    Leader,
    Replica,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    pub role: Role,
    pub leader: Option<String>,
    pub namespace: String,
    pub applied_seq: u64,
    pub leader_committed_seq: u64,
    pub lag_records: u64,
    pub lag_ms: u64,
    pub connected: bool,
    pub log_start: u64,
    pub log_bytes: u64,
}

/// Protocol 1's replies: today's first seventeen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ResponseBody {
    Seq(u64),
    Inode(Inode),
    Page(ListPage),
    Item(StreamItem),
    Cursors(Vec<CursorInfo>),
    Done,
    StreamEnd,
    Error {
        kind: ErrorKind,
        message: String,
    },
    Info {
        committed_seq: u64,
        log_start: u64,
        log_bytes: u64,
    },
    InodeAt {
        inode: Inode,
        seq: u64,
    },
    PageAt {
        page: ListPage,
        seq: u64,
    },
    Backup {
        id: u64,
        manifest: Vec<u8>,
    },
    Chunk {
        offset: u64,
        data: Vec<u8>,
        crc32c: u32,
    },
    Records {
        first: u64,
        records: Vec<Vec<u8>>,
        committed: u64,
        now_ms: u64,
    },
    Status(NodeStatus),
    NotLeader {
        leader: Option<String>,
        message: String,
    },
    Lagging {
        applied: u64,
        wanted: u64,
        waited_ms: u64,
        leader: Option<String>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerMsg {
    Welcome {
        version: u16,
        server: String,
        committed_seq: u64,
        max_frame: u32,
    },
    Response {
        id: u64,
        body: ResponseBody,
    },
    Fatal {
        kind: ErrorKind,
        message: String,
    },
}

// ---- requests: protocol 1 → current (never fails) ----

impl From<Command> for Current {
    fn from(c: Command) -> Current {
        match c {
            Command::Mkdir {
                path,
                parents,
                mode,
                owner,
                group,
            } => Current::Mkdir {
                path: path.into(),
                parents,
                mode,
                owner,
                group,
            },
            Command::Create {
                path,
                parents,
                mode,
                owner,
                group,
                block_size,
            } => Current::Create {
                path: path.into(),
                parents,
                mode,
                owner,
                group,
                block_size,
            },
            Command::Complete { path, size } => Current::Complete {
                path: path.into(),
                size,
            },
            Command::SetSize { path, size } => Current::SetSize {
                path: path.into(),
                size,
            },
            Command::SetAttr {
                path,
                mode,
                owner,
                group,
                mtime_ms,
            } => Current::SetAttr {
                path: path.into(),
                mode,
                owner,
                group,
                mtime_ms,
            },
            Command::Delete { path, recursive } => Current::Delete {
                path: path.into(),
                recursive,
            },
            Command::Rename {
                src,
                dst,
                overwrite,
            } => Current::Rename {
                src: src.into(),
                dst: dst.into(),
                overwrite,
            },
        }
    }
}

impl From<ReadAt> for CurrentReadAt {
    fn from(a: ReadAt) -> CurrentReadAt {
        match a {
            ReadAt::Latest => CurrentReadAt::Latest,
            ReadAt::AtLeast(s) => CurrentReadAt::AtLeast(s),
            ReadAt::Exactly(s) => CurrentReadAt::Exactly(s),
        }
    }
}

impl From<EventKind> for crate::EventKind {
    fn from(k: EventKind) -> crate::EventKind {
        use crate::EventKind as K;
        match k {
            EventKind::Create => K::Create,
            EventKind::Complete => K::Complete,
            EventKind::SetSize => K::SetSize,
            EventKind::SetAttr => K::SetAttr,
            EventKind::Delete => K::Delete,
            EventKind::Rename => K::Rename,
        }
    }
}

impl From<SubscribeOptions> for cur::SubscribeOptions {
    fn from(o: SubscribeOptions) -> cur::SubscribeOptions {
        cur::SubscribeOptions {
            from: o.from,
            filter: cur::Filter {
                prefix: o.filter.prefix.map(Into::into),
                kinds: o
                    .filter
                    .kinds
                    .map(|ks| ks.into_iter().map(Into::into).collect()),
            },
            cursor: o.cursor,
            resync_on_move_in: o.resync_on_move_in,
        }
    }
}

impl From<RequestBody> for protocol::RequestBody {
    fn from(b: RequestBody) -> protocol::RequestBody {
        use protocol::RequestBody as R;
        match b {
            RequestBody::Mutate(c) => R::Mutate(c.into()),
            RequestBody::Stat { path } => R::Stat { path: path.into() },
            RequestBody::StatId { id } => R::StatId { id },
            RequestBody::List {
                path,
                start_after,
                limit,
            } => R::List {
                path: path.into(),
                start_after: start_after.map(Into::into),
                limit,
            },
            RequestBody::Subscribe(o) => R::Subscribe(o.into()),
            RequestBody::Cancel { target } => R::Cancel { target },
            RequestBody::Ack { cursor, seq } => R::Ack { cursor, seq },
            RequestBody::ListCursors => R::ListCursors,
            RequestBody::DropCursor { cursor } => R::DropCursor { cursor },
            RequestBody::WaitFor { seq, timeout_ms } => R::WaitFor { seq, timeout_ms },
            RequestBody::Ping => R::Ping,
            RequestBody::Info => R::Info,
            RequestBody::StatAt { path, at } => R::StatAt {
                path: path.into(),
                at: at.into(),
            },
            RequestBody::StatIdAt { id, at } => R::StatIdAt { id, at: at.into() },
            RequestBody::ListAt {
                path,
                start_after,
                limit,
                at,
            } => R::ListAt {
                path: path.into(),
                start_after: start_after.map(Into::into),
                limit,
                at: at.into(),
            },
            RequestBody::PinView => R::PinView,
            RequestBody::UnpinView { seq } => R::UnpinView { seq },
            RequestBody::BackupBegin { resume } => R::BackupBegin { resume },
            RequestBody::BackupChunk {
                id,
                file,
                offset,
                len,
            } => R::BackupChunk {
                id,
                file,
                offset,
                len,
            },
            RequestBody::BackupEnd { id } => R::BackupEnd { id },
            RequestBody::Replicate(f) => R::Replicate(f),
            RequestBody::Status => R::Status,
            RequestBody::SubscribeAt { opts, min_seq } => R::SubscribeAt {
                opts: opts.into(),
                min_seq,
            },
        }
    }
}

impl From<ClientMsg> for protocol::ClientMsg {
    fn from(m: ClientMsg) -> protocol::ClientMsg {
        match m {
            ClientMsg::Hello(h) => protocol::ClientMsg::Hello(h),
            ClientMsg::Request { id, body } => protocol::ClientMsg::Request {
                id,
                body: body.into(),
            },
        }
    }
}

/// Decodes a frame's payload from a protocol-1 client as today's message.
/// A variant protocol 1 lacks does not decode (`Corruption`, as any bad
/// frame).
pub fn decode_client(payload: &[u8]) -> Result<protocol::ClientMsg> {
    protocol::decode::<ClientMsg>(payload).map(Into::into)
}

/// What a protocol-1 connection may not ask although protocol 1 has the
/// request: a replica's log records and a backup's files are format 2's
/// bytes, which a protocol-1 peer cannot read.
pub fn refusal(body: &protocol::RequestBody) -> Option<Error> {
    use protocol::RequestBody as R;
    let what = match body {
        R::Replicate(_) => "replication",
        R::BackupBegin { .. } | R::BackupChunk { .. } | R::BackupEnd { .. } => "backup",
        _ => return None,
    };
    Some(incompatible(format!(
        "{what} sends format 2's records and files, which a protocol-1 client cannot read; \
         use a client of protocol 2"
    )))
}

// ---- replies: current → protocol 1 ----

/// The error for something protocol 1 cannot express.
fn incompatible(detail: String) -> Error {
    Error::Remote {
        kind: crate::ErrorKind::Incompatible,
        message: detail,
    }
}

fn cannot_express(what: &str) -> Error {
    incompatible(format!(
        "{what}, which protocol 1 cannot express; use a client of protocol 2"
    ))
}

/// A name or path as protocol 1 has it: text. One that is not UTF-8 is
/// refused (protocol 1's `String` would not decode it).
fn text(b: &ByteString) -> Result<String> {
    match b.to_str() {
        Some(t) => Ok(t.to_owned()),
        None => Err(cannot_express(&format!("the name {b:?} is not UTF-8"))),
    }
}

fn file_type(k: types::FileType, path: &ByteString) -> Result<FileType> {
    match k {
        types::FileType::File => Ok(FileType::File),
        types::FileType::Directory => Ok(FileType::Directory),
        types::FileType::Symlink => Err(cannot_express(&format!("{path} is a symbolic link"))),
    }
}

fn attrs(a: &types::Attrs, path: &ByteString) -> Result<Attrs> {
    Ok(Attrs {
        kind: file_type(a.kind, path)?,
        size: a.size,
        block_size: a.block_size,
        ctime_ms: a.ctime_ms,
        mtime_ms: a.mtime_ms,
        mode: a.mode,
        complete: a.complete,
        owner: a.owner.clone(),
        group: a.group.clone(),
    })
}

fn inode(i: &types::Inode) -> Result<Inode> {
    let root = ByteString::from("/");
    let what = if i.name.is_empty() { &root } else { &i.name };
    Ok(Inode {
        id: i.id,
        parent: i.parent,
        name: text(&i.name)?,
        attrs: attrs(&i.attrs, what)?,
    })
}

fn page(p: &types::ListPage) -> Result<ListPage> {
    Ok(ListPage {
        entries: p
            .entries
            .iter()
            .map(|e| {
                Ok(DirEntry {
                    name: text(&e.name)?,
                    inode: inode(&e.inode)?,
                })
            })
            .collect::<Result<_>>()?,
        next_start_after: p.next_start_after.as_ref().map(text).transpose()?,
    })
}

fn update(u: &CurrentUpdate) -> Result<Update> {
    Ok(Update {
        id: u.id,
        parent: u.parent,
        name: text(&u.name)?,
        path: text(&u.path)?,
        old: attrs(&u.old, &u.path)?,
        new: attrs(&u.new, &u.path)?,
    })
}

/// An event as protocol 1 has it; `None` for one about extended attributes
/// or quotas, which protocol 1's namespace does not have.
fn event(e: &CurrentEvent) -> Result<Option<Event>> {
    Ok(Some(match e {
        CurrentEvent::Create {
            id,
            parent,
            name,
            path,
            attrs: a,
            ..
        } => Event::Create {
            id: *id,
            parent: *parent,
            name: text(name)?,
            path: text(path)?,
            attrs: attrs(a, path)?,
        },
        CurrentEvent::Complete(u) => Event::Complete(update(u)?),
        CurrentEvent::SetSize(u) => Event::SetSize(update(u)?),
        CurrentEvent::SetAttr(u) => Event::SetAttr(update(u)?),
        CurrentEvent::Delete {
            id,
            parent,
            name,
            path,
            attrs: a,
            ..
        } => Event::Delete {
            id: *id,
            parent: *parent,
            name: text(name)?,
            path: text(path)?,
            attrs: attrs(a, path)?,
        },
        CurrentEvent::Rename {
            id,
            old_parent,
            old_name,
            old_path,
            new_parent,
            new_name,
            new_path,
            attrs: a,
            ..
        } => Event::Rename {
            id: *id,
            old_parent: *old_parent,
            old_name: text(old_name)?,
            old_path: text(old_path)?,
            new_parent: *new_parent,
            new_name: text(new_name)?,
            new_path: text(new_path)?,
            attrs: attrs(a, new_path)?,
        },
        CurrentEvent::Symlink { path, .. } => {
            return Err(cannot_express(&format!(
                "a symbolic link was created at {path}"
            )))
        }
        CurrentEvent::SetXattr { .. }
        | CurrentEvent::RemoveXattr { .. }
        | CurrentEvent::SetQuota { .. }
        | CurrentEvent::ClearQuota { .. } => return Ok(None),
    }))
}

/// A stream item as protocol 1 has it; an error (which ends the
/// subscription) for one it cannot express. A record whose events were
/// all left out becomes `Progress` at its sequence.
pub fn stream_item(item: &cur::StreamItem) -> Result<StreamItem> {
    Ok(match item {
        cur::StreamItem::SnapshotStart {
            seq,
            prefix,
            resync,
        } => StreamItem::SnapshotStart {
            seq: *seq,
            prefix: text(prefix)?,
            resync: *resync,
        },
        cur::StreamItem::SnapshotEntry { path, inode: i } => StreamItem::SnapshotEntry {
            path: text(path)?,
            inode: Box::new(inode(i)?),
        },
        cur::StreamItem::SnapshotEnd { seq } => StreamItem::SnapshotEnd { seq: *seq },
        cur::StreamItem::Record {
            seq,
            time_ms,
            events,
        } => {
            let mut out = Vec::with_capacity(events.len());
            for e in events.iter() {
                if let Some(ev) = event(&e.event)? {
                    out.push(ScopedEvent {
                        scope: e.scope,
                        event: ev,
                    });
                }
            }
            if out.is_empty() && !events.is_empty() {
                StreamItem::Progress { seq: *seq }
            } else {
                StreamItem::Record {
                    seq: *seq,
                    time_ms: *time_ms,
                    events: out,
                }
            }
        }
        cur::StreamItem::Progress { seq } => StreamItem::Progress { seq: *seq },
    })
}

fn status(s: &CurrentStatus) -> Result<NodeStatus> {
    let role = match s.role {
        protocol::Role::Leader => Role::Leader,
        protocol::Role::Replica => Role::Replica,
        protocol::Role::Follower => return Err(cannot_express("this node is a Raft follower")),
    };
    Ok(NodeStatus {
        role,
        leader: s.leader.clone(),
        namespace: s.namespace.clone(),
        applied_seq: s.applied_seq,
        leader_committed_seq: s.leader_committed_seq,
        lag_records: s.lag_records,
        lag_ms: s.lag_ms,
        connected: s.connected,
        log_start: s.log_start,
        log_bytes: s.log_bytes,
    })
}

fn error_reply(e: &Error) -> ResponseBody {
    ResponseBody::Error {
        kind: ErrorKind::from_current(e.kind()),
        message: e.to_string(),
    }
}

/// A reply as protocol 1 has it; one it cannot express becomes an error
/// (`Incompatible`) saying why.
pub fn response(body: &protocol::ResponseBody) -> ResponseBody {
    use protocol::ResponseBody as R;
    let r = match body {
        R::Seq(s) => Ok(ResponseBody::Seq(*s)),
        R::Inode(i) => inode(i).map(ResponseBody::Inode),
        R::Page(p) => page(p).map(ResponseBody::Page),
        R::Item(i) => stream_item(i).map(ResponseBody::Item),
        R::Cursors(c) => Ok(ResponseBody::Cursors(c.clone())),
        R::Done => Ok(ResponseBody::Done),
        R::StreamEnd => Ok(ResponseBody::StreamEnd),
        R::Error { kind, message } => Ok(ResponseBody::Error {
            kind: ErrorKind::from_current(*kind),
            message: message.clone(),
        }),
        R::Info {
            committed_seq,
            log_start,
            log_bytes,
        } => Ok(ResponseBody::Info {
            committed_seq: *committed_seq,
            log_start: *log_start,
            log_bytes: *log_bytes,
        }),
        R::InodeAt { inode: i, seq } => {
            inode(i).map(|inode| ResponseBody::InodeAt { inode, seq: *seq })
        }
        R::PageAt { page: p, seq } => page(p).map(|page| ResponseBody::PageAt { page, seq: *seq }),
        R::Backup { id, manifest } => Ok(ResponseBody::Backup {
            id: *id,
            manifest: manifest.clone(),
        }),
        R::Chunk {
            offset,
            data,
            crc32c,
        } => Ok(ResponseBody::Chunk {
            offset: *offset,
            data: data.clone(),
            crc32c: *crc32c,
        }),
        R::Records {
            first,
            records,
            committed,
            now_ms,
        } => Ok(ResponseBody::Records {
            first: *first,
            records: records.clone(),
            committed: *committed,
            now_ms: *now_ms,
        }),
        R::Status(s) => status(s).map(ResponseBody::Status),
        R::NotLeader { leader, message } => Ok(ResponseBody::NotLeader {
            leader: leader.clone(),
            message: message.clone(),
        }),
        R::Lagging {
            applied,
            wanted,
            waited_ms,
            leader,
        } => Ok(ResponseBody::Lagging {
            applied: *applied,
            wanted: *wanted,
            waited_ms: *waited_ms,
            leader: leader.clone(),
        }),
        // Protocol 1 has no request these answer.
        R::Raft(_) => Err(cannot_express("a Raft reply")),
        R::Cluster(_) => Err(cannot_express("a cluster's status")),
        R::Target { .. } => Err(cannot_express("a symbolic link's target")),
        R::Xattrs { .. } => Err(cannot_express("extended attributes")),
        R::Summary { .. } => Err(cannot_express("a content summary")),
    };
    r.unwrap_or_else(|e| error_reply(&e))
}

/// A server message as protocol 1 has it.
pub fn server_msg(msg: &protocol::ServerMsg) -> ServerMsg {
    match msg {
        protocol::ServerMsg::Welcome {
            server,
            committed_seq,
            max_frame,
            ..
        } => ServerMsg::Welcome {
            version: VERSION,
            server: server.clone(),
            committed_seq: *committed_seq,
            max_frame: *max_frame,
        },
        protocol::ServerMsg::Response { id, body } => ServerMsg::Response {
            id: *id,
            body: response(body),
        },
        protocol::ServerMsg::Fatal { kind, message } => ServerMsg::Fatal {
            kind: ErrorKind::from_current(*kind),
            message: message.clone(),
        },
    }
}

/// Encodes `msg` as a protocol-1 frame.
pub fn encode_server(msg: &protocol::ServerMsg) -> Result<Vec<u8>> {
    protocol::encode(&server_msg(msg))
}
