//! The checks and small decisions the planning rules share.

use super::*;

pub(super) fn check_mode(mode: u32) -> Result<()> {
    if mode > 0o7777 {
        return Err(Error::InvalidArgument(format!(
            "mode {mode:#o} has bits outside 0o7777"
        )));
    }
    Ok(())
}

/// Longest symbolic link target (Linux's `PATH_MAX`).
pub(super) const MAX_SYMLINK_TARGET: usize = 4096;

pub(super) fn check_target(target: &[u8]) -> Result<()> {
    if target.is_empty() || target.len() > MAX_SYMLINK_TARGET || target.contains(&0) {
        return Err(Error::InvalidArgument(format!(
            "a symbolic link's target is 1…{MAX_SYMLINK_TARGET} bytes without NUL, not {} bytes{}",
            target.len(),
            if target.contains(&0) {
                " with a NUL"
            } else {
                ""
            }
        )));
    }
    Ok(())
}

/// The namespaces of extended attribute names (Linux's).
pub(super) const XATTR_NAMESPACES: [&str; 4] = ["user.", "trusted.", "security.", "system."];

pub(super) fn check_xattr_name(name: &str) -> Result<()> {
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
pub(super) struct Perms<'c> {
    pub(super) mode: u32,
    pub(super) owner: &'c str,
    pub(super) group: &'c str,
}

impl<'c> Perms<'c> {
    pub(super) fn new(mode: u32, owner: &'c str, group: &'c str) -> Perms<'c> {
        Perms { mode, owner, group }
    }

    /// The attributes of a new inode of `kind` with these owner and group:
    /// empty, created, modified and changed `now`; a directory or a
    /// symbolic link is complete at once, a file once `complete` says its
    /// size.
    pub(super) fn new_inode(&self, kind: FileType, mode: u32, block_size: u64, now: u64) -> Attrs {
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
pub(super) struct QuotaDeltas {
    pub(super) by_quota: BTreeMap<u64, (Usage, Usage)>,
    /// A quota whose deltas themselves pass the counters' range (2^64).
    pub(super) overflow: Option<u64>,
}

impl QuotaDeltas {
    pub(super) fn add(&mut self, quotas: &[u64], plus: &Usage, minus: &Usage) {
        for q in quotas {
            let e = self.by_quota.entry(*q).or_default();
            match (e.0.checked_add(plus), e.1.checked_add(minus)) {
                (Some(p), Some(m)) => *e = (p, m),
                _ => self.overflow = self.overflow.or(Some(*q)),
            }
        }
    }

    pub(super) fn of(events: &[Event]) -> QuotaDeltas {
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
pub(super) fn size_delta(old: u64, new: u64) -> (Usage, Usage) {
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

/// The last inode of a chain of creates.
#[derive(Clone, Copy)]
pub(super) enum Last<'a> {
    Inode(&'a Attrs),
    Symlink(&'a Attrs, &'a [u8]),
}

/// A dictionary string's own limit (1…255 bytes, or empty for none).
pub(super) fn check_dict_string(kind: DictKind, s: &str) -> Result<()> {
    if s.len() > format::dict::DICT_MAX_STRING {
        return Err(Error::InvalidArgument(format!(
            "{kind} {s:?} is {} bytes; at most {} are allowed",
            s.len(),
            format::dict::DICT_MAX_STRING
        )));
    }
    Ok(())
}

pub(super) fn update(r: Resolved, path: ByteString, new: Attrs) -> Update {
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
