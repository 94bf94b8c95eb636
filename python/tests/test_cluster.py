"""A three-node Raft cluster: the client follows the leader through a
failover, a subscriber resumes on another node, a follower refuses writes
with NotLeader."""

from __future__ import annotations

import treelog

from conftest import Cluster, poll


def test_failover(cluster: Cluster) -> None:
    c = treelog.Client(cluster.endpoints, timeout=60.0, leader_wait=30.0)
    c.mkdir("/ha")
    before = [c.create(f"/ha/a{i}") for i in range(10)]
    watcher = treelog.Client(cluster.endpoints, timeout=60.0)
    sub = watcher.subscribe(prefix="/ha", from_seq=before[0])
    got = [sub.next(timeout=30) for _ in before]
    assert [r.seq for r in got] == before

    leader = cluster.leader()
    leader.kill()
    # Writes go on through the next leader: the client finds it.
    after = [c.create(f"/ha/b{i}") for i in range(10)]
    assert after[0] > before[-1]
    assert c.stat("/ha/b9", consistency="linearizable").name == "b9"
    # The subscription, on whichever node it was, resumes without gap or
    # duplicate (a replica's log is its leader's, record for record).
    more = []
    while len(more) < len(after):
        item = sub.next(timeout=60)
        assert item is not None
        if isinstance(item, treelog.Record):
            more.append(item.seq)
    assert more == after
    # The old leader comes back as a follower and catches up.
    leader.start()
    back = treelog.Client(leader.addr, follow_leader=False)
    poll("the old leader caught up", lambda: back.exists("/ha/b9", min_seq=after[-1]) or None)


def test_follower_refuses_writes_naming_the_leader(cluster: Cluster) -> None:
    leader = cluster.leader()
    follower = next(n for n in cluster.nodes if n is not leader)
    c = treelog.Client(follower.addr, follow_leader=False)

    def refused() -> "treelog.NotLeader | None":
        try:
            c.mkdir("/x")
        except treelog.NotLeader as e:
            # A follower that just joined may not know the leader yet.
            return e if e.leader is not None else None
        raise AssertionError("a follower took a write")

    e = poll("a NotLeader naming the leader", refused)
    assert e.kind == "not_leader" and e.not_applied
    assert e.leader == leader.addr
    # Reads are served there (read-your-writes through a token).
    seq = treelog.Client(leader.addr).mkdir("/y")
    assert c.stat("/y", min_seq=seq).is_dir
