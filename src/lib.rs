//! treelog: an event-sourced filesystem-namespace metadata service on RocksDB.
//!
//! Every mutation becomes a record in a sequenced change log (`log` column
//! family); a single writer group-commits records and applies their events to
//! the namespace index (`inodes` and `edges`, format 2; docs/FORMAT.md). The
//! index is a view of the log: recovery replays the log from the index's
//! `applied_seq`, and `admin rebuild`/`verify` replay it from the start.
//!
//! Start with [`Treelog`].

// The vocabulary shared with the server and clients (crate
// `treelog-proto`), under the names the library has always used.
pub use treelog_proto::{command, cursor, error, event, path, read, types};
// The wall clock as records carry it (`crate::clock::now_ms`): in
// `treelog-proto`, so that the bridge has it without the engine.
use treelog_proto::clock;

/// The on-disk format's codecs (crate `treelog-format`, docs/FORMAT.md).
pub use treelog_format as format;

// The API: the namespace ([`Treelog`]), change streams, retention and
// cursors, metrics, offline administration (verify, rebuild, dump, backup
// and restore), and the
// on-disk format's codecs (docs/FORMAT.md).
pub mod admin;
pub mod backup;
pub mod metrics;
pub mod retention;
pub mod store;
pub mod stream;

// The machinery behind it.
mod engine;
mod index;
pub mod migrate;
mod names;
pub mod raft;
mod reader_cache;
mod readview;
pub mod recovery;
mod replay_progress;
pub mod replica;
mod shared;
mod supervisor;
mod treelog;
mod watermark;
mod writer;

/// Thread scheduling classes, shared with the server's request workers.
#[doc(hidden)]
pub mod sched;

/// Crash points and injected failures of the reliability tests (also the
/// CLI's own, with its `failpoints` feature).
#[doc(hidden)]
pub mod failpoint;

pub use crate::treelog::{
    CreateOptions, MkdirOptions, OpenReport, Options, PendingCommit, SetAttrs, Treelog,
    DEFAULT_MAX_COUNT_INODES,
};
pub use clock::now_ms;
pub use command::Command;
pub use engine::{DEFAULT_MAX_DELETE_INODES, DEFAULT_MAX_RECORD_BYTES};
pub use error::{Error, ErrorKind, Result};
pub use event::{Event, EventKind, Record};
pub use readview::{Read, ReadAt};
pub use types::{
    Attrs, ContentSummary, DirEntry, FileType, Inode, ListPage, Quota, Usage, Xattr, XattrFlag,
};
pub use writer::{Durability, WriterConfig, WriterStatsSnapshot};
