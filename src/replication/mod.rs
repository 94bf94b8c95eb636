//! Copies of the namespace beyond this store, through one port.
//!
//! A store is a node of one of three kinds ([`NodeRole`]): a **standalone**
//! node, whose log is its own; a **replica** of a source (docs/
//! REPLICATION.md), which copies the source's records into its log and
//! applies them; or a node of a **consensus** cluster (docs/CLUSTER.md),
//! whose log the protocol writes. Whatever the kind, what copies of the
//! log need of the store goes through [`Replication`], the handle
//! [`Treelog::replication`](crate::Treelog::replication) gives: the log
//! (append at a sequence, sync, truncate after, purge below, read),
//! applying stored records (one function for a replica's batches and a
//! consensus node's committed entries), installing a checkpoint, the
//! writer's role (lead by proposing, follow), generic `meta` values, and
//! the source's side of replication (checking a replica's position,
//! batches of committed records, the cursor that holds them).
//!
//! The networks are elsewhere: `treelog-replica` streams from a source,
//! `treelog-raft` runs openraft. The rules the store keeps on its own for a
//! consensus node (at open, in backups, in retention) are [`consensus`];
//! a replica's knowledge of its source is [`replica`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use treelog_proto::protocol::{NodeStatus, ReplicateFrom};

use crate::commit::handle::WriterHandle;
use crate::commit::request::{Control, StoredRecords, Work};
use crate::commit::shared::Shared;
use crate::error::{Error, Result};

pub mod consensus;
pub mod replica;

pub use crate::commit::{Proposal, ProposalReply, Proposer, ReplyTx};
pub use consensus::{AppliedState, ConsensusNode};
pub use replica::{ReplicaCounters, ReplicaState};

/// What kind of node a store opens as.
#[derive(Debug, Clone, Default)]
pub enum NodeRole {
    /// Its log is its own: it takes commands.
    #[default]
    Standalone,
    /// A replica of a source: commands are refused with `NotLeader`,
    /// records come through [`Replication::replicate`].
    Replica(Arc<ReplicaState>),
    /// A node of a consensus cluster: the log is the protocol's; commands
    /// are proposed while the node leads and refused while it follows.
    Consensus(ConsensusNode),
}

impl NodeRole {
    pub(crate) fn replica(&self) -> Option<&Arc<ReplicaState>> {
        match self {
            NodeRole::Replica(r) => Some(r),
            _ => None,
        }
    }

    pub(crate) fn consensus(&self) -> Option<&ConsensusNode> {
        match self {
            NodeRole::Consensus(c) => Some(c),
            _ => None,
        }
    }
}

/// The replication port of one store (see the module docs).
pub struct Replication<'a> {
    pub(crate) shared: &'a Arc<Shared>,
    pub(crate) writer: &'a WriterHandle,
    pub(crate) role: &'a NodeRole,
    pub(crate) min_seq_wait: Duration,
}

impl Replication<'_> {
    // -- the log, as another writes it ------------------------------------

    /// Appends log values at their sequences, through the WAL, not synced:
    /// [`Replication::sync`] makes them durable. Returns their bytes.
    pub fn append(&self, entries: &[(u64, Vec<u8>)]) -> Result<u64> {
        self.shared.store().append_at(entries)
    }

    /// Makes every entry appended so far durable (one fsync).
    pub fn sync(&self) -> Result<()> {
        self.shared.store().sync_log()
    }

    /// Removes every entry after `seq` (synced; `None`: every entry). Only
    /// an uncommitted tail.
    pub fn truncate_after(&self, seq: Option<u64>) -> Result<()> {
        self.shared
            .store()
            .truncate_log_from(seq.map_or(0, |s| s.saturating_add(1)))
    }

    /// The entries with sequences in `from..to` that the log holds.
    pub fn entries(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        self.shared.store().log_range(from, to)
    }

    /// The last entry, if the log holds any.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>> {
        self.shared.store().last_log_entry()
    }

    /// Nothing up to `upto` will be read by the log's writer again
    /// (`position`: the meta that says so, written first, synced): the log
    /// goes too, as far as durable cursors and the index on disk allow (the
    /// rest in later retention passes). Returns the log's new start.
    pub fn purge(&self, upto: u64, position: &[(&[u8], &[u8])]) -> Result<u64> {
        let sh = self.shared;
        sh.retention()
            .purge_upto(sh.store(), sh.publication().tail(), upto, position)
    }

    /// A `meta` value.
    pub fn meta(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.shared.store().get_meta(key)
    }

    /// Sets a `meta` value through the WAL (synced when `sync`; otherwise
    /// durable with the next [`Replication::sync`]).
    pub fn put_meta(&self, key: &[u8], value: &[u8], sync: bool) -> Result<()> {
        self.shared.store().put_meta(key, value, sync)
    }

    /// Removes a `meta` value, synced.
    pub fn delete_meta(&self, key: &[u8]) -> Result<()> {
        self.shared.store().delete_meta(key)
    }

    // -- applying ---------------------------------------------------------

    /// Applies a consensus node's committed entries (log values already in
    /// its log, in order) to the index, with their position: visible to
    /// readers and subscribers when this returns, with the sequence of the
    /// last. A batch that fails its checks is refused whole
    /// (`Corruption`).
    pub async fn apply(&self, entries: Vec<Vec<u8>>) -> Result<u64> {
        let meta = consensus::position_meta(&entries)?;
        let from_empty = self.applied()?.applied.is_none();
        self.writer
            .send_async(Work::Records(StoredRecords {
                records: entries,
                append: false,
                from_empty,
                meta,
            }))
            .await
    }

    /// Appends and applies a replica's records from its source (stored
    /// bytes, in order, continuing this log): durable and visible when
    /// this returns, with the sequence of the last. A batch that does not
    /// continue the log or fails a checksum is refused whole
    /// (`Corruption`) and nothing of it is applied. Only on a replica.
    pub async fn replicate(&self, records: Vec<Vec<u8>>) -> Result<u64> {
        let (work, last_time) = replica::replicated(self.role.replica().map(|r| &**r), records)?;
        let seq = self.writer.send_async(work).await?;
        if let (Some(r), Some(t)) = (self.role.replica(), last_time) {
            r.set_applied_time_ms(t);
        }
        Ok(seq)
    }

    /// Installs a consensus snapshot (the verified database at `dir`, made
    /// by `backup::restore`) as this node's index once everything before it
    /// is committed; returns its sequence. Crash-safe: an interrupted
    /// install is finished by the next open.
    pub async fn install(&self, dir: PathBuf) -> Result<u64> {
        if self.role.consensus().is_none() {
            return Err(Error::InvalidArgument(
                "only a consensus node installs snapshots".into(),
            ));
        }
        self.writer
            .control(Control::Install(Box::new(move |store| {
                consensus::install(store, &dir)
            })))
            .await
    }

    /// The state machine's position (the last entry applied, the last
    /// membership), as the index holds it.
    pub fn applied(&self) -> Result<AppliedState> {
        AppliedState::load(self.shared.store())
    }

    // -- the writer's role ------------------------------------------------

    /// This consensus node leads from now on (call it once every entry
    /// committed before the leader's first one is applied): its writer
    /// validates commands and hands their records to `proposer`.
    pub async fn lead(&self, proposer: Arc<dyn Proposer>) -> Result<u64> {
        self.writer.control(Control::Propose(proposer)).await
    }

    /// This consensus node follows from now on: commands are refused with
    /// `NotLeader` naming `leader`.
    pub async fn follow(&self, leader: Option<String>) -> Result<u64> {
        if let Some(l) = &leader {
            tracing::info!(leader = %l, "following");
        }
        self.writer.control(Control::Follow(Arc::new(leader))).await
    }

    // -- the source's side ------------------------------------------------

    /// Checks that a replica asking for records from `req.from` continues
    /// this store's history (see [`replica`]).
    pub fn check_replica(&self, req: &ReplicateFrom) -> Result<()> {
        replica::check_replica(self.shared, req)
    }

    /// Keeps the durable cursor `name` at a replica's position `applied`,
    /// so that retention keeps the records after it.
    pub fn hold_for_replica(&self, name: &str, applied: u64) -> Result<()> {
        replica::hold_for_replica(self.shared, name, applied)
    }

    /// Committed records from `from` as stored, for a replica: at most
    /// `max_bytes` of them (at least one); `Compacted` when retention has
    /// removed `from`.
    pub fn batch(&self, from: u64, max_bytes: usize) -> Result<Vec<Vec<u8>>> {
        replica::replication_batch(self.shared, from, max_bytes)
    }

    // -- what the node knows ----------------------------------------------

    /// This store's replica state, when it is a replica.
    pub fn replica_state(&self) -> Option<&Arc<ReplicaState>> {
        self.role.replica()
    }

    /// The node's role and positions (`admin status`).
    pub fn status(&self) -> NodeStatus {
        replica::status(self.shared, self.role.replica().map(|r| &**r))
    }

    /// The error of a read at `ReadAt::AtLeast(seq)` that waited `waited`
    /// in vain: `Lagging` on a replica, `Busy` otherwise.
    pub fn not_caught_up(&self, seq: u64, waited: Duration) -> Error {
        replica::not_caught_up(self.shared, self.role.replica().map(|r| &**r), seq, waited)
    }

    /// How long a read at `ReadAt::AtLeast` waits.
    pub fn min_seq_wait(&self) -> Duration {
        self.min_seq_wait
    }
}
