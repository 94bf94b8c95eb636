//! Which committed state a read sees, and a value read at one.
//! See `docs/READS.md`.

/// Which committed state a read sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum ReadAt {
    /// The newest committed state.
    #[default]
    Latest,
    /// A state at or after this sequence (waiting, within a bound, for the
    /// node to commit it): read-your-writes with a token.
    AtLeast(u64),
    /// Exactly the state at this sequence: the newest, or one pinned by
    /// `Treelog::pin_view` (the `treelog` library) and not yet expired.
    Exactly(u64),
    /// Linearizable: a state that holds every write acknowledged before
    /// the read began, anywhere in a Raft cluster (the leader's read index,
    /// waited for on this node). On a single node, the newest state; a
    /// replica refuses it (`NotLeader`).
    Linearizable,
}

/// A read's value and the sequence of the state it was read at.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Read<T> {
    pub value: T,
    pub seq: u64,
}
