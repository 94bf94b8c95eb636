//! A history of single-path operations and a linearizability checker for
//! it (Wing & Gong's search with Lowe's memoization, as Porcupine does it),
//! path by path: each path is a register holding "absent" or a file's
//! size. Operations whose outcome is unknown (`OutcomeUnknown`, a lost
//! connection) never return: they may take effect at any point after they
//! began, or never (at the end, unobserved).

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

/// What was asked of a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Create,
    Delete,
    SetSize(u64),
    Stat,
}

/// What came back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Outcome {
    /// A mutation succeeded.
    Done,
    /// The path existed (`AlreadyExists` of a create).
    Exists,
    /// The path did not exist (`NotFound`).
    Missing,
    /// A stat found a file of this size.
    Size(u64),
    /// Not known (the operation may or may not have taken effect).
    Unknown,
}

#[derive(Debug, Clone)]
pub struct Entry {
    pub path: String,
    pub op: Op,
    pub outcome: Outcome,
    pub call: Instant,
    /// `None`: it never returned (outcome unknown).
    pub ret: Option<Instant>,
}

/// The register's state: absent, or a file's size.
type State = Option<u64>;

/// Applies `op` to `state`; `None` if `outcome` cannot be what it returned.
fn step(state: State, op: Op, outcome: Outcome) -> Option<State> {
    let (next, out) = match (op, state) {
        (Op::Create, None) => (Some(0), Outcome::Done),
        (Op::Create, s @ Some(_)) => (s, Outcome::Exists),
        (Op::Delete, Some(_)) => (None, Outcome::Done),
        (Op::Delete, None) => (None, Outcome::Missing),
        (Op::SetSize(v), Some(_)) => (Some(v), Outcome::Done),
        (Op::SetSize(_), None) => (None, Outcome::Missing),
        (Op::Stat, Some(s)) => (Some(s), Outcome::Size(s)),
        (Op::Stat, None) => (None, Outcome::Missing),
    };
    (outcome == Outcome::Unknown || outcome == out).then_some(next)
}

/// Whether every path's operations are linearizable from an absent
/// register; `Err` names the first path that is not, with its operations.
pub fn check(history: &[Entry]) -> Result<usize, String> {
    let mut by_path: BTreeMap<&str, Vec<&Entry>> = BTreeMap::new();
    for e in history {
        by_path.entry(&e.path).or_default().push(e);
    }
    for (path, ops) in &by_path {
        if !linearizable(ops) {
            let mut lines: Vec<String> = ops
                .iter()
                .map(|e| format!("  {:?} -> {:?}", e.op, e.outcome))
                .collect();
            lines.truncate(200);
            return Err(format!(
                "the operations on {path} are not linearizable:\n{}",
                lines.join("\n")
            ));
        }
    }
    Ok(by_path.len())
}

#[derive(Clone, Copy)]
enum Event {
    Call(usize),
    Return(usize),
}

/// Wing & Gong's search over one register's operations.
fn linearizable(ops: &[&Entry]) -> bool {
    let n = ops.len();
    // Calls and returns in time order, a call before a return at the same
    // instant (it overlapped); unknown outcomes never return.
    let mut events: Vec<(Instant, u8, Event)> = Vec::with_capacity(2 * n);
    for (i, e) in ops.iter().enumerate() {
        events.push((e.call, 0, Event::Call(i)));
        if let Some(r) = e.ret {
            events.push((r, 1, Event::Return(i)));
        }
    }
    events.sort_by_key(|e| (e.0, e.1));
    // A doubly linked list of the events not yet lifted out.
    let len = events.len();
    let mut next: Vec<usize> = (1..=len).collect();
    let mut prev: Vec<usize> = (0..len).map(|i| i.wrapping_sub(1)).collect();
    let mut head = 0usize; // index into events; `len` = end
    let mut ret_pos = vec![usize::MAX; n];
    let mut call_pos = vec![0usize; n];
    for (p, ev) in events.iter().enumerate() {
        match ev.2 {
            Event::Call(i) => call_pos[i] = p,
            Event::Return(i) => ret_pos[i] = p,
        }
    }
    let words = n.div_ceil(64);
    let mut done = vec![0u64; words];
    let mut cache: HashSet<(Vec<u64>, State)> = HashSet::new();
    let mut stack: Vec<(usize, State)> = Vec::new();
    let mut state: State = None;
    let mut cur = head;
    // Lifts event `p` out of the list (and the head if it was first).
    fn unlink(p: usize, next: &mut [usize], prev: &mut [usize], head: &mut usize, len: usize) {
        let (a, b) = (prev[p], next[p]);
        if a == usize::MAX {
            *head = b;
        } else {
            next[a] = b;
        }
        if b < len {
            prev[b] = a;
        }
    }
    fn relink(p: usize, next: &mut [usize], prev: &mut [usize], head: &mut usize, len: usize) {
        let (a, b) = (prev[p], next[p]);
        if a == usize::MAX {
            *head = p;
        } else {
            next[a] = p;
        }
        if b < len {
            prev[b] = p;
        }
    }
    loop {
        if head >= len {
            return true;
        }
        if cur >= len {
            // What is left never returned: those may never have happened.
            let mut p = head;
            let mut only_unknown = true;
            while p < len {
                match events[p].2 {
                    Event::Call(i) if ops[i].ret.is_none() => {}
                    _ => {
                        only_unknown = false;
                        break;
                    }
                }
                p = next[p];
            }
            if only_unknown {
                return true;
            }
            // Every remaining call was tried here: back up.
            let Some((i, s)) = stack.pop() else {
                return false;
            };
            state = s;
            done[i / 64] &= !(1 << (i % 64));
            // Put the call and its return back, innermost first.
            if ret_pos[i] != usize::MAX {
                relink(ret_pos[i], &mut next, &mut prev, &mut head, len);
            }
            relink(call_pos[i], &mut next, &mut prev, &mut head, len);
            cur = next[call_pos[i]];
            continue;
        }
        match events[cur].2 {
            Event::Call(i) => {
                let e = ops[i];
                let stepped = step(state, e.op, e.outcome);
                let mut advanced = false;
                if let Some(ns) = stepped {
                    done[i / 64] |= 1 << (i % 64);
                    if cache.insert((done.clone(), ns)) {
                        stack.push((i, state));
                        state = ns;
                        unlink(call_pos[i], &mut next, &mut prev, &mut head, len);
                        if ret_pos[i] != usize::MAX {
                            unlink(ret_pos[i], &mut next, &mut prev, &mut head, len);
                        }
                        cur = head;
                        advanced = true;
                    } else {
                        done[i / 64] &= !(1 << (i % 64));
                    }
                }
                if !advanced {
                    cur = next[cur];
                }
            }
            Event::Return(_) => {
                // An operation returned before any order placed it: the
                // last choice was wrong.
                let Some((i, s)) = stack.pop() else {
                    return false;
                };
                state = s;
                done[i / 64] &= !(1 << (i % 64));
                if ret_pos[i] != usize::MAX {
                    relink(ret_pos[i], &mut next, &mut prev, &mut head, len);
                }
                relink(call_pos[i], &mut next, &mut prev, &mut head, len);
                cur = next[call_pos[i]];
            }
        }
    }
}
