//! A store as it lies on disk, read after its process closed it.

use std::path::Path;

use treelog::admin;
use treelog::store::{Store, StoreOptions};

/// The applied sequence, the index digest of `admin verify` and the log
/// as stored, record by record, of the closed database at `data`: what a
/// replica and its leader must agree on.
pub fn closed_state(data: &Path) -> (u64, String, Vec<(u64, Vec<u8>)>) {
    let so = StoreOptions {
        create_if_missing: false,
        ..Default::default()
    };
    let store = Store::open(data, &so).unwrap();
    let summary = admin::index_summary(&store).unwrap();
    let log = store
        .log_entries(1)
        .unwrap()
        .map(|e| e.map(|(s, v)| (s, v.to_vec())).unwrap())
        .collect();
    (store.applied_seq().unwrap(), summary.digest, log)
}
