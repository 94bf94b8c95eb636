//! A node of a consensus cluster: the rules the store keeps itself
//! (docs/CLUSTER.md). The protocol (openraft, in the `treelog-raft`
//! crate, which this library does not depend on) reaches the store through
//! the [`Replication`](super::Replication) port; what the store does on
//! its own — at open, in backups, in retention — is here, and only here:
//!
//! - **The log is the protocol's log.** A record's sequence is its entry's
//!   index; its envelope (format v2) carries the term and node of the
//!   leader that proposed it and its kind (a record, a new leader's blank,
//!   a membership), which the store reads to keep its position.
//! - **The index is the state machine.** Committed entries are applied by
//!   the writer with the function replay uses; the log position of the
//!   last one applied and the last membership applied are written in the
//!   same batch ([`position_meta`]). An open replays the log up to the
//!   committed index the protocol saved, never past it: a new leader may
//!   truncate what follows ([`replay_limit`]).
//! - **Snapshots are checkpoints**, installed in place crash-safely
//!   ([`install`], finished by the next open if it was interrupted).

use crate::error::{Error, Result};
use crate::format::meta::{self, RaftLogId};
use crate::format::record::{self, EntryKind};
use crate::store::Store;

/// How a store opens as a node of a consensus cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsensusNode {
    /// This node's id in the cluster (not 0).
    pub node_id: u64,
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
    /// As the store holds it now: for a single node's store that became a
    /// cluster's first node, its last record as term 0, node 0.
    pub fn load(store: &Store) -> Result<AppliedState> {
        let membership = match store.get_meta(meta::RAFT_MEMBERSHIP_KEY)? {
            Some(v) => {
                let (id, m) = meta::decode_membership(&v)?;
                Some((id, m.to_vec()))
            }
            None => None,
        };
        Ok(AppliedState {
            applied: applied_log_id(store)?,
            membership,
        })
    }
}

/// A `meta` value holding a log id.
pub fn log_id(store: &Store, key: &[u8]) -> Result<Option<RaftLogId>> {
    match store.get_meta(key)? {
        Some(v) => Ok(Some(RaftLogId::decode("log id", &v)?)),
        None => Ok(None),
    }
}

/// The node id the store belongs to, if it is a cluster's node's.
pub fn node_id(store: &Store) -> Result<Option<u64>> {
    store.meta_u64(meta::RAFT_NODE_ID_KEY)
}

/// The log id of the last entry the index holds (`None`: nothing
/// applied).
pub fn applied_log_id(store: &Store) -> Result<Option<RaftLogId>> {
    if let Some(a) = log_id(store, meta::RAFT_APPLIED_KEY)? {
        return Ok(Some(a));
    }
    let applied = store.applied_seq()?;
    Ok((applied > 0).then_some(RaftLogId {
        term: 0,
        node: 0,
        index: applied,
    }))
}

/// What applying the committed `entries` (log values, in order) writes
/// beside their index changes: the log id of the last, and the last
/// membership among them. Fails (`Corruption`) on an envelope that does
/// not open.
pub(crate) fn position_meta(entries: &[Vec<u8>]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
    let id_of = |e: &record::RaftEntryParts<'_>| RaftLogId {
        term: e.leader.term,
        node: e.leader.node,
        index: e.seq,
    };
    // Every envelope is checked; only the last entry and the memberships
    // are decoded.
    let mut membership = None;
    for v in entries {
        if record::open_envelope(v)?.kind == EntryKind::Membership {
            let e = record::decode_raft_entry(v, None)?;
            membership = Some(meta::encode_membership(&id_of(&e), e.membership));
        }
    }
    let applied = match entries.last() {
        Some(v) => Some(id_of(&record::decode_raft_entry(v, None)?)),
        None => None,
    };
    let mut out = Vec::with_capacity(2);
    if let Some(a) = applied {
        out.push((meta::RAFT_APPLIED_KEY.to_vec(), a.encode().to_vec()));
    }
    if let Some(m) = membership {
        out.push((meta::RAFT_MEMBERSHIP_KEY.to_vec(), m));
    }
    Ok(out)
}

/// Checks that the store belongs to the node `node` names, or makes it
/// this node's (a store of a single node becomes a cluster's first node; a
/// new store, a node that joins). `None`: refuses a store that belongs to
/// a cluster's node.
pub(crate) fn claim(store: &Store, node: Option<&ConsensusNode>) -> Result<()> {
    match (node_id(store)?, node) {
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
/// committed index the protocol saved, never past it (a new leader may
/// truncate what follows). `None` for a single node's store: all of it.
pub(crate) fn replay_limit(store: &Store) -> Result<Option<u64>> {
    if node_id(store)?.is_none() {
        return Ok(None);
    }
    let last = store.last_log_seq()?;
    let committed = log_id(store, meta::RAFT_COMMITTED_KEY)?.map_or(0, |c| c.index);
    Ok(Some(last.min(committed).max(store.applied_seq()?)))
}

/// After replaying a cluster node's entries `from+1..=to` at open: their
/// position written beside `applied_seq`, as the writer does.
pub(crate) fn after_replay(store: &Store, from: u64, to: u64) -> Result<()> {
    let values: Vec<Vec<u8>> = store
        .log_range(from + 1, to + 1)?
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let meta = position_meta(&values)?;
    let mut b = store.index_batch();
    for (k, v) in &meta {
        store.add_meta_write(&mut b, k, v)?;
    }
    store.write_index_batch(b, to, None)
}

/// The first entry the protocol may still read (retention removes nothing
/// from it on); `None` on a single node.
pub(crate) fn purge_ceiling(store: &Store) -> Result<Option<u64>> {
    if node_id(store)?.is_none() {
        return Ok(None);
    }
    Ok(Some(
        log_id(store, meta::RAFT_PURGED_KEY)?.map_or(0, |p| p.index + 1),
    ))
}

/// The meta keys a checkpoint's install carries from the checkpoint into
/// the store beside its index: the state machine's position.
pub(crate) const POSITION_KEYS: [&[u8]; 2] = [meta::RAFT_APPLIED_KEY, meta::RAFT_MEMBERSHIP_KEY];

/// The meta keys of a node's identity and log state, which a backup
/// restored as a single node's namespace forgets.
pub(crate) const NODE_KEYS: [&[u8]; 5] = [
    meta::RAFT_NODE_ID_KEY,
    meta::RAFT_VOTE_KEY,
    meta::RAFT_COMMITTED_KEY,
    meta::RAFT_PURGED_KEY,
    meta::RAFT_INSTALLING_KEY,
];

/// Installs the snapshot database at `dir` (restored and verified, see
/// `backup::restore`) as this store's index, crash-safely: the install is
/// marked first (synced), and an open that finds the mark does it again
/// from the same directory ([`finish_install`]); the mark and the
/// directory go once the new index is flushed. The log keeps its entries
/// after the snapshot; those before are gone. Returns the snapshot's
/// sequence.
pub(crate) fn install(store: &Store, dir: &std::path::Path) -> Result<u64> {
    let path = dir
        .to_str()
        .ok_or_else(|| Error::InvalidArgument(format!("{}: not UTF-8", dir.display())))?;
    store.put_meta_synced(meta::RAFT_INSTALLING_KEY, path.as_bytes())?;
    crate::sys::failpoint::crash_point("install::after_mark");
    install_from(store, dir).map(|id| id.index)
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
    store.install_index(&src, &POSITION_KEYS)?;
    drop(src);
    // Everything up to the snapshot is in the index now: the log's
    // entries up to it are not this node's history any more.
    let start = store.log_start()?.max(applied.index + 1);
    store.purge_log(&[(meta::RAFT_PURGED_KEY, &applied.encode())], start)?;
    store.delete_meta(meta::RAFT_INSTALLING_KEY)?;
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
