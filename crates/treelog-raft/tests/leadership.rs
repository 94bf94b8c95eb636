//! Who leads, as the nodes of an in-process cluster report it: peers named
//! by host name; a node catching up that knows the leader but not yet its
//! address; a leader cut off from its majority stepping down
//! (check-quorum) and, once healed, naming the new leader; linearizable
//! reads that reach a node no longer leading, and on a node cut off from
//! the leader alone; `/readyz` and the build's metric.

mod common;

use std::time::{Duration, Instant};

use common::{bounded, default_tweak, localhost_resolves, submit, Cluster};
use openraft::async_runtime::WatchReceiver;
use treelog::error::ErrorKind;
use treelog::ReadAt;
use treelog_client::{Client, ClientOptions};
use treelog_proto::protocol::ClusterRequest;
use treelog_raft::NodeConfig;
use treelog_testkit::commands::{create, mkdir};
use treelog_testkit::http;

/// A client of node `id` that does not follow the leader (it sees what
/// that node answers).
async fn direct(c: &Cluster, id: u64) -> Client {
    Client::connect(c.node(id).rpc, ClientOptions::default())
        .await
        .unwrap()
}

/// The election timeout (most) of `heartbeat_ms`.
fn election_timeout(heartbeat_ms: u64) -> Duration {
    Duration::from_millis(heartbeat_ms * treelog_raft::node::ELECTION_TIMEOUT_MAX_HEARTBEATS)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn peers_named_by_host_name_form_a_cluster_and_replicate() {
    bounded(named_peers()).await
}

async fn named_peers() {
    if !localhost_resolves() {
        return;
    }
    let mut c = Cluster::new(3, default_tweak);
    c.named = true;
    c.form().await;
    let leader = c.wait_leader(&[1, 2, 3]).await;
    // The membership holds the names as given: what the nodes dial (once
    // node 2 has received the promotion).
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        let st = c.admin(2, ClusterRequest::Status).await.unwrap();
        if st.members.iter().filter(|m| m.voter).count() == 3 {
            break st;
        }
        assert!(Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let mut addrs: Vec<String> = st.members.iter().map(|m| m.addr.clone()).collect();
    addrs.sort();
    let mut want: Vec<String> = c.ids().into_iter().map(|id| c.addr(id)).collect();
    want.sort();
    assert_eq!(addrs, want);
    assert!(
        addrs.iter().all(|a| a.starts_with("localhost:")),
        "{addrs:?}"
    );
    // A follower names the leader by its name; a client following it
    // resolves the name.
    let follower = if leader == 1 { 2 } else { 1 };
    match direct(&c, follower).await.submit(mkdir("/x")).await {
        Err(treelog::Error::NotLeader { leader: Some(l) }) => assert_eq!(l, c.addr(leader)),
        other => panic!("{other:?}"),
    }
    let cl = c.client(follower).await;
    let mut last = submit(&cl, mkdir("/n")).await;
    for i in 0..50 {
        last = submit(&cl, create(&format!("/n/f{i}"))).await;
    }
    // A linearizable read on a follower asks the leader, by name.
    let r = direct(&c, follower)
        .await
        .stat_at("/n/f49", ReadAt::Linearizable)
        .await
        .unwrap();
    assert!(r.seq >= last);
    c.converge(last).await;
    for id in c.ids() {
        c.stop(id).await;
    }
}

/// A read's outcome on the joining node, and when.
type Outcome = (Instant, Result<u64, String>);

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_joining_node_waits_for_the_leaders_address_instead_of_refusing_reads() {
    bounded(joining_node_reads()).await
}

async fn joining_node_reads() {
    let mut c = Cluster::new(3, default_tweak);
    for id in c.ids() {
        c.start(id).await;
    }
    c.admin(1, ClusterRequest::Init).await.unwrap();
    c.wait_leader(&[1]).await;
    let cl = c.client(1).await;
    submit(&cl, mkdir("/j")).await;
    for i in 0..300 {
        submit(&cl, create(&format!("/j/f{i}"))).await;
    }
    // Node 3 is read from, linearizably, all the while it joins.
    let on3 = direct(&c, 3).await;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut seen: Vec<Outcome> = Vec::new();
            while !stop.load(std::sync::atomic::Ordering::Acquire) {
                let r = on3.stat_at("/j", ReadAt::Linearizable).await;
                seen.push((Instant::now(), r.map(|r| r.seq).map_err(|e| e.to_string())));
            }
            seen
        }
    });
    for id in [2, 3] {
        c.admin(
            1,
            ClusterRequest::AddLearner {
                node: id,
                addr: c.addr(id),
                wait: id == 2,
            },
        )
        .await
        .unwrap();
    }
    // Until node 3 has caught up (at its own pace: not waited for above).
    let t3 = c.store(3);
    let t1 = c.store(1);
    treelog_testkit::poll::eventually(30, "node 3 catches up", || {
        t3.committed_seq() >= t1.committed_seq()
    })
    .await;
    drop((t1, t3));
    // Some reads after it.
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, std::sync::atomic::Ordering::Release);
    let seen = reader.await.unwrap();
    let first_ok = seen
        .iter()
        .position(|(_, r)| r.is_ok())
        .expect("a read succeeded on node 3");
    for (_, r) in &seen {
        if let Err(e) = r {
            assert!(
                !e.contains("has no address"),
                "a read refused for the leader's address: {e}"
            );
        }
    }
    // Once it has read, it keeps reading: no refusal while it catches up.
    let later: Vec<&String> = seen[first_ok..]
        .iter()
        .filter_map(|(_, r)| r.as_ref().err())
        .collect();
    assert!(later.is_empty(), "reads failed after the first: {later:?}");
    for id in c.ids() {
        c.stop(id).await;
    }
}

fn slower_heartbeat(n: &mut NodeConfig) {
    // Elections settle within 0.6 s; long enough that a loaded machine
    // does not hold needless ones.
    n.heartbeat_ms = 100;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_leader_cut_off_from_its_majority_steps_down_and_names_the_new_leader_once_healed() {
    bounded(check_quorum()).await
}

async fn check_quorum() {
    let mut c = Cluster::new(3, slower_heartbeat);
    c.form().await;
    let old = c.wait_leader(&[1, 2, 3]).await;
    let cl = c.client(old).await;
    let base = submit(&cl, mkdir("/q")).await;
    c.converge(base).await;
    let timeout = election_timeout(100);
    let cut = Instant::now();
    c.faults.partition(&[old], &c.ids());
    // It stops reporting itself leader once no majority answered within
    // an election timeout (bound: ten times that, for a loaded machine).
    let mut stepped = None;
    while cut.elapsed() < timeout * 10 {
        let st = c.admin(old, ClusterRequest::Status).await.unwrap();
        if st.state != "leader" {
            assert_eq!(st.leader, None, "{st:?}");
            stepped = Some(cut.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let stepped = stepped.expect("the cut-off leader still reports itself leader");
    // Not before its lease (less the heartbeat before the cut) ran out.
    assert!(
        stepped >= timeout / 2,
        "stepped down after {stepped:?}, before its lease ran out"
    );
    // openraft itself still holds the leadership (it would resume it if a
    // majority answered again): the step-down is the node's own.
    let raw = {
        let raft = c
            .node(old)
            .handle
            .as_ref()
            .unwrap()
            .node
            .raft()
            .await
            .unwrap();
        let m = raft.metrics().borrow_watched().clone();
        m.state
    };
    assert_eq!(raw, openraft::ServerState::Leader);
    // Its metrics say the same as its status.
    let (code, metrics) = http::get(c.node(old).http, "/metrics").await;
    assert_eq!(code, 200);
    for want in [
        "treelog_raft_state{state=\"leader\"} 0",
        "treelog_raft_state{state=\"follower\"} 1",
        "treelog_raft_leader 0",
    ] {
        assert!(
            metrics.lines().any(|l| l == want),
            "no `{want}` in the cut-off node's metrics"
        );
    }
    // Refused at once, naming no one: it knows no leader.
    let on_old = direct(&c, old).await;
    match on_old.submit(mkdir("/q/minority")).await {
        Err(treelog::Error::NotLeader { leader: None }) => {}
        other => panic!("the cut-off node answered {other:?}"),
    }
    let e = on_old
        .stat_at("/q", ReadAt::Linearizable)
        .await
        .unwrap_err();
    assert!(
        matches!(e.kind(), ErrorKind::Busy | ErrorKind::NotLeader),
        "{e}"
    );
    // The majority elects another; from then on, one leader is reported.
    let majority: Vec<u64> = c.ids().into_iter().filter(|&i| i != old).collect();
    let new = c.wait_leader(&majority).await;
    for _ in 0..10 {
        let mut leaders = Vec::new();
        for id in c.ids() {
            let st = c.admin(id, ClusterRequest::Status).await.unwrap();
            if st.state == "leader" {
                leaders.push((id, st.term));
            }
        }
        assert!(
            leaders.iter().all(|(id, _)| *id != old),
            "the cut-off node reports itself leader again: {leaders:?}"
        );
        let top = leaders.iter().map(|(_, t)| *t).max();
        assert!(
            leaders.iter().filter(|(_, t)| Some(*t) == top).count() <= 1,
            "{leaders:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let cm = c.client(new).await;
    let mut last = 0;
    for i in 0..20 {
        last = submit(&cm, create(&format!("/q/m{i}"))).await;
    }
    c.faults.heal();
    // Back in the cluster, the former leader follows and names the leader.
    let new_addr = c.addr(new);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = c.admin(old, ClusterRequest::Status).await.unwrap();
        let current = c.wait_leader(&c.ids()).await;
        if st.state == "follower" && st.leader == Some(current) && current != old {
            break;
        }
        assert!(Instant::now() < deadline, "never followed: {st:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let current = c.wait_leader(&c.ids()).await;
    if current == new {
        match on_old.submit(mkdir("/q/after")).await {
            Err(treelog::Error::NotLeader { leader }) => {
                assert_eq!(leader.as_deref(), Some(new_addr.as_str()))
            }
            other => panic!("the former leader answered {other:?}"),
        }
    }
    // A linearizable read on it sees every acknowledged write (its read
    // index asked of the leader it now knows).
    let r = on_old
        .stat_at("/q/m19", ReadAt::Linearizable)
        .await
        .unwrap();
    assert!(r.seq >= last);
    for id in c.ids() {
        c.stop(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_read_index_asked_of_a_node_no_longer_leading_is_asked_of_the_leader_it_names() {
    bounded(read_index_hop()).await
}

async fn read_index_hop() {
    let mut c = Cluster::new(3, slower_heartbeat);
    c.form().await;
    let old = c.wait_leader(&[1, 2, 3]).await;
    let others: Vec<u64> = c.ids().into_iter().filter(|&i| i != old).collect();
    let (to, reader) = (others[0], others[1]);
    let cl = c.client(old).await;
    let base = submit(&cl, mkdir("/r")).await;
    c.converge(base).await;
    // Whatever `to` sends the reader arrives a second late: once `old`
    // hands its leadership to `to`, the reader still believes `old` leads.
    c.faults.delay(to, reader, Duration::from_secs(1));
    c.admin(old, ClusterRequest::TransferLeader { node: to })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = c.admin(old, ClusterRequest::Status).await.unwrap();
        if st.leader == Some(to) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the transfer never happened: {st:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let st = c.admin(reader, ClusterRequest::Status).await.unwrap();
    assert_eq!(
        st.leader,
        Some(old),
        "the reader heard of the new leader already"
    );
    // Its read index goes to `old`, which names `to`: asked there, not
    // refused.
    let r = direct(&c, reader)
        .await
        .stat_at("/r", ReadAt::Linearizable)
        .await
        .unwrap();
    assert!(
        r.seq > base,
        "read at {} before the new leader's term",
        r.seq
    );
    c.faults.heal();
    for id in c.ids() {
        c.stop(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn readyz_says_whether_a_node_has_a_leader_and_the_build_is_labelled() {
    bounded(readiness_and_build_info()).await
}

async fn readiness_and_build_info() {
    let mut c = Cluster::new(3, slower_heartbeat);
    for id in c.ids() {
        c.start(id).await;
    }
    // Not a member of any cluster yet: not ready, and why.
    let (code, body) = http::get(c.node(2).http, "/readyz").await;
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("not a member"), "{body}");
    c.admin(1, ClusterRequest::Init).await.unwrap();
    c.wait_leader(&[1]).await;
    for id in [2, 3] {
        c.admin(
            1,
            ClusterRequest::AddLearner {
                node: id,
                addr: c.addr(id),
                wait: true,
            },
        )
        .await
        .unwrap();
    }
    c.admin(1, ClusterRequest::Promote { nodes: vec![2, 3] })
        .await
        .unwrap();
    for id in c.ids() {
        let at = c.node(id).http;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let (code, body) = http::get(at, "/readyz").await;
            if code == 200 {
                assert_eq!(body, "ready\n");
                break;
            }
            assert!(Instant::now() < deadline, "node {id} never ready: {body}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    // The leader cut off: not ready once it steps down.
    let old = c.wait_leader(&[1, 2, 3]).await;
    c.faults.partition(&[old], &c.ids());
    let deadline = Instant::now() + election_timeout(100) * 10;
    loop {
        let (code, body) = http::get(c.node(old).http, "/readyz").await;
        if code == 503 {
            assert!(body.contains("majority"), "{body}");
            break;
        }
        assert!(Instant::now() < deadline, "the cut-off leader stays ready");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.faults.heal();
    // What the build is, on every node's /metrics.
    let (code, body) = http::get(c.node(1).http, "/metrics").await;
    assert_eq!(code, 200);
    let line = body
        .lines()
        .find(|l| l.starts_with("treelog_build_info{"))
        .unwrap_or_else(|| panic!("no treelog_build_info in {body}"));
    assert!(line.ends_with(" 1"), "{line}");
    for label in ["version=\"", "commit=\"", "format=\"", "protocol=\""] {
        assert!(line.contains(label), "{line}");
    }
    assert!(!line.contains("commit=\"\""), "{line}");
    for id in c.ids() {
        c.stop(id).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_cut_off_from_the_leader_alone_fails_reads_at_once_naming_it() {
    bounded(cut_off_from_the_leader()).await
}

async fn cut_off_from_the_leader() {
    let mut c = Cluster::new(3, slower_heartbeat);
    c.form().await;
    let leader = c.wait_leader(&[1, 2, 3]).await;
    let cl = c.client(leader).await;
    let base = submit(&cl, mkdir("/c")).await;
    c.converge(base).await;
    let reader = if leader == 1 { 2 } else { 1 };
    // The reader and the leader cannot reach each other; the third node
    // reaches both (so the leader keeps its majority, and the reader's
    // pre-vote finds no support: it goes on knowing the leader).
    c.faults.block(leader, reader);
    c.faults.block(reader, leader);
    let on_reader = direct(&c, reader).await;
    let started = Instant::now();
    let e = on_reader
        .stat_at("/c", ReadAt::Linearizable)
        .await
        .unwrap_err();
    // Refused, not waited on until the read's 30 s bound ran out.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the read failed only after {:?}",
        started.elapsed()
    );
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");
    assert!(e.to_string().contains(&c.addr(leader)), "{e}");
    // Reads at the node's own state go on.
    on_reader.stat_at("/c", ReadAt::Latest).await.unwrap();
    c.faults.heal();
    let r = on_reader.stat_at("/c", ReadAt::Linearizable).await.unwrap();
    assert!(r.seq >= base);
    for id in c.ids() {
        c.stop(id).await;
    }
}
