"""Throughput of the Python client beside the Rust client and redis-py.

    python python/bench.py [--server HOST:PORT] [--ops N]

Against a running server (``--server``), or one started here from
$TREELOG_BIN / ``treelog`` on PATH (build it with ``--release``: a debug
server makes every figure meaningless, and so does a debug build of this
package: ``maturin develop --release``). In one run, against the same
server:

- stats/s and creates/s from Python: blocking, 1 thread, one request at a
  time; blocking ``stat_many`` in pipelined batches of 64; asyncio, 64
  tasks on one client;
- the same workloads from the Rust client (``treelog-client``, the code
  under this package) driven by Rust tasks: 1 in flight, 64 in flight,
  batches of 64;
- a Python subscriber (a thread iterating ``subscribe()``) while 64 asyncio
  tasks create files: the writer's rate with and without it, and how far
  behind the subscriber was when the writer finished;
- redis-py against a local redis-server (durable: ``appendonly yes``,
  ``appendfsync always``, as the Rust benchmark's Redis peer): ``GET`` of a
  70-byte value (Redis's floor for a stat), pipelined by 64 and from 64
  asyncio tasks; creates as JuiceFS's layout makes them (one Lua script).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, List, Optional, Tuple

import treelog
from treelog._treelog import _bench_rust

PIPELINE = 64
TASKS = 64


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            sys.exit(f"{what} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)
    sys.exit(f"{what} did not listen on {port}")


def rate(n: int, f: Callable[[], None]) -> float:
    t0 = time.perf_counter()
    f()
    return n / (time.perf_counter() - t0)


async def arate(n: int, tasks: int, op: Callable[[int], "asyncio.Future"]) -> float:
    counter = iter(range(n))

    async def worker() -> None:
        for i in counter:
            await op(i)

    t0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return n / (time.perf_counter() - t0)


def row(name: str, py: float, rust: Optional[float] = None, redis: Optional[float] = None) -> None:
    cells = [f"{name:<44}", f"{py:>10,.0f}"]
    cells.append(f"{rust:>10,.0f}  {py / rust:>5.2f}x" if rust else " " * 18)
    cells.append(f"{redis:>10,.0f}" if redis else "")
    print("  ".join(cells))


def treelog_rows(addr: str, ops: int) -> None:
    c = treelog.Client(addr)
    ac = treelog.AsyncClient(addr)
    d = f"/bench-{uuid.uuid4().hex[:8]}"
    c.mkdir(d)
    files = 1000

    async def setup() -> None:
        await arate(files, TASKS, lambda i: ac.create(f"{d}/f{i}"))

    asyncio.run(setup())
    lone = max(ops // 8, 500)
    paths = [f"{d}/f{i % files}" for i in range(ops)]

    print(f"{'':<44}  {'Python/s':>10}  {'Rust/s':>10}  {'ratio':>6}  {'redis-py/s':>10}")
    print("stats by path")
    py = rate(lone, lambda: [c.stat(paths[i]) for i in range(lone)])
    rust = _bench_rust(addr, "stat", d, lone, 1, modulo=files)
    row("1 thread, one at a time (Rust: 1 in flight)", py, rust)

    def piped() -> None:
        for b in range(0, ops, PIPELINE):
            c.stat_many(paths[b : b + PIPELINE])

    py = rate(ops, piped)
    rust = _bench_rust(addr, "stat_many", d, ops, 1, modulo=files, batch=PIPELINE)
    row(f"pipelined, batches of {PIPELINE} (stat_many)", py, rust)
    py = asyncio.run(arate(ops, TASKS, lambda i: ac.stat(paths[i])))
    rust = _bench_rust(addr, "stat", d, ops, TASKS, modulo=files)
    row(f"asyncio, {TASKS} tasks (Rust: {TASKS} in flight)", py, rust)

    print("creates")
    py = rate(lone, lambda: [c.create(f"{d}/s{i}") for i in range(lone)])
    rust = _bench_rust(addr, "create", d, lone, 1, start=0)
    row("1 thread, one at a time (Rust: 1 in flight)", py, rust)
    py = asyncio.run(arate(ops, TASKS, lambda i: ac.create(f"{d}/a{i}")))
    rust = _bench_rust(addr, "create", d, ops, TASKS, start=lone)
    row(f"asyncio, {TASKS} tasks (Rust: {TASKS} in flight)", py, rust)

    print("a Python subscriber while 64 asyncio tasks create")
    alone = asyncio.run(arate(ops, TASKS, lambda i: ac.create(f"{d}/w{i}")))
    sub_dir = f"{d}/sub"
    c.mkdir(sub_dir)
    sub = c.subscribe(prefix=sub_dir)
    seen: List[int] = [0, 0]  # events, last position
    done = threading.Event()

    def consume() -> None:
        for item in sub:
            if isinstance(item, treelog.Record):
                seen[0] += len(item.events)
            seen[1] = item.position or seen[1]
            if seen[0] >= ops:
                done.set()
                return

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    t0 = time.perf_counter()
    with_sub = asyncio.run(arate(ops, TASKS, lambda i: ac.create(f"{sub_dir}/f{i}")))
    wrote = time.perf_counter()
    behind = ops - seen[0]
    done.wait(120)
    caught = time.perf_counter()
    print(f"  writer alone: {alone:,.0f} creates/s; with the subscriber: {with_sub:,.0f} creates/s")
    print(
        f"  subscriber: {seen[0]:,} events, {seen[0] / (caught - t0):,.0f}/s; "
        f"{behind:,} behind when the writer finished, caught up {1000 * (caught - wrote):.0f} ms later"
    )
    sub.close()


CREATE = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then return 0 end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('SET', KEYS[2], ARGV[3])
redis.call('SET', KEYS[3], ARGV[3])
redis.call('INCRBY', 'usedSpace', 4096)
redis.call('INCR', 'totalInodes')
return 1
"""


def redis_rows(redis_bin: str, ops: int) -> Optional[Tuple[float, float, float, float, float]]:
    try:
        import redis
        import redis.asyncio as aredis
    except ImportError:
        print("redis-py not installed (pip install redis): no Redis rows")
        return None
    tmp = tempfile.mkdtemp(prefix="bench-redis-")
    port = free_port()
    proc = subprocess.Popen(
        [redis_bin, "--port", str(port), "--dir", tmp, "--appendonly", "yes", "--appendfsync", "always",
         "--save", ""],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_port(port, proc, "redis-server")
        r = redis.Redis(port=port)
        attr = b"\x07" * 70
        for i in range(1000):
            r.set(f"i{i}", attr)
        lone = max(ops // 8, 500)
        get1 = rate(lone, lambda: [r.get(f"i{i % 1000}") for i in range(lone)])

        def piped() -> None:
            for b in range(0, ops, PIPELINE):
                p = r.pipeline(transaction=False)
                for i in range(b, b + PIPELINE):
                    p.get(f"i{i % 1000}")
                p.execute()

        getp = rate(ops, piped)
        create = r.register_script(CREATE)
        nxt = [10_000]

        def mk(i: int, client) -> object:
            nxt[0] += 1
            return create(keys=["d1", f"i{nxt[0]}", "i1"], args=[f"f{i}", f"f:{nxt[0]}", attr], client=client)

        create1 = rate(lone, lambda: [mk(i, r) for i in range(lone)])

        async def aio() -> Tuple[float, float]:
            ar = aredis.Redis(port=port, max_connections=TASKS)
            acreate = ar.register_script(CREATE)

            async def amk(i: int) -> None:
                nxt[0] += 1
                await acreate(keys=["d2", f"i{nxt[0]}", "i1"], args=[f"f{i}", f"f:{nxt[0]}", attr])

            g = await arate(ops, TASKS, lambda i: ar.get(f"i{i % 1000}"))
            cr = await arate(ops, TASKS, amk)
            await ar.aclose()
            return g, cr

        geta, createa = asyncio.run(aio())
        return get1, getp, geta, create1, createa
    finally:
        proc.kill()
        proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--server", help="HOST:PORT of a running treelog server (default: start one)")
    ap.add_argument("--ops", type=int, default=40_000)
    ap.add_argument("--redis-server", default=shutil.which("redis-server") or "/usr/bin/redis-server")
    a = ap.parse_args()
    proc = None
    tmp = None
    addr = a.server
    if addr is None:
        bin = os.environ.get("TREELOG_BIN") or shutil.which("treelog")
        if not bin:
            sys.exit("no --server, and no treelog binary ($TREELOG_BIN or PATH) to start one")
        tmp = tempfile.mkdtemp(prefix="bench-treelog-")
        port, http = free_port(), free_port()
        proc = subprocess.Popen(
            [bin, "--data", f"{tmp}/data", "serve", "--listen", f"127.0.0.1:{port}", "--http", f"127.0.0.1:{http}"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_port(port, proc, "treelog serve")
        addr = f"127.0.0.1:{port}"
        print(f"server: {bin} (started here, data in {tmp})")
    print(f"python {sys.version.split()[0]}, treelog {treelog.__version__}, {os.cpu_count()} CPUs, {a.ops:,} ops per row")
    try:
        treelog_rows(addr, a.ops)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait()
            shutil.rmtree(tmp, ignore_errors=True)
    if os.access(a.redis_server, os.X_OK):
        rr = redis_rows(a.redis_server, a.ops)
        if rr is not None:
            get1, getp, geta, create1, createa = rr
            print("redis-py (GET of a 70-byte value; creates: JuiceFS's Lua script)")
            print(f"  GET 1 thread {get1:,.0f}/s; pipelined by {PIPELINE} {getp:,.0f}/s; asyncio {TASKS} tasks {geta:,.0f}/s")
            print(f"  creates 1 thread {create1:,.0f}/s; asyncio {TASKS} tasks {createa:,.0f}/s")
    else:
        print(f"{a.redis_server} not found: no Redis rows")


if __name__ == "__main__":
    main()
