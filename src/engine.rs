//! The pure engine: commands in, events out; events in, index writes out.
//!
//! No I/O happens here. [`Engine::execute`] validates a command against an
//! index view (the stored index plus the group's earlier changes), decides
//! the events (ids, times, paths, the quotas they charge), and applies them
//! to the overlay so the next command of the group sees them.
//! [`apply_events`] is the only code that turns events into index bytes;
//! the writer, recovery replay, rebuild and followers all use it, which is
//! what makes the index a deterministic function of the log.
//!
//! Applying reads the index one key at a time (a parent whose times move,
//! a quota whose usage moves, a dictionary name, the entry an update
//! rewrites), never a range: replay reads through the keys it has written
//! itself (see `recovery`), which cannot answer a scan.

use std::collections::{BTreeMap, BTreeSet};

use crate::command::Command;
use crate::error::{DictKind, Error, Result};
use crate::event::{Event, EventRef, Update};
use crate::format::v2::{
    self, InodeEntryV2, QuotaEntry, XattrList, FLAG_COMPLETE_V2, FLAG_HAS_QUOTA, FLAG_HAS_XATTRS,
    KIND_DIRECTORY, KIND_FILE, KIND_SYMLINK,
};
use crate::format::{
    self, edge_key, edge_key_into, edge_prefix, edge_value, inode_key, next_id_value,
    GROUP_DICT_KEY, ID_BLOCK, MAX_INODE_ID, NEXT_ID_KEY, OWNER_DICT_KEY, ROOT_ID,
};
use crate::index::{Cf, IndexRead, IndexWrite, Overlay};
use crate::names::Names;
use crate::path;
use crate::types::{
    Attrs, AttrsRef, Bytes, ContentSummary, DirEntry, FileType, Inode, Quota, Usage, Xattr,
    XattrFlag, DEFAULT_DIR_MODE, SYMLINK_MODE,
};

/// The in-memory part of the index state the writer keeps between groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EngineState {
    /// The highest owner dictionary id given (the counter at `…fd`).
    pub owners: u32,
    /// The highest group dictionary id given (`…fe`).
    pub groups: u32,
    /// The persisted `next_id` value: ids below it have been reserved.
    pub id_bound: u64,
    /// The next id the writer hands out (starts at `id_bound` after open, so
    /// up to `ID_BLOCK - 1` ids are skipped per restart, as in seed 000).
    pub next_id: u64,
    /// The directories that have a quota (their keys, loaded at open): a
    /// write finds the quotas it charges among the ids on its path without
    /// reading an inode, and a namespace without quotas checks nothing.
    pub quotas: BTreeSet<u64>,
}

impl EngineState {
    /// Loads the state from an index of format 2.
    pub fn load(view: &(impl IndexRead + ?Sized)) -> Result<EngineState> {
        let counter = |key| -> Result<u32> {
            match view.get(Cf::Inodes, &inode_key(key))? {
                Some(v) => v2::decode_u32_le("dictionary counter", &v),
                None => Err(Error::corrupt("index", "a dictionary counter is missing")),
            }
        };
        let owners = counter(OWNER_DICT_KEY)?;
        let groups = counter(GROUP_DICT_KEY)?;
        let id_bound = match view.get(Cf::Inodes, &inode_key(NEXT_ID_KEY))? {
            Some(v) => format::decode_next_id_value(&v)?,
            None => return Err(Error::corrupt("index", "next_id key is missing")),
        };
        let mut quotas = BTreeSet::new();
        for_each_under(view, Cf::Inodes, &v2::quota_prefix(), |k, _| {
            match v2::decode_key_v2(k)? {
                v2::KeyV2::Quota(id) => quotas.insert(id),
                other => {
                    return Err(Error::corrupt(
                        "index",
                        format!("{other:?} under the quotas' prefix"),
                    ))
                }
            };
            Ok(())
        })?;
        Ok(EngineState {
            owners,
            groups,
            id_bound,
            next_id: id_bound,
            quotas,
        })
    }

    fn counter(&mut self, kind: DictKind) -> &mut u32 {
        match kind {
            DictKind::Owner => &mut self.owners,
            DictKind::Group => &mut self.groups,
        }
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

/// The kind an entry's `kind` byte names.
pub fn file_type(kind: u8) -> FileType {
    match kind {
        KIND_DIRECTORY => FileType::Directory,
        KIND_SYMLINK => FileType::Symlink,
        _ => FileType::File,
    }
}

fn kind_byte(t: FileType) -> u8 {
    match t {
        FileType::File => KIND_FILE,
        FileType::Directory => KIND_DIRECTORY,
        FileType::Symlink => KIND_SYMLINK,
    }
}

/// Decodes a stored entry into an [`Inode`], its owner and group names
/// read through `view`.
pub fn inode_from_entry<N: AsRef<[u8]>>(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    id: u64,
    e: &InodeEntryV2<N>,
) -> Result<Inode> {
    let name = String::from_utf8(e.name.as_ref().to_vec())
        .map_err(|_| Error::corrupt("inode entry", format!("name of inode {id} is not UTF-8")))?;
    Ok(Inode {
        id,
        parent: e.parent_id,
        name,
        attrs: Attrs {
            kind: file_type(e.kind),
            size: e.size,
            block_size: e.block_size,
            ctime_ms: e.ctime_ms,
            mtime_ms: e.mtime_ms,
            change_ms: e.change_ms,
            mode: e.mode,
            complete: e.flags & FLAG_COMPLETE_V2 != 0,
            owner: names.name(view, DictKind::Owner, e.owner_id)?,
            group: names.name(view, DictKind::Group, e.group_id)?,
        },
    })
}

/// The stored entry of inode `id`, if it exists.
fn stored_entry(view: &(impl IndexRead + ?Sized), id: u64) -> Result<Option<InodeEntryV2>> {
    if id > MAX_INODE_ID {
        return Ok(None);
    }
    match view.get(Cf::Inodes, &inode_key(id))? {
        Some(v) => Ok(Some(InodeEntryV2::decode(&v)?)),
        None => Ok(None),
    }
}

pub fn get_inode(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    id: u64,
) -> Result<Option<Inode>> {
    if id > MAX_INODE_ID {
        return Ok(None);
    }
    match view.get(Cf::Inodes, &inode_key(id))? {
        Some(v) => Ok(Some(inode_from_entry(
            view,
            names,
            id,
            &InodeEntryV2::decode_ref(&v)?,
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

fn must_inode(view: &(impl IndexRead + ?Sized), names: &Names, id: u64) -> Result<Inode> {
    get_inode(view, names, id)?.ok_or_else(|| missing_inode(id))
}

fn missing_inode(id: u64) -> Error {
    Error::corrupt(
        "index",
        format!("edge points to inode {id}, which does not exist"),
    )
}

/// The kind of inode `id`, read from its stored entry without resolving
/// its name, owner or group.
fn stored_kind(view: &(impl IndexRead + ?Sized), id: u64) -> Result<FileType> {
    if id > MAX_INODE_ID {
        return Err(missing_inode(id));
    }
    match view.get(Cf::Inodes, &inode_key(id))? {
        Some(v) => Ok(file_type(InodeEntryV2::decode_ref(&v)?.kind)),
        None => Err(missing_inode(id)),
    }
}

/// A resolved path: the inode, and the directories with a quota among its
/// ancestors (root first; the inode itself not included).
struct Resolved {
    inode: Inode,
    quotas: Vec<u64>,
}

/// Resolves a path to its inode, and collects the ancestors found in
/// `quotas` (when given) on the way.
fn resolve_in(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &str,
    quotas: Option<&BTreeSet<u64>>,
) -> Result<Resolved> {
    let comps = path::components(p)?;
    // Walk the edges alone and read only the last inode: a file has no
    // edges under it, so whether a component that has no such child is a
    // file or a directory matters only on that (error) path.
    let mut cur = ROOT_ID;
    let mut found = Vec::new();
    for (i, c) in comps.iter().enumerate() {
        if quotas.is_some_and(|q| q.contains(&cur)) {
            found.push(cur);
        }
        match get_child(view, cur, c)? {
            Some(id) => cur = id,
            None => {
                return Err(if must_inode(view, names, cur)?.attrs.kind.is_dir() {
                    Error::NotFound(path::join_all(&comps[..=i]))
                } else {
                    Error::NotADirectory(path::join_all(&comps[..i]))
                })
            }
        }
    }
    Ok(Resolved {
        inode: must_inode(view, names, cur)?,
        quotas: found,
    })
}

/// Resolves a path to its inode.
pub fn resolve(view: &(impl IndexRead + ?Sized), names: &Names, p: &str) -> Result<Inode> {
    resolve_in(view, names, p, None).map(|r| r.inode)
}

/// The full path of an inode, by walking parent links.
pub fn path_of(view: &(impl IndexRead + ?Sized), id: u64) -> Result<String> {
    let mut names_up = Vec::new();
    let mut cur = stored_entry(view, id)?.ok_or(Error::InodeNotFound(id))?;
    let mut cur_id = id;
    while cur_id != ROOT_ID {
        names_up.push(String::from_utf8_lossy(&cur.name).into_owned());
        if names_up.len() > 4096 {
            return Err(Error::corrupt(
                "index",
                format!("parent chain of inode {id} loops"),
            ));
        }
        cur_id = cur.parent_id;
        cur = stored_entry(view, cur_id)?.ok_or_else(|| missing_inode(cur_id))?;
    }
    names_up.reverse();
    let refs: Vec<&str> = names_up.iter().map(String::as_str).collect();
    Ok(path::join_all(&refs))
}

/// One page of a directory's children, in name byte order.
pub fn list_children(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    dir: u64,
    start_after: Option<&str>,
    limit: usize,
) -> Result<(Vec<DirEntry>, bool)> {
    let mut out = Vec::new();
    let mut entry = DirEntry::default();
    // Each entry moved out, not cloned: the next one is decoded into a
    // fresh one, as many allocations as a clone's and no copy.
    let next = visit_children(view, names, dir, start_after, limit, &mut entry, &mut |e| {
        out.push(std::mem::take(e));
        Ok(())
    })?;
    Ok((out, next.is_some()))
}

/// Lends one page of a directory's children, in name byte order, to `f`,
/// each decoded into `entry` in turn (its strings' room reused, so that a
/// caller that keeps nothing allocates nothing per entry; one that keeps
/// them takes each). Returns, when another page exists, the name to
/// start it after (the page's last).
///
/// The page's names and inode values are gathered into two buffers first:
/// the edges come in name order, and the inodes are read in one call
/// ([`IndexRead::get_each`]), which a store answers in id order.
pub fn visit_children(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    dir: u64,
    start_after: Option<&str>,
    limit: usize,
    entry: &mut DirEntry,
    f: &mut dyn FnMut(&mut DirEntry) -> Result<()>,
) -> Result<Option<String>> {
    let prefix = edge_prefix(dir);
    let after = start_after.map(|s| edge_key(dir, s.as_bytes()));
    let mut name_bytes = String::new();
    // Per child, in name order: its name's end in `name_bytes`, its id.
    let mut children: Vec<(usize, u64)> = Vec::new();
    // One more than asked tells whether another page exists.
    view.scan_each(
        Cf::Edges,
        &prefix,
        after.as_deref(),
        limit.saturating_add(1),
        &mut |k, v| {
            let (_, name) = format::decode_edge_key(k)?;
            let name = std::str::from_utf8(name)
                .map_err(|_| Error::corrupt("edge key", "name is not UTF-8"))?;
            name_bytes.push_str(name);
            children.push((name_bytes.len(), format::decode_edge_value(v)?));
            Ok(())
        },
    )?;
    let more = children.len() > limit;
    children.truncate(limit);
    let keys: Vec<[u8; 8]> = children.iter().map(|(_, id)| inode_key(*id)).collect();
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_slice()).collect();
    let mut values: Vec<u8> = Vec::new();
    // Per child: where its inode's value lies in `values`, if it exists.
    let mut spans: Vec<Option<(usize, usize)>> = vec![None; children.len()];
    view.get_each(Cf::Inodes, &keys, &mut |i, v| {
        spans[i] = Some((values.len(), v.len()));
        values.extend_from_slice(v);
        Ok(())
    })?;
    let mut start = 0;
    for ((end, id), span) in children.iter().zip(&spans) {
        let (at, len) = span.ok_or_else(|| missing_inode(*id))?;
        let e = InodeEntryV2::decode_ref(&values[at..at + len])?;
        fill_entry(view, names, *id, &name_bytes[start..*end], &e, entry)?;
        start = *end;
        f(entry)?;
    }
    // The last name runs from the end of the one before it to its own.
    let n = children.len();
    let from = n.checked_sub(2).map_or(0, |i| children[i].0);
    let to = n.checked_sub(1).map_or(0, |i| children[i].0);
    Ok(more.then(|| name_bytes[from..to].to_owned()))
}

/// Decodes a child's stored entry into `out`, reusing its strings' room.
fn fill_entry(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    id: u64,
    name: &str,
    e: &InodeEntryV2<&[u8]>,
    out: &mut DirEntry,
) -> Result<()> {
    let stored = std::str::from_utf8(e.name)
        .map_err(|_| Error::corrupt("inode entry", format!("name of inode {id} is not UTF-8")))?;
    out.name.clear();
    out.name.push_str(name);
    let ino = &mut out.inode;
    ino.id = id;
    ino.parent = e.parent_id;
    ino.name.clear();
    ino.name.push_str(stored);
    let a = &mut ino.attrs;
    a.kind = file_type(e.kind);
    a.size = e.size;
    a.block_size = e.block_size;
    a.ctime_ms = e.ctime_ms;
    a.mtime_ms = e.mtime_ms;
    a.change_ms = e.change_ms;
    a.mode = e.mode;
    a.complete = e.flags & FLAG_COMPLETE_V2 != 0;
    names.name_into(view, DictKind::Owner, e.owner_id, &mut a.owner)?;
    names.name_into(view, DictKind::Group, e.group_id, &mut a.group)?;
    Ok(())
}

/// Calls `f` with every entry of `cf` under `prefix`, in key order, a
/// page of 1,024 at a time.
pub fn for_each_under(
    view: &(impl IndexRead + ?Sized),
    cf: Cf,
    prefix: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> Result<()>,
) -> Result<()> {
    let mut after: Option<Vec<u8>> = None;
    loop {
        let page = view.scan(cf, prefix, after.as_deref(), 1024)?;
        let Some((last, _)) = page.last() else {
            return Ok(());
        };
        after = Some(last.clone());
        for (k, v) in &page {
            f(k, v)?;
        }
    }
}

fn has_children(view: &(impl IndexRead + ?Sized), dir: u64) -> Result<bool> {
    Ok(!view.scan(Cf::Edges, &edge_prefix(dir), None, 1)?.is_empty())
}

/// The target of the symbolic link at `p`.
pub fn readlink(view: &(impl IndexRead + ?Sized), names: &Names, p: &str) -> Result<String> {
    let canon = path::canonical(p)?;
    let ino = resolve(view, names, &canon)?;
    if !ino.attrs.kind.is_symlink() {
        return Err(Error::InvalidArgument(format!(
            "{canon} is a {}, not a symbolic link",
            ino.attrs.kind.as_str()
        )));
    }
    let e = stored_entry(view, ino.id)?.ok_or_else(|| missing_inode(ino.id))?;
    String::from_utf8(e.target)
        .map_err(|_| Error::corrupt("inode entry", format!("target of {canon} is not UTF-8")))
}

/// The extended attributes of inode `id` (whose entry has the flag).
fn stored_xattrs(view: &(impl IndexRead + ?Sized), id: u64, flags: u8) -> Result<XattrList> {
    if flags & FLAG_HAS_XATTRS == 0 {
        return Ok(XattrList::default());
    }
    match view.get(Cf::Inodes, &v2::xattrs_key(id))? {
        Some(v) => XattrList::decode(&v),
        None => Err(Error::corrupt(
            "index",
            format!("inode {id} says it has extended attributes, but has none"),
        )),
    }
}

/// The extended attributes of the inode at `p`, in name order: the one
/// called `name` (`NotFound` without it), or all of them.
pub fn get_xattrs(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &str,
    name: Option<&str>,
) -> Result<Vec<Xattr>> {
    let canon = path::canonical(p)?;
    let ino = resolve(view, names, &canon)?;
    let e = stored_entry(view, ino.id)?.ok_or_else(|| missing_inode(ino.id))?;
    let list = stored_xattrs(view, ino.id, e.flags)?;
    let xattr = |n: &[u8], v: &[u8]| -> Result<Xattr> {
        Ok(Xattr {
            name: String::from_utf8(n.to_vec())
                .map_err(|_| Error::corrupt("extended attributes", "a name is not UTF-8"))?,
            value: Bytes(v.to_vec()),
        })
    };
    match name {
        Some(n) => match list.get(n.as_bytes()) {
            Some(v) => Ok(vec![xattr(n.as_bytes(), v)?]),
            None => Err(Error::NoSuchXattr {
                path: canon,
                name: n.to_owned(),
            }),
        },
        None => list.attrs.iter().map(|(n, v)| xattr(n, v)).collect(),
    }
}

/// The quota of directory `id`, if it has one.
pub fn stored_quota(view: &(impl IndexRead + ?Sized), id: u64) -> Result<Option<QuotaEntry>> {
    match view.get(Cf::Inodes, &v2::quota_key(id))? {
        Some(v) => Ok(Some(QuotaEntry::decode(&v)?)),
        None => Ok(None),
    }
}

/// What a walk of a subtree counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Counted {
    /// The inode and everything under it.
    pub usage: Usage,
    /// Directories whose quota counters stood in for a walk of them.
    pub from_counters: u64,
    /// Inodes whose entries the walk read.
    pub walked: u64,
}

/// Counts inode `id` and everything under it: a directory with a quota by
/// its counters (exact, kept by the writer), others by reading their
/// entries, at most `max` of them (`InvalidArgument` beyond, naming
/// `what`).
pub fn count_subtree(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    max: usize,
    what: &str,
) -> Result<Counted> {
    count(view, id, max, what, true)
}

/// [`count_subtree`] reading every entry, the quotas' counters ignored
/// (`admin verify` checks them against it).
pub fn count_subtree_walking(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    max: usize,
    what: &str,
) -> Result<Counted> {
    count(view, id, max, what, false)
}

fn count(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    max: usize,
    what: &str,
    counters: bool,
) -> Result<Counted> {
    let mut c = Counted::default();
    let mut todo = vec![id];
    while let Some(cur) = todo.pop() {
        let e = stored_entry(view, cur)?.ok_or_else(|| missing_inode(cur))?;
        c.walked += 1;
        match file_type(e.kind) {
            FileType::File => {
                c.usage.files += 1;
                c.usage.bytes = c.usage.bytes.saturating_add(e.size);
            }
            FileType::Symlink => c.usage.symlinks += 1,
            FileType::Directory => {
                c.usage.directories += 1;
                if counters && e.flags & FLAG_HAS_QUOTA != 0 {
                    let q = stored_quota(view, cur)?.ok_or_else(|| {
                        Error::corrupt(
                            "index",
                            format!("directory {cur} says it has a quota, but has none"),
                        )
                    })?;
                    c.usage = c.usage.checked_add(&q.to_quota().usage).ok_or_else(|| {
                        Error::corrupt("quota", format!("usage of {cur} overflows"))
                    })?;
                    c.from_counters += 1;
                    continue;
                }
                let walked = c.walked as usize;
                for_each_under(view, Cf::Edges, &edge_prefix(cur), |_, v| {
                    todo.push(format::decode_edge_value(v)?);
                    if walked + todo.len() > max {
                        return Err(too_many(what, max));
                    }
                    Ok(())
                })?;
            }
        }
    }
    Ok(c)
}

fn too_many(what: &str, max: usize) -> Error {
    Error::InvalidArgument(format!(
        "{what} holds more than {max} inodes, the most counted by a walk: give it a quota \
         (one without limits keeps its usage counted), or count its subdirectories"
    ))
}

/// The usage under `p`, the path itself included (`count`, `du -s`):
/// from its quota's counters when it has one, else by a walk of at most
/// `max` inodes (which uses the counters of the directories with a quota
/// it meets).
pub fn content_summary(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &str,
    max: usize,
) -> Result<ContentSummary> {
    let canon = path::canonical(p)?;
    let ino = resolve(view, names, &canon)?;
    let quota = if ino.attrs.kind.is_dir() {
        stored_quota(view, ino.id)?.map(|q| q.to_quota())
    } else {
        None
    };
    let c = count_subtree(view, ino.id, max, &canon)?;
    Ok(ContentSummary {
        usage: c.usage,
        quota,
        from_counters: c.from_counters,
        walked: c.walked,
    })
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
/// limit of inodes or record bytes or extended attributes,
/// `DictionaryFull`, `QuotaExceeded`), or the index could not be read or
/// decoded while the command was validated (`Io`, `Corruption`):
/// validation writes nothing, so that too refuses only the one command.
/// `Fault` is not an answer: the engine failed at its own work and nothing
/// of the group may be logged.
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
    /// The command was refused and wrote nothing, nor changed the engine
    /// state.
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
    /// `WriterConfig::max_delete_inodes`); also the most a command counts
    /// by walking a subtree (a quota's usage, a move between quotas).
    pub max_delete_inodes: usize,
    /// Most bytes of one command's events (its log record, less a few
    /// bytes of header): a record is written, replayed and sent to every
    /// subscriber whole, so a bigger one is refused (`InvalidArgument`).
    pub max_record_bytes: usize,
    /// The owner and group names of the entries the rules read.
    pub(crate) names: Names,
}

fn check_mode(mode: u32) -> Result<()> {
    if mode > 0o7777 {
        return Err(Error::InvalidArgument(format!(
            "mode {mode:#o} has bits outside 0o7777"
        )));
    }
    Ok(())
}

/// Longest symbolic link target (Linux's `PATH_MAX`).
pub const MAX_SYMLINK_TARGET: usize = 4096;

fn check_target(target: &str) -> Result<()> {
    if target.is_empty() || target.len() > MAX_SYMLINK_TARGET || target.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "a symbolic link's target is 1…{MAX_SYMLINK_TARGET} bytes without NUL, not {} bytes{}",
            target.len(),
            if target.contains('\0') {
                " with a NUL"
            } else {
                ""
            }
        )));
    }
    Ok(())
}

/// The namespaces of extended attribute names (Linux's).
const XATTR_NAMESPACES: [&str; 4] = ["user.", "trusted.", "security.", "system."];

fn check_xattr_name(name: &str) -> Result<()> {
    let ok_ns = XATTR_NAMESPACES
        .iter()
        .any(|ns| name.len() > ns.len() && name.starts_with(ns));
    if !ok_ns || name.len() > v2::XATTR_NAME_MAX || name.contains('\0') {
        return Err(Error::InvalidArgument(format!(
            "an extended attribute's name is a namespace ({}) and at least one more byte, \
             at most {} bytes in all, without NUL: not {name:?}",
            XATTR_NAMESPACES.join(", "),
            v2::XATTR_NAME_MAX
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
    /// empty, created, modified and changed `now`; a directory or a
    /// symbolic link is complete at once, a file once `complete` says its
    /// size.
    fn new_inode(&self, kind: FileType, mode: u32, block_size: u64, now: u64) -> Attrs {
        Attrs {
            kind,
            size: 0,
            block_size,
            ctime_ms: now,
            mtime_ms: now,
            change_ms: now,
            mode,
            complete: kind != FileType::File,
            owner: self.owner.to_owned(),
            group: self.group.to_owned(),
        }
    }
}

/// What the events of one command add to and take from each quota's usage.
#[derive(Default)]
struct QuotaDeltas(BTreeMap<u64, (Usage, Usage)>);

impl QuotaDeltas {
    fn add(&mut self, quotas: &[u64], plus: &Usage, minus: &Usage) {
        for q in quotas {
            let e = self.0.entry(*q).or_default();
            e.0 = e.0.checked_add(plus).unwrap_or(e.0);
            e.1 = e.1.checked_add(minus).unwrap_or(e.1);
        }
    }

    fn of(events: &[Event]) -> QuotaDeltas {
        let mut d = QuotaDeltas::default();
        let zero = Usage::default();
        for ev in events {
            match ev {
                Event::Create { attrs, quotas, .. } | Event::Symlink { attrs, quotas, .. } => {
                    d.add(quotas, &attrs.borrowed().usage(), &zero)
                }
                Event::Delete { attrs, quotas, .. } => {
                    d.add(quotas, &zero, &attrs.borrowed().usage())
                }
                Event::Rename {
                    quotas_from,
                    quotas_to,
                    usage,
                    ..
                } => {
                    d.add(quotas_from, &zero, usage);
                    d.add(quotas_to, usage, &zero);
                }
                Event::Complete(u) | Event::SetSize(u) | Event::SetAttr(u) => {
                    let (plus, minus) = size_delta(u.old.size, u.new.size);
                    d.add(&u.quotas, &plus, &minus);
                }
                Event::SetXattr { .. }
                | Event::RemoveXattr { .. }
                | Event::SetQuota { .. }
                | Event::ClearQuota { .. } => {}
            }
        }
        d
    }
}

/// A file's change of size as (growth, shrinkage) in bytes.
fn size_delta(old: u64, new: u64) -> (Usage, Usage) {
    let bytes = |b| Usage {
        bytes: b,
        ..Usage::default()
    };
    if new >= old {
        (bytes(new - old), Usage::default())
    } else {
        (Usage::default(), bytes(old - new))
    }
}

impl Engine {
    pub fn new(state: EngineState) -> Engine {
        Engine {
            state,
            max_delete_inodes: DEFAULT_MAX_DELETE_INODES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            names: Names::new(),
        }
    }

    fn alloc_ids(&self, n: usize) -> Result<u64> {
        let first = self.state.next_id;
        if first.saturating_add(n as u64) > MAX_INODE_ID {
            return Err(Error::InvalidArgument("inode ids exhausted".into()));
        }
        Ok(first)
    }

    /// Checks the owner and group a command gives (`None`: unchanged): a
    /// name's length, and that a new one gets an id.
    fn check_names(
        &self,
        view: &(impl IndexRead + ?Sized),
        owner: Option<&str>,
        group: Option<&str>,
    ) -> Result<()> {
        for (kind, s, given) in [
            (DictKind::Owner, owner, self.state.owners),
            (DictKind::Group, group, self.state.groups),
        ] {
            let Some(s) = s else { continue };
            check_dict_string(kind, s)?;
            if given == u32::MAX && !s.is_empty() && dict_id(view, kind, s)?.is_none() {
                return Err(Error::DictionaryFull(kind));
            }
        }
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
        // Planning a create takes ids; a refusal after it gives them back.
        let next_id = self.state.next_id;
        let events = match self.plan(cmd, view, time_ms) {
            Ok(Plan::Events(events)) => events,
            Ok(Plan::NoOp) => return Executed::NoOp,
            Err(e) => {
                self.state.next_id = next_id;
                return Executed::Refused(e);
            }
        };
        debug_assert!(!events.is_empty());
        if !self.state.quotas.is_empty() {
            if let Err(e) = self.check_quotas(view, &events) {
                self.state.next_id = next_id;
                return Executed::Refused(e);
            }
        }
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
                self.state.next_id = next_id;
                return Executed::Refused(record_too_big(size, self.max_record_bytes));
            }
        }
        match apply_events(events.iter().map(Event::borrowed), view, &mut self.state) {
            Ok(()) => Executed::Applied(events),
            Err(e) => Executed::Fault(e),
        }
    }

    /// Refuses events that would take a quota's usage past one of its
    /// limits (only growth is checked: a quota set below its usage still
    /// lets its subtree shrink).
    fn check_quotas(&self, view: &(impl IndexRead + ?Sized), events: &[Event]) -> Result<()> {
        for (id, (plus, minus)) in QuotaDeltas::of(events).0 {
            if plus.is_zero() {
                continue;
            }
            let q = stored_quota(view, id)?
                .ok_or_else(|| Error::corrupt("index", format!("quota of {id} is missing")))?
                .to_quota();
            let grown = q.usage.checked_add(&plus).unwrap_or(Usage {
                files: u64::MAX,
                directories: u64::MAX,
                symlinks: u64::MAX,
                bytes: u64::MAX,
            });
            let after = grown.checked_sub(&minus).unwrap_or_default();
            let over = |limit: Option<u64>, grows: bool, would_be: u64, resource| match limit {
                Some(l) if grows && would_be > l => Some((resource, l, would_be)),
                _ => None,
            };
            let refused = over(
                q.limit_inodes,
                plus.inodes() > minus.inodes(),
                after.inodes(),
                "inodes",
            )
            .or_else(|| {
                over(
                    q.limit_bytes,
                    plus.bytes > minus.bytes,
                    after.bytes,
                    "bytes",
                )
            });
            if let Some((resource, limit, would_be)) = refused {
                return Err(Error::QuotaExceeded {
                    path: path_of(view, id)?,
                    resource,
                    limit,
                    would_be,
                });
            }
        }
        Ok(())
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
                now,
            ),
            Command::Delete { path, recursive } => self.plan_delete(view, path, *recursive, now),
            Command::Rename {
                src,
                dst,
                overwrite,
            } => self.plan_rename(view, src, dst, *overwrite, now),
            Command::Symlink {
                target,
                path,
                parents,
                owner,
                group,
            } => self.plan_symlink(
                view,
                target,
                path,
                *parents,
                Perms::new(SYMLINK_MODE, owner, group),
                now,
            ),
            Command::SetXattr {
                path,
                name,
                value,
                flag,
            } => self.plan_set_xattr(view, path, name, value, *flag, now),
            Command::RemoveXattr { path, name } => self.plan_remove_xattr(view, path, name, now),
            Command::SetQuota {
                path,
                inodes,
                bytes,
            } => self.plan_set_quota(view, path, *inodes, *bytes),
            Command::ClearQuota { path } => self.plan_clear_quota(view, path),
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
        let w = walk_existing(view, &comps, &self.state.quotas)?;
        if w.existing == comps.len() {
            return if parents && w.kind.is_dir() {
                Ok(Plan::NoOp)
            } else {
                Err(Error::AlreadyExists(path::join_all(&comps)))
            };
        }
        if !parents && w.existing + 1 < comps.len() {
            return Err(Error::NotFound(path::join_all(&comps[..=w.existing])));
        }
        self.check_names(view, Some(perms.owner), Some(perms.group))?;
        let attrs = perms.new_inode(FileType::Directory, perms.mode, 0, now);
        let events = self.create_chain(&comps, &w, &attrs, Last::Inode(&attrs), now)?;
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
        let file = perms.new_inode(FileType::File, perms.mode, block_size, now);
        self.plan_new(view, p, parents, perms, Last::Inode(&file), now)
    }

    /// `ln -s TARGET P` (with parents: missing directories first).
    fn plan_symlink<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        target: &str,
        p: &str,
        parents: bool,
        perms: Perms<'_>,
        now: u64,
    ) -> Result<Plan> {
        check_target(target)?;
        let mut link = perms.new_inode(FileType::Symlink, SYMLINK_MODE, 0, now);
        link.size = target.len() as u64;
        self.plan_new(view, p, parents, perms, Last::Symlink(&link, target), now)
    }

    /// A new file or link at `p` (`last`), and with `parents` the missing
    /// directories before it: refused if `p` exists, or a missing parent
    /// without `parents`.
    fn plan_new<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        p: &str,
        parents: bool,
        perms: Perms<'_>,
        last: Last<'_>,
        now: u64,
    ) -> Result<Plan> {
        let comps = path::components(p)?;
        if comps.is_empty() {
            return Err(Error::AlreadyExists("/".into()));
        }
        let w = walk_existing(view, &comps, &self.state.quotas)?;
        if w.existing == comps.len() {
            return Err(Error::AlreadyExists(path::join_all(&comps)));
        }
        if !parents && w.existing + 1 < comps.len() {
            return Err(Error::NotFound(path::join_all(&comps[..=w.existing])));
        }
        self.check_names(view, Some(perms.owner), Some(perms.group))?;
        let dir_attrs = perms.new_inode(FileType::Directory, DEFAULT_DIR_MODE, 0, now);
        let events = self.create_chain(&comps, &w, &dir_attrs, last, now)?;
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
        let (r, canon) = self.resolve_file(view, p)?;
        let ino = &r.inode;
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
        new.change_ms = now;
        Ok(Plan::Events(vec![Event::Complete(update(r, canon, new))]))
    }

    /// `set_size P size`.
    fn plan_set_size<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        size: u64,
        now: u64,
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_file(view, p)?;
        let mut new = r.inode.attrs.clone();
        new.size = size;
        new.mtime_ms = now;
        new.change_ms = now;
        Ok(Plan::Events(vec![Event::SetSize(update(r, canon, new))]))
    }

    /// `set_attr P [mode] [owner] [group] [mtime]`.
    #[allow(clippy::too_many_arguments)]
    fn plan_set_attr<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        mode: Option<u32>,
        owner: Option<&str>,
        group: Option<&str>,
        mtime_ms: Option<u64>,
        now: u64,
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_canon(view, p, false)?;
        let mut new = r.inode.attrs.clone();
        if let Some(m) = mode {
            check_mode(m)?;
            new.mode = m;
        }
        self.check_names(view, owner, group)?;
        if let Some(o) = owner {
            new.owner = o.to_owned();
        }
        if let Some(g) = group {
            new.group = g.to_owned();
        }
        if let Some(t) = mtime_ms {
            new.mtime_ms = t;
        }
        if new == r.inode.attrs {
            return Ok(Plan::NoOp);
        }
        new.change_ms = now;
        let mut u = update(r, canon, new);
        // Only a change of size moves a quota's usage.
        u.quotas.clear();
        Ok(Plan::Events(vec![Event::SetAttr(u)]))
    }

    /// `delete P` / `delete -r P`.
    fn plan_delete<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        recursive: bool,
        now: u64,
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_canon(view, p, true)?;
        if r.inode.id == ROOT_ID {
            return Err(Error::InvalidArgument("the root cannot be deleted".into()));
        }
        if r.inode.attrs.kind.is_dir() && !recursive && has_children(view, r.inode.id)? {
            return Err(Error::NotEmpty(canon));
        }
        let mut events = Vec::new();
        let limits = (self.max_delete_inodes, self.max_record_bytes);
        delete_subtree(view, &self.names, r, canon, limits, now, &mut events)?;
        Ok(Plan::Events(events))
    }

    /// `rename S D` (with overwrite: replacing `D`).
    fn plan_rename<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        src: &str,
        dst: &str,
        overwrite: bool,
        now: u64,
    ) -> Result<Plan> {
        let names = &self.names;
        let quotas = (!self.state.quotas.is_empty()).then_some(&self.state.quotas);
        let src_comps = path::components(src)?;
        let dst_comps = path::components(dst)?;
        if src_comps.is_empty() || dst_comps.is_empty() {
            return Err(Error::InvalidArgument(
                "the root cannot be renamed or replaced".into(),
            ));
        }
        let src_path = path::join_all(&src_comps);
        let dst_path = path::join_all(&dst_comps);
        let Resolved {
            inode: ino,
            quotas: src_quotas,
        } = resolve_in(view, names, &src_path, quotas)?;
        let dst_parent_path = path::join_all(&dst_comps[..dst_comps.len() - 1]);
        let Resolved {
            inode: dst_parent,
            quotas: mut dst_quotas,
        } = resolve_in(view, names, &dst_parent_path, quotas)?;
        if !dst_parent.attrs.kind.is_dir() {
            return Err(Error::NotADirectory(dst_parent_path));
        }
        if self.state.quotas.contains(&dst_parent.id) {
            dst_quotas.push(dst_parent.id);
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
            let victim = must_inode(view, names, existing)?;
            if !overwrite {
                return Err(Error::AlreadyExists(dst_path));
            }
            match (ino.attrs.kind.is_dir(), victim.attrs.kind.is_dir()) {
                (false, false) => {}
                (true, true) => {
                    if has_children(view, victim.id)? {
                        return Err(Error::NotEmpty(dst_path));
                    }
                }
                (false, true) => return Err(Error::IsADirectory(dst_path)),
                (true, false) => return Err(Error::NotADirectory(dst_path)),
            }
            events.push(Event::Delete {
                id: victim.id,
                parent: victim.parent,
                name: victim.name,
                path: dst_path.clone(),
                attrs: victim.attrs,
                parent_mtime_ms: Some(now),
                quotas: dst_quotas.clone(),
            });
        }
        // The quotas the move leaves and enters; those above both places
        // keep their usage.
        let quotas_from: Vec<u64> = src_quotas
            .iter()
            .copied()
            .filter(|q| !dst_quotas.contains(q))
            .collect();
        let quotas_to: Vec<u64> = dst_quotas
            .iter()
            .copied()
            .filter(|q| !src_quotas.contains(q))
            .collect();
        let usage = if quotas_from.is_empty() && quotas_to.is_empty() {
            Usage::default()
        } else {
            count_subtree(view, ino.id, self.max_delete_inodes, &src_path)?.usage
        };
        let mut attrs = ino.attrs;
        attrs.change_ms = now;
        events.push(Event::Rename {
            id: ino.id,
            old_parent: ino.parent,
            old_name: ino.name,
            old_path: src_path,
            new_parent: dst_parent.id,
            new_name: new_name.to_owned(),
            new_path: dst_path,
            attrs,
            parent_mtime_ms: Some(now),
            quotas_from,
            quotas_to,
            usage,
        });
        Ok(Plan::Events(events))
    }

    /// `setxattr P NAME VALUE`.
    fn plan_set_xattr<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        name: &str,
        value: &[u8],
        flag: XattrFlag,
        now: u64,
    ) -> Result<Plan> {
        check_xattr_name(name)?;
        if value.len() > v2::XATTR_VALUE_MAX {
            return Err(Error::InvalidArgument(format!(
                "an extended attribute's value is at most {} bytes, not {}",
                v2::XATTR_VALUE_MAX,
                value.len()
            )));
        }
        let (r, canon) = self.resolve_canon(view, p, false)?;
        let id = r.inode.id;
        let e = stored_entry(view, id)?.ok_or_else(|| missing_inode(id))?;
        let mut list = stored_xattrs(view, id, e.flags)?;
        let old = list.set(name.as_bytes(), value);
        match (flag, &old) {
            (XattrFlag::Create, Some(_)) => {
                return Err(Error::XattrExists {
                    path: canon,
                    name: name.to_owned(),
                })
            }
            (XattrFlag::Replace, None) => {
                return Err(Error::NoSuchXattr {
                    path: canon,
                    name: name.to_owned(),
                })
            }
            _ => {}
        }
        if old.as_deref() == Some(value) {
            return Ok(Plan::NoOp);
        }
        if list.attrs.len() > v2::XATTRS_MAX || list.payload_bytes() > v2::XATTR_BYTES_MAX {
            return Err(Error::InvalidArgument(format!(
                "{canon} would have {} extended attributes of {} bytes; an inode has at most {} \
                 of {} bytes of names and values in all",
                list.attrs.len(),
                list.payload_bytes(),
                v2::XATTRS_MAX,
                v2::XATTR_BYTES_MAX
            )));
        }
        Ok(Plan::Events(vec![Event::SetXattr {
            id,
            path: canon,
            name: name.to_owned(),
            value: Bytes(value.to_vec()),
            old: old.map(Bytes),
            change_ms: now,
        }]))
    }

    /// `removexattr P NAME`.
    fn plan_remove_xattr<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        name: &str,
        now: u64,
    ) -> Result<Plan> {
        check_xattr_name(name)?;
        let (r, canon) = self.resolve_canon(view, p, false)?;
        let id = r.inode.id;
        let e = stored_entry(view, id)?.ok_or_else(|| missing_inode(id))?;
        let mut list = stored_xattrs(view, id, e.flags)?;
        match list.remove(name.as_bytes()) {
            Some(old) => Ok(Plan::Events(vec![Event::RemoveXattr {
                id,
                path: canon,
                name: name.to_owned(),
                old: Bytes(old),
                change_ms: now,
            }])),
            None => Err(Error::NoSuchXattr {
                path: canon,
                name: name.to_owned(),
            }),
        }
    }

    /// `quota set P [inodes] [bytes]`: a new quota counts its subtree
    /// (a walk bounded as a recursive delete is); a changed one keeps its
    /// counters.
    fn plan_set_quota<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_canon(view, p, false)?;
        let ino = &r.inode;
        if !ino.attrs.kind.is_dir() {
            return Err(Error::NotADirectory(canon));
        }
        if inodes == Some(v2::NO_LIMIT) || bytes == Some(v2::NO_LIMIT) {
            return Err(Error::InvalidArgument(format!(
                "a limit is below {} (leave it out for none)",
                v2::NO_LIMIT
            )));
        }
        let usage = match stored_quota(view, ino.id)? {
            Some(q) => {
                let q = q.to_quota();
                if q.limit_inodes == inodes && q.limit_bytes == bytes {
                    return Ok(Plan::NoOp);
                }
                q.usage
            }
            None => {
                let mut c = count_subtree(view, ino.id, self.max_delete_inodes, &canon)?.usage;
                // The directory itself is not in its own usage.
                c.directories -= 1;
                c
            }
        };
        Ok(Plan::Events(vec![Event::SetQuota {
            id: ino.id,
            path: canon,
            quota: Quota {
                limit_inodes: inodes,
                limit_bytes: bytes,
                usage,
            },
        }]))
    }

    /// `quota clear P` (of a directory without one: nothing to do).
    fn plan_clear_quota<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &str,
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_canon(view, p, false)?;
        if !r.inode.attrs.kind.is_dir() {
            return Err(Error::NotADirectory(canon));
        }
        match stored_quota(view, r.inode.id)? {
            Some(q) => Ok(Plan::Events(vec![Event::ClearQuota {
                id: r.inode.id,
                path: canon,
                old: q.to_quota(),
            }])),
            None => Ok(Plan::NoOp),
        }
    }

    /// Create events for `comps[w.existing..]` under `w.id`: directories
    /// with `dir_attrs`, then `last`. Each charges the quotas on the path.
    fn create_chain(
        &mut self,
        comps: &[&str],
        w: &Walked,
        dir_attrs: &Attrs,
        last: Last<'_>,
        now: u64,
    ) -> Result<Vec<Event>> {
        let n = comps.len() - w.existing;
        let mut id = self.alloc_ids(n)?;
        let mut events = Vec::with_capacity(n);
        let mut parent = w.id;
        for i in w.existing..comps.len() {
            let name = comps[i].to_owned();
            let path = path::join_all(&comps[..=i]);
            let quotas = w.quotas.clone();
            events.push(match (i + 1 == comps.len(), last) {
                (true, Last::Symlink(attrs, target)) => Event::Symlink {
                    id,
                    parent,
                    name,
                    path,
                    target: target.to_owned(),
                    attrs: attrs.clone(),
                    parent_mtime_ms: now,
                    quotas,
                },
                (is_last, last) => Event::Create {
                    id,
                    parent,
                    name,
                    path,
                    attrs: match (is_last, last) {
                        (true, Last::Inode(a)) => a.clone(),
                        _ => dir_attrs.clone(),
                    },
                    parent_mtime_ms: Some(now),
                    quotas,
                },
            });
            parent = id;
            id += 1;
        }
        self.state.next_id = id;
        Ok(events)
    }

    fn resolve_canon(
        &self,
        view: &(impl IndexRead + ?Sized),
        p: &str,
        with_quotas: bool,
    ) -> Result<(Resolved, String)> {
        let canon = path::canonical(p)?;
        let quotas = (with_quotas && !self.state.quotas.is_empty()).then_some(&self.state.quotas);
        Ok((resolve_in(view, &self.names, &canon, quotas)?, canon))
    }

    /// [`Engine::resolve_canon`] for a command that takes a file (with the
    /// quotas above it): a directory is `IsADirectory`, a symbolic link
    /// `InvalidArgument`.
    fn resolve_file(
        &self,
        view: &(impl IndexRead + ?Sized),
        p: &str,
    ) -> Result<(Resolved, String)> {
        let (r, canon) = self.resolve_canon(view, p, true)?;
        match r.inode.attrs.kind {
            FileType::File => Ok((r, canon)),
            FileType::Directory => Err(Error::IsADirectory(canon)),
            FileType::Symlink => Err(Error::InvalidArgument(format!(
                "{canon} is a symbolic link (links are not followed)"
            ))),
        }
    }
}

/// The last inode of a chain of creates.
#[derive(Clone, Copy)]
enum Last<'a> {
    Inode(&'a Attrs),
    Symlink(&'a Attrs, &'a str),
}

/// A dictionary string's own limit (1…255 bytes, or empty for none).
fn check_dict_string(kind: DictKind, s: &str) -> Result<()> {
    if s.len() > format::dict::DICT_MAX_STRING {
        return Err(Error::InvalidArgument(format!(
            "{kind} {s:?} is {} bytes; at most {} are allowed",
            s.len(),
            format::dict::DICT_MAX_STRING
        )));
    }
    Ok(())
}

fn update(r: Resolved, path: String, new: Attrs) -> Update {
    let ino = r.inode;
    Update {
        quotas: if new.size != ino.attrs.size {
            r.quotas
        } else {
            Vec::new()
        },
        id: ino.id,
        parent: ino.parent,
        name: ino.name,
        path,
        old: ino.attrs,
        new,
    }
}

/// The deepest existing inode on a path: how many components exist, its id
/// and kind, and the directories with a quota from the root to it.
struct Walked {
    id: u64,
    kind: FileType,
    existing: usize,
    quotas: Vec<u64>,
}

/// The deepest existing inode on the path `comps` (see [`Walked`]). Errors
/// if an existing component that must be a directory (because more
/// components follow) is not one.
fn walk_existing(
    view: &(impl IndexRead + ?Sized),
    comps: &[&str],
    quotas: &BTreeSet<u64>,
) -> Result<Walked> {
    // The edges alone, as in `resolve`: a file has no edges under it, so
    // the walk stops at a file on the way, and only the deepest inode is
    // read, for its kind. (Every create walks its parent's path here, on
    // the writer's thread: half the lookups of reading each inode.) The
    // quotas on the way are the ids on it that `quotas` holds: no read.
    let (mut id, mut existing) = (ROOT_ID, comps.len());
    let mut found = Vec::new();
    let mut note = |id: u64| {
        if !quotas.is_empty() && quotas.contains(&id) {
            found.push(id);
        }
    };
    for (i, c) in comps.iter().enumerate() {
        note(id);
        match get_child(view, id, c)? {
            Some(child) => id = child,
            None => {
                existing = i;
                break;
            }
        }
    }
    if existing == comps.len() {
        note(id);
    }
    let kind = stored_kind(view, id)?;
    if existing < comps.len() && !kind.is_dir() {
        return Err(Error::NotADirectory(path::join_all(&comps[..existing])));
    }
    Ok(Walked {
        id,
        kind,
        existing,
        quotas: found,
    })
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
        for_each_under(view, Cf::Edges, &edge_prefix(dir), |k, v| {
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
            Ok(())
        })?;
    }
    Ok(())
}

/// Delete events for the resolved inode and everything below it, children
/// first; refused if that is more than `max` inodes. Every event charges
/// the quotas above the deleted inode (those inside go with it); only the
/// top's parent stays, so only the top's event moves its parent's times.
fn delete_subtree(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    top: Resolved,
    ino_path: String,
    (max, max_bytes): (usize, usize),
    now: u64,
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
    let Resolved { inode: ino, quotas } = top;
    let top_id = ino.id;
    let top_path = ino_path.clone();
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
                return Err(too_many(&top_path));
            }
            let id = node.id;
            stack.push((node, p.clone(), true));
            for (k, v) in children.into_iter().rev() {
                let (_, name) = format::decode_edge_key(&k)?;
                let name = String::from_utf8(name.to_vec()).map_err(|_| {
                    Error::corrupt("edge key", format!("name under {id} is not UTF-8"))
                })?;
                let child = must_inode(view, names, format::decode_edge_value(&v)?)?;
                let cp = path::join(&p, &name);
                stack.push((child, cp, false));
            }
            continue;
        }
        bytes += p.len()
            + node.name.len()
            + node.attrs.owner.len()
            + node.attrs.group.len()
            + 8 * quotas.len()
            + EVENT_FIXED_BYTES;
        if bytes > max_bytes {
            return Err(record_too_big(bytes, max_bytes));
        }
        out.push(Event::Delete {
            parent_mtime_ms: (node.id == top_id).then_some(now),
            id: node.id,
            parent: node.parent,
            name: node.name,
            path: p,
            attrs: node.attrs,
            quotas: quotas.clone(),
        });
    }
    Ok(())
}

/// More than the postcard bytes of an event's integers, tags and string
/// lengths.
const EVENT_FIXED_BYTES: usize = 128;

// ---------------------------------------------------------------------------
// Events to index writes
// ---------------------------------------------------------------------------

/// The id of dictionary name `name`, if it has one.
pub fn dict_id(
    view: &(impl IndexRead + ?Sized),
    kind: DictKind,
    name: &str,
) -> Result<Option<u32>> {
    if name.is_empty() {
        return Ok(Some(0));
    }
    match view.get(
        Cf::Inodes,
        &v2::dict_by_name_key(kind == DictKind::Owner, name.as_bytes()),
    )? {
        Some(v) => v2::decode_u32_le("dictionary id", &v).map(Some),
        None => Ok(None),
    }
}

/// The id of `name`, giving it the next one (three keys: the name, the id,
/// the counter) if it has none. Ids are given in event order, owner before
/// group, as format 1 gave them: the dictionaries are a function of the log.
fn intern<W: IndexWrite + IndexRead + ?Sized>(
    ov: &mut W,
    state: &mut EngineState,
    kind: DictKind,
    name: &str,
) -> Result<u32> {
    if let Some(id) = dict_id(ov, kind, name)? {
        return Ok(id);
    }
    check_dict_string(kind, name)?;
    let counter = state.counter(kind);
    let id = counter.checked_add(1).ok_or(Error::DictionaryFull(kind))?;
    *counter = id;
    let owner = kind == DictKind::Owner;
    ov.put(Cf::Inodes, &v2::dict_by_id_key(owner, id), name.as_bytes());
    ov.put(
        Cf::Inodes,
        &v2::dict_by_name_key(owner, name.as_bytes()),
        &id.to_le_bytes(),
    );
    ov.put(Cf::Inodes, &v2::dict_count_key(owner), &id.to_le_bytes());
    Ok(id)
}

/// Sets the fields `a` describes on `e` (whose parent, name, flags other
/// than `complete`, and target stay).
fn set_attrs<W: IndexWrite + IndexRead + ?Sized, B>(
    e: &mut InodeEntryV2<B>,
    a: &AttrsRef<'_>,
    ov: &mut W,
    state: &mut EngineState,
) -> Result<()> {
    e.owner_id = intern(ov, state, DictKind::Owner, a.owner)?;
    e.group_id = intern(ov, state, DictKind::Group, a.group)?;
    e.size = a.size;
    e.block_size = a.block_size;
    e.ctime_ms = a.ctime_ms;
    e.mtime_ms = a.mtime_ms;
    e.change_ms = a.change_ms;
    e.mode = a.mode;
    if a.complete {
        e.flags |= FLAG_COMPLETE_V2;
    } else {
        e.flags &= !FLAG_COMPLETE_V2;
    }
    Ok(())
}

/// A new inode's entry (its name and target borrowed from the event).
fn new_entry<'n, W: IndexWrite + IndexRead + ?Sized>(
    parent: u64,
    name: &'n str,
    a: &AttrsRef<'_>,
    target: &'n str,
    ov: &mut W,
    state: &mut EngineState,
) -> Result<InodeEntryV2<&'n [u8]>> {
    let mut e = InodeEntryV2 {
        parent_id: parent,
        size: 0,
        block_size: 0,
        ctime_ms: 0,
        mtime_ms: 0,
        change_ms: 0,
        mode: 0,
        kind: kind_byte(a.kind),
        flags: 0,
        owner_id: 0,
        group_id: 0,
        name: name.as_bytes(),
        target: target.as_bytes(),
    };
    set_attrs(&mut e, a, ov, state)?;
    Ok(e)
}

/// The stored entry of `id`, which an event says exists.
fn existing<W: IndexRead + ?Sized>(ov: &W, id: u64) -> Result<InodeEntryV2> {
    stored_entry(ov, id)?.ok_or_else(|| {
        Error::corrupt(
            "index",
            format!("an event changes inode {id}, which does not exist"),
        )
    })
}

fn put_entry<W: IndexWrite + ?Sized, B: AsRef<[u8]>>(
    ov: &mut W,
    id: u64,
    e: &InodeEntryV2<B>,
    buf: &mut Vec<u8>,
) {
    ov.put(
        Cf::Inodes,
        &inode_key(id),
        encoded(buf, |b| e.encode_into(b)),
    );
}

/// A parent's entries changed: its modification and change time become `t`.
/// Creates in one directory within a millisecond (a group commit, an
/// import) leave it as it is after the first: no write, and the name is
/// borrowed, not copied.
fn touch<W: IndexWrite + IndexRead + ?Sized>(
    ov: &mut W,
    parent: u64,
    t: u64,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let stored = (parent <= MAX_INODE_ID)
        .then(|| ov.get(Cf::Inodes, &inode_key(parent)))
        .transpose()?
        .flatten()
        .ok_or_else(|| {
            Error::corrupt(
                "index",
                format!("an event changes inode {parent}, which does not exist"),
            )
        })?;
    let mut e = InodeEntryV2::decode_ref(&stored)?;
    if e.mtime_ms == t && e.change_ms == t {
        return Ok(());
    }
    e.mtime_ms = t;
    e.change_ms = t;
    put_entry(ov, parent, &e, buf);
    Ok(())
}

/// Adds `plus` to and takes `minus` from the usage of each quota in
/// `quotas`.
fn charge<W: IndexWrite + IndexRead + ?Sized>(
    ov: &mut W,
    quotas: &[u64],
    plus: &Usage,
    minus: &Usage,
) -> Result<()> {
    for q in quotas {
        let entry = stored_quota(ov, *q)?.ok_or_else(|| {
            Error::corrupt(
                "index",
                format!("an event charges the quota of {q}, which has none"),
            )
        })?;
        let mut quota = entry.to_quota();
        quota.usage = quota
            .usage
            .checked_add(plus)
            .and_then(|u| u.checked_sub(minus))
            .ok_or_else(|| {
                Error::corrupt(
                    "quota",
                    format!("the usage of {q}'s quota would leave its range"),
                )
            })?;
        ov.put(
            Cf::Inodes,
            &v2::quota_key(*q),
            &QuotaEntry::from_quota(&quota).encode(),
        );
    }
    Ok(())
}

/// `buf`, cleared and filled by `encode`.
fn encoded(buf: &mut Vec<u8>, encode: impl FnOnce(&mut Vec<u8>)) -> &[u8] {
    buf.clear();
    encode(buf);
    buf
}

/// Applies the events of one record to the index. Deterministic: the same
/// events on the same index and state give the same writes on any machine.
///
/// What each event writes (docs/FORMAT.md §9): its inode's entry, edges,
/// `next_id`, new dictionary names; its parents' times when it carries
/// them; the usage of the quotas it names; its extended attributes or
/// quota. Events of schema 1 carry no parent times and no quotas, so they
/// write what schema 1 wrote (and `change_ms = mtime_ms`).
pub fn apply_events<'e, W: IndexWrite + IndexRead + ?Sized>(
    events: impl IntoIterator<Item = EventRef<'e>>,
    ov: &mut W,
    state: &mut EngineState,
) -> Result<()> {
    // Every composed key or value is encoded here and written before the
    // next is: one allocation per record, not two per write.
    let mut buf = Vec::new();
    let zero = Usage::default();
    for ev in events {
        match ev {
            EventRef::Create {
                id,
                parent,
                name,
                attrs,
                parent_mtime_ms,
                quotas,
                ..
            } => {
                create(ov, state, id, parent, name, &attrs, "", &mut buf)?;
                if let Some(t) = parent_mtime_ms {
                    touch(ov, parent, t, &mut buf)?;
                }
                charge(ov, &quotas, &attrs.usage(), &zero)?;
            }
            EventRef::Symlink {
                id,
                parent,
                name,
                target,
                attrs,
                parent_mtime_ms,
                quotas,
                ..
            } => {
                create(ov, state, id, parent, name, &attrs, target, &mut buf)?;
                touch(ov, parent, parent_mtime_ms, &mut buf)?;
                charge(ov, &quotas, &attrs.usage(), &zero)?;
            }
            EventRef::Complete(u) | EventRef::SetSize(u) | EventRef::SetAttr(u) => {
                let mut e = existing(ov, u.id)?;
                if e.kind != kind_byte(u.new.kind) {
                    return Err(Error::corrupt(
                        "index",
                        format!("an update of inode {} changes its kind", u.id),
                    ));
                }
                set_attrs(&mut e, &u.new, ov, state)?;
                put_entry(ov, u.id, &e, &mut buf);
                let (plus, minus) = size_delta(u.old.size, u.new.size);
                charge(ov, &u.quotas, &plus, &minus)?;
            }
            EventRef::Delete {
                id,
                parent,
                name,
                attrs,
                parent_mtime_ms,
                quotas,
                ..
            } => {
                let e = existing(ov, id)?;
                ov.delete(Cf::Inodes, &inode_key(id));
                if e.flags & FLAG_HAS_XATTRS != 0 {
                    ov.delete(Cf::Inodes, &v2::xattrs_key(id));
                }
                if e.flags & FLAG_HAS_QUOTA != 0 {
                    ov.delete(Cf::Inodes, &v2::quota_key(id));
                    state.quotas.remove(&id);
                }
                ov.delete(
                    Cf::Edges,
                    encoded(&mut buf, |b| edge_key_into(parent, name.as_bytes(), b)),
                );
                if let Some(t) = parent_mtime_ms {
                    touch(ov, parent, t, &mut buf)?;
                }
                charge(ov, &quotas, &zero, &attrs.usage())?;
            }
            EventRef::Rename {
                id,
                old_parent,
                old_name,
                new_parent,
                new_name,
                attrs,
                parent_mtime_ms,
                quotas_from,
                quotas_to,
                usage,
                ..
            } => {
                let mut e = existing(ov, id)?;
                set_attrs(&mut e, &attrs, ov, state)?;
                e.parent_id = new_parent;
                e.name = new_name.as_bytes().to_vec();
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
                put_entry(ov, id, &e, &mut buf);
                if let Some(t) = parent_mtime_ms {
                    touch(ov, old_parent, t, &mut buf)?;
                    if new_parent != old_parent {
                        touch(ov, new_parent, t, &mut buf)?;
                    }
                }
                charge(ov, &quotas_from, &zero, &usage)?;
                charge(ov, &quotas_to, &usage, &zero)?;
            }
            EventRef::SetXattr {
                id,
                name,
                value,
                change_ms,
                ..
            } => {
                let mut e = existing(ov, id)?;
                let mut list = stored_xattrs(ov, id, e.flags)?;
                list.set(name.as_bytes(), value);
                ov.put(Cf::Inodes, &v2::xattrs_key(id), &list.encode());
                e.flags |= FLAG_HAS_XATTRS;
                e.change_ms = change_ms;
                put_entry(ov, id, &e, &mut buf);
            }
            EventRef::RemoveXattr {
                id,
                name,
                change_ms,
                ..
            } => {
                let mut e = existing(ov, id)?;
                let mut list = stored_xattrs(ov, id, e.flags)?;
                if list.remove(name.as_bytes()).is_none() {
                    return Err(Error::corrupt(
                        "index",
                        format!("an event removes attribute {name} of {id}, which it lacks"),
                    ));
                }
                if list.attrs.is_empty() {
                    ov.delete(Cf::Inodes, &v2::xattrs_key(id));
                    e.flags &= !FLAG_HAS_XATTRS;
                } else {
                    ov.put(Cf::Inodes, &v2::xattrs_key(id), &list.encode());
                }
                e.change_ms = change_ms;
                put_entry(ov, id, &e, &mut buf);
            }
            EventRef::SetQuota { id, quota, .. } => {
                let mut e = existing(ov, id)?;
                ov.put(
                    Cf::Inodes,
                    &v2::quota_key(id),
                    &QuotaEntry::from_quota(&quota).encode(),
                );
                e.flags |= FLAG_HAS_QUOTA;
                put_entry(ov, id, &e, &mut buf);
                state.quotas.insert(id);
            }
            EventRef::ClearQuota { id, .. } => {
                let mut e = existing(ov, id)?;
                ov.delete(Cf::Inodes, &v2::quota_key(id));
                e.flags &= !FLAG_HAS_QUOTA;
                put_entry(ov, id, &e, &mut buf);
                state.quotas.remove(&id);
            }
        }
    }
    Ok(())
}

/// A `Create` or `Symlink`: the entry, the edge, and `next_id` when the
/// id crosses the reserved block.
#[allow(clippy::too_many_arguments)]
fn create<W: IndexWrite + IndexRead + ?Sized>(
    ov: &mut W,
    state: &mut EngineState,
    id: u64,
    parent: u64,
    name: &str,
    attrs: &AttrsRef<'_>,
    target: &str,
    buf: &mut Vec<u8>,
) -> Result<()> {
    let e = new_entry(parent, name, attrs, target, ov, state)?;
    put_entry(ov, id, &e, buf);
    ov.put(
        Cf::Edges,
        encoded(buf, |b| edge_key_into(parent, name.as_bytes(), b)),
        &edge_value(id),
    );
    if id >= state.id_bound {
        // Crossing the reserved block: reserve the next one (never past
        // the last id: the keys above it are the special keys, and the sum
        // must not wrap).
        state.id_bound = id.saturating_add(ID_BLOCK).min(MAX_INODE_ID + 1);
        ov.put(
            Cf::Inodes,
            &inode_key(NEXT_ID_KEY),
            &next_id_value(state.id_bound),
        );
    }
    state.next_id = state.next_id.max(id + 1);
    Ok(())
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
