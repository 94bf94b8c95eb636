"""The asyncio client: the same operations as awaitables, async
iterators, and many tasks sharing one client."""

from __future__ import annotations

import asyncio

import pytest

import treelog


async def test_operations(server, root: str) -> None:
    async with treelog.AsyncClient(server.addr) as c:
        assert "AsyncClient" in repr(c)
        s1 = await c.mkdir(f"{root}/d/e", parents=True)
        s2 = await c.create(f"{root}/d/f", mode=0o600)
        assert s2 > s1
        await c.complete(f"{root}/d/f", 5)
        await c.set_size(f"{root}/d/f", 6)
        await c.chmod(f"{root}/d/f", 0o644)
        await c.chown(f"{root}/d/f", "u", "g")
        await c.utime(f"{root}/d/f", 1000.0)
        st = await c.stat(f"{root}/d/f")
        assert (st.size, st.mode, st.owner, st.group, st.mtime_ms, st.complete) == (6, 0o644, "u", "g", 1_000_000, True)
        assert await c.lstat(f"{root}/d/f") == st
        assert await c.exists(f"{root}/d/f") and not await c.exists(f"{root}/nope")
        assert [s and s.name for s in await c.stat_many([f"{root}/d/f", f"{root}/x"])] == ["f", None]
        await c.symlink("t", f"{root}/l")
        assert await c.readlink(f"{root}/l") == "t"
        await c.setxattr(f"{root}/d/f", "user.a", b"1")
        assert await c.getxattr(f"{root}/d/f", "user.a") == b"1"
        assert await c.listxattr(f"{root}/d/f") == ["user.a"]
        assert await c.xattrs(f"{root}/d/f") == {"user.a": b"1"}
        await c.removexattr(f"{root}/d/f", "user.a")
        await c.set_quota(f"{root}/d", inodes=100)
        summary = await c.count(f"{root}/d")
        assert summary.files == 1 and summary.quota is not None and summary.quota.limit_inodes == 100
        await c.recount_quota(f"{root}/d")
        await c.clear_quota(f"{root}/d")
        await c.rename(f"{root}/d/f", f"{root}/g")
        names = [e.name async for e in c.list(root, page_size=1)]
        assert names == ["d", "g", "l"]
        pages = [p async for p in c.list(root, page_size=2).pages()]
        assert [len(p) for p in pages] == [2, 1]
        page = await c.list_page(root, limit=1)
        assert page.next_start_after == "d"
        walked = [e.path async for e in c.walk(root)]
        assert walked == [f"{root}/d", f"{root}/g", f"{root}/l", f"{root}/d/e"]
        await c.remove(f"{root}/d", recursive=True)
        assert await c.ping() > 0
        committed, _ = await c.info()
        assert await c.wait_for(committed, 1.0) >= committed
        with pytest.raises(FileNotFoundError):
            await c.stat(f"{root}/d")
        with pytest.raises(FileExistsError):
            await c.create(f"{root}/g")
        with pytest.raises(ValueError):
            await c.stat(f"{root}/g", consistency="bogus")


async def test_connect_classmethod_and_errors(server) -> None:
    c = await treelog.AsyncClient.connect(server.addr, timeout=5.0)
    assert c.server is not None
    lazy = treelog.AsyncClient("127.0.0.1:1", connect_timeout=0.2, timeout=1.0)
    assert lazy.server is None
    with pytest.raises(ConnectionError):
        await lazy.ping()


async def test_concurrent_tasks(server, root: str) -> None:
    c = treelog.AsyncClient(server.addr)

    async def task(k: int) -> list:
        seqs = []
        for i in range(20):
            seqs.append(await c.create(f"{root}/t{k:02}-{i:02}"))
            st = await c.stat(f"{root}/t{k:02}-{i:02}")
            assert st.name == f"t{k:02}-{i:02}"
        return seqs

    results = await asyncio.gather(*(task(k) for k in range(64)))
    seqs = [s for r in results for s in r]
    assert len(set(seqs)) == 64 * 20
    # Each task's own writes are in order.
    assert all(r == sorted(r) for r in results)
    n = 0
    async for _ in c.list(root, page_size=100):
        n += 1
    assert n == 64 * 20
    stats = await asyncio.gather(*(c.stat(f"{root}/t{k:02}-00") for k in range(64)))
    assert sorted(s.name for s in stats) == [f"t{k:02}-00" for k in range(64)]


async def test_subscribe_async_with_ack(server, root: str) -> None:
    c = treelog.AsyncClient(server.addr)
    name = "ac-" + root.rsplit("/", 1)[1]
    sub = await c.subscribe(prefix=root, cursor=name)
    seqs = [await c.create(f"{root}/f{i}") for i in range(5)]
    got = []
    async for item in sub:
        assert isinstance(item, treelog.Record)
        await item.ack()
        got.append(item.seq)
        if len(got) == 5:
            break
    assert got == seqs
    assert sub.position == seqs[-1]
    await sub.close()
    cur = {x.name: x for x in await c.cursors()}[name]
    assert cur.acked == seqs[-1]
    async with c.subscribe(prefix=root, snapshot=True) as snap:
        first = await snap.next(timeout=10)
        assert isinstance(first, treelog.SnapshotStart)
        assert isinstance(await snap.next(timeout=10), treelog.SnapshotEntry)  # the root's
    await c.ack(name, seqs[-1])
    await c.drop_cursor(name)


async def test_a_slow_request_does_not_block_the_loop(server, root: str) -> None:
    c = treelog.AsyncClient(server.addr)
    seq = await c.ping()
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.01)

    t = asyncio.create_task(ticker())
    # The server holds this request until seq + 1 commits (which nothing
    # writes) or 0.5 s pass; the loop keeps running meanwhile.
    await c.wait_for(seq + 1_000_000, 0.5)
    t.cancel()
    assert ticks >= 2
