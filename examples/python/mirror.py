#!/usr/bin/env python3
"""Mirror one subtree of a treelog namespace from its NATS JetStream stream.

The reference consumer of docs/BRIDGE.md: snapshot, then stream.

1. Snapshot: `treelog tail --snapshot --prefix P --json` gives the subtree
   as it is at sequence S (SnapshotStart, SnapshotEntry..., SnapshotEnd{S}).
2. Stream: the bridge's stream from its first message, skipping the records
   up to S (a consumer that stored its position would start later), applying
   each record's events to the mirror with the rename-aware filter of
   docs/STREAMS.md section 6: the bus carries every record of the namespace,
   and paths are never subjects.
3. A directory moved into the subtree (or a rename that re-roots the
   subtree) brings contents no event lists: the mirror takes a new snapshot
   at some S' and goes on from the records after S'.

Event schema 2 (docs/EVENTS.md): a create, symlink, delete or rename
carries its parents' new times (parent_mtime_ms) rather than their whole
attributes, and an extended attribute's change its inode's change time;
the mirror applies them to the entries it holds. Quotas and extended
attributes themselves are not part of the attributes it mirrors.

Messages of a record cut into parts (header Treelog-Part: i/n) are joined
before decoding. The payload is the `Record` item `treelog tail --json`
prints (docs/stream-item.schema.json).

Usage (the test drives it): prints "ready <S>" once the first snapshot is
taken; for each line "until <SEQ>" read on standard input, prints the mirror
as one JSON object {"seq": ..., "resyncs": ..., "entries": {path: attrs}}
once it is at SEQ or later; exits at the end of its input.

    mirror.py --nats nats://127.0.0.1:4222 --stream TREELOG \
              --treelog ./treelog --server 127.0.0.1:7400 --prefix /data

Needs nats-py (pip install nats-py).
"""

import argparse
import asyncio
import json
import subprocess
import sys

import nats
from nats.js.api import ConsumerConfig, DeliverPolicy


def within(path, prefix):
    """Whether path is prefix or below it (paths are canonical)."""
    if prefix == "/":
        return True
    return path == prefix or path.startswith(prefix + "/")


def reroot(path, old, new):
    return new + path[len(old):]


def parent_of(path):
    """The parent of a canonical path ("/a/b" -> "/a", "/a" -> "/")."""
    return path.rsplit("/", 1)[0] or "/"


class Mirror:
    def __init__(self, args):
        self.args = args
        self.prefix = args.prefix
        self.entries = {}  # path -> attrs
        self.seq = 0  # the mirror reflects every record up to here
        self.resyncs = 0

    def snapshot(self):
        """Replaces the mirror with a snapshot from treelog."""
        cmd = [self.args.treelog, "--server", self.args.server, "--json"]
        if self.args.token_file:
            cmd += ["--token-file", self.args.token_file]
        cmd += ["tail", "--snapshot", "--prefix", self.prefix]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        entries, end = {}, None
        for line in out.splitlines():
            item = json.loads(line)
            if "SnapshotEntry" in item:
                e = item["SnapshotEntry"]
                entries[e["path"]] = e["inode"]["attrs"]
            elif "SnapshotEnd" in item:
                end = item["SnapshotEnd"]["seq"]
                break  # the records tail prints after it come from the bus
        if end is None:
            raise RuntimeError("the snapshot did not end: " + out[-200:])
        self.entries, self.seq = entries, end

    def remove_tree(self, path):
        for p in [p for p in self.entries if within(p, path)]:
            del self.entries[p]

    def touch(self, path, t):
        """A directory's entries changed at t (parent_mtime_ms)."""
        attrs = self.entries.get(path)
        if attrs is not None and t is not None:
            attrs["mtime_ms"] = t
            attrs["change_ms"] = t

    def apply(self, seq, events):
        """Applies a record; returns False when a resync is needed."""
        p = self.prefix
        for ev in events:
            ((kind, body),) = ev["event"].items()
            if kind == "Rename":
                old, new = body["old_path"], body["new_path"]
                self.touch(parent_of(old), body["parent_mtime_ms"])
                self.touch(parent_of(new), body["parent_mtime_ms"])
                oi, ni = within(old, p), within(new, p)
                if oi and ni:
                    for q in [q for q in self.entries if within(q, old)]:
                        self.entries[reroot(q, old, new)] = self.entries.pop(q)
                    self.entries[new] = body["attrs"]
                elif oi:
                    self.remove_tree(old)  # moved out
                elif ni:
                    if body["attrs"]["kind"] == "Directory":
                        return False  # its contents are in no event
                    self.entries[new] = body["attrs"]
                elif within(p, old):
                    self.entries.clear()  # an ancestor moved away
                elif within(p, new):
                    return False  # something now stands at the prefix
            else:
                path = body["path"]
                if not within(path, p):
                    if kind == "Delete" and within(p, path):
                        self.entries.clear()
                    continue
                if kind in ("Create", "Symlink"):
                    self.entries[path] = body["attrs"]
                    self.touch(parent_of(path), body["parent_mtime_ms"])
                elif kind == "Delete":
                    self.remove_tree(path)
                    self.touch(parent_of(path), body["parent_mtime_ms"])
                elif kind in ("SetXattr", "RemoveXattr"):
                    if path in self.entries:
                        self.entries[path]["change_ms"] = body["change_ms"]
                elif kind in ("SetQuota", "ClearQuota"):
                    pass  # not an attribute
                else:  # Complete, SetSize, SetAttr
                    self.entries[path] = body["new"]
        self.seq = seq
        return True


async def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nats", default="nats://127.0.0.1:4222")
    ap.add_argument("--stream", required=True)
    ap.add_argument("--treelog", default="treelog")
    ap.add_argument("--server", required=True)
    ap.add_argument("--token-file")
    ap.add_argument("--prefix", default="/")
    args = ap.parse_args()

    m = Mirror(args)
    m.snapshot()
    print("ready", m.seq, flush=True)

    untils = asyncio.Queue()  # targets, then None at the end of the input
    loop = asyncio.get_running_loop()
    stdin = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)

    async def read_untils():
        while True:
            line = await stdin.readline()
            if not line:
                await untils.put(None)
                return
            if line.startswith(b"until "):
                await untils.put(int(line.split()[1]))

    reader = asyncio.ensure_future(read_untils())
    until = await untils.get()

    nc = await nats.connect(args.nats.split(","))
    js = nc.jetstream()
    info = await js.stream_info(args.stream)
    subject = info.config.subjects[0]
    sub = await js.subscribe(
        subject,
        stream=args.stream,
        ordered_consumer=True,
        config=ConsumerConfig(deliver_policy=DeliverPolicy.ALL),
    )
    parts = []
    while until is not None:
        if m.seq >= until:
            print(json.dumps({"seq": m.seq, "resyncs": m.resyncs, "entries": m.entries}), flush=True)
            until = await untils.get()
            continue
        try:
            msg = await sub.next_msg(timeout=0.2)
        except nats.errors.TimeoutError:
            continue
        h = msg.headers or {}
        seq = int(h["Treelog-Seq"])
        if h.get("Treelog-Encoding", "json") != "json":
            raise RuntimeError("this consumer reads the json encoding")
        part = h.get("Treelog-Part")
        if part is not None:
            i, n = (int(x) for x in part.split("/"))
            parts.append(msg.data)
            if i < n:
                continue
            data, parts = b"".join(parts), []
        else:
            data = msg.data
        if seq <= m.seq:
            continue  # in the snapshot already
        record = json.loads(data)["Record"]
        assert record["seq"] == seq, (record["seq"], seq)
        if seq != m.seq + 1:
            raise RuntimeError(f"gap in the stream: record {seq} after {m.seq}")
        if not m.apply(seq, record["events"]):
            m.resyncs += 1
            m.snapshot()  # at a sequence >= seq: later records are skipped
    reader.cancel()
    await nc.close()


if __name__ == "__main__":
    asyncio.run(main())
