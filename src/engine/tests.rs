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

#[path = "access_tests.rs"]
mod access_rules;

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

// ---------------------------------------------------------------------------
// mkdir
// ---------------------------------------------------------------------------

#[test]
fn mkdir_creates_one_directory_with_the_commands_attributes() {
    let mut h = Harness::new();
    let ev = h.ok(mkdir_as("/data", false, 0o700, "alice", "staff"));
    let attrs = dir_attrs(T0, 0o700, "alice", "staff");
    assert_eq!(ev, vec![created(2, ROOT_ID, "/data", attrs.clone())]);
    let ino = h.ino("/data");
    assert_eq!(
        (ino.id, ino.parent, ino.name.to_str().unwrap()),
        (2, ROOT_ID, "data")
    );
    assert_eq!(ino.attrs, attrs);
    assert_eq!(h.ls("/"), ["data"]);
}

#[test]
fn mkdir_logs_the_canonical_path() {
    let mut h = Harness::new();
    let ev = h.ok(mkdir("/a/"));
    assert_eq!(
        ev,
        vec![created(2, ROOT_ID, "/a", dir_attrs(T0, 0o755, "", ""))]
    );
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn mkdir_of_a_taken_name_is_already_exists() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/f"));
    assert_eq!(h.refused_at(mkdir("/a")), (AlreadyExists, "/a".into()));
    assert_eq!(h.refused_at(mkdir("/f")), (AlreadyExists, "/f".into()));
    assert_eq!(h.refused_at(mkdir("/a/")), (AlreadyExists, "/a".into()));
    // -p tolerates an existing directory, not a file.
    assert_eq!(h.refused_at(mkdir_p("/f")), (AlreadyExists, "/f".into()));
}

#[test]
fn mkdir_of_the_root_is_already_exists_and_with_parents_a_noop() {
    let mut h = Harness::new();
    assert_eq!(h.refused_at(mkdir("/")), (AlreadyExists, "/".into()));
    h.noop(mkdir_p("/"));
    assert_eq!(h.seq, 0);
}

#[test]
fn mkdir_without_parents_names_the_first_missing_component() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    assert_eq!(h.refused_at(mkdir("/a/b/c/d")), (NotFound, "/a/b".into()));
    assert_eq!(h.refused_at(mkdir("/x/y")), (NotFound, "/x".into()));
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn mkdir_p_creates_the_missing_components_top_down_with_consecutive_ids() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    let ev = h.ok(mkdir_as("/a/b/c/d", true, 0o750, "bob", "ml"));
    let t = T0 + 1000;
    let attrs = dir_attrs(t, 0o750, "bob", "ml");
    assert_eq!(
        ev,
        vec![
            created(3, 2, "/a/b", attrs.clone()),
            created(4, 3, "/a/b/c", attrs.clone()),
            created(5, 4, "/a/b/c/d", attrs.clone()),
        ]
    );
    assert_eq!(h.tree(), ["/a", "/a/b", "/a/b/c", "/a/b/c/d"]);
    assert_eq!(h.ino("/a/b/c/d").attrs, attrs);
    // The existing ancestor gained an entry: its times moved, and only
    // those.
    let mut a = dir_attrs(T0, 0o755, "", "");
    (a.mtime_ms, a.change_ms) = (t, t);
    assert_eq!(h.ino("/a").attrs, a);
}

#[test]
fn mkdir_p_of_an_existing_directory_is_a_noop_whatever_its_attributes() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    h.noop(mkdir_p("/a/b"));
    h.noop(mkdir_as("/a/b/", true, 0o700, "other", "other"));
    assert_eq!(h.seq, 1);
    assert_eq!(h.ino("/a/b").attrs.mode, 0o755);
}

#[test]
fn mkdir_under_a_file_is_not_a_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/a/f"));
    assert_eq!(
        h.refused_at(mkdir("/a/f/x")),
        (NotADirectory, "/a/f".into())
    );
    assert_eq!(
        h.refused_at(mkdir("/a/f/x/y")),
        (NotADirectory, "/a/f".into())
    );
    assert_eq!(
        h.refused_at(mkdir_p("/a/f/x/y")),
        (NotADirectory, "/a/f".into())
    );
}

#[test]
fn mkdir_refuses_a_mode_outside_0o7777() {
    let mut h = Harness::new();
    assert_eq!(
        h.kind(mkdir_as("/a", false, 0o10000, "", "")),
        InvalidArgument
    );
    assert_eq!(
        h.kind(mkdir_as("/a", true, 0o10755, "", "")),
        InvalidArgument
    );
    h.ok(mkdir_as("/a", false, 0o7777, "", ""));
    assert_eq!(h.ino("/a").attrs.mode, 0o7777);
}

#[test]
fn mkdir_refuses_an_owner_or_group_longer_than_255_bytes() {
    let mut h = Harness::new();
    let long = "o".repeat(256);
    assert_eq!(
        h.kind(mkdir_as("/a", false, 0o755, &long, "")),
        InvalidArgument
    );
    assert_eq!(
        h.kind(mkdir_as("/a", true, 0o755, "", &long)),
        InvalidArgument
    );
    h.ok(mkdir_as("/a", false, 0o755, &long[1..], &long[1..]));
    assert_eq!(h.ino("/a").attrs.owner.len(), 255);
}

// ---------------------------------------------------------------------------
// create
// ---------------------------------------------------------------------------

#[test]
fn create_makes_an_empty_incomplete_file_and_moves_its_parents_times() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    let parent = h.ino("/d");
    let cmd = Command::Create {
        path: "/d/f".into(),
        parents: false,
        mode: 0o600,
        owner: "alice".into(),
        group: "staff".into(),
        block_size: 4096,
    };
    let ev = h.ok(cmd);
    let t = T0 + 1000;
    let mut attrs = file_attrs(t, 0o600, "alice", "staff");
    attrs.block_size = 4096;
    assert_eq!(ev, vec![created(3, parent.id, "/d/f", attrs.clone())]);
    assert_eq!(h.ino("/d/f").attrs, attrs);
    let mut moved = parent.clone();
    (moved.attrs.mtime_ms, moved.attrs.change_ms) = (t, t);
    assert_eq!(h.ino("/d"), moved);
}

#[test]
fn create_of_a_taken_name_is_already_exists() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/f"));
    assert_eq!(h.refused_at(create("/f")), (AlreadyExists, "/f".into()));
    assert_eq!(h.refused_at(create_p("/f")), (AlreadyExists, "/f".into()));
    assert_eq!(h.refused_at(create("/a")), (AlreadyExists, "/a".into()));
    assert_eq!(h.refused_at(create("/")), (AlreadyExists, "/".into()));
    assert_eq!(h.refused_at(create_p("/")), (AlreadyExists, "/".into()));
}

#[test]
fn create_without_parents_needs_the_parent() {
    let mut h = Harness::new();
    assert_eq!(h.refused_at(create("/a/b/f")), (NotFound, "/a".into()));
    h.ok(mkdir("/a"));
    assert_eq!(h.refused_at(create("/a/b/f")), (NotFound, "/a/b".into()));
}

#[test]
fn create_with_parents_makes_the_missing_directories_0o755_then_the_file() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    let ev = h.ok(create_as("/a/b/c/f", true, 0o640, "alice", "staff"));
    let t = T0 + 1000;
    let dirs = dir_attrs(t, 0o755, "alice", "staff");
    assert_eq!(
        ev,
        vec![
            created(3, 2, "/a/b", dirs.clone()),
            created(4, 3, "/a/b/c", dirs),
            created(5, 4, "/a/b/c/f", file_attrs(t, 0o640, "alice", "staff")),
        ]
    );
    // With every directory there, only the file.
    let ev = h.ok(create_p("/a/b/g"));
    assert_eq!(
        ev,
        vec![created(
            6,
            3,
            "/a/b/g",
            file_attrs(T0 + 2000, 0o644, "", "")
        )]
    );
}

#[test]
fn create_under_a_file_is_not_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.refused_at(create("/f/g")), (NotADirectory, "/f".into()));
    assert_eq!(
        h.refused_at(create_p("/f/x/g")),
        (NotADirectory, "/f".into())
    );
}

#[test]
fn create_refuses_a_bad_mode_or_owner() {
    let mut h = Harness::new();
    assert_eq!(
        h.kind(create_as("/f", false, 0o20644, "", "")),
        InvalidArgument
    );
    let long = "g".repeat(256);
    assert_eq!(
        h.kind(create_as("/f", true, 0o644, "", &long)),
        InvalidArgument
    );
    assert_eq!(h.tree(), Vec::<String>::new());
}

// ---------------------------------------------------------------------------
// complete
// ---------------------------------------------------------------------------

#[test]
fn complete_sets_the_size_the_flag_and_the_mtime() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    let ev = h.ok(complete("/f/", 4096));
    let mut new = f.attrs.clone();
    new.size = 4096;
    new.complete = true;
    new.mtime_ms = T0 + 1000;
    new.change_ms = T0 + 1000;
    assert_eq!(ev, vec![Event::Complete(update(&f, "/f", new.clone()))]);
    assert_eq!(h.ino("/f").attrs, new);
    assert_eq!(h.ino("/f").attrs.ctime_ms, T0);
}

#[test]
fn complete_again_with_the_same_size_is_a_noop_and_with_another_refused() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    h.ok(complete("/f", 10));
    h.noop(complete("/f", 10));
    assert_eq!(h.kind(complete("/f", 11)), InvalidArgument);
    // After a set_size the size to repeat is the new one.
    h.ok(set_size("/f", 20));
    h.noop(complete("/f", 20));
    assert_eq!(h.kind(complete("/f", 10)), InvalidArgument);
    assert_eq!(h.seq, 3);
}

#[test]
fn complete_of_a_directory_is_is_a_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    assert_eq!(h.refused_at(complete("/d", 0)), (IsADirectory, "/d".into()));
    assert_eq!(h.refused_at(complete("/", 0)), (IsADirectory, "/".into()));
}

#[test]
fn complete_of_a_missing_path_is_not_found_and_under_a_file_not_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.refused_at(complete("/g", 1)), (NotFound, "/g".into()));
    assert_eq!(
        h.refused_at(complete("/f/g", 1)),
        (NotADirectory, "/f".into())
    );
    assert_eq!(h.refused_at(complete("/d/e/g", 1)), (NotFound, "/d".into()));
}

// ---------------------------------------------------------------------------
// set_size
// ---------------------------------------------------------------------------

#[test]
fn set_size_changes_the_size_and_mtime_and_keeps_the_completeness() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    let ev = h.ok(set_size("/f", 7));
    let mut new = f.attrs.clone();
    new.size = 7;
    new.mtime_ms = T0 + 1000;
    new.change_ms = T0 + 1000;
    assert_eq!(ev, vec![Event::SetSize(update(&f, "/f", new.clone()))]);
    assert!(!h.ino("/f").attrs.complete);

    h.ok(complete("/f", 7));
    let ev = h.ok(set_size("/f", 3));
    let Event::SetSize(u) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert!(u.new.complete && u.old.complete);
    assert_eq!((u.old.size, u.new.size), (7, 3));
}

#[test]
fn set_size_to_the_same_size_still_logs_a_new_mtime() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    let ev = h.ok(set_size("/f", 0));
    let mut new = f.attrs.clone();
    new.mtime_ms = T0 + 1000;
    new.change_ms = T0 + 1000;
    assert_eq!(ev, vec![Event::SetSize(update(&f, "/f", new))]);
}

#[test]
fn set_size_of_a_directory_is_is_a_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    assert_eq!(h.refused_at(set_size("/d", 1)), (IsADirectory, "/d".into()));
    assert_eq!(h.refused_at(set_size("/", 1)), (IsADirectory, "/".into()));
    assert_eq!(h.refused_at(set_size("/e", 1)), (NotFound, "/e".into()));
}

// ---------------------------------------------------------------------------
// set_attr
// ---------------------------------------------------------------------------

#[test]
fn set_attr_changes_only_what_is_given_and_not_the_mtime() {
    let mut h = Harness::new();
    h.ok(create_as("/f", false, 0o644, "alice", "staff"));
    let f = h.ino("/f");
    let ev = h.ok(chmod("/f", 0o600));
    let mut new = f.attrs.clone();
    new.mode = 0o600;
    new.change_ms = h.last();
    assert_eq!(ev, vec![Event::SetAttr(update(&f, "/f", new.clone()))]);
    assert_eq!(h.ino("/f").attrs.mtime_ms, T0);

    let f = h.ino("/f");
    let ev = h.ok(chown("/f", None, Some("ml")));
    new.group = "ml".into();
    new.change_ms = h.last();
    assert_eq!(ev, vec![Event::SetAttr(update(&f, "/f", new.clone()))]);
    assert_eq!(h.ino("/f").attrs, new);
}

#[test]
fn set_attr_mtime_takes_the_callers_value_even_an_earlier_one() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    let d = h.ino("/d");
    let ev = h.ok(touch("/d", 5));
    let mut new = d.attrs.clone();
    new.mtime_ms = 5;
    new.change_ms = h.last();
    assert_eq!(ev, vec![Event::SetAttr(update(&d, "/d", new))]);
    assert_eq!(h.ino("/d").attrs.mtime_ms, 5);
    assert_eq!(h.ino("/d").attrs.ctime_ms, T0);
}

#[test]
fn set_attr_that_changes_nothing_is_a_noop() {
    let mut h = Harness::new();
    h.ok(create_as("/f", false, 0o644, "alice", "staff"));
    h.noop(chmod("/f", 0o644));
    h.noop(chown("/f", Some("alice"), Some("staff")));
    h.noop(chown("/f", None, None));
    h.noop(touch("/f", T0));
    assert_eq!(h.seq, 1);
}

#[test]
fn set_attr_of_the_root_is_allowed() {
    let mut h = Harness::new();
    let root = h.ino("/");
    let ev = h.ok(chmod("/", 0o700));
    let mut new = root.attrs.clone();
    new.mode = 0o700;
    new.change_ms = h.last();
    assert_eq!(
        ev,
        vec![Event::SetAttr(Update {
            id: ROOT_ID,
            parent: 0,
            name: String::new().into(),
            path: "/".into(),
            old: root.attrs,
            new,
            quotas: vec![],
        })]
    );
    assert_eq!(h.ino("/").attrs.mode, 0o700);
}

#[test]
fn set_attr_to_the_empty_owner_clears_it() {
    let mut h = Harness::new();
    h.ok(create_as("/f", false, 0o644, "alice", "staff"));
    h.ok(chown("/f", Some(""), Some("")));
    let a = h.ino("/f").attrs;
    assert_eq!((a.owner.as_str(), a.group.as_str()), ("", ""));
}

#[test]
fn set_attr_refuses_a_bad_mode_a_long_owner_and_a_missing_path() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.kind(chmod("/f", 0o17777)), InvalidArgument);
    let long = "x".repeat(256);
    assert_eq!(h.kind(chown("/f", Some(&long), None)), InvalidArgument);
    assert_eq!(h.kind(chown("/f", None, Some(&long))), InvalidArgument);
    assert_eq!(h.refused_at(chmod("/g", 0o600)), (NotFound, "/g".into()));
    assert_eq!(
        h.refused_at(chmod("/f/g", 0o600)),
        (NotADirectory, "/f".into())
    );
}

// ---------------------------------------------------------------------------
// Owner and group dictionaries
// ---------------------------------------------------------------------------

#[test]
fn owners_and_groups_are_interned_in_event_order_and_stored() {
    let mut h = Harness::new();
    h.ok(mkdir_as("/a", false, 0o755, "alice", "staff"));
    h.ok(create_as("/a/f", false, 0o644, "bob", "staff"));
    let get = |k: &[u8]| h.index.inodes.get(k).cloned();
    // Both directions and the counter, one key each.
    assert_eq!(
        get(&v2::dict_by_name_key(true, b"alice")),
        Some(1u32.to_le_bytes().to_vec())
    );
    assert_eq!(
        get(&v2::dict_by_name_key(true, b"bob")),
        Some(2u32.to_le_bytes().to_vec())
    );
    assert_eq!(get(&v2::dict_by_id_key(true, 2)), Some(b"bob".to_vec()));
    assert_eq!(
        get(&v2::dict_count_key(true)),
        Some(2u32.to_le_bytes().to_vec())
    );
    assert_eq!(
        get(&v2::dict_by_name_key(false, b"staff")),
        Some(1u32.to_le_bytes().to_vec())
    );
    assert_eq!(
        get(&v2::dict_count_key(false)),
        Some(1u32.to_le_bytes().to_vec())
    );
    let e = InodeEntryV2::decode(&h.index.inodes[&inode_key(h.id("/a/f"))[..]]).unwrap();
    assert_eq!((e.owner_id, e.group_id), (2, 1));
    assert_eq!((h.engine.state.owners, h.engine.state.groups), (2, 1));
}

#[test]
fn three_hundred_owners_and_groups_get_ids_past_format_1s_255() {
    let mut h = Harness::new();
    for i in 0..300 {
        h.ok(create_as(
            &format!("/f{i}"),
            false,
            0o644,
            &format!("user{i}"),
            &format!("group{i}"),
        ));
    }
    assert_eq!((h.engine.state.owners, h.engine.state.groups), (300, 300));
    for i in [0, 254, 255, 299] {
        let a = h.ino(&format!("/f{i}")).attrs;
        assert_eq!(
            (a.owner, a.group),
            (format!("user{i}"), format!("group{i}"))
        );
    }
    let e = InodeEntryV2::decode(&h.index.inodes[&inode_key(h.id("/f299"))[..]]).unwrap();
    assert_eq!((e.owner_id, e.group_id), (300, 300));
    h.ok(chown("/f0", Some("user299"), Some("group0")));
    assert_eq!(h.engine.state.owners, 300, "a known name adds nothing");
}

/// Puts a dictionary's counter at `n` in both indexes, as if `n` names
/// had been given.
fn fill_dictionary(h: &mut Harness, owner: bool, n: u32) {
    for index in [&mut h.index, &mut h.replica] {
        index
            .inodes
            .insert(v2::dict_count_key(owner).to_vec(), n.to_le_bytes().to_vec());
    }
    h.restart();
    h.replica_state = EngineState::load(&h.replica).unwrap();
}

#[test]
fn a_full_owner_dictionary_refuses_new_owners_only() {
    let mut h = Harness::new();
    h.ok(mkdir_as("/d0", false, 0o755, "u0", ""));
    fill_dictionary(&mut h, true, u32::MAX - 1);
    // The last id goes to one more name.
    h.ok(mkdir_as("/d1", false, 0o755, "u1", ""));
    assert_eq!(h.engine.state.owners, u32::MAX);
    let e = h.refused(mkdir_as("/x", false, 0o755, "new", ""));
    assert!(matches!(e, Error::DictionaryFull(DictKind::Owner)), "{e:?}");
    let e = h.refused(create_as("/x", true, 0o644, "new", ""));
    assert!(matches!(e, Error::DictionaryFull(DictKind::Owner)), "{e:?}");
    assert_eq!(h.kind(chown("/d0", Some("new"), None)), DictionaryFull);
    // Known owners, the empty one and the other dictionary still work.
    h.ok(mkdir_as("/x", false, 0o755, "u1", "g"));
    h.ok(create_as("/y", false, 0o644, "", "h"));
    h.ok(chown("/d1", Some("u0"), None));
    assert_eq!(h.ino("/d1").attrs.owner, "u0");
}

#[test]
fn a_group_sees_the_dictionary_entries_of_its_earlier_commands() {
    let mut h = Harness::new();
    fill_dictionary(&mut h, false, u32::MAX - 1);
    let ran = h.run_group(vec![
        mkdir_as("/x", false, 0o755, "", "last"),
        mkdir_as("/y", false, 0o755, "", "one-too-many"),
        mkdir_as("/z", false, 0o755, "", "last"),
    ]);
    assert!(matches!(ran[0], Ran::Applied(_)));
    assert!(
        matches!(ran[1], Ran::Refused(Error::DictionaryFull(DictKind::Group))),
        "{ran:?}"
    );
    assert!(matches!(ran[2], Ran::Applied(_)));
    assert_eq!(h.engine.state.groups, u32::MAX);
}

// ---------------------------------------------------------------------------
// delete
// ---------------------------------------------------------------------------

#[test]
fn delete_of_a_file_logs_its_attributes() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    h.ok(create_as("/d/f", false, 0o600, "alice", "ml"));
    h.ok(complete("/d/f", 99));
    let f = h.ino("/d/f");
    let ev = h.ok(rm("/d/f/"));
    assert_eq!(ev, vec![deleted(&f, "/d/f", Some(h.last()))]);
    assert!(h.missing("/d/f"));
    assert_eq!(h.ls("/d"), Vec::<String>::new());
}

#[test]
fn delete_of_an_empty_directory() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    let b = h.ino("/a/b");
    assert_eq!(h.ok(rm("/a/b")), vec![deleted(&b, "/a/b", Some(h.last()))]);
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn delete_of_a_non_empty_directory_needs_recursive() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    assert_eq!(h.refused_at(rm("/a")), (NotEmpty, "/a".into()));
    assert_eq!(h.refused_at(rm("/a/b/")), (NotEmpty, "/a/b".into()));
    h.ok(rm_r("/a"));
    assert_eq!(h.tree(), Vec::<String>::new());
}

#[test]
fn delete_recursive_is_post_order_with_siblings_in_byte_order() {
    let mut h = Harness::new();
    for c in [
        mkdir("/d"),
        mkdir("/d/b"),
        mkdir("/d/a"),
        create("/d/a/y"),
        create("/d/a/x"),
        create("/d/c"),
        create("/d/B"),
        create("/e"),
    ] {
        h.ok(c);
    }
    let order = ["/d/B", "/d/a/x", "/d/a/y", "/d/a", "/d/b", "/d/c", "/d"];
    let t = h.now;
    let expected: Vec<Event> = order
        .iter()
        .map(|p| deleted(&h.ino(p), p, (*p == "/d").then_some(t)))
        .collect();
    assert_eq!(h.ok(rm_r("/d")), expected);
    assert_eq!(h.tree(), ["/e"]);
}

#[test]
fn delete_recursive_of_a_file_or_an_empty_directory_is_one_event() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    h.ok(mkdir("/d"));
    let (f, d) = (h.ino("/f"), h.ino("/d"));
    assert_eq!(h.ok(rm_r("/f")), vec![deleted(&f, "/f", Some(h.last()))]);
    assert_eq!(h.ok(rm_r("/d")), vec![deleted(&d, "/d", Some(h.last()))]);
}

#[test]
fn delete_of_the_root_is_invalid() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    assert_eq!(h.kind(rm("/")), InvalidArgument);
    assert_eq!(h.kind(rm_r("/")), InvalidArgument);
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn delete_of_a_missing_path_is_not_found_and_under_a_file_not_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.refused_at(rm("/g")), (NotFound, "/g".into()));
    assert_eq!(h.refused_at(rm_r("/g/h")), (NotFound, "/g".into()));
    assert_eq!(h.refused_at(rm("/f/h")), (NotADirectory, "/f".into()));
}

#[test]
fn delete_recursive_removes_at_most_max_delete_inodes() {
    let mut h = Harness::new();
    h.engine.max_delete_inodes = 3;
    for c in [
        create_p("/ok/a"),
        create_p("/ok/b"),
        create_p("/big/a/x"),
        create_p("/big/b"),
    ] {
        h.ok(c);
    }
    // /big holds 4 inodes, one of them under a subdirectory.
    let e = h.refused(rm_r("/big"));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("more than 3 inodes"), "{e}");
    // 3 inodes: exactly the limit.
    assert_eq!(h.ok(rm_r("/ok")).len(), 3);
    h.ok(rm_r("/big/a"));
    assert_eq!(h.ok(rm_r("/big")).len(), 2);

    h.engine.max_delete_inodes = 1;
    h.ok(create_p("/d/f"));
    assert_eq!(h.kind(rm_r("/d")), InvalidArgument);
    h.ok(rm("/d/f"));
    h.ok(rm_r("/d"));
}

#[test]
fn delete_recursive_is_refused_when_its_record_would_pass_max_record_bytes() {
    let name = "n".repeat(200);
    let build = |h: &mut Harness| {
        h.ok(mkdir("/d"));
        for i in 0..4 {
            h.ok(create(&format!("/d/{i}{name}")));
        }
    };
    // The engine's bound on the record: each event's strings plus 96.
    let mut probe = Harness::new();
    build(&mut probe);
    let mut bound = "/d".len() + "d".len() + EVENT_FIXED_BYTES;
    for i in 0..4 {
        let n = format!("{i}{name}");
        bound += "/d/".len() + 2 * n.len() + EVENT_FIXED_BYTES;
    }
    // The bound holds the exact size.
    let exact = postcard::to_allocvec(&probe.ok(rm_r("/d"))).unwrap().len();
    assert!(exact <= bound, "{exact} > {bound}");

    let mut h = Harness::new();
    build(&mut h);
    h.engine.max_record_bytes = bound - 1;
    let e = h.refused(rm_r("/d"));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("log record"), "{e}");
    h.engine.max_record_bytes = bound;
    assert_eq!(h.ok(rm_r("/d")).len(), 5);
}

// ---------------------------------------------------------------------------
// rename
// ---------------------------------------------------------------------------

#[test]
fn rename_of_a_file_to_another_directory_keeps_its_id_and_attributes() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(mkdir("/b"));
    h.ok(create("/a/f"));
    let (f, b) = (h.ino("/a/f"), h.id("/b"));
    let ev = h.ok(mv("/a/f", "/b/g/"));
    assert_eq!(ev, vec![renamed(&f, "/a/f", b, "/b/g", h.last())]);
    assert!(h.missing("/a/f"));
    let g = h.ino("/b/g");
    assert_eq!((g.id, g.parent, g.name.to_str().unwrap()), (f.id, b, "g"));
    // The file's change time and both directories' times move with it.
    let t = h.last();
    let mut want = f.attrs.clone();
    want.change_ms = t;
    assert_eq!(g.attrs, want);
    for d in ["/a", "/b"] {
        let a = h.ino(d).attrs;
        assert_eq!(
            (a.mtime_ms, a.change_ms, a.ctime_ms < t),
            (t, t, true),
            "{d}"
        );
    }
}

#[test]
fn rename_within_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    assert_eq!(
        h.ok(mv("/f", "/g")),
        vec![renamed(&f, "/f", ROOT_ID, "/g", h.last())]
    );
    assert_eq!(h.tree(), ["/g"]);
}

#[test]
fn rename_of_a_directory_moves_its_subtree_with_one_event() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/c/f"));
    h.ok(mkdir("/z"));
    let ids: Vec<u64> = ["/a/b", "/a/b/c", "/a/b/c/f"]
        .iter()
        .map(|p| h.id(p))
        .collect();
    let b = h.ino("/a/b");
    let ev = h.ok(mv("/a/b", "/z/y"));
    assert_eq!(ev, vec![renamed(&b, "/a/b", h.id("/z"), "/z/y", h.last())]);
    assert_eq!(h.tree(), ["/a", "/z", "/z/y", "/z/y/c", "/z/y/c/f"]);
    let moved: Vec<u64> = ["/z/y", "/z/y/c", "/z/y/c/f"]
        .iter()
        .map(|p| h.id(p))
        .collect();
    assert_eq!(moved, ids);
    assert_eq!(path_of(&h.index, ids[2]).unwrap(), "/z/y/c/f");
}

#[test]
fn rename_onto_itself_is_a_noop_once_the_source_exists() {
    let mut h = Harness::new();
    h.ok(create_p("/a/f"));
    h.noop(mv("/a/f", "/a/f"));
    h.noop(mv("/a", "/a/"));
    h.noop(mv_over("/a/f/", "/a/f"));
    assert_eq!(h.refused_at(mv("/a/g", "/a/g")), (NotFound, "/a/g".into()));
    assert_eq!(h.seq, 1);
}

#[test]
fn rename_needs_the_source_and_the_destination_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/f"));
    assert_eq!(h.refused_at(mv("/x", "/y")), (NotFound, "/x".into()));
    assert_eq!(h.refused_at(mv("/a", "/x/y")), (NotFound, "/x".into()));
    assert_eq!(h.refused_at(mv("/a", "/f/y")), (NotADirectory, "/f".into()));
    assert_eq!(
        h.refused_at(mv("/a", "/f/y/z")),
        (NotADirectory, "/f".into())
    );
    // A file cannot go under itself either: it is no directory.
    assert_eq!(h.refused_at(mv("/f", "/f/g")), (NotADirectory, "/f".into()));
}

#[test]
fn rename_of_or_onto_the_root_is_invalid() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    assert_eq!(h.kind(mv("/", "/b")), InvalidArgument);
    assert_eq!(h.kind(mv("/a", "/")), InvalidArgument);
    assert_eq!(h.kind(mv_over("/a", "/")), InvalidArgument);
    assert_eq!(h.kind(mv("/", "/")), InvalidArgument);
}

#[test]
fn rename_of_a_directory_under_itself_is_invalid() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    assert_eq!(h.kind(mv("/a", "/a/c")), InvalidArgument);
    assert_eq!(h.kind(mv("/a", "/a/b/c")), InvalidArgument);
    assert_eq!(h.kind(mv_over("/a", "/a/b")), InvalidArgument);
    // A sibling sharing its prefix is not under it.
    h.ok(mkdir("/ab"));
    h.ok(mv("/a", "/ab/a"));
    assert_eq!(h.tree(), ["/ab", "/ab/a", "/ab/a/b"]);
}

#[test]
fn rename_onto_an_existing_name_needs_overwrite() {
    let mut h = Harness::new();
    for c in [create("/f"), create("/g"), mkdir("/d"), mkdir("/e")] {
        h.ok(c);
    }
    assert_eq!(h.refused_at(mv("/f", "/g")), (AlreadyExists, "/g".into()));
    assert_eq!(h.refused_at(mv("/d", "/e")), (AlreadyExists, "/e".into()));
    assert_eq!(h.refused_at(mv("/f", "/e")), (AlreadyExists, "/e".into()));
    assert_eq!(h.refused_at(mv("/d", "/g")), (AlreadyExists, "/g".into()));
}

#[test]
fn rename_overwrite_of_a_file_deletes_it_then_renames() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    h.ok(mkdir("/d"));
    h.ok(create("/d/g"));
    h.ok(complete("/d/g", 5));
    let (f, g, d) = (h.ino("/f"), h.ino("/d/g"), h.id("/d"));
    let ev = h.ok(mv_over("/f", "/d/g"));
    let t = h.last();
    assert_eq!(
        ev,
        vec![
            deleted(&g, "/d/g", Some(t)),
            renamed(&f, "/f", d, "/d/g", t)
        ]
    );
    assert_eq!(h.id("/d/g"), f.id);
    assert_eq!(h.tree(), ["/d", "/d/g"]);
    assert_eq!(get_inode(&h.index, &h.engine.names, g.id).unwrap(), None);
}

#[test]
fn rename_overwrite_of_an_empty_directory_deletes_it_then_renames() {
    let mut h = Harness::new();
    h.ok(create_p("/a/f"));
    h.ok(mkdir("/b"));
    let (a, b) = (h.ino("/a"), h.ino("/b"));
    let ev = h.ok(mv_over("/a", "/b"));
    assert_eq!(
        ev,
        vec![
            deleted(&b, "/b", Some(h.last())),
            renamed(&a, "/a", ROOT_ID, "/b", h.last())
        ]
    );
    assert_eq!(h.tree(), ["/b", "/b/f"]);
}

#[test]
fn rename_overwrite_with_nothing_to_replace_is_a_plain_rename() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    assert_eq!(
        h.ok(mv_over("/f", "/g")),
        vec![renamed(&f, "/f", ROOT_ID, "/g", h.last())]
    );
}

#[test]
fn rename_overwrite_refuses_other_kinds_and_non_empty_directories() {
    let mut h = Harness::new();
    for c in [create("/f"), mkdir("/d"), mkdir("/full"), create("/full/x")] {
        h.ok(c);
    }
    assert_eq!(
        h.refused_at(mv_over("/f", "/d")),
        (IsADirectory, "/d".into())
    );
    assert_eq!(
        h.refused_at(mv_over("/d", "/f")),
        (NotADirectory, "/f".into())
    );
    assert_eq!(
        h.refused_at(mv_over("/d", "/full")),
        (NotEmpty, "/full".into())
    );
    // Replacing one's own parent: it is not empty (or not a file).
    assert_eq!(
        h.refused_at(mv_over("/full/x", "/full")),
        (IsADirectory, "/full".into())
    );
    h.ok(mkdir("/full/sub"));
    h.ok(rm("/full/x"));
    assert_eq!(
        h.refused_at(mv_over("/full/sub", "/full")),
        (NotEmpty, "/full".into())
    );
}

#[test]
fn moving_a_directory_is_refused_when_a_path_under_it_would_pass_4096_bytes() {
    let mut h = Harness::new();
    let long = "x".repeat(255);
    // 15 components of 256 bytes each: 3840 bytes.
    let base: String = (0..15).map(|_| format!("/{long}")).collect();
    h.ok(mkdir_p(&base));
    // The deepest path under /s is 200 bytes below it.
    let deep = format!("/d/{}", "c".repeat(197));
    h.ok(create_p(&format!("/s{deep}")));
    // 3840 + 57 + 200 = 4096 + 1.
    let too_far = format!("{base}/{}", "m".repeat(56));
    let e = h.refused(mv("/s", &too_far));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("4097 bytes"), "{e}");
    // 4096 exactly: allowed, and the deepest path still resolves.
    let just = format!("{base}/{}", "m".repeat(55));
    h.ok(mv("/s", &just));
    assert_eq!(format!("{just}{deep}").len(), path::MAX_PATH_LEN);
    assert!(h.stat(&format!("{just}{deep}")).is_ok());
}

#[test]
fn a_move_that_lengthens_paths_walks_at_most_max_delete_inodes() {
    let mut h = Harness::new();
    h.engine.max_delete_inodes = 2;
    for c in [
        create_p("/s/1"),
        create_p("/s/2"),
        create_p("/t/1"),
        create_p("/t/2"),
    ] {
        h.ok(c);
    }
    h.ok(create("/t/3"));
    // Two inodes under /s: walked. Three under /t: refused...
    h.ok(mv("/s", "/ss"));
    let e = h.refused(mv("/t", "/tt"));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("more than 2 inodes"), "{e}");
    // ... unless its paths do not grow.
    h.ok(mv("/t", "/u"));
    h.ok(mv("/u", "/t"));
    assert_eq!(
        h.tree(),
        ["/ss", "/ss/1", "/ss/2", "/t", "/t/1", "/t/2", "/t/3"]
    );
}

// ---------------------------------------------------------------------------
// Names and paths, for every command
// ---------------------------------------------------------------------------

#[test]
fn every_command_refuses_bad_paths_and_names() {
    let long_name = format!("/{}", "x".repeat(256));
    let long_path: String = (0..17).map(|_| format!("/{}", "y".repeat(240))).collect();
    assert_eq!(long_path.len(), path::MAX_PATH_LEN + 1);
    let bad = [
        ("", InvalidPath),
        ("a/b", InvalidPath),
        ("/a//b", InvalidPath),
        ("/a/b//", InvalidPath),
        (long_path.as_str(), InvalidPath),
        ("/a/./b", InvalidName),
        ("/..", InvalidName),
        ("/a\0b", InvalidName),
        (long_name.as_str(), InvalidName),
    ];
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    for (p, kind) in bad {
        for cmd in [
            mkdir(p),
            mkdir_p(p),
            create(p),
            create_p(p),
            complete(p, 1),
            set_size(p, 1),
            chmod(p, 0o600),
            rm(p),
            rm_r(p),
            mv(p, "/z"),
            mv("/a", p),
            mv_over(p, p),
        ] {
            assert_eq!(h.kind(cmd.clone()), kind, "{cmd:?}");
        }
    }
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn names_and_paths_at_their_limits_are_accepted() {
    let mut h = Harness::new();
    let name = "é".repeat(127); // 254 bytes
    h.ok(mkdir(&format!("/{name}x")));
    let long: String = (0..16).map(|_| format!("/{}", "y".repeat(255))).collect();
    assert_eq!(long.len(), path::MAX_PATH_LEN);
    assert_eq!(h.ok(create_p(&long)).len(), 16);
    assert!(h.stat(&long).is_ok());
}

// ---------------------------------------------------------------------------
// Groups, ids, records
// ---------------------------------------------------------------------------

#[test]
fn a_group_sees_its_earlier_commands() {
    let mut h = Harness::new();
    let ran = h.run_group(vec![
        mkdir("/a"),
        create("/a/f"),
        rm("/a"),
        mv("/a/f", "/a/g"),
        complete("/a/g", 10),
        mkdir_p("/a"),
    ]);
    let kinds: Vec<&str> = ran
        .iter()
        .map(|r| match r {
            Ran::Applied(_) => "applied",
            Ran::NoOp => "noop",
            Ran::Refused(e) => e.kind().as_str(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "applied",
            "applied",
            "not_empty",
            "applied",
            "applied",
            "noop"
        ]
    );
    assert_eq!(h.seq, 4);
    let g = h.ino("/a/g");
    assert_eq!((g.id, g.attrs.size, g.attrs.complete), (3, 10, true));
}

#[test]
fn a_refused_command_takes_no_id_from_its_group() {
    let mut h = Harness::new();
    let ran = h.run_group(vec![mkdir("/a"), mkdir("/a"), create("/x/y"), mkdir("/b")]);
    assert!(matches!(&ran[1], Ran::Refused(Error::AlreadyExists(_))));
    assert!(matches!(&ran[2], Ran::Refused(Error::NotFound(_))));
    assert_eq!((h.id("/a"), h.id("/b")), (2, 3));
    assert_eq!(h.seq, 2);
}

#[test]
fn all_events_of_a_group_take_its_time() {
    let mut h = Harness::new();
    let ran = h.run_group(vec![create("/f"), set_size("/f", 1), chmod("/f", 0o600)]);
    let mut times = Vec::new();
    for r in &ran {
        match r {
            Ran::Applied(ev) => match &ev[0] {
                Event::Create { attrs, .. } => times.push(attrs.mtime_ms),
                Event::SetSize(u) | Event::SetAttr(u) => times.push(u.new.mtime_ms),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(times, [T0, T0, T0]);
    h.ok(set_size("/f", 2));
    assert_eq!(h.ino("/f").attrs.mtime_ms, T0 + 1000);
}

#[test]
fn ids_reserve_blocks_of_1000_and_a_restart_skips_the_rest() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    // Id 2 crossed the initial bound: the next block is reserved.
    assert_eq!(h.engine.state.id_bound, 2 + ID_BLOCK);
    h.ok(mkdir("/b"));
    assert_eq!(h.id("/b"), 3);
    h.restart();
    let ev = h.ok(mkdir("/c"));
    assert_eq!(
        ev,
        vec![created(
            1002,
            ROOT_ID,
            "/c",
            dir_attrs(T0 + 2000, 0o755, "", "")
        )]
    );
    assert_eq!(h.engine.state.id_bound, 1002 + ID_BLOCK);
    h.ok(mkdir("/d"));
    assert_eq!(h.id("/d"), 1003);
}

#[test]
fn ids_are_refused_once_exhausted() {
    let mut h = Harness::new();
    h.engine.state.next_id = MAX_INODE_ID;
    assert_eq!(h.kind(mkdir("/a")), InvalidArgument);
    h.engine.state.next_id = MAX_INODE_ID - 1;
    // Two ids do not fit.
    assert_eq!(h.kind(mkdir_p("/a/b")), InvalidArgument);
    assert_eq!(h.kind(create_p("/a/f")), InvalidArgument);
    assert_eq!(h.tree(), Vec::<String>::new());
}

#[test]
fn the_last_ids_reserve_no_block_past_the_end() {
    let mut h = Harness::new();
    h.engine.state.next_id = MAX_INODE_ID - 1;
    h.engine.state.id_bound = MAX_INODE_ID - 1;
    // Used to overflow (`id + ID_BLOCK`): a panic in debug, a wrapped,
    // tiny `next_id` on disk in release.
    h.ok(mkdir("/a"));
    assert_eq!(h.id("/a"), MAX_INODE_ID - 1);
    assert_eq!(h.engine.state.id_bound, MAX_INODE_ID + 1);
    h.restart();
    assert!(h.engine.state.next_id > MAX_INODE_ID - 1);
    assert_eq!(h.kind(mkdir("/b")), InvalidArgument);
}

#[test]
fn a_multi_event_command_is_refused_when_its_record_passes_max_record_bytes() {
    let cmd = mkdir_p("/a/b/c");
    let events = Harness::new().ok(cmd.clone());
    let size = postcard::to_allocvec(&events).unwrap().len();

    let mut h = Harness::new();
    h.engine.max_record_bytes = size - 1;
    // Run by hand: the refused chain may have used up its ids.
    let mut ov = Overlay::new(&h.index);
    match h.engine.execute(&cmd, None, &mut ov, h.now) {
        Executed::Refused(e) => {
            assert_eq!(e.kind(), InvalidArgument);
            assert!(e.to_string().contains(&format!("{size} bytes")), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(ov.writes().is_empty());
    drop(ov);
    let loaded = EngineState::load(&h.index).unwrap();
    assert_eq!(
        (h.engine.state.owners, h.engine.state.groups),
        (loaded.owners, loaded.groups)
    );
    h.engine.max_record_bytes = size;
    assert_eq!(h.ok(cmd).len(), 3);
    assert_eq!(h.tree(), ["/a", "/a/b", "/a/b/c"]);
}

#[test]
fn a_single_event_is_never_refused_for_its_size() {
    let mut h = Harness::new();
    h.engine.max_record_bytes = 1;
    h.ok(mkdir("/a"));
    h.ok(create("/a/f"));
    h.ok(set_size("/a/f", 3));
    h.ok(chmod("/a/f", 0o600));
    h.ok(complete("/a/f", 3));
    h.ok(mv("/a/f", "/g"));
    // Two events are measured.
    h.ok(create("/h"));
    assert_eq!(h.kind(mv_over("/g", "/h")), InvalidArgument);
}

// ---------------------------------------------------------------------------
// Reads the engine offers, and failures of the index
// ---------------------------------------------------------------------------

#[test]
fn list_children_pages_in_byte_order() {
    let mut h = Harness::new();
    for p in ["/d/c", "/d/a", "/d/B", "/d/b"] {
        h.ok(create_p(p));
    }
    let dicts = &h.engine.names;
    let d = h.id("/d");
    let names = |(v, more): (Vec<DirEntry>, bool)| {
        (
            v.into_iter()
                .map(|e| e.name.to_string())
                .collect::<Vec<_>>(),
            more,
        )
    };
    let page = list_children(&h.index, dicts, d, None, 2).unwrap();
    assert_eq!(names(page), (vec!["B".to_owned(), "a".into()], true));
    let page = list_children(&h.index, dicts, d, Some(b"a"), 2).unwrap();
    assert_eq!(names(page), (vec!["b".to_owned(), "c".into()], false));
    let page = list_children(&h.index, dicts, d, Some(b"c"), 2).unwrap();
    assert_eq!(names(page), (vec![], false));
}

#[test]
fn path_of_follows_renames_and_knows_missing_ids() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    let f = h.id("/a/b/f");
    h.ok(mv("/a", "/z"));
    assert_eq!(path_of(&h.index, f).unwrap(), "/z/b/f");
    assert_eq!(path_of(&h.index, ROOT_ID).unwrap(), "/");
    assert!(matches!(
        path_of(&h.index, 999),
        Err(Error::InodeNotFound(999))
    ));
}

/// An index whose reads fail, as a failing disk would.
struct Unreadable;

impl IndexRead for Unreadable {
    fn get(&self, _: Cf, _: &[u8]) -> Result<Option<Vec<u8>>> {
        Err(Error::Io(std::io::Error::other("disk gone")))
    }

    fn scan(&self, _: Cf, _: &[u8], _: Option<&[u8]>, _: usize) -> Result<Vec<Kv>> {
        Err(Error::Io(std::io::Error::other("disk gone")))
    }
}

#[test]
fn a_failed_index_read_refuses_the_command_and_writes_nothing() {
    let h = Harness::new();
    let mut engine = Engine::new(h.engine.state.clone());
    let mut ov = Overlay::new(&Unreadable);
    for cmd in [mkdir("/a"), rm_r("/a"), mv("/a", "/b"), chmod("/", 0o700)] {
        match engine.execute(&cmd, None, &mut ov, T0) {
            Executed::Refused(e) => assert_eq!(e.kind(), Io, "{cmd:?}"),
            other => panic!("{cmd:?}: {other:?}"),
        }
    }
    assert!(ov.writes().is_empty());
    assert_eq!(engine.state, h.engine.state);
}

#[test]
fn an_edge_to_a_missing_inode_refuses_the_command_as_corruption() {
    let mut h = Harness::new();
    h.ok(create_p("/a/f"));
    let mut broken = h.index.clone();
    broken.inodes.remove(&inode_key(h.id("/a/f"))[..]);
    let mut ov = Overlay::new(&broken);
    for cmd in [complete("/a/f", 1), rm_r("/a"), mv("/a/f", "/g")] {
        match h.engine.execute(&cmd, None, &mut ov, T0) {
            Executed::Refused(e) => assert_eq!(e.kind(), Corruption, "{cmd:?}"),
            other => panic!("{cmd:?}: {other:?}"),
        }
    }
    assert!(ov.writes().is_empty());
}

// ---------------------------------------------------------------------------
// Format 2: parents' times, symbolic links, extended attributes, quotas
// ---------------------------------------------------------------------------

fn symlink(target: &str, p: &str) -> Command {
    Command::Symlink {
        target: target.into(),
        path: p.into(),
        parents: false,
        owner: String::new(),
        group: String::new(),
    }
}

fn setxattr(p: &str, name: &str, value: &[u8], flag: XattrFlag) -> Command {
    Command::SetXattr {
        path: p.into(),
        name: name.into(),
        value: Bytes(value.to_vec()),
        flag,
    }
}

fn rmxattr(p: &str, name: &str) -> Command {
    Command::RemoveXattr {
        path: p.into(),
        name: name.into(),
    }
}

fn quota(p: &str, inodes: Option<u64>, bytes: Option<u64>) -> Command {
    Command::SetQuota {
        path: p.into(),
        inodes,
        bytes,
    }
}

fn stored_quota_of(h: &Harness, p: &str) -> Option<Quota> {
    stored_quota(&h.index, h.id(p))
        .unwrap()
        .map(|q| q.to_quota())
}

fn usage(files: u64, directories: u64, symlinks: u64, bytes: u64) -> Usage {
    Usage {
        files,
        directories,
        symlinks,
        bytes,
    }
}

#[test]
fn create_delete_and_rename_move_their_parents_times() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    h.ok(mkdir("/c"));
    let t = h.now;
    h.ok(create("/a/b/f"));
    let b = h.ino("/a/b").attrs;
    assert_eq!((b.mtime_ms, b.change_ms), (t, t));
    assert!(h.ino("/a").attrs.mtime_ms < t, "only the parent");
    let t = h.now;
    h.ok(mv("/a/b/f", "/c/g"));
    for p in ["/a/b", "/c"] {
        let a = h.ino(p).attrs;
        assert_eq!((a.mtime_ms, a.change_ms), (t, t), "{p}");
    }
    let g = h.ino("/c/g").attrs;
    assert_eq!(
        (g.mtime_ms < t, g.change_ms),
        (true, t),
        "the moved inode changed"
    );
    let t = h.now;
    h.ok(rm_r("/a"));
    assert_eq!(h.ino("/").attrs.mtime_ms, t);
    // A no-op moves nothing.
    let before = h.ino("/c").attrs;
    h.noop(mkdir_p("/c"));
    assert_eq!(h.ino("/c").attrs, before);
}

#[test]
fn a_recursive_delete_times_only_the_surviving_parent() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    let (a, b, f) = (h.ino("/a"), h.ino("/a/b"), h.ino("/a/b/f"));
    let t = h.now;
    assert_eq!(
        h.ok(rm_r("/a")),
        vec![
            deleted(&f, "/a/b/f", None),
            deleted(&b, "/a/b", None),
            deleted(&a, "/a", Some(t))
        ]
    );
}

#[test]
fn symlinks_keep_their_target_through_renames_and_attribute_changes() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    let t = h.now;
    let ev = h.ok(symlink("../x/target", "/d/l"));
    let mut attrs = dir_attrs(t, 0o777, "", "");
    attrs.kind = FileType::Symlink;
    attrs.size = 11;
    assert_eq!(
        ev,
        vec![Event::Symlink {
            id: h.id("/d/l"),
            parent: h.id("/d"),
            name: "l".into(),
            path: "/d/l".into(),
            target: "../x/target".into(),
            attrs: attrs.clone(),
            parent_mtime_ms: t,
            quotas: vec![],
        }]
    );
    assert_eq!(h.ino("/d/l").attrs, attrs);
    h.ok(chown("/d/l", Some("alice"), None));
    h.ok(mv("/d/l", "/m"));
    assert_eq!(
        readlink(&h.index, &h.engine.names, b"/m").unwrap(),
        "../x/target"
    );
    assert_eq!(h.ino("/m").attrs.owner, "alice");
    // Not followed: a link in a path is not a directory.
    assert_eq!(h.refused_at(create("/m/f")), (NotADirectory, "/m".into()));
    assert_eq!(h.kind(complete("/m", 3)), InvalidArgument);
    assert_eq!(h.kind(symlink("x", "/m")), AlreadyExists);
    assert_eq!(h.kind(symlink("", "/n")), InvalidArgument);
    assert_eq!(h.kind(symlink(&"t".repeat(4097), "/n")), InvalidArgument);
    assert_eq!(h.kind(symlink("a\0b", "/n")), InvalidArgument);
    h.ok(symlink(&"t".repeat(4096), "/n"));
    assert_eq!(
        readlink(&h.index, &h.engine.names, b"/d")
            .unwrap_err()
            .kind(),
        InvalidArgument
    );
    // A link replaces a file and a file a link; neither a directory.
    h.ok(create("/f"));
    h.ok(mv_over("/m", "/f"));
    assert_eq!(h.kind(mv_over("/f", "/d")), IsADirectory);
    h.ok(rm("/f"));
    assert!(h.missing("/f"));
}

#[test]
fn extended_attributes_follow_linux_rules() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let t = h.now;
    let ev = h.ok(setxattr("/f", "user.a", b"1", XattrFlag::Either));
    assert_eq!(
        ev,
        vec![Event::SetXattr {
            id: h.id("/f"),
            path: "/f".into(),
            name: "user.a".into(),
            value: Bytes(b"1".to_vec()),
            old: None,
            change_ms: t,
        }]
    );
    assert_eq!(h.ino("/f").attrs.change_ms, t);
    h.noop(setxattr("/f", "user.a", b"1", XattrFlag::Either));
    assert_eq!(
        h.kind(setxattr("/f", "user.a", b"2", XattrFlag::Create)),
        AlreadyExists
    );
    assert_eq!(
        h.kind(setxattr("/f", "user.b", b"2", XattrFlag::Replace)),
        NotFound
    );
    h.ok(setxattr("/f", "user.a", b"2", XattrFlag::Replace));
    h.ok(setxattr("/f", "trusted.z", b"", XattrFlag::Create));
    let all = get_xattrs(&h.index, &h.engine.names, b"/f", None).unwrap();
    let names: Vec<&str> = all.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["trusted.z", "user.a"]);
    assert_eq!(all[1].value.0, b"2");
    // Names and values.
    for bad in ["user.", "other.x", "x", "user.a\0"] {
        assert_eq!(
            h.kind(setxattr("/f", bad, b"", XattrFlag::Either)),
            InvalidArgument,
            "{bad}"
        );
    }
    let long = format!("user.{}", "n".repeat(250));
    h.ok(setxattr("/f", &long, b"", XattrFlag::Either));
    let too_long = format!("user.{}", "n".repeat(251));
    assert_eq!(
        h.kind(setxattr("/f", &too_long, b"", XattrFlag::Either)),
        InvalidArgument
    );
    assert_eq!(
        h.kind(setxattr(
            "/f",
            "user.big",
            &vec![0; 65_537],
            XattrFlag::Either
        )),
        InvalidArgument
    );
    h.ok(setxattr(
        "/f",
        "user.big",
        &vec![7; 65_536],
        XattrFlag::Either,
    ));
    // Per inode: 256 KiB of names and values, 128 attributes.
    h.ok(setxattr(
        "/f",
        "user.big2",
        &vec![7; 65_536],
        XattrFlag::Either,
    ));
    h.ok(setxattr(
        "/f",
        "user.big3",
        &vec![7; 65_536],
        XattrFlag::Either,
    ));
    assert_eq!(
        h.kind(setxattr(
            "/f",
            "user.big4",
            &vec![7; 65_536],
            XattrFlag::Either
        )),
        InvalidArgument
    );
    h.ok(create("/g"));
    for i in 0..128 {
        h.ok(setxattr("/g", &format!("user.{i}"), b"", XattrFlag::Either));
    }
    assert_eq!(
        h.kind(setxattr("/g", "user.x", b"", XattrFlag::Either)),
        InvalidArgument
    );
    // Removal: the last one takes the flag and the key with it.
    assert_eq!(h.kind(rmxattr("/f", "user.none")), NotFound);
    let g = h.id("/g");
    for i in 0..128 {
        h.ok(rmxattr("/g", &format!("user.{i}")));
    }
    assert!(!h.index.inodes.contains_key(&v2::xattrs_key(g)[..]));
    let e = InodeEntryV2::decode(&h.index.inodes[&inode_key(g)[..]]).unwrap();
    assert_eq!(e.flags & FLAG_HAS_XATTRS, 0);
    // A delete takes them with the inode.
    let f = h.id("/f");
    h.ok(rm("/f"));
    assert!(!h.index.inodes.contains_key(&v2::xattrs_key(f)[..]));
}

#[test]
fn a_quota_counts_its_subtree_and_refuses_what_would_pass_it() {
    let mut h = Harness::new();
    h.ok(create_p("/q/a/f1"));
    h.ok(complete("/q/a/f1", 100));
    h.ok(symlink("x", "/q/l"));
    let ev = h.ok(quota("/q", Some(5), Some(150)));
    let want = Quota {
        limit_inodes: Some(5),
        limit_bytes: Some(150),
        usage: usage(1, 1, 1, 100),
    };
    assert_eq!(
        ev,
        vec![Event::SetQuota {
            id: h.id("/q"),
            path: "/q".into(),
            quota: want
        }]
    );
    assert_eq!(stored_quota_of(&h, "/q"), Some(want));
    assert!(h.engine.state.quotas.contains(&h.id("/q")));
    // Creates count, and carry the quota's id.
    let ev = h.ok(create("/q/a/f2"));
    assert!(matches!(&ev[0], Event::Create { quotas, .. } if quotas == &[h.id("/q")]));
    h.ok(mkdir("/q/b"));
    assert_eq!(
        stored_quota_of(&h, "/q").unwrap().usage,
        usage(2, 2, 1, 100)
    );
    // The sixth inode is refused, and writes nothing.
    let e = h.refused(create("/q/b/f3"));
    assert_eq!(e.kind(), QuotaExceeded);
    assert!(
        matches!(&e, Error::QuotaExceeded { path, resource: "inodes", limit: 5, would_be: 6 } if path == "/q"),
        "{e:?}"
    );
    assert_eq!(h.kind(create_p("/q/c/d/f")), QuotaExceeded);
    // Bytes: growing past the limit is refused, shrinking is not.
    assert_eq!(h.kind(complete("/q/a/f2", 51)), QuotaExceeded);
    h.ok(complete("/q/a/f2", 50));
    assert_eq!(h.kind(set_size("/q/a/f1", 101)), QuotaExceeded);
    h.ok(set_size("/q/a/f1", 10));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage, usage(2, 2, 1, 60));
    // A delete frees; outside the quota nothing is counted.
    h.ok(rm("/q/l"));
    h.ok(create("/q/b/f3"));
    h.ok(create_p("/out/x"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage, usage(3, 2, 0, 60));
    // Lowering a limit below the usage keeps the counters and refuses growth.
    h.ok(quota("/q", Some(1), None));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage, usage(3, 2, 0, 60));
    assert_eq!(h.kind(mkdir("/q/z")), QuotaExceeded);
    h.ok(rm("/q/b/f3"));
    h.noop(quota("/q", Some(1), None));
    // Clearing removes it; a directory without one is a no-op.
    h.ok(Command::ClearQuota { path: "/q".into() });
    assert_eq!(stored_quota_of(&h, "/q"), None);
    assert!(h.engine.state.quotas.is_empty());
    h.noop(Command::ClearQuota { path: "/q".into() });
    h.ok(mkdir("/q/z"));
    assert_eq!(h.kind(quota("/q/a/f1", Some(1), None)), NotADirectory);
    assert_eq!(h.kind(quota("/q", Some(u64::MAX), None)), InvalidArgument);
}

#[test]
fn a_quotas_usage_past_its_counters_range_is_refused_before_the_log() {
    // An inode limit and no byte limit: nothing but the counter's range
    // bounds the bytes.
    let mut h = Harness::new();
    h.ok(mkdir("/q"));
    h.ok(quota("/q", Some(100), None));
    for f in ["/q/a", "/q/b", "/q/c"] {
        h.ok(create(f));
    }
    let big = i64::MAX as u64;
    h.ok(set_size("/q/a", big));
    h.ok(set_size("/q/b", big));
    let e = h.refused(set_size("/q/c", big));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    assert!(e.to_string().contains("/q's quota would pass 2^64"), "{e}");
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, 2 * big);
    // The engine goes on: shrinking and other writes are applied.
    h.ok(set_size("/q/a", 0));
    h.ok(set_size("/q/c", big));
    h.ok(rm("/q/b"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, big);
}

#[test]
fn a_subtree_past_a_counters_range_is_not_moved_into_a_quota_nor_given_one() {
    // Outside any quota nothing counts the bytes, so they may sum past
    // 2^64; what would have to count them exactly is refused, not
    // saturated (a saturated counter stopped the writer later, when the
    // files shrank).
    let mut h = Harness::new();
    h.ok(mkdir_p("/o/d"));
    h.ok(mkdir("/q"));
    h.ok(quota("/q", Some(100), None));
    let big = i64::MAX as u64;
    for f in ["/o/a", "/o/b", "/o/d/c"] {
        h.ok(create(f));
        h.ok(set_size(f, big));
    }
    let e = h.refused(mv("/o", "/q/o"));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    assert!(e.to_string().contains("past 2^64"), "{e}");
    let e = h.refused(quota("/o", None, None));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    // A quota below, exact, and a sum of counters past the range above it.
    h.ok(set_size("/o/a", 0));
    h.ok(quota("/o/d", None, None));
    assert_eq!(stored_quota_of(&h, "/o/d").unwrap().usage.bytes, big);
    h.ok(set_size("/o/a", big));
    let e = h.refused(quota("/o", None, None));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    // What fits is counted exactly and the writer goes on.
    h.ok(mv("/o/d", "/q/d"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, big);
    h.ok(set_size("/q/d/c", 0));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, 0);
    h.ok(rm_r("/q/d"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, 0);
}

#[test]
fn nested_quotas_and_moves_between_them_keep_exact_counts() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/top/in"));
    h.ok(mkdir_p("/other"));
    h.ok(quota("/top", None, None));
    h.ok(quota("/top/in", Some(3), None));
    h.ok(quota("/other", Some(100), Some(10)));
    h.ok(create_p("/top/in/d/f"));
    h.ok(complete("/top/in/d/f", 7));
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(1, 2, 0, 7)
    );
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        usage(1, 1, 0, 7)
    );
    // Out of both into another: the subtree's usage moves.
    let ev = h.ok(mv("/top/in/d", "/other/d"));
    match &ev[0] {
        Event::Rename {
            quotas_from,
            quotas_to,
            usage: u,
            ..
        } => {
            assert_eq!(quotas_from, &[h.id("/top"), h.id("/top/in")]);
            assert_eq!(quotas_to, &[h.id("/other")]);
            assert_eq!(*u, usage(1, 1, 0, 7));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(0, 1, 0, 0)
    );
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        Usage::default()
    );
    assert_eq!(
        stored_quota_of(&h, "/other").unwrap().usage,
        usage(1, 1, 0, 7)
    );
    // Within one quota nothing moves.
    h.ok(mkdir("/other/e"));
    let ev = h.ok(mv("/other/d", "/other/e/d"));
    assert!(
        matches!(&ev[0], Event::Rename { quotas_from, quotas_to, .. }
        if quotas_from.is_empty() && quotas_to.is_empty())
    );
    // A move that would pass the destination's limits is refused.
    h.ok(create_p("/big/f"));
    h.ok(complete("/big/f", 20));
    assert_eq!(h.kind(mv("/big", "/other/big")), QuotaExceeded);
    h.ok(mv("/big/f", "/top/in/f"));
    // Moving a directory with its own quota uses its counters.
    h.ok(mkdir("/top/in/q"));
    h.ok(quota("/top/in/q", None, None));
    h.ok(create("/top/in/q/a"));
    h.ok(mv("/top/in/q", "/top/q"));
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        usage(1, 0, 0, 20)
    );
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(2, 2, 0, 20)
    );
    // A recursive delete frees its quotas above it; the ones inside go.
    let q = h.id("/top/q");
    h.ok(rm_r("/top/q"));
    assert!(!h.engine.state.quotas.contains(&q));
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(1, 1, 0, 20)
    );
    // Replaced on a rename: the victim's usage goes, the source's comes.
    h.ok(create("/top/in/g"));
    h.ok(create("/x"));
    h.ok(mv_over("/x", "/top/in/g"));
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        usage(2, 0, 0, 20)
    );
}

#[test]
fn a_content_summary_walks_and_takes_the_counters_it_meets() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    h.ok(complete("/a/b/f", 5));
    h.ok(symlink("t", "/a/l"));
    let sum =
        |h: &Harness, p: &str, max| content_summary(&h.index, &h.engine.names, p.as_bytes(), max);
    let s = sum(&h, "/a", 100).unwrap();
    assert_eq!(s.usage, usage(1, 2, 1, 5));
    assert_eq!((s.quota, s.from_counters, s.walked), (None, 0, 4));
    let s = sum(&h, "/a/b/f", 100).unwrap();
    assert_eq!((s.usage, s.walked), (usage(1, 0, 0, 5), 1));
    assert_eq!(sum(&h, "/a", 3).unwrap_err().kind(), InvalidArgument);
    h.ok(quota("/a/b", None, None));
    let s = sum(&h, "/a", 3).unwrap();
    assert_eq!(s.usage, usage(1, 2, 1, 5));
    assert_eq!((s.from_counters, s.walked), (1, 3));
    h.ok(quota("/a", Some(10), None));
    let s = sum(&h, "/a", 1).unwrap();
    assert_eq!(s.usage, usage(1, 2, 1, 5), "its own counters, and itself");
    assert_eq!(s.quota.unwrap().limit_inodes, Some(10));
    assert_eq!(s.quota.unwrap().usage, usage(1, 1, 1, 5));
}

/// docs/FORMAT.md §11: what applying record 1 (`mkdir /data` at
/// 1700000000000) writes into a new database, byte for byte, and §14.3:
/// the same command as schema 1 wrote it leaves the root alone.
#[test]
fn the_documented_record_1_writes_the_documented_bytes() {
    let hex = |s: &str| -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let two = hex(
        "01 02 9076e37c 01 80d095ffbc31 01 00 02 01 04 64617461 05 2f64617461 01 00 00
         80d095ffbc31 80d095ffbc31 80d095ffbc31 ed03 01 00 00 01 80d095ffbc31 00",
    );
    let one = hex(
        "01 01 8835fe29 01 80d095ffbc31 01 00 02 01 04 64617461 05 2f64617461 01 00 00
         80d095ffbc31 80d095ffbc31 ed03 01 00 00",
    );
    let data = hex(
        "0100000000000000 0000000000000000 0000000000000000 0068e5cf8b010000
         0068e5cf8b010000 0068e5cf8b010000 ed010000 01 01 04 00 00000000 00000000 64617461",
    );
    let touched_root = hex(
        "0000000000000000 0000000000000000 0000000000000000 0000000000000000
         0068e5cf8b010000 0068e5cf8b010000 ed010000 01 01 00 00 00000000 00000000",
    );
    let root = format::empty_namespace_inodes()[0].1.clone();
    for (bytes, want_root) in [(two, touched_root), (one, root)] {
        let h = Harness::new();
        let mut state = h.engine.state.clone();
        let rec = decode_record_ref(&bytes, Some(1)).unwrap();
        let mut ov = Overlay::new(&h.index);
        apply_events(rec.events, &mut ov, &mut state).unwrap();
        let w = ov.take_writes();
        let put = |k: &[u8]| w.inodes.get(k).cloned().flatten();
        assert_eq!(put(&inode_key(2)), Some(data.clone()));
        assert_eq!(
            w.edges.get(&edge_key(1, b"data")[..]).cloned().flatten(),
            Some(2u64.to_be_bytes().to_vec())
        );
        assert_eq!(put(&inode_key(NEXT_ID_KEY)), Some(hex("ea03000000000000")));
        let root_now = put(&inode_key(ROOT_ID))
            .unwrap_or_else(|| h.index.inodes[&inode_key(ROOT_ID)[..]].clone());
        assert_eq!(root_now, want_root);
        // Nothing else: the dictionaries are not written.
        assert_eq!(
            w.inodes.len() + w.edges.len(),
            3 + usize::from(put(&inode_key(ROOT_ID)).is_some())
        );
    }
}
