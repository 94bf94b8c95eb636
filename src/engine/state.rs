//! The in-memory part of the index state the writer keeps between groups.

use super::*;

/// The in-memory part of the index state the writer keeps between groups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EngineState {
    /// The highest owner dictionary id given (the counter at `…fd`).
    pub owners: u32,
    /// The highest group dictionary id given (`…fe`).
    pub groups: u32,
    /// The persisted `next_id` value: ids below it have been reserved.
    pub id_bound: u64,
    /// The next id the writer hands out (starts at `id_bound` after open, so
    /// up to `ID_BLOCK - 1` ids are skipped per restart, as in seed 000).
    pub next_id: u64,
    /// The directories that have a quota (their keys, loaded at open): a
    /// write finds the quotas it charges among the ids on its path without
    /// reading an inode, and a namespace without quotas checks nothing.
    pub quotas: BTreeSet<u64>,
}

impl EngineState {
    /// Loads the state from an index of format 2.
    pub(crate) fn load(view: &(impl IndexRead + ?Sized)) -> Result<EngineState> {
        let counter = |key| -> Result<u32> {
            match view.get(Cf::Inodes, &inode_key(key))? {
                Some(v) => v2::decode_u32_le("dictionary counter", &v),
                None => Err(Error::corrupt("index", "a dictionary counter is missing")),
            }
        };
        let owners = counter(OWNER_DICT_KEY)?;
        let groups = counter(GROUP_DICT_KEY)?;
        let id_bound = match view.get(Cf::Inodes, &inode_key(NEXT_ID_KEY))? {
            Some(v) => format::decode_next_id_value(&v)?,
            None => return Err(Error::corrupt("index", "next_id key is missing")),
        };
        let mut quotas = BTreeSet::new();
        for_each_under(view, Cf::Inodes, &v2::quota_prefix(), |k, _| {
            match v2::decode_key_v2(k)? {
                v2::KeyV2::Quota(id) => quotas.insert(id),
                other => {
                    return Err(Error::corrupt(
                        "index",
                        format!("{other:?} under the quotas' prefix"),
                    ))
                }
            };
            Ok(())
        })?;
        Ok(EngineState {
            owners,
            groups,
            id_bound,
            next_id: id_bound,
            quotas,
        })
    }

    pub(super) fn counter(&mut self, kind: DictKind) -> &mut u32 {
        match kind {
            DictKind::Owner => &mut self.owners,
            DictKind::Group => &mut self.groups,
        }
    }
}

/// The index entries of an empty namespace (see
/// [`format::empty_namespace_inodes`]).
#[cfg(test)]
pub(crate) fn initial_index_writes<R: IndexRead + ?Sized>(ov: &mut Overlay<'_, R>) {
    for (k, v) in format::empty_namespace_inodes() {
        ov.put(Cf::Inodes, k.to_vec(), v);
    }
}
