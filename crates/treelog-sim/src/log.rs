//! Partitions: each a log of records (durable once appended) and the state
//! replayed from it, owning the subtrees its mount-table prefix names.

use std::collections::{BTreeMap, BTreeSet};

/// A position in a partition's log: (partition, index).
pub type Pos = (usize, usize);

/// A record of a partition's log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    /// An ordinary entry (kind does not matter to the protocol).
    Create {
        path: String,
    },
    Delete {
        path: String,
    },
    /// Source: the subtree `src` is frozen (still visible, no writes) for
    /// move `id` to `dst` in partition `dst_part`.
    Prepare {
        id: u64,
        src: String,
        dst: String,
        dst_part: usize,
    },
    /// Destination: the subtree's entries (relative to `dst`, "" for `dst`
    /// itself), held invisible until the source's decision.
    Stage {
        id: u64,
        src_part: usize,
        dst: String,
        entries: Vec<String>,
    },
    /// Source: the decision. The subtree leaves `src`; the merged stream
    /// carries the move as one rename, at this record.
    Commit {
        id: u64,
    },
    /// Source: the other decision; the subtree is thawed.
    Abort {
        id: u64,
    },
    /// Destination: the staged entries become ordinary ones. `after` is the
    /// source's `Commit`: the merged stream delivers nothing of this
    /// partition from here on before it has delivered that.
    Apply {
        id: u64,
        after: Pos,
    },
    /// Destination: staged entries of an aborted move are dropped.
    Discard {
        id: u64,
    },
}

/// The source's decision on a move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// At this index of the source's log.
    Commit(usize),
    Abort,
}

/// What a destination holds for a move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staged {
    pub src_part: usize,
    pub dst: String,
    pub entries: Vec<String>,
}

/// A partition's state, replayed from its log.
#[derive(Debug, Clone, Default)]
pub struct State {
    pub entries: BTreeSet<String>,
    /// Source side: prepared, undecided (id → src).
    pub frozen: BTreeMap<u64, String>,
    /// Source side: every prepared move (id → (src, dst, dst_part)).
    pub prepared: BTreeMap<u64, (String, String, usize)>,
    pub decided: BTreeMap<u64, Decision>,
    /// Destination side: staged, not applied or discarded.
    pub staged: BTreeMap<u64, Staged>,
    /// Destination side: moves that ever reached this log (staged, then
    /// applied or discarded).
    pub seen: BTreeSet<u64>,
}

/// Whether `path` is `root` or under it.
pub fn under(path: &str, root: &str) -> bool {
    path == root || (path.starts_with(root) && path.as_bytes().get(root.len()) == Some(&b'/'))
}

/// `root` joined with a relative path ("" is `root` itself).
pub fn join(root: &str, rel: &str) -> String {
    if rel.is_empty() {
        root.to_owned()
    } else {
        format!("{root}/{rel}")
    }
}

/// The parent of an absolute path ("/" for a top-level one).
pub fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

impl State {
    fn apply(&mut self, index: usize, r: &Rec) {
        match r {
            Rec::Create { path } => {
                self.entries.insert(path.clone());
            }
            Rec::Delete { path } => {
                self.entries.remove(path);
            }
            Rec::Prepare {
                id,
                src,
                dst,
                dst_part,
            } => {
                self.frozen.insert(*id, src.clone());
                self.prepared
                    .insert(*id, (src.clone(), dst.clone(), *dst_part));
            }
            Rec::Commit { id } => {
                let src = self.frozen.remove(id).expect("commit of a prepared move");
                self.entries.retain(|p| !under(p, &src));
                self.decided.insert(*id, Decision::Commit(index));
            }
            Rec::Abort { id } => {
                self.frozen.remove(id).expect("abort of a prepared move");
                self.decided.insert(*id, Decision::Abort);
            }
            Rec::Stage {
                id,
                src_part,
                dst,
                entries,
            } => {
                self.seen.insert(*id);
                self.staged.insert(
                    *id,
                    Staged {
                        src_part: *src_part,
                        dst: dst.clone(),
                        entries: entries.clone(),
                    },
                );
            }
            Rec::Apply { id, .. } => {
                let s = self.staged.remove(id).expect("apply of a staged move");
                for rel in &s.entries {
                    self.entries.insert(join(&s.dst, rel));
                }
            }
            Rec::Discard { id } => {
                self.staged.remove(id).expect("discard of a staged move");
            }
        }
    }

    /// Whether an ordinary write to `path` must wait: it is in a frozen
    /// subtree, or in a staged destination not yet applied.
    pub fn blocked(&self, path: &str) -> bool {
        self.frozen.values().any(|src| under(path, src))
            || self.staged.values().any(|s| under(path, &s.dst))
    }
}

/// A partition: the prefix it owns, its log, and the state of that log.
#[derive(Debug, Clone)]
pub struct Partition {
    pub prefix: String,
    pub log: Vec<Rec>,
    pub state: State,
}

impl Partition {
    pub fn new(prefix: &str) -> Partition {
        let mut p = Partition {
            prefix: prefix.to_owned(),
            log: Vec::new(),
            state: State::default(),
        };
        p.append(Rec::Create {
            path: prefix.to_owned(),
        });
        p
    }

    /// Appends a record (durable at once) and applies it; its index.
    pub fn append(&mut self, r: Rec) -> usize {
        let i = self.log.len();
        self.state.apply(i, &r);
        self.log.push(r);
        i
    }

    /// The state replayed from the log alone (what a restart sees), to
    /// check that the live state is the log's.
    pub fn replayed(&self) -> State {
        let mut s = State::default();
        for (i, r) in self.log.iter().enumerate() {
            s.apply(i, r);
        }
        s
    }
}

/// The partitions and the mount table (a path belongs to the partition
/// whose prefix it is under).
#[derive(Debug, Clone)]
pub struct Cluster {
    pub parts: Vec<Partition>,
}

impl Cluster {
    pub fn new(prefixes: &[&str]) -> Cluster {
        Cluster {
            parts: prefixes.iter().map(|p| Partition::new(p)).collect(),
        }
    }

    pub fn owner(&self, path: &str) -> usize {
        self.parts
            .iter()
            .position(|p| under(path, &p.prefix))
            .expect("every path is under a mount")
    }

    /// What a reader sees at this instant: every partition's entries, and
    /// the staged entries of moves whose source has committed (a reader
    /// that meets a staged entry asks the source for the decision, as a
    /// Percolator reader resolves a lock through its primary).
    pub fn visible(&self) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        for p in &self.parts {
            out.extend(p.state.entries.iter().cloned());
            for (id, s) in &p.state.staged {
                if matches!(
                    self.parts[s.src_part].state.decided.get(id),
                    Some(Decision::Commit(_))
                ) {
                    out.extend(s.entries.iter().map(|rel| join(&s.dst, rel)));
                }
            }
        }
        out
    }
}
