//! The move protocol: a two-phase move recorded in both logs, with the
//! source's log holding the one decision.
//!
//! 1. **Prepare** (source): the subtree is frozen, still visible at `src`.
//! 2. **Stage** (destination): its entries are held, invisible, at `dst`.
//! 3. **Decide** (source): `Commit` (the subtree leaves `src`: from here a
//!    reader resolves the staged entries as visible) or `Abort`.
//! 4. **Finish** (destination): `Apply` (carrying the commit's position)
//!    or `Discard`.
//!
//! The mover can crash between any two steps and an append can land
//! without the mover learning it. [`recover`] (the source's, on restart)
//! and [`resolve`] (the destination's, whenever it meets a staged entry)
//! finish every move from the logs alone.

use crate::log::{parent, under, Cluster, Decision, Rec};

/// A move in progress, as the mover holds it in memory (lost on a crash).
#[derive(Debug, Clone)]
pub struct Move {
    pub id: u64,
    pub src_part: usize,
    pub dst_part: usize,
    pub src: String,
    pub dst: String,
    step: Step,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Prepare,
    Stage,
    Decide { staged: bool },
    Finish { commit: bool, staged: bool },
    Done,
}

/// What happens to the mover's next append.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// The mover crashes before the append reaches the log.
    CrashBefore,
    /// The append lands; the mover crashes before it learns so.
    CrashAfter,
    /// (Stage only.) The message is delayed: it lands later, when the
    /// schedule says, and the mover crashes.
    Delay,
}

/// A step's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    Stepped,
    Done {
        committed: bool,
    },
    /// The mover is gone: recovery must finish the move.
    Crashed,
    /// A message left in flight (delivered later with [`deliver_late`]).
    Delayed(Rec),
}

impl Move {
    pub fn new(c: &Cluster, id: u64, src: &str, dst: &str) -> Move {
        Move {
            id,
            src_part: c.owner(src),
            dst_part: c.owner(dst),
            src: src.to_owned(),
            dst: dst.to_owned(),
            step: Step::Prepare,
        }
    }

    pub fn done(&self) -> bool {
        self.step == Step::Done
    }

    /// The partition whose leader runs this mover (its restart ends it).
    pub fn source(&self) -> usize {
        self.src_part
    }

    /// One step, with `fault` applied to its append.
    pub fn step(&mut self, c: &mut Cluster, fault: Fault) -> Progress {
        let (sp, dp) = (self.src_part, self.dst_part);
        let (rec, part, next) = match self.step {
            Step::Prepare => {
                let s = &c.parts[sp].state;
                // The source validates: the subtree exists and is not moving.
                if !s.entries.contains(&self.src) || s.blocked(&self.src) {
                    self.step = Step::Done;
                    return Progress::Done { committed: false };
                }
                let rec = Rec::Prepare {
                    id: self.id,
                    src: self.src.clone(),
                    dst: self.dst.clone(),
                    dst_part: dp,
                };
                (rec, sp, Step::Stage)
            }
            Step::Stage => {
                let d = &c.parts[dp].state;
                // The destination validates: the name is free, its parent
                // exists, nothing is staged over it.
                let ok = !c.visible().contains(&self.dst)
                    && d.entries.contains(parent(&self.dst))
                    && !d.blocked(&self.dst);
                if !ok {
                    self.step = Step::Decide { staged: false };
                    return Progress::Stepped;
                }
                // Frozen: the subtree cannot change under the snapshot.
                let entries = c.parts[sp]
                    .state
                    .entries
                    .iter()
                    .filter(|p| under(p, &self.src))
                    .map(|p| p[self.src.len()..].trim_start_matches('/').to_owned())
                    .collect();
                let rec = Rec::Stage {
                    id: self.id,
                    src_part: sp,
                    dst: self.dst.clone(),
                    entries,
                };
                (rec, dp, Step::Decide { staged: true })
            }
            Step::Decide { staged } => {
                let rec = if staged {
                    Rec::Commit { id: self.id }
                } else {
                    Rec::Abort { id: self.id }
                };
                (
                    rec,
                    sp,
                    Step::Finish {
                        commit: staged,
                        staged,
                    },
                )
            }
            Step::Finish { commit, staged } => {
                // Also when the destination's resolver finished it first.
                if !staged || !c.parts[dp].state.staged.contains_key(&self.id) {
                    self.step = Step::Done;
                    return Progress::Done { committed: false };
                }
                let rec = if commit {
                    let at = commit_index(c, sp, self.id).expect("the mover committed");
                    Rec::Apply {
                        id: self.id,
                        after: (sp, at),
                    }
                } else {
                    Rec::Discard { id: self.id }
                };
                (rec, dp, Step::Done)
            }
            Step::Done => return Progress::Done { committed: false },
        };
        match fault {
            Fault::CrashBefore => Progress::Crashed,
            Fault::CrashAfter => {
                c.parts[part].append(rec);
                Progress::Crashed
            }
            Fault::Delay => Progress::Delayed(rec),
            Fault::None => {
                c.parts[part].append(rec);
                self.step = next;
                match next {
                    Step::Done => Progress::Done {
                        committed: matches!(self.step, Step::Done) && is_commit(c, sp, self.id),
                    },
                    _ => Progress::Stepped,
                }
            }
        }
    }
}

fn is_commit(c: &Cluster, sp: usize, id: u64) -> bool {
    commit_index(c, sp, id).is_some()
}

fn commit_index(c: &Cluster, sp: usize, id: u64) -> Option<usize> {
    match c.parts[sp].state.decided.get(&id) {
        Some(Decision::Commit(i)) => Some(*i),
        _ => None,
    }
}

/// A message that was in flight lands now (a late `Stage`). The
/// destination takes it as it would have: validated against its state now.
pub fn deliver_late(c: &mut Cluster, rec: Rec) {
    if let Rec::Stage { id, ref dst, .. } = rec {
        let dp = c.owner(dst);
        let d = &c.parts[dp].state;
        // A destination takes a move once: a duplicate is dropped.
        if d.seen.contains(&id) || d.blocked(dst) || c.visible().contains(dst) {
            return;
        }
        c.parts[dp].append(rec);
    }
}

/// The source's recovery on restart, one append per call (so that it too
/// can be interrupted anywhere): decides every prepared, undecided move
/// (commit if the destination holds it staged, else abort), then finishes
/// every decided move the destination has not. Returns whether it
/// appended anything.
pub fn recover(c: &mut Cluster, sp: usize) -> bool {
    if let Some(&id) = c.parts[sp].state.frozen.keys().next() {
        let (_, _, dp) = c.parts[sp].state.prepared[&id].clone();
        let staged = c.parts[dp].state.staged.contains_key(&id);
        let rec = if staged {
            Rec::Commit { id }
        } else {
            Rec::Abort { id }
        };
        c.parts[sp].append(rec);
        return true;
    }
    let decided: Vec<u64> = c.parts[sp].state.decided.keys().copied().collect();
    for id in decided {
        let (_, _, dp) = c.parts[sp].state.prepared[&id].clone();
        if finish(c, dp, id) {
            return true;
        }
    }
    false
}

/// The destination finishes a staged move whose source has decided (one
/// append). Returns whether it appended.
fn finish(c: &mut Cluster, dp: usize, id: u64) -> bool {
    let Some(s) = c.parts[dp].state.staged.get(&id) else {
        return false;
    };
    let sp = s.src_part;
    let rec = match c.parts[sp].state.decided.get(&id) {
        Some(Decision::Commit(at)) => Rec::Apply {
            id,
            after: (sp, *at),
        },
        Some(Decision::Abort) => Rec::Discard { id },
        None => return false,
    };
    c.parts[dp].append(rec);
    true
}

/// The destination's resolver: finishes one staged move whose source has
/// decided. Returns whether it appended.
pub fn resolve(c: &mut Cluster, dp: usize) -> bool {
    let ids: Vec<u64> = c.parts[dp].state.staged.keys().copied().collect();
    ids.into_iter().any(|id| finish(c, dp, id))
}

/// An ordinary write (create, or delete when it exists), as a partition's
/// writer takes it: a write into a staged destination first resolves it;
/// one into a frozen subtree or an undecided destination is refused
/// (`Busy`: the client tries again). Returns whether it was applied.
pub fn write(c: &mut Cluster, path: &str) -> bool {
    let p = c.owner(path);
    while c.parts[p]
        .state
        .staged
        .values()
        .any(|s| under(path, &s.dst))
        && resolve(c, p)
    {}
    let s = &c.parts[p].state;
    if s.blocked(path) || (!s.entries.contains(parent(path)) && parent(path) != "/") {
        return false;
    }
    let rec = if s.entries.contains(path) {
        // Only leaves: a directory with entries stays.
        if s.entries.iter().any(|e| e != path && under(e, path)) {
            return false;
        }
        Rec::Delete {
            path: path.to_owned(),
        }
    } else {
        Rec::Create {
            path: path.to_owned(),
        }
    };
    c.parts[p].append(rec);
    true
}
