//! What the writer is asked to do, and where it answers.

use std::sync::Arc;
use std::time::Instant;

use crate::command::Command;
use crate::commit::port::{LeaderHint, Proposer, ReplyTx};
use crate::error::Result;
use crate::store::Store;
use treelog_proto::caller::Caller;

/// Meta entries written in the same batch as a group's index changes (a
/// follower's position in another log, say): key, value.
pub(crate) type MetaWrites = Vec<(Vec<u8>, Vec<u8>)>;

/// Work and where to send its result.
pub(crate) struct Request {
    pub(crate) work: Work,
    pub(crate) reply: ReplyTx,
    pub(crate) enqueued: Instant,
}

impl Request {
    pub(crate) fn new(work: Work, reply: ReplyTx) -> Request {
        Request {
            work,
            reply,
            enqueued: Instant::now(),
        }
    }
}

/// What the writer takes from its queue: work, which it groups, or a
/// control, which is a group of its own.
pub(crate) enum Incoming {
    Work(Request),
    Control(Control, ReplyTx),
}

/// What the writer is asked to do in a group.
pub(crate) enum Work {
    /// A mutation, validated against the namespace by a role that leads;
    /// with a caller, made for that user and checked as such (see
    /// `engine::access`).
    Command(Command, Option<Box<Caller>>),
    /// Stored records (envelopes with their checksums, as another log holds
    /// them) that continue this log, in order: applied by a role that
    /// follows (see `follower`).
    Records(StoredRecords),
}

/// A follower's batch of stored records.
pub(crate) struct StoredRecords {
    pub(crate) records: Vec<Vec<u8>>,
    /// Whether the records are appended to this log as they are applied (a
    /// replica's copy of its source's log), or are in it already (the
    /// committed entries of a log that a consensus protocol writes).
    pub(crate) append: bool,
    /// Records already in the log and nothing applied yet (a consensus
    /// node's first entries): the first may be the protocol's entry 0.
    pub(crate) from_empty: bool,
    /// Written beside the records' index changes, in the same batch.
    pub(crate) meta: MetaWrites,
}

/// A change of the writer's role, or of the state under it.
pub(crate) enum Control {
    /// Lead from now on: validate commands and hand their records to the
    /// proposer (sent once every entry committed before this leader's
    /// first is applied).
    Propose(Arc<dyn Proposer>),
    /// Follow from now on: refuse commands, naming the leader.
    Follow(Arc<dyn LeaderHint>),
    /// Replace the index under the writer, in place of everything applied
    /// so far, with what this installs (a verified checkpoint); it returns
    /// the installed state's sequence. Runs once everything handed to the
    /// pipeline is committed.
    Install(Installer),
}

/// Installs a checkpoint into the store (see [`Control::Install`]).
pub(crate) type Installer = Box<dyn FnOnce(&Store) -> Result<u64> + Send>;

impl Work {
    pub(crate) fn approx_bytes(&self) -> usize {
        match self {
            Work::Command(c, _) => c.approx_bytes(),
            Work::Records(r) => r.records.iter().map(|v| v.len() + 16).sum(),
        }
    }

    /// The name its outcome is counted under.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Work::Command(c, _) => c.name(),
            Work::Records(r) if r.append => "replicate",
            Work::Records(_) => "apply",
        }
    }
}
