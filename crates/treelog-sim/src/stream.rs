//! One change stream merged from the partitions' logs, resumed from a
//! vector cursor (the next index of each partition's log).
//!
//! A partition's records come in its log's order; between partitions the
//! merge is free (here: the schedule picks) but for one rule: a
//! destination's `Apply` is not delivered, nor anything after it in that
//! log, before the source's `Commit` it names. The move itself is one
//! event, the rename, delivered at the source's `Commit`; the other move
//! records carry no event.

use crate::log::{under, Cluster, Rec};

/// What a subscriber is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    Create(String),
    Delete(String),
    Rename { src: String, dst: String },
}

/// The position a subscriber resumes from.
pub type Cursor = Vec<usize>;

/// Whether the merge keeps the `Apply` rule (the simulation also runs
/// without it, to show that the checker catches what it prevents).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    Causal,
    /// Ignores `Apply`'s dependency (wrong: for the checker's own test).
    Unordered,
}

/// The partitions whose next record the merge may deliver now.
pub fn ready(c: &Cluster, cur: &Cursor, merge: Merge) -> Vec<usize> {
    (0..c.parts.len())
        .filter(|&p| match c.parts[p].log.get(cur[p]) {
            None => false,
            Some(Rec::Apply { after, .. }) if merge == Merge::Causal => cur[after.0] > after.1,
            Some(_) => true,
        })
        .collect()
}

/// Delivers partition `p`'s next record: the cursor moves past it, and its
/// event, if it has one, is returned.
pub fn deliver(c: &Cluster, cur: &mut Cursor, p: usize) -> Option<Event> {
    let rec = &c.parts[p].log[cur[p]];
    cur[p] += 1;
    match rec {
        Rec::Create { path } => Some(Event::Create(path.clone())),
        Rec::Delete { path } => Some(Event::Delete(path.clone())),
        Rec::Commit { id } => {
            let (src, dst, _) = &c.parts[p].state.prepared[id];
            Some(Event::Rename {
                src: src.clone(),
                dst: dst.clone(),
            })
        }
        Rec::Prepare { .. }
        | Rec::Stage { .. }
        | Rec::Abort { .. }
        | Rec::Apply { .. }
        | Rec::Discard { .. } => None,
    }
}

/// A subscriber's copy of the namespace, built from events alone.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replica {
    pub entries: std::collections::BTreeSet<String>,
}

impl Replica {
    pub fn apply(&mut self, e: &Event) {
        match e {
            Event::Create(p) => {
                self.entries.insert(p.clone());
            }
            Event::Delete(p) => {
                self.entries.remove(p);
            }
            Event::Rename { src, dst } => {
                let moved: Vec<String> = self
                    .entries
                    .iter()
                    .filter(|p| under(p, src))
                    .cloned()
                    .collect();
                for p in moved {
                    self.entries.remove(&p);
                    self.entries.insert(format!("{dst}{}", &p[src.len()..]));
                }
            }
        }
    }
}
