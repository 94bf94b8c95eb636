//! Reading the index: resolving paths, listing, attributes, counting.

use super::*;

/// The kind an entry's `kind` byte names.
pub(crate) fn file_type(kind: u8) -> FileType {
    match kind {
        KIND_DIRECTORY => FileType::Directory,
        KIND_SYMLINK => FileType::Symlink,
        _ => FileType::File,
    }
}

pub(super) fn kind_byte(t: FileType) -> u8 {
    match t {
        FileType::File => KIND_FILE,
        FileType::Directory => KIND_DIRECTORY,
        FileType::Symlink => KIND_SYMLINK,
    }
}

/// Decodes a stored entry into an [`Inode`], its owner and group names
/// read through `view`.
pub(crate) fn inode_from_entry<N: AsRef<[u8]>>(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    id: u64,
    e: &InodeEntryV2<N>,
) -> Result<Inode> {
    Ok(Inode {
        id,
        parent: e.parent_id,
        name: e.name.as_ref().into(),
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
pub(super) fn stored_entry(
    view: &(impl IndexRead + ?Sized),
    id: u64,
) -> Result<Option<InodeEntryV2>> {
    if id > MAX_INODE_ID {
        return Ok(None);
    }
    match view.get(Cf::Inodes, &inode_key(id))? {
        Some(v) => Ok(Some(InodeEntryV2::decode(&v)?)),
        None => Ok(None),
    }
}

pub(crate) fn get_inode(
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

pub(crate) fn get_child(
    view: &(impl IndexRead + ?Sized),
    parent: u64,
    name: &[u8],
) -> Result<Option<u64>> {
    match view.get(Cf::Edges, &edge_key(parent, name))? {
        Some(v) => Ok(Some(format::decode_edge_value(&v)?)),
        None => Ok(None),
    }
}

pub(super) fn must_inode(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    id: u64,
) -> Result<Inode> {
    get_inode(view, names, id)?.ok_or_else(|| missing_inode(id))
}

pub(super) fn missing_inode(id: u64) -> Error {
    Error::corrupt(
        "index",
        format!("edge points to inode {id}, which does not exist"),
    )
}

/// The kind of inode `id`, read from its stored entry without resolving
/// its name, owner or group.
pub(super) fn stored_kind(view: &(impl IndexRead + ?Sized), id: u64) -> Result<FileType> {
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
pub(super) struct Resolved {
    pub(super) inode: Inode,
    pub(super) quotas: Vec<u64>,
}

/// Resolves a path to its inode, and collects the ancestors found in
/// `quotas` (when given) on the way.
pub(super) fn resolve_in(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &[u8],
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
                    Error::NotFound(path::join_all(&comps[..=i]).to_string())
                } else {
                    Error::NotADirectory(path::join_all(&comps[..i]).to_string())
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
pub(crate) fn resolve(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &(impl AsRef<[u8]> + ?Sized),
) -> Result<Inode> {
    resolve_in(view, names, p.as_ref(), None).map(|r| r.inode)
}

/// The full path of an inode, by walking parent links.
pub(crate) fn path_of(view: &(impl IndexRead + ?Sized), id: u64) -> Result<ByteString> {
    let mut names_up = Vec::new();
    let mut cur = stored_entry(view, id)?.ok_or(Error::InodeNotFound(id))?;
    let mut cur_id = id;
    while cur_id != ROOT_ID {
        names_up.push(cur.name);
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
    Ok(path::join_all(&names_up))
}

/// One page of a directory's children, in name byte order.
pub(crate) fn list_children(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    dir: u64,
    start_after: Option<&[u8]>,
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
pub(crate) fn visit_children(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    dir: u64,
    start_after: Option<&[u8]>,
    limit: usize,
    entry: &mut DirEntry,
    f: &mut dyn FnMut(&mut DirEntry) -> Result<()>,
) -> Result<Option<ByteString>> {
    let prefix = edge_prefix(dir);
    let after = start_after.map(|s| edge_key(dir, s));
    let mut name_bytes: Vec<u8> = Vec::new();
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
            name_bytes.extend_from_slice(name);
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
    Ok(more.then(|| name_bytes[from..to].into()))
}

/// Decodes a child's stored entry into `out`, reusing its strings' room.
pub(super) fn fill_entry(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    id: u64,
    name: &[u8],
    e: &InodeEntryV2<&[u8]>,
    out: &mut DirEntry,
) -> Result<()> {
    out.name.clear();
    out.name.push_bytes(name);
    let ino = &mut out.inode;
    ino.id = id;
    ino.parent = e.parent_id;
    ino.name.clear();
    ino.name.push_bytes(e.name);
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
pub(crate) fn for_each_under(
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

pub(super) fn has_children(view: &(impl IndexRead + ?Sized), dir: u64) -> Result<bool> {
    Ok(!view.scan(Cf::Edges, &edge_prefix(dir), None, 1)?.is_empty())
}

/// The target of the symbolic link at `p`.
pub(crate) fn readlink(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &[u8],
) -> Result<ByteString> {
    let canon = path::canonical(p)?;
    let ino = resolve(view, names, &canon)?;
    if !ino.attrs.kind.is_symlink() {
        return Err(Error::InvalidArgument(format!(
            "{canon} is a {}, not a symbolic link",
            ino.attrs.kind.as_str()
        )));
    }
    let e = stored_entry(view, ino.id)?.ok_or_else(|| missing_inode(ino.id))?;
    Ok(e.target.into())
}

/// The extended attributes of inode `id` (whose entry has the flag).
pub(super) fn stored_xattrs(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    flags: u8,
) -> Result<XattrList> {
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
pub(crate) fn get_xattrs(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &[u8],
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
                path: canon.to_string(),
                name: n.to_owned(),
            }),
        },
        None => list.attrs.iter().map(|(n, v)| xattr(n, v)).collect(),
    }
}

/// The quota of directory `id`, if it has one.
pub(crate) fn stored_quota(
    view: &(impl IndexRead + ?Sized),
    id: u64,
) -> Result<Option<QuotaEntry>> {
    match view.get(Cf::Inodes, &v2::quota_key(id))? {
        Some(v) => Ok(Some(QuotaEntry::decode(&v)?)),
        None => Ok(None),
    }
}

/// What a walk of a subtree counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Counted {
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
pub(crate) fn count_subtree(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    max: usize,
    what: &BStr,
) -> Result<Counted> {
    count(view, id, max, what, true)
}

/// [`count_subtree`] reading every entry, the quotas' counters ignored
/// (`admin verify` checks them against it).
pub(crate) fn count_subtree_walking(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    max: usize,
    what: &BStr,
) -> Result<Counted> {
    count(view, id, max, what, false)
}

pub(super) fn count(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    max: usize,
    what: &BStr,
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
                c.usage.bytes = c
                    .usage
                    .bytes
                    .checked_add(e.size)
                    .ok_or_else(|| past_counters(what))?;
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
                    c.usage = c
                        .usage
                        .checked_add(&q.to_quota().usage)
                        .ok_or_else(|| past_counters(what))?;
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

/// A subtree whose usage a counter cannot hold: files outside any quota
/// may sum past 2^64 bytes, but nothing that counts them exactly (a quota
/// set over them, a move into a quota, `count`) can take them, so the
/// request is refused rather than counted short.
fn past_counters(what: &BStr) -> Error {
    Error::InvalidArgument(format!(
        "the files under {what} sum past 2^64 bytes, more than a usage counter holds"
    ))
}

pub(super) fn too_many(what: impl std::fmt::Display, max: usize) -> Error {
    Error::InvalidArgument(format!(
        "{what} holds more than {max} inodes, the most counted by a walk: give it a quota \
         (one without limits keeps its usage counted), or count its subdirectories"
    ))
}

/// The usage under `p`, the path itself included (`count`, `du -s`):
/// from its quota's counters when it has one, else by a walk of at most
/// `max` inodes (which uses the counters of the directories with a quota
/// it meets).
pub(crate) fn content_summary(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &[u8],
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
