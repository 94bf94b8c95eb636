//! Replicas against a real leader, both servers in this process on
//! loopback ports: convergence while bootstrapping under writes (and a
//! replica of a replica), NotLeader, read-your-writes across the two,
//! Lagging, and re-bootstrap after the leader's retention removed the
//! replica's position, with every read during it checked against the
//! leader's history.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use treelog::error::{Error, ErrorKind};
use treelog::retention::RetentionPolicy;
use treelog::{Command, ReadAt};
use treelog_client::{Client, ClientOptions, SeenSeq};
use treelog_proto::protocol::{NodeStatus, RequestBody, ResponseBody, Role};
use treelog_replica::{ReplicaConfig, ReplicaHandle};
use treelog_server::ServerHandle;
use treelog_testkit::commands::{create, mkdir};
use treelog_testkit::{client::connect, poll};
use treelog_testkit_server::closed_state;
use treelog_testkit_server::server;

async fn leader(data: &Path) -> ServerHandle {
    server::start(data, |_| {}).await
}

async fn replica(data: &Path, source: SocketAddr) -> ReplicaHandle {
    replica_with(data, source, |_| {}).await
}

async fn replica_with(
    data: &Path,
    source: SocketAddr,
    f: impl FnOnce(&mut ReplicaConfig),
) -> ReplicaHandle {
    let mut cfg = ReplicaConfig::new(server::config(data), source);
    // Small batches: many of them, and fetches of many chunks.
    cfg.max_batch_bytes = 16 << 10;
    cfg.fetch_chunk = 64 << 10;
    f(&mut cfg);
    treelog_replica::start(cfg)
        .await
        .expect("start the replica")
}

async fn status(addr: SocketAddr) -> Option<NodeStatus> {
    let c = Client::connect(addr, ClientOptions::default()).await.ok()?;
    match c.call(RequestBody::Status).await.ok()? {
        ResponseBody::Status(s) => Some(s),
        _ => None,
    }
}

/// Waits until the node at `addr` has applied `seq`.
async fn applied(addr: SocketAddr, seq: u64) -> NodeStatus {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(s) = status(addr).await {
            if s.applied_seq >= seq {
                return s;
            }
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{addr} never applied {seq}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Creates, renames and deletes from `writers` tasks until `stop`; each
/// task in its own directory.
fn spawn_writers(
    c: &Client,
    writers: usize,
    stop: &Arc<AtomicBool>,
) -> Vec<tokio::task::JoinHandle<u64>> {
    (0..writers)
        .map(|w| {
            let (c, stop) = (c.clone(), stop.clone());
            tokio::spawn(async move {
                let dir = format!("/w{w}");
                c.submit(mkdir(&dir)).await.unwrap();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let mut f = format!("{dir}/f{n}");
                    c.submit(create(&f)).await.unwrap();
                    if n % 3 == 1 {
                        let to = format!("{dir}/r{n}");
                        c.submit(Command::Rename {
                            src: f.into(),
                            dst: to.clone().into(),
                            overwrite: false,
                        })
                        .await
                        .unwrap();
                        f = to;
                    }
                    if n % 5 == 2 {
                        c.submit(Command::Delete {
                            path: f.into(),
                            recursive: false,
                        })
                        .await
                        .unwrap();
                    }
                    n += 1;
                }
                n
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_bootstrapped_under_writes_converges_and_so_does_its_own_replica() {
    let dir = tempfile::tempdir().unwrap();
    let (l_data, r_data, rr_data) = (
        dir.path().join("leader"),
        dir.path().join("replica"),
        dir.path().join("replica2"),
    );
    let l = leader(&l_data).await;
    let c = connect(l.bound.rpc).await;
    for i in 0..200 {
        c.submit(mkdir(&format!("/pre/d{i}"))).await.unwrap();
    }
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&c, 4, &stop);
    // Bootstraps while the writers run, and a replica of it too.
    applied(l.bound.rpc, 400).await;
    let r = replica(&r_data, l.bound.rpc).await;
    applied(r.bound.rpc, 500).await;
    let rr = replica(&rr_data, r.bound.rpc).await;
    applied(rr.bound.rpc, 800).await;
    let before = c.ping().await.unwrap();
    applied(l.bound.rpc, before + 2000).await;
    stop.store(true, Ordering::Relaxed);
    let mut ops = 0;
    for w in writers {
        ops += w.await.unwrap();
    }
    assert!(ops > 500, "the writers ran ({ops} files)");
    let end = c.ping().await.unwrap();
    let s = applied(r.bound.rpc, end).await;
    assert_eq!((s.role, s.applied_seq), (Role::Replica, end));
    assert_eq!(s.leader.as_deref(), Some(l.bound.rpc.to_string().as_str()));
    let s2 = applied(rr.bound.rpc, end).await;
    assert_eq!(s2.applied_seq, end);
    assert_eq!(s2.namespace, s.namespace);
    // The replica of the replica names the chain's head for writes.
    assert_eq!(s2.leader, s.leader);
    match connect(rr.bound.rpc).await.submit(mkdir("/x")).await {
        Err(Error::NotLeader { leader }) => assert_eq!(leader, s.leader),
        other => panic!("a write on a chained replica: {other:?}"),
    }
    // Both replicas bootstrapped once and never had to again.
    assert_eq!(r.state().counters().rebootstraps, 0);
    assert!(r.state().counters().bootstrap_bytes > 0);
    drop(c);
    rr.shutdown().await.unwrap();
    r.shutdown().await.unwrap();
    l.shutdown().await.unwrap();
    let (la, ld, llog) = closed_state(&l_data);
    for data in [&r_data, &rr_data] {
        let (ra, rd, rlog) = closed_state(data);
        assert_eq!(ra, la, "{}: applied", data.display());
        assert_eq!(rd, ld, "{}: the index digest", data.display());
        // The same records, byte for byte, none missing or twice.
        assert_eq!(rlog.len(), llog.len(), "{}: log length", data.display());
        assert!(rlog == llog, "{}: the logs differ", data.display());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_replica_get_not_leader_with_the_leaders_address() {
    let dir = tempfile::tempdir().unwrap();
    let l = leader(&dir.path().join("leader")).await;
    let c = connect(l.bound.rpc).await;
    let seq = c.submit(mkdir("/a")).await.unwrap();
    let r = replica(&dir.path().join("replica"), l.bound.rpc).await;
    applied(r.bound.rpc, seq).await;
    let rc = connect(r.bound.rpc).await;
    for cmd in [
        mkdir("/b"),
        create("/a/f"),
        Command::Delete {
            path: "/a".into(),
            recursive: true,
        },
    ] {
        match rc.submit(cmd).await {
            Err(Error::NotLeader { leader }) => {
                assert_eq!(leader, Some(l.bound.rpc.to_string()))
            }
            other => panic!("a write on a replica: {other:?}"),
        }
    }
    // Nor is its newest state a linearizable read.
    match rc.stat_at("/a", ReadAt::Linearizable).await {
        Err(Error::NotLeader { leader }) => assert_eq!(leader, Some(l.bound.rpc.to_string())),
        other => panic!("a linearizable read on a replica: {other:?}"),
    }
    assert!(rc.stat_at("/a", ReadAt::Latest).await.is_ok());
    // Nothing was written: the replica is where the leader is.
    let s = status(r.bound.rpc).await.unwrap();
    assert_eq!(s.applied_seq, seq);
    assert_eq!(
        rc.stat("/b").await.map_err(|e| e.kind()).err(),
        Some(ErrorKind::NotFound)
    );
    // A client that follows the leader: its write goes there, and its
    // next read on the replica sees it.
    let follows = Client::connect(
        r.bound.rpc,
        ClientOptions {
            follow_leader: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let b = follows.submit(mkdir("/b")).await.unwrap();
    assert!(b > seq);
    assert!(follows.stat("/b").await.unwrap().attrs.kind.is_dir());
    assert!(follows.seen_seq() >= b);
    assert_eq!(
        c.stat("/b").await.unwrap().id,
        follows.stat("/b").await.unwrap().id
    );
    r.shutdown().await.unwrap();
    l.shutdown().await.unwrap();
}

/// A source that is down (its port refuses connections) while the
/// replica reconnects: the replica keeps serving reads and trying, and
/// goes on when the source is back on its address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_keeps_serving_and_retrying_while_its_source_is_down() {
    let dir = tempfile::tempdir().unwrap();
    let l = leader(&dir.path().join("leader")).await;
    let addr = l.bound.rpc;
    let c = connect(addr).await;
    let seq = c.submit(mkdir("/a")).await.unwrap();
    let r = replica(&dir.path().join("replica"), addr).await;
    applied(r.bound.rpc, seq).await;
    drop(c);
    l.shutdown().await.unwrap();
    // Several attempts refused (nothing listens on the source's port).
    let failures = r.state().counters().connect_failures;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while r.state().counters().connect_failures < failures + 3 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the replica stopped trying: {:?}",
            r.state().counters()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let s = status(r.bound.rpc)
        .await
        .expect("the replica still serves while its source is down");
    assert!(!s.connected);
    assert_eq!(s.applied_seq, seq);
    let rc = connect(r.bound.rpc).await;
    assert!(rc.stat("/a").await.unwrap().attrs.kind.is_dir());
    // The source comes back on its address; the replica follows it again.
    let l = server::start(&dir.path().join("leader"), |cfg| cfg.listen = addr).await;
    let c = connect(addr).await;
    let seq = c.submit(mkdir("/b")).await.unwrap();
    let s = applied(r.bound.rpc, seq).await;
    assert!(s.connected);
    r.shutdown().await.unwrap();
    l.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_writing_on_the_leader_reads_its_writes_on_the_replica() {
    let dir = tempfile::tempdir().unwrap();
    let l = leader(&dir.path().join("leader")).await;
    let r = replica(&dir.path().join("replica"), l.bound.rpc).await;
    applied(r.bound.rpc, 0).await;
    let seen = SeenSeq::new();
    let opts = ClientOptions {
        seen_seq: Some(seen.clone()),
        ..Default::default()
    };
    let w = Client::connect(l.bound.rpc, opts.clone()).await.unwrap();
    let rd = Client::connect(r.bound.rpc, opts).await.unwrap();
    // Without a token: whatever the replica has, and it says which.
    let plain = connect(r.bound.rpc).await;
    w.submit(mkdir("/rw")).await.unwrap();
    let rounds = treelog_testkit::rounds(1000);
    for i in 0..rounds {
        let (f, g) = (format!("/rw/f{i}"), format!("/rw/g{i}"));
        w.submit(create(&f)).await.unwrap();
        let ino = rd
            .stat(&f)
            .await
            .expect("a file just created, read on the replica");
        assert!(!ino.attrs.kind.is_dir());
        let moved = w
            .submit(Command::Rename {
                src: f.clone().into(),
                dst: g.clone().into(),
                overwrite: false,
            })
            .await
            .unwrap();
        assert_eq!(
            rd.stat(&g).await.unwrap().id,
            ino.id,
            "renamed, read at the new name"
        );
        assert_eq!(
            rd.stat(&f).await.map_err(|e| e.kind()).err(),
            Some(ErrorKind::NotFound),
            "renamed, the old name is gone"
        );
        assert!(seen.seen() >= moved);
        if i % 2 == 0 {
            w.submit(Command::Delete {
                path: g.clone().into(),
                recursive: false,
            })
            .await
            .unwrap();
            assert_eq!(
                rd.stat(&g).await.map_err(|e| e.kind()).err(),
                Some(ErrorKind::NotFound),
                "deleted"
            );
        }
        let page = rd.list("/rw", None, 10_000).await.unwrap();
        assert_eq!(
            page.entries.len(),
            i.div_ceil(2),
            "the listing after round {i}"
        );
        let stale = plain.stat_at("/rw", ReadAt::Latest).await.unwrap();
        assert!(stale.seq <= seen.seen());
    }
    r.shutdown().await.unwrap();
    l.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_that_cannot_catch_up_answers_lagging() {
    let dir = tempfile::tempdir().unwrap();
    let l = leader(&dir.path().join("leader")).await;
    let c = connect(l.bound.rpc).await;
    let seq = c.submit(mkdir("/a")).await.unwrap();
    let r = replica_with(&dir.path().join("replica"), l.bound.rpc, |cfg| {
        cfg.server.store.min_seq_wait = Duration::from_millis(200);
    })
    .await;
    applied(r.bound.rpc, seq).await;
    let rc = connect(r.bound.rpc).await;
    // A token from a write the replica cannot have.
    let wanted = seq + 1000;
    match rc.stat_at("/a", ReadAt::AtLeast(wanted)).await {
        Err(Error::Lagging {
            applied,
            wanted: w,
            leader,
            waited_ms,
        }) => {
            assert_eq!((applied, w), (seq, wanted));
            assert_eq!(leader, Some(l.bound.rpc.to_string()));
            assert_eq!(waited_ms, 200);
        }
        other => panic!("a read beyond the replica: {other:?}"),
    }
    // At what it has, it answers.
    let at = rc.stat_at("/a", ReadAt::AtLeast(seq)).await.unwrap();
    assert_eq!(at.seq, seq);
    // A subscription with that token waits as long, then fails alike.
    let token = SeenSeq::new();
    token.saw(wanted);
    let ahead = Client::connect(
        r.bound.rpc,
        ClientOptions {
            seen_seq: Some(token),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let opts = treelog::stream::SubscribeOptions {
        from: treelog::stream::StartFrom::Snapshot,
        ..Default::default()
    };
    let e = match ahead.subscribe(opts.clone()).await {
        Ok(mut sub) => sub.next().await.expect("an item or an error").unwrap_err(),
        Err(e) => e,
    };
    assert_eq!(e.kind(), ErrorKind::Lagging, "{e}");
    // With the token it has, the snapshot starts.
    let mut sub = rc.subscribe(opts).await.unwrap();
    let first = sub.next().await.unwrap().unwrap();
    assert!(
        matches!(first, treelog::stream::StreamItem::SnapshotStart { .. }),
        "{first:?}"
    );
    r.shutdown().await.unwrap();
    l.shutdown().await.unwrap();
}

/// Files `/d/f0..` created one per record from `base + 1`: at state `s`
/// the directory holds exactly the files of the records up to `s`.
fn expected_files(base: u64, s: u64, total: u64) -> u64 {
    s.saturating_sub(base).min(total)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_whose_position_was_removed_bootstraps_again_without_mixing_states() {
    let dir = tempfile::tempdir().unwrap();
    let (l_data, r_data) = (dir.path().join("leader"), dir.path().join("replica"));
    let l = leader(&l_data).await;
    let c = connect(l.bound.rpc).await;
    let base = c.submit(mkdir("/d")).await.unwrap();
    let first = 300u64;
    for i in 0..first {
        c.submit(create(&format!("/d/f{i}"))).await.unwrap();
    }
    let r = replica(&r_data, l.bound.rpc).await;
    let (rpc, http) = (r.bound.rpc, r.bound.http);
    applied(rpc, base + first).await;
    // Streaming: its cursor is on the leader (the bootstrap alone may
    // have brought it this far).
    let cursor = format!("replica-127.0.0.1-{}", rpc.port());
    let t = l.store().unwrap();
    poll::eventually(30, "the replica's cursor on the leader", || {
        t.cursors().iter().any(|c| c.name == cursor)
    })
    .await;
    drop(t);
    // The replica stops; the leader goes on and its retention removes
    // the records the replica would need next.
    r.shutdown().await.unwrap();
    let more = 700u64;
    for i in first..first + more {
        c.submit(create(&format!("/d/f{i}"))).await.unwrap();
    }
    // Its cursor on the leader holds retention back at its position...
    let t = l.store().unwrap();
    let held = t
        .run_retention(&RetentionPolicy {
            max_records: Some(100),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(held.held_by_cursor, Some(cursor), "{held:?}");
    assert!(held.new_start <= base + first + 1, "{held:?}");
    // ... until it lags too far and expires.
    let report = t
        .run_retention(&RetentionPolicy {
            max_records: Some(100),
            max_cursor_lag: Some(100),
            ..Default::default()
        })
        .unwrap();
    drop(t);
    assert_eq!(report.expired_cursors.len(), 1, "{report:?}");
    assert!(report.new_start > base + first + 1, "{report:?}");
    // Readers on the replica's port from before it starts again until it
    // has caught up: every read is one state of the leader's history.
    let total = first + more;
    let done = Arc::new(AtomicBool::new(false));
    let reads = Arc::new(AtomicU64::new(0));
    let reader = {
        let (done, reads) = (done.clone(), reads.clone());
        tokio::spawn(async move {
            let mut seen = Vec::new();
            while !done.load(Ordering::Relaxed) {
                let Ok(c) = Client::connect(rpc, ClientOptions::default()).await else {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                    continue;
                };
                while let Ok(w) = c.walk("/d").await {
                    let n = w.value.len() as u64;
                    assert_eq!(
                        n,
                        expected_files(base, w.seq, total),
                        "a listing at {} holds {n} files",
                        w.seq
                    );
                    reads.fetch_add(1, Ordering::Relaxed);
                    seen.push(w.seq);
                    if done.load(Ordering::Relaxed) {
                        break;
                    }
                }
            }
            seen
        })
    };
    // On the same ports as before.
    let r = replica_with(&r_data, l.bound.rpc, |cfg| {
        cfg.server.listen = rpc;
        cfg.server.http = http;
    })
    .await;
    let s = applied(rpc, base + total).await;
    assert_eq!(s.applied_seq, base + total);
    assert_eq!(r.state().counters().rebootstraps, 1);
    done.store(true, Ordering::Relaxed);
    let seen = reader.await.unwrap();
    assert!(reads.load(Ordering::Relaxed) > 0);
    // States only move forward on one connection... and across the swap.
    assert!(seen.windows(2).all(|w| w[0] <= w[1]), "{seen:?}");
    // It follows the leader again from there.
    let seq = c.submit(create("/d/after")).await.unwrap();
    applied(rpc, seq).await;
    drop(c);
    r.shutdown().await.unwrap();
    l.shutdown().await.unwrap();
    let (la, ld, _) = closed_state(&l_data);
    let (ra, rd, _) = closed_state(&r_data);
    assert_eq!((ra, rd), (la, ld));
    // Nothing of the bootstrap is left beside the data directory.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("bootstrap"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_of_a_source_whose_history_diverged_bootstraps_again() {
    let dir = tempfile::tempdir().unwrap();
    let (l_data, r_data, backup, l2_data) = (
        dir.path().join("leader"),
        dir.path().join("replica"),
        dir.path().join("backup"),
        dir.path().join("leader2"),
    );
    let l = leader(&l_data).await;
    let (l_rpc, l_http) = (l.bound.rpc, l.bound.http);
    let c = connect(l_rpc).await;
    for i in 0..50 {
        c.submit(mkdir(&format!("/a/d{i}"))).await.unwrap();
    }
    let t = l.store().unwrap();
    let b = tokio::task::block_in_place(|| t.backup(&backup)).unwrap();
    drop(t);
    for i in 50..100 {
        c.submit(mkdir(&format!("/a/d{i}"))).await.unwrap();
    }
    let r = replica(&r_data, l_rpc).await;
    applied(r.bound.rpc, 100).await;
    let (r_rpc, r_http) = (r.bound.rpc, r.bound.http);
    r.shutdown().await.unwrap();
    drop(c);
    l.shutdown().await.unwrap();
    // The leader's database is replaced by its older backup, which then
    // takes other writes: past the replica's position, with a different
    // history.
    tokio::task::block_in_place(|| treelog::backup::restore(&backup, &l2_data, &mut |_| {}))
        .unwrap();
    let l2 = server::start(&l2_data, |cfg| {
        cfg.listen = l_rpc;
        cfg.http = l_http;
    })
    .await;
    let c = connect(l_rpc).await;
    for i in 0..80 {
        c.submit(mkdir(&format!("/b/d{i}"))).await.unwrap();
    }
    let end = c.ping().await.unwrap();
    assert!(end > 100 && b.seq == 50, "{end} {}", b.seq);
    let r = replica_with(&r_data, l_rpc, |cfg| {
        cfg.server.listen = r_rpc;
        cfg.server.http = r_http;
    })
    .await;
    applied(r_rpc, end).await;
    assert_eq!(r.state().counters().rebootstraps, 1);
    let rc = connect(r_rpc).await;
    assert_eq!(
        rc.stat("/a/d60").await.map_err(|e| e.kind()).err(),
        Some(ErrorKind::NotFound),
        "the old history is gone from the replica"
    );
    rc.stat("/b/d79").await.unwrap();
    drop((c, rc));
    r.shutdown().await.unwrap();
    l2.shutdown().await.unwrap();
    let (la, ld, llog) = closed_state(&l2_data);
    let (ra, rd, rlog) = closed_state(&r_data);
    assert_eq!((ra, rd), (la, ld));
    assert!(rlog == llog);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_replica_far_behind_catches_up_before_it_serves() {
    let dir = tempfile::tempdir().unwrap();
    let (l_data, r_data) = (dir.path().join("leader"), dir.path().join("replica"));
    let l = leader(&l_data).await;
    let c = connect(l.bound.rpc).await;
    let seq = c.submit(mkdir("/c")).await.unwrap();
    let far = |cfg: &mut ReplicaConfig| cfg.catch_up_min = 1000;
    let r = replica_with(&r_data, l.bound.rpc, far).await;
    applied(r.bound.rpc, seq).await;
    r.shutdown().await.unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&c, 2, &stop);
    applied(l.bound.rpc, seq + 3000).await;
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.await.unwrap();
    }
    let end = c.ping().await.unwrap();
    let r = replica_with(&r_data, l.bound.rpc, far).await;
    let s = applied(r.bound.rpc, end).await;
    assert_eq!(s.applied_seq, end);
    // All of it by the catch-up (nothing was written meanwhile).
    assert_eq!(r.state().counters().caught_up, end - seq);
    assert_eq!(r.state().counters().rebootstraps, 0);
    // And it follows from there.
    let more = c.submit(mkdir("/c/after")).await.unwrap();
    applied(r.bound.rpc, more).await;
    drop(c);
    r.shutdown().await.unwrap();
    l.shutdown().await.unwrap();
    let (la, ld, llog) = closed_state(&l_data);
    let (ra, rd, rlog) = closed_state(&r_data);
    assert_eq!((ra, rd), (la, ld));
    assert!(rlog == llog);
}
