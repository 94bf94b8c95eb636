"""The change stream from Python: typed items, filters, snapshots,
acknowledgements, and resuming after the server is killed."""

from __future__ import annotations

import uuid

import pytest

import treelog


def drain(sub: treelog.Subscription, n: int, timeout: float = 10.0) -> list:
    out = []
    for _ in range(n):
        item = sub.next(timeout=timeout)
        assert item is not None, f"only {len(out)} of {n} items: {out}"
        out.append(item)
    return out


def test_snapshot_then_records(client: treelog.Client, root: str) -> None:
    client.mkdir(f"{root}/d")
    client.create(f"{root}/d/f")
    client.create("/t/outside-" + uuid.uuid4().hex)
    with client.subscribe(prefix=root, snapshot=True) as sub:
        start, e1, e2, e3, end = drain(sub, 5)
        assert isinstance(start, treelog.SnapshotStart) and start.prefix == root and not start.resync
        assert start.position is None
        assert [type(e) for e in (e1, e2, e3)] == [treelog.SnapshotEntry] * 3
        assert [e.path for e in (e1, e2, e3)] == [root, f"{root}/d", f"{root}/d/f"]
        assert e3.stat.kind == "file"
        assert isinstance(end, treelog.SnapshotEnd) and end.seq == start.seq and end.position == end.seq
        assert sub.position == end.seq
        s_create = client.create(f"{root}/g")
        client.complete(f"{root}/g", 10)
        client.rename(f"{root}/g", f"{root}/d/g")
        client.setxattr(f"{root}/d/g", "user.k", b"v")
        client.symlink("tgt", f"{root}/l")
        client.remove(f"{root}/l")
        recs = drain(sub, 6)
        assert all(isinstance(r, treelog.Record) for r in recs)
        assert recs[0].seq == s_create and [r.seq for r in recs] == sorted(r.seq for r in recs)
        evs = [r.events[0] for r in recs]
        assert [e.kind for e in evs] == ["create", "complete", "rename", "set_xattr", "symlink", "delete"]
        assert all(e.scope == "inside" for e in evs)
        create, complete, rename, xattr, symlink, delete = evs
        assert create.path == f"{root}/g" and create.stat.kind == "file" and create.old is None
        assert complete.old.size == 0 and complete.stat.size == 10 and complete.stat.complete
        assert rename.old_path == f"{root}/g" and rename.path == f"{root}/d/g" and rename.stat.name == "g"
        assert (xattr.xattr, xattr.value, xattr.old_value) == ("user.k", b"v", None)
        assert symlink.target == "tgt" and symlink.stat.is_symlink
        assert delete.path == f"{root}/l" and delete.id == symlink.id
        assert recs[0].time_ms > 0 and "Record(seq=" in repr(recs[0])
        with pytest.raises(ValueError):
            recs[0].ack()  # no cursor


def test_kinds_filter_and_progress(client: treelog.Client, root: str) -> None:
    seq = client.ping()
    sub = client.subscribe(prefix=root, from_seq=seq + 1, kinds=["delete"])
    client.create(f"{root}/a")
    client.create(f"{root}/b")
    s = client.remove(f"{root}/a")
    item = sub.next(timeout=10)
    # Records that do not pass are covered by a later record or progress.
    while isinstance(item, treelog.Progress):
        assert item.position == item.seq
        item = sub.next(timeout=10)
    assert isinstance(item, treelog.Record) and item.seq == s and item.events[0].kind == "delete"
    with pytest.raises(ValueError):
        client.subscribe(kinds=["explode"])
    with pytest.raises(ValueError):
        client.subscribe(snapshot=True, from_seq=3)
    sub.close()
    with pytest.raises(ValueError):
        sub.next(timeout=1)


def test_quota_events(client: treelog.Client, root: str) -> None:
    sub = client.subscribe(prefix=root)
    client.set_quota(root, inodes=10)
    client.clear_quota(root)
    a, b = drain(sub, 2)
    assert a.events[0].kind == "set_quota" and a.events[0].quota.limit_inodes == 10
    assert b.events[0].kind == "clear_quota" and b.events[0].quota.limit_inodes == 10


def test_cursor_resumes_after_the_server_is_killed(new_server) -> None:
    s = new_server()
    c = treelog.Client(s.addr)
    c.mkdir("/data")
    sub = c.subscribe(prefix="/data", cursor="indexer", snapshot=True)
    items = drain(sub, 3)
    assert isinstance(items[-1], treelog.SnapshotEnd)
    items[-1].ack()
    seqs = [c.create(f"/data/f{i}") for i in range(10)]
    got = drain(sub, 10)
    assert [r.seq for r in got] == seqs
    # Processed (and acknowledged) up to the fifth record only.
    got[4].ack()
    sub.close()
    s.kill()
    s.start()
    more = [c.create(f"/data/g{i}") for i in range(3)]
    sub = c.subscribe(prefix="/data", cursor="indexer", snapshot=True)
    again = drain(sub, 8)
    # At least once: everything after the acknowledged position, in order,
    # no snapshot (the cursor exists).
    assert [r.seq for r in again] == seqs[5:] + more
    assert [r.events[0].path for r in again[-3:]] == [f"/data/g{i}" for i in range(3)]


def test_live_subscription_reconnects_across_a_kill(new_server) -> None:
    s = new_server()
    c = treelog.Client(s.addr)
    sub = c.subscribe(prefix="/")
    first = [c.mkdir(f"/a{i}") for i in range(5)]
    assert [r.seq for r in drain(sub, 5)] == first
    s.kill()
    s.start()
    second = [c.mkdir(f"/b{i}") for i in range(5)]
    # The same subscription: it reconnected by itself, no gap, no duplicate.
    assert [r.seq for r in drain(sub, 5, timeout=30)] == second
    assert sub.reconnects >= 1
    assert sub.position == second[-1]


def test_compacted(new_server) -> None:
    s = new_server()
    c = treelog.Client(s.addr)
    for i in range(30):
        c.mkdir(f"/d{i}")
    s.stop()
    s.cli("admin", "retention", "--max-records", "5")
    s.start()
    c = treelog.Client(s.addr)
    _, start = c.info()
    assert start > 1
    with pytest.raises(treelog.Compacted) as e:
        sub = c.subscribe(from_seq=1)
        sub.next(timeout=10)
    assert e.value.kind == "compacted" and e.value.not_applied
    # The way back: a snapshot.
    sub = c.subscribe(snapshot=True)
    assert isinstance(sub.next(timeout=10), treelog.SnapshotStart)


def test_subscriber_keeps_up_with_a_writer(client: treelog.Client, root: str) -> None:
    sub = client.subscribe(prefix=root)
    n = 2000
    last = 0
    for i in range(n):
        last = client.create(f"{root}/f{i}")
    seen = 0
    while True:
        item = sub.next(timeout=30)
        assert item is not None
        if isinstance(item, treelog.Record):
            seen += len(item.events)
        if item.position == last:
            break
    assert seen == n

