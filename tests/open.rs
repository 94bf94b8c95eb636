//! Opening: format version checks, non-treelog directories, recovery replay.

use treelog::store::{Store, StoreOptions};
use treelog::{admin, CreateOptions, Durability, ErrorKind, Options, Treelog};

#[test]
fn newer_format_version_is_refused_with_the_supported_list() {
    let dir = tempfile::tempdir().unwrap();
    Treelog::open(dir.path(), Options::default())
        .unwrap()
        .close()
        .unwrap();
    {
        let s = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        assert_eq!(s.format_version().unwrap(), 2);
        s.set_format_version(7).unwrap();
    }
    let e = Treelog::open(dir.path(), Options::default())
        .err()
        .expect("must refuse");
    assert_eq!(e.kind(), ErrorKind::Incompatible);
    let msg = e.to_string();
    assert!(
        msg.contains("format version 7") && msg.contains("[2]") && msg.contains("newer"),
        "{msg}"
    );
}

/// A database of format 1 is refused with the command that migrates it,
/// and left as it was; `Options::migrate` migrates it.
#[test]
fn a_format_1_database_is_refused_until_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let spec = treelog::migrate::Format1Spec {
        dirs: 2,
        files_per_dir: 3,
        owners: 2,
        groups: 1,
        start_ms: 1_700_000_000_000,
    };
    assert_eq!(
        treelog::migrate::write_format1(dir.path(), &spec).unwrap(),
        9
    );
    let digest = || {
        let so = StoreOptions {
            create_if_missing: false,
            ..Default::default()
        };
        admin::index_digest(&Store::open_unmigrated(dir.path(), &so).unwrap()).unwrap()
    };
    let before = digest();
    for _ in 0..2 {
        let e = Treelog::open(dir.path(), Options::default())
            .err()
            .expect("must refuse");
        assert_eq!(e.kind(), ErrorKind::Incompatible);
        assert!(
            e.to_string().contains("format version 1 must be migrated")
                && e.to_string().contains("admin migrate"),
            "{e}"
        );
    }
    assert_eq!(digest(), before, "the refused opens changed nothing");
    // `Options::migrate` migrates it first.
    let t = Treelog::open(
        dir.path(),
        Options {
            migrate: true,
            ..Options::default()
        },
    )
    .unwrap();
    assert_eq!(t.stat("/d1/f2").unwrap().attrs.owner, "user1");
    assert_eq!(t.store().format_version().unwrap(), 2);
    assert!(admin::verify(t.store()).unwrap().ok());
}

#[test]
fn a_directory_that_is_not_treelog_is_refused() {
    // Some unrelated files.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("notes.txt"), b"hello").unwrap();
    let e = Treelog::open(dir.path(), Options::default())
        .err()
        .expect("must refuse");
    assert_eq!(e.kind(), ErrorKind::Incompatible);
    assert!(e.to_string().contains("not a treelog database"), "{e}");
    // Nothing was created in it.
    assert!(!dir.path().join("CURRENT").exists());

    // A RocksDB database of someone else.
    let other = tempfile::tempdir().unwrap();
    {
        let mut o = rocksdb::Options::default();
        o.create_if_missing(true);
        let db = rocksdb::DB::open(&o, other.path()).unwrap();
        db.put(b"k", b"v").unwrap();
    }
    let e = Treelog::open(other.path(), Options::default())
        .err()
        .expect("must refuse");
    assert_eq!(e.kind(), ErrorKind::Incompatible);
    assert!(e.to_string().contains("not a treelog database"), "{e}");
}

#[test]
fn a_second_opener_gets_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let _t = Treelog::open(dir.path(), Options::default()).unwrap();
    let e = Treelog::open(dir.path(), Options::default())
        .err()
        .expect("locked");
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().to_lowercase().contains("lock"), "{e}");
}

#[test]
fn reopen_keeps_the_index_and_continues_ids() {
    let dir = tempfile::tempdir().unwrap();
    let t = Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    for i in 0..50 {
        t.create(
            format!("/d/f{i}"),
            CreateOptions {
                parents: true,
                ..Default::default()
            },
        )
        .unwrap();
    }
    let digest = admin::index_digest(t.store()).unwrap();
    // Dropped without close(): RocksDB still flushes on shutdown; replay
    // after a real crash is covered by tests/crash.rs.
    drop(t);
    let t = Treelog::open(dir.path(), Options::default()).unwrap();
    assert_eq!(t.committed_seq(), 50);
    assert_eq!(t.list_all("/d").unwrap().len(), 50);
    assert_eq!(admin::index_digest(t.store()).unwrap(), digest);
    // New ids continue above every id in use, from the next reserved block.
    t.create("/d/after", CreateOptions::default()).unwrap();
    let id = t.stat("/d/after").unwrap().id;
    assert!(id > t.stat("/d/f49").unwrap().id);
    assert!(admin::verify(t.store()).unwrap().ok());
}

#[test]
fn ids_lost_per_restart_are_bounded_by_the_block() {
    let dir = tempfile::tempdir().unwrap();
    let mut last = 0;
    for round in 0..3 {
        let t = Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
        t.create(format!("/f{round}"), CreateOptions::default())
            .unwrap();
        let id = t.stat(format!("/f{round}")).unwrap().id;
        if round > 0 {
            assert!(id > last && id - last <= 1000, "id {id} after {last}");
        }
        last = id;
        t.close().unwrap();
    }
}

/// Format 1 held 255 owners and 255 groups; format 2 holds 2^32 - 1.
#[test]
fn three_hundred_owners_and_groups_survive_a_reopen_and_a_replay() {
    let dir = tempfile::tempdir().unwrap();
    let t = Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    for i in 0..300 {
        t.create(
            format!("/f{i}"),
            CreateOptions {
                owner: format!("user{i}"),
                group: format!("group{i}"),
                ..Default::default()
            },
        )
        .unwrap();
    }
    for i in [0, 254, 255, 299] {
        let a = t.stat(format!("/f{i}")).unwrap().attrs;
        assert_eq!(
            (a.owner, a.group),
            (format!("user{i}"), format!("group{i}"))
        );
    }
    let owners = admin::dictionary(t.store(), treelog::error::DictKind::Owner).unwrap();
    assert_eq!(owners.len(), 300);
    assert_eq!(owners[299], "user299");
    t.close().unwrap();
    let t = Treelog::open(dir.path(), Options::default()).unwrap();
    assert_eq!(t.stat("/f299").unwrap().attrs.group, "group299");
    assert!(admin::verify(t.store()).unwrap().ok());
}

/// Creates, renames and deletes enough for several replay batches
/// (~20,000 keys each).
fn write_mixed_namespace(dir: &std::path::Path) {
    let t = Treelog::open(dir, Options::default().durability(Durability::None)).unwrap();
    for d in 0..20 {
        t.mkdir_p(format!("/d{d}")).unwrap();
    }
    for i in 0..30_000 {
        t.create(format!("/d{}/f{i}", i % 20), CreateOptions::default())
            .unwrap();
    }
    for i in (0..30_000).step_by(7) {
        t.rename(
            format!("/d{}/f{i}", i % 20),
            format!("/d{}/g{i}", (i + 1) % 20),
            false,
        )
        .unwrap();
    }
    for i in (0..30_000).step_by(11) {
        let _ = t.delete(format!("/d{}/f{i}", i % 20), false);
    }
    t.close().unwrap();
}

/// The index CFs' serving options, as the newest OPTIONS file has them
/// (RocksDB persists every option change there).
fn assert_serving_options(dir: &std::path::Path) {
    let bloom = "memtable_prefix_bloom_size_ratio";
    assert_eq!(cf_option(dir, "inodes", bloom), "0.050000");
    assert_eq!(cf_option(dir, "edges", bloom), "0.100000");
    for cf in ["inodes", "edges"] {
        for (option, serving) in [
            ("level0_file_num_compaction_trigger", "4"),
            ("level0_slowdown_writes_trigger", "20"),
            ("level0_stop_writes_trigger", "36"),
            ("disable_auto_compactions", "false"),
        ] {
            assert_eq!(cf_option(dir, cf, option), serving, "{cf} {option}");
        }
    }
}

/// The rebuilt store at `dir` matches a fresh replay, and serves reads and
/// writes.
fn assert_rebuilt_store_works(dir: &std::path::Path) {
    // A fresh replay with filters (verify's scratch index) matches.
    let report = admin::verify_path(dir, &StoreOptions::default()).unwrap();
    assert!(report.ok(), "{report:?}");
    let t = Treelog::open(dir, Options::default()).unwrap();
    assert!(t.stat("/d3/f3").is_ok());
    assert_eq!(t.stat("/d7/f7").unwrap_err().kind(), ErrorKind::NotFound);
    assert!(t.stat("/d8/g7").is_ok());
    t.create("/d0/after", CreateOptions::default()).unwrap();
    assert!(t.stat("/d0/after").is_ok());
    assert!(admin::verify(t.store()).unwrap().ok());
}

/// Rebuilds the index of the mixed namespace at `dir` with `so`; the
/// serving options are back afterwards.
fn rebuild_mixed_namespace(dir: &std::path::Path, so: &StoreOptions) {
    let n = admin::rebuild(dir, so).unwrap();
    assert!(n > 30_000, "replayed {n}");
    assert_serving_options(dir);
}

/// A long replay inserts without memtable filters, into a new memtable
/// after every batch here, with L0 compactions held back, and restores the
/// serving options at the end: the index it builds equals one replayed with
/// filters, the options are configured again afterwards, and the store keeps
/// working.
#[test]
fn long_replay_tuning_builds_the_same_index() {
    let dir = tempfile::tempdir().unwrap();
    write_mixed_namespace(dir.path());
    let so = StoreOptions {
        long_replay_min: 0,
        // A new memtable after every batch.
        replay_memtable_bytes: 1,
        ..Default::default()
    };
    rebuild_mixed_namespace(dir.path(), &so);
    assert_rebuilt_store_works(dir.path());
}

/// A rebuild loaded in bulk (no compaction while it runs, one at its end)
/// leaves the whole index compacted out of L0, with the serving options
/// back, and the same namespace as a replay that compacts as it goes.
#[test]
fn a_bulk_loaded_rebuild_compacts_once_and_builds_the_same_index() {
    let dir = tempfile::tempdir().unwrap();
    write_mixed_namespace(dir.path());
    let so = StoreOptions {
        long_replay_min: 0,
        bulk_replay_min: 0,
        // Small memtables: L0 collects many files (past the serving
        // compaction trigger) that only the final compaction folds.
        index_write_buffer_bytes: 256 << 10,
        ..Default::default()
    };
    rebuild_mixed_namespace(dir.path(), &so);
    {
        let store = Store::open(dir.path(), &so).unwrap();
        for cf in ["inodes", "edges"] {
            let l0 = store.cf_property(cf, "rocksdb.num-files-at-level0");
            assert_eq!(l0, Some(0), "{cf}: files left in L0");
            let sst = store.cf_property(cf, "rocksdb.total-sst-files-size");
            assert!(sst > Some(0), "{cf}: no table files");
        }
    }
    assert_rebuilt_store_works(dir.path());
}

/// Option `option` of column family `cf` in the newest OPTIONS file of the
/// database at `dir`.
fn cf_option(dir: &std::path::Path, cf: &str, option: &str) -> String {
    let newest = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| Some((n.strip_prefix("OPTIONS-")?.parse::<u64>().ok()?, n)))
        .max()
        .expect("an OPTIONS file")
        .1;
    let text = std::fs::read_to_string(dir.join(newest)).unwrap();
    let header = format!("[CFOptions \"{cf}\"]");
    let section = text
        .split(&header)
        .nth(1)
        .expect("the column family's section");
    let section = section.split("\n[").next().unwrap_or(section);
    section
        .lines()
        .find_map(|l| l.trim().strip_prefix(option)?.strip_prefix('='))
        .expect("the option")
        .to_owned()
}

#[test]
fn the_store_runs_the_threads_its_options_ask_for_and_stops_them_at_close() {
    let dir = tempfile::tempdir().unwrap();
    let plain = Treelog::open(dir.path().join("a"), Options::default()).unwrap();
    assert_eq!(plain.thread_names(), ["treelog-notifier", "treelog-writer"]);
    plain.close().unwrap();

    let opts = Options {
        wake_interval: std::time::Duration::ZERO,
        retention: treelog::retention::RetentionPolicy {
            max_records: Some(10),
            ..Default::default()
        },
        ..Options::default()
    };
    let t = Treelog::open(dir.path().join("b"), opts).unwrap();
    assert_eq!(t.thread_names(), ["treelog-writer", "treelog-retention"]);
    // close() returns only once every thread has been stopped and joined
    // (a thread that never stopped would hang it).
    t.close().unwrap();
}
