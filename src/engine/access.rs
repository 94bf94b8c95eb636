//! Permission checks for requests made for a user (`serve
//! --enforce-permissions`, docs/SECURITY.md "Permissions"): POSIX's rules
//! on owners, groups and mode bits, as Linux applies them to a local
//! filesystem.
//!
//! A mutation is checked on the writer, against the same view its rules
//! decide on (the index plus the group's earlier commands), so no change
//! can slip between the check and the command. A read is checked in the
//! same closure, at the same state, as the read itself.
//!
//! Refusals: the mode bits refuse with `PermissionDenied` (EACCES); an
//! operation reserved to the entry's owner or the superuser (chmod,
//! chown, explicit times, the sticky bit, quotas) with `NotPermitted`
//! (EPERM).

use std::borrow::Cow;

use treelog_proto::caller::Caller;
use treelog_proto::command::Creation;

use super::*;

const R: u32 = 4;
const W: u32 = 2;
const X: u32 = 1;
const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;
const S_ISVTX: u32 = 0o1000;

/// What a read needs beyond search permission on the directories above
/// its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReadNeed {
    /// stat, readlink, count: search on the ancestors only.
    Lookup,
    /// A directory's listing: read on the directory itself.
    List,
    /// A named extended attribute of the `user.` namespace: read on the
    /// entry.
    UserXattr,
}

/// Whether `c` holds every bit of `want` (r=4, w=2, x=1) on an entry with
/// `attrs`: the owner's bits for its owner, the group's for a member of
/// its group, the others' for the rest. The superuser holds all, but
/// executes (searches) a non-directory only when some execute bit is set.
fn permits(attrs: &Attrs, c: &Caller, want: u32) -> bool {
    if c.is_superuser() {
        return want & X == 0 || attrs.kind.is_dir() || attrs.mode & 0o111 != 0;
    }
    let bits = if attrs.owner == c.user {
        attrs.mode >> 6
    } else if c.in_group(&attrs.group) {
        attrs.mode >> 3
    } else {
        attrs.mode
    } & 7;
    bits & want == want
}

fn denied(c: &Caller, what: &str, on: &[u8]) -> Error {
    Error::PermissionDenied(format!(
        "user {} may not {what} {}",
        c.user,
        String::from_utf8_lossy(on)
    ))
}

fn not_permitted(c: &Caller, what: &str, on: &[u8]) -> Error {
    Error::NotPermitted(format!(
        "user {} may not {what} {}: only its owner or {} may",
        c.user,
        String::from_utf8_lossy(on),
        treelog_proto::caller::SUPERUSER
    ))
}

/// The entries on the way to `comps`, root first: those that exist, each
/// directory passed through checked for search. Stops at the first
/// missing component or non-directory (the command's own rules then say
/// `NotFound` or `NotADirectory`), so the result holds the root and at
/// most `comps.len()` more.
fn walk(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    comps: &[&[u8]],
    c: &Caller,
) -> Result<Vec<Inode>> {
    let mut out = vec![must_inode(view, names, ROOT_ID)?];
    for (i, name) in comps.iter().enumerate() {
        let dir = out.last().expect("the root is first");
        if !dir.attrs.kind.is_dir() {
            break;
        }
        if !permits(&dir.attrs, c, X) {
            return Err(denied(c, "search", &path::join_all(&comps[..i])));
        }
        match get_child(view, dir.id, name)? {
            Some(id) => out.push(must_inode(view, names, id)?),
            None => break,
        }
    }
    Ok(out)
}

/// The existing entry at `comps` and its parent, when both exist.
fn entry_and_parent(walked: &[Inode], comps: &[&[u8]]) -> Option<(Inode, Inode)> {
    (walked.len() == comps.len() + 1 && walked.len() >= 2).then(|| {
        (
            walked[walked.len() - 1].clone(),
            walked[walked.len() - 2].clone(),
        )
    })
}

/// Refuses a read of `p` by `c` that its permissions do not allow (a
/// missing entry is left to the read, which says `NotFound`).
pub(crate) fn check_read(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &[u8],
    c: &Caller,
    need: ReadNeed,
) -> Result<()> {
    if c.is_superuser() {
        return Ok(());
    }
    let comps = path::components(p)?;
    let walked = walk(view, names, &comps, c)?;
    if walked.len() != comps.len() + 1 {
        return Ok(());
    }
    let e = &walked[walked.len() - 1];
    let (want, what) = match need {
        ReadNeed::Lookup => return Ok(()),
        ReadNeed::List => (R, "list"),
        ReadNeed::UserXattr => (R, "read the attributes of"),
    };
    if need == ReadNeed::List && !e.attrs.kind.is_dir() {
        return Ok(());
    }
    if !permits(&e.attrs, c, want) {
        return Err(denied(c, what, p));
    }
    Ok(())
}

/// Checks mutation `cmd` made for `c` against `view`, and gives the command
/// to plan: `cmd` itself, or with the owner, group and mode POSIX gives a
/// new entry (the caller's, or a setgid parent's group) or leaves after a
/// change of owner (setuid and setgid cleared).
pub(crate) fn authorize<'c>(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    cmd: &'c Command,
    c: &Caller,
) -> Result<Cow<'c, Command>> {
    match cmd {
        Command::Mkdir { .. } | Command::Create { .. } | Command::Symlink { .. } => {
            let Some(asked) = cmd.creation() else {
                return Ok(Cow::Borrowed(cmd));
            };
            let Some(n) = new_entry(view, names, asked, c)? else {
                return Ok(Cow::Borrowed(cmd));
            };
            Ok(Cow::Owned(cmd.with_creation(n.mode, n.owner, n.group)))
        }
        Command::Complete { path, .. } | Command::SetSize { path, .. } => {
            if let Some(e) = existing(view, names, path, c)? {
                if !permits(&e.attrs, c, W) {
                    return Err(denied(c, "write", path));
                }
            }
            Ok(Cow::Borrowed(cmd))
        }
        Command::SetAttr {
            path,
            mode,
            owner,
            group,
            mtime_ms,
        } => set_attr(view, names, cmd, c, path, *mode, owner, group, *mtime_ms),
        Command::Delete { path, recursive } => {
            let comps = path::components(path)?;
            let walked = walk(view, names, &comps, c)?;
            if let Some((e, parent)) = entry_and_parent(&walked, &comps) {
                may_unlink(c, &parent, &e, path)?;
                if *recursive
                    && e.attrs.kind.is_dir()
                    && !c.is_superuser()
                    && has_children(view, e.id)?
                {
                    return Err(not_permitted(
                        c,
                        "delete recursively (remove the entries one by one)",
                        path,
                    ));
                }
            }
            Ok(Cow::Borrowed(cmd))
        }
        Command::Rename { src, dst, .. } => {
            let scomps = path::components(src)?;
            let swalk = walk(view, names, &scomps, c)?;
            let dcomps = path::components(dst)?;
            let dwalk = walk(view, names, &dcomps, c)?;
            let Some((e, sparent)) = entry_and_parent(&swalk, &scomps) else {
                return Ok(Cow::Borrowed(cmd));
            };
            may_unlink(c, &sparent, &e, src)?;
            if dcomps.is_empty() || dwalk.len() < dcomps.len() {
                return Ok(Cow::Borrowed(cmd));
            }
            let dparent = &dwalk[dcomps.len() - 1];
            if !dparent.attrs.kind.is_dir() {
                return Ok(Cow::Borrowed(cmd));
            }
            if !permits(&dparent.attrs, c, W | X) {
                return Err(denied(
                    c,
                    "write in",
                    &path::join_all(&dcomps[..dcomps.len() - 1]),
                ));
            }
            if let Some((replaced, _)) = entry_and_parent(&dwalk, &dcomps) {
                if replaced.id != e.id {
                    may_unlink(c, dparent, &replaced, dst)?;
                }
            }
            // A directory moved to another parent has its `..` rewritten.
            if e.attrs.kind.is_dir() && dparent.id != sparent.id && !permits(&e.attrs, c, W) {
                return Err(denied(c, "move to another directory", src));
            }
            Ok(Cow::Borrowed(cmd))
        }
        Command::SetXattr { path, name, .. } | Command::RemoveXattr { path, name } => {
            let Some(e) = existing(view, names, path, c)? else {
                return Ok(Cow::Borrowed(cmd));
            };
            if c.is_superuser() {
                return Ok(Cow::Borrowed(cmd));
            }
            if !name.starts_with("user.") {
                return Err(not_permitted(
                    c,
                    &format!("change attribute {name} of"),
                    path,
                ));
            }
            // As Linux: `user.` attributes only on files and directories.
            if e.attrs.kind == FileType::Symlink {
                return Err(not_permitted(c, "set user. attributes on the link", path));
            }
            if !permits(&e.attrs, c, W) {
                return Err(denied(c, "change the attributes of", path));
            }
            Ok(Cow::Borrowed(cmd))
        }
        Command::SetQuota { path, .. }
        | Command::ClearQuota { path }
        | Command::RecountQuota { path } => {
            if !c.is_superuser() {
                return Err(not_permitted(c, "change the quota of", path));
            }
            Ok(Cow::Borrowed(cmd))
        }
    }
}

/// The entry at `p` once the walk to it is allowed (`None` when it is
/// missing: the command's rules say so).
fn existing(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    p: &[u8],
    c: &Caller,
) -> Result<Option<Inode>> {
    let comps = path::components(p)?;
    let mut walked = walk(view, names, &comps, c)?;
    Ok((walked.len() == comps.len() + 1).then(|| walked.pop().expect("not empty")))
}

/// Whether `c` may remove (or move away) `e` from directory `parent`:
/// write and search on the parent, and in a sticky directory ownership of
/// the entry or of the directory.
fn may_unlink(c: &Caller, parent: &Inode, e: &Inode, p: &[u8]) -> Result<()> {
    if !permits(&parent.attrs, c, W | X) {
        return Err(denied(c, "remove entries from the directory of", p));
    }
    if parent.attrs.mode & S_ISVTX != 0
        && !c.is_superuser()
        && e.attrs.owner != c.user
        && parent.attrs.owner != c.user
    {
        return Err(not_permitted(
            c,
            "remove or rename, in a sticky directory,",
            p,
        ));
    }
    Ok(())
}

/// Owner, group and mode of a new entry.
struct NewEntry {
    owner: String,
    group: String,
    mode: u32,
}

/// Checks that `c` may create `p` (write and search on its deepest
/// existing directory: its parent, or with `parents` the first directory
/// it makes) and gives its owner, group and mode, or `None` when `p`
/// exists already or a directory on the way is missing (without
/// `parents`) or not a directory: the command's rules answer then. `new`
/// is the path, `parents`, the mode and whether it is a directory.
fn new_entry(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    asked: Creation<'_>,
    c: &Caller,
) -> Result<Option<NewEntry>> {
    let Creation {
        path: p,
        parents,
        mode,
        dir: is_dir,
        owner,
        group,
    } = asked;
    let comps = path::components(p)?;
    let walked = walk(view, names, &comps, c)?;
    if walked.len() == comps.len() + 1 || (walked.len() < comps.len() && !parents) {
        return Ok(None);
    }
    let dir = walked.last().expect("the root is first");
    if !dir.attrs.kind.is_dir() {
        return Ok(None);
    }
    if !permits(&dir.attrs, c, W | X) {
        return Err(denied(
            c,
            "create entries in",
            &path::join_all(&comps[..walked.len() - 1]),
        ));
    }
    let owner = if c.is_superuser() && !owner.is_empty() {
        owner.to_owned()
    } else {
        c.user.clone()
    };
    // BSD semantics in a setgid directory (as Linux): the directory's
    // group, and a new directory is setgid too.
    let setgid_dir = dir.attrs.mode & S_ISGID != 0;
    let group = if setgid_dir {
        dir.attrs.group.clone()
    } else if c.is_superuser() || c.in_group(group) {
        group.to_owned()
    } else {
        c.primary_group().to_owned()
    };
    let mut mode = mode;
    if is_dir && setgid_dir {
        mode |= S_ISGID;
    }
    // A file setgid to a group its creator is not in loses the bit.
    if !is_dir && !c.is_superuser() && !c.in_group(&group) {
        mode &= !S_ISGID;
    }
    Ok(Some(NewEntry { owner, group, mode }))
}

/// `chmod`, `chown`, `chgrp`, `touch -d` made for `c`.
#[allow(clippy::too_many_arguments)]
fn set_attr<'c>(
    view: &(impl IndexRead + ?Sized),
    names: &Names,
    cmd: &'c Command,
    c: &Caller,
    p: &[u8],
    mode: Option<u32>,
    owner: &Option<String>,
    group: &Option<String>,
    mtime_ms: Option<u64>,
) -> Result<Cow<'c, Command>> {
    let Some(e) = existing(view, names, p, c)? else {
        return Ok(Cow::Borrowed(cmd));
    };
    let a = &e.attrs;
    let root = c.is_superuser();
    let is_owner = root || a.owner == c.user;
    let new_owner = owner.as_deref().filter(|o| *o != a.owner);
    let new_group = group.as_deref().filter(|g| *g != a.group);
    if new_owner.is_some() && !root {
        return Err(not_permitted(c, "change the owner of", p));
    }
    if let Some(g) = new_group {
        if !(root || (is_owner && c.in_group(g))) {
            return Err(not_permitted(c, &format!("give group {g} to"), p));
        }
    }
    let mut mode = mode;
    if let Some(m) = mode.filter(|m| *m != a.mode) {
        if !is_owner {
            return Err(not_permitted(c, "change the mode of", p));
        }
        // As Linux's chmod: the setgid bit of a file whose group the
        // owner is not in is dropped.
        let group_after = new_group.unwrap_or(&a.group);
        if !root && !a.kind.is_dir() && !c.in_group(group_after) {
            mode = Some(m & !S_ISGID);
        }
    }
    // Setting times: the owner, or anyone who may write (the mount passes
    // `touch`'s "now" as a time, so the two cannot be told apart here).
    if mtime_ms.is_some() && !is_owner && !permits(a, c, W) {
        return Err(denied(c, "set the times of", p));
    }
    // A change of owner or group drops a non-directory's setuid bit, and
    // its setgid bit when it is group-executable (as Linux's chown).
    if (new_owner.is_some() || new_group.is_some()) && !a.kind.is_dir() {
        let m = mode.unwrap_or(a.mode);
        let mut kept = m & !S_ISUID;
        if m & 0o010 != 0 {
            kept &= !S_ISGID;
        }
        if kept != m {
            mode = Some(kept);
        }
    }
    if mode == *cmd_mode(cmd) {
        return Ok(Cow::Borrowed(cmd));
    }
    Ok(Cow::Owned(Command::SetAttr {
        path: p.into(),
        mode,
        owner: owner.clone(),
        group: group.clone(),
        mtime_ms,
    }))
}

fn cmd_mode(cmd: &Command) -> &Option<u32> {
    match cmd {
        Command::SetAttr { mode, .. } => mode,
        _ => &None,
    }
}
