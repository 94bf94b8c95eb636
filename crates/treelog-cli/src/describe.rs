//! How inodes and events are shown to humans (`ls -l` lines, log events),
//! shared by the commands, `tail` and `demo`.

use crate::output::quote;
use crate::timefmt::{human_size, TimeFormatter, TimeStyle};
use crate::types::Inode;

/// The mode as `ls -l` shows it (`drwxr-x---`, with `s`/`S` for
/// set-user/group-id and `t`/`T` for sticky, as GNU does).
pub(crate) fn mode_string(i: &Inode) -> String {
    let m = i.attrs.mode;
    let mut s = String::with_capacity(10);
    s.push(match i.attrs.kind {
        crate::types::FileType::Directory => 'd',
        crate::types::FileType::Symlink => 'l',
        crate::types::FileType::File => '-',
    });
    // (shift of the rwx triple, its special bit, the letter for it)
    for (shift, special, letter) in [(6, 0o4000, 's'), (3, 0o2000, 's'), (0, 0o1000, 't')] {
        let b = (m >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(match (b & 1 != 0, m & special != 0) {
            (true, true) => letter,
            (false, true) => letter.to_ascii_uppercase(),
            (true, false) => 'x',
            (false, false) => '-',
        });
    }
    s
}

/// How `ls -l` lines show times and sizes.
pub(crate) struct LongFormat {
    pub times: TimeFormatter,
    /// Sizes as `1.5K`, `23M` (`ls -h`).
    pub human: bool,
}

impl LongFormat {
    pub(crate) fn new(style: TimeStyle, human: bool) -> LongFormat {
        LongFormat {
            times: TimeFormatter::new(style),
            human,
        }
    }

    /// For dumps and streams (`admin dump`, `tail`): exact sizes and
    /// `full-iso` times, which keep the milliseconds.
    pub(crate) fn exact() -> LongFormat {
        LongFormat::new(TimeStyle::full_iso(), false)
    }
}

/// An `ls -l` line for an inode shown as `name` (quoted here for humans,
/// see [`quote`]): mode, owner, group, size, modification time, name (`/`
/// after a directory, ` (incomplete)` after a file not yet complete, `@`
/// after a symbolic link, whose target `readlink` shows), id.
pub(crate) fn long_line(i: &Inode, name: &[u8], f: &LongFormat) -> String {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            quote(s).into_owned()
        }
    };
    let size = if f.human {
        format!("{:>5}", human_size(i.attrs.size))
    } else {
        format!("{:>12}", i.attrs.size)
    };
    format!(
        "{} {:>8} {:>8} {size} {} {}{} id={}",
        mode_string(i),
        or_dash(&i.attrs.owner),
        or_dash(&i.attrs.group),
        f.times.format(i.attrs.mtime_ms),
        quote(name),
        if i.attrs.kind.is_dir() {
            "/"
        } else if i.attrs.kind.is_symlink() {
            "@"
        } else if i.attrs.complete {
            ""
        } else {
            " (incomplete)"
        },
        i.id
    )
}

/// One line describing an event, for humans (paths quoted, see [`quote`]).
pub(crate) fn describe_event(ev: &crate::event::Event) -> String {
    use crate::event::Event;
    match ev {
        Event::Create {
            id, path, attrs, ..
        } => format!(
            "create {} {} id={id} mode={:04o} owner={:?} group={:?}",
            match attrs.kind {
                crate::types::FileType::Directory => "dir ",
                crate::types::FileType::Symlink => "link",
                crate::types::FileType::File => "file",
            },
            quote(path),
            attrs.mode,
            attrs.owner,
            attrs.group
        ),
        Event::Complete(u) => format!(
            "complete {} id={} size={}",
            quote(&u.path),
            u.id,
            u.new.size
        ),
        Event::SetSize(u) => format!(
            "set_size {} id={} size {} -> {}",
            quote(&u.path),
            u.id,
            u.old.size,
            u.new.size
        ),
        Event::SetAttr(u) => format!(
            "set_attr {} id={} mode {:04o}->{:04o} owner {:?}->{:?} group {:?}->{:?} mtime {}->{}",
            quote(&u.path),
            u.id,
            u.old.mode,
            u.new.mode,
            u.old.owner,
            u.new.owner,
            u.old.group,
            u.new.group,
            u.old.mtime_ms,
            u.new.mtime_ms
        ),
        Event::Delete { id, path, .. } => format!("delete {} id={id}", quote(path)),
        Event::Rename {
            id,
            old_path,
            new_path,
            ..
        } => format!("rename {} -> {} id={id}", quote(old_path), quote(new_path)),
        Event::Symlink {
            id, path, target, ..
        } => format!("symlink {} -> {} id={id}", quote(path), quote(target)),
        Event::SetXattr {
            id,
            path,
            name,
            value,
            ..
        } => format!(
            "set_xattr {} id={id} {} ({} bytes)",
            quote(path),
            quote(name),
            value.len()
        ),
        Event::RemoveXattr { id, path, name, .. } => {
            format!("remove_xattr {} id={id} {}", quote(path), quote(name))
        }
        Event::SetQuota { id, path, quota } => format!(
            "set_quota {} id={id} inodes {} bytes {} (usage: {} inodes, {} bytes)",
            quote(path),
            limit(quota.limit_inodes),
            limit(quota.limit_bytes),
            quota.usage.inodes(),
            quota.usage.bytes
        ),
        Event::ClearQuota { id, path, .. } => format!("clear_quota {} id={id}", quote(path)),
    }
}

/// A quota's limit for humans: the number, or `none`.
pub(crate) fn limit(l: Option<u64>) -> String {
    l.map_or_else(|| "none".to_owned(), |n| n.to_string())
}
