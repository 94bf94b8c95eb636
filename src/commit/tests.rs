//! The writer and its pipeline, stage by stage: validation against
//! groups not yet committed, publishing only after the fsync, failures.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use crate::command::Command;
use crate::commit::config::{Durability, WriterConfig};
use crate::commit::pipeline::{Committer, InFlight};
use crate::commit::request::{Request, Work};
use crate::commit::shared::Shared;
use crate::commit::writer::{StartRole, Writer};
use crate::engine::resolve;
use crate::engine::EngineState;
use crate::error::ErrorKind;
use crate::error::{Error, Result};
use crate::format::meta;
use crate::store::{Store, StoreOptions};

fn mkdir(path: &str) -> Command {
    Command::Mkdir {
        path: path.into(),
        parents: false,
        mode: 0o755,
        owner: String::new(),
        group: String::new(),
    }
}

type ReplyRx = tokio::sync::oneshot::Receiver<Result<u64>>;

fn request(cmd: Command) -> (Request, ReplyRx) {
    let (reply, rx) = tokio::sync::oneshot::channel();
    (Request::new(Work::Command(cmd, None), reply), rx)
}

/// A writer and syncer without their threads, so that a test decides
/// when a group is appended and when it is committed.
fn open(dir: &std::path::Path) -> (Arc<Shared>, Writer, Committer) {
    let store = Store::open(dir, &StoreOptions::default()).unwrap();
    let state = EngineState::load(&store.index()).unwrap();
    let shared = Arc::new(Shared::new(store, 16, 1024, None).unwrap());
    let w = Writer::new(
        shared.clone(),
        state,
        0,
        0,
        WriterConfig::default(),
        StartRole::Leader,
    );
    let s = Committer::new(shared.clone(), Durability::Sync);
    (shared, w, s)
}

/// A read that met a publish is not kept, whether it failed or not:
/// it may hold keys of two states. One that keeps meeting publishes is
/// read once more at a pinned snapshot, without the cache.
#[test]
fn a_read_that_met_a_publish_is_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, _w, _s) = open(dir.path());
    // No publish beside it: its answer stands, error or not.
    let mut calls = 0;
    let r: Result<((), u64)> = shared.read(|_, _| {
        calls += 1;
        Err(Error::corrupt("index", "edge points nowhere"))
    });
    assert_eq!((r.unwrap_err().kind(), calls), (ErrorKind::Corruption, 1));
    // A publish ran beside the first attempt, which succeeded: read
    // again, and the second answer stands.
    let mut calls = 0;
    let r = shared.read(|_, _| {
        calls += 1;
        if calls == 1 {
            shared
                .publication()
                .publishing()
                .fetch_add(2, Ordering::SeqCst);
        }
        Ok(calls)
    });
    assert_eq!(r.unwrap(), (2, 0));
    // Every fast attempt meets a publish: the last read is the pinned
    // one, and is kept whatever happens beside it.
    let mut calls = 0;
    let r = shared.read(|_, _| {
        calls += 1;
        shared
            .publication()
            .publishing()
            .fetch_add(2, Ordering::SeqCst);
        Ok(calls)
    });
    assert_eq!(r.unwrap().0, 4);
    // A publish that never ends (a syncer that died in it): the read
    // goes to the pinned snapshot instead of waiting forever.
    shared
        .publication()
        .publishing()
        .fetch_add(1, Ordering::SeqCst);
    let mut calls = 0;
    let r = shared.read(|_, _| {
        calls += 1;
        Ok(calls)
    });
    assert_eq!(r.unwrap().0, 1);
}

/// What a reader sees.
fn stat_kind(shared: &Shared, path: &str) -> Option<ErrorKind> {
    resolve(
        &shared.publication().index(shared.store()),
        shared.publication().names(),
        path,
    )
    .err()
    .map(|e| e.kind())
}

/// `applied_seq` at the snapshot readers read.
fn published_applied_seq(shared: &Shared) -> Option<u64> {
    shared
        .store()
        .index_at(&shared.publication().view().snap)
        .meta_u64(meta::APPLIED_SEQ_KEY)
        .unwrap()
}

/// What RocksDB holds, committed or not.
fn in_rocksdb(shared: &Shared, path: &str) -> bool {
    resolve(&shared.store().index(), shared.publication().names(), path).is_ok()
}

#[test]
fn a_group_validates_against_appended_groups_that_readers_do_not_see_yet() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, mut w, mut syncer) = open(dir.path());
    let (r1, mut rx1) = request(mkdir("/a"));
    let g1 = w.group(vec![r1]).unwrap();
    // In the WAL, not committed: not acknowledged, not visible.
    assert!(rx1.try_recv().is_err());
    assert_eq!(shared.committed(), 0);
    assert_eq!(stat_kind(&shared, "/a"), Some(ErrorKind::NotFound));
    // The writer sees it: /a/b needs /a, a second /a is refused.
    let (r2, mut rx2) = request(mkdir("/a/b"));
    let (r3, mut rx3) = request(mkdir("/a"));
    let g2 = w.group(vec![r2, r3]).unwrap();
    assert_eq!(w.pending_groups(), 2);
    assert_eq!(stat_kind(&shared, "/a/b"), Some(ErrorKind::NotFound));

    syncer.commit(vec![g1, g2]);
    assert_eq!(rx1.try_recv().unwrap().unwrap(), 1);
    assert_eq!(rx2.try_recv().unwrap().unwrap(), 2);
    assert_eq!(
        rx3.try_recv().unwrap().unwrap_err().kind(),
        ErrorKind::AlreadyExists
    );
    assert_eq!(shared.committed(), 2);
    assert_eq!(stat_kind(&shared, "/a/b"), None);
    assert_eq!(shared.store().applied_seq().unwrap(), 2);

    // The next group forgets what the index holds now.
    let (r4, _rx4) = request(mkdir("/a/b/c"));
    let _g3 = w.group(vec![r4]).unwrap();
    assert_eq!(w.pending_groups(), 1);
}

#[test]
fn readers_do_not_see_an_index_write_until_its_fsync_has_succeeded() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, mut w, mut c) = open(dir.path());
    // A reader's view made before the commit reads at the snapshot
    // published last when it reads, not when it was made (the readers'
    // cache depends on it: see `PublishedIndex`).
    let reader = shared.publication().index(shared.store());
    let (r1, mut rx1) = request(mkdir("/a"));
    let g1 = w.group(vec![r1]).unwrap();
    // The applier's step, as while the fsync runs.
    c.write_index(std::slice::from_ref(&g1));
    assert!(in_rocksdb(&shared, "/a"));
    assert_eq!(stat_kind(&shared, "/a"), Some(ErrorKind::NotFound));
    assert_eq!(published_applied_seq(&shared), Some(0));
    assert!(rx1.try_recv().is_err());
    c.sync(g1.record_count);
    assert_eq!(stat_kind(&shared, "/a"), Some(ErrorKind::NotFound));
    c.publish(vec![g1]);
    assert_eq!(rx1.try_recv().unwrap().unwrap(), 1);
    assert_eq!(stat_kind(&shared, "/a"), None);
    assert!(resolve(&reader, shared.publication().names(), "/a").is_ok());
    assert_eq!(published_applied_seq(&shared), Some(1));

    // A round whose fsync fails stays unseen, though RocksDB has it.
    let (r2, mut rx2) = request(mkdir("/b"));
    let g2 = w.group(vec![r2]).unwrap();
    c.write_index(std::slice::from_ref(&g2));
    c.failed = Some("injected fsync failure".into());
    c.publish(vec![g2]);
    assert!(in_rocksdb(&shared, "/b"));
    assert_eq!(stat_kind(&shared, "/b"), Some(ErrorKind::NotFound));
    // Its record is in the WAL: a restart may replay it.
    assert_eq!(
        rx2.try_recv().unwrap().unwrap_err().kind(),
        ErrorKind::OutcomeUnknown
    );
    assert_eq!(shared.committed(), 1);
}

/// Through the syncer and applier threads: a round whose fsync or
/// index write failed is refused, not published, and so is every round
/// after it, though their own fsyncs and writes succeed.
fn pipeline_failure_stops_the_commits(inject: impl Fn(&Shared, bool)) {
    let dir = tempfile::tempdir().unwrap();
    let (shared, mut w, _c) = open(dir.path());
    let in_flight = Arc::new(InFlight::default());
    let p = Committer::spawn(&shared, Durability::Sync, &in_flight).unwrap();
    let mut send = |path: &str| {
        let (r, rx) = request(mkdir(path));
        let g = w.group(vec![r]).unwrap();
        in_flight.add(1);
        assert!(p.tx.send(g).is_ok());
        rx
    };
    assert_eq!(send("/a").blocking_recv().unwrap().unwrap(), 1);
    inject(&shared, true);
    let b = send("/b");
    // Appended before /b's failure is known, and handed over after it.
    let c = send("/c");
    // Both were appended to the WAL before they were refused.
    assert_eq!(
        b.blocking_recv().unwrap().unwrap_err().kind(),
        ErrorKind::OutcomeUnknown
    );
    inject(&shared, false);
    assert_eq!(
        c.blocking_recv().unwrap().unwrap_err().kind(),
        ErrorKind::OutcomeUnknown
    );
    assert!(shared.failure().is_some());
    assert_eq!(shared.committed(), 1);
    assert_eq!(stat_kind(&shared, "/a"), None);
    for path in ["/b", "/c"] {
        assert_eq!(stat_kind(&shared, path), Some(ErrorKind::NotFound));
    }
    // The threads stop once their senders are gone.
    drop((p.tx, p.grower));
    for t in p.threads {
        t.join().unwrap();
    }
    assert!(in_flight.is_empty());
}

#[test]
fn a_failed_fsync_in_the_pipeline_stops_the_commits() {
    pipeline_failure_stops_the_commits(|s, on| s.inject.sync.store(on, Ordering::SeqCst));
}

#[test]
fn a_failed_index_write_in_the_pipeline_stops_the_commits() {
    pipeline_failure_stops_the_commits(|s, on| s.inject.index_write.store(on, Ordering::SeqCst));
}

#[test]
fn a_failed_commit_refuses_its_groups_and_stops_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, mut w, mut syncer) = open(dir.path());
    let (r1, mut rx1) = request(mkdir("/a"));
    let g1 = w.group(vec![r1]).unwrap();
    syncer.commit(vec![g1]);
    assert_eq!(rx1.try_recv().unwrap().unwrap(), 1);

    let (r2, mut rx2) = request(mkdir("/b"));
    let g2 = w.group(vec![r2]).unwrap();
    // As after a failed fsync: nothing of the group may be acknowledged.
    syncer.failed = Some("injected".into());
    syncer.commit(vec![g2]);
    assert_eq!(
        rx2.try_recv().unwrap().unwrap_err().kind(),
        ErrorKind::OutcomeUnknown
    );
    assert_eq!(shared.committed(), 1);
    assert_eq!(stat_kind(&shared, "/b"), Some(ErrorKind::NotFound));
    // The writer refuses everything after it, before the log: not
    // applied.
    let (r3, mut rx3) = request(mkdir("/c"));
    assert!(w.group(vec![r3]).is_none());
    assert_eq!(
        rx3.try_recv().unwrap().unwrap_err().kind(),
        ErrorKind::WriterStopped
    );
}

/// The drain barrier: it returns only once every group handed over is
/// done, however the groups finish.
#[test]
fn the_drain_barrier_waits_for_every_group_in_flight() {
    let f = Arc::new(InFlight::default());
    f.add(2);
    let (tx, rx) = std::sync::mpsc::channel();
    let waiter = {
        let f = f.clone();
        std::thread::spawn(move || {
            f.wait_drained();
            tx.send(()).unwrap();
        })
    };
    f.done(1);
    // One group is still in flight: the barrier cannot have returned.
    assert!(rx.try_recv().is_err());
    assert!(!f.is_empty());
    f.done(1);
    rx.recv().unwrap();
    waiter.join().unwrap();
    assert!(f.is_empty());
    // Nothing in flight: it returns at once.
    f.wait_drained();
}

mod follower {
    use std::sync::Arc;

    use crate::error::ErrorKind;
    use crate::replication::{ConsensusNode, NodeRole, ReplicaState};
    use crate::{Durability, Options, Treelog};

    fn open(dir: &std::path::Path, role: NodeRole) -> Treelog {
        let o = Options {
            role,
            ..Options::default().durability(Durability::None)
        };
        Treelog::open(dir, o).unwrap()
    }

    fn digest(t: &Treelog) -> String {
        crate::ops::admin::index_summary(t.store()).unwrap().digest
    }

    /// One function applies another's log, whether the records are copied
    /// into this log (a replica) or are in it already (a consensus
    /// follower): at the same sequence both indexes are the leader's, byte
    /// for byte, and the consensus follower keeps its log position beside
    /// them.
    #[test]
    fn a_replica_and_a_consensus_follower_apply_the_same_records_alike() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let leader = open(&dir.path().join("l"), NodeRole::Standalone);
        for i in 0..30 {
            leader.mkdir_p(format!("/a/d{i}/e")).unwrap();
        }
        leader.rename("/a/d3", "/a/z3", false).unwrap();
        leader.delete("/a/d7", true).unwrap();
        let end = leader.committed_seq();
        let records = leader.replication().batch(1, usize::MAX).unwrap();

        let replica = open(
            &dir.path().join("r"),
            NodeRole::Replica(Arc::new(ReplicaState::new("127.0.0.1:1"))),
        );
        let node = open(
            &dir.path().join("n"),
            NodeRole::Consensus(ConsensusNode { node_id: 1 }),
        );
        let entries: Vec<(u64, Vec<u8>)> = (1..).zip(records.iter().cloned()).collect();
        node.replication().append(&entries).unwrap();
        for chunk in records.chunks(7) {
            rt.block_on(replica.replication().replicate(chunk.to_vec()))
                .unwrap();
            rt.block_on(node.replication().apply(chunk.to_vec()))
                .unwrap();
        }
        assert_eq!(replica.committed_seq(), end);
        assert_eq!(node.committed_seq(), end);
        assert_eq!(digest(&replica), digest(&leader));
        assert_eq!(digest(&node), digest(&leader));
        assert_eq!(
            node.stat("/a/z3/e").unwrap().id,
            leader.stat("/a/z3/e").unwrap().id
        );
        // The consensus follower's position: the last entry applied.
        let applied = node.replication().applied().unwrap().applied.unwrap();
        assert_eq!(applied.index, end);
    }

    /// A follower takes no commands (`NotLeader`), and a batch of records
    /// that does not continue its log is refused whole, applying nothing.
    #[test]
    fn a_follower_refuses_commands_and_a_batch_after_a_gap() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let leader = open(&dir.path().join("l"), NodeRole::Standalone);
        for i in 0..5 {
            leader.mkdir_p(format!("/d{i}")).unwrap();
        }
        let records = leader.replication().batch(1, usize::MAX).unwrap();
        let node = open(
            &dir.path().join("n"),
            NodeRole::Consensus(ConsensusNode { node_id: 1 }),
        );
        let e = node.mkdir_p("/x").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotLeader, "{e}");
        let entries: Vec<(u64, Vec<u8>)> = (1..).zip(records.iter().cloned()).collect();
        node.replication().append(&entries).unwrap();
        // Records 2.. without 1: a gap before a record with events.
        let e = rt
            .block_on(node.replication().apply(records[1..].to_vec()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
        assert_eq!(node.committed_seq(), 0);
        rt.block_on(node.replication().apply(records.clone()))
            .unwrap();
        assert_eq!(node.committed_seq(), 5);
    }
}
