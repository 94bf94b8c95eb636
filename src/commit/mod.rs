//! The write path: the single writer, its roles, and the group-commit
//! pipeline behind it (see [`writer`]).
//!
//! - [`request`]: what the writer is asked (commands, stored records,
//!   controls) and where it answers.
//! - [`port`]: what the roles are handed from outside (the consensus
//!   protocol's proposer, the leader a follower names).
//! - [`role`]: the trait the writer hands each group to, and the state
//!   every role shares; [`leader`], [`follower`] and [`proposing`] are
//!   the roles.
//! - [`pipeline`]: the syncer, the applier and the publish.
//! - [`shared`]: what the writer shares with everything that reads.

pub(crate) mod config;
pub(crate) mod follower;
pub(crate) mod handle;
pub(crate) mod leader;
pub(crate) mod pipeline;
pub(crate) mod port;
pub(crate) mod proposing;
pub(crate) mod request;
pub(crate) mod role;
pub(crate) mod shared;
pub(crate) mod writer;

#[cfg(test)]
mod tests;

pub use config::{Durability, WriterConfig};
pub use port::{Proposal, ProposalReply, Proposer, ReplyTx};
pub use shared::WriterStatsSnapshot;
