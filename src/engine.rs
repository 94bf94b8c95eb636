//! The pure engine: commands in, events out; events in, index writes out.
//!
//! No I/O happens here. [`Engine::execute`] validates a command against an
//! index view (the stored index plus the group's earlier changes), decides
//! the events (ids, times, paths), and applies them to the overlay so the
//! next command of the group sees them. [`apply_events`] is the only code
//! that turns events into index bytes; the writer, recovery replay, rebuild
//! and (later) followers all use it, which is what makes the index a
//! deterministic function of the log.

use crate::command::Command;
use crate::error::{DictKind, Error, Result};
use crate::event::{Event, EventRef, Update};
use crate::format::{
    self, edge_key, edge_key_into, edge_prefix, edge_value, inode_key, next_id_value, Dict,
    DictSet, InodeEntry, FLAG_COMPLETE, FLAG_DIRECTORY, GROUP_DICT_KEY, ID_BLOCK, MAX_INODE_ID,
    NEXT_ID_KEY, OWNER_DICT_KEY, ROOT_ID,
};
use crate::index::{Cf, IndexRead, IndexWrite, Overlay};
use crate::path;
use crate::types::{Attrs, AttrsRef, DirEntry, FileType, Inode, DEFAULT_DIR_MODE};

/// The in-memory part of the index state the writer keeps between groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineState {
    pub dicts: DictSet,
    /// The persisted `next_id` value: ids below it have been reserved.
    pub id_bound: u64,
    /// The next id the writer hands out (starts at `id_bound` after open, so
    /// up to `ID_BLOCK - 1` ids are skipped per restart, as in seed 000).
    pub next_id: u64,
}

impl EngineState {
    /// Loads the state from an index.
    pub fn load(view: &(impl IndexRead + ?Sized)) -> Result<EngineState> {
        let dict = |key| -> Result<Dict> {
            match view.get(Cf::Inodes, &inode_key(key))? {
                Some(v) => Dict::decode(&v),
                None => Ok(Dict::default()),
            }
        };
        let owners = dict(OWNER_DICT_KEY)?;
        let groups = dict(GROUP_DICT_KEY)?;
        let id_bound = match view.get(Cf::Inodes, &inode_key(NEXT_ID_KEY))? {
            Some(v) => format::decode_next_id_value(&v)?,
            None => return Err(Error::corrupt("index", "next_id key is missing")),
        };
        Ok(EngineState {
            dicts: DictSet { owners, groups },
            id_bound,
            next_id: id_bound,
        })
    }
}

/// The index entries of an empty namespace (see
/// [`format::empty_namespace_inodes`]).
#[cfg(test)]
pub fn initial_index_writes<R: IndexRead + ?Sized>(ov: &mut Overlay<'_, R>) {
    for (k, v) in format::empty_namespace_inodes() {
        ov.put(Cf::Inodes, k.to_vec(), v);
    }
}

// ---------------------------------------------------------------------------
// Reading the index
// ---------------------------------------------------------------------------

/// Decodes a stored entry into an [`Inode`].
pub fn inode_from_entry<N: AsRef<[u8]>>(
    id: u64,
    e: &InodeEntry<N>,
    dicts: &DictSet,
) -> Result<Inode> {
    let name = String::from_utf8(e.name.as_ref().to_vec())
        .map_err(|_| Error::corrupt("inode entry", format!("name of inode {id} is not UTF-8")))?;
    Ok(Inode {
        id,
        parent: e.parent_id,
        name,
        attrs: Attrs {
            kind: if e.is_dir() {
                FileType::Directory
            } else {
                FileType::File
            },
            size: e.size,
            block_size: e.block_size,
            ctime_ms: e.creation_time_ms,
            mtime_ms: e.modification_time_ms,
            mode: e.mode,
            complete: e.is_complete(),
            owner: dicts.owners.lookup(e.owner_id)?.to_owned(),
            group: dicts.groups.lookup(e.group_id)?.to_owned(),
        },
    })
}

pub fn get_inode(
    view: &(impl IndexRead + ?Sized),
    dicts: &DictSet,
    id: u64,
) -> Result<Option<Inode>> {
    if id > MAX_INODE_ID {
        return Ok(None);
    }
    match view.get(Cf::Inodes, &inode_key(id))? {
        Some(v) => Ok(Some(inode_from_entry(
            id,
            &InodeEntry::decode_ref(&v)?,
            dicts,
        )?)),
        None => Ok(None),
    }
}

pub fn get_child(view: &(impl IndexRead + ?Sized), parent: u64, name: &str) -> Result<Option<u64>> {
    match view.get(Cf::Edges, &edge_key(parent, name.as_bytes()))? {
        Some(v) => Ok(Some(format::decode_edge_value(&v)?)),
        None => Ok(None),
    }
}

fn must_inode(view: &(impl IndexRead + ?Sized), dicts: &DictSet, id: u64) -> Result<Inode> {
    get_inode(view, dicts, id)?.ok_or_else(|| missing_inode(id))
}

fn missing_inode(id: u64) -> Error {
    Error::corrupt(
        "index",
        format!("edge points to inode {id}, which does not exist"),
    )
}

/// Whether inode `id` is a directory, read from its stored entry without
/// resolving its name, owner or group.
fn stored_is_dir(view: &(impl IndexRead + ?Sized), id: u64) -> Result<bool> {
    if id > MAX_INODE_ID {
        return Err(missing_inode(id));
    }
    match view.get(Cf::Inodes, &inode_key(id))? {
        Some(v) => Ok(InodeEntry::decode_ref(&v)?.is_dir()),
        None => Err(missing_inode(id)),
    }
}

/// Resolves a path to its inode.
pub fn resolve(view: &(impl IndexRead + ?Sized), dicts: &DictSet, p: &str) -> Result<Inode> {
    let comps = path::components(p)?;
    // Walk the edges alone and read only the last inode: a file has no
    // edges under it, so whether a component that has no such child is a
    // file or a directory matters only on that (error) path.
    let mut cur = ROOT_ID;
    for (i, c) in comps.iter().enumerate() {
        match get_child(view, cur, c)? {
            Some(id) => cur = id,
            None => {
                return Err(if must_inode(view, dicts, cur)?.attrs.kind.is_dir() {
                    Error::NotFound(path::join_all(&comps[..=i]))
                } else {
                    Error::NotADirectory(path::join_all(&comps[..i]))
                })
            }
        }
    }
    must_inode(view, dicts, cur)
}

/// The full path of an inode, by walking parent links.
pub fn path_of(view: &(impl IndexRead + ?Sized), dicts: &DictSet, id: u64) -> Result<String> {
    let mut names = Vec::new();
    let mut cur = get_inode(view, dicts, id)?.ok_or(Error::InodeNotFound(id))?;
    while cur.id != ROOT_ID {
        names.push(cur.name.clone());
        if names.len() > 4096 {
            return Err(Error::corrupt(
                "index",
                format!("parent chain of inode {id} loops"),
            ));
        }
        cur = must_inode(view, dicts, cur.parent)?;
    }
    names.reverse();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    Ok(path::join_all(&refs))
}

/// One page of a directory's children, in name byte order.
pub fn list_children(
    view: &(impl IndexRead + ?Sized),
    dicts: &DictSet,
    dir: u64,
    start_after: Option<&str>,
    limit: usize,
) -> Result<(Vec<DirEntry>, bool)> {
    let prefix = edge_prefix(dir);
    let after = start_after.map(|s| edge_key(dir, s.as_bytes()));
    // One more than asked tells whether another page exists.
    let kvs = view.scan(
        Cf::Edges,
        &prefix,
        after.as_deref(),
        limit.saturating_add(1),
    )?;
    let more = kvs.len() > limit;
    let mut out = Vec::with_capacity(kvs.len().min(limit));
    for (k, v) in kvs.into_iter().take(limit) {
        let (_, name) = format::decode_edge_key(&k)?;
        let name = String::from_utf8(name.to_vec())
            .map_err(|_| Error::corrupt("edge key", "name is not UTF-8"))?;
        let id = format::decode_edge_value(&v)?;
        out.push(DirEntry {
            name,
            inode: must_inode(view, dicts, id)?,
        });
    }
    Ok((out, more))
}

fn has_children(view: &(impl IndexRead + ?Sized), dir: u64) -> Result<bool> {
    Ok(!view.scan(Cf::Edges, &edge_prefix(dir), None, 1)?.is_empty())
}

// ---------------------------------------------------------------------------
// Commands to events
// ---------------------------------------------------------------------------

/// What [`Engine::execute`] made of one command. Exactly one of four
/// things happened, and each tells the caller what to do next:
///
/// | Variant | Overlay and state | The caller |
/// |---|---|---|
/// | `Applied(events)` | the events are applied | logs them as one record |
/// | `NoOp` | unchanged | replies with the sequence already committed |
/// | `Refused(error)` | unchanged | replies with the error; the group goes on |
/// | `Fault(error)` | part of a command may be applied | discards the whole group and stops |
///
/// `Refused` is an answer to the caller: a rule refused the command
/// (`NotFound`, `AlreadyExists`, `NotADirectory`, `IsADirectory`,
/// `NotEmpty`, `InvalidName`, `InvalidPath`, `InvalidArgument` for a bad
/// mode, the root, a move under itself, a path that would grow too long, a
/// limit of inodes or record bytes, `DictionaryFull`), or the index could
/// not be read or decoded while the command was validated (`Io`,
/// `Corruption`): validation writes nothing, so that too refuses only the
/// one command. `Fault` is not an answer: the engine failed at its own work
/// and nothing of the group may be logged.
#[must_use]
#[derive(Debug)]
pub enum Executed {
    /// The command changed the namespace: its events (never empty), in
    /// record order, already applied to the overlay and the engine state.
    Applied(Vec<Event>),
    /// Nothing to change (`mkdir -p` of an existing directory, a rename onto
    /// itself, completing a complete file with its size, a `set_attr` that
    /// changes nothing): no record.
    NoOp,
    /// The command was refused and wrote nothing. (A `mkdir -p` or
    /// `create` refused for the size of its record has used up the ids it
    /// was given: ids are not dense.)
    Refused(Error),
    /// The engine failed at its own work once the command was accepted
    /// (measuring or applying its events): the overlay and the engine
    /// state may hold part of this command, so the caller must discard the
    /// overlay with its whole group, and stop (recovery replays the log).
    Fault(Error),
}

/// What a command's rules decided, before it is applied.
#[derive(Debug)]
enum Plan {
    /// Events to log (never empty).
    Events(Vec<Event>),
    /// Nothing to change.
    NoOp,
}

pub struct Engine {
    pub state: EngineState,
    /// Most inodes one recursive delete may remove (see
    /// `WriterConfig::max_delete_inodes`).
    pub max_delete_inodes: usize,
    /// Most bytes of one command's events (its log record, less a few
    /// bytes of header): a record is written, replayed and sent to every
    /// subscriber whole, so a bigger one is refused (`InvalidArgument`).
    pub max_record_bytes: usize,
}

fn check_mode(mode: u32) -> Result<()> {
    if mode > 0o7777 {
        return Err(Error::InvalidArgument(format!(
            "mode {mode:#o} has bits outside 0o7777"
        )));
    }
    Ok(())
}

/// The mode, owner and group a `mkdir` or `create` gives the inodes it
/// creates.
#[derive(Clone, Copy)]
struct Perms<'c> {
    mode: u32,
    owner: &'c str,
    group: &'c str,
}

impl<'c> Perms<'c> {
    fn new(mode: u32, owner: &'c str, group: &'c str) -> Perms<'c> {
        Perms { mode, owner, group }
    }

    /// The attributes of a new inode of `kind` with these owner and group:
    /// empty, created and modified `now`; a directory is complete at once,
    /// a file once `complete` says its size.
    fn new_inode(&self, kind: FileType, mode: u32, block_size: u64, now: u64) -> Attrs {
        Attrs {
            kind,
            size: 0,
            block_size,
            ctime_ms: now,
            mtime_ms: now,
            mode,
            complete: kind.is_dir(),
            owner: self.owner.to_owned(),
            group: self.group.to_owned(),
        }
    }
}

impl Engine {
    pub fn new(state: EngineState) -> Engine {
        Engine {
            state,
            max_delete_inodes: DEFAULT_MAX_DELETE_INODES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
        }
    }

    fn alloc_ids(&self, n: usize) -> Result<u64> {
        let first = self.state.next_id;
        if first.saturating_add(n as u64) > MAX_INODE_ID {
            return Err(Error::InvalidArgument("inode ids exhausted".into()));
        }
        Ok(first)
    }

    fn check_owner_group(&self, owner: &str, group: &str) -> Result<()> {
        self.state.dicts.owners.check(DictKind::Owner, owner)?;
        self.state.dicts.groups.check(DictKind::Group, group)?;
        Ok(())
    }

    /// Validates `cmd` against `view`, decides its events, and applies them to
    /// `view` (so later commands of the group see them). See [`Executed`].
    pub fn execute<R: IndexRead + ?Sized>(
        &mut self,
        cmd: &Command,
        view: &mut Overlay<'_, R>,
        time_ms: u64,
    ) -> Executed {
        let events = match self.plan(cmd, view, time_ms) {
            Ok(Plan::Events(events)) => events,
            Ok(Plan::NoOp) => return Executed::NoOp,
            Err(e) => return Executed::Refused(e),
        };
        debug_assert!(!events.is_empty());
        // One event is bounded by the path and name limits; only a
        // command with several can grow past the bound.
        if events.len() > 1 {
            let size = match postcard::serialize_with_flavor(
                &events,
                postcard::ser_flavors::Size::default(),
            ) {
                Ok(size) => size,
                Err(e) => return Executed::Fault(Error::corrupt("event", e.to_string())),
            };
            if size > self.max_record_bytes {
                return Executed::Refused(record_too_big(size, self.max_record_bytes));
            }
        }
        match apply_events(events.iter().map(Event::borrowed), view, &mut self.state) {
            Ok(()) => Executed::Applied(events),
            Err(e) => Executed::Fault(e),
        }
    }

    /// Decides the events of `cmd` against `view` without writing to it:
    /// one function per command.
    fn plan<R: IndexRead + ?Sized>(
        &mut self,
        cmd: &Command,
        view: &Overlay<'_, R>,
        now: u64,
    ) -> Result<Plan> {
        match cmd {
            Command::Mkdir {
                path,
                parents,
                mode,
                owner,
                group,
            } => self.plan_mkdir(view, path, *parents, Perms::new(*mode, owner, group), now),
            Command::Create {
                path,
                parents,
                mode,
                owner,
                group,
                block_size,
            } => self.plan_create(
                view,
                path,
                *parents,
                Perms::new(*mode, owner, group),
                *block_size,
                now,
            ),
            Command::Complete { path, size } => self.plan_complete(view, path, *size, now),
            Command::SetSize { path, size } => self.plan_set_size(view, path, *size, now),
            Command::SetAttr {
                path,
                mode,
                owner,
                group,
                mtime_ms,
            } => self.plan_set_attr(
                view,
                path,
                *mode,
                owner.as_deref(),
                group.as_deref(),
                *mtime_ms,
            ),
            Command::Delete { path, recursive } => self.plan_delete(view, path, *recursive),
            Command::Rename {
                src,
                dst,
                overwrite,
            } => self.plan_rename(view, src, dst, *overwrite),
        }
    }

    /// `mkdir P` / `mkdir -p P`.
    fn plan_mkdir<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        p: &str,
        parents: bool,
        perms: Perms<'_>,
        now: u64,
    ) -> Result<Plan> {
        check_mode(perms.mode)?;
        let comps = path::components(p)?;
        if comps.is_empty() {
            return if parents {
                Ok(Plan::NoOp)
            } else {
                Err(Error::AlreadyExists("/".into()))
            };
        }
        let (dir, is_dir, existing) = walk_existing(view, &comps)?;
        if existing == comps.len() {
            return if parents && is_dir {
                Ok(Plan::NoOp)
            } else {
                Err(Error::AlreadyExists(path::join_all(&comps)))
            };
        }
        if !parents && existing + 1 < comps.len() {
            return Err(Error::NotFound(path::join_all(&comps[..=existing])));
        }
        self.check_owner_group(perms.owner, perms.group)?;
        let attrs = perms.new_inode(FileType::Directory, perms.mode, 0, now);
        let events = self.create_chain(&comps, existing, dir, &attrs, &attrs)?;
        Ok(Plan::Events(events))
    }

    /// `create P` (with parents: missing directories first).
    fn plan_create<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        p: &str,
        parents: bool,
        perms: Perms<'_>,
        block_size: u64,
        now: u64,
    ) -> Result<Plan> {
        check_mode(perms.mode)?;
        let comps = path::components(p)?;
        if comps.is_empty() {
            return Err(Error::AlreadyExists("/".into()));
        }
        let (dir, _, existing) = walk_existing(view, &comps)?;
        if existing == comps.len() {
            return Err(Error::AlreadyExists(path::join_all(&comps)));
        }
        if !parents && existing + 1 < comps.len() {
            return Err(Error::NotFound(path::join_all(&comps[..=existing])));
        }
        self.check_owner_group(perms.owner, perms.group)?;
        let dir_attrs = perms.new_inode(FileType::Directory, DEFAULT_DIR_MODE, 0, now);
        let file_attrs = perms.new_inode(FileType::File, perms.mode, block_size, now);
        let events = self.create_chain(&comps, existing, dir, &dir_attrs, &file_attrs)?;
        Ok(Plan::Events(events))
    }

    /// `complete P size`.
    fn plan_complete<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        size: u64,
        now: u64,
    ) -> Result<Plan> {
        let (ino, canon) = resolve_file(view, &self.state.dicts, p)?;
        if ino.attrs.complete {
            return if ino.attrs.size == size {
                Ok(Plan::NoOp)
            } else {
                Err(Error::InvalidArgument(format!(
                    "{canon} is already complete with size {}, not {size}",
                    ino.attrs.size
                )))
            };
        }
        let mut new = ino.attrs.clone();
        new.size = size;
        new.complete = true;
        new.mtime_ms = now;
        Ok(Plan::Events(vec![Event::Complete(update(ino, canon, new))]))
    }

    /// `set_size P size`.
    fn plan_set_size<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        size: u64,
        now: u64,
    ) -> Result<Plan> {
        let (ino, canon) = resolve_file(view, &self.state.dicts, p)?;
        let mut new = ino.attrs.clone();
        new.size = size;
        new.mtime_ms = now;
        Ok(Plan::Events(vec![Event::SetSize(update(ino, canon, new))]))
    }

    /// `set_attr P [mode] [owner] [group] [mtime]`.
    fn plan_set_attr<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        mode: Option<u32>,
        owner: Option<&str>,
        group: Option<&str>,
        mtime_ms: Option<u64>,
    ) -> Result<Plan> {
        let dicts = &self.state.dicts;
        let (ino, canon) = resolve_canon(view, dicts, p)?;
        let mut new = ino.attrs.clone();
        if let Some(m) = mode {
            check_mode(m)?;
            new.mode = m;
        }
        if let Some(o) = owner {
            dicts.owners.check(DictKind::Owner, o)?;
            new.owner = o.to_owned();
        }
        if let Some(g) = group {
            dicts.groups.check(DictKind::Group, g)?;
            new.group = g.to_owned();
        }
        if let Some(t) = mtime_ms {
            new.mtime_ms = t;
        }
        if new == ino.attrs {
            return Ok(Plan::NoOp);
        }
        Ok(Plan::Events(vec![Event::SetAttr(update(ino, canon, new))]))
    }

    /// `delete P` / `delete -r P`.
    fn plan_delete<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        recursive: bool,
    ) -> Result<Plan> {
        let dicts = &self.state.dicts;
        let (ino, canon) = resolve_canon(view, dicts, p)?;
        if ino.id == ROOT_ID {
            return Err(Error::InvalidArgument("the root cannot be deleted".into()));
        }
        if ino.attrs.kind.is_dir() && !recursive && has_children(view, ino.id)? {
            return Err(Error::NotEmpty(canon));
        }
        let mut events = Vec::new();
        let limits = (self.max_delete_inodes, self.max_record_bytes);
        delete_subtree(view, dicts, ino, canon, limits, &mut events)?;
        Ok(Plan::Events(events))
    }

    /// `rename S D` (with overwrite: replacing `D`).
    fn plan_rename<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        src: &str,
        dst: &str,
        overwrite: bool,
    ) -> Result<Plan> {
        let dicts = &self.state.dicts;
        let src_comps = path::components(src)?;
        let dst_comps = path::components(dst)?;
        if src_comps.is_empty() || dst_comps.is_empty() {
            return Err(Error::InvalidArgument(
                "the root cannot be renamed or replaced".into(),
            ));
        }
        let src_path = path::join_all(&src_comps);
        let dst_path = path::join_all(&dst_comps);
        let ino = resolve(view, dicts, &src_path)?;
        let dst_parent_path = path::join_all(&dst_comps[..dst_comps.len() - 1]);
        let dst_parent = resolve(view, dicts, &dst_parent_path)?;
        if !dst_parent.attrs.kind.is_dir() {
            return Err(Error::NotADirectory(dst_parent_path));
        }
        if src_path == dst_path {
            return Ok(Plan::NoOp);
        }
        if ino.attrs.kind.is_dir() && path::is_within(&dst_path, &src_path) {
            return Err(Error::InvalidArgument(format!(
                "cannot move directory {src_path} under itself ({dst_path})"
            )));
        }
        if ino.attrs.kind.is_dir() && dst_path.len() > src_path.len() {
            check_subtree_paths(view, ino.id, &dst_path, self.max_delete_inodes)?;
        }
        let new_name = dst_comps[dst_comps.len() - 1];
        let mut events = Vec::new();
        if let Some(existing) = get_child(view, dst_parent.id, new_name)? {
            let victim = must_inode(view, dicts, existing)?;
            if !overwrite {
                return Err(Error::AlreadyExists(dst_path));
            }
            match (ino.attrs.kind, victim.attrs.kind) {
                (FileType::File, FileType::File) => {}
                (FileType::Directory, FileType::Directory) => {
                    if has_children(view, victim.id)? {
                        return Err(Error::NotEmpty(dst_path));
                    }
                }
                (FileType::File, FileType::Directory) => return Err(Error::IsADirectory(dst_path)),
                (FileType::Directory, FileType::File) => {
                    return Err(Error::NotADirectory(dst_path))
                }
            }
            events.push(Event::Delete {
                id: victim.id,
                parent: victim.parent,
                name: victim.name,
                path: dst_path.clone(),
                attrs: victim.attrs,
            });
        }
        events.push(Event::Rename {
            id: ino.id,
            old_parent: ino.parent,
            old_name: ino.name,
            old_path: src_path,
            new_parent: dst_parent.id,
            new_name: new_name.to_owned(),
            new_path: dst_path,
            attrs: ino.attrs,
        });
        Ok(Plan::Events(events))
    }

    /// Create events for `comps[existing..]` under `parent`: directories with
    /// `dir_attrs`, the last one with `last_attrs`.
    fn create_chain(
        &mut self,
        comps: &[&str],
        existing: usize,
        mut parent: u64,
        dir_attrs: &Attrs,
        last_attrs: &Attrs,
    ) -> Result<Vec<Event>> {
        let n = comps.len() - existing;
        let mut id = self.alloc_ids(n)?;
        let mut events = Vec::with_capacity(n);
        for i in existing..comps.len() {
            let attrs = if i + 1 == comps.len() {
                last_attrs.clone()
            } else {
                dir_attrs.clone()
            };
            events.push(Event::Create {
                id,
                parent,
                name: comps[i].to_owned(),
                path: path::join_all(&comps[..=i]),
                attrs,
            });
            parent = id;
            id += 1;
        }
        self.state.next_id = id;
        Ok(events)
    }
}

fn update(ino: Inode, path: String, new: Attrs) -> Update {
    Update {
        id: ino.id,
        parent: ino.parent,
        name: ino.name,
        path,
        old: ino.attrs,
        new,
    }
}

fn resolve_canon(
    view: &(impl IndexRead + ?Sized),
    dicts: &DictSet,
    p: &str,
) -> Result<(Inode, String)> {
    let canon = path::canonical(p)?;
    Ok((resolve(view, dicts, &canon)?, canon))
}

/// [`resolve_canon`] for a command that takes a file: a directory is
/// `IsADirectory`.
fn resolve_file(
    view: &(impl IndexRead + ?Sized),
    dicts: &DictSet,
    p: &str,
) -> Result<(Inode, String)> {
    let (ino, canon) = resolve_canon(view, dicts, p)?;
    if ino.attrs.kind.is_dir() {
        return Err(Error::IsADirectory(canon));
    }
    Ok((ino, canon))
}

/// The deepest existing inode on the path `comps`: its id, whether it is a
/// directory, and how many components exist. Errors if an existing
/// component that must be a directory (because more components follow) is
/// a file.
fn walk_existing(view: &(impl IndexRead + ?Sized), comps: &[&str]) -> Result<(u64, bool, usize)> {
    // The edges alone, as in `resolve`: a file has no edges under it, so
    // the walk stops at a file on the way, and only the deepest inode is
    // read, for its kind. (Every create walks its parent's path here, on
    // the writer's thread: half the lookups of reading each inode.)
    let (mut id, mut existing) = (ROOT_ID, comps.len());
    for (i, c) in comps.iter().enumerate() {
        match get_child(view, id, c)? {
            Some(child) => id = child,
            None => {
                existing = i;
                break;
            }
        }
    }
    let is_dir = stored_is_dir(view, id)?;
    if existing < comps.len() && !is_dir {
        return Err(Error::NotADirectory(path::join_all(&comps[..existing])));
    }
    Ok((id, is_dir, existing))
}

/// The default of `WriterConfig::max_delete_inodes`.
pub const DEFAULT_MAX_DELETE_INODES: usize = 1_000_000;

/// The default of `WriterConfig::max_record_bytes`: well under the
/// client's largest frame (256 MiB), so that a record always reaches a
/// subscriber over the network.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 64 << 20;

fn record_too_big(size: usize, max: usize) -> Error {
    Error::InvalidArgument(format!(
        "the command's log record would hold {size} bytes of events, more than the \
         {max} one record may hold: delete or move the subtree in parts"
    ))
}

/// Refuses moving the directory `id` to `dst` when a path under it would
/// then exceed [`path::MAX_PATH_LEN`] (no later command could name it).
/// Reads the subtree's names, up to `max` inodes; a bigger subtree whose
/// paths would grow is refused, as a recursive delete of it would be.
fn check_subtree_paths(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    dst: &str,
    max: usize,
) -> Result<()> {
    let room = path::MAX_PATH_LEN.saturating_sub(dst.len());
    // (inode, length of its path below the moved directory)
    let mut todo: Vec<(u64, usize)> = vec![(id, 0)];
    let mut seen = 0usize;
    while let Some((dir, rel)) = todo.pop() {
        let mut after: Option<Vec<u8>> = None;
        loop {
            let page = view.scan(Cf::Edges, &edge_prefix(dir), after.as_deref(), 1024)?;
            let Some((last, _)) = page.last() else {
                break;
            };
            after = Some(last.clone());
            for (k, v) in &page {
                let (_, name) = format::decode_edge_key(k)?;
                let child_rel = rel + 1 + name.len();
                if child_rel > room {
                    return Err(Error::InvalidArgument(format!(
                        "moving it to {dst} would make a path under it {} bytes long, \
                         more than {}",
                        dst.len() + child_rel,
                        path::MAX_PATH_LEN
                    )));
                }
                seen += 1;
                if seen > max {
                    return Err(Error::InvalidArgument(format!(
                        "the directory holds more than {max} inodes, the most a move that \
                         lengthens their paths checks: move its subdirectories first"
                    )));
                }
                // Files have no edges: their scan is empty.
                todo.push((format::decode_edge_value(v)?, child_rel));
            }
        }
    }
    Ok(())
}

/// Delete events for `ino` and everything below it, children first; refused
/// if that is more than `max` inodes.
fn delete_subtree(
    view: &(impl IndexRead + ?Sized),
    dicts: &DictSet,
    ino: Inode,
    ino_path: String,
    (max, max_bytes): (usize, usize),
    out: &mut Vec<Event>,
) -> Result<()> {
    // The record's size, counted as events are made so that a subtree of
    // long paths is refused before its events fill memory: each event's
    // strings plus a generous bound on its integers.
    let mut bytes = 0usize;
    let too_many = |p: &str| {
        Error::InvalidArgument(format!(
            "{p} holds more than {max} inodes, the most one delete removes (its record \
             holds an event per inode): delete its subdirectories first"
        ))
    };
    if max == 0 {
        return Err(too_many(&ino_path));
    }
    let top = ino_path.clone();
    // Iterative post-order walk: deep trees must not overflow the stack.
    let mut stack: Vec<(Inode, String, bool)> = vec![(ino, ino_path, false)];
    while let Some((node, p, expanded)) = stack.pop() {
        if node.attrs.kind.is_dir() && !expanded {
            // Inodes found so far: deleted, waiting, and this one. Read one
            // child more than there is room for, to know it is too many
            // without reading them all.
            let room = max.saturating_sub(out.len() + stack.len() + 1);
            let children = view.scan(
                Cf::Edges,
                &edge_prefix(node.id),
                None,
                room.saturating_add(1),
            )?;
            if children.len() > room {
                return Err(too_many(&top));
            }
            let id = node.id;
            stack.push((node, p.clone(), true));
            for (k, v) in children.into_iter().rev() {
                let (_, name) = format::decode_edge_key(&k)?;
                let name = String::from_utf8(name.to_vec()).map_err(|_| {
                    Error::corrupt("edge key", format!("name under {id} is not UTF-8"))
                })?;
                let child = must_inode(view, dicts, format::decode_edge_value(&v)?)?;
                let cp = path::join(&p, &name);
                stack.push((child, cp, false));
            }
            continue;
        }
        bytes += p.len()
            + node.name.len()
            + node.attrs.owner.len()
            + node.attrs.group.len()
            + EVENT_FIXED_BYTES;
        if bytes > max_bytes {
            return Err(record_too_big(bytes, max_bytes));
        }
        out.push(Event::Delete {
            id: node.id,
            parent: node.parent,
            name: node.name,
            path: p,
            attrs: node.attrs,
        });
    }
    Ok(())
}

/// More than the postcard bytes of an event's integers, tags and string
/// lengths.
const EVENT_FIXED_BYTES: usize = 96;

// ---------------------------------------------------------------------------
// Events to index writes
// ---------------------------------------------------------------------------

fn entry_for<'n>(
    parent: u64,
    name: &'n str,
    a: &AttrsRef<'_>,
    state: &mut EngineState,
    view_dict_writes: &mut Vec<DictKind>,
) -> Result<InodeEntry<&'n [u8]>> {
    let (owner_id, o_added) = state.dicts.owners.intern(DictKind::Owner, a.owner)?;
    let (group_id, g_added) = state.dicts.groups.intern(DictKind::Group, a.group)?;
    if o_added {
        view_dict_writes.push(DictKind::Owner);
    }
    if g_added {
        view_dict_writes.push(DictKind::Group);
    }
    let mut flags = 0;
    if a.kind.is_dir() {
        flags |= FLAG_DIRECTORY;
    }
    if a.complete {
        flags |= FLAG_COMPLETE;
    }
    Ok(InodeEntry {
        parent_id: parent,
        size: a.size,
        block_size: a.block_size,
        creation_time_ms: a.ctime_ms,
        modification_time_ms: a.mtime_ms,
        mode: a.mode,
        flags,
        owner_id,
        group_id,
        name: name.as_bytes(),
    })
}

/// `buf`, cleared and filled by `encode`.
fn encoded(buf: &mut Vec<u8>, encode: impl FnOnce(&mut Vec<u8>)) -> &[u8] {
    buf.clear();
    encode(buf);
    buf
}

/// Applies the events of one record to the index. Deterministic: the same
/// events on the same index and state give the same writes on any machine.
pub fn apply_events<'e, W: IndexWrite + ?Sized>(
    events: impl IntoIterator<Item = EventRef<'e>>,
    ov: &mut W,
    state: &mut EngineState,
) -> Result<()> {
    let mut dict_writes = Vec::new();
    // Every composed key or value is encoded here and written before the
    // next is: one allocation per record, not two per write.
    let mut buf = Vec::new();
    for ev in events {
        match ev {
            EventRef::Create {
                id,
                parent,
                name,
                attrs,
                ..
            } => {
                let e = entry_for(parent, name, &attrs, state, &mut dict_writes)?;
                ov.put(
                    Cf::Inodes,
                    &inode_key(id),
                    encoded(&mut buf, |b| e.encode_into(b)),
                );
                ov.put(
                    Cf::Edges,
                    encoded(&mut buf, |b| edge_key_into(parent, name.as_bytes(), b)),
                    &edge_value(id),
                );
                if id >= state.id_bound {
                    // Crossing the reserved block: reserve the next one
                    // (never past the last id: the keys above it are the
                    // special keys, and the sum must not wrap).
                    state.id_bound = id.saturating_add(ID_BLOCK).min(MAX_INODE_ID + 1);
                    ov.put(
                        Cf::Inodes,
                        &inode_key(NEXT_ID_KEY),
                        &next_id_value(state.id_bound),
                    );
                }
                state.next_id = state.next_id.max(id + 1);
            }
            EventRef::Complete(u) | EventRef::SetSize(u) | EventRef::SetAttr(u) => {
                let e = entry_for(u.parent, u.name, &u.new, state, &mut dict_writes)?;
                ov.put(
                    Cf::Inodes,
                    &inode_key(u.id),
                    encoded(&mut buf, |b| e.encode_into(b)),
                );
            }
            EventRef::Delete {
                id, parent, name, ..
            } => {
                ov.delete(Cf::Inodes, &inode_key(id));
                ov.delete(
                    Cf::Edges,
                    encoded(&mut buf, |b| edge_key_into(parent, name.as_bytes(), b)),
                );
            }
            EventRef::Rename {
                id,
                old_parent,
                old_name,
                new_parent,
                new_name,
                attrs,
                ..
            } => {
                let e = entry_for(new_parent, new_name, &attrs, state, &mut dict_writes)?;
                ov.delete(
                    Cf::Edges,
                    encoded(&mut buf, |b| {
                        edge_key_into(old_parent, old_name.as_bytes(), b)
                    }),
                );
                ov.put(
                    Cf::Edges,
                    encoded(&mut buf, |b| {
                        edge_key_into(new_parent, new_name.as_bytes(), b)
                    }),
                    &edge_value(id),
                );
                ov.put(
                    Cf::Inodes,
                    &inode_key(id),
                    encoded(&mut buf, |b| e.encode_into(b)),
                );
            }
        }
    }
    for kind in dict_writes {
        let key = match kind {
            DictKind::Owner => OWNER_DICT_KEY,
            DictKind::Group => GROUP_DICT_KEY,
        };
        ov.put(Cf::Inodes, &inode_key(key), &state.dicts.get(kind).encode());
    }
    Ok(())
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
