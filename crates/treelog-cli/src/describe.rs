//! How inodes and events are shown to humans (`ls -l` lines, log events),
//! shared by the commands, `tail` and `demo`.

use crate::output::quote;
use crate::types::Inode;

pub fn mode_string(i: &Inode) -> String {
    let mut s = String::with_capacity(10);
    s.push(if i.attrs.kind.is_dir() { 'd' } else { '-' });
    for shift in [6, 3, 0] {
        let b = (i.attrs.mode >> shift) & 7;
        s.push(if b & 4 != 0 { 'r' } else { '-' });
        s.push(if b & 2 != 0 { 'w' } else { '-' });
        s.push(if b & 1 != 0 { 'x' } else { '-' });
    }
    s
}

/// An `ls -l` line for an inode shown as `name` (quoted here for humans,
/// see [`quote`]).
pub fn long_line(i: &Inode, name: &str) -> String {
    let or_dash = |s: &str| {
        if s.is_empty() {
            "-".to_owned()
        } else {
            quote(s).into_owned()
        }
    };
    format!(
        "{} {:>8} {:>8} {:>12} {:>14} {}{} id={}",
        mode_string(i),
        or_dash(&i.attrs.owner),
        or_dash(&i.attrs.group),
        i.attrs.size,
        i.attrs.mtime_ms,
        quote(name),
        if i.attrs.kind.is_dir() {
            "/"
        } else if i.attrs.complete {
            ""
        } else {
            " (incomplete)"
        },
        i.id
    )
}

/// One line describing an event, for humans (paths quoted, see [`quote`]).
pub fn describe_event(ev: &crate::event::Event) -> String {
    use crate::event::Event;
    match ev {
        Event::Create {
            id, path, attrs, ..
        } => format!(
            "create {} {} id={id} mode={:04o} owner={:?} group={:?}",
            if attrs.kind.is_dir() { "dir " } else { "file" },
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
    }
}
