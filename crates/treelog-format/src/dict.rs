//! The owner and group dictionaries (seed 000 §3.3).
//!
//! Strings are mapped to `u8` ids: 0 is the empty string, 1..=255 are given
//! out in insertion order. Persisted in `inodes` at `0xFF..FD` (owner) and
//! `0xFF..FE` (group) as `[count 1B]` followed by `count` times
//! `[len 1B][bytes]`, entry `i` (0-based) having id `i + 1`.

use std::collections::HashMap;

use crate::error::{DictKind, Error, Result};

/// Most distinct non-empty strings one dictionary holds.
pub const DICT_CAPACITY: usize = 255;
/// Longest string a dictionary entry can hold (1-byte length).
pub const DICT_MAX_STRING: usize = 255;

/// One dictionary: string <-> u8 id.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Dict {
    /// `entries[i]` has id `i + 1`.
    entries: Vec<String>,
    index: HashMap<String, u8>,
}

impl Dict {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The id of `s`, if it has one (the empty string is always 0).
    pub fn id_of(&self, s: &str) -> Option<u8> {
        if s.is_empty() {
            return Some(0);
        }
        self.index.get(s).copied()
    }

    /// The string of `id`, or a corruption error for an id never given out.
    pub fn lookup(&self, id: u8) -> Result<&str> {
        if id == 0 {
            return Ok("");
        }
        self.entries
            .get(id as usize - 1)
            .map(String::as_str)
            .ok_or_else(|| Error::corrupt("inode entry", format!("dictionary id {id} is unknown")))
    }

    /// Whether interning `s` would succeed (without changing anything).
    pub fn check(&self, kind: DictKind, s: &str) -> Result<()> {
        if s.len() > DICT_MAX_STRING {
            return Err(Error::InvalidArgument(format!(
                "{kind} {s:?} is {} bytes; at most {DICT_MAX_STRING} are allowed",
                s.len()
            )));
        }
        if self.id_of(s).is_some() || self.entries.len() < DICT_CAPACITY {
            Ok(())
        } else {
            Err(Error::DictionaryFull(kind))
        }
    }

    /// The id of `s`, adding it if new. Returns `(id, added)`.
    pub fn intern(&mut self, kind: DictKind, s: &str) -> Result<(u8, bool)> {
        if let Some(id) = self.id_of(s) {
            return Ok((id, false));
        }
        self.check(kind, s)?;
        self.entries.push(s.to_owned());
        // check() guaranteed len <= 255.
        let id = u8::try_from(self.entries.len()).map_err(|_| Error::DictionaryFull(kind))?;
        self.index.insert(s.to_owned(), id);
        Ok((id, true))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out =
            Vec::with_capacity(1 + self.entries.iter().map(|e| 1 + e.len()).sum::<usize>());
        debug_assert!(self.entries.len() <= DICT_CAPACITY);
        out.push(self.entries.len() as u8);
        for e in &self.entries {
            debug_assert!(!e.is_empty() && e.len() <= DICT_MAX_STRING);
            out.push(e.len() as u8);
            out.extend_from_slice(e.as_bytes());
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Dict> {
        let bad = |d: String| Error::corrupt("dictionary", d);
        let (&count, mut rest) = b.split_first().ok_or_else(|| bad("empty value".into()))?;
        let mut d = Dict::default();
        for i in 0..count {
            let (&len, r) = rest
                .split_first()
                .ok_or_else(|| bad(format!("truncated before entry {}", i + 1)))?;
            let len = len as usize;
            if len == 0 {
                return Err(bad(format!(
                    "entry {} is empty (id 0 is the empty string)",
                    i + 1
                )));
            }
            if r.len() < len {
                return Err(bad(format!(
                    "entry {} needs {len} bytes, {} left",
                    i + 1,
                    r.len()
                )));
            }
            let s = std::str::from_utf8(&r[..len])
                .map_err(|_| bad(format!("entry {} is not UTF-8", i + 1)))?;
            if d.index.contains_key(s) {
                return Err(bad(format!("entry {} duplicates {s:?}", i + 1)));
            }
            d.entries.push(s.to_owned());
            d.index.insert(s.to_owned(), i + 1);
            rest = &r[len..];
        }
        if !rest.is_empty() {
            return Err(bad(format!("{} trailing bytes", rest.len())));
        }
        Ok(d)
    }
}

/// The owner and group dictionaries together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DictSet {
    pub owners: Dict,
    pub groups: Dict,
}

impl DictSet {
    pub fn get(&self, kind: DictKind) -> &Dict {
        match kind {
            DictKind::Owner => &self.owners,
            DictKind::Group => &self.groups,
        }
    }

    pub fn get_mut(&mut self, kind: DictKind) -> &mut Dict {
        match kind {
            DictKind::Owner => &mut self.owners,
            DictKind::Group => &mut self.groups,
        }
    }
}
