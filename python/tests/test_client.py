"""The blocking client against a real server: every call, and the errors
mapped to Python's exceptions."""

from __future__ import annotations

import errno
import threading
import time

import pytest

import treelog


def test_mkdir_create_complete_stat(client: treelog.Client, root: str) -> None:
    s1 = client.mkdir(f"{root}/a/b", parents=True)
    s2 = client.create(f"{root}/a/b/f", mode=0o600, owner="alice", group="staff", block_size=4096)
    assert s2 > s1 > 0
    st = client.stat(f"{root}/a/b/f")
    assert isinstance(st, treelog.Stat)
    assert (st.kind, st.size, st.mode, st.owner, st.group, st.complete, st.block_size) == (
        "file", 0, 0o600, "alice", "staff", False, 4096)
    assert st.is_file and not st.is_dir and not st.is_symlink
    assert st.st_mode == 0o100600
    assert st.name == "f" and st.parent == client.stat(f"{root}/a/b").id
    s3 = client.complete(f"{root}/a/b/f", 1234)
    assert s3 > s2
    st = client.stat(f"{root}/a/b/f")
    assert st.complete and st.size == 1234
    assert client.lstat(f"{root}/a/b/f") == st
    d = client.stat(f"{root}/a")
    assert d.is_dir and d.mode == 0o755 and d.st_mode == 0o040755
    assert repr(st).startswith("Stat(id=") and 'name="f"' in repr(st)
    # mkdir with parents accepts an existing directory.
    client.mkdir(f"{root}/a", parents=True)
    assert client.create(f"{root}/x/y/z", parents=True) > 0
    assert client.stat(f"{root}/x/y").is_dir


def test_set_size_chmod_chown_utime(client: treelog.Client, root: str) -> None:
    p = f"{root}/f"
    client.create(p)
    client.set_size(p, 77)
    client.chmod(p, 0o640)
    client.chown(p, "bob")
    client.chown(p, group="ops")
    client.utime(p, 1_700_000_000.5)
    st = client.stat(p)
    assert (st.size, st.mode, st.owner, st.group, st.mtime_ms) == (77, 0o640, "bob", "ops", 1_700_000_000_500)
    assert st.mtime == 1_700_000_000.5
    before = time.time()
    client.utime(p)
    assert client.stat(p).mtime >= before - 5
    with pytest.raises(ValueError):
        client.utime(p, -1.0)


def test_rename_and_remove(client: treelog.Client, root: str) -> None:
    client.create(f"{root}/a")
    client.create(f"{root}/b")
    with pytest.raises(FileExistsError):
        client.rename(f"{root}/a", f"{root}/b")
    client.rename(f"{root}/a", f"{root}/b", overwrite=True)
    assert not client.exists(f"{root}/a")
    client.mkdir(f"{root}/d/e", parents=True)
    client.create(f"{root}/d/e/f")
    with pytest.raises(OSError) as e:
        client.remove(f"{root}/d")
    assert e.value.errno == errno.ENOTEMPTY and isinstance(e.value, treelog.NotEmptyError)
    client.remove(f"{root}/d", recursive=True)
    assert not client.exists(f"{root}/d/e/f")
    client.remove(f"{root}/b")
    assert [e.name for e in client.list(root)] == []


def test_symlink_readlink(client: treelog.Client, root: str) -> None:
    client.symlink("../elsewhere", f"{root}/l")
    st = client.stat(f"{root}/l")
    assert st.kind == "symlink" and st.is_symlink and st.st_mode & 0o170000 == 0o120000
    assert client.readlink(f"{root}/l") == "../elsewhere"
    client.symlink("t", f"{root}/p/q/l", parents=True)
    assert client.readlink(f"{root}/p/q/l") == "t"
    client.create(f"{root}/f")
    with pytest.raises(OSError) as e:
        client.readlink(f"{root}/f")
    assert isinstance(e.value, treelog.Error)


def test_xattrs(client: treelog.Client, root: str) -> None:
    p = f"{root}/f"
    client.create(p)
    assert client.xattrs(p) == {}
    client.setxattr(p, "user.b", b"2")
    client.setxattr(p, "user.a", b"\x00\x01")
    assert client.getxattr(p, "user.a") == b"\x00\x01"
    assert client.listxattr(p) == ["user.a", "user.b"]
    assert client.xattrs(p) == {"user.a": b"\x00\x01", "user.b": b"2"}
    with pytest.raises(FileExistsError):
        client.setxattr(p, "user.a", b"x", flag="create")
    with pytest.raises(FileNotFoundError):
        client.setxattr(p, "user.c", b"x", flag="replace")
    client.setxattr(p, "user.a", b"x", flag="replace")
    assert client.getxattr(p, "user.a") == b"x"
    client.removexattr(p, "user.a")
    with pytest.raises(FileNotFoundError):
        client.getxattr(p, "user.a")
    with pytest.raises(FileNotFoundError):
        client.removexattr(p, "user.a")
    with pytest.raises(ValueError):
        client.setxattr(p, "user.a", b"x", flag="sometimes")


def test_quotas_and_count(client: treelog.Client, root: str) -> None:
    q = f"{root}/q"
    client.mkdir(q)
    client.set_quota(q, inodes=3, bytes=100)
    client.create(f"{q}/a")
    client.complete(f"{q}/a", 60)
    client.mkdir(f"{q}/d")
    s = client.count(q)
    assert (s.files, s.directories, s.symlinks, s.bytes) == (1, 2, 0, 60)
    assert s.inodes == 3
    assert s.quota is not None
    assert (s.quota.limit_inodes, s.quota.limit_bytes, s.quota.files, s.quota.directories, s.quota.bytes) == (
        3, 100, 1, 1, 60)
    client.create(f"{q}/b")
    with pytest.raises(treelog.QuotaExceeded) as e:
        client.create(f"{q}/c")
    assert e.value.errno == errno.EDQUOT and e.value.kind == "quota_exceeded"
    with pytest.raises(treelog.QuotaExceeded):
        client.complete(f"{q}/b", 41)
    assert client.recount_quota(q) > 0
    client.clear_quota(q)
    assert client.count(q).quota is None
    client.create(f"{q}/c")
    # Clearing what is not there: nothing to do.
    client.clear_quota(q)
    with pytest.raises(FileNotFoundError):
        client.clear_quota(f"{root}/missing")


def test_list_pages_and_entries(client: treelog.Client, root: str) -> None:
    names = [f"n{i:03}" for i in range(250)]
    for n in names:
        client.create(f"{root}/{n}")
    client.mkdir(f"{root}/zdir")
    listing = client.list(root, page_size=7)
    assert isinstance(listing, treelog.Listing)
    entries = list(listing)
    assert [e.name for e in entries] == names + ["zdir"]
    assert entries[0].path == f"{root}/n000" and entries[0].stat.kind == "file"
    assert entries[-1].is_dir
    pages = list(client.list(root, page_size=100).pages())
    assert [len(p) for p in pages] == [100, 100, 51]
    assert pages[-1].next_start_after is None and pages[0].next_start_after == "n099"
    assert all(p.seq > 0 for p in pages)
    assert [e.name for e in client.list(root, start_after="n247")] == ["n248", "n249", "zdir"]
    page = client.list_page(root, start_after="n100", limit=2)
    assert [e.name for e in page.entries] == ["n101", "n102"] and page.next_start_after == "n102"
    with pytest.raises(ValueError):
        client.list(root, page_size=0)
    with pytest.raises(FileNotFoundError):
        list(client.list(f"{root}/missing"))
    with pytest.raises(NotADirectoryError):
        list(client.list(f"{root}/n000"))


def test_walk_is_depth_first_at_one_state(client: treelog.Client, root: str) -> None:
    for p in ["a/x", "a/y/z", "b"]:
        client.mkdir(f"{root}/{p}", parents=True)
    client.create(f"{root}/a/f")
    client.create(f"{root}/a/y/z/g")
    w = client.walk(root, page_size=1)
    first = next(w)
    assert w.seq is not None and first.path == f"{root}/a"
    # Moved after the walk began: the walk still sees the tree as it was.
    client.rename(f"{root}/a/y", f"{root}/b/y")
    rest = [e.path for e in w]
    assert rest == [f"{root}/{p}" for p in ["b", "a/f", "a/x", "a/y", "a/y/z", "a/y/z/g"]]
    assert [e.path for e in client.walk(f"{root}/b")] == [f"{root}/b/y", f"{root}/b/y/z", f"{root}/b/y/z/g"]


def test_stat_many_and_exists(client: treelog.Client, root: str) -> None:
    client.create(f"{root}/a")
    client.mkdir(f"{root}/d")
    r = client.stat_many([f"{root}/a", f"{root}/missing", f"{root}/d"])
    assert [s.name if s else None for s in r] == ["a", None, "d"]
    assert client.exists(f"{root}/a") and not client.exists(f"{root}/zz")


def test_consistency_and_min_seq(client: treelog.Client, server, root: str) -> None:
    seq = client.create(f"{root}/f")
    other = treelog.Client(server.addr)
    assert other.seen_seq <= client.seen_seq
    for c in (None, "session", "latest", "linearizable"):
        assert other.stat(f"{root}/f", consistency=c).name == "f"
    assert other.stat(f"{root}/f", min_seq=seq).name == "f"
    assert other.stat(f"{root}/f", consistency="latest", min_seq=seq).name == "f"
    assert other.seen_seq >= seq
    for f in (other.list_page, other.count, other.xattrs, other.listxattr):
        f(root if f in (other.list_page, other.count) else f"{root}/f", consistency="latest")
    with pytest.raises(ValueError):
        other.stat(f"{root}/f", consistency="eventual")
    with pytest.raises(ValueError):
        other.stat(f"{root}/f", consistency="linearizable", min_seq=1)


def test_ping_info_wait_for(client: treelog.Client, root: str) -> None:
    seq = client.create(f"{root}/f")
    assert client.ping() >= seq
    committed, start = client.info()
    assert committed >= seq and start >= 1
    assert client.wait_for(seq, 1.0) >= seq
    assert client.server is not None and client.server.startswith("127.0.0.1:")
    assert client.timeout == 30.0
    assert client.with_timeout(None).timeout is None
    assert client.with_timeout(2.5).timeout == 2.5
    with pytest.raises(ValueError):
        client.with_timeout(-1)


def test_errors_are_os_errors(client: treelog.Client, root: str) -> None:
    client.create(f"{root}/f")
    client.mkdir(f"{root}/d")
    cases = [
        (lambda: client.stat(f"{root}/nope"), FileNotFoundError, treelog.NotFoundError, errno.ENOENT, "not_found"),
        (lambda: client.create(f"{root}/f"), FileExistsError, treelog.AlreadyExistsError, errno.EEXIST, "already_exists"),
        (lambda: client.create(f"{root}/f/g"), NotADirectoryError, treelog.NotADirectoryError_, errno.ENOTDIR, "not_a_directory"),
        (lambda: client.complete(f"{root}/d", 1), IsADirectoryError, treelog.IsADirectoryError_, errno.EISDIR, "is_a_directory"),
        (lambda: client.stat("relative"), ValueError, treelog.InvalidArgument, errno.EINVAL, "invalid_path"),
    ]
    for call, builtin, cls, code, kind in cases:
        with pytest.raises(builtin) as e:
            call()
        assert isinstance(e.value, cls) and isinstance(e.value, treelog.Error)
        assert isinstance(e.value, OSError)
        assert e.value.errno == code, (kind, e.value)
        assert e.value.kind == kind
        assert e.value.not_applied
        assert str(e.value).startswith(f"[Errno {code}]")


def test_connect_refused_and_deadlines(new_server) -> None:
    s = new_server()
    with pytest.raises(treelog.ProtocolError) as e:
        treelog.Client(s.http.rsplit(":", 1)[0] + ":1", connect_timeout=0.5, timeout=2)
    assert isinstance(e.value, ConnectionError)
    c = treelog.Client(s.addr, timeout=1.0)
    c.mkdir("/d")
    s.pause()
    try:
        # A read that gets no answer in time: safe to retry.
        with pytest.raises(treelog.DeadlineExceeded) as e:
            c.stat("/d")
        assert isinstance(e.value, TimeoutError) and e.value.not_applied
        # A mutation sent but not answered: it may have been applied.
        with pytest.raises(treelog.OutcomeUnknown) as e:
            c.create("/f")
        assert not e.value.not_applied
    finally:
        s.resume()
    assert c.stat("/d").is_dir


def test_token_required(new_server, tmp_path) -> None:
    tok = tmp_path / "token"
    secret = "s3cret-" + "x" * 40
    tok.write_text(secret + "\n")
    s = new_server("--require-token-file", str(tok))
    with pytest.raises(treelog.Unauthorized) as e:
        treelog.Client(s.addr, timeout=5)
    assert isinstance(e.value, PermissionError)
    c = treelog.Client(s.addr, token=secret)
    assert c.mkdir("/ok") > 0


def test_threads_share_one_client(client: treelog.Client, root: str) -> None:
    errors = []

    def work(k: int) -> None:
        try:
            for i in range(30):
                client.create(f"{root}/t{k}-{i}")
                assert client.stat(f"{root}/t{k}-{i}").name == f"t{k}-{i}"
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert errors == []
    assert sum(1 for _ in client.list(root)) == 240


def test_cursors_ack_drop(client: treelog.Client, root: str) -> None:
    name = "c-" + root.rsplit("/", 1)[1]
    seq = client.create(f"{root}/f")
    sub = client.subscribe(prefix=root, cursor=name, from_seq=seq)
    item = sub.next(timeout=10)
    assert isinstance(item, treelog.Record) and item.seq == seq
    assert item.ack() is None
    sub.close()
    cur = {c.name: c for c in client.cursors()}[name]
    assert cur.acked == seq and cur.expired_ms is None and cur.lag >= 0
    client.ack(name, seq)
    client.drop_cursor(name)
    assert name not in {c.name for c in client.cursors()}
    with pytest.raises(FileNotFoundError):
        client.drop_cursor(name)
