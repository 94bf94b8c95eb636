//! Group commit under concurrency: many threads issue operations at once;
//! every acknowledged operation is visible, sequence numbers have no gaps,
//! and groups of more than one command really form.

use std::collections::BTreeSet;
use std::sync::Arc;

use treelog::{admin, CreateOptions, Durability, ErrorKind, Options, Treelog};

/// Sets its flag when dropped: stops reader threads also when an assertion
/// fails (a thread scope would otherwise wait for them forever).
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Relaxed);
    }
}

/// A store in `dir` with the given durability and otherwise default options.
fn open(dir: &std::path::Path, d: Durability) -> Treelog {
    Treelog::open(dir, Options::default().durability(d)).unwrap()
}

#[test]
fn concurrent_callers_are_grouped_and_gap_free() {
    let dir = tempfile::tempdir().unwrap();
    // Synced: the fsync is what gives followers time to queue up.
    let t = Arc::new(open(dir.path(), Durability::Sync));
    let threads = 16;
    let per = 150;
    let handles: Vec<_> = (0..threads)
        .map(|ti| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                t.mkdir_p(format!("/t{ti}")).unwrap();
                for i in 0..per {
                    let p = format!("/t{ti}/f{i}");
                    let seq = t.create(&p, CreateOptions::default()).unwrap();
                    acked.push((seq, p.clone()));
                    // Visible to the caller as soon as it is acknowledged.
                    assert_eq!(t.stat(&p).unwrap().name, format!("f{i}"));
                    if i % 10 == 0 {
                        // A refused command in the same groups: typed error, no record.
                        let e = t.create(&p, CreateOptions::default()).unwrap_err();
                        assert_eq!(e.kind(), ErrorKind::AlreadyExists);
                    }
                }
                acked
            })
        })
        .collect();
    let mut seqs = BTreeSet::new();
    let mut paths = Vec::new();
    for h in handles {
        for (seq, p) in h.join().unwrap() {
            assert!(seqs.insert(seq), "sequence {seq} acknowledged twice");
            paths.push(p);
        }
    }
    for p in &paths {
        t.stat(p).unwrap();
    }
    // The log holds exactly 1..=last with no gap, one record per change.
    let last = t.committed_seq();
    assert_eq!(last, (threads + threads * per) as u64);
    let mut n = 0;
    for (i, rec) in t.store().log_iter(1).unwrap().enumerate() {
        let rec = rec.unwrap();
        assert_eq!(rec.seq, i as u64 + 1);
        n += 1;
    }
    assert_eq!(n, last);
    let stats = t.writer_stats();
    assert_eq!(stats.records, last);
    assert!(
        stats.max_group_commands > 1 && stats.groups < stats.commands,
        "no group of more than one command formed: {stats:?}"
    );
    println!("writer stats: {stats:?}");
    let report = admin::verify(t.store()).unwrap();
    assert!(report.ok(), "{report:?}");
}

/// With nothing in flight and nobody queued behind it, the writer commits a
/// group on its own thread instead of handing it to the syncer and the
/// applier: every command of a lone caller. What it acknowledges is
/// committed, visible and in the log, as through the threads.
#[test]
fn a_lone_callers_groups_are_committed_by_the_writer_itself() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path(), Durability::Sync);
    t.mkdir_p("/a").unwrap();
    for i in 0..50 {
        let p = format!("/a/f{i}");
        let seq = t.create(&p, CreateOptions::default()).unwrap();
        assert!(t.committed_seq() >= seq);
        assert_eq!(t.stat(&p).unwrap().name, format!("f{i}"));
    }
    let stats = t.writer_stats();
    assert_eq!(stats.records, 51);
    assert_eq!(stats.inline_groups, stats.groups, "{stats:?}");
    let report = admin::verify(t.store()).unwrap();
    assert!(report.ok(), "{report:?}");
}

#[test]
fn async_callers_do_not_block_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(open(dir.path(), Durability::None));
    // A current-thread runtime: if submit blocked the thread, tasks could not
    // interleave and this would deadlock rather than finish.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let seqs = rt.block_on(async {
        let mut tasks = Vec::new();
        for i in 0..200 {
            let t = t.clone();
            tasks.push(tokio::spawn(async move {
                t.submit_async(treelog::Command::Mkdir {
                    path: format!("/async/d{i}").into(),
                    parents: true,
                    mode: 0o755,
                    owner: "svc".into(),
                    group: String::new(),
                })
                .await
                .unwrap()
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    });
    let uniq: BTreeSet<u64> = seqs.iter().copied().collect();
    // /async is created by exactly one of them; every mkdir has its own record.
    assert_eq!(uniq.len(), 200);
    assert_eq!(t.list_all("/async").unwrap().len(), 200);
    assert_eq!(t.stat("/async/d7").unwrap().attrs.owner, "svc");
}

/// Readers go through the shared read cache (`treelog::reader_cache`): every
/// acknowledged create, rename and delete is visible to the next stat, from
/// any thread, while other threads keep the cache busy with the same paths.
#[test]
fn reads_see_every_acknowledged_write_through_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(open(dir.path(), Durability::None));
    t.mkdir_p("/a/b").unwrap();
    t.mkdir_p("/c").unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|s| {
        // Readers that keep loading the same entries into the cache.
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    for i in 0..20 {
                        let _ = t.stat(format!("/a/b/f{i}"));
                        let _ = t.stat(format!("/c/g{i}"));
                    }
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        for round in 0..50 {
            for i in 0..20 {
                let (f, g) = (format!("/a/b/f{i}"), format!("/c/g{i}"));
                t.create(&f, CreateOptions::default()).unwrap();
                let ino = t.stat(&f).unwrap();
                t.rename(&f, &g, false).unwrap();
                assert_eq!(
                    t.stat(&f).unwrap_err().kind(),
                    ErrorKind::NotFound,
                    "round {round}"
                );
                assert_eq!(t.stat(&g).unwrap().id, ino.id);
                assert_eq!(t.stat_id(ino.id).unwrap().parent, t.stat("/c").unwrap().id);
                t.delete(&g, false).unwrap();
                assert_eq!(t.stat(&g).unwrap_err().kind(), ErrorKind::NotFound);
                assert_eq!(t.stat_id(ino.id).unwrap_err().kind(), ErrorKind::NotFound);
            }
        }
    });
    // A fresh process sees the same as the cache did.
    let n = t.list_all("/c").unwrap().len();
    drop(t);
    let t = Treelog::open(dir.path(), Options::default()).unwrap();
    assert_eq!(t.list_all("/c").unwrap().len(), n);
    assert_eq!(n, 0);
}

/// The readers' cache reports its size on scrape, and it fills from stats.
#[test]
fn read_cache_size_is_exported() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path(), Durability::None);
    let entries = |t: &Treelog| -> i64 {
        let text = t.render_metrics();
        let line = text
            .lines()
            .find(|l| l.starts_with("treelog_read_cache_entries "))
            .expect("treelog_read_cache_entries is exported");
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    let empty = entries(&t);
    t.mkdir_p("/a/b").unwrap();
    for i in 0..10 {
        t.create(format!("/a/b/f{i}"), CreateOptions::default())
            .unwrap();
        t.stat(format!("/a/b/f{i}")).unwrap();
    }
    assert!(entries(&t) > empty, "the cache did not fill");
    // A disabled cache stays empty.
    drop(t);
    let o = Options {
        read_cache_entries: 0,
        ..Default::default()
    };
    let t = Treelog::open(dir.path(), o).unwrap();
    t.stat("/a/b/f3").unwrap();
    assert_eq!(entries(&t), 0);
}

/// Readers' cache misses are counted per column family: a first stat of a
/// path misses, the same stat again does not.
#[test]
fn read_cache_misses_are_exported() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path(), Durability::None);
    let misses = |t: &Treelog, cf: &str| -> u64 {
        let text = t.render_metrics();
        let prefix = format!("treelog_read_cache_misses_total{{cf=\"{cf}\"}} ");
        let line = text
            .lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("{prefix} is exported"));
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    t.mkdir_p("/m/n").unwrap();
    // Written entries go into the cache: look up one written before this
    // process started instead.
    drop(t);
    let t = open(dir.path(), Durability::None);
    let (e0, i0) = (misses(&t, "edges"), misses(&t, "inodes"));
    t.stat("/m/n").unwrap();
    let (e1, i1) = (misses(&t, "edges"), misses(&t, "inodes"));
    assert!(e1 > e0, "the first stat read edges from RocksDB");
    assert!(i1 > i0, "the first stat read the inode from RocksDB");
    t.stat("/m/n").unwrap();
    assert_eq!((misses(&t, "edges"), misses(&t, "inodes")), (e1, i1));
}

/// Readers racing the writer see each file before or after a change, never
/// an index torn between the two: an edge whose inode is gone, or an inode
/// whose owner the reader's dictionary does not know yet. Either used to
/// surface as a corruption error from `stat` or `list`.
#[test]
fn reads_racing_creates_and_deletes_never_see_a_torn_index() {
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(open(dir.path(), Durability::None));
    t.mkdir_p("/d").unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let unexpected = std::sync::Mutex::new(Vec::new());
    let reads = std::sync::atomic::AtomicU64::new(0);
    std::thread::scope(|s| {
        for r in 0..2 {
            let (t, stop, unexpected, reads) = (&t, &stop, &unexpected, &reads);
            s.spawn(move || {
                let mut i = r;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    i += 1;
                    let res = if i % 8 == 0 {
                        t.list_all("/d").map(|_| ())
                    } else {
                        t.stat(format!("/d/f{}", i % 16)).map(|_| ())
                    };
                    reads.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    if let Err(e) = res {
                        if e.kind() != ErrorKind::NotFound {
                            let op = if i % 8 == 0 { "list" } else { "stat" };
                            unexpected.lock().unwrap().push(format!("{op}: {e}"));
                        }
                    }
                }
            });
        }
        let _stop = StopOnDrop(&stop);
        // A new owner every round: its dictionary id reaches readers with
        // the entries that use it.
        for round in 0..200 {
            for i in 0..16 {
                let o = CreateOptions {
                    owner: format!("u{round}"),
                    ..CreateOptions::default()
                };
                t.create(format!("/d/f{i}"), o).unwrap();
            }
            for i in 0..16 {
                t.delete(format!("/d/f{i}"), false).unwrap();
            }
        }
    });
    let unexpected = unexpected.into_inner().unwrap();
    assert!(
        unexpected.is_empty(),
        "{} of {} reads failed, first: {}",
        unexpected.len(),
        reads.into_inner(),
        unexpected[0]
    );
}
