//! Operator tools: index digest, structural check, verify against a replay
//! of the log, rebuild, and a readable dump.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use crate::engine::names::Names;
use crate::engine::{self, EngineState};
use crate::error::{DictKind, Error, Result};
use crate::format::v2::{self, InodeEntryV2, KeyV2};
use crate::format::{self, MAX_INODE_ID, ROOT_ID};
use crate::index::{Cf, IndexRead};
use crate::store::{Store, StoreOptions, WalRecovery, CF_EDGES, CF_INODES};

/// SHA-256 over every key and value of `inodes` then `edges`, in key order.
/// Two stores with the same digest have byte-identical index CFs.
pub fn index_digest(store: &Store) -> Result<String> {
    index_summary(store).map(|s| s.digest)
}

/// The index's digest ([`index_digest`]) and size, from one scan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct IndexSummary {
    pub digest: String,
    /// Inodes, the root included (the dictionaries and `next_id` are not).
    pub inodes: u64,
    pub edges: u64,
}

/// See [`IndexSummary`].
pub fn index_summary(store: &Store) -> Result<IndexSummary> {
    let mut h = Sha256::new();
    let (mut inodes, mut edges) = (0u64, 0u64);
    for (tag, name) in [(b'I', CF_INODES), (b'E', CF_EDGES)] {
        for item in store.scan_cf(name)? {
            let (k, v) = item?;
            if tag == b'E' {
                edges += 1;
            } else if format::decode_inode_key(&k).is_ok_and(|id| id <= MAX_INODE_ID) {
                inodes += 1;
            }
            h.update([tag]);
            h.update((k.len() as u32).to_be_bytes());
            h.update(&k);
            h.update((v.len() as u32).to_be_bytes());
            h.update(&v);
        }
    }
    Ok(IndexSummary {
        digest: hex::encode(h.finalize()),
        inodes,
        edges,
    })
}

/// Checks the index's structure: every edge points to an inode that names
/// it back, every inode but the root is reachable through its edge, parents
/// are directories, `next_id` is above every id, dictionary ids resolve and
/// the dictionaries' two directions agree, the flags of an inode match the
/// keys it has (extended attributes, quota), and every quota's usage is
/// what a walk of its subtree counts. Returns the problems found (empty
/// when sound).
pub fn check_structure(store: &Store) -> Result<Vec<String>> {
    let mut problems = Vec::new();
    let index = store.index();
    let state = EngineState::load(&index)?;
    let names = Names::new();
    let mut max_id = 0u64;
    let mut inodes = 0u64;
    // Dictionary entries seen by id, per owner/group: (id -> name).
    let mut by_id: [std::collections::BTreeMap<u32, Vec<u8>>; 2] = Default::default();
    let mut by_name: [Vec<(Vec<u8>, u32)>; 2] = Default::default();
    let mut quota_keys = Vec::new();
    let mut xattr_keys = std::collections::BTreeSet::new();
    // Inodes whose flags say they have extended attributes, or a quota.
    let mut xattr_flags = std::collections::BTreeSet::new();
    let mut quota_flags = std::collections::BTreeSet::new();
    for item in store.scan_cf(CF_INODES)? {
        let (k, v) = item?;
        let key = match v2::decode_key_v2(&k) {
            Ok(key) => key,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        match key {
            KeyV2::Inode(id) => {
                inodes += 1;
                max_id = max_id.max(id);
                let e = match InodeEntryV2::decode(&v) {
                    Ok(e) => e,
                    Err(err) => {
                        problems.push(format!("inode {id}: {err}"));
                        continue;
                    }
                };
                if let Err(err) = engine::inode_from_entry(&index, &names, id, &e) {
                    problems.push(format!("inode {id}: {err}"));
                }
                // Compared with the keys found, at the end (no read here:
                // this scan reads every inode).
                if e.flags & v2::FLAG_HAS_XATTRS != 0 {
                    xattr_flags.insert(id);
                }
                if e.flags & v2::FLAG_HAS_QUOTA != 0 {
                    quota_flags.insert(id);
                    if e.kind != v2::KIND_DIRECTORY {
                        problems.push(format!("inode {id}: a quota on a non-directory"));
                    }
                }
                if id == ROOT_ID {
                    if e.kind != v2::KIND_DIRECTORY || e.parent_id != 0 || !e.name.is_empty() {
                        problems
                            .push("root inode is not an unnamed directory with parent 0".into());
                    }
                    continue;
                }
                match index.get(Cf::Edges, &format::edge_key(e.parent_id, &e.name))? {
                    Some(v) if format::decode_edge_value(&v)? == id => {}
                    Some(v) => problems.push(format!(
                        "inode {id}: edge ({}, {:?}) points to {} instead",
                        e.parent_id,
                        String::from_utf8_lossy(&e.name),
                        format::decode_edge_value(&v)?
                    )),
                    None => problems.push(format!(
                        "inode {id}: no edge ({}, {:?}) leads to it",
                        e.parent_id,
                        String::from_utf8_lossy(&e.name)
                    )),
                }
            }
            KeyV2::Xattrs(id) => {
                xattr_keys.insert(id);
                if let Err(e) = v2::XattrList::decode(&v) {
                    problems.push(format!("extended attributes of {id}: {e}"));
                }
            }
            KeyV2::Quota(id) => match v2::QuotaEntry::decode(&v) {
                Ok(q) => quota_keys.push((id, q)),
                Err(e) => problems.push(format!("quota of {id}: {e}")),
            },
            KeyV2::DictById { owner, id } => {
                by_id[usize::from(owner)].insert(id, v.to_vec());
            }
            KeyV2::DictByName { owner, name } => match v2::decode_u32_le("dictionary id", &v) {
                Ok(id) => by_name[usize::from(owner)].push((name.to_vec(), id)),
                Err(e) => problems.push(e.to_string()),
            },
            KeyV2::DictCount { .. } | KeyV2::NextId => {}
        }
    }
    for (owner, count) in [(false, state.groups), (true, state.owners)] {
        let kind = if owner { "owner" } else { "group" };
        let ids = &by_id[usize::from(owner)];
        if ids.len() as u64 != u64::from(count)
            || ids.keys().next_back().is_some_and(|m| *m != count)
        {
            problems.push(format!(
                "the {kind} dictionary counts {count} names but holds ids {:?}…",
                ids.keys().take(4).collect::<Vec<_>>()
            ));
        }
        let names_of = &by_name[usize::from(owner)];
        if names_of.len() != ids.len() {
            problems.push(format!(
                "the {kind} dictionary has {} names by id and {} by name",
                ids.len(),
                names_of.len()
            ));
        }
        for (name, id) in names_of {
            if ids.get(id) != Some(name) {
                problems.push(format!(
                    "{kind} {:?} has id {id}, whose name is {:?}",
                    String::from_utf8_lossy(name),
                    ids.get(id).map(|n| String::from_utf8_lossy(n).into_owned())
                ));
            }
        }
    }
    for id in xattr_keys.symmetric_difference(&xattr_flags) {
        problems.push(format!(
            "inode {id}: its flag and its extended attributes disagree (or it does not exist)"
        ));
    }
    let quota_ids: std::collections::BTreeSet<u64> = quota_keys.iter().map(|(id, _)| *id).collect();
    for id in quota_ids
        .symmetric_difference(&quota_flags)
        .chain(quota_ids.symmetric_difference(&state.quotas))
    {
        problems.push(format!(
            "inode {id}: its flag, its quota key and the quotas an open loads disagree"
        ));
    }
    for (id, q) in &quota_keys {
        let what = format!("directory {id}");
        match engine::count_subtree_walking(&index, *id, usize::MAX, what.as_bytes().into()) {
            Ok(c) => {
                let mut walked = c.usage;
                walked.directories = walked.directories.saturating_sub(1);
                if walked != q.to_quota().usage {
                    problems.push(format!(
                        "the quota of {id} counts {:?}, its subtree holds {walked:?}",
                        q.to_quota().usage
                    ));
                }
            }
            Err(e) => problems.push(format!("the quota of {id}: {e}")),
        }
    }
    if store
        .index()
        .get(Cf::Inodes, &format::inode_key(ROOT_ID))?
        .is_none()
    {
        problems.push("root inode is missing".into());
    }
    let mut edges = 0u64;
    for item in store.scan_cf(CF_EDGES)? {
        let (k, v) = item?;
        edges += 1;
        let (parent, name) = format::decode_edge_key(&k)?;
        let child = format::decode_edge_value(&v)?;
        match index.get(Cf::Inodes, &format::inode_key(parent))? {
            Some(pv) => {
                if !InodeEntryV2::decode(&pv)
                    .map(|p| p.kind == v2::KIND_DIRECTORY)
                    .unwrap_or(false)
                {
                    problems.push(format!(
                        "edge ({parent}, {:?}): parent is not a directory",
                        String::from_utf8_lossy(name)
                    ));
                }
            }
            None => problems.push(format!(
                "edge ({parent}, {:?}): parent inode is missing",
                String::from_utf8_lossy(name)
            )),
        }
        match index.get(Cf::Inodes, &format::inode_key(child))? {
            Some(cv) => match InodeEntryV2::decode(&cv) {
                Ok(c) if c.parent_id == parent && c.name == name => {}
                Ok(_) => problems.push(format!(
                    "edge ({parent}, {:?}) -> {child}: the inode names a different parent or name",
                    String::from_utf8_lossy(name)
                )),
                Err(e) => problems.push(format!("inode {child}: {e}")),
            },
            None => problems.push(format!(
                "edge ({parent}, {:?}) -> {child}: inode is missing",
                String::from_utf8_lossy(name)
            )),
        }
    }
    if edges + 1 != inodes {
        problems.push(format!(
            "{inodes} inodes but {edges} edges (expected inodes = edges + 1)"
        ));
    }
    if max_id >= state.id_bound && max_id != ROOT_ID {
        problems.push(format!(
            "next_id {} is not above the highest inode id {max_id}",
            state.id_bound
        ));
    }
    Ok(problems)
}

/// The names of the owner or group dictionary, id 1 first.
pub fn dictionary(store: &Store, kind: DictKind) -> Result<Vec<String>> {
    let owner = kind == DictKind::Owner;
    let index = store.index();
    let prefix = {
        let mut p = v2::dict_count_key(owner).to_vec();
        p.push(v2::DICT_BY_ID);
        p
    };
    let mut out = Vec::new();
    engine::for_each_under(&index, Cf::Inodes, &prefix, |_, v| {
        out.push(
            String::from_utf8(v.to_vec())
                .map_err(|_| Error::corrupt("dictionary", format!("a {kind} is not UTF-8")))?,
        );
        Ok(())
    })?;
    Ok(out)
}

/// The result of [`verify`].
#[derive(Debug, Clone, serde::Serialize)]
pub struct VerifyReport {
    pub live_digest: String,
    pub replay_digest: String,
    pub records: u64,
    pub applied_seq: u64,
    pub problems: Vec<String>,
}

impl VerifyReport {
    pub fn ok(&self) -> bool {
        self.live_digest == self.replay_digest && self.problems.is_empty()
    }
}

fn scratch_dir(base: &Path) -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let name = format!(
        ".treelog-verify-{}-{}-{nanos}",
        base.file_name().and_then(|n| n.to_str()).unwrap_or("db"),
        std::process::id()
    );
    base.parent().unwrap_or(Path::new(".")).join(name)
}

struct RemoveOnDrop(PathBuf);
impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Replays the whole log into a scratch database next to `live`'s directory
/// and compares the digests of the two indexes; also checks the live
/// index's structure. `live` must be caught up (opened with replay).
pub fn verify(live: &Store) -> Result<VerifyReport> {
    let start = live.log_start()?;
    if start != 1 {
        return Err(Error::Compacted {
            requested: 1,
            first_available: start,
        });
    }
    let dir = scratch_dir(live.path());
    let _cleanup = RemoveOnDrop(dir.clone());
    let scratch_opts = StoreOptions {
        block_cache_bytes: 8 << 20,
        ..StoreOptions::default()
    };
    let scratch = Store::open(&dir, &scratch_opts)?;
    let applied = live.applied_seq()?;
    let (records, end) = crate::ops::recovery::apply_records(
        &scratch,
        &mut live.log_iter(1)?,
        0,
        applied,
        |_, _| {},
    )?;
    if end != applied {
        return Err(Error::corrupt(
            "log",
            format!("the log ends at {end} but the index is at {applied}"),
        ));
    }
    Ok(VerifyReport {
        live_digest: index_digest(live)?,
        replay_digest: index_digest(&scratch)?,
        records,
        applied_seq: applied,
        problems: check_structure(live)?,
    })
}

/// Opens the store at `path`, replays whatever the index lacks, and verifies.
pub fn verify_path(path: &Path, so: &StoreOptions) -> Result<VerifyReport> {
    let live = Store::open(
        path,
        &StoreOptions {
            create_if_missing: false,
            ..so.clone()
        },
    )?;
    crate::ops::recovery::replay(&live, |_, _| {})?;
    verify(&live)
}

/// Drops the index and rebuilds it from the whole log.
pub fn rebuild(path: &Path, so: &StoreOptions) -> Result<u64> {
    crate::ops::recovery::rebuild(
        path,
        &StoreOptions {
            create_if_missing: false,
            ..so.clone()
        },
    )
}

/// What [`accept_wal_loss`] did.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct WalLossReport {
    /// When the loss was accepted (ms since the epoch).
    pub time_ms: u64,
    /// The log's last sequence after recovery: every record after it, if
    /// there were any, is gone.
    pub last_seq: u64,
    /// The index was ahead of the recovered log and was rebuilt from it.
    pub rebuilt_index: bool,
    /// Records replayed into the index.
    pub replayed: u64,
}

/// Opens a database whose write-ahead log has a corrupt record followed by
/// intact ones (which a normal open refuses), keeping the log up to the
/// corruption and discarding the rest: an operator's explicit choice, for
/// when no backup holds the lost records. The index is replayed (or, if it
/// held records the log lost, rebuilt from the log); everything is flushed,
/// so the damaged WAL is retired, and the loss is recorded in `meta`
/// (`wal_loss_accepted`, shown by `admin info`).
pub fn accept_wal_loss(path: &Path, so: &StoreOptions) -> Result<WalLossReport> {
    let so = StoreOptions {
        create_if_missing: false,
        wal_recovery: WalRecovery::AcceptLoss,
        ..so.clone()
    };
    let mut rebuilt_index = false;
    let replayed = {
        let store = Store::open(path, &so)?;
        let (applied, last) = (store.applied_seq()?, store.last_log_seq()?);
        if applied > last {
            // The lost records had reached the index: rebuild it from what
            // is left (this needs the whole log).
            drop(store);
            rebuilt_index = true;
            crate::ops::recovery::rebuild(path, &so)?
        } else {
            crate::ops::recovery::replay(&store, |_, _| {})?
        }
    };
    let store = Store::open(path, &so)?;
    store.flush()?;
    let report = WalLossReport {
        time_ms: crate::clock::now_ms(),
        last_seq: store.last_log_seq()?,
        rebuilt_index,
        replayed,
    };
    let v = serde_json::to_vec(&report).map_err(|e| Error::InvalidArgument(e.to_string()))?;
    store.put_meta_synced(format::meta::WAL_LOSS_KEY, &v)?;
    Ok(report)
}

/// The loss of WAL records last accepted with [`accept_wal_loss`], if any.
pub fn last_wal_loss(store: &Store) -> Result<Option<WalLossReport>> {
    match store.get_meta(format::meta::WAL_LOSS_KEY)? {
        Some(v) => serde_json::from_slice(&v)
            .map(Some)
            .map_err(|e| Error::corrupt("meta", format!("wal_loss_accepted: {e}"))),
        None => Ok(None),
    }
}

/// One index entry, decoded for `admin dump`.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(tag = "cf", rename_all = "snake_case")]
pub enum DumpEntry {
    Inode {
        key_hex: String,
        id: u64,
        inode: Option<crate::types::Inode>,
        /// A symbolic link's target.
        #[serde(skip_serializing_if = "Option::is_none")]
        target: Option<String>,
        error: Option<String>,
    },
    Special {
        key_hex: String,
        what: &'static str,
        value: String,
    },
    Edge {
        key_hex: String,
        parent: u64,
        name: String,
        child: u64,
    },
}

/// Decodes every index entry (for `admin dump`).
pub fn dump_index(store: &Store, mut f: impl FnMut(DumpEntry) -> Result<()>) -> Result<()> {
    let index = store.index();
    let names = Names::new();
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    for item in store.scan_cf(CF_INODES)? {
        let (k, v) = item?;
        let key_hex = hex::encode(&k);
        let special = |what: &'static str, value: String| DumpEntry::Special {
            key_hex: key_hex.clone(),
            what,
            value,
        };
        let or_error = |r: Result<String>| r.unwrap_or_else(|e| e.to_string());
        let e = match v2::decode_key_v2(&k) {
            Err(e) => special("unknown", e.to_string()),
            Ok(KeyV2::Inode(id)) => {
                match InodeEntryV2::decode(&v)
                    .and_then(|e| Ok((engine::inode_from_entry(&index, &names, id, &e)?, e)))
                {
                    Ok((i, e)) => DumpEntry::Inode {
                        key_hex,
                        id,
                        target: i.attrs.kind.is_symlink().then(|| text(&e.target)),
                        inode: Some(i),
                        error: None,
                    },
                    Err(e) => DumpEntry::Inode {
                        key_hex,
                        id,
                        inode: None,
                        target: None,
                        error: Some(e.to_string()),
                    },
                }
            }
            Ok(KeyV2::Xattrs(_)) => special(
                "xattrs",
                or_error(v2::XattrList::decode(&v).map(|l| {
                    let pairs: Vec<String> = l
                        .attrs
                        .iter()
                        .map(|(n, v)| format!("{}={}", text(n), hex::encode(v)))
                        .collect();
                    pairs.join(" ")
                })),
            ),
            Ok(KeyV2::Quota(_)) => special(
                "quota",
                or_error(v2::QuotaEntry::decode(&v).map(|q| format!("{:?}", q.to_quota()))),
            ),
            Ok(KeyV2::DictCount { owner }) => special(
                if owner { "owner_count" } else { "group_count" },
                or_error(v2::decode_u32_le("dictionary counter", &v).map(|n| n.to_string())),
            ),
            Ok(KeyV2::DictById { owner, id }) => special(
                if owner { "owner_name" } else { "group_name" },
                format!("{id} {:?}", text(&v)),
            ),
            Ok(KeyV2::DictByName { owner, name }) => special(
                if owner { "owner_id" } else { "group_id" },
                or_error(
                    v2::decode_u32_le("dictionary id", &v)
                        .map(|id| format!("{:?} {id}", text(name))),
                ),
            ),
            Ok(KeyV2::NextId) => special(
                "next_id",
                or_error(format::decode_next_id_value(&v).map(|n| n.to_string())),
            ),
        };
        f(e)?;
    }
    for item in store.scan_cf(CF_EDGES)? {
        let (k, v) = item?;
        let (parent, name) = format::decode_edge_key(&k)?;
        f(DumpEntry::Edge {
            key_hex: hex::encode(&k),
            parent,
            name: String::from_utf8_lossy(name).into_owned(),
            child: format::decode_edge_value(&v)?,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::CF_INODES;

    /// The structure check finds an inode whose flags and keys disagree,
    /// and a quota whose counters are not its subtree's.
    #[test]
    fn the_structure_check_finds_flags_keys_and_counters_that_disagree() {
        let dir = tempfile::tempdir().unwrap();
        let t = crate::Treelog::open(dir.path(), crate::Options::default()).unwrap();
        t.mkdir_p("/q/d").unwrap();
        t.create("/q/d/f", Default::default()).unwrap();
        t.set_quota("/q", Some(10), None).unwrap();
        t.set_xattr("/q/d/f", "user.a", b"1", crate::XattrFlag::Either)
            .unwrap();
        assert!(check_structure(t.store()).unwrap().is_empty());
        let (d, f) = (t.stat("/q/d").unwrap().id, t.stat("/q/d/f").unwrap().id);
        t.close().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let mut b = store.raw_batch();
        // Attributes on an inode whose flag says it has none; the file's
        // taken away; and a quota that counts one file too many.
        b.put(
            CF_INODES,
            &v2::xattrs_key(d),
            &v2::XattrList::default().encode(),
        )
        .unwrap();
        b.delete(CF_INODES, &v2::xattrs_key(f)).unwrap();
        let q = crate::engine::stored_quota(&store.index(), t_id(&store, "/q"))
            .unwrap()
            .unwrap();
        let wrong = v2::QuotaEntry {
            files: q.files + 1,
            ..q
        };
        b.put(
            CF_INODES,
            &v2::quota_key(t_id(&store, "/q")),
            &wrong.encode(),
        )
        .unwrap();
        store.write_raw(b, true).unwrap();
        let problems = check_structure(&store).unwrap();
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&format!("inode {d}: its flag and its extended"))),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains(&format!("inode {f}: its flag and its extended"))),
            "{problems:?}"
        );
        assert!(
            problems
                .iter()
                .any(|p| p.contains("the quota of") && p.contains("its subtree holds")),
            "{problems:?}"
        );
    }

    fn t_id(store: &Store, p: &str) -> u64 {
        crate::engine::resolve(&store.index(), &Names::new(), p)
            .unwrap()
            .id
    }
}
