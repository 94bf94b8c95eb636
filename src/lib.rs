//! treelog: an event-sourced filesystem-namespace metadata service on RocksDB.
//!
//! Every mutation becomes a record in a sequenced change log (`log` column
//! family); a single writer group-commits records and applies their events to
//! the namespace index (`inodes` and `edges`, format 2; docs/FORMAT.md). The
//! index is a view of the log: recovery replays the log from the index's
//! `applied_seq`, and `admin rebuild`/`verify` replay it from the start.
//!
//! Start with [`Treelog`]. The modules, top to bottom (docs/ARCHITECTURE.md;
//! a module uses only those below it):
//!
//! | layer | modules |
//! |---|---|
//! | the API | [`Treelog`] (`treelog.rs`), its options |
//! | edges | `replication` (the port replicas and consensus use), `stream` (subscriptions), `ops` (backup, recovery, admin), `migrate` (`migrations/`) |
//! | the write path | `commit` (the writer, its roles, the group-commit pipeline) |
//! | the log's bounds | `retention` (log start and bytes, durable cursors) |
//! | what readers see | `read` (the publication of committed states: views, caches, watermark) |
//! | the pure engine | `engine` (commands to events, events to index writes, queries) |
//! | storage | `store` (RocksDB), `index` (the index as the engine reads and writes it) |
//! | beside them | `metrics`, `sys` (threads, scheduling, failpoints) |

// The vocabulary shared with the server and clients (crate
// `treelog-proto`), under the names the library has always used.
pub use treelog_proto::{bytestr, caller, command, cursor, error, event, path, types};
// The wall clock as records carry it (`crate::clock::now_ms`): in
// `treelog-proto`, so that the bridge has it without the engine.
use treelog_proto::clock;

/// The on-disk format's codecs (crate `treelog-format`, docs/FORMAT.md).
pub use treelog_format as format;

mod commit;
mod engine;
mod index;
mod ops;
mod read;
mod sys;
mod treelog;

pub mod metrics;
pub mod replication;
pub mod retention;
pub mod store;
pub mod stream;

/// Format migrations: the steps live in the top-level `migrations/`
/// folder, beside the version list and the golden fixtures of each older
/// format.
#[path = "../migrations/mod.rs"]
pub mod migrate;

// Offline administration, backups and replay, under the names the
// library has always used.
pub use ops::{admin, backup, catch_up, recovery};

/// Crash points and injected failures of the reliability tests (also the
/// CLI's own, with its `failpoints` feature).
#[doc(hidden)]
pub use sys::failpoint;

pub use crate::treelog::{
    CreateOptions, MkdirOptions, OpenReport, Options, PendingCommit, SetAttrs, Treelog,
    DEFAULT_MAX_COUNT_INODES,
};
pub use bytestr::ByteString;
pub use caller::Caller;
pub use clock::now_ms;
pub use command::Command;
pub use commit::{Durability, WriterConfig, WriterStatsSnapshot};
pub use engine::{DEFAULT_MAX_DELETE_INODES, DEFAULT_MAX_RECORD_BYTES};
pub use error::{Error, ErrorKind, Result};
pub use event::{Event, EventKind, Record};
pub use read::{retained::ViewPins, Read, ReadAt};
pub use types::{
    Attrs, ContentSummary, DirEntry, FileType, Inode, ListPage, Quota, Usage, Xattr, XattrFlag,
};
