//! Fuzzing of every decoder of bytes that come from disk or the network, on
//! stable Rust with proptest: the key and value codecs of the column
//! families (`format::*`), log record envelopes, durable cursor states, and
//! the wire protocol (frames, the handshake, requests and responses).
//!
//! Each decoder gets arbitrary bytes and mutated valid encodings (taken from
//! the real encoder, then bits flipped, bytes set, inserted, deleted,
//! duplicated, truncated, two encodings spliced, length fields set to huge
//! values). A decoder must return an error and never panic (a panic fails
//! the case); when it accepts mutated input, what it returns must encode
//! and decode back to itself (or to the very input, for the fixed layouts).
//! A counting allocator checks that no input makes a decoder allocate
//! beyond its bound, in particular that a frame's length prefix commits no
//! memory the payload has not brought.
//!
//! Short mode by default (a few seconds in a debug build). The long mode
//! runs N cases per property: `TREELOG_FUZZ_CASES=1000000 cargo test
//! --release -p treelog-format --test fuzz_decoders` (docs/OPERATIONS.md,
//! "Decoder fuzzing").

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures_util::FutureExt;
use proptest::prelude::*;
use proptest::sample::Index;
use tokio::io::{AsyncRead, ReadBuf};

use treelog_format as format;
use treelog_format::record::{
    decode_record, decode_record_ref, encode_record, ENVELOPE_HEADER_LEN,
};
use treelog_format::{meta, Dict, InodeEntry};
use treelog_proto::command::Command;
use treelog_proto::cursor::{CursorInfo, CursorState};
use treelog_proto::error::{DictKind, ErrorKind};
use treelog_proto::event::EventKind;
use treelog_proto::event::{Event, Record, Update};
use treelog_proto::protocol::{
    self, ClientMsg, Hello, RequestBody, ResponseBody, ServerMsg, FRAME_READ_CHUNK,
};
use treelog_proto::read::ReadAt;
use treelog_proto::stream::{Filter, Scope, ScopedEvent, StartFrom, StreamItem, SubscribeOptions};
use treelog_proto::types::{
    Attrs, Bytes, DirEntry, FileType, Inode, ListPage, Quota, Usage, XattrFlag,
};

// ---------------------------------------------------------------------------
// A global allocator that measures the peak of live bytes a call allocates on
// its thread. Per thread, so that the tests running beside it do not count;
// every decoder here runs synchronously on the caller's thread.

struct Counting;

thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    // `try_with`: allocations also happen while a thread is torn down.
    let _ = ARMED.try_with(|armed| {
        if armed.get() {
            let live = LIVE.get() + delta;
            LIVE.set(live);
            if live > PEAK.get() {
                PEAK.set(live);
            }
        }
    });
}

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let p = System.alloc(l);
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(l);
        if !p.is_null() {
            note(l.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        note(-(l.size() as isize));
        System.dealloc(p, l)
    }

    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, l, new_size);
        if !q.is_null() {
            // Counted as a copy: old and new blocks both live at the peak.
            note(new_size as isize);
            note(-(l.size() as isize));
        }
        q
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result and the peak of bytes it held allocated
/// at once (the result included).
fn measure<T>(f: impl FnOnce() -> T) -> (T, usize) {
    LIVE.set(0);
    PEAK.set(0);
    ARMED.set(true);
    let r = f();
    ARMED.set(false);
    (r, PEAK.get().max(0) as usize)
}

/// Small allocations every decoder may make on any input: its error
/// message, a few strings.
const SLACK: usize = 4 << 10;

/// serde preallocates a sequence from its announced length, capped at
/// 1 MiB (and postcard announces no length the remaining input cannot
/// hold), so a decoded message may transiently hold that much beyond what
/// it decodes.
const SERDE_PREALLOC: usize = 1 << 20;

/// Bytes of memory a decoded message may hold per byte of its encoding:
/// postcard packs a `u64` or an empty string into one byte, which becomes
/// 8 or 24 bytes in memory, and an event shared in an `Arc` is one boxed
/// allocation each, copied once when a `Vec` becomes an `Arc<[_]>`.
const MESSAGE_BYTES_PER_INPUT_BYTE: usize = 64;

fn message_bound(input: usize) -> usize {
    SERDE_PREALLOC + MESSAGE_BYTES_PER_INPUT_BYTE * input + SLACK
}

// ---------------------------------------------------------------------------
// Case counts.

/// Cases per property in the default (CI) mode.
const SHORT_CASES: u32 = 1_000;

fn config() -> ProptestConfig {
    let cases = match std::env::var("TREELOG_FUZZ_CASES") {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("TREELOG_FUZZ_CASES={v:?} is not a number")),
        Err(_) => SHORT_CASES,
    };
    ProptestConfig {
        cases,
        ..ProptestConfig::default()
    }
}

// ---------------------------------------------------------------------------
// Inputs: arbitrary bytes and mutations of valid encodings.

/// Arbitrary bytes, biased to small values so that postcard's enum tags,
/// bools and short lengths come out valid often enough to get deep.
fn bytes(max_len: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(prop_oneof![3 => 0u8..4, 1 => any::<u8>()], 0..max_len)
}

/// Values a length or count field is set to: just past small limits, at
/// the limits of u32/u64/usize, and overlong varints.
fn huge_value() -> impl Strategy<Value = u64> {
    prop_oneof![
        Just(u64::MAX),
        Just(u32::MAX as u64),
        Just(1 << 32),
        Just(1 << 31),
        Just((1 << 28) + 1),
        Just((1 << 20) + 1),
        Just(65_536),
        Just(256),
        Just(255),
        any::<u64>(),
    ]
}

#[derive(Debug, Clone)]
enum Mutation {
    FlipBit(Index, u8),
    SetByte(Index, u8),
    Insert(Index, Vec<u8>),
    Delete(Index, u8),
    Duplicate(Index, u8),
    Truncate(Index),
    /// `self[..a] ++ other[b..]`: the head of one encoding, the tail of another.
    Splice(Index, Index),
    /// A postcard varint of a huge value, inserted or written over the bytes.
    Varint(Index, u64, bool),
    /// A 4-byte big-endian value written over the bytes (frame lengths).
    Be32(Index, u32),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        3 => (any::<Index>(), 0u8..8).prop_map(|(i, b)| Mutation::FlipBit(i, b)),
        2 => (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        1 => (any::<Index>(), bytes(8)).prop_map(|(i, b)| Mutation::Insert(i, b)),
        1 => (any::<Index>(), 1u8..16).prop_map(|(i, n)| Mutation::Delete(i, n)),
        1 => (any::<Index>(), 1u8..16).prop_map(|(i, n)| Mutation::Duplicate(i, n)),
        1 => any::<Index>().prop_map(Mutation::Truncate),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Mutation::Splice(a, b)),
        2 => (any::<Index>(), huge_value(), any::<bool>())
            .prop_map(|(i, v, ins)| Mutation::Varint(i, v, ins)),
        1 => (any::<Index>(), prop_oneof![Just(u32::MAX), Just(1 << 30), any::<u32>()])
            .prop_map(|(i, v)| Mutation::Be32(i, v)),
    ]
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

/// A position in `0..=len`.
fn at(i: &Index, len: usize) -> usize {
    i.index(len + 1)
}

fn overwrite(b: &mut Vec<u8>, pos: usize, with: &[u8]) {
    for (k, &x) in with.iter().enumerate() {
        match b.get_mut(pos + k) {
            Some(y) => *y = x,
            None => b.push(x),
        }
    }
}

fn apply(mut b: Vec<u8>, other: &[u8], muts: &[Mutation]) -> Vec<u8> {
    for m in muts {
        match m {
            Mutation::FlipBit(i, bit) if !b.is_empty() => {
                let p = i.index(b.len());
                b[p] ^= 1 << bit;
            }
            Mutation::SetByte(i, v) if !b.is_empty() => {
                let p = i.index(b.len());
                b[p] = *v;
            }
            Mutation::Insert(i, ins) => {
                let p = at(i, b.len());
                b.splice(p..p, ins.iter().copied());
            }
            Mutation::Delete(i, n) => {
                let p = at(i, b.len());
                let end = (p + *n as usize).min(b.len());
                b.drain(p..end);
            }
            Mutation::Duplicate(i, n) => {
                let p = at(i, b.len());
                let end = (p + *n as usize).min(b.len());
                let dup = b[p..end].to_vec();
                b.splice(end..end, dup);
            }
            Mutation::Truncate(i) => {
                let p = at(i, b.len());
                b.truncate(p);
            }
            Mutation::Splice(a, o) => {
                let p = at(a, b.len());
                b.truncate(p);
                b.extend_from_slice(&other[at(o, other.len())..]);
            }
            Mutation::Varint(i, v, insert) => {
                let p = at(i, b.len());
                let enc = varint(*v);
                if *insert {
                    b.splice(p..p, enc);
                } else {
                    overwrite(&mut b, p, &enc);
                }
            }
            Mutation::Be32(i, v) => {
                let p = at(i, b.len());
                overwrite(&mut b, p, &v.to_be_bytes());
            }
            Mutation::FlipBit(..) | Mutation::SetByte(..) => {}
        }
    }
    b
}

/// Mutations of valid encodings: one from `valid` mutated 1 to 4 times,
/// with a second one to splice from.
fn mutated<S>(valid: S) -> impl Strategy<Value = Vec<u8>>
where
    S: Strategy<Value = Vec<u8>> + 'static,
{
    let valid = valid.boxed();
    (
        valid.clone(),
        valid,
        prop::collection::vec(mutation(), 1..5),
    )
        .prop_map(|(b, other, muts)| apply(b, &other, &muts))
}

// ---------------------------------------------------------------------------
// Valid values, encoded by the real encoders.

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => "[a-z0-9._/-]{0,12}",
        1 => "\\PC{0,6}",
    ]
}

fn file_type() -> impl Strategy<Value = FileType> {
    prop_oneof![
        Just(FileType::File),
        Just(FileType::Directory),
        Just(FileType::Symlink)
    ]
}

fn attrs() -> impl Strategy<Value = Attrs> {
    (
        (file_type(), any::<u64>(), any::<u64>(), any::<u64>()),
        (
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
            any::<bool>(),
            text(),
            text(),
        ),
    )
        .prop_map(
            |(
                (kind, size, block_size, ctime_ms),
                (mtime_ms, change_ms, mode, complete, owner, group),
            )| Attrs {
                kind,
                size,
                block_size,
                ctime_ms,
                mtime_ms,
                change_ms,
                mode,
                complete,
                owner,
                group,
            },
        )
}

fn ids() -> impl Strategy<Value = Vec<u64>> {
    prop::collection::vec(any::<u64>(), 0..3)
}

fn usage() -> impl Strategy<Value = Usage> {
    any::<[u64; 4]>().prop_map(|[files, directories, symlinks, bytes]| Usage {
        files,
        directories,
        symlinks,
        bytes,
    })
}

fn quota() -> impl Strategy<Value = Quota> {
    (any::<Option<u64>>(), any::<Option<u64>>(), usage()).prop_map(
        |(limit_inodes, limit_bytes, usage)| Quota {
            limit_inodes,
            limit_bytes,
            usage,
        },
    )
}

fn update() -> impl Strategy<Value = Update> {
    (
        any::<u64>(),
        any::<u64>(),
        text(),
        text(),
        attrs(),
        attrs(),
        ids(),
    )
        .prop_map(|(id, parent, name, path, old, new, quotas)| Update {
            id,
            parent,
            name: name.into(),
            path: path.into(),
            old,
            new,
            quotas,
        })
}

fn event() -> impl Strategy<Value = Event> {
    let node = || {
        (
            (any::<u64>(), any::<u64>(), text(), text(), attrs()),
            any::<Option<u64>>(),
            ids(),
        )
    };
    prop_oneof![
        node().prop_map(
            |((id, parent, name, path, attrs), parent_mtime_ms, quotas)| Event::Create {
                id,
                parent,
                name: name.into(),
                path: path.into(),
                attrs,
                parent_mtime_ms,
                quotas
            }
        ),
        update().prop_map(Event::Complete),
        update().prop_map(Event::SetSize),
        update().prop_map(Event::SetAttr),
        node().prop_map(
            |((id, parent, name, path, attrs), parent_mtime_ms, quotas)| Event::Delete {
                id,
                parent,
                name: name.into(),
                path: path.into(),
                attrs,
                parent_mtime_ms,
                quotas
            }
        ),
        (
            (any::<u64>(), any::<u64>(), text(), text()),
            (any::<u64>(), text(), text(), attrs()),
            (any::<Option<u64>>(), ids(), ids(), usage()),
        )
            .prop_map(
                |(
                    (id, old_parent, old_name, old_path),
                    (new_parent, new_name, new_path, attrs),
                    (parent_mtime_ms, quotas_from, quotas_to, usage),
                )| {
                    Event::Rename {
                        id,
                        old_parent,
                        old_name: old_name.into(),
                        old_path: old_path.into(),
                        new_parent,
                        new_name: new_name.into(),
                        new_path: new_path.into(),
                        attrs,
                        parent_mtime_ms,
                        quotas_from,
                        quotas_to,
                        usage,
                    }
                }
            ),
        (node(), text()).prop_map(|(((id, parent, name, path, attrs), t, quotas), target)| {
            Event::Symlink {
                id,
                parent,
                name: name.into(),
                path: path.into(),
                target: target.into(),
                attrs,
                parent_mtime_ms: t.unwrap_or(0),
                quotas,
            }
        }),
        (
            any::<u64>(),
            text(),
            text(),
            bytes(20),
            prop::option::of(bytes(20)),
            any::<u64>()
        )
            .prop_map(|(id, path, name, value, old, change_ms)| Event::SetXattr {
                id,
                path: path.into(),
                name,
                value: Bytes(value),
                old: old.map(Bytes),
                change_ms
            }),
        (any::<u64>(), text(), text(), bytes(20), any::<u64>()).prop_map(
            |(id, path, name, old, change_ms)| Event::RemoveXattr {
                id,
                path: path.into(),
                name,
                old: Bytes(old),
                change_ms
            }
        ),
        (any::<u64>(), text(), quota()).prop_map(|(id, path, quota)| Event::SetQuota {
            id,
            path: path.into(),
            quota
        }),
        (any::<u64>(), text(), quota()).prop_map(|(id, path, old)| Event::ClearQuota {
            id,
            path: path.into(),
            old
        }),
    ]
}

fn record() -> impl Strategy<Value = Record> {
    (
        any::<u64>(),
        any::<u64>(),
        prop::collection::vec(event(), 0..4),
    )
        .prop_map(|(seq, time_ms, events)| Record {
            seq,
            time_ms,
            events,
        })
}

fn inode_entry() -> impl Strategy<Value = InodeEntry> {
    (
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u64>()),
        (any::<u64>(), any::<u32>(), 0u8..4, any::<u8>(), any::<u8>()),
        prop::collection::vec(any::<u8>(), 0..40),
    )
        .prop_map(
            |(
                (parent_id, size, block_size, creation_time_ms),
                (mtime, mode, flags, o, g),
                name,
            )| {
                InodeEntry {
                    parent_id,
                    size,
                    block_size,
                    creation_time_ms,
                    modification_time_ms: mtime,
                    mode,
                    flags,
                    owner_id: o,
                    group_id: g,
                    name,
                }
            },
        )
}

fn dict() -> impl Strategy<Value = Dict> {
    prop_oneof![
        4 => prop::collection::btree_set("[a-z0-9_]{1,12}", 0..12),
        1 => prop::collection::btree_set("[a-z]{1,255}", 0..4),
    ]
    .prop_map(|names| {
        let mut d = Dict::default();
        for n in &names {
            d.intern(DictKind::Owner, n).unwrap();
        }
        d
    })
}

fn error_kind() -> impl Strategy<Value = ErrorKind> {
    prop::sample::select(vec![
        ErrorKind::NotFound,
        ErrorKind::AlreadyExists,
        ErrorKind::NotADirectory,
        ErrorKind::IsADirectory,
        ErrorKind::NotEmpty,
        ErrorKind::InvalidName,
        ErrorKind::InvalidPath,
        ErrorKind::InvalidArgument,
        ErrorKind::DictionaryFull,
        ErrorKind::NotLeader,
        ErrorKind::Compacted,
        ErrorKind::CursorExpired,
        ErrorKind::Corruption,
        ErrorKind::Incompatible,
        ErrorKind::WriterStopped,
        ErrorKind::ShuttingDown,
        ErrorKind::Protocol,
        ErrorKind::Unauthorized,
        ErrorKind::Busy,
        ErrorKind::Io,
        ErrorKind::OutcomeUnknown,
        ErrorKind::Lagging,
        ErrorKind::QuotaExceeded,
        ErrorKind::PermissionDenied,
        ErrorKind::DeadlineExceeded,
        ErrorKind::NotPermitted,
    ])
}

fn event_kind() -> impl Strategy<Value = EventKind> {
    prop::sample::select(EventKind::ALL.to_vec())
}

fn command() -> impl Strategy<Value = Command> {
    prop_oneof![
        (text(), any::<bool>(), any::<u32>(), text(), text()).prop_map(
            |(path, parents, mode, owner, group)| Command::Mkdir {
                path: path.into(),
                parents,
                mode,
                owner,
                group
            }
        ),
        (
            text(),
            any::<bool>(),
            any::<u32>(),
            text(),
            text(),
            any::<u64>()
        )
            .prop_map(|(path, parents, mode, owner, group, block_size)| {
                Command::Create {
                    path: path.into(),
                    parents,
                    mode,
                    owner,
                    group,
                    block_size,
                }
            }),
        (text(), any::<u64>()).prop_map(|(path, size)| Command::Complete {
            path: path.into(),
            size
        }),
        (text(), any::<u64>()).prop_map(|(path, size)| Command::SetSize {
            path: path.into(),
            size
        }),
        (
            text(),
            any::<Option<u32>>(),
            prop::option::of(text()),
            prop::option::of(text()),
            any::<Option<u64>>()
        )
            .prop_map(|(path, mode, owner, group, mtime_ms)| Command::SetAttr {
                path: path.into(),
                mode,
                owner,
                group,
                mtime_ms
            }),
        (text(), any::<bool>()).prop_map(|(path, recursive)| Command::Delete {
            path: path.into(),
            recursive
        }),
        (text(), text(), any::<bool>()).prop_map(|(src, dst, overwrite)| Command::Rename {
            src: src.into(),
            dst: dst.into(),
            overwrite
        }),
        (text(), text(), any::<bool>(), text(), text()).prop_map(
            |(target, path, parents, owner, group)| Command::Symlink {
                target: target.into(),
                path: path.into(),
                parents,
                owner,
                group
            }
        ),
        (
            text(),
            text(),
            bytes(20),
            prop::sample::select(vec![
                XattrFlag::Either,
                XattrFlag::Create,
                XattrFlag::Replace
            ])
        )
            .prop_map(|(path, name, value, flag)| Command::SetXattr {
                path: path.into(),
                name,
                value: Bytes(value),
                flag
            }),
        (text(), text()).prop_map(|(path, name)| Command::RemoveXattr {
            path: path.into(),
            name
        }),
        (text(), any::<Option<u64>>(), any::<Option<u64>>()).prop_map(|(path, inodes, bytes)| {
            Command::SetQuota {
                path: path.into(),
                inodes,
                bytes,
            }
        }),
        text().prop_map(|path| Command::ClearQuota { path: path.into() }),
        text().prop_map(|path| Command::RecountQuota { path: path.into() }),
    ]
}

fn subscribe_options() -> impl Strategy<Value = SubscribeOptions> {
    (
        prop_oneof![
            any::<u64>().prop_map(StartFrom::Seq),
            Just(StartFrom::Now),
            Just(StartFrom::Snapshot),
        ],
        prop::option::of(text()),
        prop::option::of(prop::collection::vec(event_kind(), 0..4)),
        prop::option::of(text()),
        any::<Option<bool>>(),
    )
        .prop_map(
            |(from, prefix, kinds, cursor, resync_on_move_in)| SubscribeOptions {
                from,
                filter: Filter {
                    prefix: prefix.map(Into::into),
                    kinds,
                },
                cursor,
                resync_on_move_in,
            },
        )
}

fn hello() -> impl Strategy<Value = Hello> {
    (
        prop_oneof![3 => Just(protocol::MAGIC), 1 => any::<[u8; 4]>()],
        prop_oneof![3 => Just(protocol::PROTOCOL_VERSION), 1 => any::<u16>()],
        prop::option::of(text()),
        text(),
    )
        .prop_map(|(magic, version, token, client)| Hello {
            magic,
            version,
            token,
            client,
        })
}

fn request_body() -> impl Strategy<Value = RequestBody> {
    prop_oneof![
        command().prop_map(RequestBody::Mutate),
        text().prop_map(|path| RequestBody::Stat { path: path.into() }),
        any::<u64>().prop_map(|id| RequestBody::StatId { id }),
        (text(), prop::option::of(text()), any::<u32>()).prop_map(|(path, start_after, limit)| {
            RequestBody::List {
                path: path.into(),
                start_after: start_after.map(Into::into),
                limit,
            }
        }),
        subscribe_options().prop_map(RequestBody::Subscribe),
        any::<u64>().prop_map(|target| RequestBody::Cancel { target }),
        (text(), any::<u64>()).prop_map(|(cursor, seq)| RequestBody::Ack { cursor, seq }),
        Just(RequestBody::ListCursors),
        text().prop_map(|cursor| RequestBody::DropCursor { cursor }),
        (any::<u64>(), any::<u64>())
            .prop_map(|(seq, timeout_ms)| RequestBody::WaitFor { seq, timeout_ms }),
        Just(RequestBody::Ping),
        Just(RequestBody::Info),
        prop::option::of(any::<u64>()).prop_map(|resume| RequestBody::BackupBegin { resume }),
        (any::<u64>(), text(), any::<u64>(), any::<u32>()).prop_map(|(id, file, offset, len)| {
            RequestBody::BackupChunk {
                id,
                file,
                offset,
                len,
            }
        }),
        any::<u64>().prop_map(|id| RequestBody::BackupEnd { id }),
        text().prop_map(|path| RequestBody::Readlink {
            path: path.into(),
            at: ReadAt::Latest
        }),
        (text(), prop::option::of(text())).prop_map(|(path, name)| RequestBody::GetXattrs {
            path: path.into(),
            name,
            at: ReadAt::Latest
        }),
        text().prop_map(|path| RequestBody::Count {
            path: path.into(),
            at: ReadAt::Latest
        }),
    ]
}

fn client_msg() -> impl Strategy<Value = ClientMsg> {
    prop_oneof![
        1 => hello().prop_map(ClientMsg::Hello),
        3 => (any::<u64>(), request_body()).prop_map(|(id, body)| ClientMsg::Request { id, body }),
    ]
}

fn inode() -> impl Strategy<Value = Inode> {
    (any::<u64>(), any::<u64>(), text(), attrs()).prop_map(|(id, parent, name, attrs)| Inode {
        id,
        parent,
        name: name.into(),
        attrs,
    })
}

fn cursor_state() -> impl Strategy<Value = CursorState> {
    (
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        any::<Option<(u64, u64)>>(),
    )
        .prop_map(|(acked, created_ms, updated_ms, expired)| CursorState {
            acked,
            created_ms,
            updated_ms,
            expired,
        })
}

fn stream_item() -> impl Strategy<Value = StreamItem> {
    let scope = prop::sample::select(vec![
        Scope::Inside,
        Scope::MoveIn,
        Scope::MoveOut,
        Scope::Ancestor,
    ]);
    prop_oneof![
        (any::<u64>(), text(), any::<bool>()).prop_map(|(seq, prefix, resync)| {
            StreamItem::SnapshotStart {
                seq,
                prefix: prefix.into(),
                resync,
            }
        }),
        (text(), inode()).prop_map(|(path, inode)| StreamItem::SnapshotEntry {
            path: path.into(),
            inode: Box::new(inode)
        }),
        any::<u64>().prop_map(|seq| StreamItem::SnapshotEnd { seq }),
        (
            any::<u64>(),
            any::<u64>(),
            prop::collection::vec((scope, event()), 0..3)
        )
            .prop_map(|(seq, time_ms, evs)| StreamItem::Record {
                seq,
                time_ms,
                events: evs
                    .into_iter()
                    .map(|(scope, e)| ScopedEvent {
                        scope,
                        event: Arc::new(e),
                    })
                    .collect(),
            }),
        any::<u64>().prop_map(|seq| StreamItem::Progress { seq }),
    ]
}

fn response_body() -> impl Strategy<Value = ResponseBody> {
    prop_oneof![
        any::<u64>().prop_map(ResponseBody::Seq),
        inode().prop_map(ResponseBody::Inode),
        (
            prop::collection::vec((text(), inode()), 0..3),
            prop::option::of(text())
        )
            .prop_map(|(entries, next_start_after)| ResponseBody::Page(ListPage {
                entries: entries
                    .into_iter()
                    .map(|(name, inode)| DirEntry {
                        name: name.into(),
                        inode
                    })
                    .collect(),
                next_start_after: next_start_after.map(Into::into),
            })),
        stream_item().prop_map(ResponseBody::Item),
        prop::collection::vec((text(), cursor_state(), any::<u64>()), 0..3).prop_map(|cs| {
            ResponseBody::Cursors(
                cs.into_iter()
                    .map(|(name, state, lag)| CursorInfo { name, state, lag })
                    .collect(),
            )
        }),
        Just(ResponseBody::Done),
        Just(ResponseBody::StreamEnd),
        (error_kind(), text()).prop_map(|(kind, message)| ResponseBody::Error { kind, message }),
        (any::<u64>(), any::<u64>(), any::<u64>()).prop_map(
            |(committed_seq, log_start, log_bytes)| ResponseBody::Info {
                committed_seq,
                log_start,
                log_bytes,
            }
        ),
        (any::<u64>(), prop::collection::vec(any::<u8>(), 0..64))
            .prop_map(|(id, manifest)| ResponseBody::Backup { id, manifest }),
        (
            any::<u64>(),
            prop::collection::vec(any::<u8>(), 0..64),
            any::<u32>()
        )
            .prop_map(|(offset, data, crc32c)| ResponseBody::Chunk {
                offset,
                data,
                crc32c
            }),
    ]
}

fn server_msg() -> impl Strategy<Value = ServerMsg> {
    prop_oneof![
        1 => (any::<u16>(), text(), any::<u64>(), any::<u32>()).prop_map(
            |(version, server, committed_seq, max_frame)| ServerMsg::Welcome {
                version,
                server,
                committed_seq,
                max_frame,
            }
        ),
        4 => (any::<u64>(), response_body()).prop_map(|(id, body)| ServerMsg::Response { id, body }),
        1 => (error_kind(), text()).prop_map(|(kind, message)| ServerMsg::Fatal { kind, message }),
    ]
}

/// A message's frame payload (the encoding without its length prefix).
fn payload<T: serde::Serialize>(m: &T) -> Vec<u8> {
    protocol::encode(m).unwrap()[4..].to_vec()
}

/// Log values whose payload (not the envelope) was mutated, with the
/// checksum recomputed: the postcard decoder behind a valid envelope.
fn resealed_record() -> impl Strategy<Value = Vec<u8>> {
    let valid = record().prop_map(|r| encode_record(&r).unwrap()).boxed();
    (
        valid.clone(),
        valid,
        prop::collection::vec(mutation(), 1..5),
    )
        .prop_map(|(b, other, muts)| {
            let header = b[..ENVELOPE_HEADER_LEN].to_vec();
            let body = apply(
                b[ENVELOPE_HEADER_LEN..].to_vec(),
                &other[ENVELOPE_HEADER_LEN..],
                &muts,
            );
            seal(&header[..2], &body)
        })
}

fn seal(version: &[u8], payload: &[u8]) -> Vec<u8> {
    let crc = crc32c::crc32c_append(crc32c::crc32c(version), payload);
    let mut out = version.to_vec();
    out.extend_from_slice(&crc.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

// ---------------------------------------------------------------------------
// The checks, one per decoder. Each returns normally or fails the case.

/// Fixed-layout codecs: a decoded value re-encodes to the very input.
fn check_keys(b: &[u8]) -> Result<(), TestCaseError> {
    let ((), peak) = measure(|| {
        if let Ok(v) = format::decode_inode_key(b) {
            assert_eq!(format::inode_key(v), b);
        }
        if let Ok(v) = format::decode_log_key(b) {
            assert_eq!(format::log_key(v), b);
        }
        if let Ok(v) = format::decode_edge_value(b) {
            assert_eq!(format::edge_value(v), b);
        }
        if let Ok(v) = format::decode_next_id_value(b) {
            assert_eq!(format::next_id_value(v), b);
        }
        if let Ok(v) = format::decode_u64_be("fuzz", b) {
            assert_eq!(format::encode_u64_be(v), b);
        }
        if let Ok(v) = meta::decode_u64("meta value", b) {
            assert_eq!(meta::encode_u64(v), b);
        }
        if let Ok((p, name)) = format::decode_edge_key(b) {
            assert_eq!(format::edge_key(p, name), b);
        }
    });
    prop_assert!(
        peak <= SLACK + 2 * b.len(),
        "peak {peak} for {} bytes",
        b.len()
    );
    Ok(())
}

fn check_inode_entry(b: &[u8]) -> Result<(), TestCaseError> {
    let ((owned, borrowed), peak) = measure(|| (InodeEntry::decode(b), InodeEntry::decode_ref(b)));
    prop_assert!(peak <= SLACK + b.len(), "peak {peak} for {} bytes", b.len());
    match (owned, borrowed) {
        (Ok(e), Ok(r)) => {
            prop_assert_eq!(e.encode(), b);
            prop_assert_eq!(r.encode(), b);
            prop_assert_eq!(r.name, &e.name[..]);
        }
        (Err(e), Err(r)) => {
            prop_assert_eq!(e.kind(), ErrorKind::Corruption);
            prop_assert_eq!(r.kind(), ErrorKind::Corruption);
        }
        (o, r) => prop_assert!(false, "decode {o:?} but decode_ref {r:?}"),
    }
    Ok(())
}

/// A dictionary holds at most 255 strings of at most 255 bytes, each twice
/// (the list and the reverse index) with its table slot.
const DICT_BOUND: usize = 64 << 10;

fn check_dict(b: &[u8]) -> Result<(), TestCaseError> {
    let (d, peak) = measure(|| Dict::decode(b));
    prop_assert!(
        peak <= DICT_BOUND + 4 * b.len(),
        "peak {peak} for {} bytes",
        b.len()
    );
    match d {
        Ok(d) => prop_assert_eq!(d.encode(), b),
        Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Corruption),
    }
    Ok(())
}

fn check_record(b: &[u8]) -> Result<(), TestCaseError> {
    let ((owned, borrowed), peak) =
        measure(|| (decode_record(b, None), decode_record_ref(b, None)));
    prop_assert!(
        peak <= message_bound(b.len()),
        "peak {peak} for {} bytes",
        b.len()
    );
    match (owned, borrowed) {
        (Ok(rec), Ok(r)) => {
            // The borrowed form (replay's) reads the same record.
            prop_assert_eq!(rec.borrowed(), r);
            let again = encode_record(&rec).unwrap();
            prop_assert_eq!(decode_record(&again, Some(rec.seq)).unwrap(), rec.clone());
            prop_assert!(decode_record(b, Some(rec.seq.wrapping_add(1))).is_err());
        }
        (Err(e), Err(r)) => {
            prop_assert_eq!(e.kind(), ErrorKind::Corruption);
            prop_assert_eq!(r.kind(), ErrorKind::Corruption);
        }
        (o, r) => prop_assert!(false, "decode_record {o:?} but decode_record_ref {r:?}"),
    }
    Ok(())
}

fn check_cursor_state(b: &[u8]) -> Result<(), TestCaseError> {
    let (st, peak) = measure(|| CursorState::decode("fuzz", b));
    prop_assert!(peak <= SLACK, "peak {peak} for {} bytes", b.len());
    match st {
        Ok(st) => prop_assert_eq!(
            CursorState::decode("fuzz", &st.encode().unwrap()).unwrap(),
            st
        ),
        Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Corruption),
    }
    Ok(())
}

/// A frame payload: what `decode` accepts encodes and decodes to itself.
fn check_message<T>(b: &[u8]) -> Result<(), TestCaseError>
where
    T: serde::Serialize + for<'a> serde::Deserialize<'a> + PartialEq + std::fmt::Debug,
{
    let (m, peak) = measure(|| protocol::decode::<T>(b));
    prop_assert!(
        peak <= message_bound(b.len()),
        "peak {peak} for {} bytes",
        b.len()
    );
    match m {
        Ok(m) => prop_assert_eq!(protocol::decode::<T>(&payload(&m)).unwrap(), m),
        Err(e) => prop_assert_eq!(e.kind(), ErrorKind::Corruption),
    }
    Ok(())
}

/// Serves bytes in reads of at most `step` bytes, always ready (so one
/// poll completes a read; no runtime needed).
struct Trickle<'a> {
    data: &'a [u8],
    step: usize,
}

impl AsyncRead for Trickle<'_> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let data = self.data;
        let n = buf.remaining().min(self.step).min(data.len());
        let (head, tail) = data.split_at(n);
        buf.put_slice(head);
        self.data = tail;
        Poll::Ready(Ok(()))
    }
}

/// Reads every frame of `stream` as the server and the client do,
/// checking each against what the bytes say, and decodes each payload.
fn check_frames(stream: &[u8], max: usize, step: usize) -> Result<(), TestCaseError> {
    let mut r = Trickle { data: stream, step };
    loop {
        let rest = r.data;
        let (got, peak) = measure(|| {
            protocol::read_frame(&mut r, max)
                .now_or_never()
                .expect("an always-ready reader completes in one poll")
        });
        let consumed = rest.len() - r.data.len();
        if rest.is_empty() {
            prop_assert!(matches!(got, Ok(None)), "{got:?} at the end");
            return Ok(());
        }
        if rest.len() < 4 {
            prop_assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
            return Ok(());
        }
        let len = u32::from_be_bytes(rest[..4].try_into().unwrap()) as usize;
        if len > max {
            prop_assert_eq!(got.unwrap_err().kind(), ErrorKind::InvalidArgument);
            prop_assert!(peak <= SLACK, "refused {len} > {max} after {peak} bytes");
            return Ok(());
        }
        let arrived = (rest.len() - 4).min(len);
        // The buffer grows with what arrived: doubling, counted with the
        // copy of the old block while it grows.
        let bound = SLACK + FRAME_READ_CHUNK.max(3 * arrived);
        prop_assert!(
            peak <= bound,
            "{len}-byte frame, {arrived} bytes arrived: peak {peak} > {bound}"
        );
        if arrived < len {
            prop_assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
            return Ok(());
        }
        let frame = got.unwrap().unwrap();
        prop_assert_eq!(&frame[..], &rest[4..4 + len]);
        prop_assert_eq!(consumed, 4 + len);
        check_message::<ClientMsg>(&frame)?;
        check_message::<ServerMsg>(&frame)?;
    }
}

/// Byte streams of a few frames each.
fn frame_stream() -> impl Strategy<Value = Vec<u8>> {
    let frame = prop_oneof![
        client_msg().prop_map(|m| protocol::encode(&m).unwrap()),
        server_msg().prop_map(|m| protocol::encode(&m).unwrap()),
    ];
    prop::collection::vec(frame, 1..4).prop_map(|fs| fs.concat())
}

fn frame_limit() -> impl Strategy<Value = usize> {
    prop_oneof![
        Just(0),
        Just(16),
        Just(64 << 10),
        Just(protocol::DEFAULT_MAX_FRAME),
        Just(256 << 20),
        Just(u32::MAX as usize),
    ]
}

fn read_step() -> impl Strategy<Value = usize> {
    prop_oneof![Just(1), 1usize..64, Just(usize::MAX)]
}

// ---------------------------------------------------------------------------
// The properties.

proptest! {
    #![proptest_config(config())]

    #[test]
    fn keys_arbitrary(b in bytes(24)) {
        check_keys(&b)?;
    }

    #[test]
    fn keys_mutated(b in mutated(prop_oneof![
        any::<u64>().prop_map(|v| format::inode_key(v).to_vec()),
        any::<u64>().prop_map(|v| format::next_id_value(v).to_vec()),
        (any::<u64>(), text()).prop_map(|(p, n)| format::edge_key(p, n.as_bytes())),
    ])) {
        check_keys(&b)?;
    }

    #[test]
    fn inode_entry_arbitrary(b in bytes(120)) {
        check_inode_entry(&b)?;
    }

    #[test]
    fn inode_entry_mutated(b in mutated(inode_entry().prop_map(|e| e.encode()))) {
        check_inode_entry(&b)?;
    }

    #[test]
    fn dict_arbitrary(b in bytes(200)) {
        check_dict(&b)?;
    }

    #[test]
    fn dict_mutated(b in mutated(dict().prop_map(|d| d.encode()))) {
        check_dict(&b)?;
    }

    #[test]
    fn record_arbitrary(b in bytes(300)) {
        check_record(&b)?;
    }

    #[test]
    fn record_arbitrary_payload_sealed(p in bytes(300)) {
        check_record(&seal(&[1, 1], &p))?;
    }

    #[test]
    fn record_mutated(b in mutated(record().prop_map(|r| encode_record(&r).unwrap()))) {
        check_record(&b)?;
    }

    #[test]
    fn record_mutated_payload_sealed(b in resealed_record()) {
        check_record(&b)?;
    }

    #[test]
    fn cursor_state_arbitrary(b in bytes(40)) {
        check_cursor_state(&b)?;
    }

    #[test]
    fn cursor_state_mutated(b in mutated(cursor_state().prop_map(|s| s.encode().unwrap()))) {
        check_cursor_state(&b)?;
    }

    /// Requests, and the handshake's `Hello` (a `ClientMsg` too).
    #[test]
    fn client_msg_arbitrary(b in bytes(200)) {
        check_message::<ClientMsg>(&b)?;
    }

    #[test]
    fn client_msg_mutated(b in mutated(client_msg().prop_map(|m| payload(&m)))) {
        check_message::<ClientMsg>(&b)?;
    }

    #[test]
    fn hello_mutated(b in mutated(hello().prop_map(|h| payload(&ClientMsg::Hello(h))))) {
        check_message::<ClientMsg>(&b)?;
    }

    /// Responses, and the handshake's `Welcome`/`Fatal`.
    #[test]
    fn server_msg_arbitrary(b in bytes(200)) {
        check_message::<ServerMsg>(&b)?;
    }

    #[test]
    fn server_msg_mutated(b in mutated(server_msg().prop_map(|m| payload(&m)))) {
        check_message::<ServerMsg>(&b)?;
    }

    #[test]
    fn frames_arbitrary(b in bytes(64), max in frame_limit(), step in read_step()) {
        check_frames(&b, max, step)?;
    }

    #[test]
    fn frames_mutated(b in mutated(frame_stream()), max in frame_limit(), step in read_step()) {
        check_frames(&b, max, step)?;
    }
}

// ---------------------------------------------------------------------------
// Fixed cases.

/// The counter sees what is allocated, so the bounds above can fail.
#[test]
fn the_allocation_counter_sees_allocations() {
    let (v, peak) = measure(|| vec![7u8; 1 << 20]);
    assert_eq!(v.len(), 1 << 20);
    assert!(peak >= 1 << 20, "peak {peak}");
    let ((), peak) = measure(|| drop(vec![0u8; 3 << 20]));
    assert!(peak >= 3 << 20, "peak {peak}");
}

/// A length prefix within a 256 MiB limit followed by a few bytes must not
/// make the reader allocate what it announces.
#[test]
fn a_huge_length_prefix_with_a_few_bytes_allocates_one_chunk() {
    for len in [200u32 << 20, (256 << 20) - 1, 1 << 28] {
        let mut stream = len.to_be_bytes().to_vec();
        stream.extend_from_slice(b"a few payload bytes");
        let mut r = Trickle {
            data: &stream,
            step: usize::MAX,
        };
        let (got, peak) = measure(|| {
            protocol::read_frame(&mut r, 256 << 20)
                .now_or_never()
                .unwrap()
        });
        assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
        assert!(
            peak <= FRAME_READ_CHUNK + SLACK,
            "{len}-byte prefix: peak {peak}"
        );
    }
}

/// A length above the limit is refused before any payload buffer exists.
#[test]
fn a_length_prefix_over_the_limit_allocates_nothing_but_the_error() {
    let stream = u32::MAX.to_be_bytes();
    let mut r = Trickle {
        data: &stream,
        step: usize::MAX,
    };
    let (got, peak) = measure(|| {
        protocol::read_frame(&mut r, protocol::DEFAULT_MAX_FRAME)
            .now_or_never()
            .unwrap()
    });
    assert_eq!(got.unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert!(peak <= SLACK, "peak {peak}");
}

/// A whole frame near the limit is read whole, in memory proportional to it.
#[test]
fn a_full_frame_is_read_in_memory_proportional_to_it() {
    let len = protocol::DEFAULT_MAX_FRAME;
    let mut stream = (len as u32).to_be_bytes().to_vec();
    stream.extend((0..len).map(|i| (i % 253) as u8));
    let mut r = Trickle {
        data: &stream,
        step: 1500,
    };
    let (got, peak) = measure(|| protocol::read_frame(&mut r, len).now_or_never().unwrap());
    assert!(got.unwrap().unwrap()[..] == stream[4..]);
    assert!(peak <= 3 * len, "peak {peak}");
}

/// Sequence lengths announced far beyond the input are refused without
/// preallocating them: a record claiming 2^32 events in a few bytes.
#[test]
fn a_huge_sequence_length_in_a_small_record_is_refused_cheaply() {
    let mut payload = vec![1, 1]; // seq 1, time 1
    payload.extend(varint(u32::MAX as u64));
    payload.extend([0u8; 16]);
    let b = seal(&[1, 1], &payload);
    let (got, peak) = measure(|| decode_record(&b, None));
    assert_eq!(got.unwrap_err().kind(), ErrorKind::Corruption);
    assert!(peak <= SLACK, "peak {peak}");
}

/// Messages of a full default frame made of the smallest elements (where
/// memory per input byte is highest) stay within the per-byte bound.
#[test]
fn full_frames_of_tiny_elements_stay_within_the_message_bound() {
    // The default: no size, times or mode, empty owner and group.
    let tiny_attrs = Attrs::default;
    let tiny_event = || Event::Create {
        id: 0,
        parent: 0,
        name: String::new().into(),
        path: String::new().into(),
        attrs: tiny_attrs(),
        parent_mtime_ms: None,
        quotas: Vec::new(),
    };
    let tiny_inode = || Inode {
        id: 0,
        parent: 0,
        name: String::new().into(),
        attrs: tiny_attrs(),
    };
    let n = protocol::DEFAULT_MAX_FRAME / 16;
    let msgs = [
        ServerMsg::Response {
            id: 1,
            body: ResponseBody::Page(ListPage {
                entries: (0..n)
                    .map(|_| DirEntry {
                        name: String::new().into(),
                        inode: tiny_inode(),
                    })
                    .collect(),
                next_start_after: None,
            }),
        },
        ServerMsg::Response {
            id: 1,
            body: ResponseBody::Item(StreamItem::Record {
                seq: 1,
                time_ms: 1,
                events: (0..n)
                    .map(|_| ScopedEvent {
                        scope: Scope::Inside,
                        event: Arc::new(tiny_event()),
                    })
                    .collect(),
            }),
        },
    ];
    for m in msgs {
        let b = payload(&m);
        let (got, peak) = measure(|| protocol::decode::<ServerMsg>(&b));
        assert!(got.unwrap() == m);
        assert!(
            peak <= message_bound(b.len()),
            "{} bytes: peak {peak}",
            b.len()
        );
    }
    let rec = Record {
        seq: 1,
        time_ms: 1,
        events: (0..n).map(|_| tiny_event()).collect(),
    };
    let b = encode_record(&rec).unwrap();
    let (owned, peak) = measure(|| decode_record(&b, None));
    assert!(owned.unwrap() == rec);
    assert!(
        peak <= message_bound(b.len()),
        "{} bytes: peak {peak}",
        b.len()
    );
    let (borrowed, peak) = measure(|| decode_record_ref(&b, None));
    assert_eq!(borrowed.unwrap().events.len(), n);
    assert!(
        peak <= message_bound(b.len()),
        "{} bytes: peak {peak}",
        b.len()
    );
}
