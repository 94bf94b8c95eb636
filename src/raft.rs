//! A node of a Raft cluster: the library's part (docs/CLUSTER.md).
//!
//! Consensus itself is openraft's, in the `treelog-raft` crate, which this
//! library does not depend on. What it needs from the store is here:
//!
//! - **The log is Raft's log.** A record's sequence is its Raft index.
//!   Raft appends entries at their indexes ([`RaftLog::append`], not
//!   synced; its log syncer makes a round durable with one fsync),
//!   truncates an uncommitted tail and purges what a snapshot covers. The
//!   entries are the log's version-2 envelopes (term, leader, kind); Raft's
//!   blank and membership entries are records without events, so every
//!   other reader of the log sees one record per sequence.
//! - **The index is Raft's state machine.** Committed entries are applied
//!   by the writer ([`crate::Treelog::raft_apply`]) with the function
//!   replay uses, their log id and the last membership written in the
//!   index's batch; readers and subscribers see only what is committed
//!   and applied. An open replays the log up to the committed index Raft
//!   saved, never past it: a new leader may truncate what follows.
//! - **The leader validates.** While this node leads, its writer validates
//!   commands against the index plus the records it has proposed and not
//!   yet applied, and hands each record to a [`Proposer`] (Raft) instead of
//!   the log; the caller's reply waits for the record to be applied here.
//!   A follower's writer refuses commands with `NotLeader`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::format::meta::{self, RaftLogId, RaftVote};
use crate::format::record::LeaderTag;
use crate::store::Store;

/// How a store opens as a node of a Raft cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RaftOptions {
    /// This node's id in the cluster (not 0).
    pub node_id: u64,
}

/// The reply to a caller whose command became a proposal.
pub type ReplyTx = tokio::sync::oneshot::Sender<Result<u64>>;

/// The answer a caller waits for, carried by a [`Proposal`]: sent once the
/// record is applied on this node (`Ok(seq)`), or with why it was not.
pub struct ProposalReply {
    tx: ReplyTx,
    /// The writer's number for the proposal (1, 2, ... while it leads).
    number: u64,
    /// The highest proposal number applied: the writer forgets a
    /// proposal's index changes once the index holds them.
    applied: Arc<AtomicU64>,
}

impl ProposalReply {
    /// Answers the caller. `Ok(seq)` only once the record is applied here
    /// (its index changes are in the index and published).
    pub fn send(self, result: Result<u64>) {
        if result.is_ok() {
            self.applied.fetch_max(self.number, Ordering::AcqRel);
        }
        let _ = self.tx.send(result);
    }
}

impl std::fmt::Debug for ProposalReply {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ProposalReply({})", self.number)
    }
}

/// What the leader's writer asks Raft to do, in order.
#[derive(Debug)]
pub enum Proposal {
    /// Append a record: its event schema version and body
    /// (`format::record::record_body`); the sequence is the entry's index.
    Record {
        schema: u8,
        body: Vec<u8>,
        reply: ProposalReply,
    },
    /// A command decided against records proposed before it and not yet
    /// applied, which changed nothing (`refusal: None`, a no-op) or was
    /// refused: once the last record proposed before it is applied, answer
    /// with its sequence or with `refusal`; if that record fails, with how
    /// it failed (the decision rested on it).
    AfterPrevious {
        reply: ReplyTx,
        refusal: Option<Error>,
    },
}

/// Raft, as the leader's writer sees it. `propose` must not block: it
/// queues the proposals, in order, for Raft to append under the leader
/// `tag` given with [`crate::Treelog::raft_lead`] (a proposal under an
/// older leader is refused with `NotLeader` and never appended).
pub trait Proposer: Send + Sync {
    fn propose(&self, tag: LeaderTag, proposals: Vec<Proposal>);
}

/// The writer's side of leadership: numbers proposals and knows which are
/// applied.
#[derive(Debug, Default)]
pub(crate) struct Proposals {
    next: u64,
    applied: Arc<AtomicU64>,
}

impl Proposals {
    /// The reply of the next proposal, and its number.
    pub(crate) fn reply(&mut self, tx: ReplyTx) -> ProposalReply {
        self.next += 1;
        ProposalReply {
            tx,
            number: self.next,
            applied: self.applied.clone(),
        }
    }

    /// The number of the last proposal made.
    pub(crate) fn last(&self) -> u64 {
        self.next
    }

    /// The highest proposal number applied.
    pub(crate) fn applied(&self) -> u64 {
        self.applied.load(Ordering::Acquire)
    }

    /// Counts every proposal made so far as settled (a change of role: the
    /// writer no longer waits for them, whatever becomes of them).
    pub(crate) fn forget(&mut self) {
        self.applied.fetch_max(self.next, Ordering::AcqRel);
    }
}

/// The log of a cluster's node, as Raft's storage uses it.
pub struct RaftLog<'a> {
    pub(crate) store: &'a Store,
}

impl RaftLog<'_> {
    /// Appends entries (log values at their sequences) through the WAL,
    /// not synced: [`RaftLog::sync`] makes them durable.
    pub fn append(&self, entries: &[(u64, Vec<u8>)]) -> Result<u64> {
        self.store.raft_append(entries)
    }

    /// Makes every entry appended so far durable (one fsync).
    pub fn sync(&self) -> Result<()> {
        self.store.raft_sync()
    }

    /// Removes every entry after `seq` (synced; `None`: every entry). Only
    /// an uncommitted tail.
    pub fn truncate_after(&self, seq: Option<u64>) -> Result<()> {
        self.store
            .raft_truncate_from(seq.map_or(0, |s| s.saturating_add(1)))
    }

    /// The entries with sequences in `from..to` that the log holds.
    pub fn entries(&self, from: u64, to: u64) -> Result<Vec<(u64, Vec<u8>)>> {
        self.store.raft_entries(from, to)
    }

    /// The last entry, if the log holds any.
    pub fn last(&self) -> Result<Option<(u64, Vec<u8>)>> {
        self.store.raft_last_entry()
    }

    pub fn vote(&self) -> Result<Option<RaftVote>> {
        match self.store.get_meta(meta::RAFT_VOTE_KEY)? {
            Some(v) => Ok(Some(RaftVote::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Saves a vote, synced: Raft acts on it once this returns.
    pub fn save_vote(&self, v: &RaftVote) -> Result<()> {
        self.store
            .raft_put_meta(meta::RAFT_VOTE_KEY, &v.encode(), true)
    }

    pub fn committed(&self) -> Result<Option<RaftLogId>> {
        self.store.raft_log_id(meta::RAFT_COMMITTED_KEY)
    }

    /// Saves the committed log id through the WAL (made durable by the
    /// next sync): an open replays up to it.
    pub fn save_committed(&self, id: Option<&RaftLogId>) -> Result<()> {
        match id {
            Some(id) => self
                .store
                .raft_put_meta(meta::RAFT_COMMITTED_KEY, &id.encode(), false),
            None => self.store.raft_delete_meta(meta::RAFT_COMMITTED_KEY),
        }
    }

    /// A store that becomes a cluster's first node: Raft reads nothing
    /// up to `upto`, its last record, and the index is at it (synced).
    pub fn init_purged(&self, upto: &RaftLogId) -> Result<()> {
        self.store
            .put_meta_synced(meta::RAFT_PURGED_KEY, &upto.encode())?;
        self.store
            .put_meta_synced(meta::RAFT_APPLIED_KEY, &upto.encode())
    }

    pub fn purged(&self) -> Result<Option<RaftLogId>> {
        self.store.raft_log_id(meta::RAFT_PURGED_KEY)
    }

    /// Raft reads nothing up to `id` any more. The log keeps what durable
    /// cursors still hold (see `retention`); the rest goes.
    pub fn purge(&self, id: &RaftLogId, keep_from: u64) -> Result<()> {
        self.store.raft_purge(id, keep_from)
    }
}

/// The state machine's position as the index holds it: the log id of the
/// last entry applied, and the last membership applied (its entry's log id
/// and bytes).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AppliedState {
    pub applied: Option<RaftLogId>,
    pub membership: Option<(RaftLogId, Vec<u8>)>,
}

impl AppliedState {
    /// As the store holds it now.
    pub fn load(store: &Store) -> Result<AppliedState> {
        let applied = store.raft_log_id(meta::RAFT_APPLIED_KEY)?;
        let membership = match store.get_meta(meta::RAFT_MEMBERSHIP_KEY)? {
            Some(v) => {
                let (id, m) = meta::decode_membership(&v)?;
                Some((id, m.to_vec()))
            }
            None => None,
        };
        Ok(AppliedState {
            applied,
            membership,
        })
    }
}

/// Checks that the store at hand belongs to the node `opts` names, or
/// makes it this node's (a store of a single node becomes a cluster's
/// first node; a new store, a node that joins). `None`: refuses a store
/// that belongs to a cluster's node.
pub(crate) fn claim(store: &Store, opts: Option<&RaftOptions>) -> Result<()> {
    let owner = store.raft_node_id()?;
    match (owner, opts) {
        (None, None) => Ok(()),
        (Some(id), None) => Err(Error::Incompatible {
            path: store.path().display().to_string(),
            detail: format!(
                "this database belongs to node {id} of a Raft cluster: serve it with \
                 --node-id {id} (a single node must not extend a cluster's log)"
            ),
        }),
        (Some(id), Some(o)) if id != o.node_id => Err(Error::Incompatible {
            path: store.path().display().to_string(),
            detail: format!(
                "this database belongs to node {id} of a Raft cluster, not node {}",
                o.node_id
            ),
        }),
        (Some(_), Some(_)) => Ok(()),
        (None, Some(o)) => {
            if o.node_id == 0 {
                return Err(Error::InvalidArgument("a node id is at least 1".into()));
            }
            store.put_meta_synced(meta::RAFT_NODE_ID_KEY, &meta::encode_u64(o.node_id))
        }
    }
}

/// How far an open replays the log of a cluster's node: up to the
/// committed index Raft saved, never past it (a new leader may truncate
/// what follows). `None` for a single node's store: all of it.
pub(crate) fn replay_limit(store: &Store) -> Result<Option<u64>> {
    if store.raft_node_id()?.is_none() {
        return Ok(None);
    }
    let last = store.last_log_seq()?;
    let committed = store
        .raft_log_id(meta::RAFT_COMMITTED_KEY)?
        .map_or(0, |c| c.index);
    Ok(Some(last.min(committed).max(store.applied_seq()?)))
}

/// The log id of the last entry the index holds: `meta.raft/applied`, or
/// for a single node's store that became a cluster's first node, its last
/// record as term 0, node 0 (`None`: nothing applied).
pub fn applied_log_id(store: &Store) -> Result<Option<RaftLogId>> {
    if let Some(a) = store.raft_log_id(meta::RAFT_APPLIED_KEY)? {
        return Ok(Some(a));
    }
    let applied = store.applied_seq()?;
    Ok((applied > 0).then_some(RaftLogId {
        term: 0,
        node: 0,
        index: applied,
    }))
}

/// Installs the snapshot database at `dir` (restored and verified, see
/// `backup::restore`) as this store's index, crash-safely: the install is
/// marked first (synced), and an open that finds the mark does it again
/// from the same directory ([`finish_install`]); the mark and the
/// directory go once the new index is flushed. The log keeps its entries
/// after the snapshot; those before are gone ([`Store::raft_purge`]).
pub(crate) fn install(store: &Store, dir: &std::path::Path) -> Result<RaftLogId> {
    let path = dir
        .to_str()
        .ok_or_else(|| Error::InvalidArgument(format!("{}: not UTF-8", dir.display())))?;
    store.put_meta_synced(meta::RAFT_INSTALLING_KEY, path.as_bytes())?;
    crate::failpoint::crash_point("install::after_mark");
    install_from(store, dir)
}

fn install_from(store: &Store, dir: &std::path::Path) -> Result<RaftLogId> {
    let so = crate::store::StoreOptions {
        create_if_missing: false,
        block_cache_bytes: 8 << 20,
        ..Default::default()
    };
    let src = Store::open(dir, &so)?;
    let applied = applied_log_id(&src)?.ok_or_else(|| {
        Error::corrupt(
            "snapshot",
            format!("{}: its index applied nothing", dir.display()),
        )
    })?;
    store.install_index(&src)?;
    drop(src);
    // Everything up to the snapshot is in the index now: the log's
    // entries up to it are not this node's history any more.
    let start = store.log_start()?.max(applied.index + 1);
    store.raft_purge(&applied, start)?;
    store.raft_delete_meta(meta::RAFT_INSTALLING_KEY)?;
    let _ = std::fs::remove_dir_all(dir);
    Ok(applied)
}

/// Finishes an install that a crash interrupted (`meta.raft/installing`
/// set): installs the same snapshot again, from the start.
pub(crate) fn finish_install(store: &Store) -> Result<()> {
    let Some(dir) = store.get_meta(meta::RAFT_INSTALLING_KEY)? else {
        return Ok(());
    };
    let dir = String::from_utf8(dir)
        .map_err(|_| Error::corrupt("meta", "raft/installing is not UTF-8"))?;
    tracing::warn!(snapshot = %dir, "finishing a snapshot's install that was interrupted");
    install_from(store, std::path::Path::new(&dir)).map(|_| ())
}
