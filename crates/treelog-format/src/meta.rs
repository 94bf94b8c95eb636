//! Keys and values of the `meta` column family.
//!
//! Keys are ASCII strings; integer values are 8 bytes big-endian.

use crate::error::Result;

/// Format version of the database (u64 BE). Written once at creation and
/// by migrations.
pub const FORMAT_VERSION_KEY: &[u8] = b"format_version";
/// Marker naming the software that created the database (UTF-8).
pub const CREATED_BY_KEY: &[u8] = b"created_by";
/// Highest log sequence whose events are in `inodes`/`edges` (u64 BE).
/// Written in the same batch as the index changes (without the WAL; atomic
/// flush keeps it consistent with them).
pub const APPLIED_SEQ_KEY: &[u8] = b"applied_seq";
/// First sequence still present in the `log` CF (u64 BE).
pub const LOG_START_KEY: &[u8] = b"log_start";
/// Total bytes of the record values in `log` (u64 BE), kept with the index
/// (same batch as `applied_seq`) for byte-based retention.
pub const LOG_BYTES_KEY: &[u8] = b"log_bytes";
/// Present (u64 BE: the time it started, ms since the epoch) while
/// `admin rebuild` replaces the index: written through the WAL, synced,
/// before the index column families are dropped, and deleted once the new
/// index is flushed. An open that finds it finishes the rebuild.
pub const REBUILD_KEY: &[u8] = b"rebuild_in_progress";
/// The last loss of WAL records an operator accepted with
/// `admin accept-wal-loss` (UTF-8 JSON: time, the log's end after recovery,
/// what RocksDB reported).
pub const WAL_LOSS_KEY: &[u8] = b"wal_loss_accepted";
/// The namespace's identity (UTF-8, 32 lowercase hex digits): made once
/// when the database is created (or first opened by a build that knows it),
/// and carried by its backups and replicas, whose sources refuse to feed a
/// database of another namespace.
pub const NAMESPACE_ID_KEY: &[u8] = b"namespace_id";
/// Prefix of durable named cursors: `cursor/<name>` -> postcard `CursorState`.
pub const CURSOR_PREFIX: &[u8] = b"cursor/";

/// The `meta` key of cursor `name`.
pub fn cursor_key(name: &str) -> Vec<u8> {
    let mut k = CURSOR_PREFIX.to_vec();
    k.extend_from_slice(name.as_bytes());
    k
}

pub fn encode_u64(v: u64) -> [u8; 8] {
    v.to_be_bytes()
}

pub fn decode_u64(what: &'static str, b: &[u8]) -> Result<u64> {
    super::keys::decode_u64_be(what, b)
}

// -- A node of a Raft cluster ------------------------------------------------
//
// Present only in the database of a cluster's node (a single node's has
// none of them). The Raft crate (`treelog-raft`) decides their values; the
// store keeps them, and replay and retention respect them.

/// The node id this database belongs to (u64 BE), set when it first
/// starts as a node of a cluster. A store opened without it, or as another
/// node, is refused: a node's log holds entries no single node may extend.
pub const RAFT_NODE_ID_KEY: &[u8] = b"raft/node_id";
/// The last vote this node made or saw ([`RaftVote`]), written through the
/// WAL and synced before Raft acts on it.
pub const RAFT_VOTE_KEY: &[u8] = b"raft/vote";
/// The highest log id known committed ([`RaftLogId`]), through the WAL. An
/// open replays the log up to it and no further: entries after it may be
/// truncated by a new leader.
pub const RAFT_COMMITTED_KEY: &[u8] = b"raft/committed";
/// The highest log id Raft has purged ([`RaftLogId`]): Raft reads no entry
/// at or below it. The log may still hold some of them (durable cursors hold
/// retention back); `log_start` says what it holds.
pub const RAFT_PURGED_KEY: &[u8] = b"raft/purged";
/// The log id of the last entry applied to the index ([`RaftLogId`]; its
/// index is `applied_seq`), written in the index's batch.
pub const RAFT_APPLIED_KEY: &[u8] = b"raft/applied";
/// The last membership applied: its entry's [`RaftLogId`] (24 bytes) and
/// the membership as the entry holds it; written in the index's batch.
pub const RAFT_MEMBERSHIP_KEY: &[u8] = b"raft/membership";
/// Present while a snapshot is installed into the index: the directory of
/// the verified snapshot being installed (UTF-8). An open that finds it
/// installs that snapshot again, from the start.
pub const RAFT_INSTALLING_KEY: &[u8] = b"raft/installing";

/// A Raft log id: the term and node of the leader that proposed the entry,
/// and its index (= its log sequence). 24 bytes, u64 BE each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RaftLogId {
    pub term: u64,
    pub node: u64,
    pub index: u64,
}

impl RaftLogId {
    pub const LEN: usize = 24;

    pub fn encode(&self) -> [u8; 24] {
        let mut b = [0u8; 24];
        b[..8].copy_from_slice(&self.term.to_be_bytes());
        b[8..16].copy_from_slice(&self.node.to_be_bytes());
        b[16..].copy_from_slice(&self.index.to_be_bytes());
        b
    }

    pub fn decode(what: &'static str, b: &[u8]) -> Result<RaftLogId> {
        if b.len() != Self::LEN {
            return Err(crate::error::Error::corrupt(
                what,
                format!("a log id is {} bytes, not {}", Self::LEN, b.len()),
            ));
        }
        Ok(RaftLogId {
            term: decode_u64(what, &b[..8])?,
            node: decode_u64(what, &b[8..16])?,
            index: decode_u64(what, &b[16..])?,
        })
    }
}

/// A Raft vote: the term, the node voted for, and whether a quorum granted
/// it (a committed vote is a leader's). 17 bytes: u64 BE, u64 BE, 0 or 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RaftVote {
    pub term: u64,
    pub node: u64,
    pub committed: bool,
}

impl RaftVote {
    pub const LEN: usize = 17;

    pub fn encode(&self) -> [u8; 17] {
        let mut b = [0u8; 17];
        b[..8].copy_from_slice(&self.term.to_be_bytes());
        b[8..16].copy_from_slice(&self.node.to_be_bytes());
        b[16] = self.committed as u8;
        b
    }

    pub fn decode(b: &[u8]) -> Result<RaftVote> {
        let what = "raft vote";
        if b.len() != Self::LEN || b[16] > 1 {
            return Err(crate::error::Error::corrupt(
                what,
                format!("a vote is {} bytes ending in 0 or 1", Self::LEN),
            ));
        }
        Ok(RaftVote {
            term: decode_u64(what, &b[..8])?,
            node: decode_u64(what, &b[8..16])?,
            committed: b[16] == 1,
        })
    }
}

/// A stored membership: its entry's log id, then the membership's bytes.
pub fn encode_membership(id: &RaftLogId, membership: &[u8]) -> Vec<u8> {
    let mut v = id.encode().to_vec();
    v.extend_from_slice(membership);
    v
}

pub fn decode_membership(b: &[u8]) -> Result<(RaftLogId, &[u8])> {
    if b.len() < RaftLogId::LEN {
        return Err(crate::error::Error::corrupt(
            "raft membership",
            "shorter than its log id",
        ));
    }
    let (id, m) = b.split_at(RaftLogId::LEN);
    Ok((RaftLogId::decode("raft membership", id)?, m))
}
/// Present while `treelog admin migrate` moves the database between format
/// versions (`migrations/`): [`Migration`], 24 bytes. Written (synced)
/// with the new `format_version` when a migration starts, advanced in each
/// batch of rewritten entries, deleted (synced) when it ends. A database
/// with it set opens only to the migration, which resumes from it.
pub const MIGRATION_KEY: &[u8] = b"migration";

/// A migration under way (`meta.migration`): from format `from` to `to`,
/// every inode below `next_id` rewritten already.
///
/// ```text
/// from     u64 BE
/// to       u64 BE
/// next_id  u64 BE
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Migration {
    pub from: u64,
    pub to: u64,
    pub next_id: u64,
}

impl Migration {
    pub fn encode(&self) -> [u8; 24] {
        let mut out = [0u8; 24];
        out[..8].copy_from_slice(&self.from.to_be_bytes());
        out[8..16].copy_from_slice(&self.to.to_be_bytes());
        out[16..].copy_from_slice(&self.next_id.to_be_bytes());
        out
    }

    pub fn decode(b: &[u8]) -> Result<Migration> {
        if b.len() != 24 {
            return Err(crate::error::Error::corrupt(
                "migration marker",
                format!("expected 24 bytes, got {}", b.len()),
            ));
        }
        let at = |o: usize| u64::from_be_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        Ok(Migration {
            from: at(0),
            to: at(8),
            next_id: at(16),
        })
    }
}
