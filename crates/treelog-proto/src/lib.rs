//! The vocabulary treelog's library, server and clients share: value types,
//! commands, events and records, errors, paths, the stream's items and
//! filter, the wire protocol, and the wall clock as records carry it. No
//! storage engine: a client built on this crate compiles no RocksDB.
//!
//! The normative descriptions are `docs/EVENTS.md` (events and records),
//! `docs/PROTOCOL.md` (the wire protocol) and `docs/STREAMS.md`.

pub mod bytestr;
pub mod caller;
pub mod clock;
pub mod command;
pub mod cursor;
pub mod error;
pub mod event;
pub mod path;
pub mod protocol;
pub mod read;
pub mod stream;
pub mod types;
pub mod v1;

pub use bytestr::ByteString;
pub use caller::Caller;
pub use clock::now_ms;
pub use command::Command;
pub use error::{Error, ErrorKind, Result};
pub use event::{Event, EventKind, Record};
pub use protocol::FEATURE_LEVEL;
pub use read::{Read, ReadAt};
pub use types::{Attrs, DirEntry, FileType, Inode, ListPage};
