//! Feature levels in a cluster of mixed releases (docs/CLUSTER.md,
//! "Feature levels"): each node tells its peers its level
//! ([`treelog_proto::FEATURE_LEVEL`]) in a [`Trailer`] after every Raft
//! message and answer; the leader keeps the cluster's level, the lowest of
//! its members', and refuses what a member below the level it needs would
//! not know, instead of letting that member diverge.
//!
//! The trailer follows the postcard encoding of openraft's message.
//! `postcard::from_bytes`, which a release before feature levels decodes
//! with, stops at the end of the message and ignores the bytes after it;
//! that release sends no trailer, and counts as level 1.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use prometheus::IntGauge;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use treelog::{Error, Result};
use treelog_proto::FEATURE_LEVEL;

use crate::types::NodeId;

/// The level of a node that sends no trailer (a release before feature
/// levels), and of a member not heard from.
pub const LEVEL_WITHOUT_TRAILER: u32 = 1;

/// What a node says of itself after each Raft message and answer. Fields
/// are only ever appended: a reader decodes the ones it knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Trailer {
    /// The sender's own level.
    pub level: u32,
    /// The cluster's level as the sender knows it (a leader's is the one
    /// that counts).
    pub cluster: u32,
}

/// `bytes` (an encoded message) with `t` appended.
pub fn with_trailer(mut bytes: Vec<u8>, t: &Trailer) -> Vec<u8> {
    // A Trailer of two u32s always encodes.
    if let Ok(tail) = postcard::to_stdvec(t) {
        bytes.extend_from_slice(&tail);
    }
    bytes
}

/// The message at the start of `bytes`, and the trailer after it (`None`
/// when nothing follows: a sender of a release before feature levels).
pub fn split<T: DeserializeOwned>(
    bytes: &[u8],
) -> std::result::Result<(T, Option<Trailer>), postcard::Error> {
    let (msg, rest) = postcard::take_from_bytes::<T>(bytes)?;
    if rest.is_empty() {
        return Ok((msg, None));
    }
    // A later release may append fields: its first ones are these.
    let (t, _) = postcard::take_from_bytes::<Trailer>(rest)?;
    Ok((msg, Some(t)))
}

/// The level a trailer (or its absence) says a node is at.
pub fn level_of(t: Option<&Trailer>) -> u32 {
    t.map_or(LEVEL_WITHOUT_TRAILER, |t| t.level)
}

/// The lowest level among a cluster's members and who is at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lowest {
    pub level: u32,
    /// The member at that level (`None`: this node alone).
    pub node: Option<NodeId>,
}

/// A node's knowledge of its peers' levels.
pub struct FeatureLevels {
    me: NodeId,
    /// Levels heard in the peers' answers since this node last became
    /// leader (a peer that stops answering is forgotten: it may come back
    /// as another release).
    heard: Mutex<HashMap<NodeId, u32>>,
    /// The members (voters and learners), and whether this node leads.
    members: Mutex<(Vec<NodeId>, bool)>,
    /// On a follower: the level its leader last said the cluster is at.
    leader_said: AtomicU32,
    gauge: Option<IntGauge>,
}

impl FeatureLevels {
    pub fn new(me: NodeId, gauge: Option<IntGauge>) -> FeatureLevels {
        let f = FeatureLevels {
            me,
            heard: Mutex::default(),
            members: Mutex::new((vec![me], false)),
            leader_said: AtomicU32::new(LEVEL_WITHOUT_TRAILER),
            gauge,
        };
        f.refresh();
        f
    }

    /// What this node appends to its messages and answers.
    pub fn trailer(&self) -> Trailer {
        Trailer {
            level: FEATURE_LEVEL,
            cluster: self.cluster_level().level,
        }
    }

    /// Peer `node` answered, with `t` after its answer.
    pub fn heard(&self, node: NodeId, t: Option<&Trailer>) {
        let level = level_of(t);
        let changed = self.lock_heard().insert(node, level) != Some(level);
        if changed {
            self.refresh();
        }
    }

    /// Peer `node` did not answer.
    pub fn lost(&self, node: NodeId) {
        if self.lock_heard().remove(&node).is_some() {
            self.refresh();
        }
    }

    /// The leader's `AppendEntries` came with `t`.
    pub fn from_leader(&self, t: Option<&Trailer>) {
        let level = t.map_or(LEVEL_WITHOUT_TRAILER, |t| t.cluster.min(t.level));
        if self.leader_said.swap(level, Ordering::AcqRel) != level {
            self.refresh();
        }
    }

    /// The membership and leadership, as openraft's metrics say.
    pub fn set_members(&self, members: Vec<NodeId>, leading: bool) {
        let became_leader = {
            let mut m = self.members.lock().unwrap_or_else(|p| p.into_inner());
            let became = leading && !m.1;
            *m = (members, leading);
            became
        };
        if became_leader {
            // Heard as a follower, maybe long ago: hear them again.
            self.lock_heard().clear();
        }
        self.refresh();
    }

    /// The cluster's level as this node knows it: on the leader, the
    /// lowest of its members' (one not heard from counts as
    /// [`LEVEL_WITHOUT_TRAILER`]); elsewhere what the leader said.
    pub fn cluster_level(&self) -> Lowest {
        let (members, leading) = self
            .members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if !leading {
            return Lowest {
                level: self.leader_said.load(Ordering::Acquire).min(FEATURE_LEVEL),
                node: None,
            };
        }
        let heard = self.lock_heard();
        lowest(self.me, &members, &heard)
    }

    /// Whether this node leads (as openraft's metrics last said).
    pub fn leading(&self) -> bool {
        self.members.lock().unwrap_or_else(|p| p.into_inner()).1
    }

    /// Refuses what needs `required` while a member is below it.
    pub fn admit(&self, required: u32, what: &str) -> Result<()> {
        check(required, what, self.cluster_level())
    }

    fn refresh(&self) {
        if let Some(g) = &self.gauge {
            g.set(i64::from(self.cluster_level().level));
        }
    }

    fn lock_heard(&self) -> std::sync::MutexGuard<'_, HashMap<NodeId, u32>> {
        self.heard.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The lowest level among `members` (`me` at this release's).
pub fn lowest(me: NodeId, members: &[NodeId], heard: &HashMap<NodeId, u32>) -> Lowest {
    let mut low = Lowest {
        level: FEATURE_LEVEL,
        node: None,
    };
    for &m in members.iter().filter(|&&m| m != me) {
        let level = heard.get(&m).copied().unwrap_or(LEVEL_WITHOUT_TRAILER);
        if level < low.level {
            low = Lowest {
                level,
                node: Some(m),
            };
        }
    }
    low
}

/// `Ok` when every member is at `required` or above; otherwise
/// `InvalidArgument` naming the member and its level.
pub fn check(required: u32, what: &str, low: Lowest) -> Result<()> {
    if low.level >= required {
        return Ok(());
    }
    let who = match low.node {
        Some(n) => format!("node {n} is at feature level {}", low.level),
        None => format!("the cluster is at feature level {}", low.level),
    };
    Err(Error::InvalidArgument(format!(
        "{what} needs cluster feature level {required}, and {who} (a member not heard from \
         counts as {LEVEL_WITHOUT_TRAILER}): upgrade every member first"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;
    use treelog::ErrorKind;

    #[test]
    fn a_command_above_a_members_level_is_refused_naming_it() {
        let heard = HashMap::from([(2, FEATURE_LEVEL), (3, 1)]);
        let low = lowest(1, &[1, 2, 3], &heard);
        assert_eq!(
            low,
            Lowest {
                level: 1,
                node: Some(3)
            }
        );
        // A command marked as needing level 3 (none is, yet).
        let e = check(3, "set_frobnication", low).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        let msg = e.to_string();
        assert!(
            msg.contains("node 3 is at feature level 1") && msg.contains("set_frobnication"),
            "{msg}"
        );
        // What level 1 knows goes through.
        check(1, "mkdir", low).unwrap();
        // Every member at this release's level: its features go through.
        let all = HashMap::from([(2, FEATURE_LEVEL), (3, FEATURE_LEVEL)]);
        let low = lowest(1, &[1, 2, 3], &all);
        assert_eq!(low.level, FEATURE_LEVEL);
        check(FEATURE_LEVEL, "x", low).unwrap();
        assert!(check(FEATURE_LEVEL + 1, "x", low).is_err());
    }

    /// What a release before feature levels does with a trailer: its
    /// decoder (`postcard::from_bytes`, as in its `service.rs` and
    /// `network.rs`) reads the message and ignores the bytes after it.
    #[test]
    fn an_older_decoder_ignores_the_trailer() {
        use crate::types::{TypeConfig, Vote};
        use openraft::raft::VoteRequest;
        let req = VoteRequest::<TypeConfig>::new(Vote::new(3, 2), None);
        let t = Trailer {
            level: FEATURE_LEVEL,
            cluster: 1,
        };
        let bytes = with_trailer(postcard::to_stdvec(&req).unwrap(), &t);
        let old: VoteRequest<TypeConfig> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(old, req);
        let (new, got) = split::<VoteRequest<TypeConfig>>(&bytes).unwrap();
        assert_eq!((new, got), (req.clone(), Some(t)));
        // An answer (openraft's result, or its error as text).
        let answer: std::result::Result<u64, String> = Ok(41);
        let bytes = with_trailer(postcard::to_stdvec(&answer).unwrap(), &t);
        let old: std::result::Result<u64, String> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(old, answer);
        // From an older node: no trailer, level 1.
        let plain = postcard::to_stdvec(&req).unwrap();
        let (_, none) = split::<VoteRequest<TypeConfig>>(&plain).unwrap();
        assert_eq!(level_of(none.as_ref()), 1);
        // A later release's longer trailer: the fields known here are read.
        let mut longer = bytes.clone();
        longer.extend_from_slice(&[7, 7, 7]);
        let (_, got) = split::<std::result::Result<u64, String>>(&longer).unwrap();
        assert_eq!(got, Some(t));
    }

    #[test]
    fn a_member_not_heard_from_counts_as_the_lowest_level() {
        let low = lowest(1, &[1, 2], &HashMap::new());
        assert_eq!(low.level, LEVEL_WITHOUT_TRAILER);
        assert_eq!(low.node, Some(2));
        // Alone, a node is at its own level.
        assert_eq!(lowest(1, &[1], &HashMap::new()).level, FEATURE_LEVEL);
    }

    #[test]
    fn the_leader_forgets_a_peer_that_stops_answering() {
        let f = FeatureLevels::new(1, None);
        f.set_members(vec![1, 2], true);
        let t = Trailer {
            level: FEATURE_LEVEL,
            cluster: FEATURE_LEVEL,
        };
        f.heard(2, Some(&t));
        assert_eq!(f.cluster_level().level, FEATURE_LEVEL);
        f.lost(2);
        assert_eq!(f.cluster_level().level, LEVEL_WITHOUT_TRAILER);
        // An answer without a trailer: a release before feature levels.
        f.heard(2, None);
        assert_eq!(f.cluster_level().level, 1);
        // A follower reports what its leader said.
        f.set_members(vec![1, 2], false);
        f.from_leader(Some(&t));
        assert_eq!(f.cluster_level().level, FEATURE_LEVEL);
        f.from_leader(None);
        assert_eq!(f.cluster_level().level, 1);
    }
}
