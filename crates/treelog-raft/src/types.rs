//! openraft's types for treelog, and the one place where a Raft entry
//! becomes a log value and back (docs/FORMAT.md §8.2, envelope version 2).

use std::fmt;
use std::io;
use std::sync::Arc;

use openraft::entry::RaftEntry;
use openraft::vote::RaftLeaderId;
use openraft::EntryPayload;
use serde::{Deserialize, Serialize};
use treelog::format::meta::{RaftLogId, RaftVote};
use treelog::format::record::{self, EntryKind, LeaderTag};

/// A record as a leader proposes it: its event schema version and body
/// (`format::record::record_body`, the record without its sequence, which
/// is the entry's index).
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EntryBody {
    pub schema: u8,
    pub body: Vec<u8>,
}

impl fmt::Debug for EntryBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "record({} bytes, schema {})",
            self.body.len(),
            self.schema
        )
    }
}

impl fmt::Display for EntryBody {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// A responder that runs a closure with the result (the leader's writer
/// answers its callers from it).
pub struct FnResponder<T>(Box<dyn FnOnce(T) + Send + 'static>);

impl<T> FnResponder<T> {
    pub fn new(f: impl FnOnce(T) + Send + 'static) -> Self {
        FnResponder(Box::new(f))
    }
}

impl<T: openraft::OptionalSend + 'static> openraft::raft::responder::Responder<TypeConfig, T>
    for FnResponder<T>
{
    fn on_complete(self, result: T) {
        (self.0)(result)
    }
}

/// treelog's Raft: node ids are u64, a node is known by its RPC address,
/// an entry's data is a record's body, and applying one answers with its
/// sequence. (By hand: the declaring macro takes no generic responder.)
#[derive(Debug, Clone, Copy, Default, Eq, PartialEq, Ord, PartialOrd)]
pub struct TypeConfig {}

impl openraft::RaftTypeConfig for TypeConfig {
    type D = EntryBody;
    type R = u64;
    type NodeId = u64;
    type Node = openraft::impls::BasicNode;
    type Term = u64;
    type LeaderId = openraft::impls::leader_id_adv::LeaderId<u64, u64>;
    type Vote = openraft::impls::Vote<Self::LeaderId>;
    type Payload = openraft::EntryPayload<EntryBody, u64, openraft::impls::BasicNode>;
    type Entry = openraft::impls::Entry<Self::LeaderId, Self::Payload>;
    type AsyncRuntime = openraft_rt_tokio::TokioRuntime;
    type Responder<T>
        = FnResponder<T>
    where
        T: openraft::OptionalSend + 'static;
    type Batch<T>
        = openraft::impls::InlineBatch<T>
    where
        T: openraft::OptionalSend + 'static;
    type ErrorSource = openraft::impls::BoxedErrorSource;
}

pub type NodeId = u64;
pub type Node = openraft::impls::BasicNode;
pub type LeaderId = openraft::alias::LeaderIdOf<TypeConfig>;
pub type LogId = openraft::alias::LogIdOf<TypeConfig>;
pub type Entry = openraft::alias::EntryOf<TypeConfig>;
pub type Vote = openraft::alias::VoteOf<TypeConfig>;
pub type Membership = openraft::Membership<NodeId, Node>;
pub type StoredMembership = openraft::alias::StoredMembershipOf<TypeConfig>;
pub type SnapshotMeta = openraft::alias::SnapshotMetaOf<TypeConfig>;

/// The log id of an entry proposed by the leader `(term, node)` at `index`.
pub fn log_id(term: u64, node: u64, index: u64) -> LogId {
    LogId::new(LeaderId::new(term, node), index)
}

pub fn to_meta_id(id: &LogId) -> RaftLogId {
    RaftLogId {
        term: id.leader_id.term,
        node: id.leader_id.node_id,
        index: id.index,
    }
}

pub fn from_meta_id(id: &RaftLogId) -> LogId {
    log_id(id.term, id.node, id.index)
}

pub fn to_meta_vote(v: &Vote) -> RaftVote {
    RaftVote {
        term: v.leader_id.term,
        node: v.leader_id.node_id,
        committed: v.committed,
    }
}

pub fn from_meta_vote(v: &RaftVote) -> Vote {
    if v.committed {
        Vote::new_committed(v.term, v.node)
    } else {
        Vote::new(v.term, v.node)
    }
}

/// The leader tag (term, node) of a committed leader id.
pub fn tag_of(leader: &LeaderId) -> LeaderTag {
    LeaderTag {
        term: leader.term,
        node: leader.node_id,
    }
}

/// Raft's own entries hold a record with no events under this schema (the
/// empty record's bytes are the same in every schema), so that nodes of
/// different builds write them alike.
const RAFT_ENTRY_SCHEMA: u8 = 1;

fn invalid(detail: impl fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, detail.to_string())
}

/// An entry's log value (envelope version 2). Every node encodes an entry
/// to the same bytes.
pub fn encode_entry(e: &Entry) -> io::Result<Vec<u8>> {
    let id = e.log_id();
    let tag = tag_of(&id.leader_id);
    Ok(match &e.payload {
        EntryPayload::Blank => {
            record::encode_raft_entry(EntryKind::Blank, tag, id.index, RAFT_ENTRY_SCHEMA, &[], &[])
        }
        EntryPayload::Normal(b) => {
            record::encode_raft_entry(EntryKind::Record, tag, id.index, b.schema, &b.body, &[])
        }
        EntryPayload::Membership(m) => {
            let m = postcard::to_stdvec(m).map_err(invalid)?;
            record::encode_raft_entry(
                EntryKind::Membership,
                tag,
                id.index,
                RAFT_ENTRY_SCHEMA,
                &[],
                &m,
            )
        }
    })
}

/// The entry a log value at `seq` holds. A single node's record (envelope
/// version 1, before the store became a cluster's node) is a record of
/// term 0, node 0.
pub fn decode_entry(seq: u64, v: &[u8]) -> io::Result<Entry> {
    let p = record::decode_raft_entry(v, Some(seq)).map_err(invalid)?;
    let payload = match p.kind {
        EntryKind::Blank => EntryPayload::Blank,
        EntryKind::Record => EntryPayload::Normal(EntryBody {
            schema: p.schema,
            body: p.body.to_vec(),
        }),
        EntryKind::Membership => EntryPayload::Membership(decode_membership(p.membership)?),
    };
    Ok(Entry {
        log_id: log_id(p.leader.term, p.leader.node, seq),
        payload,
    })
}

/// The log id a log value at `seq` holds.
pub fn entry_log_id(seq: u64, v: &[u8]) -> io::Result<LogId> {
    let env = record::open_envelope(v).map_err(invalid)?;
    Ok(log_id(env.leader.term, env.leader.node, seq))
}

pub fn decode_membership(b: &[u8]) -> io::Result<Membership> {
    postcard::from_bytes(b).map_err(invalid)
}

/// A membership as the store keeps it (`meta.raft/membership`).
pub fn stored_membership(m: Option<(RaftLogId, Vec<u8>)>) -> io::Result<StoredMembership> {
    match m {
        None => Ok(StoredMembership::default()),
        Some((id, b)) => Ok(StoredMembership::new(
            Some(from_meta_id(&id)),
            decode_membership(&b)?,
        )),
    }
}

/// A treelog error as an I/O error for openraft's storage traits.
pub fn io_err(e: treelog::Error) -> io::Error {
    io::Error::other(e.to_string())
}

/// The store as Raft's storage holds it: released all at once when the
/// node stops, whatever openraft's tasks still hold (they fail from then
/// on), so that the store closes.
///
/// Work on blocking threads that writes into the data directory (a
/// snapshot's checkpoint, a received snapshot laid out or restored) holds
/// [`StoreRef::hold`]'s guard until it ends, even when the task that
/// started it is dropped; [`StoreRef::release`] waits for it, so that a
/// stopped node leaves nothing writing into its directory.
#[derive(Clone)]
pub struct StoreRef {
    t: Arc<arc_swap::ArcSwapOption<treelog::Treelog>>,
    busy: Arc<tokio::sync::RwLock<()>>,
}

impl StoreRef {
    pub fn new(t: Arc<treelog::Treelog>) -> StoreRef {
        StoreRef {
            t: Arc::new(arc_swap::ArcSwapOption::from(Some(t))),
            busy: Default::default(),
        }
    }

    pub fn get(&self) -> io::Result<Arc<treelog::Treelog>> {
        self.t
            .load_full()
            .ok_or_else(|| io::Error::other("the node is stopping: its store is released"))
    }

    /// A guard for work that writes into the data directory (move it into
    /// the blocking closure).
    pub async fn hold(&self) -> tokio::sync::OwnedRwLockReadGuard<()> {
        self.busy.clone().read_owned().await
    }

    /// Lets go of the store, once the work holding it has ended.
    pub async fn release(&self) {
        self.t.store(None);
        let _idle = self.busy.write().await;
    }
}
