//! treelog's error kinds as the errnos a POSIX caller expects.

use fuser::Errno;
use treelog_proto::error::{Error, ErrorKind};

/// The errno for a failed request. Failures that say nothing about the
/// request itself (a lost server, an unknown outcome) are logged here,
/// since the kernel passes on only the number.
pub(crate) fn errno(e: &Error, op: &str) -> Errno {
    let n = match e.kind() {
        ErrorKind::NotFound => Errno::ENOENT,
        ErrorKind::AlreadyExists => Errno::EEXIST,
        ErrorKind::NotADirectory => Errno::ENOTDIR,
        ErrorKind::IsADirectory => Errno::EISDIR,
        ErrorKind::NotEmpty => Errno::ENOTEMPTY,
        ErrorKind::InvalidName => invalid_name(e),
        // A path beyond 4,096 bytes; others cannot come from the kernel.
        ErrorKind::InvalidPath => Errno::ENAMETOOLONG,
        // Moving a directory under itself, removing the root, a mode
        // beyond 0o7777: Linux's EINVAL cases.
        ErrorKind::InvalidArgument => Errno::EINVAL,
        ErrorKind::DictionaryFull => Errno::ENOSPC,
        ErrorKind::QuotaExceeded => Errno::EDQUOT,
        ErrorKind::PermissionDenied | ErrorKind::Unauthorized => Errno::EACCES,
        // Owner-only operations and the sticky bit, on a server that
        // enforces permissions.
        ErrorKind::NotPermitted => Errno::EPERM,
        // Writes on a replica whose leader cannot be reached.
        ErrorKind::NotLeader => Errno::EROFS,
        ErrorKind::Busy | ErrorKind::Lagging | ErrorKind::ShuttingDown => Errno::EAGAIN,
        ErrorKind::DeadlineExceeded => Errno::ETIMEDOUT,
        ErrorKind::OutcomeUnknown
        | ErrorKind::WriterStopped
        | ErrorKind::Protocol
        | ErrorKind::Io
        | ErrorKind::Corruption
        | ErrorKind::Incompatible
        | ErrorKind::Compacted
        | ErrorKind::CursorExpired => Errno::EIO,
    };
    if !e.kind().is_user_error() {
        tracing::warn!(op, error = %e, errno = n.code(), "request failed");
    }
    n
}

/// ENAMETOOLONG for a name beyond 255 bytes, EINVAL for the others (a
/// name the kernel passes on is never empty, `.`, `..` or with `/`).
fn invalid_name(e: &Error) -> Errno {
    if e.to_string().contains("longer than") {
        Errno::ENAMETOOLONG
    } else {
        Errno::EINVAL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_map_to_posix_errnos() {
        let remote = |kind| Error::Remote {
            kind,
            message: "x".into(),
        };
        for (kind, want) in [
            (ErrorKind::NotFound, libc::ENOENT),
            (ErrorKind::AlreadyExists, libc::EEXIST),
            (ErrorKind::NotADirectory, libc::ENOTDIR),
            (ErrorKind::IsADirectory, libc::EISDIR),
            (ErrorKind::NotEmpty, libc::ENOTEMPTY),
            (ErrorKind::QuotaExceeded, libc::EDQUOT),
            (ErrorKind::OutcomeUnknown, libc::EIO),
            (ErrorKind::DeadlineExceeded, libc::ETIMEDOUT),
            (ErrorKind::Busy, libc::EAGAIN),
            (ErrorKind::PermissionDenied, libc::EACCES),
            (ErrorKind::NotPermitted, libc::EPERM),
        ] {
            assert_eq!(errno(&remote(kind), "t").code(), want, "{kind}");
        }
        let long = treelog_proto::path::validate_name(&"x".repeat(256)).unwrap_err();
        assert_eq!(errno(&long, "t").code(), libc::ENAMETOOLONG);
    }
}
