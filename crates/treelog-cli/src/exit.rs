//! What the commands share about failures: exit codes and errors that
//! name the data directory.

use std::path::Path;

use crate::error::{Error, ErrorKind};
use crate::output::quote;

/// Process exit code of an error kind (documented in the README).
pub(crate) fn exit_code(kind: ErrorKind) -> u8 {
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
        ErrorKind::QuotaExceeded => 14,
        ErrorKind::PermissionDenied | ErrorKind::NotPermitted => 15,
        // Go to the leader: a replica refused a linearizable read, or no
        // leader took a write (not applied).
        ErrorKind::NotLeader => 16,
        // The node did not reach the sequence asked for (--min-seq) in time.
        ErrorKind::Lagging => 17,
        // --timeout passed with nothing sent that could change the store:
        // safe to run again.
        ErrorKind::DeadlineExceeded => 18,
        _ => 1,
    }
}

/// Exit code of `admin verify` when the digests differ.
pub(crate) const EXIT_VERIFY_MISMATCH: u8 = 12;

/// An error about the data directory `dir`, with its path in the message
/// when it lacks one (an OS error says "Permission denied", not where),
/// keeping its kind.
pub(crate) fn naming(dir: &Path, e: Error) -> Error {
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

pub(crate) fn is_broken_pipe(e: &Error) -> bool {
    matches!(e, Error::Io(io) if io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// The exit code of a command over several operands (or entries, for
/// `import`): that of the first failure, except that `OutcomeUnknown` (13)
/// wins over any other, since it is the one code that says "read before
/// retrying" and the others say "not applied".
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct FirstFailure(Option<u8>);

impl FirstFailure {
    pub(crate) fn note(&mut self, kind: ErrorKind) {
        let code = exit_code(kind);
        match self.0 {
            None => self.0 = Some(code),
            Some(EXIT_OUTCOME_UNKNOWN) => {}
            Some(_) if code == EXIT_OUTCOME_UNKNOWN => self.0 = Some(code),
            Some(_) => {}
        }
    }

    /// 0 when nothing failed.
    pub(crate) fn code(&self) -> u8 {
        self.0.unwrap_or(0)
    }
}

const EXIT_OUTCOME_UNKNOWN: u8 = 13;

/// Why an operand failed, for a coreutils-style message (`treelog: cannot
/// create directory '/a': File exists`): the C library's words for the
/// kinds a filesystem has, with the path the error is about when it is not
/// one of the `operands` (`mkdir /x/y/z` fails because `/x` does not
/// exist); treelog's own message for every other kind.
pub(crate) fn reason(e: &Error, operands: &[&str]) -> String {
    let message = e.to_string();
    // Extended attributes' errors, in getfattr's and setfattr's words.
    if message.starts_with("no attribute ") {
        return "No such attribute".into();
    }
    if message.starts_with("attribute ") && e.kind() == ErrorKind::AlreadyExists {
        return "Attribute exists".into();
    }
    let (words, prefix, about) = match e.kind() {
        ErrorKind::NotFound => (
            "No such file or directory",
            "no such file or directory: ",
            "does not exist",
        ),
        ErrorKind::AlreadyExists => ("File exists", "already exists: ", "exists"),
        ErrorKind::NotADirectory => ("Not a directory", "not a directory: ", "is not a directory"),
        ErrorKind::IsADirectory => ("Is a directory", "is a directory: ", "is a directory"),
        ErrorKind::NotEmpty => (
            "Directory not empty",
            "directory not empty: ",
            "is not empty",
        ),
        _ => return message,
    };
    let canonical = |p: &str| crate::path::canonical(p).unwrap_or_else(|_| p.to_owned().into());
    match message.strip_prefix(prefix) {
        Some(path) if !operands.iter().any(|o| canonical(o) == path) => {
            format!("{words} ({} {about})", quote_always(path))
        }
        _ => words.to_owned(),
    }
}

/// A path in a diagnostic, always quoted as GNU tools quote operands in
/// their messages (`'/a'`), and with [`quote`]'s escapes when needed.
pub(crate) fn quote_always<S: AsRef<[u8]> + ?Sized>(s: &S) -> String {
    match quote(s) {
        std::borrow::Cow::Borrowed(b) => format!("'{b}'"),
        std::borrow::Cow::Owned(q) => q,
    }
}
