//! Change streams: snapshot-then-stream model rebuild under concurrent
//! writers (with and without a subtree filter), resume without gaps or
//! duplicates (also across a restart), filters and scopes, retention,
//! `Compacted`, durable cursors and their expiry.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use treelog::event::{Event, EventKind};
use treelog::path::is_within;
use treelog::retention::RetentionPolicy;
use treelog::stream::{Filter, Scope, StartFrom, StreamItem, SubscribeOptions, Subscription};
use treelog::types::Attrs;
use treelog::{CreateOptions, Durability, ErrorKind, MkdirOptions, Options, SetAttrs, Treelog};

const WAIT: Duration = Duration::from_secs(30);

fn open(dir: &std::path::Path) -> Treelog {
    Treelog::open(dir, Options::default().durability(Durability::None)).unwrap()
}

/// A subscriber's own model of the (filtered) tree: path -> (id, attrs).
#[derive(Default)]
struct Mirror {
    prefix: String,
    tree: BTreeMap<String, (u64, Attrs)>,
    in_snapshot: bool,
    resyncs: usize,
    scopes: BTreeSet<String>,
}

impl Mirror {
    fn new(prefix: &str) -> Mirror {
        Mirror {
            prefix: prefix.to_owned(),
            ..Default::default()
        }
    }

    /// A parent's entries changed at `t` (an event's `parent_mtime_ms`).
    fn touch_parent_of(&mut self, p: &str, t: Option<u64>) {
        let parent = match p.rfind('/') {
            Some(0) | None => "/",
            Some(i) => &p[..i],
        };
        if let (Some((_, a)), Some(t)) = (self.tree.get_mut(parent), t) {
            a.mtime_ms = t;
            a.change_ms = t;
        }
    }

    fn remove_subtree(&mut self, p: &str) {
        let victims: Vec<String> = self
            .tree
            .keys()
            .filter(|k| is_within(k, p))
            .cloned()
            .collect();
        for v in victims {
            self.tree.remove(&v);
        }
    }

    fn apply(&mut self, item: &StreamItem) {
        match item {
            StreamItem::SnapshotStart { resync, .. } => {
                self.in_snapshot = true;
                if *resync {
                    self.resyncs += 1;
                }
                self.tree.clear();
            }
            StreamItem::SnapshotEntry { path, inode } => {
                assert!(self.in_snapshot);
                self.tree
                    .insert(path.to_string(), (inode.id, inode.attrs.clone()));
            }
            StreamItem::SnapshotEnd { .. } => self.in_snapshot = false,
            StreamItem::Progress { .. } => {}
            StreamItem::Record { events, .. } => {
                for se in events.iter() {
                    self.scopes.insert(format!("{:?}", se.scope));
                    match (&se.scope, &*se.event) {
                        (Scope::Ancestor, _) => {
                            let p = self.prefix.clone();
                            self.remove_subtree(&p);
                        }
                        (
                            _,
                            Event::Create {
                                id,
                                path,
                                attrs,
                                parent_mtime_ms: t,
                                ..
                            },
                        ) => {
                            self.tree.insert(path.to_string(), (*id, attrs.clone()));
                            self.touch_parent_of(&path.to_str_lossy(), *t);
                        }
                        (
                            _,
                            Event::Symlink {
                                id,
                                path,
                                attrs,
                                parent_mtime_ms: t,
                                ..
                            },
                        ) => {
                            self.tree.insert(path.to_string(), (*id, attrs.clone()));
                            self.touch_parent_of(&path.to_str_lossy(), Some(*t));
                        }
                        (_, Event::Complete(u) | Event::SetSize(u) | Event::SetAttr(u)) => {
                            self.tree.insert(u.path.to_string(), (u.id, u.new.clone()));
                        }
                        (
                            _,
                            Event::SetXattr {
                                path, change_ms, ..
                            }
                            | Event::RemoveXattr {
                                path, change_ms, ..
                            },
                        ) => {
                            if let Some((_, a)) = self.tree.get_mut(&*path.to_str_lossy()) {
                                a.change_ms = *change_ms;
                            }
                        }
                        (_, Event::SetQuota { .. } | Event::ClearQuota { .. }) => {}
                        (
                            _,
                            Event::Delete {
                                path,
                                parent_mtime_ms: t,
                                ..
                            },
                        ) => {
                            self.remove_subtree(&path.to_str_lossy());
                            self.touch_parent_of(&path.to_str_lossy(), *t);
                        }
                        (
                            Scope::MoveOut,
                            Event::Rename {
                                old_path,
                                parent_mtime_ms: t,
                                ..
                            },
                        ) => {
                            self.remove_subtree(&old_path.to_str_lossy());
                            self.touch_parent_of(&old_path.to_str_lossy(), *t);
                        }
                        (
                            Scope::MoveIn,
                            Event::Rename {
                                id,
                                new_path,
                                attrs,
                                parent_mtime_ms: t,
                                ..
                            },
                        ) => {
                            self.remove_subtree(&new_path.to_str_lossy());
                            self.tree.insert(new_path.to_string(), (*id, attrs.clone()));
                            self.touch_parent_of(&new_path.to_str_lossy(), *t);
                        }
                        (
                            Scope::Inside,
                            Event::Rename {
                                old_path,
                                new_path,
                                attrs,
                                parent_mtime_ms: t,
                                ..
                            },
                        ) => {
                            let moved: Vec<(String, (u64, Attrs))> = self
                                .tree
                                .iter()
                                .filter(|(k, _)| is_within(k, old_path))
                                .map(|(k, v)| (k.clone(), v.clone()))
                                .collect();
                            assert!(
                                !moved.is_empty(),
                                "rename of {old_path}, which the mirror does not have"
                            );
                            self.remove_subtree(&old_path.to_str_lossy());
                            for (k, v) in moved {
                                self.tree
                                    .insert(format!("{new_path}{}", &k[old_path.len()..]), v);
                            }
                            if let Some((_, a)) = self.tree.get_mut(&*new_path.to_str_lossy()) {
                                *a = attrs.clone();
                            }
                            self.touch_parent_of(&old_path.to_str_lossy(), *t);
                            self.touch_parent_of(&new_path.to_str_lossy(), *t);
                        }
                    }
                }
            }
        }
    }

    fn digest(&self) -> String {
        digest_of(&self.tree)
    }
}

fn digest_of(tree: &BTreeMap<String, (u64, Attrs)>) -> String {
    let mut h = Sha256::new();
    for (p, (id, a)) in tree {
        h.update(format!("{p}\0{id}\0{a:?}\n"));
    }
    hex::encode(h.finalize())
}

/// The store's tree under `prefix` (the prefix itself included, but not `/`).
fn store_tree(t: &Treelog, prefix: &str) -> BTreeMap<String, (u64, Attrs)> {
    let mut out = BTreeMap::new();
    let Ok(root) = t.stat(prefix) else { return out };
    if prefix != "/" {
        out.insert(prefix.to_owned(), (root.id, root.attrs.clone()));
    }
    let mut stack = vec![(prefix.to_owned(), root)];
    while let Some((p, ino)) = stack.pop() {
        if ino.attrs.kind.is_dir() {
            for e in t.list_all(&p).unwrap() {
                let cp = treelog::path::join(&p, &e.name);
                out.insert(cp.to_string(), (e.inode.id, e.inode.attrs.clone()));
                stack.push((cp.to_string(), e.inode));
            }
        }
    }
    out
}

/// Drains the subscription until it has processed everything committed.
fn catch_up(sub: &mut Subscription, t: &Treelog, m: &mut Mirror) {
    loop {
        let target = t.committed_seq();
        if sub.position() >= target && !m.in_snapshot && !sub.is_snapshotting() {
            match sub.try_next().unwrap() {
                Some(item) => m.apply(&item),
                None => return,
            }
            continue;
        }
        let item = sub.next_timeout(WAIT).unwrap().expect("stream stalled");
        m.apply(&item);
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, v: &[&'a str]) -> &'a str {
        v[(self.next() % v.len() as u64) as usize]
    }
}

const NAMES: &[&str] = &["a", "b", "c", "d"];

fn random_path(r: &mut Rng) -> String {
    let depth = 1 + r.next() % 4;
    let mut p = String::from("/w");
    for _ in 0..depth {
        p.push('/');
        p.push_str(r.pick(NAMES));
    }
    p
}

fn random_op(t: &Treelog, r: &mut Rng) {
    let p = random_path(r);
    let _ = match r.next() % 20 {
        0..=5 => t.mkdir(
            &p,
            MkdirOptions {
                parents: true,
                owner: r.pick(&["u1", "u2"]).into(),
                ..Default::default()
            },
        ),
        6..=11 => t.create(
            &p,
            CreateOptions {
                parents: true,
                ..Default::default()
            },
        ),
        12 | 13 => t.complete(&p, r.next() % 100),
        14 => t.set_attrs(
            &p,
            SetAttrs {
                mode: Some(0o700 + (r.next() % 8) as u32),
                ..Default::default()
            },
        ),
        15 => t.delete(&p, r.next() % 3 == 0),
        _ => {
            // Whole-subtree moves too: /w/a <-> /w/b and friends.
            let src = if r.next() % 4 == 0 {
                format!("/w/{}", r.pick(NAMES))
            } else {
                p
            };
            t.rename(&src, random_path(r), r.next() % 2 == 0)
        }
    };
}

fn snapshot_then_stream(prefix: &str) {
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(open(dir.path()));
    t.mkdir_p("/w/a/b").unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|i| {
            let t = t.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut r = Rng(0x1234_5678 + i * 7919);
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) || n < 300 {
                    random_op(&t, &mut r);
                    n += 1;
                    if n >= 1500 {
                        break;
                    }
                }
            })
        })
        .collect();
    // Subscribe while the writers are busy (after some history exists).
    assert!(t.wait_for_seq(100, WAIT));
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Snapshot,
            filter: Filter {
                prefix: Some(prefix.to_owned().into()),
                kinds: None,
            },
            ..Default::default()
        })
        .unwrap();
    let mut m = Mirror::new(prefix);
    // Consume concurrently with the writers for a while.
    for _ in 0..2000 {
        match sub.next_timeout(Duration::from_millis(0)).unwrap() {
            Some(item) => m.apply(&item),
            None => break,
        }
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        w.join().unwrap();
    }
    // End on a populated subtree: create inside it and move a whole
    // directory in (a resync), then catch up.
    let base = if prefix == "/" {
        String::new()
    } else {
        prefix.to_owned()
    };
    // (The random operations may have left a file where a directory of
    // the prefix should be.)
    let mut anc = String::new();
    for c in format!("{base}/z").split('/').filter(|c| !c.is_empty()) {
        anc.push('/');
        anc.push_str(c);
        if t.stat(&anc).is_ok_and(|i| !i.attrs.kind.is_dir()) {
            t.delete(&anc, false).unwrap();
        }
    }
    t.mkdir_p(format!("{base}/z/y")).unwrap();
    t.create(format!("{base}/z/f"), CreateOptions::default())
        .unwrap();
    t.mkdir_p("/elsewhere/m/n").unwrap();
    t.create("/elsewhere/m/n/g", CreateOptions::default())
        .unwrap();
    t.rename("/elsewhere/m", format!("{base}/z/m"), false)
        .unwrap();
    catch_up(&mut sub, &t, &mut m);
    let want = store_tree(&t, prefix);
    assert!(want.contains_key(&format!("{base}/z/m/n/g")));
    assert_eq!(m.tree, want, "mirror of {prefix} differs from the store");
    assert_eq!(m.digest(), digest_of(&want));
    println!(
        "{prefix}: {} entries, {} resyncs, scopes {:?}",
        want.len(),
        m.resyncs,
        m.scopes
    );
}

#[test]
fn snapshot_then_stream_rebuilds_the_whole_tree() {
    snapshot_then_stream("/");
}

#[test]
fn snapshot_then_stream_rebuilds_a_subtree() {
    snapshot_then_stream("/w/a");
}

#[test]
fn snapshot_then_stream_rebuilds_a_deep_subtree_across_ancestor_moves() {
    snapshot_then_stream("/w/a/b");
}

#[test]
fn resume_after_drops_and_restart_has_no_gap_and_no_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen: Vec<u64> = Vec::new();
    let mut r = Rng(42);
    let mut next_from = 1u64;
    for phase in 0..3 {
        let t = Arc::new(open(dir.path()));
        let writer = {
            let t = t.clone();
            std::thread::spawn(move || {
                for i in 0..400 {
                    t.mkdir_p(format!("/p{phase}/d{}", i % 37)).unwrap();
                    t.create(
                        format!("/p{phase}/d{}/f{i}", i % 37),
                        CreateOptions::default(),
                    )
                    .unwrap();
                }
            })
        };
        // Let a backlog build up so that the subscription reads ahead.
        assert!(t.wait_for_seq(next_from + 300, WAIT));
        // Subscribe, read a random number of records, drop, resume.
        let mut done = false;
        while !done {
            let mut sub = t
                .subscribe(SubscribeOptions {
                    from: StartFrom::Seq(next_from),
                    ..Default::default()
                })
                .unwrap();
            let take = 1 + r.next() % 150;
            for _ in 0..take {
                match sub.next_timeout(Duration::from_millis(200)).unwrap() {
                    Some(StreamItem::Record { seq, .. }) => seen.push(seq),
                    Some(_) => {}
                    None => {
                        done = writer.is_finished() && sub.position() == t.committed_seq();
                        break;
                    }
                }
            }
            next_from = sub.position() + 1;
        }
        writer.join().unwrap();
        // Restart the store between phases.
        match Arc::try_unwrap(t) {
            Ok(t) => t.close().unwrap(),
            Err(_) => panic!("store still shared"),
        }
    }
    let t = open(dir.path());
    let last = t.committed_seq();
    assert_eq!(
        seen.len() as u64,
        last,
        "some records were missed or repeated"
    );
    assert_eq!(seen, (1..=last).collect::<Vec<_>>());
}

#[test]
fn scopes_of_moves_into_out_of_across_and_above_the_subtree() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    t.mkdir_p("/p/in").unwrap();
    t.mkdir_p("/out").unwrap();
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Now,
            filter: Filter {
                prefix: Some("/p/in".into()),
                kinds: None,
            },
            ..Default::default()
        })
        .unwrap();
    let expect = |sub: &mut Subscription, want: &[(Scope, EventKind)]| {
        let item = sub.next_timeout(WAIT).unwrap().unwrap();
        match item {
            StreamItem::Record { events, .. } => {
                let got: Vec<(Scope, EventKind)> =
                    events.iter().map(|e| (e.scope, e.event.kind())).collect();
                assert_eq!(got, want);
            }
            other => panic!("expected a record, got {other:?}"),
        }
    };
    t.create("/out/f", CreateOptions::default()).unwrap(); // filtered out
    t.rename("/out/f", "/p/in/f", false).unwrap();
    expect(&mut sub, &[(Scope::MoveIn, EventKind::Rename)]);
    t.mkdir_p("/p/in/d").unwrap();
    expect(&mut sub, &[(Scope::Inside, EventKind::Create)]);
    t.rename("/p/in/f", "/p/in/d/g", false).unwrap();
    expect(&mut sub, &[(Scope::Inside, EventKind::Rename)]);
    t.rename("/p/in/d/g", "/out/g", false).unwrap();
    expect(&mut sub, &[(Scope::MoveOut, EventKind::Rename)]);
    t.create("/out/h", CreateOptions::default()).unwrap();
    t.create("/p/in/d/h", CreateOptions::default()).unwrap();
    t.rename("/out/h", "/p/in/d/h", true).unwrap(); // replaces a file inside
    expect(&mut sub, &[(Scope::Inside, EventKind::Create)]);
    expect(
        &mut sub,
        &[
            (Scope::Inside, EventKind::Delete),
            (Scope::MoveIn, EventKind::Rename),
        ],
    );
    t.rename("/p", "/q", false).unwrap(); // an ancestor moves away
    expect(&mut sub, &[(Scope::Ancestor, EventKind::Rename)]);
    t.mkdir_p("/p/in").unwrap(); // the prefix exists again
    expect(&mut sub, &[(Scope::Inside, EventKind::Create)]);
    t.delete("/p", true).unwrap(); // an ancestor is deleted
    expect(
        &mut sub,
        &[
            (Scope::Inside, EventKind::Delete),
            (Scope::Ancestor, EventKind::Delete),
        ],
    );
    // Nothing else is pending, and the filtered-out records were reported
    // as progress.
    let mut last_progress = 0;
    while let Some(item) = sub.try_next().unwrap() {
        match item {
            StreamItem::Progress { seq } => last_progress = seq,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(last_progress == 0 || last_progress <= t.committed_seq());
    assert_eq!(sub.position(), t.committed_seq());
}

#[test]
fn kind_filter_and_progress() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(1),
            filter: Filter {
                prefix: None,
                kinds: Some(vec![EventKind::Delete]),
            },
            ..Default::default()
        })
        .unwrap();
    t.mkdir_p("/a/b").unwrap();
    t.create("/a/b/f", CreateOptions::default()).unwrap();
    match sub.next_timeout(WAIT).unwrap().unwrap() {
        StreamItem::Progress { seq } => assert_eq!(seq, 2),
        other => panic!("expected progress, got {other:?}"),
    }
    t.delete("/a", true).unwrap();
    match sub.next_timeout(WAIT).unwrap().unwrap() {
        StreamItem::Record { seq, events, .. } => {
            assert_eq!(seq, 3);
            let paths: Vec<String> = events
                .iter()
                .map(|e| match &*e.event {
                    Event::Delete { path, .. } => path.to_string(),
                    other => panic!("{other:?}"),
                })
                .collect();
            assert_eq!(paths, vec!["/a/b/f", "/a/b", "/a"]);
        }
        other => panic!("expected a record, got {other:?}"),
    }
}

/// Subscribers with equal filters (kinds in any order) share each record's
/// filtered events; a different filter gets its own, and both are right.
#[test]
fn equal_filters_share_filtered_events() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    t.mkdir_p("/a").unwrap();
    t.mkdir_p("/b").unwrap();
    let sub = |prefix: &str, kinds: Vec<EventKind>| {
        t.subscribe(SubscribeOptions {
            filter: Filter {
                prefix: Some(prefix.into()),
                kinds: Some(kinds),
            },
            ..Default::default()
        })
        .unwrap()
    };
    let mut s1 = sub("/a", vec![EventKind::Create, EventKind::Delete]);
    let mut s2 = sub("/a/", vec![EventKind::Delete, EventKind::Create]);
    let mut s3 = sub("/a", vec![EventKind::Create]);
    let mut other = sub("/b", vec![EventKind::Create]);
    t.create("/a/f", CreateOptions::default()).unwrap();
    t.create("/b/g", CreateOptions::default()).unwrap();
    let events = |s: &mut Subscription| match s.next_timeout(WAIT).unwrap().unwrap() {
        StreamItem::Record { events, .. } => events,
        item => panic!("expected a record, got {item:?}"),
    };
    let (e1, e2, e3) = (events(&mut s1), events(&mut s2), events(&mut s3));
    assert!(Arc::ptr_eq(&e1, &e2), "equal filters share the slice");
    assert!(!Arc::ptr_eq(&e1, &e3), "a different filter has its own");
    for e in [&e1, &e3] {
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].scope, Scope::Inside);
        assert!(matches!(&*e[0].event, Event::Create { path, .. } if path == "/a/f"));
    }
    // The other subtree sees only its own create.
    let eb = events(&mut other);
    assert!(matches!(&*eb[0].event, Event::Create { path, .. } if path == "/b/g"));
}

#[test]
fn a_thousand_idle_subscribers_all_see_the_next_record() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    let mut subs: Vec<Subscription> = (0..1000)
        .map(|_| t.subscribe(SubscribeOptions::default()).unwrap())
        .collect();
    let seq = t.mkdir_p("/x").unwrap();
    for s in &mut subs {
        match s.next_timeout(WAIT).unwrap().unwrap() {
            StreamItem::Record { seq: got, .. } => assert_eq!(got, seq),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn async_subscription_wakes_on_commit() {
    let dir = tempfile::tempdir().unwrap();
    let t = Arc::new(open(dir.path()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let mut sub = t.subscribe(SubscribeOptions::default()).unwrap();
        let t2 = t.clone();
        let writer = tokio::spawn(async move {
            for i in 0..20 {
                t2.submit_async(treelog::Command::Mkdir {
                    path: format!("/d{i}").into(),
                    parents: false,
                    mode: 0o755,
                    owner: String::new(),
                    group: String::new(),
                })
                .await
                .unwrap();
            }
        });
        let mut got = Vec::new();
        while got.len() < 20 {
            if let StreamItem::Record { seq, .. } = sub.next_async().await.unwrap() {
                got.push(seq);
            }
        }
        writer.await.unwrap();
        assert_eq!(got, (1..=20).collect::<Vec<_>>());
    });
}

fn fill(t: &Treelog, n: usize, tag: &str) {
    for i in 0..n {
        t.mkdir_p(format!("/{tag}{i}")).unwrap();
    }
}

#[test]
fn retention_by_count_and_compacted_before_and_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    fill(&t, 100, "r");
    let rep = t
        .run_retention(&RetentionPolicy {
            max_records: Some(10),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        (rep.old_start, rep.new_start, rep.removed_records),
        (1, 91, 90)
    );
    assert_eq!(t.log_start(), 91);
    let e = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(5),
            ..Default::default()
        })
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::Compacted);
    assert!(
        matches!(
            e,
            treelog::Error::Compacted {
                requested: 5,
                first_available: 91
            }
        ),
        "{e}"
    );
    // The index is intact; verify refuses clearly (it needs the whole log).
    assert_eq!(t.list_all("/").unwrap().len(), 100);
    assert_eq!(
        treelog::admin::verify(t.store()).unwrap_err().kind(),
        ErrorKind::Compacted
    );
    t.close().unwrap();

    let t = open(dir.path());
    assert_eq!(t.log_start(), 91);
    assert_eq!(t.committed_seq(), 100);
    let e = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(90),
            ..Default::default()
        })
        .err()
        .unwrap();
    assert!(
        matches!(
            e,
            treelog::Error::Compacted {
                requested: 90,
                first_available: 91
            }
        ),
        "{e}"
    );
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(91),
            ..Default::default()
        })
        .unwrap();
    let mut seqs = Vec::new();
    while let Some(StreamItem::Record { seq, .. }) = sub.try_next().unwrap() {
        seqs.push(seq);
    }
    assert_eq!(seqs, (91..=100).collect::<Vec<_>>());
    // Writing goes on after the log start moved.
    assert_eq!(t.mkdir_p("/after").unwrap(), 101);
    // The documented way back: snapshot, then stream.
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Snapshot,
            ..Default::default()
        })
        .unwrap();
    let mut m = Mirror::new("/");
    catch_up(&mut sub, &t, &mut m);
    assert_eq!(m.tree, store_tree(&t, "/"));
}

#[test]
fn retention_by_bytes_and_age() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    fill(&t, 200, "b");
    let total = t.log_bytes();
    assert!(total > 0);
    let rep = t
        .run_retention(&RetentionPolicy {
            max_bytes: Some(total / 2),
            ..Default::default()
        })
        .unwrap();
    assert!(
        rep.removed_records > 0 && rep.removed_bytes >= total / 2,
        "{rep:?}"
    );
    assert!(
        t.log_bytes() <= total / 2,
        "{} > {}",
        t.log_bytes(),
        total / 2
    );
    // Age: write until the clock moved past the last record's time, then keep
    // nothing older than "now".
    let first_kept = t
        .store()
        .read_record(t.log_start())
        .unwrap()
        .unwrap()
        .time_ms;
    let mut i = 0;
    loop {
        let seq = t.mkdir_p(format!("/age{i}")).unwrap();
        i += 1;
        if t.store().read_record(seq).unwrap().unwrap().time_ms > first_kept {
            break;
        }
    }
    let before = t.log_start();
    let rep = t
        .run_retention(&RetentionPolicy {
            max_age: Some(Duration::ZERO),
            ..Default::default()
        })
        .unwrap();
    assert!(rep.new_start > before, "{rep:?}");
    let big = t
        .run_retention(&RetentionPolicy {
            max_age: Some(Duration::from_secs(3600)),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(big.removed_records, 0);
}

#[test]
fn cursors_hold_retention_persist_and_expire() {
    let dir = tempfile::tempdir().unwrap();
    let t = open(dir.path());
    fill(&t, 10, "c");
    // A named cursor created from sequence 1.
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Seq(1),
            cursor: Some("indexer".into()),
            ..Default::default()
        })
        .unwrap();
    for _ in 0..5 {
        sub.next_timeout(WAIT).unwrap().unwrap();
    }
    t.ack("indexer", sub.position()).unwrap();
    drop(sub);
    fill(&t, 90, "d");
    let rep = t
        .run_retention(&RetentionPolicy {
            max_records: Some(10),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(
        rep.new_start, 6,
        "the cursor at 5 must hold the log: {rep:?}"
    );
    assert_eq!(rep.held_by_cursor.as_deref(), Some("indexer"));
    t.close().unwrap();

    // The acknowledged position survives a restart; resuming continues at 6.
    let t = open(dir.path());
    let cs = t.cursors();
    assert_eq!(cs.len(), 1);
    assert_eq!(
        (cs[0].name.as_str(), cs[0].state.acked, cs[0].lag),
        ("indexer", 5, 95)
    );
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Now,
            cursor: Some("indexer".into()),
            ..Default::default()
        })
        .unwrap();
    match sub.next_timeout(WAIT).unwrap().unwrap() {
        StreamItem::Record { seq, .. } => assert_eq!(seq, 6),
        other => panic!("{other:?}"),
    }
    drop(sub);
    // A cursor lagging more than the bound is expired, and retention moves on.
    let rep = t
        .run_retention(&RetentionPolicy {
            max_records: Some(10),
            max_cursor_lag: Some(50),
            ..Default::default()
        })
        .unwrap();
    assert_eq!(rep.expired_cursors, vec!["indexer".to_string()]);
    assert_eq!(rep.new_start, 91);
    let e = t
        .subscribe(SubscribeOptions {
            cursor: Some("indexer".into()),
            ..Default::default()
        })
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::CursorExpired);
    assert!(e.to_string().contains("snapshot"), "{e}");
    assert_eq!(
        t.ack("indexer", 100).unwrap_err().kind(),
        ErrorKind::CursorExpired
    );
    t.close().unwrap();
    let t = open(dir.path());
    let e = t
        .subscribe(SubscribeOptions {
            cursor: Some("indexer".into()),
            ..Default::default()
        })
        .err()
        .unwrap();
    assert_eq!(
        e.kind(),
        ErrorKind::CursorExpired,
        "expiry must survive a restart"
    );
    t.drop_cursor("indexer").unwrap();
    assert!(t.cursors().is_empty());
    // Re-registering starts fresh (from a snapshot, the documented way back).
    let mut sub = t
        .subscribe(SubscribeOptions {
            from: StartFrom::Snapshot,
            cursor: Some("indexer".into()),
            ..Default::default()
        })
        .unwrap();
    let mut m = Mirror::new("/");
    catch_up(&mut sub, &t, &mut m);
    assert_eq!(m.tree, store_tree(&t, "/"));
    t.ack("indexer", sub.position()).unwrap();
    assert_eq!(t.cursors()[0].lag, 0);
}
