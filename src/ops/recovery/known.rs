//! What a replay remembers of the `inodes` keys it wrote or read, until
//! its batches are in the index (see `ReplayIndex` in the parent module).

use std::collections::HashMap;

/// What a remembered entry takes in [`Known`]'s arena, to size it.
const KNOWN_ENTRY_BYTES: usize = 128;

/// The `inodes` keys a replay wrote or read, with their newest values
/// (`None`: deleted or absent). Inode keys (8 bytes) map to a slice of one
/// arena: a replay remembers every entry it writes, and with a key and a
/// value allocated for each, remembering took a tenth of its CPU.
///
/// Ids are handed out in order, so the inodes a replay creates between
/// two forgets are one run of ids from the engine's `next_id` at the
/// forget: those are kept in an array by id (`dense`), where a hash table
/// missed the cache on every insert (~5% of a rebuild's CPU). Any other
/// 8-byte key (a parent from before, the dictionaries' counters) goes to
/// the hash table.
#[derive(Default)]
pub(super) struct Known {
    /// Inode ids `dense_from..dense_from + dense_span`, by `id -
    /// dense_from` (grown as ids come; [`Slot::UNKNOWN`] in the gaps).
    dense: Vec<Slot>,
    dense_from: u64,
    dense_span: usize,
    /// Slots of `dense` that are known.
    dense_known: usize,
    /// Other 8-byte keys as integers.
    short: HashMap<u64, Slot, ahash::RandomState>,
    /// The values of `dense` and `short`, one after another (a replaced
    /// one stays until the replay forgets, unless the new one fits in
    /// its place).
    arena: Vec<u8>,
    /// Every other key (dictionary names and ids, attributes, quotas).
    long: HashMap<Vec<u8>, Option<Vec<u8>>, ahash::RandomState>,
    /// Bytes of keys and values put into `long` since the last forget.
    long_bytes: usize,
}

/// Where a remembered 8-byte key's value is in [`Known`]'s arena, or that
/// it has none (absent or deleted), or that the replay does not know it.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Slot {
    at: usize,
    len: usize,
}

impl Slot {
    const UNKNOWN: Slot = Slot {
        at: 0,
        len: usize::MAX,
    };
    const ABSENT: Slot = Slot {
        at: 0,
        len: usize::MAX - 1,
    };

    /// Whether this slot's place in the arena has room for `len` bytes.
    fn holds(self, len: usize) -> bool {
        self != Slot::UNKNOWN && self != Slot::ABSENT && len <= self.len
    }

    fn value(self, arena: &[u8]) -> Option<Option<&[u8]>> {
        match self {
            Slot::UNKNOWN => None,
            Slot::ABSENT => Some(None),
            Slot { at, len } => Some(Some(&arena[at..at + len])),
        }
    }
}

impl Known {
    /// Room for `keys` inode keys and their entries ([`KNOWN_ENTRY_BYTES`]
    /// each); the
    /// run of new ids starts at `next_id`.
    pub(super) fn with_capacity(keys: usize, next_id: u64) -> Known {
        Known {
            dense: Vec::with_capacity(keys),
            dense_from: next_id,
            dense_span: keys.saturating_mul(2).max(1024),
            short: HashMap::with_capacity_and_hasher(keys / 4, Default::default()),
            arena: Vec::with_capacity(keys.saturating_mul(KNOWN_ENTRY_BYTES)),
            ..Known::default()
        }
    }

    pub(super) fn short_key(key: &[u8]) -> Option<u64> {
        <[u8; 8]>::try_from(key).ok().map(u64::from_be_bytes)
    }

    /// `k`'s place in `dense`, if it is in the run.
    fn dense_index(&self, k: u64) -> Option<usize> {
        let i = usize::try_from(k.checked_sub(self.dense_from)?).ok()?;
        (i < self.dense_span).then_some(i)
    }

    /// The newest value of `key`, if the replay knows it.
    pub(super) fn get(&self, key: &[u8]) -> Option<Option<&[u8]>> {
        match Self::short_key(key) {
            Some(k) => match self.dense_index(k) {
                Some(i) => self.dense.get(i)?.value(&self.arena),
                None => self.short.get(&k)?.value(&self.arena),
            },
            None => self.long.get(key).map(Option::as_deref),
        }
    }

    pub(super) fn insert(&mut self, key: &[u8], value: Option<&[u8]>) {
        match Self::short_key(key) {
            Some(k) => {
                let slot = match self.dense_index(k) {
                    Some(i) => {
                        if i >= self.dense.len() {
                            self.dense.resize(i + 1, Slot::UNKNOWN);
                        }
                        if self.dense[i] == Slot::UNKNOWN {
                            self.dense_known += 1;
                        }
                        &mut self.dense[i]
                    }
                    None => self.short.entry(k).or_insert(Slot::UNKNOWN),
                };
                *slot = match value {
                    // A value no longer than the one it replaces takes its
                    // place: an entry rewritten by its updates (a file's
                    // size, its completion) keeps one copy in the arena.
                    Some(v) if slot.holds(v.len()) => {
                        self.arena[slot.at..slot.at + v.len()].copy_from_slice(v);
                        Slot {
                            at: slot.at,
                            len: v.len(),
                        }
                    }
                    Some(v) => {
                        let at = self.arena.len();
                        self.arena.extend_from_slice(v);
                        Slot { at, len: v.len() }
                    }
                    None => Slot::ABSENT,
                };
            }
            None => {
                self.long_bytes += key.len() + value.map_or(0, <[u8]>::len);
                self.long.insert(key.to_vec(), value.map(<[u8]>::to_vec));
            }
        }
    }

    pub(super) fn len(&self) -> usize {
        self.dense_known + self.short.len() + self.long.len()
    }

    /// Bytes remembered since the last forget (a replaced value that did
    /// not fit in its place still counts: a bound, not a size).
    pub(super) fn bytes(&self) -> usize {
        self.arena.len()
            + std::mem::size_of::<Slot>() * self.dense.len()
            + 8 * self.short.len()
            + self.long_bytes
    }

    /// Forgets everything; the next run of new ids starts at `next_id`.
    pub(super) fn clear(&mut self, next_id: u64) {
        self.dense.clear();
        self.dense_from = next_id;
        self.dense_known = 0;
        self.short.clear();
        self.arena.clear();
        self.long.clear();
        self.long_bytes = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: 64,
            // Beside this file, as tests/model.rs keeps its own.
            failure_persistence: Some(Box::new(
                prop::test_runner::FileFailurePersistence::WithSource("proptest-regressions"),
            )),
            ..ProptestConfig::default()
        })]
        /// What the replay remembers answers as a map of its newest
        /// writes does, across forgets: 8-byte keys in the run of new ids,
        /// before it and past it (the array's gaps, the hash table), and
        /// longer keys.
        #[test]
        fn remembered_keys_answer_as_a_map_of_the_newest_writes(
            ops in prop::collection::vec(
                prop_oneof![
                    // A write: an id near the run's start, or anywhere.
                    8 => (prop_oneof![990u64..1100, any::<u64>()], prop::option::of(prop::collection::vec(any::<u8>(), 0..6)))
                        .prop_map(|(k, v)| (Some(k.to_be_bytes().to_vec()), v)),
                    1 => (prop::collection::vec(any::<u8>(), 0..12), prop::option::of(prop::collection::vec(any::<u8>(), 0..6)))
                        .prop_map(|(k, v)| (Some(k), v)),
                    // A forget (no key), the next run from an id near the
                    // old one (the value).
                    1 => (990u64..1100).prop_map(|n| (None, Some(n.to_be_bytes().to_vec()))),
                ],
                0..400,
            )
        ) {
            let mut known = Known::with_capacity(16, 1000);
            let mut model: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for (key, value) in &ops {
                match key {
                    Some(k) => {
                        known.insert(k, value.as_deref());
                        model.insert(k.clone(), value.clone());
                    }
                    None => {
                        let n = u64::from_be_bytes(value.as_deref().unwrap().try_into().unwrap());
                        known.clear(n);
                        model.clear();
                    }
                }
                prop_assert_eq!(known.len(), model.len());
            }
            for (key, _) in &ops {
                if let Some(k) = key {
                    let want = model.get(k).map(|v| v.as_deref());
                    prop_assert_eq!(known.get(k), want, "key {:?}", k);
                }
            }
            // Keys never written are not known.
            for k in [0u64, 999, 1000, 1031, 1032, 5000, u64::MAX] {
                let k = k.to_be_bytes();
                if !model.contains_key(&k[..]) {
                    prop_assert_eq!(known.get(&k), None);
                }
            }
        }
    }
}
