"""Fixtures: real `treelog serve` processes (one shared server, servers of
a test's own, a three-node cluster), and clients of them.

The binary is $TREELOG_BIN, else `treelog` on PATH. Without it the tests
skip, unless TREELOG_REQUIRE_PYTHON=1 (then they fail).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path
from typing import Callable, Iterator, List, Optional, TypeVar

import pytest

import treelog

T = TypeVar("T")


def _binary() -> Optional[str]:
    b = os.environ.get("TREELOG_BIN")
    if b:
        return b if os.access(b, os.X_OK) else None
    return shutil.which("treelog")


@pytest.fixture(scope="session")
def treelog_bin() -> str:
    b = _binary()
    if b is None:
        why = "no treelog binary: set TREELOG_BIN or put `treelog` on PATH"
        if os.environ.get("TREELOG_REQUIRE_PYTHON") == "1":
            pytest.fail(why + " (TREELOG_REQUIRE_PYTHON=1)")
        pytest.skip(why)
    return b


def free_addr() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


def poll(what: str, f: Callable[[], Optional[T]], timeout: float = 60.0) -> T:
    """Calls `f` until it returns something other than None (or raises
    nothing), within `timeout` seconds."""
    deadline = time.monotonic() + timeout
    last: Optional[BaseException] = None
    while time.monotonic() < deadline:
        try:
            v = f()
            if v is not None:
                return v
        except Exception as e:  # noqa: BLE001 - kept for the failure message
            last = e
        time.sleep(0.02)
    raise AssertionError(f"{what}: not within {timeout}s (last error: {last!r})")


class Server:
    """One `treelog serve` process on loopback, its data in `data`."""

    def __init__(self, bin: str, data: Path, extra: Optional[List[str]] = None) -> None:
        self.bin = bin
        self.data = data
        self.addr = free_addr()
        self.http = free_addr()
        self.extra = list(extra or [])
        self.proc: Optional[subprocess.Popen] = None
        self.log = data.parent / f"{data.name}.log"

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        """`treelog --data DATA ARGS` (offline commands) or with --server."""
        r = subprocess.run(
            [self.bin, "--data", str(self.data), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if check and r.returncode != 0:
            raise AssertionError(f"treelog {' '.join(args)}: {r.returncode}\n{r.stderr}")
        return r

    def start(self, wait: bool = True) -> "Server":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    self.bin,
                    "--data",
                    str(self.data),
                    "serve",
                    "--listen",
                    self.addr,
                    "--http",
                    self.http,
                    *self.extra,
                ],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        if wait:
            self.wait_up()
        return self

    def wait_up(self) -> None:
        def up() -> Optional[bool]:
            assert self.proc is not None and self.proc.poll() is None, self.tail()
            with socket.create_connection(self.addr.split(":"), timeout=1):
                return True

        poll(f"server {self.addr} up", up)

    def tail(self) -> str:
        try:
            return self.log.read_text()[-3000:]
        except OSError:
            return ""

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
            self.proc = None

    def pause(self) -> None:
        """SIGSTOP, and waits until every thread of the process is stopped
        (the signal is delivered asynchronously)."""
        assert self.proc is not None
        pid = self.proc.pid
        self.proc.send_signal(signal.SIGSTOP)

        def stopped() -> Optional[bool]:
            for t in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{t}/stat") as f:
                    # The state follows the command name in parentheses.
                    if f.read().rsplit(")", 1)[1].split()[0] not in ("T", "t"):
                        return None
            return True

        poll(f"server {self.addr} stopped", stopped)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)


@pytest.fixture(scope="session")
def server(treelog_bin: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server the whole session shares (each test works in a directory of
    its own: see `root`)."""
    s = Server(treelog_bin, tmp_path_factory.mktemp("shared") / "data").start()
    yield s
    s.stop()


@pytest.fixture
def new_server(treelog_bin: str, tmp_path: Path) -> Iterator[Callable[..., Server]]:
    """Starts servers of the test's own (killed at its end)."""
    made: List[Server] = []

    def make(*extra: str, start: bool = True) -> Server:
        s = Server(treelog_bin, tmp_path / f"data{len(made)}", list(extra))
        made.append(s)
        return s.start() if start else s

    yield make
    for s in made:
        if s.proc is not None:
            s.resume()
        s.kill()


@pytest.fixture
def client(server: Server) -> treelog.Client:
    return treelog.Client(server.addr)


@pytest.fixture
def root(client: treelog.Client) -> str:
    """A fresh directory for the test on the shared server."""
    p = f"/t/{uuid.uuid4().hex[:12]}"
    client.mkdir(p, parents=True)
    return p


class Cluster:
    """Three `treelog serve --node-id N` processes made one Raft cluster."""

    def __init__(self, bin: str, tmp: Path) -> None:
        self.nodes = [Server(bin, tmp / f"node{i}", ["--node-id", str(i)]) for i in (1, 2, 3)]

    @property
    def endpoints(self) -> str:
        return ",".join(n.addr for n in self.nodes)

    def admin(self, node: Server, *args: str) -> subprocess.CompletedProcess:
        return node.cli("--server", node.addr, "cluster", *args)

    def state(self, node: Server) -> Optional[str]:
        """The node's Raft state ("leader", "follower", ...), None when it
        does not answer."""
        r = node.cli("--json", "--server", node.addr, "cluster", "status", check=False)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout).get("state")

    def start(self) -> "Cluster":
        for n in self.nodes:
            n.start()
        for n in self.nodes:
            poll(f"Raft running on {n.addr}", lambda: self.state(n))
        first = self.nodes[0]
        self.admin(first, "init")
        poll("node 1 leads", lambda: self.state(first) == "leader" or None)
        for n in self.nodes[1:]:
            self.admin(first, "add-learner", n.extra[1], n.addr)
        self.admin(first, "promote", "2", "3")
        return self

    def leader(self) -> Server:
        def find() -> Optional[Server]:
            for n in self.nodes:
                if n.proc is None:
                    continue
                if self.state(n) == "leader":
                    return n
            return None

        return poll("a leader", find)


@pytest.fixture
def cluster(treelog_bin: str, tmp_path: Path) -> Iterator[Cluster]:
    c = Cluster(treelog_bin, tmp_path).start()
    yield c
    for n in c.nodes:
        n.kill()
