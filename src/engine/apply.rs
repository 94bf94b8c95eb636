//! Events to index writes: the one function that turns events into index
//! bytes, for the writer, replay, rebuilds and followers alike.

use super::*;

/// The id of dictionary name `name`, if it has one.
pub(crate) fn dict_id(
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
pub(super) fn intern<W: IndexWrite + IndexRead + ?Sized>(
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
pub(super) fn set_attrs<W: IndexWrite + IndexRead + ?Sized, B>(
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
pub(super) fn new_entry<'n, W: IndexWrite + IndexRead + ?Sized>(
    parent: u64,
    name: &'n [u8],
    a: &AttrsRef<'_>,
    target: &'n [u8],
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
        name,
        target,
    };
    set_attrs(&mut e, a, ov, state)?;
    Ok(e)
}

/// The stored entry of `id`, which an event says exists.
pub(super) fn existing<W: IndexRead + ?Sized>(ov: &W, id: u64) -> Result<InodeEntryV2> {
    stored_entry(ov, id)?.ok_or_else(|| {
        Error::corrupt(
            "index",
            format!("an event changes inode {id}, which does not exist"),
        )
    })
}

pub(super) fn put_entry<W: IndexWrite + ?Sized, B: AsRef<[u8]>>(
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
/// borrowed, not copied. A replay defers it (see
/// [`IndexWrite::defer_parent_times`]).
pub(super) fn touch<W: IndexWrite + IndexRead + ?Sized>(
    ov: &mut W,
    parent: u64,
    t: u64,
    buf: &mut Vec<u8>,
) -> Result<()> {
    if ov.defer_parent_times(parent, t) {
        return Ok(());
    }
    let stored = (parent <= MAX_INODE_ID)
        .then(|| ov.get(Cf::Inodes, &inode_key(parent)))
        .transpose()?
        .flatten()
        .ok_or_else(|| missing_parent(parent))?;
    if with_parent_times(&stored, t, buf)? {
        ov.put(Cf::Inodes, &inode_key(parent), buf);
    }
    Ok(())
}

/// The error of a parent whose times an event moves but which does not
/// exist.
pub(crate) fn missing_parent(parent: u64) -> Error {
    Error::corrupt(
        "index",
        format!("an event changes inode {parent}, which does not exist"),
    )
}

/// The stored entry `stored` with its modification and change times at
/// `t`, encoded into `buf`; false (and `buf` untouched) when it is already
/// at `t`.
pub(crate) fn with_parent_times(stored: &[u8], t: u64, buf: &mut Vec<u8>) -> Result<bool> {
    let mut e = InodeEntryV2::decode_ref(stored)?;
    if e.mtime_ms == t && e.change_ms == t {
        return Ok(false);
    }
    e.mtime_ms = t;
    e.change_ms = t;
    buf.clear();
    e.encode_into(buf);
    Ok(true)
}

/// Adds `plus` to and takes `minus` from the usage of each quota in
/// `quotas`.
pub(super) fn charge<W: IndexWrite + IndexRead + ?Sized>(
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
pub(super) fn encoded(buf: &mut Vec<u8>, encode: impl FnOnce(&mut Vec<u8>)) -> &[u8] {
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
pub(crate) fn apply_events<'e, W: IndexWrite + IndexRead + ?Sized>(
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
                create(ov, state, id, parent, name, &attrs, b"", &mut buf)?;
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
                    encoded(&mut buf, |b| edge_key_into(parent, name, b)),
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
                e.name = new_name.to_vec();
                ov.delete(
                    Cf::Edges,
                    encoded(&mut buf, |b| edge_key_into(old_parent, old_name, b)),
                );
                ov.put(
                    Cf::Edges,
                    encoded(&mut buf, |b| edge_key_into(new_parent, new_name, b)),
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
pub(super) fn create<W: IndexWrite + IndexRead + ?Sized>(
    ov: &mut W,
    state: &mut EngineState,
    id: u64,
    parent: u64,
    name: &[u8],
    attrs: &AttrsRef<'_>,
    target: &[u8],
    buf: &mut Vec<u8>,
) -> Result<()> {
    let e = new_entry(parent, name, attrs, target, ov, state)?;
    put_entry(ov, id, &e, buf);
    ov.put(
        Cf::Edges,
        encoded(buf, |b| edge_key_into(parent, name, b)),
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
