//! Errors.
//!
//! [`Error`] is the rich internal enum: it says exactly what went wrong and
//! carries the context (the path, the bytes, the RocksDB message). [`ErrorKind`]
//! is the small public classification a caller matches on to decide what to
//! do next (retry elsewhere, report "no such file", give up, ...).

use std::fmt;

/// What a caller can act on. Stable: new variants are only appended, and
/// existing ones keep their meaning and position (the position is the wire
/// code, see `docs/PROTOCOL.md`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// A path component or inode id does not exist.
    NotFound,
    /// The target name is already taken.
    AlreadyExists,
    /// A path component that must be a directory is a file.
    NotADirectory,
    /// The operation needs a file but the target is a directory.
    IsADirectory,
    /// A directory that must be empty is not.
    NotEmpty,
    /// A name violates the naming rules (empty, too long, `/`, NUL, `.`, `..`).
    InvalidName,
    /// A path is not absolute or otherwise malformed.
    InvalidPath,
    /// An argument is out of range or contradictory (moving a directory under
    /// itself, deleting the root, a too-long owner string, ...).
    InvalidArgument,
    /// The owner or group dictionary has no room for another distinct string
    /// (format 1 kept at most 255 of each, format 2 keeps 2^32 − 1).
    DictionaryFull,
    /// This node does not accept writes (a replica); the error names the
    /// leader's address when the node knows it.
    NotLeader,
    /// The requested log position was removed by retention.
    Compacted,
    /// A durable cursor fell too far behind and was expired by retention;
    /// drop it and start again from a snapshot.
    CursorExpired,
    /// The stored data failed a checksum or could not be decoded.
    Corruption,
    /// The on-disk format is not one this build supports, or the directory is
    /// not a treelog database.
    Incompatible,
    /// The writer had stopped after a failed write or fsync before this
    /// command reached it: the command was **not applied**. Restart the
    /// process (recovery replays the log); retrying then is safe.
    WriterStopped,
    /// The store is shutting down.
    ShuttingDown,
    /// A malformed frame, a failed handshake, a refused connection or a
    /// lost connection to a server.
    Protocol,
    /// The shared token was missing or wrong.
    Unauthorized,
    /// A server limit was reached (connections, subscriptions per connection).
    Busy,
    /// An I/O or RocksDB failure.
    Io,
    /// The command may or may not have been committed: its log record was
    /// written, but the write, its fsync or the index update failed (the
    /// writer stopped), or the reply was lost with the connection or the
    /// process. After a restart the record is either in the log or not;
    /// read the state (or the log) before retrying a command that is not
    /// idempotent.
    OutcomeUnknown,
    /// A replica has not applied the sequence a read asked for
    /// (`ReadAt::AtLeast`) within the wait bound; the error says how far it
    /// is and where the leader is. Retry, or read on the leader.
    Lagging,
    /// A write would pass a directory's quota (its inodes or bytes); it
    /// was refused and wrote nothing.
    QuotaExceeded,
    /// The connection's credential does not grant the request (its role,
    /// docs/SECURITY.md), or, on a server that enforces permissions, the
    /// caller's permission bits do not (EACCES); nothing was done.
    PermissionDenied,
    /// The request's deadline passed before it got an answer, and nothing
    /// was sent that could have changed the store: a read, or a mutation
    /// that never reached a connection (one that did is `OutcomeUnknown`).
    /// Retrying is safe. (Last: the kinds are numbered on the wire in this
    /// order.)
    DeadlineExceeded,
    /// On a server that enforces permissions: the operation is reserved to
    /// the entry's owner or the superuser (chmod, chown, times, the sticky
    /// bit), whatever the permission bits say (EPERM); nothing was done.
    NotPermitted,
}

impl ErrorKind {
    /// A stable lower-case name, used in JSON output and metrics labels.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::NotFound => "not_found",
            ErrorKind::AlreadyExists => "already_exists",
            ErrorKind::NotADirectory => "not_a_directory",
            ErrorKind::IsADirectory => "is_a_directory",
            ErrorKind::NotEmpty => "not_empty",
            ErrorKind::InvalidName => "invalid_name",
            ErrorKind::InvalidPath => "invalid_path",
            ErrorKind::InvalidArgument => "invalid_argument",
            ErrorKind::DictionaryFull => "dictionary_full",
            ErrorKind::NotLeader => "not_leader",
            ErrorKind::Lagging => "lagging",
            ErrorKind::Compacted => "compacted",
            ErrorKind::CursorExpired => "cursor_expired",
            ErrorKind::Corruption => "corruption",
            ErrorKind::Incompatible => "incompatible",
            ErrorKind::WriterStopped => "writer_stopped",
            ErrorKind::ShuttingDown => "shutting_down",
            ErrorKind::Protocol => "protocol",
            ErrorKind::Unauthorized => "unauthorized",
            ErrorKind::Busy => "busy",
            ErrorKind::Io => "io",
            ErrorKind::OutcomeUnknown => "outcome_unknown",
            ErrorKind::QuotaExceeded => "quota_exceeded",
            ErrorKind::PermissionDenied => "permission_denied",
            ErrorKind::DeadlineExceeded => "deadline_exceeded",
            ErrorKind::NotPermitted => "not_permitted",
        }
    }

    /// True for the kinds that describe the caller's request rather than the
    /// health of the store: retrying the same request gives the same answer.
    pub fn is_user_error(self) -> bool {
        matches!(
            self,
            ErrorKind::NotFound
                | ErrorKind::AlreadyExists
                | ErrorKind::NotADirectory
                | ErrorKind::IsADirectory
                | ErrorKind::NotEmpty
                | ErrorKind::InvalidName
                | ErrorKind::InvalidPath
                | ErrorKind::InvalidArgument
                | ErrorKind::DictionaryFull
                | ErrorKind::QuotaExceeded
                | ErrorKind::PermissionDenied
                | ErrorKind::NotPermitted
        )
    }
}

impl ErrorKind {
    /// True when a mutation that failed with this kind was certainly not
    /// applied, so that retrying it cannot apply it twice: every kind but
    /// [`ErrorKind::OutcomeUnknown`] (which the client also reports for a
    /// mutation whose connection was lost before its reply).
    pub fn is_not_applied(self) -> bool {
        self != ErrorKind::OutcomeUnknown
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which owner/group dictionary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum DictKind {
    Owner,
    Group,
}

impl fmt::Display for DictKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DictKind::Owner => "owner",
            DictKind::Group => "group",
        })
    }
}

/// The internal error type. Every variant maps to one [`ErrorKind`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("no such file or directory: {0}")]
    NotFound(String),
    #[error("no inode with id {0}")]
    InodeNotFound(u64),
    #[error("already exists: {0}")]
    AlreadyExists(String),
    #[error("not a directory: {0}")]
    NotADirectory(String),
    #[error("is a directory: {0}")]
    IsADirectory(String),
    #[error("directory not empty: {0}")]
    NotEmpty(String),
    #[error("invalid name {name:?}: {reason}")]
    InvalidName { name: String, reason: &'static str },
    #[error("invalid path {path:?}: {reason}")]
    InvalidPath { path: String, reason: &'static str },
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    #[error("{0} dictionary is full: it holds at most 4294967295 distinct non-empty {0} strings")]
    DictionaryFull(DictKind),
    #[error("quota exceeded: {path} allows {limit} {resource}, and this would make {would_be}")]
    QuotaExceeded {
        /// The directory whose quota refused the write.
        path: String,
        /// `inodes` or `bytes`.
        resource: &'static str,
        limit: u64,
        would_be: u64,
    },
    #[error("no attribute {name} on {path}")]
    NoSuchXattr { path: String, name: String },
    #[error("attribute {name} of {path} already exists")]
    XattrExists { path: String, name: String },
    #[error("this node is a replica and does not accept writes{}", leader_hint(.leader))]
    NotLeader { leader: Option<String> },
    #[error("this replica has applied up to sequence {applied}, not {wanted} (waited {waited_ms} ms){}", leader_hint(.leader))]
    Lagging {
        applied: u64,
        wanted: u64,
        waited_ms: u64,
        leader: Option<String>,
    },
    #[error("log position {requested} was compacted away; first available is {first_available}")]
    Compacted {
        requested: u64,
        first_available: u64,
    },
    /// A replica's position is not in its source's log for another reason
    /// than retention (its history diverged, or it is ahead).
    #[error("the replica's position is not in this log: {0}")]
    PositionGone(String),
    #[error("cursor {name} expired: it acknowledged {acked} but retention moved the log start to {log_start}; drop it and resubscribe from a snapshot")]
    CursorExpired {
        name: String,
        acked: u64,
        log_start: u64,
    },
    #[error("the state at sequence {seq} is not retained (pinned read views expire when idle or old); the newest is {latest}: read again at the newest")]
    ViewNotRetained { seq: u64, latest: u64 },
    #[error("corrupt {what}: {detail}")]
    Corruption { what: &'static str, detail: String },
    #[error("incompatible database at {path}: {detail}")]
    Incompatible { path: String, detail: String },
    #[error("writer stopped after an earlier failure ({0}); restart to recover from the log")]
    WriterStopped(String),
    #[error("outcome unknown: {0}; the command may or may not be committed: read the state before retrying")]
    OutcomeUnknown(String),
    #[error("store is shutting down")]
    ShuttingDown,
    /// An error reported by a treelog server.
    #[error("{message}")]
    Remote { kind: ErrorKind, message: String },
    /// The connection's role does not grant the request.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// The operation is reserved to the owner or the superuser.
    #[error("operation not permitted: {0}")]
    NotPermitted(String),
    /// A server limit was reached.
    #[error("busy: {0}")]
    Busy(String),
    /// A client's deadline passed before the request was sent or, for a
    /// read, answered.
    #[error("deadline exceeded: {0}")]
    DeadlineExceeded(String),
    /// A protocol or connection problem talking to a server.
    #[error("protocol: {0}")]
    Protocol(String),
    /// A RocksDB failure (only with the `rocksdb` feature: the storage side).
    #[cfg(feature = "rocksdb")]
    #[error("rocksdb: {0}")]
    Rocks(#[from] rocksdb::Error),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl Error {
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::NotFound(_) | Error::InodeNotFound(_) | Error::NoSuchXattr { .. } => {
                ErrorKind::NotFound
            }
            Error::AlreadyExists(_) | Error::XattrExists { .. } => ErrorKind::AlreadyExists,
            Error::QuotaExceeded { .. } => ErrorKind::QuotaExceeded,
            Error::NotADirectory(_) => ErrorKind::NotADirectory,
            Error::IsADirectory(_) => ErrorKind::IsADirectory,
            Error::NotEmpty(_) => ErrorKind::NotEmpty,
            Error::InvalidName { .. } => ErrorKind::InvalidName,
            Error::InvalidPath { .. } => ErrorKind::InvalidPath,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::DictionaryFull(_) => ErrorKind::DictionaryFull,
            Error::NotLeader { .. } => ErrorKind::NotLeader,
            Error::Lagging { .. } => ErrorKind::Lagging,
            Error::Compacted { .. } | Error::ViewNotRetained { .. } | Error::PositionGone(_) => {
                ErrorKind::Compacted
            }
            Error::CursorExpired { .. } => ErrorKind::CursorExpired,
            Error::Corruption { .. } => ErrorKind::Corruption,
            Error::Incompatible { .. } => ErrorKind::Incompatible,
            Error::WriterStopped(_) => ErrorKind::WriterStopped,
            Error::OutcomeUnknown(_) => ErrorKind::OutcomeUnknown,
            Error::ShuttingDown => ErrorKind::ShuttingDown,
            Error::Remote { kind, .. } => *kind,
            Error::Protocol(_) => ErrorKind::Protocol,
            Error::Busy(_) => ErrorKind::Busy,
            Error::PermissionDenied(_) => ErrorKind::PermissionDenied,
            Error::NotPermitted(_) => ErrorKind::NotPermitted,
            Error::DeadlineExceeded(_) => ErrorKind::DeadlineExceeded,
            // A failed checksum or a damaged file is the database's
            // corruption, not a passing I/O failure.
            #[cfg(feature = "rocksdb")]
            Error::Rocks(e) if matches!(e.kind(), rocksdb::ErrorKind::Corruption) => {
                ErrorKind::Corruption
            }
            #[cfg(feature = "rocksdb")]
            Error::Rocks(_) => ErrorKind::Io,
            Error::Io(_) => ErrorKind::Io,
        }
    }

    pub fn corrupt(what: &'static str, detail: impl Into<String>) -> Error {
        Error::Corruption {
            what,
            detail: detail.into(),
        }
    }
}

fn leader_hint(leader: &Option<String>) -> String {
    match leader {
        Some(l) => format!("; the leader is {l}"),
        None => String::new(),
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
