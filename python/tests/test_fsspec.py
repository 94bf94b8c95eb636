"""The fsspec filesystem: registration, URLs, the metadata operations, and
fsspec's own abstract tests where they apply (copies of empty files and
directories; contents are not treelog's)."""

from __future__ import annotations

import posixpath
import uuid

import fsspec
import pytest
from fsspec.tests.abstract import AbstractFixtures
from fsspec.tests.abstract.copy import AbstractCopyTests

from treelog.fsspec import TreelogFileSystem


@pytest.fixture
def tfs(server) -> TreelogFileSystem:
    return TreelogFileSystem(server.addr, skip_instance_cache=True)


@pytest.fixture
def base(tfs: TreelogFileSystem) -> str:
    p = f"/fs/{uuid.uuid4().hex[:12]}"
    tfs.makedirs(p)
    return p


def test_registered_and_urls(server) -> None:
    assert fsspec.get_filesystem_class("treelog") is TreelogFileSystem
    fs, path = fsspec.core.url_to_fs(f"treelog://{server.addr}/a/b/")
    assert isinstance(fs, TreelogFileSystem) and path == "/a/b"
    assert fs.client.server == server.addr
    assert TreelogFileSystem._strip_protocol("treelog://h:1") == "/"
    assert TreelogFileSystem._strip_protocol("/x/") == "/x"
    assert fs.unstrip_protocol("/x") == f"treelog://{server.addr}/x"
    with pytest.raises(ValueError):
        TreelogFileSystem()


def test_metadata_operations(tfs: TreelogFileSystem, base: str) -> None:
    tfs.mkdir(f"{base}/a/b")
    with pytest.raises(FileExistsError):
        tfs.mkdir(f"{base}/a/b")
    tfs.makedirs(f"{base}/a/b", exist_ok=True)
    with pytest.raises(FileExistsError):
        tfs.makedirs(f"{base}/a/b")
    tfs.touch(f"{base}/a/f")
    tfs.touch(f"{base}/a/b/g")
    tfs.client.set_size(f"{base}/a/b/g", 100)
    info = tfs.info(f"{base}/a/f")
    assert (info["name"], info["type"], info["size"], info["complete"]) == (f"{base}/a/f", "file", 0, True)
    assert info["mode"] == 0o100644
    assert tfs.ls(f"{base}/a", detail=False) == [f"{base}/a/b", f"{base}/a/f"]
    assert [d["type"] for d in tfs.ls(f"{base}/a")] == ["directory", "file"]
    assert tfs.ls(f"{base}/a/f", detail=False) == [f"{base}/a/f"]
    assert tfs.exists(f"{base}/a/f") and not tfs.exists(f"{base}/zz")
    assert tfs.isdir(f"{base}/a") and tfs.isfile(f"{base}/a/f")
    assert tfs.find(base) == [f"{base}/a/b/g", f"{base}/a/f"]
    assert tfs.find(base, withdirs=True) == [base, f"{base}/a", f"{base}/a/b", f"{base}/a/b/g", f"{base}/a/f"]
    assert tfs.du(base) == 100
    assert tfs.du(base, total=False) == {f"{base}/a/b/g": 100, f"{base}/a/f": 0}
    assert sorted(tfs.glob(f"{base}/**/g")) == [f"{base}/a/b/g"]
    assert tfs.glob(f"{base}/a/*") == [f"{base}/a/b", f"{base}/a/f"]
    walked = list(tfs.walk(base))
    assert walked[0] == (base, ["a"], []) and (f"{base}/a/b", [], ["g"]) in walked
    assert tfs.size(f"{base}/a/b/g") == 100
    assert tfs.modified(f"{base}/a/f").year >= 2024
    # touch again: the size goes back to 0, the time moves.
    tfs.touch(f"{base}/a/b/g")
    assert tfs.size(f"{base}/a/b/g") == 0
    tfs.mv(f"{base}/a/f", f"{base}/a/b")
    assert tfs.exists(f"{base}/a/b/f") and not tfs.exists(f"{base}/a/f")
    tfs.mv(f"{base}/a/b", f"{base}/c")
    assert tfs.ls(f"{base}/c", detail=False) == [f"{base}/c/f", f"{base}/c/g"]
    with pytest.raises(OSError):
        tfs.rmdir(f"{base}/c")
    tfs.rm_file(f"{base}/c/f")
    tfs.rm(f"{base}/c", recursive=True)
    assert tfs.ls(base, detail=False) == [f"{base}/a"]
    tfs.client.symlink("x", f"{base}/l")
    assert tfs.info(f"{base}/l")["type"] == "link" and tfs.info(f"{base}/l")["destination"] == "x"


def test_contents_are_not_treelogs(tfs: TreelogFileSystem, base: str) -> None:
    tfs.touch(f"{base}/f")
    for call in (
        lambda: tfs.open(f"{base}/f"),
        lambda: tfs.open(f"{base}/f", "wb"),
        lambda: tfs.cat_file(f"{base}/f"),
        lambda: tfs.pipe_file(f"{base}/g", b"x"),
        lambda: fsspec.open(f"treelog://{tfs.client.server}{base}/f").open(),
    ):
        with pytest.raises(NotImplementedError, match="not file contents"):
            call()
    tfs.client.set_size(f"{base}/f", 5)
    with pytest.raises(NotImplementedError, match="not file contents"):
        tfs.cp_file(f"{base}/f", f"{base}/g")


class TestTreelogAbstractCopy(AbstractFixtures, AbstractCopyTests):
    """fsspec's copy tests: their scenarios are empty files and
    directories, which a namespace copies in full."""

    @pytest.fixture
    def fs(self, server):
        return TreelogFileSystem(server.addr)

    @pytest.fixture
    def fs_path(self, fs):
        p = f"/abstract/{uuid.uuid4().hex[:12]}"
        fs.makedirs(p)
        return p

    @pytest.fixture
    def fs_join(self):
        return posixpath.join

    @pytest.fixture
    def fs_10_files_with_hashed_names(self):
        pytest.skip("the scenario writes file contents (pipe), which treelog does not store")

