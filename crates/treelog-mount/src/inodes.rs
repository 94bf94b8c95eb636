//! The inodes the kernel knows: for each, its parent and name (to build
//! the paths treelog's commands take) and the kernel's lookup count (the
//! entry goes when the kernel forgets it). FUSE inode numbers are
//! treelog's inode ids: the root is 1 in both.

use std::collections::HashMap;

use treelog_proto::path::MAX_PATH_LEN;
use treelog_proto::ByteString;

pub(crate) const ROOT: u64 = 1;

struct Node {
    parent: u64,
    name: ByteString,
    /// Lookups the kernel holds (the root's never drops).
    nlookup: u64,
    /// Removed from the namespace while the kernel still holds it: no
    /// path leads to it.
    gone: bool,
}

/// Not thread-safe by itself: the mount keeps it behind a mutex.
pub(crate) struct Inodes {
    nodes: HashMap<u64, Node>,
}

impl Inodes {
    pub(crate) fn new() -> Inodes {
        let mut nodes = HashMap::new();
        nodes.insert(
            ROOT,
            Node {
                parent: ROOT,
                name: ByteString::new(),
                nlookup: 1,
                gone: false,
            },
        );
        Inodes { nodes }
    }

    pub(crate) fn len(&self) -> usize {
        self.nodes.len()
    }

    pub(crate) fn contains(&self, ino: u64) -> bool {
        self.nodes.contains_key(&ino)
    }

    /// The kernel was given `ino` as `parent`/`name` once more.
    pub(crate) fn remember(&mut self, ino: u64, parent: u64, name: impl AsRef<[u8]>) {
        let name = name.as_ref();
        if ino == ROOT {
            return;
        }
        let n = self.nodes.entry(ino).or_insert_with(|| Node {
            parent,
            name: ByteString::new(),
            nlookup: 0,
            gone: false,
        });
        n.nlookup += 1;
        n.parent = parent;
        n.gone = false;
        if n.name != name {
            n.name = name.into();
        }
    }

    /// The kernel dropped `count` of its lookups of `ino`.
    pub(crate) fn forget(&mut self, ino: u64, count: u64) {
        if ino == ROOT {
            return;
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.nlookup = n.nlookup.saturating_sub(count);
            if n.nlookup == 0 {
                self.nodes.remove(&ino);
            }
        }
    }

    /// `ino` now lives at `parent`/`name` (a rename seen or made).
    pub(crate) fn moved(&mut self, ino: u64, parent: u64, name: impl AsRef<[u8]>) {
        let name = name.as_ref();
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = parent;
            n.name = name.into();
            n.gone = false;
        }
    }

    pub(crate) fn removed(&mut self, ino: u64) {
        if let Some(n) = self.nodes.get_mut(&ino) {
            if ino != ROOT {
                n.gone = true;
            }
        }
    }

    /// The parent the table holds for `ino` (the root is its own).
    pub(crate) fn parent(&self, ino: u64) -> Option<u64> {
        self.nodes.get(&ino).map(|n| n.parent)
    }

    /// The absolute path of `ino`, or `None` when it is unknown or gone
    /// (or a cycle, which only a table gone wrong could hold).
    pub(crate) fn path(&self, ino: u64) -> Option<ByteString> {
        let mut names = Vec::new();
        let mut cur = ino;
        let mut len = 0;
        while cur != ROOT {
            let n = self.nodes.get(&cur)?;
            if n.gone {
                return None;
            }
            len += n.name.len() + 1;
            if len > MAX_PATH_LEN {
                return None;
            }
            names.push(n.name.as_bytes());
            cur = n.parent;
        }
        if names.is_empty() {
            return Some("/".into());
        }
        let mut p = Vec::with_capacity(len);
        for n in names.iter().rev() {
            p.push(b'/');
            p.extend_from_slice(n);
        }
        Some(p.into())
    }

    /// Every (parent, name) and inode the kernel may cache: what a resync
    /// invalidates.
    pub(crate) fn everything(&self) -> (Vec<(u64, ByteString)>, Vec<u64>) {
        let entries = self
            .nodes
            .iter()
            .filter(|(ino, _)| **ino != ROOT)
            .map(|(_, n)| (n.parent, n.name.clone()))
            .collect();
        (entries, self.nodes.keys().copied().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_follow_moves_and_forgets() {
        let mut t = Inodes::new();
        assert_eq!(t.path(ROOT).as_deref(), Some("/".into()));
        t.remember(5, ROOT, "a");
        t.remember(9, 5, "b");
        assert_eq!(t.path(9).as_deref(), Some("/a/b".into()));
        t.moved(5, ROOT, "z");
        assert_eq!(t.path(9).as_deref(), Some("/z/b".into()));
        t.removed(5);
        assert_eq!(t.path(9), None);
        t.forget(9, 1);
        assert!(!t.contains(9));
        t.remember(5, ROOT, "y");
        assert_eq!(t.path(5).as_deref(), Some("/y".into()));
        t.forget(5, 1);
        assert!(t.contains(5), "two lookups, one forgotten");
        t.forget(5, 1);
        assert!(!t.contains(5));
        assert_eq!(t.len(), 1);
        t.forget(ROOT, 10);
        assert_eq!(t.path(ROOT).as_deref(), Some("/".into()));
    }
}
