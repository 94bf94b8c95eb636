//! The engine's rules, run over the in-memory index: no RocksDB, no
//! threads, no clock.
//!
//! A [`Harness`] plays the writer: it executes commands against an overlay
//! of a [`MemIndex`], folds the overlay into the index, and counts records.
//! After every group it also replays the group's records, encoded and
//! decoded as the log holds them, into a second index with
//! [`apply_events`] alone (as recovery and followers do), and checks that
//! the two indexes are byte-identical and that the index is a tree.
//! Refused commands and no-ops are checked to have written nothing.

use super::*;
use crate::error::ErrorKind;
use crate::event::Record;
use crate::format::record::{decode_record_ref, encode_record};
use crate::index::{Kv, MemIndex};
use crate::types::DEFAULT_BLOCK_SIZE;

mod access_rules;
mod attributes;
mod delete;
mod entries;
mod format2;
mod groups;
mod rename;

/// The time of the first group; each group runs 1000 ms after the last.
const T0: u64 = 1_700_000_000_000;

/// What one command came to.
#[derive(Debug)]
enum Ran {
    Applied(Vec<Event>),
    NoOp,
    Refused(Error),
}

struct Harness {
    index: MemIndex,
    engine: Engine,
    /// Records committed so far.
    seq: u64,
    /// The time the next group runs at.
    now: u64,
    /// The same log, replayed.
    replica: MemIndex,
    replica_state: EngineState,
    /// The user commands are made for (`None`: unchecked).
    caller: Option<Caller>,
}

impl Harness {
    /// An empty namespace: the root alone.
    fn new() -> Harness {
        let mut index = MemIndex::default();
        let writes = {
            let mut ov = Overlay::new(&index);
            initial_index_writes(&mut ov);
            ov.take_writes()
        };
        index.absorb(writes);
        let state = EngineState::load(&index).unwrap();
        Harness {
            replica: index.clone(),
            replica_state: state.clone(),
            engine: Engine::new(state),
            index,
            seq: 0,
            now: T0,
            caller: None,
        }
    }

    /// Runs one command as a group of its own.
    fn run(&mut self, cmd: Command) -> Ran {
        self.run_group(vec![cmd]).pop().unwrap()
    }

    /// Runs commands as one group: one overlay, one time.
    fn run_group(&mut self, cmds: Vec<Command>) -> Vec<Ran> {
        let now = self.now;
        self.now += 1000;
        let mut ov = Overlay::new(&self.index);
        let mut out = Vec::new();
        let mut records = Vec::new();
        for cmd in &cmds {
            let before = (ov.writes().clone(), self.engine.state.clone());
            let ran = match self.engine.execute(cmd, self.caller.as_ref(), &mut ov, now) {
                Executed::Applied(events) => {
                    assert!(!events.is_empty(), "{cmd:?}: applied without events");
                    records.push(events.clone());
                    Ran::Applied(events)
                }
                Executed::NoOp => Ran::NoOp,
                Executed::Refused(e) => Ran::Refused(e),
                Executed::Fault(e) => panic!("{cmd:?}: fault: {e}"),
            };
            if !matches!(ran, Ran::Applied(_)) {
                assert_eq!(ov.writes().inodes, before.0.inodes, "{cmd:?}: {ran:?}");
                assert_eq!(ov.writes().edges, before.0.edges, "{cmd:?}: {ran:?}");
                assert_eq!(self.engine.state, before.1, "{cmd:?}: {ran:?}");
            }
            out.push(ran);
        }
        let writes = ov.take_writes();
        drop(ov);
        self.index.absorb(writes);
        for events in records {
            self.seq += 1;
            self.replay(Record {
                seq: self.seq,
                time_ms: now,
                events,
            });
        }
        self.check();
        out
    }

    /// Applies a record to the replica the way recovery does: from its
    /// log bytes, decoded without copying.
    fn replay(&mut self, rec: Record) {
        let bytes = encode_record(&rec).unwrap();
        let decoded = decode_record_ref(&bytes, Some(rec.seq)).unwrap();
        let writes = {
            let mut ov = Overlay::new(&self.replica);
            apply_events(decoded.events, &mut ov, &mut self.replica_state).unwrap();
            ov.take_writes()
        };
        self.replica.absorb(writes);
    }

    /// The index equals its replay, its `next_id` follows the ids, and it
    /// is a tree: every inode but the root has exactly the edge its entry
    /// names, under a directory.
    fn check(&self) {
        assert!(self.replica == self.index, "the replayed index differs");
        assert_eq!(
            (
                self.replica_state.owners,
                self.replica_state.groups,
                &self.replica_state.quotas
            ),
            (
                self.engine.state.owners,
                self.engine.state.groups,
                &self.engine.state.quotas
            )
        );
        assert_eq!(self.replica_state.id_bound, self.engine.state.id_bound);
        assert_eq!(
            EngineState::load(&self.index).unwrap().quotas,
            self.engine.state.quotas,
            "the quotas an open loads"
        );
        let stored = &self.index.inodes[&inode_key(NEXT_ID_KEY)[..]];
        assert_eq!(
            format::decode_next_id_value(stored).unwrap(),
            self.engine.state.id_bound
        );
        let mut inodes = 0;
        for (k, v) in &self.index.inodes {
            let v2::KeyV2::Inode(id) = v2::decode_key_v2(k).unwrap() else {
                continue;
            };
            inodes += 1;
            assert!(id < self.engine.state.next_id && id < self.engine.state.id_bound);
            if id == ROOT_ID {
                continue;
            }
            let e = InodeEntryV2::decode_ref(v).unwrap();
            let edge = self.index.edges.get(&edge_key(e.parent_id, e.name)[..]);
            assert_eq!(
                edge.map(|v| format::decode_edge_value(v).unwrap()),
                Some(id),
                "the edge of inode {id}"
            );
            assert!(stored_kind(&self.index, e.parent_id).unwrap().is_dir());
        }
        assert_eq!(inodes, self.index.edges.len() + 1);
    }

    /// The time of the last group run.
    fn last(&self) -> u64 {
        self.now - 1000
    }

    /// Restarts the writer: the state is loaded from the index.
    fn restart(&mut self) {
        let state = EngineState::load(&self.index).unwrap();
        self.engine.state = state;
    }

    /// The command's events; panics unless it applied.
    #[track_caller]
    fn ok(&mut self, cmd: Command) -> Vec<Event> {
        let seq = self.seq;
        match self.run(cmd.clone()) {
            Ran::Applied(events) => {
                assert_eq!(self.seq, seq + 1);
                events
            }
            other => panic!("{cmd:?}: {other:?}"),
        }
    }

    /// Panics unless the command is a no-op.
    #[track_caller]
    fn noop(&mut self, cmd: Command) {
        let index = self.index.clone();
        match self.run(cmd.clone()) {
            Ran::NoOp => {}
            other => panic!("{cmd:?}: {other:?}"),
        }
        assert!(self.index == index);
    }

    /// The command's error; panics unless it was refused.
    #[track_caller]
    fn refused(&mut self, cmd: Command) -> Error {
        let (index, seq) = (self.index.clone(), self.seq);
        let e = match self.run(cmd.clone()) {
            Ran::Refused(e) => e,
            other => panic!("{cmd:?}: {other:?}"),
        };
        assert!(self.index == index);
        assert_eq!(self.seq, seq);
        e
    }

    /// The kind of the command's error.
    #[track_caller]
    fn kind(&mut self, cmd: Command) -> ErrorKind {
        self.refused(cmd).kind()
    }

    /// The kind of the command's error and the path it names.
    #[track_caller]
    fn refused_at(&mut self, cmd: Command) -> (ErrorKind, String) {
        let e = self.refused(cmd);
        let p = match &e {
            Error::NotFound(p)
            | Error::AlreadyExists(p)
            | Error::NotADirectory(p)
            | Error::IsADirectory(p)
            | Error::NotEmpty(p) => p.clone(),
            other => panic!("{other:?} names no path"),
        };
        (e.kind(), p)
    }

    fn stat(&self, p: &str) -> Result<Inode> {
        resolve(&self.index, &self.engine.names, p)
    }

    #[track_caller]
    fn ino(&self, p: &str) -> Inode {
        self.stat(p).unwrap()
    }

    #[track_caller]
    fn id(&self, p: &str) -> u64 {
        self.ino(p).id
    }

    #[track_caller]
    fn missing(&self, p: &str) -> bool {
        matches!(self.stat(p), Err(Error::NotFound(_)))
    }

    /// The names in a directory.
    fn ls(&self, p: &str) -> Vec<String> {
        let (entries, more) =
            list_children(&self.index, &self.engine.names, self.id(p), None, 1 << 20).unwrap();
        assert!(!more);
        entries.into_iter().map(|e| e.name.to_string()).collect()
    }

    /// Every path but the root, sorted.
    fn tree(&self) -> Vec<String> {
        let mut out = Vec::new();
        let mut todo = vec![(ROOT_ID, "/".to_owned())];
        while let Some((id, p)) = todo.pop() {
            let (kids, _) =
                list_children(&self.index, &self.engine.names, id, None, 1 << 20).unwrap();
            for k in kids {
                let cp = path::join(&p, &k.name);
                if k.inode.attrs.kind.is_dir() {
                    todo.push((k.inode.id, cp.to_string()));
                }
                out.push(cp.to_string());
            }
        }
        out.sort();
        out
    }
}

// Commands as the CLI's defaults give them.

fn mkdir(p: &str) -> Command {
    mkdir_as(p, false, 0o755, "", "")
}

fn mkdir_p(p: &str) -> Command {
    mkdir_as(p, true, 0o755, "", "")
}

fn mkdir_as(p: &str, parents: bool, mode: u32, owner: &str, group: &str) -> Command {
    Command::Mkdir {
        path: p.into(),
        parents,
        mode,
        owner: owner.into(),
        group: group.into(),
    }
}

fn create(p: &str) -> Command {
    create_as(p, false, 0o644, "", "")
}

fn create_p(p: &str) -> Command {
    create_as(p, true, 0o644, "", "")
}

fn create_as(p: &str, parents: bool, mode: u32, owner: &str, group: &str) -> Command {
    Command::Create {
        path: p.into(),
        parents,
        mode,
        owner: owner.into(),
        group: group.into(),
        block_size: DEFAULT_BLOCK_SIZE,
    }
}

fn complete(p: &str, size: u64) -> Command {
    Command::Complete {
        path: p.into(),
        size,
    }
}

fn set_size(p: &str, size: u64) -> Command {
    Command::SetSize {
        path: p.into(),
        size,
    }
}

fn chmod(p: &str, mode: u32) -> Command {
    Command::SetAttr {
        path: p.into(),
        mode: Some(mode),
        owner: None,
        group: None,
        mtime_ms: None,
    }
}

fn chown(p: &str, owner: Option<&str>, group: Option<&str>) -> Command {
    Command::SetAttr {
        path: p.into(),
        mode: None,
        owner: owner.map(Into::into),
        group: group.map(Into::into),
        mtime_ms: None,
    }
}

fn touch(p: &str, mtime_ms: u64) -> Command {
    Command::SetAttr {
        path: p.into(),
        mode: None,
        owner: None,
        group: None,
        mtime_ms: Some(mtime_ms),
    }
}

fn rm(p: &str) -> Command {
    Command::Delete {
        path: p.into(),
        recursive: false,
    }
}

fn rm_r(p: &str) -> Command {
    Command::Delete {
        path: p.into(),
        recursive: true,
    }
}

fn mv(src: &str, dst: &str) -> Command {
    Command::Rename {
        src: src.into(),
        dst: dst.into(),
        overwrite: false,
    }
}

fn mv_over(src: &str, dst: &str) -> Command {
    Command::Rename {
        src: src.into(),
        dst: dst.into(),
        overwrite: true,
    }
}

// Expected events and attributes.

fn dir_attrs(now: u64, mode: u32, owner: &str, group: &str) -> Attrs {
    Attrs {
        kind: FileType::Directory,
        size: 0,
        block_size: 0,
        ctime_ms: now,
        mtime_ms: now,
        change_ms: now,
        mode,
        complete: true,
        owner: owner.into(),
        group: group.into(),
    }
}

fn file_attrs(now: u64, mode: u32, owner: &str, group: &str) -> Attrs {
    Attrs {
        kind: FileType::File,
        size: 0,
        block_size: DEFAULT_BLOCK_SIZE,
        ctime_ms: now,
        mtime_ms: now,
        change_ms: now,
        mode,
        complete: false,
        owner: owner.into(),
        group: group.into(),
    }
}

/// A `Create` at the time its attributes were made (the parent's new time).
fn created(id: u64, parent: u64, p: &str, attrs: Attrs) -> Event {
    Event::Create {
        id,
        parent,
        name: p.rsplit('/').next().unwrap().into(),
        path: p.into(),
        parent_mtime_ms: Some(attrs.mtime_ms),
        attrs,
        quotas: Vec::new(),
    }
}

/// The `Delete` of an inode as it is now, at path `p`, at time `t` (`None`
/// for an inode whose parent the same command deletes).
fn deleted(ino: &Inode, p: &str, t: Option<u64>) -> Event {
    Event::Delete {
        id: ino.id,
        parent: ino.parent,
        name: ino.name.clone(),
        path: p.into(),
        attrs: ino.attrs.clone(),
        parent_mtime_ms: t,
        quotas: Vec::new(),
    }
}

/// The `Rename` of an inode as it is now, at time `t`.
fn renamed(ino: &Inode, from: &str, new_parent: u64, to: &str, t: u64) -> Event {
    let mut attrs = ino.attrs.clone();
    attrs.change_ms = t;
    Event::Rename {
        id: ino.id,
        old_parent: ino.parent,
        old_name: ino.name.clone(),
        old_path: from.into(),
        new_parent,
        new_name: to.rsplit('/').next().unwrap().into(),
        new_path: to.into(),
        attrs,
        parent_mtime_ms: Some(t),
        quotas_from: Vec::new(),
        quotas_to: Vec::new(),
        usage: Usage::default(),
    }
}

fn update(ino: &Inode, p: &str, new: Attrs) -> Update {
    Update {
        id: ino.id,
        parent: ino.parent,
        name: ino.name.clone(),
        path: p.into(),
        old: ino.attrs.clone(),
        new,
        quotas: Vec::new(),
    }
}

use ErrorKind::*;
