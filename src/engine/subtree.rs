//! Commands over whole subtrees: walking an existing path, checking a
//! moved subtree's paths, deleting a subtree.

use super::*;

/// The deepest existing inode on a path: how many components exist, its id
/// and kind, and the directories with a quota from the root to it.
pub(super) struct Walked {
    pub(super) id: u64,
    pub(super) kind: FileType,
    pub(super) existing: usize,
    pub(super) quotas: Vec<u64>,
}

/// The deepest existing inode on the path `comps` (see [`Walked`]). Errors
/// if an existing component that must be a directory (because more
/// components follow) is not one.
pub(super) fn walk_existing(
    view: &(impl IndexRead + ?Sized),
    comps: &[&[u8]],
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
        return Err(Error::NotADirectory(
            path::join_all(&comps[..existing]).to_string(),
        ));
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

pub(super) fn record_too_big(size: usize, max: usize) -> Error {
    Error::InvalidArgument(format!(
        "the command's log record would hold {size} bytes of events, more than the \
         {max} one record may hold: delete or move the subtree in parts"
    ))
}

/// Refuses moving the directory `id` to `dst` when a path under it would
/// then exceed [`path::MAX_PATH_LEN`] (no later command could name it).
/// Reads the subtree's names, up to `max` inodes; a bigger subtree whose
/// paths would grow is refused, as a recursive delete of it would be.
pub(super) fn check_subtree_paths(
    view: &(impl IndexRead + ?Sized),
    id: u64,
    dst: &[u8],
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
                    "moving it to {} would make a path under it {} bytes long, \
                     more than {}",
                    path::display(dst),
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
pub(super) fn delete_subtree(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    top: Resolved,
    ino_path: ByteString,
    (max, max_bytes): (usize, usize),
    now: u64,
    out: &mut Vec<Event>,
) -> Result<()> {
    // The record's size, counted as events are made so that a subtree of
    // long paths is refused before its events fill memory: each event's
    // strings plus a generous bound on its integers.
    let mut bytes = 0usize;
    let too_many = |p: &ByteString| {
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
    let mut stack: Vec<(Inode, ByteString, bool)> = vec![(ino, ino_path, false)];
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
pub(super) const EVENT_FIXED_BYTES: usize = 128;
