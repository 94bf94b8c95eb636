//! Owner and group names from their dictionary ids (format 2: one key per
//! name, docs/FORMAT.md §4.3), read through whatever index view the caller
//! reads the inode with, and cached per thread.
//!
//! Exact without invalidation: an id is given once, to one name, and never
//! reused or removed, so a cached pair stays true for as long as the
//! database lives; and every reader that finds an id in an entry reads at
//! a state that holds the id's dictionary key. The cache is keyed by the
//! [`Names`] instance (one per open database) so that two databases of
//! one process never share an entry.
//!
//! Per thread and direct-mapped: a hit is a hash and a comparison, with
//! no shared write (a lock or a reference count here would bounce a cache
//! line between the readers' cores on every stat).

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{DictKind, Error, Result};
use crate::format::v2;
use crate::index::{Cf, IndexRead};

/// Entries of each thread's cache.
const SLOTS: usize = 1024;

struct Slot {
    names: u64,
    owner: bool,
    id: u32,
    name: Arc<str>,
}

thread_local! {
    static CACHE: RefCell<Vec<Option<Slot>>> = const { RefCell::new(Vec::new()) };
}

static NEXT: AtomicU64 = AtomicU64::new(1);

/// Resolves the dictionary ids of one database.
#[derive(Debug)]
pub(crate) struct Names {
    instance: u64,
}

impl Default for Names {
    fn default() -> Self {
        Names::new()
    }
}

impl Names {
    pub(crate) fn new() -> Names {
        Names {
            instance: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The name of dictionary id `id` of `kind` (0 is the empty string),
    /// read through `view` when this thread has not cached it.
    pub(crate) fn name(
        &self,
        view: &(impl IndexRead + ?Sized),
        kind: DictKind,
        id: u32,
    ) -> Result<String> {
        let mut out = String::new();
        self.name_into(view, kind, id, &mut out)?;
        Ok(out)
    }

    /// [`Names::name`] written into `out` (cleared first), reusing its room:
    /// a listing decodes every entry's owner and group into one buffer.
    pub(crate) fn name_into(
        &self,
        view: &(impl IndexRead + ?Sized),
        kind: DictKind,
        id: u32,
        out: &mut String,
    ) -> Result<()> {
        out.clear();
        if id == 0 {
            return Ok(());
        }
        let owner = kind == DictKind::Owner;
        let slot =
            (crc32c::crc32c_append(self.instance as u32 ^ u32::from(owner), &id.to_le_bytes())
                as usize)
                % SLOTS;
        let hit = CACHE.with(|c| match c.borrow().get(slot) {
            Some(Some(s)) if s.names == self.instance && s.owner == owner && s.id == id => {
                out.push_str(&s.name);
                true
            }
            _ => false,
        });
        if hit {
            return Ok(());
        }
        let name = lookup(view, kind, id)?;
        out.push_str(&name);
        CACHE.with(|c| {
            let mut c = c.borrow_mut();
            if c.is_empty() {
                c.resize_with(SLOTS, || None);
            }
            c[slot] = Some(Slot {
                names: self.instance,
                owner,
                id,
                name: Arc::from(name.as_str()),
            });
        });
        Ok(())
    }
}

/// Reads the name of `id` from the dictionary, uncached.
pub(crate) fn lookup(view: &(impl IndexRead + ?Sized), kind: DictKind, id: u32) -> Result<String> {
    let owner = kind == DictKind::Owner;
    match view.get(Cf::Inodes, &v2::dict_by_id_key(owner, id))? {
        Some(v) => String::from_utf8(v).map_err(|_| {
            Error::corrupt("dictionary", format!("{kind} name of id {id} is not UTF-8"))
        }),
        None => Err(Error::corrupt(
            "inode entry",
            format!("{kind} dictionary id {id} is unknown"),
        )),
    }
}
