//! Clusters of three nodes in this process, on loopback, each a real
//! server with its own store: forming a cluster from a single node's
//! namespace, NotLeader and linearizable reads on followers, a minority
//! leader that cannot acknowledge writes while the majority elects another
//! (partitions in the network layer), a far-behind learner that installs
//! a snapshot, and a node whose data directory was wiped rejoining.

mod common;

use std::time::Duration;

use common::{default_tweak, submit, Cluster};
use treelog::error::ErrorKind;
use treelog::{Command, Durability, ReadAt};
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::ClusterRequest;
use treelog_raft::NodeConfig;
use treelog_testkit::commands::{create, mkdir};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_single_node_namespace_becomes_a_replicated_cluster() {
    let mut c = Cluster::new(3, default_tweak);
    // Node 1 starts with a namespace of its own, before any cluster.
    c.start(1).await;
    let one = c.client(1).await;
    // Not a cluster yet: writes are refused, nobody leads.
    let e = one.submit(mkdir("/early")).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotLeader);
    c.stop(1).await;
    {
        let t = treelog::Treelog::open(
            &c.node(1).dir,
            treelog::Options::default().durability(Durability::None),
        );
        // A cluster's node's store does not open as a single node.
        assert_eq!(t.err().unwrap().kind(), ErrorKind::Incompatible);
    }
    c.form().await;
    let leader = c.wait_leader(&[1, 2, 3]).await;
    assert_eq!(leader, 1);
    let cl = c.client(2).await;
    // Written through a follower: it refuses (NotLeader, naming node 1),
    // and the client sends it to the leader.
    let mut last = 0;
    last = last.max(submit(&cl, mkdir("/a")).await);
    for i in 0..200 {
        last = last.max(submit(&cl, create(&format!("/a/f{i}"))).await);
    }
    last = last.max(
        cl.submit(Command::Rename {
            src: "/a/f0".into(),
            dst: "/a/g0".into(),
            overwrite: false,
        })
        .await
        .unwrap(),
    );
    let direct = Client::connect(c.node(3).rpc, ClientOptions::default())
        .await
        .unwrap();
    match direct.submit(mkdir("/b")).await.unwrap_err() {
        treelog::Error::NotLeader { leader } => {
            assert_eq!(leader.as_deref(), Some(c.node(1).rpc.to_string().as_str()))
        }
        e => panic!("{e}"),
    }
    // A linearizable read on a follower sees every acknowledged write.
    let r = direct.stat_at("/a/g0", ReadAt::Linearizable).await.unwrap();
    assert!(r.seq >= last);
    // Every node holds the same index at the same sequence.
    c.converge(last).await;
    let st = c.admin(3, ClusterRequest::Status).await.unwrap();
    assert_eq!(st.leader, Some(1));
    assert_eq!(st.members.iter().filter(|m| m.voter).count(), 3);
    for id in c.ids() {
        c.stop(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_minority_leader_cannot_acknowledge_and_the_majority_goes_on() {
    let mut c = Cluster::new(3, default_tweak);
    c.form().await;
    let old = c.wait_leader(&[1, 2, 3]).await;
    let cl = c.client(old).await;
    let base = submit(&cl, mkdir("/p")).await;
    c.converge(base).await;
    // The leader alone on one side.
    c.faults.partition(&[old], &c.ids());
    let isolated = Client::connect(c.node(old).rpc, ClientOptions::default())
        .await
        .unwrap();
    let lost = tokio::spawn(async move { isolated.submit(mkdir("/p/minority")).await });
    let majority: Vec<u64> = c.ids().into_iter().filter(|&i| i != old).collect();
    let new = c.wait_leader(&majority).await;
    assert_ne!(new, old);
    let cm = c.client(new).await;
    let mut last = 0;
    for i in 0..50 {
        last = submit(&cm, create(&format!("/p/m{i}"))).await;
    }
    // The minority's write was never acknowledged as done.
    let r = lost.await.unwrap();
    assert!(
        matches!(
            r.as_ref().map_err(|e| e.kind()),
            Err(ErrorKind::OutcomeUnknown | ErrorKind::NotLeader)
        ),
        "the isolated leader answered {r:?}"
    );
    c.faults.heal();
    let last = last.max(submit(&cm, mkdir("/p/healed")).await);
    let digest = c.converge(last).await;
    // It was not committed: the new leader's log replaced it.
    let t = c.store(old);
    assert_eq!(
        t.stat("/p/minority").unwrap_err().kind(),
        ErrorKind::NotFound
    );
    assert!(t.stat("/p/m49").is_ok());
    assert!(!digest.is_empty());
    drop(t);
    for id in c.ids() {
        c.stop(id).await;
    }
}

fn snapshot_often(n: &mut NodeConfig) {
    n.heartbeat_ms = 50;
    n.snapshot_every = 300;
    n.keep_after_snapshot = 20;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_far_behind_learner_installs_a_snapshot_and_a_wiped_node_rejoins() {
    let mut c = Cluster::new(3, snapshot_often);
    // Two voters first; node 3 joins once the log has moved far on.
    for id in [1, 2, 3] {
        c.start(id).await;
    }
    c.admin(1, ClusterRequest::Init).await.unwrap();
    c.wait_leader(&[1]).await;
    c.admin(
        1,
        ClusterRequest::AddLearner {
            node: 2,
            addr: c.node(2).rpc.to_string(),
            wait: true,
        },
    )
    .await
    .unwrap();
    c.admin(1, ClusterRequest::Promote { nodes: vec![2] })
        .await
        .unwrap();
    let cl = c.client(1).await;
    submit(&cl, mkdir("/s")).await;
    let mut last = 0;
    for i in 0..1500 {
        last = submit(&cl, create(&format!("/s/f{i}"))).await;
    }
    // The leader purges its log behind its snapshots.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let st = c.admin(1, ClusterRequest::Status).await.unwrap();
        if st.purged.unwrap_or(0) > 100 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never purged: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.admin(
        1,
        ClusterRequest::AddLearner {
            node: 3,
            addr: c.node(3).rpc.to_string(),
            wait: true,
        },
    )
    .await
    .unwrap();
    let digest = c.converge(last).await;
    // Node 3's log starts after the snapshot it installed.
    assert!(c.store(3).log_start() > 100);
    c.admin(1, ClusterRequest::Promote { nodes: vec![3] })
        .await
        .unwrap();
    // Node 3 loses its data directory and comes back empty.
    c.stop(3).await;
    std::fs::remove_dir_all(&c.node(3).dir).unwrap();
    c.start(3).await;
    for i in 0..100 {
        last = submit(&cl, create(&format!("/s/after{i}"))).await;
    }
    let after = c.converge(last).await;
    assert_ne!(after, digest);
    assert_eq!(
        c.store(3).store().namespace_id().unwrap(),
        c.store(1).store().namespace_id().unwrap()
    );
    for id in c.ids() {
        c.stop(id).await;
    }
}

/// Reads `sub` until it has delivered everything up to `upto`; returns
/// the last position. Positions only go forward (no duplicate); records
/// without events may be left out (the caller checks against a log that
/// nothing else is missing).
async fn follow(
    sub: &mut treelog_client::RemoteSubscription,
    mut at: u64,
    upto: u64,
    seen: &mut Vec<(u64, Vec<String>)>,
) -> u64 {
    use treelog::stream::StreamItem;
    while at < upto {
        let item = tokio::time::timeout(Duration::from_secs(30), sub.next())
            .await
            .expect("the stream goes on")
            .expect("the stream has not ended")
            .expect("a stream item");
        match &item {
            StreamItem::Record { seq, events, .. } => {
                assert!(*seq > at, "record {seq} after position {at}");
                seen.push((
                    *seq,
                    events.iter().map(|e| format!("{:?}", e.event)).collect(),
                ));
            }
            StreamItem::Progress { seq } => assert!(*seq > at, "progress backwards"),
            other => panic!("unexpected {other:?}"),
        }
        at = item.position().unwrap();
    }
    at
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_subscriber_resumes_on_another_node_after_a_failover_without_gap_or_duplicate() {
    let mut c = Cluster::new(3, default_tweak);
    c.form().await;
    let cl = c.client(1).await;
    let mut seen = Vec::new();
    // A subscriber on follower 2, from the start.
    let on2 = Client::connect(c.node(2).rpc, ClientOptions::default())
        .await
        .unwrap();
    let mut sub = on2
        .subscribe(treelog::stream::SubscribeOptions {
            from: treelog::stream::StartFrom::Seq(1),
            ..Default::default()
        })
        .await
        .unwrap();
    submit(&cl, mkdir("/s")).await;
    let mut last = 0;
    for i in 0..100 {
        last = submit(&cl, create(&format!("/s/a{i}"))).await;
    }
    let at = follow(&mut sub, 0, last, &mut seen).await;
    drop(sub);
    drop(on2);
    // The leader dies, then the subscriber's node.
    c.stop(1).await;
    let leader = c.wait_leader(&[2, 3]).await;
    let cl = c.client(leader).await;
    for i in 0..100 {
        last = submit(&cl, create(&format!("/s/b{i}"))).await;
    }
    c.stop(2).await;
    c.start(1).await;
    c.wait_leader(&[1, 3]).await;
    // It resumes on node 3 after the last position it processed.
    let on3 = Client::connect(c.node(3).rpc, ClientOptions::default())
        .await
        .unwrap();
    let mut sub = on3
        .subscribe(treelog::stream::SubscribeOptions {
            from: treelog::stream::StartFrom::Seq(at + 1),
            ..Default::default()
        })
        .await
        .unwrap();
    let cl = c.client(3).await;
    for i in 0..20 {
        last = submit(&cl, create(&format!("/s/c{i}"))).await;
    }
    follow(&mut sub, at, last, &mut seen).await;
    // What it saw is node 3's log, record for record: every record with
    // events once, none other.
    let t = c.store(3);
    let got: std::collections::BTreeMap<u64, Vec<String>> = seen.iter().cloned().collect();
    assert_eq!(got.len(), seen.len(), "a record delivered twice");
    for seq in 1..=last {
        let rec = t.store().read_record(seq).unwrap().unwrap();
        let want: Vec<String> = rec.events.iter().map(|e| format!("{e:?}")).collect();
        match got.get(&seq) {
            Some(events) => assert_eq!(events, &want, "record {seq}"),
            None => assert!(want.is_empty(), "record {seq} was not delivered"),
        }
    }
    let created = seen
        .iter()
        .flat_map(|(_, e)| e)
        .filter(|e| e.starts_with("Create"))
        .count();
    assert_eq!(created, 1 + 100 + 100 + 20);
    drop(t);
    for id in [1, 3] {
        c.stop(id).await;
    }
}
