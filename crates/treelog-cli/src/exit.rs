//! What the commands share about failures: exit codes and errors that
//! name the data directory.

use std::path::Path;

use crate::error::{Error, ErrorKind};

/// Process exit code of an error kind (documented in the README).
pub fn exit_code(kind: ErrorKind) -> u8 {
    match kind {
        ErrorKind::NotFound => 3,
        ErrorKind::AlreadyExists => 4,
        ErrorKind::NotADirectory => 5,
        ErrorKind::IsADirectory => 6,
        ErrorKind::NotEmpty => 7,
        ErrorKind::InvalidName | ErrorKind::InvalidPath | ErrorKind::InvalidArgument => 8,
        ErrorKind::DictionaryFull => 9,
        ErrorKind::Corruption | ErrorKind::Incompatible => 10,
        ErrorKind::Compacted | ErrorKind::CursorExpired => 11,
        // Not 1: a script must not retry a command that may have been
        // applied as if it had failed.
        ErrorKind::OutcomeUnknown => 13,
        _ => 1,
    }
}

/// Exit code of `admin verify` when the digests differ.
pub const EXIT_VERIFY_MISMATCH: u8 = 12;

/// An error about the data directory `dir`, with its path in the message
/// when it lacks one (an OS error says "Permission denied", not where),
/// keeping its kind.
pub fn naming(dir: &Path, e: Error) -> Error {
    let shown = dir.display().to_string();
    if e.to_string().contains(&shown) {
        return e;
    }
    match e {
        Error::Io(io) => Error::Io(std::io::Error::new(
            io.kind(),
            format!("data directory {shown}: {io}"),
        )),
        // RocksDB's errors (the storage engine is the library's business):
        // keep the kind, add the directory.
        Error::Corruption { .. } => e,
        e if e.kind() == ErrorKind::Corruption => Error::Corruption {
            what: "database",
            detail: format!("data directory {shown}: {e}"),
        },
        e if e.kind() == ErrorKind::Io => Error::Io(std::io::Error::other(format!(
            "data directory {shown}: {e}"
        ))),
        e => e,
    }
}

pub fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
}
