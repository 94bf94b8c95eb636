//! Group commit under concurrency: many threads issue operations at once;
//! every acknowledged operation is visible, sequence numbers have no gaps,
//! and groups of more than one command really form.

use std::collections::BTreeSet;
use std::sync::Arc;

use treelog::{admin, CreateOptions, Durability, ErrorKind, Options, Treelog};

#[test]
fn concurrent_callers_are_grouped_and_gap_free() {
    let dir = tempfile::tempdir().unwrap();
    // Synced: the fsync is what gives followers time to queue up.
    let t = Arc::new(
        Treelog::open(dir.path(), Options::default().durability(Durability::Sync)).unwrap(),
    );
    let threads = 16;
    let per = 150;
    let handles: Vec<_> = (0..threads)
        .map(|ti| {
            let t = t.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                t.mkdir_p(&format!("/t{ti}")).unwrap();
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

#[test]
fn async_callers_do_not_block_the_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(
        Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap(),
    );
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
                    path: format!("/async/d{i}"),
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
