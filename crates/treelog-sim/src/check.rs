//! The invariants, asked of any set of paths (a reader's view, or a
//! subscriber's copy).

use std::collections::BTreeSet;

use crate::log::{join, parent, Cluster};

/// The moved subtree (`rels`, relative paths, "" its root) is wholly at
/// `src` and nowhere at `dst`, or wholly at `dst` and nowhere at `src`.
pub fn exactly_one(
    view: &BTreeSet<String>,
    src: &str,
    dst: &str,
    rels: &[String],
) -> Result<(), String> {
    let count = |root: &str| {
        rels.iter()
            .filter(|r| view.contains(&join(root, r)))
            .count()
    };
    let (s, d) = (count(src), count(dst));
    let n = rels.len();
    if (s == n && d == 0) || (s == 0 && d == n) {
        Ok(())
    } else {
        Err(format!(
            "{s} of {n} entries at {src} and {d} at {dst}: {view:?}"
        ))
    }
}

/// Every entry's parent is there (no entry appears under a directory that
/// is not, as when a create is seen before the rename that made its
/// parent).
pub fn no_orphans(view: &BTreeSet<String>) -> Result<(), String> {
    match view
        .iter()
        .find(|p| parent(p) != "/" && !view.contains(parent(p)))
    {
        Some(p) => Err(format!("{p} without its parent: {view:?}")),
        None => Ok(()),
    }
}

/// Each partition's live state is what its log replays to (the log is the
/// truth: a restart sees the same).
pub fn logs_are_truth(c: &Cluster) -> Result<(), String> {
    for (i, p) in c.parts.iter().enumerate() {
        let r = p.replayed();
        if r.entries != p.state.entries
            || r.staged != p.state.staged
            || r.frozen != p.state.frozen
            || r.decided != p.state.decided
        {
            return Err(format!("partition {i}: live state differs from its log's"));
        }
    }
    Ok(())
}
