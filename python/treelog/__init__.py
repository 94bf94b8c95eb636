"""treelog: the Python client of a treelog server.

A native package over the Rust client (``treelog-client``): the same
protocol, deadlines, reconnects and leader following.

>>> import treelog
>>> c = treelog.Client("localhost:7400")
>>> c.mkdir("/datasets/raw", parents=True)
>>> c.create("/datasets/raw/part-0.parquet"); c.complete("/datasets/raw/part-0.parquet", 1 << 20)
>>> [e.name for e in c.list("/datasets/raw")]
['part-0.parquet']

:class:`Client` blocks (with the GIL released); :class:`AsyncClient` has the
same methods as awaitables. ``subscribe`` gives the change stream;
``treelog.fsspec.TreelogFileSystem`` (``treelog://host:port/path``) the
namespace to fsspec's tools.
"""

from . import _errors
from ._errors import (
    AlreadyExistsError,
    Busy,
    Compacted,
    CursorExpired,
    DeadlineExceeded,
    Error,
    InvalidArgument,
    IsADirectoryError_,
    Lagging,
    NotADirectoryError_,
    NotEmptyError,
    NotFoundError,
    NotLeader,
    NotPermitted,
    OutcomeUnknown,
    PermissionDenied,
    ProtocolError,
    QuotaExceeded,
    Unauthorized,
    Unavailable,
)
from ._treelog import (
    TLS,
    AsyncClient,
    AsyncListing,
    AsyncSubscription,
    AsyncWalk,
    Client,
    Cursor,
    DirEntry,
    Event,
    Listing,
    Page,
    Progress,
    Quota,
    Record,
    SnapshotEnd,
    SnapshotEntry,
    SnapshotStart,
    Stat,
    Subscription,
    Summary,
    Walk,
)

__version__ = "0.1.0"

__all__ = [  # and every error class, as `_errors` lists them
    "Client",
    "AsyncClient",
    "TLS",
    "Stat",
    "DirEntry",
    "Page",
    "Summary",
    "Quota",
    "Cursor",
    "Listing",
    "AsyncListing",
    "Walk",
    "AsyncWalk",
    "Subscription",
    "AsyncSubscription",
    "SnapshotStart",
    "SnapshotEntry",
    "SnapshotEnd",
    "Record",
    "Progress",
    "Event",
] + list(_errors.__all__)
