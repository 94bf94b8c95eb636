//! The bridge against a real NATS server (and a real 3-node JetStream
//! cluster), publishing a real server's log while writers run: every
//! record reaches the stream exactly once, in order, byte for byte; two
//! bridges racing on one stream cannot interleave; the bus being down
//! never blocks treelog's writers, the cursor holds the log meanwhile (and
//! its cap still protects the disk, the bridge then refusing the gap).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use harness::{check_stream, NatsCluster, NatsServer};
use treelog::retention::RetentionPolicy;
use treelog_bridge::{BridgeConfig, BridgeError, BridgeHandle, NatsConfig};
use treelog_server::ServerHandle;
use treelog_testkit::{client::connect, commands, poll};
use treelog_testkit_nats as harness;
use treelog_testkit_server::server;

/// A bridge task on `h` into `stream` at `url`, with its own registry.
fn bridge(
    h: &ServerHandle,
    url: &str,
    stream: &str,
    cursor: &str,
    replicas: usize,
) -> BridgeHandle {
    let mut cfg = BridgeConfig::new(h.bound.rpc);
    cfg.cursor = cursor.into();
    cfg.max_backoff = Duration::from_millis(500);
    let mut nats = NatsConfig::new(url, stream);
    nats.create_replicas = Some(replicas);
    treelog_bridge::start_nats(cfg, nats, &prometheus_registry()).unwrap()
}

fn prometheus_registry() -> prometheus::Registry {
    prometheus::Registry::new()
}

fn writers(
    h: &ServerHandle,
    n: usize,
    fat: usize,
) -> (Arc<AtomicBool>, Vec<tokio::task::JoinHandle<u64>>) {
    let stop = Arc::new(AtomicBool::new(false));
    let tasks = (0..n)
        .map(|w| {
            let stop = stop.clone();
            let addr = h.bound.rpc;
            tokio::spawn(async move {
                let c = connect(addr).await;
                harness::write_load(c, format!("/w{w}"), fat, stop).await
            })
        })
        .collect();
    (stop, tasks)
}

async fn stop_writers(stop: Arc<AtomicBool>, tasks: Vec<tokio::task::JoinHandle<u64>>) -> u64 {
    stop.store(true, Ordering::Relaxed);
    let mut n = 0;
    for t in tasks {
        n += t.await.unwrap();
    }
    n
}

/// The nats-server binary and a scratch directory, with the bridge's log
/// events on the test's output; `None` (said) when there is no server.
fn nats_env() -> Option<(std::path::PathBuf, tempfile::TempDir)> {
    harness::logs();
    let bin = harness::nats_server_bin()?;
    Some((bin, tempfile::tempdir().unwrap()))
}

/// A NATS server of its own (`max_payload` bytes per message) and a
/// treelog server, in a scratch directory (kept alive by the first item).
async fn single_env(max_payload: usize) -> Option<(tempfile::TempDir, NatsServer, ServerHandle)> {
    let (bin, dir) = nats_env()?;
    let nats = NatsServer::single(&bin, &dir.path().join("nats"), max_payload);
    let h = server::start(&dir.path().join("db"), |_| {}).await;
    Some((dir, nats, h))
}

async fn committed(h: &ServerHandle) -> u64 {
    server::client(h).await.info().await.unwrap().0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_record_reaches_the_stream_exactly_once_in_order_while_writers_run() {
    // A small max_payload: the recursive deletes' records are cut in parts.
    let Some((_dir, nats, h)) = single_env(32 << 10).await else {
        return;
    };
    let (stop, tasks) = writers(&h, 3, 150);
    let b = bridge(&h, &nats.url(), "TREELOG", "bridge-t", 1);
    // Until the writers made a few big records, and the bridge published
    // some of them; then it restarts (a clean stop) while they go on.
    poll::eventually(60, "published", || b.metrics().records.get() > 500).await;
    b.shutdown().await.unwrap();
    let b = bridge(&h, &nats.url(), "TREELOG", "bridge-t", 1);
    poll::eventually(60, "published again", || b.metrics().records.get() > 500).await;
    let n = stop_writers(stop, tasks).await;
    let last = committed(&h).await;
    assert!(n > 0 && last >= n);
    harness::wait_published(&nats.url(), "TREELOG", last, 60).await;
    let client = server::client(&h).await;
    let parts = check_stream(&nats.url(), "TREELOG", &client, 1, last).await;
    assert!(parts > 0, "no record was big enough to be split");
    // Published means acknowledged to the cursor (within a second).
    poll::eventually(10, "cursor at the end", || {
        b.metrics().published_seq.get() as u64 == last
    })
    .await;
    b.shutdown().await.unwrap();
    let cursors = client.cursors().await.unwrap();
    let c = cursors.iter().find(|c| c.name == "bridge-t").unwrap();
    assert_eq!(
        c.state.acked, last,
        "the cursor is acknowledged after the bus's acks"
    );
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_bridges_racing_on_one_stream_cannot_interleave() {
    let Some((_dir, nats, h)) = single_env(1 << 20).await else {
        return;
    };
    let (stop, tasks) = writers(&h, 2, 0);
    let a = bridge(&h, &nats.url(), "RACE", "bridge-a", 1);
    let b = bridge(&h, &nats.url(), "RACE", "bridge-b", 1);
    poll::eventually(60, "published", || {
        a.metrics().records.get() + b.metrics().records.get() > 1000
    })
    .await;
    stop_writers(stop, tasks).await;
    let last = committed(&h).await;
    harness::wait_published(&nats.url(), "RACE", last, 60).await;
    let client = server::client(&h).await;
    check_stream(&nats.url(), "RACE", &client, 1, last).await;
    // They did race: at least one of them was refused by the sequence
    // guard (or its re-sends caught as duplicates) and started again.
    let retried = a.metrics().retries.get() + b.metrics().retries.get();
    let dups = a.metrics().duplicates.get() + b.metrics().duplicates.get();
    assert!(retried + dups > 0, "the bridges never collided");
    a.shutdown().await.unwrap();
    b.shutdown().await.unwrap();
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stream_of_another_namespace_or_shared_with_other_subjects_is_refused() {
    let Some((bin, dir)) = nats_env() else {
        return;
    };
    let nats = NatsServer::single(&bin, &dir.path().join("nats"), 1 << 20);
    let one = server::start(&dir.path().join("one"), |_| {}).await;
    let other = server::start(&dir.path().join("other"), |_| {}).await;
    for h in [&one, &other] {
        server::client(h)
            .await
            .submit(commands::mkdir("/x"))
            .await
            .unwrap();
    }
    // `one` fills stream S on a fixed subject; `other` is refused there.
    let mut cfg = BridgeConfig::new(one.bound.rpc);
    cfg.cursor = "b".into();
    let mut n = NatsConfig::new(nats.url(), "S");
    n.subject = Some("treelog.shared.log".into());
    let b = treelog_bridge::start_nats(cfg.clone(), n.clone(), &prometheus_registry()).unwrap();
    harness::wait_published(&nats.url(), "S", 1, 30).await;
    b.shutdown().await.unwrap();
    cfg.server = other.bound.rpc.to_string();
    let mut b = treelog_bridge::start_nats(cfg.clone(), n, &prometheus_registry()).unwrap();
    match b.ended().await {
        Err(BridgeError::Refused(m)) => assert!(m.contains("its own stream"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.metrics().failed.get(), 1);
    // A stream that holds other subjects too.
    let js = harness::jetstream(&nats.url()).await;
    js.create_stream(async_nats::jetstream::stream::Config {
        name: "WIDE".into(),
        subjects: vec!["treelog.wide.log".into(), "other.>".into()],
        ..Default::default()
    })
    .await
    .unwrap();
    let mut n = NatsConfig::new(nats.url(), "WIDE");
    n.subject = Some("treelog.wide.log".into());
    let mut b = treelog_bridge::start_nats(cfg, n, &prometheus_registry()).unwrap();
    match b.ended().await {
        Err(BridgeError::Refused(m)) => assert!(m.contains("a stream of its own subject"), "{m}"),
        other => panic!("{other:?}"),
    }
    // A new stream JetStream will not create (its subject is WIDE's).
    let mut n = NatsConfig::new(nats.url(), "OVERLAP");
    n.subject = Some("treelog.wide.log".into());
    let mut cfg = BridgeConfig::new(other.bound.rpc);
    cfg.cursor = "c".into();
    let mut b = treelog_bridge::start_nats(cfg, n, &prometheus_registry()).unwrap();
    match b.ended().await {
        Err(BridgeError::Refused(m)) => assert!(m.contains("cannot create stream OVERLAP"), "{m}"),
        other => panic!("{other:?}"),
    }
    one.shutdown().await.unwrap();
    other.shutdown().await.unwrap();
}

/// Retention that removes everything but the last 50 records, and expires
/// cursors more than `cap` behind; run by hand (`run_retention`) so the
/// test knows each pass happened.
fn policy(cap: u64) -> RetentionPolicy {
    RetentionPolicy {
        max_records: Some(50),
        max_cursor_lag: Some(cap),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_losing_a_node_then_all_never_blocks_writers_and_resumes_without_a_gap() {
    let Some((bin, dir)) = nats_env() else {
        return;
    };
    let mut cluster = NatsCluster::start(&bin, &dir.path().join("nats"));
    let url = cluster.url();
    let h = server::start(&dir.path().join("db"), |_| {}).await;
    let store = h.store().unwrap();
    let b = bridge(&h, &url, "R3", "bridge-r3", 3);
    let (stop, tasks) = writers(&h, 2, 0);
    poll::eventually(120, "published on the cluster", || {
        b.metrics().records.get() > 300
    })
    .await;
    // One node down: the stream (R3) keeps a quorum, publishing goes on.
    cluster.nodes[0].kill();
    let before = b.metrics().records.get();
    poll::eventually(120, "published with a node down", || {
        b.metrics().records.get() > before + 300
    })
    .await;
    // All down: the writers go on, acknowledged as before.
    cluster.nodes[1].kill();
    cluster.nodes[2].kill();
    poll::eventually(30, "the bridge sees the bus gone", || {
        b.metrics().connected.get() == 0
    })
    .await;
    let held = b.metrics().published_seq.get() as u64;
    let at_outage = committed(&h).await;
    poll::eventually(60, "writes while the bus is down", || {
        store.committed_seq() > at_outage + 2000
    })
    .await;
    // The cursor holds retention at what the bus has.
    let report = store.run_retention(&policy(1_000_000)).unwrap();
    assert!(
        report.new_start <= held + 1,
        "{report:?} removed records the bus lacks (published {held})"
    );
    assert_eq!(
        report.held_by_cursor.as_deref(),
        Some("bridge-r3"),
        "{report:?}"
    );
    assert_eq!(b.metrics().published_seq.get() as u64, held);
    for n in &mut cluster.nodes {
        n.start();
    }
    let n = stop_writers(stop, tasks).await;
    assert!(n > 2000);
    let last = committed(&h).await;
    harness::wait_published(&url, "R3", last, 180).await;
    let client = server::client(&h).await;
    check_stream(&url, "R3", &client, 1, last).await;
    assert!(b.metrics().retries.get() > 0);
    b.shutdown().await.unwrap();
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn past_the_cursor_cap_retention_frees_the_disk_and_the_bridge_refuses_the_gap() {
    let Some((_dir, nats, h)) = single_env(1 << 20).await else {
        return;
    };
    let store = h.store().unwrap();
    let client = server::client(&h).await;
    let mkdirs = |from: usize, n: usize| {
        let c = &client;
        async move {
            for i in from..from + n {
                c.submit(commands::mkdir(&format!("/d{i}"))).await.unwrap();
            }
        }
    };
    let acked = |c: &treelog_client::Client| {
        let c = c.clone();
        async move {
            let list = c.cursors().await.unwrap();
            list.iter()
                .find(|x| x.name == "bridge-cap")
                .map(|x| (x.state.acked, x.state.expired.is_some()))
        }
    };
    mkdirs(0, 100).await;
    let b = bridge(&h, &nats.url(), "CAP", "bridge-cap", 1);
    harness::wait_published(&nats.url(), "CAP", 100, 30).await;
    poll::eventually(10, "cursor acknowledged", || {
        b.metrics().published_seq.get() == 100
    })
    .await;
    b.shutdown().await.unwrap();
    assert_eq!(acked(&client).await, Some((100, false)));
    // 1. Expired, nothing removed (only the cap bounds the log): the next
    //    bridge drops the cursor and goes on from the bus's position.
    mkdirs(100, 300).await;
    let report = store
        .run_retention(&RetentionPolicy {
            max_cursor_lag: Some(200),
            ..Default::default()
        })
        .unwrap();
    assert!(
        report.expired_cursors.contains(&"bridge-cap".to_owned()),
        "{report:?}"
    );
    assert_eq!(acked(&client).await, Some((100, true)));
    let b = bridge(&h, &nats.url(), "CAP", "bridge-cap", 1);
    harness::wait_published(&nats.url(), "CAP", 400, 30).await;
    b.shutdown().await.unwrap();
    check_stream(&nats.url(), "CAP", &client, 1, 400).await;
    assert_eq!(acked(&client).await, Some((400, false)), "a fresh cursor");
    // 2. Expired and the log cut past the bus's end: the disk is freed and
    //    the bridge refuses to go on (the stream would have a gap).
    mkdirs(400, 500).await;
    let report = store.run_retention(&policy(200)).unwrap();
    assert!(
        report.expired_cursors.contains(&"bridge-cap".to_owned()),
        "{report:?}"
    );
    assert!(report.new_start > 401, "{report:?}");
    let mut b = bridge(&h, &nats.url(), "CAP", "bridge-cap", 1);
    match tokio::time::timeout(Duration::from_secs(60), b.ended()).await {
        Ok(Err(BridgeError::Gap(m))) => assert!(m.contains("gap"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.metrics().failed.get(), 1);
    assert_eq!(
        harness::last_published(&nats.url(), "CAP").await,
        400,
        "nothing past the gap"
    );
    h.shutdown().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bridge_moved_from_the_leader_to_its_replica_goes_on_without_a_gap() {
    let Some((bin, dir)) = nats_env() else {
        return;
    };
    let nats = NatsServer::single(&bin, &dir.path().join("nats"), 1 << 20);
    let leader = server::start(&dir.path().join("leader"), |_| {}).await;
    let (stop, tasks) = writers(&leader, 2, 0);
    let a = bridge(&leader, &nats.url(), "MOVE", "bridge-leader", 1);
    poll::eventually(60, "published from the leader", || {
        a.metrics().records.get() > 300
    })
    .await;
    let replica = treelog_replica::start(treelog_replica::ReplicaConfig::new(
        server::config(&dir.path().join("replica")),
        leader.bound.rpc,
    ))
    .await
    .unwrap();
    // The leader's bridge stops (its node "fails"); one on the replica
    // takes over the same stream while the writers go on.
    a.shutdown().await.unwrap();
    let handed_over = harness::last_published(&nats.url(), "MOVE").await;
    let mut cfg = BridgeConfig::new(replica.bound.rpc);
    cfg.cursor = "bridge-replica".into();
    let b = treelog_bridge::start_nats(
        cfg,
        NatsConfig::new(nats.url(), "MOVE"),
        &prometheus_registry(),
    )
    .unwrap();
    poll::eventually(60, "published from the replica", || {
        b.metrics().published_seq.get() as u64 > handed_over + 300
    })
    .await;
    stop_writers(stop, tasks).await;
    let last = committed(&leader).await;
    harness::wait_published(&nats.url(), "MOVE", last, 60).await;
    // Byte for byte the leader's log: a record is the same on every node.
    let client = server::client(&leader).await;
    check_stream(&nats.url(), "MOVE", &client, 1, last).await;
    assert_eq!(b.metrics().duplicates.get(), 0);
    b.shutdown().await.unwrap();
    replica.shutdown().await.unwrap();
    leader.shutdown().await.unwrap();
}
