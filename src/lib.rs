//! treelog: an event-sourced filesystem-namespace metadata service on RocksDB.
//!
//! Every mutation becomes a record in a sequenced change log (`log` column
//! family); a single writer group-commits records and applies their events to
//! the namespace index (`inodes` and `edges`, format v1 = seed 000). The
//! index is a view of the log: recovery replays the log from the index's
//! `applied_seq`, and `admin rebuild`/`verify` replay it from the start.
//!
//! Start with [`Treelog`].

// The vocabulary shared with the server and clients (crate
// `treelog-proto`), under the names the library has always used.
pub use treelog_proto::{command, cursor, error, event, path, read, types};

pub mod admin;
pub mod engine;
mod failpoint;
pub mod format;
pub mod index;
pub mod metrics;
pub mod namespace;
pub mod readcache;
pub mod readview;
mod replay_progress;
pub mod retention;
pub mod sched;
pub mod store;
pub mod stream;
pub mod watermark;
pub mod writer;

pub use command::Command;
pub use error::{Error, ErrorKind, Result};
pub use event::{Event, EventKind, Record};
pub use namespace::{
    CreateOptions, Durability, MkdirOptions, OpenReport, Options, SetAttrs, Treelog,
};
pub use readview::{Read, ReadAt};
pub use types::{Attrs, DirEntry, FileType, Inode, ListPage};
