//! Every read is one committed state: with a writer moving a directory
//! back and forth and files between directories, readers on other threads
//! check every single reply for a state that never existed (an inode whose
//! parent or name contradicts the path asked for, a listing entry that is
//! not in its directory), recursive listings for the moved directory seen
//! twice or not at all, and sequences for going backwards.
//!
//! `TREELOG_CONSISTENCY_MOVES=100000` runs longer by hand.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use treelog::{CreateOptions, Durability, ErrorKind, Options, ReadAt, Treelog};
use treelog_testkit::cli;
use treelog_testkit::commands::{create, mkdir};
use treelog_testkit_server::server;

fn moves() -> u64 {
    std::env::var("TREELOG_CONSISTENCY_MOVES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3000)
}

struct Fixture {
    t: Arc<Treelog>,
    a: u64,
    b: u64,
    d: u64,
    _dir: tempfile::TempDir,
}

/// /a/x (a directory with files f0..f4), /b, and /d/x (a file renamed
/// between /d/x and /d/y).
fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let t = Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    t.mkdir_p("/a/x").unwrap();
    t.mkdir_p("/b").unwrap();
    t.mkdir_p("/d").unwrap();
    for i in 0..5 {
        t.create(&format!("/a/x/f{i}"), CreateOptions::default())
            .unwrap();
    }
    t.create("/d/x", CreateOptions::default()).unwrap();
    let (a, b, d) = (
        t.stat("/a").unwrap().id,
        t.stat("/b").unwrap().id,
        t.stat("/d").unwrap().id,
    );
    Fixture {
        t: Arc::new(t),
        a,
        b,
        d,
        _dir: dir,
    }
}

/// Moves /a/x to /b/x and back, and /d/x to /d/y and back, `n` times each,
/// each waiting for its reply; then sets `done`.
fn writer(t: &Treelog, n: u64, done: &AtomicBool) {
    for i in 0..n {
        let (s, d) = if i % 2 == 0 {
            ("/a/x", "/b/x")
        } else {
            ("/b/x", "/a/x")
        };
        t.rename(s, d, false).unwrap();
        let (s, d) = if i % 2 == 0 {
            ("/d/x", "/d/y")
        } else {
            ("/d/y", "/d/x")
        };
        t.rename(s, d, false).unwrap();
    }
    done.store(true, Ordering::SeqCst);
}

#[test]
fn no_read_shows_half_of_a_rename() {
    let f = fixture();
    let done = AtomicBool::new(false);
    let reads = AtomicU64::new(0);
    let torn = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| writer(&f.t, moves(), &done));
        for r in 0..2 {
            let (f, done, reads, torn) = (&f, &done, &reads, &torn);
            s.spawn(move || {
                let mut n = 0u64;
                let mut last_seq = 0;
                while !done.load(Ordering::SeqCst) {
                    n += 1;
                    // Stats of names that exist in one of two states.
                    for (path, parent, name) in [
                        ("/a/x", f.a, "x"),
                        ("/b/x", f.b, "x"),
                        ("/d/x", f.d, "x"),
                        ("/d/y", f.d, "y"),
                    ] {
                        match f.t.stat_at(path, ReadAt::Latest) {
                            Ok(r) => {
                                if r.value.parent != parent || r.value.name != name {
                                    torn.fetch_add(1, Ordering::Relaxed);
                                    eprintln!("torn stat {path}: {:?}", r.value);
                                }
                                assert!(r.seq >= last_seq, "reads went backwards");
                                last_seq = r.seq;
                            }
                            Err(e) => assert_eq!(e.kind(), ErrorKind::NotFound, "{e}"),
                        }
                    }
                    // Listings: every entry belongs to the directory listed.
                    let (dir, id) = if (n + r) % 2 == 0 {
                        ("/a", f.a)
                    } else {
                        ("/b", f.b)
                    };
                    let page = f.t.list_at(dir, None, 100, ReadAt::Latest).unwrap();
                    for e in &page.value.entries {
                        if e.inode.parent != id || e.inode.name != e.name {
                            torn.fetch_add(1, Ordering::Relaxed);
                            eprintln!("torn list {dir}: {e:?}");
                        }
                    }
                    // A sequence read is never newer than what the node
                    // then says it has committed.
                    assert!(page.seq <= f.t.committed_seq(), "Ping behind a read");
                }
                reads.fetch_add(n * 5, Ordering::Relaxed);
            });
        }
    });
    let (reads, torn) = (reads.into_inner(), torn.into_inner());
    eprintln!("{reads} reads, {torn} torn");
    assert_eq!(torn, 0, "{torn} of {reads} replies showed half a rename");
    assert!(reads > 0);
}

/// A recursive walk of a tree that moves meanwhile sees the moved
/// directory exactly once, with all its files, and never fails.
#[test]
fn a_walk_of_a_moving_tree_sees_it_once() {
    let f = fixture();
    let done = AtomicBool::new(false);
    let walks = AtomicU64::new(0);
    std::thread::scope(|s| {
        s.spawn(|| writer(&f.t, moves() / 3, &done));
        s.spawn(|| {
            while !done.load(Ordering::SeqCst) {
                let mut xs = 0;
                let mut files = 0;
                f.t.walk("/", |p, e| {
                    if e.name == "x" && (p == "/a/x" || p == "/b/x") {
                        xs += 1;
                    }
                    if p.starts_with("/a/x/") || p.starts_with("/b/x/") {
                        files += 1;
                    }
                    Ok(())
                })
                .unwrap();
                assert_eq!(
                    (xs, files),
                    (1, 5),
                    "a walk saw x {xs} times, {files} files"
                );
                walks.fetch_add(1, Ordering::Relaxed);
            }
        });
    });
    assert!(walks.into_inner() > 0);
}

/// A listing that showed a name is never followed by a stat that misses it,
/// even when the name was looked up (and cached as absent) before it was
/// created; and a page read at an exact, pinned state can be read again.
#[test]
fn reads_never_go_backwards_after_negative_lookups() {
    let f = fixture();
    let t = &f.t;
    t.mkdir_p("/q").unwrap();
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let writer = s.spawn(|| {
            for i in 0..moves() {
                t.create(&format!("/q/f{i:06}"), CreateOptions::default())
                    .unwrap();
            }
            stop.store(true, Ordering::SeqCst);
        });
        s.spawn(|| {
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                // Looked up while (probably) absent, then listed, then
                // stat'ed: once the listing shows it, the stat finds it.
                let name = format!("/q/f{i:06}");
                let _ = t.stat(&name);
                let after = (i > 0).then(|| format!("f{:06}", i - 1));
                let page = t
                    .list_at("/q", after.as_deref(), 1, ReadAt::Latest)
                    .unwrap();
                if page
                    .value
                    .entries
                    .iter()
                    .any(|e| format!("/q/{}", e.name) == name)
                {
                    let r = t.stat_at(&name, ReadAt::Latest).unwrap();
                    assert!(r.seq >= page.seq);
                    i += 1;
                }
            }
        });
        writer.join().unwrap();
    });
    // Pinned states: a page at an exact sequence, after the tree moved on.
    let seq = t.pin_view().unwrap();
    let first = t.list_at("/q", None, 10, ReadAt::Exactly(seq)).unwrap();
    t.create("/q/zz-later", CreateOptions::default()).unwrap();
    let again = t.list_at("/q", None, 10_000, ReadAt::Exactly(seq)).unwrap();
    assert_eq!(again.seq, seq);
    assert_eq!(&again.value.entries[..10], &first.value.entries[..]);
    assert!(!again.value.entries.iter().any(|e| e.name == "zz-later"));
    assert!(t.unpin_view(seq));
    let e = t.list_at("/q", None, 10, ReadAt::Exactly(seq)).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Compacted, "{e}");
    // A token from the future is waited for, within a bound.
    let now = t.committed_seq();
    assert!(t.stat_at("/q", ReadAt::AtLeast(now)).is_ok());
}

/// Over the network: a real server, a writer connection renaming, reader
/// connections checking every reply, and the CLI's `ls -R` (a real
/// process) that must never fail and must see the moved directory once.
#[test]
fn over_the_network_no_reply_is_torn_and_ls_r_sees_one_tree() {
    use treelog::Command;

    let dir = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let h = rt.block_on(server::start(&dir.path().join("db"), |_| {}));
    let addr = h.bound.rpc;
    let w = rt.block_on(treelog_testkit::client::connect(addr));
    rt.block_on(async {
        for p in ["/a/x", "/b"] {
            w.submit(mkdir(p)).await.unwrap();
        }
        for i in 0..5 {
            w.submit(create(&format!("/a/x/f{i}"))).await.unwrap();
        }
    });
    let ids: Vec<u64> = rt.block_on(async {
        let mut v = Vec::new();
        for p in ["/a", "/b"] {
            v.push(w.stat(p).await.unwrap().id);
        }
        v
    });
    let done = Arc::new(AtomicBool::new(false));
    let torn = Arc::new(AtomicU64::new(0));
    let reads = Arc::new(AtomicU64::new(0));
    let n = moves();
    let writer = {
        let (w, done) = (w.clone(), done.clone());
        rt.spawn(async move {
            for i in 0..n {
                let (s, d) = if i % 2 == 0 {
                    ("/a/x", "/b/x")
                } else {
                    ("/b/x", "/a/x")
                };
                w.submit(Command::Rename {
                    src: s.into(),
                    dst: d.into(),
                    overwrite: false,
                })
                .await
                .unwrap();
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (done, torn, reads, ids) = (done.clone(), torn.clone(), reads.clone(), ids.clone());
            rt.spawn(async move {
                let c = treelog_testkit::client::connect(addr).await;
                let mut last = 0;
                while !done.load(Ordering::SeqCst) {
                    for (k, path) in ["/a/x", "/b/x"].iter().enumerate() {
                        match c.stat_at(path, ReadAt::Latest).await {
                            Ok(r) => {
                                if r.value.parent != ids[k] || r.value.name != "x" {
                                    torn.fetch_add(1, Ordering::Relaxed);
                                }
                                assert!(r.seq >= last, "reads went backwards");
                                last = r.seq;
                            }
                            Err(e) => assert_eq!(e.kind(), ErrorKind::NotFound, "{e}"),
                        }
                        let page = c
                            .list_at(&path[..2], None, 100, ReadAt::Latest)
                            .await
                            .unwrap();
                        for e in &page.value.entries {
                            if e.inode.parent != ids[k] || e.inode.name != e.name {
                                torn.fetch_add(1, Ordering::Relaxed);
                            }
                        }
                        // Ping after a read is never behind it.
                        assert!(c.ping().await.unwrap() >= page.seq, "Ping behind a read");
                        reads.fetch_add(3, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // `ls -R` as a user runs it, while the writer moves x.
    let mut runs = 0;
    let ls_r = ["--server", &addr.to_string(), "--json", "ls", "-R", "/"];
    while !done.load(Ordering::SeqCst) {
        let mut ls = std::process::Command::new(env!("CARGO_BIN_EXE_treelog"));
        let out = cli::output(ls.args(ls_r));
        assert!(out.status.success(), "ls -R failed: {out:?}");
        let rows: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
        let paths: Vec<&str> = rows
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["path"].as_str().unwrap())
            .collect();
        let xs = paths
            .iter()
            .filter(|p| **p == "/a/x" || **p == "/b/x")
            .count();
        let files = paths.iter().filter(|p| p.contains("/x/f")).count();
        assert_eq!(
            (xs, files),
            (1, 5),
            "ls -R saw x {xs} times and {files} files: {paths:?}"
        );
        runs += 1;
    }
    rt.block_on(writer).unwrap();
    for r in readers {
        rt.block_on(r).unwrap();
    }
    let (torn, reads) = (torn.load(Ordering::SeqCst), reads.load(Ordering::SeqCst));
    eprintln!("{reads} replies, {torn} torn, {runs} ls -R runs");
    assert_eq!(torn, 0, "{torn} of {reads} replies showed half a rename");
    assert!(runs > 0 && reads > 0);
    rt.block_on(h.shutdown()).unwrap();
}
