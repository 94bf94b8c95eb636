//! Model-based property test: random sequences of every operation (valid and
//! invalid) against an in-memory model tree. Every result (value or error
//! kind) must match the model; afterwards the live index, the index after
//! close + reopen, and the index rebuilt from the log must be byte-identical
//! (same digest) and the listings must match the model.
//!
//! Commands are pipelined (queued without waiting), so the writer forms
//! groups and validates later commands against the group's own earlier
//! changes: the results must not depend on how commands were grouped.

use std::collections::BTreeMap;

use proptest::prelude::*;
use treelog::admin;
use treelog::error::ErrorKind;
use treelog::path;
use treelog::{Command, Durability, Options, Treelog};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    dir: bool,
    size: u64,
    complete: bool,
    mode: u32,
    owner: String,
    group: String,
}

/// What a command did in the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Res {
    Changed,
    NoOp,
    Err(ErrorKind),
}

#[derive(Default)]
struct Model {
    nodes: BTreeMap<String, Node>,
}

type R<T> = Result<T, ErrorKind>;

impl Model {
    fn new() -> Model {
        let mut m = Model::default();
        m.nodes.insert(
            "/".into(),
            Node {
                dir: true,
                size: 0,
                complete: true,
                mode: 0o755,
                owner: String::new(),
                group: String::new(),
            },
        );
        m
    }

    fn comps(p: &str) -> R<Vec<String>> {
        path::components(p)
            .map(|v| v.into_iter().map(str::to_owned).collect())
            .map_err(|e| e.kind())
    }

    fn join(c: &[String]) -> String {
        let r: Vec<&str> = c.iter().map(String::as_str).collect();
        path::join_all(&r)
    }

    fn resolve(&self, c: &[String]) -> R<String> {
        let mut cur = "/".to_string();
        for i in 0..c.len() {
            if !self.nodes[&cur].dir {
                return Err(ErrorKind::NotADirectory);
            }
            let next = Self::join(&c[..=i]);
            if !self.nodes.contains_key(&next) {
                return Err(ErrorKind::NotFound);
            }
            cur = next;
        }
        Ok(cur)
    }

    /// (deepest existing path, number of existing components)
    fn walk_existing(&self, c: &[String]) -> R<(String, usize)> {
        let mut cur = "/".to_string();
        for i in 0..c.len() {
            if !self.nodes[&cur].dir {
                return Err(ErrorKind::NotADirectory);
            }
            let next = Self::join(&c[..=i]);
            if !self.nodes.contains_key(&next) {
                return Ok((cur, i));
            }
            cur = next;
        }
        Ok((cur, c.len()))
    }

    fn has_children(&self, p: &str) -> bool {
        self.nodes.keys().any(|k| k != p && path::is_within(k, p))
    }

    fn subtree(&self, p: &str) -> Vec<String> {
        self.nodes
            .keys()
            .filter(|k| path::is_within(k, p))
            .cloned()
            .collect()
    }

    fn apply(&mut self, cmd: &Command) -> Res {
        match self.apply_inner(cmd) {
            Ok(true) => Res::Changed,
            Ok(false) => Res::NoOp,
            Err(k) => Res::Err(k),
        }
    }

    fn create_chain(&mut self, c: &[String], existing: usize, dir_node: &Node, last: &Node) {
        for i in existing..c.len() {
            let n = if i + 1 == c.len() {
                last.clone()
            } else {
                dir_node.clone()
            };
            self.nodes.insert(Self::join(&c[..=i]), n);
        }
    }

    fn apply_inner(&mut self, cmd: &Command) -> R<bool> {
        match cmd {
            Command::Mkdir {
                path: p,
                parents,
                mode,
                owner,
                group,
            } => {
                if *mode > 0o7777 {
                    return Err(ErrorKind::InvalidArgument);
                }
                let c = Self::comps(p)?;
                if c.is_empty() {
                    return if *parents {
                        Ok(false)
                    } else {
                        Err(ErrorKind::AlreadyExists)
                    };
                }
                let (deep, existing) = self.walk_existing(&c)?;
                if existing == c.len() {
                    return if *parents && self.nodes[&deep].dir {
                        Ok(false)
                    } else {
                        Err(ErrorKind::AlreadyExists)
                    };
                }
                if !*parents && existing + 1 < c.len() {
                    return Err(ErrorKind::NotFound);
                }
                let n = Node {
                    dir: true,
                    size: 0,
                    complete: true,
                    mode: *mode,
                    owner: owner.clone(),
                    group: group.clone(),
                };
                self.create_chain(&c, existing, &n.clone(), &n);
                Ok(true)
            }
            Command::Create {
                path: p,
                parents,
                mode,
                owner,
                group,
                ..
            } => {
                if *mode > 0o7777 {
                    return Err(ErrorKind::InvalidArgument);
                }
                let c = Self::comps(p)?;
                if c.is_empty() {
                    return Err(ErrorKind::AlreadyExists);
                }
                let (_, existing) = self.walk_existing(&c)?;
                if existing == c.len() {
                    return Err(ErrorKind::AlreadyExists);
                }
                if !*parents && existing + 1 < c.len() {
                    return Err(ErrorKind::NotFound);
                }
                let d = Node {
                    dir: true,
                    size: 0,
                    complete: true,
                    mode: 0o755,
                    owner: owner.clone(),
                    group: group.clone(),
                };
                let f = Node {
                    dir: false,
                    size: 0,
                    complete: false,
                    mode: *mode,
                    owner: owner.clone(),
                    group: group.clone(),
                };
                self.create_chain(&c, existing, &d, &f);
                Ok(true)
            }
            Command::Complete { path: p, size } => {
                let k = self.resolve(&Self::comps(p)?)?;
                let n = self.nodes.get_mut(&k).expect("resolved");
                if n.dir {
                    return Err(ErrorKind::IsADirectory);
                }
                if n.complete {
                    return if n.size == *size {
                        Ok(false)
                    } else {
                        Err(ErrorKind::InvalidArgument)
                    };
                }
                n.size = *size;
                n.complete = true;
                Ok(true)
            }
            Command::SetSize { path: p, size } => {
                let k = self.resolve(&Self::comps(p)?)?;
                let n = self.nodes.get_mut(&k).expect("resolved");
                if n.dir {
                    return Err(ErrorKind::IsADirectory);
                }
                n.size = *size;
                // The engine always writes (mtime changes).
                Ok(true)
            }
            Command::SetAttr {
                path: p,
                mode,
                owner,
                group,
                mtime_ms,
            } => {
                assert!(mtime_ms.is_none(), "the model does not track times");
                let k = self.resolve(&Self::comps(p)?)?;
                let n = self.nodes.get_mut(&k).expect("resolved");
                let mut new = n.clone();
                if let Some(m) = mode {
                    if *m > 0o7777 {
                        return Err(ErrorKind::InvalidArgument);
                    }
                    new.mode = *m;
                }
                if let Some(o) = owner {
                    new.owner = o.clone();
                }
                if let Some(g) = group {
                    new.group = g.clone();
                }
                if new == *n {
                    return Ok(false);
                }
                *n = new;
                Ok(true)
            }
            Command::Delete { path: p, recursive } => {
                let k = self.resolve(&Self::comps(p)?)?;
                if k == "/" {
                    return Err(ErrorKind::InvalidArgument);
                }
                if self.nodes[&k].dir && !*recursive && self.has_children(&k) {
                    return Err(ErrorKind::NotEmpty);
                }
                for victim in self.subtree(&k) {
                    self.nodes.remove(&victim);
                }
                Ok(true)
            }
            Command::Rename {
                src,
                dst,
                overwrite,
            } => {
                let sc = Self::comps(src)?;
                let dc = Self::comps(dst)?;
                if sc.is_empty() || dc.is_empty() {
                    return Err(ErrorKind::InvalidArgument);
                }
                let s = self.resolve(&sc)?;
                let dp = self.resolve(&dc[..dc.len() - 1])?;
                if !self.nodes[&dp].dir {
                    return Err(ErrorKind::NotADirectory);
                }
                let d = Self::join(&dc);
                if s == d {
                    return Ok(false);
                }
                let sdir = self.nodes[&s].dir;
                if sdir && path::is_within(&d, &s) {
                    return Err(ErrorKind::InvalidArgument);
                }
                if let Some(victim) = self.nodes.get(&d) {
                    if !*overwrite {
                        return Err(ErrorKind::AlreadyExists);
                    }
                    match (sdir, victim.dir) {
                        (false, false) => {}
                        (true, true) => {
                            if self.has_children(&d) {
                                return Err(ErrorKind::NotEmpty);
                            }
                        }
                        (false, true) => return Err(ErrorKind::IsADirectory),
                        (true, false) => return Err(ErrorKind::NotADirectory),
                    }
                    self.nodes.remove(&d);
                }
                for old in self.subtree(&s) {
                    let node = self.nodes.remove(&old).expect("in subtree");
                    let new = format!("{d}{}", &old[s.len()..]);
                    self.nodes.insert(new, node);
                }
                Ok(true)
            }
        }
    }
}

fn store_tree(t: &Treelog) -> BTreeMap<String, Node> {
    let mut out = BTreeMap::new();
    let root = t.stat("/").unwrap();
    let mut stack = vec![("/".to_string(), root)];
    while let Some((p, ino)) = stack.pop() {
        out.insert(p.clone(), node(&ino.attrs));
        if ino.attrs.kind.is_dir() {
            // Small pages to exercise start_after paging.
            let mut after: Option<String> = None;
            let mut names = Vec::new();
            loop {
                let page = t.list(&p, after.as_deref(), 2).unwrap();
                for e in page.entries {
                    names.push(e.name.clone());
                    stack.push((path::join(&p, &e.name), e.inode));
                }
                match page.next_start_after {
                    Some(n) => after = Some(n),
                    None => break,
                }
            }
            let mut sorted = names.clone();
            sorted.sort_by(|a, b| a.as_bytes().cmp(b.as_bytes()));
            assert_eq!(names, sorted, "listing of {p} is not in byte order");
        }
    }
    out
}

/// "/a/b" -> "/a", "/a" -> "/".
fn parent_of(p: &str) -> &str {
    match p.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &p[..i],
    }
}

/// What a concurrent reader saw, at the sequence its reply carried.
struct Observed {
    seq: u64,
    what: Seen,
}

enum Seen {
    /// A path and its node.
    Stat(String, Option<Node>),
    /// A directory and its entries.
    List(String, Option<Vec<(String, Node)>>),
}

fn node(a: &treelog::Attrs) -> Node {
    Node {
        dir: a.kind.is_dir(),
        size: a.size,
        complete: a.complete,
        mode: a.mode,
        owner: a.owner.clone(),
        group: a.group.clone(),
    }
}

/// Stats and lists the paths the generator uses until `done`, each read at
/// one state it names.
fn concurrent_reads(t: &Treelog, done: &std::sync::atomic::AtomicBool, r: usize) -> Vec<Observed> {
    let names = ["a", "b", "c"];
    let mut paths = vec!["/".to_owned()];
    for x in names {
        paths.push(format!("/{x}"));
        for y in names {
            paths.push(format!("/{x}/{y}"));
        }
    }
    let mut out = Vec::new();
    let mut i = r;
    while !done.load(std::sync::atomic::Ordering::SeqCst) || out.len() < 4 {
        let p = &paths[i % paths.len()];
        i += 1;
        if i % 2 == 0 {
            match t.stat_at(p, treelog::ReadAt::Latest) {
                Ok(rd) => out.push(Observed {
                    seq: rd.seq,
                    what: Seen::Stat(p.clone(), Some(node(&rd.value.attrs))),
                }),
                // An error names no state to check it against.
                Err(e) => assert!(
                    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory),
                    "{e}"
                ),
            }
        } else {
            match t.list_at(p, None, 10_000, treelog::ReadAt::Latest) {
                Ok(rd) => out.push(Observed {
                    seq: rd.seq,
                    what: Seen::List(
                        p.clone(),
                        Some(
                            rd.value
                                .entries
                                .iter()
                                .map(|e| (e.name.clone(), node(&e.inode.attrs)))
                                .collect(),
                        ),
                    ),
                }),
                Err(e) => assert!(
                    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory),
                    "{e}"
                ),
            }
        }
    }
    out
}

fn arb_path() -> impl Strategy<Value = String> {
    let name = prop_oneof![
        8 => prop::sample::select(vec!["a", "b", "c"]).prop_map(str::to_owned),
        1 => prop::sample::select(vec!["", ".", "..", "x\0y", "Ω"]).prop_map(str::to_owned),
        1 => Just("n".repeat(256)),
    ];
    prop_oneof![
        20 => prop::collection::vec(name, 0..4).prop_map(|v| format!("/{}", v.join("/"))),
        1 => Just("relative/a".to_owned()),
        1 => Just("/a//b".to_owned()),
        1 => Just("/a/".to_owned()),
    ]
}

fn arb_owner() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["", "alice", "bob"]).prop_map(str::to_owned)
}

fn arb_mode() -> impl Strategy<Value = u32> {
    prop_oneof![10 => prop::sample::select(vec![0o755u32, 0o644, 0o600]), 1 => Just(0o17777u32)]
}

fn arb_cmd() -> impl Strategy<Value = Command> {
    prop_oneof![
        3 => (arb_path(), any::<bool>(), arb_mode(), arb_owner(), arb_owner())
            .prop_map(|(path, parents, mode, owner, group)| Command::Mkdir { path, parents, mode, owner, group }),
        3 => (arb_path(), any::<bool>(), arb_mode(), arb_owner())
            .prop_map(|(path, parents, mode, owner)| Command::Create { path, parents, mode, owner, group: String::new(), block_size: 4096 }),
        1 => (arb_path(), 0u64..3).prop_map(|(path, size)| Command::Complete { path, size }),
        1 => (arb_path(), 0u64..3).prop_map(|(path, size)| Command::SetSize { path, size }),
        1 => (arb_path(), proptest::option::of(arb_mode()), proptest::option::of(arb_owner()), proptest::option::of(arb_owner()))
            .prop_map(|(path, mode, owner, group)| Command::SetAttr { path, mode, owner, group, mtime_ms: None }),
        2 => (arb_path(), any::<bool>()).prop_map(|(path, recursive)| Command::Delete { path, recursive }),
        3 => (arb_path(), arb_path(), any::<bool>()).prop_map(|(src, dst, overwrite)| Command::Rename { src, dst, overwrite }),
    ]
}

fn digest(t: &Treelog) -> String {
    admin::index_digest(t.store()).unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn store_matches_model(cmds in prop::collection::vec(arb_cmd(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let opts = || Options::default().durability(Durability::None);
        let t = Treelog::open(dir.path(), opts()).unwrap();
        let mut model = Model::new();
        let start = t.committed_seq();
        // Readers beside the writer: every read is checked below against
        // the model's state at the sequence its reply carries.
        let done = std::sync::atomic::AtomicBool::new(false);
        let reads = std::thread::scope(|s| {
            let readers: Vec<_> = (0..2)
                .map(|r| {
                    let (t, done) = (&t, &done);
                    s.spawn(move || concurrent_reads(t, done, r))
                })
                .collect();
            let pending: Vec<_> =
                cmds.iter().map(|c| t.submit_pipelined(c.clone()).unwrap()).collect();
            let results: Vec<_> = pending.into_iter().map(|p| p.wait()).collect();
            done.store(true, std::sync::atomic::Ordering::SeqCst);
            let reads: Vec<Observed> = readers.into_iter().flat_map(|h| h.join().unwrap()).collect();
            (results, reads)
        });
        let (results, reads) = reads;
        let mut states: BTreeMap<u64, BTreeMap<String, Node>> = BTreeMap::new();
        states.insert(start, model.nodes.clone());
        let mut expect_seq = start;
        for (cmd, got) in cmds.iter().zip(results) {
            let want = model.apply(cmd);
            if want == Res::Changed {
                states.insert(expect_seq + 1, model.nodes.clone());
            }
            match (want, &got) {
                (Res::Changed, Ok(seq)) => {
                    expect_seq += 1;
                    prop_assert_eq!(*seq, expect_seq, "{:?}", cmd);
                }
                (Res::NoOp, Ok(seq)) => prop_assert_eq!(*seq, expect_seq, "no-op {:?}", cmd),
                (Res::Err(k), Err(e)) => prop_assert_eq!(k, e.kind(), "{:?}: {}", cmd, e),
                (w, g) => prop_assert!(false, "{:?}: model {:?}, store {:?}", cmd, w, g),
            }
        }
        prop_assert_eq!(t.committed_seq(), expect_seq);
        for o in &reads {
            let state = states.get(&o.seq);
            prop_assert!(state.is_some(), "a read at {}, a state that never existed", o.seq);
            let state = state.unwrap();
            match &o.what {
                Seen::Stat(p, got) => {
                    prop_assert_eq!(got.as_ref(), state.get(p), "stat {} at {}", p, o.seq)
                }
                Seen::List(p, got) => {
                    let want: Option<Vec<(String, Node)>> = state.get(p).filter(|n| n.dir).map(|_| {
                        state
                            .iter()
                            .filter(|(q, _)| q.as_str() != "/" && parent_of(q) == p.as_str())
                            .map(|(q, n)| (q.rsplit('/').next().unwrap().to_owned(), n.clone()))
                            .collect()
                    });
                    let mut got = got.clone();
                    if let Some(g) = got.as_mut() {
                        g.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                    }
                    let mut want = want;
                    if let Some(w) = want.as_mut() {
                        w.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
                    }
                    prop_assert_eq!(got, want, "list {} at {}", p, o.seq)
                }
            }
        }
        prop_assert_eq!(store_tree(&t), model.nodes.clone());
        let live = digest(&t);
        let report = admin::verify(t.store()).unwrap();
        prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
        prop_assert_eq!(&report.replay_digest, &live);
        t.close().unwrap();

        // Reopen: same index, same tree.
        let t = Treelog::open(dir.path(), opts()).unwrap();
        prop_assert_eq!(digest(&t), live.clone());
        prop_assert_eq!(store_tree(&t), model.nodes.clone());
        t.close().unwrap();

        // Rebuild from the log: same bytes. (Into memtables without bloom
        // filters, as a long replay does; `verify` above replayed with them.)
        let so = treelog::store::StoreOptions {
            long_replay_min: 0,
            ..Default::default()
        };
        let n = admin::rebuild(dir.path(), &so).unwrap();
        prop_assert_eq!(n, expect_seq);
        let t = Treelog::open(dir.path(), opts()).unwrap();
        prop_assert_eq!(digest(&t), live);
        prop_assert_eq!(store_tree(&t), model.nodes);
    }
}

/// A recursive delete of more inodes than `max_delete_inodes` is refused
/// whole: nothing is logged and the subtree stays. At the bound it goes.
#[test]
fn a_recursive_delete_over_the_bound_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::default().durability(Durability::None);
    o.writer.max_delete_inodes = 6;
    let t = Treelog::open(dir.path(), o).unwrap();
    // /big holds 7 inodes: itself, /big/sub and five files in it.
    t.mkdir_p("/big/sub").unwrap();
    for i in 0..5 {
        t.create(&format!("/big/sub/f{i}"), treelog::CreateOptions::default())
            .unwrap();
    }
    let before = t.committed_seq();
    let e = t.delete("/big", true).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(
        e.to_string().contains("/big holds more than 6 inodes"),
        "{e}"
    );
    assert_eq!(t.committed_seq(), before, "nothing logged");
    assert!(t.stat("/big/sub/f4").is_ok());
    // /big/sub holds 6: exactly the bound.
    t.delete("/big/sub", true).unwrap();
    assert_eq!(t.stat("/big/sub").unwrap_err().kind(), ErrorKind::NotFound);
    t.delete("/big", true).unwrap();
    let report = admin::verify(t.store()).unwrap();
    assert!(report.ok(), "{report:?}");
}

/// A command whose record would exceed `max_record_bytes` (a recursive
/// delete of long paths) is refused whole; a smaller one goes.
#[test]
fn a_record_over_the_byte_bound_is_refused_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut o = Options::default().durability(Durability::None);
    o.writer.max_record_bytes = 8 << 10;
    let t = Treelog::open(dir.path(), o).unwrap();
    // 40 files under a 200-byte directory: 40 delete events of ~300 bytes
    // (a 244-byte path, a 42-byte name, the rest), over 8 KiB; 10 of them
    // are under it.
    let long = format!("/{}", "d".repeat(200));
    for i in 0..40 {
        let p = format!("{long}/{}{i}", "f".repeat(40));
        t.create(
            &p,
            treelog::CreateOptions {
                parents: true,
                ..Default::default()
            },
        )
        .unwrap();
    }
    let before = t.committed_seq();
    let e = t.delete(&long, true).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("log record would hold"), "{e}");
    assert_eq!(t.committed_seq(), before, "nothing logged");
    for i in 0..30 {
        t.delete(&format!("{long}/{}{i}", "f".repeat(40)), false)
            .unwrap();
    }
    t.delete(&long, true).unwrap();
    assert_eq!(t.stat(&long).unwrap_err().kind(), ErrorKind::NotFound);
    let report = admin::verify(t.store()).unwrap();
    assert!(report.ok(), "{report:?}");
}

/// A rename that would push a path under the moved directory past 4,096
/// bytes is refused: no path of the namespace becomes unnameable.
#[test]
fn a_rename_that_makes_a_descendant_path_too_long_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let t = Treelog::open(dir.path(), Options::default().durability(Durability::None)).unwrap();
    // /a/<2000 bytes of directories>/f: about 2,010 bytes.
    let mut deep = "/a".to_owned();
    for _ in 0..8 {
        deep.push('/');
        deep.push_str(&"x".repeat(249));
    }
    t.mkdir_p(&deep).unwrap();
    t.create(&format!("{deep}/f"), treelog::CreateOptions::default())
        .unwrap();
    // A 2,100-byte destination: /a's files would reach ~4,100 bytes.
    let mut dst = String::new();
    for _ in 0..9 {
        dst.push('/');
        dst.push_str(&"y".repeat(232));
    }
    t.mkdir_p(&dst).unwrap();
    let target = format!("{dst}/a");
    let before = t.committed_seq();
    let e = t.rename("/a", &target, false).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("more than 4096"), "{e}");
    assert_eq!(t.committed_seq(), before, "nothing logged");
    assert!(t.stat(&format!("{deep}/f")).is_ok());
    // A destination that leaves room is fine, and so is a shorter one.
    t.rename("/a", "/b", false).unwrap();
    t.rename("/b", &format!("{}/b", &dst[..233]), false)
        .unwrap();
}
