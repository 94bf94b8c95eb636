//! Replication, the library's part (docs/REPLICATION.md).
//!
//! A store is a **leader**, which takes commands, or a **replica** of a
//! source (a leader or another replica), which refuses commands
//! (`NotLeader`, naming the leader) and takes the source's log records
//! instead: as they are stored there (envelopes and checksums), through
//! the same writer, syncer and publisher as commands (one fsync per batch,
//! readers see only whole committed batches), applied with the function
//! replay uses. At the same sequence a replica's `log`, `inodes` and
//! `edges` are the source's, byte for byte.
//!
//! Either role serves its committed log to replicas
//! (`Treelog::replication_batch`), after checking that the asking
//! replica is of the same namespace and has the same history.
//!
//! The network side (fetching a checkpoint, streaming records,
//! re-bootstrapping) is the `treelog-replica` crate; [`ReplicaState`] is
//! what it tells the store and what the store reports (`admin status`,
//! metrics), kept outside any one `Treelog` so that it outlives a
//! re-bootstrap.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use treelog_proto::protocol::{NodeStatus, ReplicateFrom, Role};

use crate::commit::request::{StoredRecords, Work};
use crate::commit::shared::Shared;
use crate::error::{Error, Result};
use crate::format::record;

/// What a replica knows of its source, and its counters.
#[derive(Debug)]
pub struct ReplicaState {
    source: String,
    /// The leader at the head of the chain, when the source is itself a
    /// replica (what `NotLeader` names).
    leader: std::sync::Mutex<Option<String>>,
    leader_committed: AtomicU64,
    connected: AtomicBool,
    /// `time_ms` of the last record applied (the source's clock).
    applied_time_ms: AtomicU64,
    /// The source's clock when it last said something, and when that was
    /// here: the lag in time is measured on the source's clock, so that
    /// the two machines' clocks need not agree.
    source_clock: std::sync::Mutex<Option<(u64, std::time::Instant)>>,
    reconnects: AtomicU64,
    /// Attempts to reach the source that failed (it was down, refused,
    /// or did not answer the handshake).
    connect_failures: AtomicU64,
    rebootstraps: AtomicU64,
    bootstrap_bytes: AtomicU64,
    bootstrap_ms: AtomicU64,
    bootstrap_fetch_ms: AtomicU64,
    caught_up: AtomicU64,
}

/// The counters of a replica, as read at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct ReplicaCounters {
    pub leader_committed: u64,
    pub connected: bool,
    pub applied_time_ms: u64,
    pub reconnects: u64,
    pub connect_failures: u64,
    pub rebootstraps: u64,
    pub bootstrap_bytes: u64,
    pub bootstrap_ms: u64,
    /// The part of `bootstrap_ms` spent fetching the checkpoint.
    pub bootstrap_fetch_ms: u64,
    /// Records applied by catch-ups before serving ([`CatchUp`]).
    pub caught_up: u64,
}

impl ReplicaState {
    /// A replica of the server at `source` (its address, as clients reach
    /// it: `NotLeader` and `Lagging` name it).
    pub fn new(source: impl Into<String>) -> ReplicaState {
        ReplicaState {
            source: source.into(),
            leader: Default::default(),
            leader_committed: AtomicU64::new(0),
            connected: AtomicBool::new(false),
            applied_time_ms: AtomicU64::new(0),
            source_clock: Default::default(),
            reconnects: AtomicU64::new(0),
            connect_failures: AtomicU64::new(0),
            rebootstraps: AtomicU64::new(0),
            bootstrap_bytes: AtomicU64::new(0),
            bootstrap_ms: AtomicU64::new(0),
            bootstrap_fetch_ms: AtomicU64::new(0),
            caught_up: AtomicU64::new(0),
        }
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The node that takes writes: the source's own leader when the source
    /// is a replica, else the source.
    pub fn leader(&self) -> String {
        let l = self.leader.lock().unwrap_or_else(|p| p.into_inner());
        l.clone().unwrap_or_else(|| self.source.clone())
    }

    /// The source says its leader is `leader` (`None`: it is the leader).
    pub fn set_leader(&self, leader: Option<String>) {
        *self.leader.lock().unwrap_or_else(|p| p.into_inner()) = leader;
    }

    /// The source said it has committed `seq` (a source restored from an
    /// older backup may say less than before), at `now_ms` on its clock.
    pub fn heard(&self, seq: u64, now_ms: u64) {
        self.leader_committed.store(seq, Ordering::Release);
        *self.source_clock.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((now_ms, std::time::Instant::now()));
    }

    /// Now on the source's clock, as far as this replica can tell (its own
    /// clock before the source has said anything).
    fn source_now_ms(&self) -> u64 {
        match *self.source_clock.lock().unwrap_or_else(|p| p.into_inner()) {
            Some((ms, at)) => ms + at.elapsed().as_millis() as u64,
            None => crate::clock::now_ms(),
        }
    }

    pub fn set_connected(&self, up: bool) {
        self.connected.store(up, Ordering::Release);
    }

    /// The time of the last record applied (ms since the epoch).
    pub(crate) fn set_applied_time_ms(&self, t: u64) {
        self.applied_time_ms.store(t, Ordering::Release);
    }

    /// A catch-up before serving applied `n` records.
    pub fn caught_up(&self, n: u64) {
        self.caught_up.fetch_add(n, Ordering::Relaxed);
    }

    pub fn reconnected(&self) {
        self.reconnects.fetch_add(1, Ordering::Relaxed);
    }

    pub fn connect_failed(&self) {
        self.connect_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub fn rebootstrapped(&self) {
        self.rebootstraps.fetch_add(1, Ordering::Relaxed);
    }

    /// A bootstrap fetched `bytes` in `fetch` and was ready (checked and
    /// restored) after `elapsed`.
    pub fn bootstrapped(&self, bytes: u64, fetch: Duration, elapsed: Duration) {
        self.bootstrap_bytes.store(bytes, Ordering::Relaxed);
        self.bootstrap_fetch_ms
            .store(fetch.as_millis() as u64, Ordering::Relaxed);
        self.bootstrap_ms
            .store(elapsed.as_millis() as u64, Ordering::Relaxed);
    }

    pub fn counters(&self) -> ReplicaCounters {
        ReplicaCounters {
            leader_committed: self.leader_committed.load(Ordering::Acquire),
            connected: self.connected.load(Ordering::Acquire),
            applied_time_ms: self.applied_time_ms.load(Ordering::Acquire),
            reconnects: self.reconnects.load(Ordering::Relaxed),
            connect_failures: self.connect_failures.load(Ordering::Relaxed),
            rebootstraps: self.rebootstraps.load(Ordering::Relaxed),
            bootstrap_bytes: self.bootstrap_bytes.load(Ordering::Relaxed),
            bootstrap_ms: self.bootstrap_ms.load(Ordering::Relaxed),
            bootstrap_fetch_ms: self.bootstrap_fetch_ms.load(Ordering::Relaxed),
            caught_up: self.caught_up.load(Ordering::Relaxed),
        }
    }
}

/// What `NotLeader` names on a replica: the node at the head of its chain.
impl crate::commit::port::LeaderHint for ReplicaState {
    fn leader(&self) -> Option<String> {
        Some(ReplicaState::leader(self))
    }
}

/// The CRC-32C field of a stored record (its envelope's bytes 2..6).
pub fn record_crc(stored: &[u8]) -> Option<u32> {
    let b = stored.get(2..record::ENVELOPE_HEADER_LEN)?;
    Some(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// `NotLeader` (naming the source) on a replica.
pub(crate) fn check_leader(replica: Option<&ReplicaState>) -> Result<()> {
    match replica {
        None => Ok(()),
        Some(r) => Err(Error::NotLeader {
            leader: Some(r.leader()),
        }),
    }
}

/// The error of a read that asked for `seq` and waited `waited` in vain:
/// `Lagging` on a replica, `Busy` on a leader (which has not committed a
/// sequence a client says it saw: from another namespace, or lost with a
/// power cut of an unsynced store).
pub(crate) fn not_caught_up(
    shared: &Shared,
    replica: Option<&ReplicaState>,
    seq: u64,
    waited: Duration,
) -> Error {
    let applied = shared.committed();
    match replica {
        Some(r) => Error::Lagging {
            applied,
            wanted: seq,
            waited_ms: waited.as_millis() as u64,
            leader: Some(r.leader()),
        },
        None => Error::Busy(format!(
            "not caught up to sequence {seq} within {waited:?} (committed: {applied})"
        )),
    }
}

/// The work of `Treelog::replicate`'s batch, and the time of its last
/// record (the replica's lag in time is measured from it).
pub(crate) fn replicated(
    replica: Option<&ReplicaState>,
    records: Vec<Vec<u8>>,
) -> Result<(Work, Option<u64>)> {
    if replica.is_none() {
        return Err(Error::InvalidArgument(
            "this store is a leader: it does not take replicated records".into(),
        ));
    }
    let last_time = match records.last() {
        Some(last) => Some(record::decode_record_ref(last, None)?.time_ms),
        None => None,
    };
    Ok((
        Work::Records(StoredRecords {
            records,
            append: true,
            from_empty: false,
            meta: Vec::new(),
        }),
        last_time,
    ))
}

/// Checks that a replica asking for records from `req.from` continues this
/// store's history: the same namespace (else `Incompatible`), `from` not
/// past the committed end + 1, and its record `from - 1` (when this store
/// still has it) the same as ours (else `PositionGone`).
pub(crate) fn check_replica(shared: &Shared, req: &ReplicateFrom) -> Result<()> {
    let store = shared.store();
    let ours = store.namespace_id()?;
    if req.namespace != ours {
        return Err(Error::Incompatible {
            path: store.path().display().to_string(),
            detail: format!(
                "the replica's namespace is {}, this node's is {ours}: it is a replica of \
                 another namespace",
                req.namespace
            ),
        });
    }
    let committed = shared.committed();
    if req.from == 0 || req.from > committed + 1 {
        return Err(Error::PositionGone(format!(
            "the replica asks for sequence {} but this node has committed only {committed}: \
             the replica is ahead of it (a source restored from an older backup?)",
            req.from
        )));
    }
    if let (Some(want), Some(prev)) = (req.prev_crc, req.from.checked_sub(1)) {
        if prev >= shared.retention().log_start() && prev > 0 {
            if let Some(v) = store.read_record_bytes(prev)? {
                if record_crc(&v) != Some(want) {
                    return Err(Error::PositionGone(format!(
                        "the replica's record {prev} differs from this node's: the histories \
                         diverged"
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Keeps the durable cursor `name` at a replica's position `applied`
/// (creating it, or making it again if retention had expired it), so that
/// retention keeps the records after it.
pub(crate) fn hold_for_replica(shared: &Shared, name: &str, applied: u64) -> Result<()> {
    let (r, store) = (shared.retention(), shared.store());
    if let Some(Err(_)) = r.cursor_acked(name) {
        r.drop_cursor(store, name)?;
    }
    r.open_cursor(store, name, applied)?;
    r.ack(store, shared.committed(), name, applied)
}

/// Committed records from `from` as stored, at most `max_bytes` of them
/// (at least one, whatever its size), none past the committed sequence
/// (the log may hold records whose fsync has not finished). `Compacted`
/// when retention has removed `from`.
pub(crate) fn replication_batch(
    shared: &Shared,
    from: u64,
    max_bytes: usize,
) -> Result<Vec<Vec<u8>>> {
    let committed = shared.committed();
    if from > committed {
        return Ok(Vec::new());
    }
    shared
        .store()
        .committed_log_bytes(from, committed, max_bytes)
}

/// The node's role and positions (`admin status`).
pub(crate) fn status(shared: &Shared, replica: Option<&ReplicaState>) -> NodeStatus {
    let applied = shared.committed();
    let namespace = shared.store().namespace_id().unwrap_or_default();
    let (log_start, log_bytes) = (
        shared.retention().log_start(),
        shared.retention().log_bytes(),
    );
    match replica {
        None => NodeStatus {
            role: Role::Leader,
            leader: None,
            namespace,
            applied_seq: applied,
            leader_committed_seq: applied,
            lag_records: 0,
            lag_ms: 0,
            connected: true,
            log_start,
            log_bytes,
        },
        Some(r) => {
            let c = r.counters();
            let lag_records = c.leader_committed.saturating_sub(applied);
            NodeStatus {
                role: Role::Replica,
                leader: Some(r.leader()),
                namespace,
                applied_seq: applied,
                leader_committed_seq: c.leader_committed.max(applied),
                lag_records,
                lag_ms: if lag_records == 0 || c.applied_time_ms == 0 {
                    0
                } else {
                    r.source_now_ms().saturating_sub(c.applied_time_ms)
                },
                connected: c.connected,
                log_start,
                log_bytes,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{ReplicaState, Role};
    use crate::error::{Error, ErrorKind};
    use crate::replication::NodeRole;
    use crate::{Options, Treelog};

    fn open(dir: &std::path::Path, replica: bool) -> Treelog {
        let mut o = Options::default().durability(crate::Durability::None);
        if replica {
            o.role = NodeRole::Replica(Arc::new(ReplicaState::new("10.0.0.1:7400")));
        }
        Treelog::open(dir, o).unwrap()
    }

    #[test]
    fn a_replica_applies_the_leaders_records_verbatim_and_refuses_damaged_batches() {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let leader = open(&dir.path().join("l"), false);
        let replica = open(&dir.path().join("r"), true);
        for i in 0..20 {
            leader.mkdir_p(format!("/a/d{i}")).unwrap();
        }
        leader.rename("/a/d3", "/a/e3", false).unwrap();
        let end = leader.committed_seq();
        let all = leader.replication().batch(1, usize::MAX).unwrap();
        assert_eq!(all.len() as u64, end);

        // Commands are refused, naming the source.
        match replica.mkdir_p("/x") {
            Err(Error::NotLeader { leader }) => {
                assert_eq!(leader.as_deref(), Some("10.0.0.1:7400"))
            }
            other => panic!("{other:?}"),
        }
        // A damaged record refuses its whole batch; so does a gap.
        let mut damaged = all[..5].to_vec();
        let last = damaged[3].len() - 1;
        damaged[3][last] ^= 1;
        let e = rt
            .block_on(replica.replication().replicate(damaged))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
        let e = rt
            .block_on(replica.replication().replicate(all[1..4].to_vec()))
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
        assert_eq!(replica.committed_seq(), 0);
        assert!(replica.store().read_record_bytes(1).unwrap().is_none());

        // In batches, the whole log: the same records, the same index.
        for chunk in all.chunks(7) {
            rt.block_on(replica.replication().replicate(chunk.to_vec()))
                .unwrap();
        }
        assert_eq!(replica.committed_seq(), end);
        for (i, v) in all.iter().enumerate() {
            let got = replica.store().read_record_bytes(i as u64 + 1).unwrap();
            assert_eq!(got.as_ref(), Some(v), "record {}", i + 1);
        }
        assert_eq!(
            replica.stat("/a/e3").unwrap().id,
            leader.stat("/a/e3").unwrap().id
        );
        let digest = |t: &Treelog| crate::ops::admin::index_summary(t.store()).unwrap().digest;
        assert_eq!(digest(&replica), digest(&leader));
        let st = replica.replication().status();
        assert_eq!((st.role, st.applied_seq), (Role::Replica, end));
        assert_eq!(leader.replication().status().role, Role::Leader);
    }

    #[test]
    fn a_source_refuses_another_namespace_and_a_diverged_or_ahead_position() {
        let dir = tempfile::tempdir().unwrap();
        let a = open(&dir.path().join("a"), false);
        let b = open(&dir.path().join("b"), false);
        for t in [&a, &b] {
            t.mkdir_p("/x").unwrap();
            t.mkdir_p(if std::ptr::eq(t, &a) { "/y" } else { "/z" })
                .unwrap();
        }
        let ns = a.store().namespace_id().unwrap();
        assert_ne!(ns, b.store().namespace_id().unwrap());
        let req = |from, namespace: &str, prev_crc| treelog_proto::protocol::ReplicateFrom {
            from,
            namespace: namespace.to_owned(),
            prev_crc,
            max_batch_bytes: 1 << 20,
            cursor: None,
        };
        let crc = |t: &Treelog, seq| {
            super::record_crc(&t.store().read_record_bytes(seq).unwrap().unwrap())
        };
        a.replication()
            .check_replica(&req(3, &ns, crc(&a, 2)))
            .unwrap();
        a.replication().check_replica(&req(1, &ns, None)).unwrap();
        let kind = |r: crate::Result<()>| r.unwrap_err().kind();
        let other = b.store().namespace_id().unwrap();
        assert_eq!(
            kind(a.replication().check_replica(&req(3, &other, crc(&b, 2)))),
            ErrorKind::Incompatible
        );
        // Record 2 differs (/y against /z): the histories diverged.
        assert_eq!(
            kind(a.replication().check_replica(&req(3, &ns, crc(&b, 2)))),
            ErrorKind::Compacted
        );
        assert_eq!(
            kind(a.replication().check_replica(&req(4, &ns, crc(&a, 2)))),
            ErrorKind::Compacted
        );
    }
}
