"""The exceptions treelog raises.

Every error is a :class:`treelog.Error`, itself an :class:`OSError` whose
``errno`` is the nearest POSIX code and whose ``kind`` is the server's
error kind (``"not_found"``, ``"outcome_unknown"``, ...). The ones a
filesystem user expects are also the built-in classes: a missing path is a
:class:`FileNotFoundError`, a taken name a :class:`FileExistsError`, and so
on, so ``except FileNotFoundError`` works as with :mod:`os`.
"""

from __future__ import annotations

import errno as _errno
from typing import Dict, Optional, Tuple, Type

__all__ = [
    "Error",
    "NotFoundError",
    "AlreadyExistsError",
    "NotADirectoryError_",
    "IsADirectoryError_",
    "NotEmptyError",
    "InvalidArgument",
    "QuotaExceeded",
    "NotLeader",
    "Lagging",
    "Compacted",
    "CursorExpired",
    "OutcomeUnknown",
    "DeadlineExceeded",
    "Unavailable",
    "ProtocolError",
    "Unauthorized",
    "PermissionDenied",
    "NotPermitted",
    "Busy",
]


class Error(OSError):
    """An error reported by a treelog server or by the client.

    ``kind`` is the server's error kind (``"not_found"``, ``"busy"``, ...),
    stable across releases; ``errno`` the nearest POSIX code.
    """

    kind: str = "io"

    @property
    def not_applied(self) -> bool:
        """True when a mutation that failed so was certainly not applied
        (every kind but ``outcome_unknown``): retrying it is safe."""
        return self.kind != "outcome_unknown"


class NotFoundError(Error, FileNotFoundError):
    """A path component, inode or extended attribute does not exist."""

    kind = "not_found"


class AlreadyExistsError(Error, FileExistsError):
    """The target name (or extended attribute) is already taken."""

    kind = "already_exists"


class NotADirectoryError_(Error, NotADirectoryError):
    """A path component that must be a directory is not one."""

    kind = "not_a_directory"


class IsADirectoryError_(Error, IsADirectoryError):
    """The operation needs a file but the target is a directory."""

    kind = "is_a_directory"


class NotEmptyError(Error):
    """A directory that must be empty is not (``remove`` without
    ``recursive=True``)."""

    kind = "not_empty"


class InvalidArgument(Error, ValueError):
    """A bad name, path or argument (``kind``: ``invalid_name``,
    ``invalid_path`` or ``invalid_argument``)."""

    kind = "invalid_argument"


class QuotaExceeded(Error):
    """A write would pass a directory's quota; nothing was written."""

    kind = "quota_exceeded"


class NotLeader(Error):
    """The node does not accept writes (a replica, or a cluster's
    follower); ``leader`` names the leader when the node knows it. Not
    applied. A client with ``follow_leader=True`` (the default) follows it
    by itself and raises this only when no leader could be found in time."""

    kind = "not_leader"
    leader: Optional[str] = None


class Lagging(Error):
    """A replica had not applied the sequence a read asked for within its
    wait bound. Retry, or read on the leader."""

    kind = "lagging"


class Compacted(Error):
    """The log position asked for was removed by retention (or a pinned
    view expired). Start again from a snapshot
    (``subscribe(snapshot=True)``)."""

    kind = "compacted"


class CursorExpired(Error):
    """A durable cursor fell too far behind and was expired by retention:
    drop it and subscribe again from a snapshot."""

    kind = "cursor_expired"


class OutcomeUnknown(Error):
    """A mutation was sent but no reply came (the connection was lost, or
    the deadline passed): it may or may not have been applied. Read the
    state before sending it again."""

    kind = "outcome_unknown"


class DeadlineExceeded(Error, TimeoutError):
    """The request's deadline passed and nothing that could change the
    store was sent: retrying is safe."""

    kind = "deadline_exceeded"


class Unavailable(Error, ConnectionError):
    """The server is shutting down, or its writer stopped (not applied)."""

    kind = "shutting_down"


class ProtocolError(Error, ConnectionError):
    """A lost or refused connection, a failed handshake, a malformed frame."""

    kind = "protocol"


class Unauthorized(Error, PermissionError):
    """The token was missing or wrong."""

    kind = "unauthorized"


class PermissionDenied(Error, PermissionError):
    """The connection's credential does not grant the request, or (on a
    server that enforces permissions) the caller's permission bits do not."""

    kind = "permission_denied"


class NotPermitted(Error, PermissionError):
    """On a server that enforces permissions: the operation is reserved to
    the entry's owner or the superuser (chmod, chown, the sticky bit)."""

    kind = "not_permitted"


class Busy(Error):
    """A server limit was reached (connections, subscriptions)."""

    kind = "busy"


# The server's error kinds: the class raised and the errno it carries.
BY_KIND: Dict[str, Tuple[Type[Error], int]] = {
    "not_found": (NotFoundError, _errno.ENOENT),
    "already_exists": (AlreadyExistsError, _errno.EEXIST),
    "not_a_directory": (NotADirectoryError_, _errno.ENOTDIR),
    "is_a_directory": (IsADirectoryError_, _errno.EISDIR),
    "not_empty": (NotEmptyError, _errno.ENOTEMPTY),
    "invalid_name": (InvalidArgument, _errno.EINVAL),
    "invalid_path": (InvalidArgument, _errno.EINVAL),
    "invalid_argument": (InvalidArgument, _errno.EINVAL),
    "dictionary_full": (Error, _errno.ENOSPC),
    "not_leader": (NotLeader, _errno.EROFS),
    "lagging": (Lagging, _errno.EAGAIN),
    "compacted": (Compacted, _errno.ERANGE),
    "cursor_expired": (CursorExpired, _errno.ESTALE),
    "corruption": (Error, _errno.EIO),
    "incompatible": (Error, _errno.EPROTONOSUPPORT),
    "writer_stopped": (Unavailable, _errno.EIO),
    "shutting_down": (Unavailable, _errno.ESHUTDOWN),
    "protocol": (ProtocolError, _errno.EPROTO),
    "unauthorized": (Unauthorized, _errno.EACCES),
    "busy": (Busy, _errno.EBUSY),
    "io": (Error, _errno.EIO),
    "outcome_unknown": (OutcomeUnknown, _errno.EIO),
    "quota_exceeded": (QuotaExceeded, _errno.EDQUOT),
    "permission_denied": (PermissionDenied, _errno.EACCES),
    "not_permitted": (NotPermitted, _errno.EPERM),
    "deadline_exceeded": (DeadlineExceeded, _errno.ETIMEDOUT),
}


def _make(kind: str, message: str) -> Error:
    """The exception for an error of ``kind`` (called by the native module)."""
    cls, code = BY_KIND.get(kind, (Error, _errno.EIO))
    e = cls(code, message)
    e.kind = kind
    return e
