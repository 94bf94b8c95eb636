//! Commands to events: the rules that validate a command against the
//! index and decide its events.

use super::*;

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
pub(crate) enum Executed {
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
pub(super) enum Plan {
    /// Events to log (never empty).
    Events(Vec<Event>),
    /// Nothing to change.
    NoOp,
}

pub(crate) struct Engine {
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

impl Engine {
    pub(crate) fn new(state: EngineState) -> Engine {
        Engine {
            state,
            max_delete_inodes: DEFAULT_MAX_DELETE_INODES,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            names: Names::new(),
        }
    }

    /// A second engine at this one's state, with its limits (a consensus
    /// leader's, which runs ahead of the committed state by its proposals).
    pub(crate) fn fork(&self) -> Engine {
        Engine {
            state: self.state.clone(),
            max_delete_inodes: self.max_delete_inodes,
            max_record_bytes: self.max_record_bytes,
            names: Names::new(),
        }
    }

    pub(super) fn alloc_ids(&self, n: usize) -> Result<u64> {
        let first = self.state.next_id;
        if first.saturating_add(n as u64) > MAX_INODE_ID {
            return Err(Error::InvalidArgument("inode ids exhausted".into()));
        }
        Ok(first)
    }

    /// Checks the owner and group a command gives (`None`: unchanged): a
    /// name's length, and that a new one gets an id.
    pub(super) fn check_names(
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
    pub(crate) fn execute<R: IndexRead + ?Sized>(
        &mut self,
        cmd: &Command,
        caller: Option<&Caller>,
        view: &mut Overlay<'_, R>,
        time_ms: u64,
    ) -> Executed {
        // A request made for a user: checked, and given the owner, group
        // and mode that user's new entry takes (see `access`).
        let cmd = match caller.map(|c| access::authorize(&*view, &self.names, cmd, c)) {
            None => std::borrow::Cow::Borrowed(cmd),
            Some(Ok(cmd)) => cmd,
            Some(Err(e)) => return Executed::Refused(e),
        };
        // Planning a create takes ids; a refusal after it gives them back.
        let next_id = self.state.next_id;
        let events = match self.plan(&cmd, view, time_ms) {
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
    pub(super) fn check_quotas(
        &self,
        view: &(impl IndexRead + ?Sized),
        events: &[Event],
    ) -> Result<()> {
        let deltas = QuotaDeltas::of(events);
        if let Some(id) = deltas.overflow {
            return Err(usage_out_of_range(view, id));
        }
        for (id, (plus, minus)) in deltas.by_quota {
            if plus.is_zero() && minus.is_zero() {
                continue;
            }
            let q = stored_quota(view, id)?
                .ok_or_else(|| Error::corrupt("index", format!("quota of {id} is missing")))?
                .to_quota();
            // Applying charges the usage exactly so (add, then take away):
            // what it could not hold is refused here, before the log has
            // it, instead of stopping the writer at apply.
            let Some(grown) = q.usage.checked_add(&plus) else {
                return Err(usage_out_of_range(view, id));
            };
            let Some(after) = grown.checked_sub(&minus) else {
                return Err(Error::corrupt(
                    "quota",
                    format!(
                        "the usage of {}'s quota is below what this takes away: \
                         `quota clear` then `quota set` counts it again",
                        path_of(view, id).unwrap_or_else(|_| format!("inode {id}").into())
                    ),
                ));
            };
            if plus.is_zero() {
                continue;
            }
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
                    path: path_of(view, id)?.to_string(),
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
    pub(super) fn plan<R: IndexRead + ?Sized>(
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
            Command::RecountQuota { path } => self.plan_recount_quota(view, path),
        }
    }

    /// `mkdir P` / `mkdir -p P`.
    pub(super) fn plan_mkdir<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
                Err(Error::AlreadyExists(path::join_all(&comps).to_string()))
            };
        }
        if !parents && w.existing + 1 < comps.len() {
            return Err(Error::NotFound(
                path::join_all(&comps[..=w.existing]).to_string(),
            ));
        }
        self.check_names(view, Some(perms.owner), Some(perms.group))?;
        let attrs = perms.new_inode(FileType::Directory, perms.mode, 0, now);
        let events = self.create_chain(&comps, &w, &attrs, Last::Inode(&attrs), now)?;
        Ok(Plan::Events(events))
    }

    /// `create P` (with parents: missing directories first).
    pub(super) fn plan_create<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
    pub(super) fn plan_symlink<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        target: &[u8],
        p: &[u8],
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
    pub(super) fn plan_new<R: IndexRead + ?Sized>(
        &mut self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
            return Err(Error::AlreadyExists(path::join_all(&comps).to_string()));
        }
        if !parents && w.existing + 1 < comps.len() {
            return Err(Error::NotFound(
                path::join_all(&comps[..=w.existing]).to_string(),
            ));
        }
        self.check_names(view, Some(perms.owner), Some(perms.group))?;
        let dir_attrs = perms.new_inode(FileType::Directory, DEFAULT_DIR_MODE, 0, now);
        let events = self.create_chain(&comps, &w, &dir_attrs, last, now)?;
        Ok(Plan::Events(events))
    }

    /// `complete P size`.
    pub(super) fn plan_complete<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
    pub(super) fn plan_set_size<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
    pub(super) fn plan_set_attr<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
    pub(super) fn plan_delete<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
        recursive: bool,
        now: u64,
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_canon(view, p, true)?;
        if r.inode.id == ROOT_ID {
            return Err(Error::InvalidArgument("the root cannot be deleted".into()));
        }
        if r.inode.attrs.kind.is_dir() && !recursive && has_children(view, r.inode.id)? {
            return Err(Error::NotEmpty(canon.to_string()));
        }
        let mut events = Vec::new();
        let limits = (self.max_delete_inodes, self.max_record_bytes);
        delete_subtree(view, &self.names, r, canon, limits, now, &mut events)?;
        Ok(Plan::Events(events))
    }

    /// `rename S D` (with overwrite: replacing `D`).
    pub(super) fn plan_rename<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        src: &[u8],
        dst: &[u8],
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
            return Err(Error::NotADirectory(dst_parent_path.to_string()));
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
                return Err(Error::AlreadyExists(dst_path.to_string()));
            }
            match (ino.attrs.kind.is_dir(), victim.attrs.kind.is_dir()) {
                (false, false) => {}
                (true, true) => {
                    if has_children(view, victim.id)? {
                        return Err(Error::NotEmpty(dst_path.to_string()));
                    }
                }
                (false, true) => return Err(Error::IsADirectory(dst_path.to_string())),
                (true, false) => return Err(Error::NotADirectory(dst_path.to_string())),
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
            new_name: new_name.to_owned().into(),
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
    pub(super) fn plan_set_xattr<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
                    path: canon.to_string(),
                    name: name.to_owned(),
                })
            }
            (XattrFlag::Replace, None) => {
                return Err(Error::NoSuchXattr {
                    path: canon.to_string(),
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
    pub(super) fn plan_remove_xattr<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
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
                path: canon.to_string(),
                name: name.to_owned(),
            }),
        }
    }

    /// `quota set P [inodes] [bytes]`: a new quota counts its subtree
    /// (a walk bounded as a recursive delete is); a changed one keeps its
    /// counters.
    pub(super) fn plan_set_quota<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
        inodes: Option<u64>,
        bytes: Option<u64>,
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_quota_dir(view, p)?;
        let ino = &r.inode;
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
    pub(super) fn plan_clear_quota<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_quota_dir(view, p)?;
        match stored_quota(view, r.inode.id)? {
            Some(q) => Ok(Plan::Events(vec![Event::ClearQuota {
                id: r.inode.id,
                path: canon,
                old: q.to_quota(),
            }])),
            None => Ok(Plan::NoOp),
        }
    }

    /// `quota recount P`: the usage a walk of the subtree finds (nested
    /// quotas walked too, their counters not trusted), as a `SetQuota` of
    /// the same limits; nothing when the counter already agrees.
    pub(super) fn plan_recount_quota<R: IndexRead + ?Sized>(
        &self,
        view: &Overlay<'_, R>,
        p: &[u8],
    ) -> Result<Plan> {
        let (r, canon) = self.resolve_quota_dir(view, p)?;
        let Some(q) = stored_quota(view, r.inode.id)? else {
            return Err(Error::NotFound(format!("{canon} has no quota")));
        };
        let q = q.to_quota();
        let mut walked =
            count_subtree_walking(view, r.inode.id, self.max_delete_inodes, &canon)?.usage;
        // The directory itself is not in its own usage.
        walked.directories -= 1;
        if walked == q.usage {
            return Ok(Plan::NoOp);
        }
        tracing::warn!(
            path = %canon,
            counted = ?q.usage,
            walked = ?walked,
            "recounting a quota whose usage disagreed with its subtree"
        );
        Ok(Plan::Events(vec![Event::SetQuota {
            id: r.inode.id,
            path: canon,
            quota: Quota { usage: walked, ..q },
        }]))
    }

    /// Create events for `comps[w.existing..]` under `w.id`: directories
    /// with `dir_attrs`, then `last`. Each charges the quotas on the path.
    pub(super) fn create_chain(
        &mut self,
        comps: &[&[u8]],
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
                    name: name.into(),
                    path,
                    target: target.to_owned().into(),
                    attrs: attrs.clone(),
                    parent_mtime_ms: now,
                    quotas,
                },
                (is_last, last) => Event::Create {
                    id,
                    parent,
                    name: name.into(),
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

    pub(super) fn resolve_canon(
        &self,
        view: &(impl IndexRead + ?Sized),
        p: &[u8],
        with_quotas: bool,
    ) -> Result<(Resolved, ByteString)> {
        let canon = path::canonical(p)?;
        let quotas = (with_quotas && !self.state.quotas.is_empty()).then_some(&self.state.quotas);
        Ok((resolve_in(view, &self.names, &canon, quotas)?, canon))
    }

    /// The directory a quota command names (`NotADirectory` otherwise).
    fn resolve_quota_dir(
        &self,
        view: &(impl IndexRead + ?Sized),
        p: &[u8],
    ) -> Result<(Resolved, ByteString)> {
        let (r, canon) = self.resolve_canon(view, p, false)?;
        if !r.inode.attrs.kind.is_dir() {
            return Err(Error::NotADirectory(canon.to_string()));
        }
        Ok((r, canon))
    }

    /// [`Engine::resolve_canon`] for a command that takes a file (with the
    /// quotas above it): a directory is `IsADirectory`, a symbolic link
    /// `InvalidArgument`.
    pub(super) fn resolve_file(
        &self,
        view: &(impl IndexRead + ?Sized),
        p: &[u8],
    ) -> Result<(Resolved, ByteString)> {
        let (r, canon) = self.resolve_canon(view, p, true)?;
        match r.inode.attrs.kind {
            FileType::File => Ok((r, canon)),
            FileType::Directory => Err(Error::IsADirectory(canon.to_string())),
            FileType::Symlink => Err(Error::InvalidArgument(format!(
                "{canon} is a symbolic link (links are not followed)"
            ))),
        }
    }
}

/// A write that would take quota `id`'s usage past its counters' range.
fn usage_out_of_range(view: &(impl IndexRead + ?Sized), id: u64) -> Error {
    let path = path_of(view, id).unwrap_or_else(|_| format!("inode {id}").into());
    Error::InvalidArgument(format!(
        "the usage of {path}'s quota would pass 2^64 (its counters' range)"
    ))
}
