//! Walking a subtree at one state, a page of children at a time.

use crate::bytestr::ByteString;
use crate::engine::names::Names;
use crate::error::Result;
use crate::index::IndexRead;

/// A walk of the directories under one directory, depth first and a page of
/// children at a time (each entry before its children, names in byte order
/// within a directory): it holds one page per directory level. The caller
/// reads every step at the same state (a pinned snapshot) for a consistent
/// walk; the snapshot subscription and [`crate::Treelog::walk`] use it.
pub(crate) struct TreeWalk {
    stack: Vec<WalkFrame>,
    page: usize,
}

struct WalkFrame {
    id: u64,
    path: ByteString,
    buf: std::collections::VecDeque<crate::types::DirEntry>,
    after: Option<ByteString>,
    done: bool,
}

impl WalkFrame {
    fn new(id: u64, path: ByteString) -> WalkFrame {
        WalkFrame {
            id,
            path,
            buf: Default::default(),
            after: None,
            done: false,
        }
    }
}

impl TreeWalk {
    /// A walk of the children of directory `id`, whose path is `path`,
    /// reading `page` entries at a time.
    pub(crate) fn new(id: u64, path: ByteString, page: usize) -> TreeWalk {
        TreeWalk {
            stack: vec![WalkFrame::new(id, path)],
            page,
        }
    }

    /// The next entry and its path, or `None` at the end.
    pub(crate) fn next(
        &mut self,
        idx: &(impl IndexRead + ?Sized),
        names: &Names,
    ) -> Result<Option<(ByteString, crate::types::DirEntry)>> {
        loop {
            let Some(top) = self.stack.last_mut() else {
                return Ok(None);
            };
            let Some(e) = top.buf.pop_front() else {
                if top.done {
                    self.stack.pop();
                    continue;
                }
                let (page, more) = crate::engine::list_children(
                    idx,
                    names,
                    top.id,
                    top.after.as_ref().map(|a| a.as_bytes()),
                    self.page,
                )?;
                top.done = !more;
                top.after = page.last().map(|e| e.name.clone());
                top.buf.extend(page);
                continue;
            };
            let p = crate::path::join(&top.path, &e.name);
            if e.inode.attrs.kind.is_dir() {
                self.stack.push(WalkFrame::new(e.inode.id, p.clone()));
            }
            return Ok(Some((p, e)));
        }
    }
}
