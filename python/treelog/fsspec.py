"""An fsspec filesystem over a treelog namespace: ``treelog://host:port/path``.

Metadata only: listing, stat, directories, empty files, moves and deletes,
``find``, ``du``, ``walk`` and ``glob`` work as on any fsspec filesystem;
treelog stores a namespace, not file contents, so opening a file (and
copying one that is not empty) raises :class:`NotImplementedError`.

>>> import fsspec
>>> fs = fsspec.filesystem("treelog", endpoints="localhost:7400")
>>> fs.makedirs("/datasets/raw", exist_ok=True)
>>> fs.ls("/datasets", detail=False)
['/datasets/raw']

``fsspec.open("treelog://host:7400/datasets")`` and friends find the class
through the ``fsspec.specs`` entry point this package declares.
"""

from __future__ import annotations

import datetime as _dt
import posixpath
from typing import Any, Dict, List, Optional, Union

from fsspec.spec import AbstractFileSystem

from . import Client, Stat

__all__ = ["TreelogFileSystem"]

_NO_CONTENTS = (
    "treelog keeps a namespace's metadata (names, sizes, modes, times), not "
    "file contents: read and write the bytes in the storage that holds them, "
    "and record them here with create()/complete()"
)


def _kind(st: Stat) -> str:
    return {"directory": "directory", "file": "file"}.get(st.kind, "link")


class TreelogFileSystem(AbstractFileSystem):
    """The namespace of a treelog server (or cluster) as an fsspec filesystem.

    ``endpoints``: ``"host:port"`` or several (``"a:7400,b:7400"``), as
    :class:`treelog.Client` takes them (a ``treelog://host:port/...`` URL
    gives them). ``token``, ``tls``, ``timeout``: the client's. ``client``:
    an existing :class:`treelog.Client` to use instead.
    """

    protocol = "treelog"
    root_marker = "/"

    def __init__(
        self,
        endpoints: Optional[str] = None,
        *,
        token: Optional[str] = None,
        tls: Any = None,
        timeout: Optional[float] = 30.0,
        client: Optional[Client] = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if client is None:
            if not endpoints:
                raise ValueError(
                    "TreelogFileSystem needs endpoints= (\"host:port\") or a "
                    "treelog://host:port/ URL"
                )
            client = Client(endpoints, token=token, tls=tls, timeout=timeout)
        self.client = client

    # Paths ------------------------------------------------------------

    @classmethod
    def _strip_protocol(cls, path: Union[str, List[str]]) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        path = str(path)
        if path.startswith("treelog://"):
            rest = path[len("treelog://") :]
            # treelog://host:port/a/b: the server, then the path.
            if not rest.startswith("/"):
                slash = rest.find("/")
                rest = "/" if slash < 0 else rest[slash:]
            path = rest
        elif path.startswith("treelog::"):
            path = path[len("treelog::") :]
        if not path.startswith("/"):
            path = "/" + path
        path = path.rstrip("/")
        return path or "/"

    @staticmethod
    def _get_kwargs_from_urls(path: str) -> Dict[str, Any]:
        if path.startswith("treelog://"):
            netloc = path[len("treelog://") :].split("/", 1)[0]
            if netloc:
                return {"endpoints": netloc}
        return {}

    def unstrip_protocol(self, name: str) -> str:
        if name.startswith("treelog://"):
            return name
        server = self.client.server or ""
        return f"treelog://{server}{name}"

    # Reads -------------------------------------------------------------

    def _details(self, path: str, st: Stat) -> Dict[str, Any]:
        return {
            "name": path,
            "size": st.size,
            "type": _kind(st),
            "islink": st.is_symlink,
            "mode": st.st_mode,
            "id": st.id,
            "owner": st.owner,
            "group": st.group,
            "created": st.ctime,
            "mtime": st.mtime,
            "complete": st.complete,
        }

    def info(self, path: str, **kwargs: Any) -> Dict[str, Any]:
        path = self._strip_protocol(path)
        st = self.client.stat(path)
        d = self._details(path, st)
        if st.is_symlink:
            d["destination"] = self.client.readlink(path)
        return d

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> List[Any]:
        path = self._strip_protocol(path)
        try:
            entries = [(e.path, e.stat) for e in self.client.list(path)]
        except NotADirectoryError:
            # fsspec lists a file as itself.
            entries = [(path, self.client.stat(path))]
        if detail:
            return [self._details(p, st) for p, st in entries]
        return [p for p, _ in entries]

    def exists(self, path: str, **kwargs: Any) -> bool:
        return self.client.exists(self._strip_protocol(path))

    def du(
        self,
        path: str,
        total: bool = True,
        maxdepth: Optional[int] = None,
        withdirs: bool = False,
        **kwargs: Any,
    ) -> Any:
        if total and maxdepth is None:
            # The server counts (from a quota's counters where it has them).
            return self.client.count(self._strip_protocol(path)).bytes
        return super().du(path, total=total, maxdepth=maxdepth, withdirs=withdirs, **kwargs)

    def created(self, path: str) -> _dt.datetime:
        st = self.client.stat(self._strip_protocol(path))
        return _dt.datetime.fromtimestamp(st.ctime, tz=_dt.timezone.utc)

    def modified(self, path: str) -> _dt.datetime:
        st = self.client.stat(self._strip_protocol(path))
        return _dt.datetime.fromtimestamp(st.mtime, tz=_dt.timezone.utc)

    # Writes ------------------------------------------------------------

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if create_parents:
            # Treelog's `parents` accepts an existing directory; fsspec's
            # mkdir does not.
            if self.client.exists(path):
                raise FileExistsError(path)
            self.client.mkdir(path, parents=True)
        else:
            self.client.mkdir(path)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        if not exist_ok and self.client.exists(path):
            raise FileExistsError(path)
        self.client.mkdir(path, parents=True)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        if not self.client.stat(path).is_dir:
            raise NotADirectoryError(path)
        self.client.remove(path)

    def rm_file(self, path: str) -> None:
        self.client.remove(self._strip_protocol(path))

    def _rm(self, path: str) -> None:
        self.rm_file(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: Optional[int] = None) -> None:
        if isinstance(path, str) and maxdepth is None and not any(c in path for c in "*?["):
            # One record: the server removes the subtree atomically.
            self.client.remove(self._strip_protocol(path), recursive=recursive)
            return
        super().rm(path, recursive=recursive, maxdepth=maxdepth)

    def mv(self, path1: Any, path2: Any, recursive: bool = False, maxdepth: Optional[int] = None, **kwargs: Any) -> None:
        if not isinstance(path1, str) or not isinstance(path2, str) or any(c in path1 for c in "*?["):
            return super().mv(path1, path2, recursive=recursive, maxdepth=maxdepth, **kwargs)
        src = self._strip_protocol(path1)
        dst = self._strip_protocol(path2)
        if src == dst:
            return None
        # As shutil.move: into an existing directory.
        try:
            if self.client.stat(dst).is_dir:
                dst = posixpath.join(dst, posixpath.basename(src))
        except FileNotFoundError:
            pass
        self.client.rename(src, dst)
        return None

    def touch(self, path: str, truncate: bool = True, **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        try:
            st = self.client.stat(path)
        except FileNotFoundError:
            # As object stores (and LocalFileSystem(auto_mkdir=True)): the
            # missing parents come with it.
            self.client.create(path, parents=True)
            self.client.complete(path, 0)
            return
        if st.is_dir:
            raise IsADirectoryError(path)
        if truncate and st.size != 0:
            self.client.set_size(path, 0)
        self.client.utime(path)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        src = self._strip_protocol(path1)
        dst = self._strip_protocol(path2)
        st = self.client.stat(src)
        if st.is_dir:
            self.makedirs(dst, exist_ok=True)
            return
        if st.is_symlink:
            self.client.symlink(self.client.readlink(src), dst, parents=True)
            return
        if st.size != 0:
            raise NotImplementedError(f"copying {src}: {_NO_CONTENTS}")
        # An empty file has nothing to copy but its metadata.
        if self.client.exists(dst):
            self.client.remove(dst)
        self.client.create(dst, parents=True, mode=st.mode)
        self.client.complete(dst, 0)

    def _open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        raise NotImplementedError(f"opening {path}: {_NO_CONTENTS}")

    def open(self, path: str, mode: str = "rb", **kwargs: Any) -> Any:
        raise NotImplementedError(f"opening {self._strip_protocol(path)}: {_NO_CONTENTS}")

    def cat_file(self, path: str, start: Optional[int] = None, end: Optional[int] = None, **kwargs: Any) -> bytes:
        raise NotImplementedError(f"reading {self._strip_protocol(path)}: {_NO_CONTENTS}")

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        raise NotImplementedError(f"writing {self._strip_protocol(path)}: {_NO_CONTENTS}")
