//! Model-based property test: random sequences of every operation (valid and
//! invalid) against an in-memory model tree: directories, files, symbolic
//! links, extended attributes, and directory quotas with the writes they
//! refuse. Every result (value or error kind) must match the model;
//! afterwards the live index, the index after close + reopen, and the
//! index rebuilt from the log must be byte-identical (same digest) and the
//! listings, links, attributes and quotas must match the model.
//!
//! Commands are pipelined (queued without waiting), so the writer forms
//! groups and validates later commands against the group's own earlier
//! changes: the results must not depend on how commands were grouped.

use std::collections::BTreeMap;

use proptest::prelude::*;
use treelog::admin;
use treelog::error::ErrorKind;
use treelog::path;
use treelog::types::Bytes;
use treelog::{Command, Durability, FileType, Options, Treelog, XattrFlag};

#[derive(Debug, Clone, PartialEq, Eq)]
struct Node {
    kind: FileType,
    size: u64,
    complete: bool,
    mode: u32,
    owner: String,
    group: String,
    /// A symbolic link's target.
    target: String,
    xattrs: BTreeMap<String, Vec<u8>>,
    /// A directory's quota: (inodes, bytes) limits.
    quota: Option<(Option<u64>, Option<u64>)>,
    /// Which quota it is (it moves with its directory); 0 without one.
    /// The model's alone: left out of every comparison with the store.
    qid: u64,
}

impl Node {
    fn dir(&self) -> bool {
        self.kind == FileType::Directory
    }

    fn new(kind: FileType, mode: u32, owner: &str, group: &str) -> Node {
        Node {
            kind,
            size: 0,
            complete: kind != FileType::File,
            mode,
            owner: owner.to_owned(),
            group: group.to_owned(),
            target: String::new(),
            xattrs: BTreeMap::new(),
            quota: None,
            qid: 0,
        }
    }

    /// What a stat shows of it.
    fn attrs(&self) -> Node {
        Node {
            target: String::new(),
            xattrs: BTreeMap::new(),
            quota: None,
            qid: 0,
            ..self.clone()
        }
    }

    /// What the store shows of it (links, attributes and quotas read too).
    fn seen(&self) -> Node {
        Node {
            qid: 0,
            ..self.clone()
        }
    }
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
    /// The last quota id given.
    qids: u64,
}

type R<T> = Result<T, ErrorKind>;

impl Model {
    fn new() -> Model {
        let mut m = Model::default();
        m.nodes
            .insert("/".into(), Node::new(FileType::Directory, 0o755, "", ""));
        m
    }

    fn comps(p: &str) -> R<Vec<String>> {
        path::components(p)
            .map(|v| {
                v.into_iter()
                    .map(|c| String::from_utf8_lossy(c).into_owned())
                    .collect()
            })
            .map_err(|e| e.kind())
    }

    fn join(c: &[String]) -> String {
        let r: Vec<&str> = c.iter().map(String::as_str).collect();
        path::join_all(&r).to_string()
    }

    fn resolve(&self, c: &[String]) -> R<String> {
        let mut cur = "/".to_string();
        for i in 0..c.len() {
            if !self.nodes[&cur].dir() {
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
            if !self.nodes[&cur].dir() {
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

    /// A new file or link at `p`, with `parents` the missing directories
    /// first (mode 0o755, the new node's owner and group).
    fn create_new(&mut self, p: &str, parents: bool, node: Node) -> R<bool> {
        let c = Self::comps(p)?;
        if c.is_empty() {
            return Err(ErrorKind::AlreadyExists);
        }
        let (_, existing) = self.walk_existing(&c)?;
        if existing == c.len() {
            return Err(ErrorKind::AlreadyExists);
        }
        if !parents && existing + 1 < c.len() {
            return Err(ErrorKind::NotFound);
        }
        let d = Node::new(FileType::Directory, 0o755, &node.owner, &node.group);
        self.create_chain(&c, existing, &d, &node);
        Ok(true)
    }

    /// The node whose extended attribute `name` a command changes: the
    /// name is checked first (the generator's names are `user.` or bad).
    fn xattr_target(&mut self, p: &str, name: &str) -> R<&mut Node> {
        if !name.starts_with("user.") || name.len() == 5 {
            return Err(ErrorKind::InvalidArgument);
        }
        let k = self.resolve(&Self::comps(p)?)?;
        Ok(self.nodes.get_mut(&k).expect("resolved"))
    }

    /// Inodes below `p` and bytes of the files among them: a quota's usage.
    fn usage(&self, p: &str) -> (u64, u64) {
        let (mut inodes, mut bytes) = (0, 0);
        for (q, n) in &self.nodes {
            if q.as_str() != p && path::is_within(q, p) {
                inodes += 1;
                if n.kind == FileType::File {
                    bytes += n.size;
                }
            }
        }
        (inodes, bytes)
    }

    fn apply(&mut self, cmd: &Command) -> Res {
        let before = self.nodes.clone();
        let r = match self.apply_inner(cmd) {
            Ok(true) => Res::Changed,
            Ok(false) => Res::NoOp,
            Err(k) => Res::Err(k),
        };
        if r != Res::Changed {
            return r;
        }
        // A quota refuses what grows its usage past a limit, and then
        // nothing of the command is done.
        let after = std::mem::replace(&mut self.nodes, before.clone());
        let old = Model {
            nodes: before,
            qids: 0,
        };
        let new = Model {
            nodes: after,
            qids: 0,
        };
        let quotas = |m: &Model| -> BTreeMap<u64, String> {
            m.nodes
                .iter()
                .filter(|(_, n)| n.qid != 0)
                .map(|(p, n)| (n.qid, p.clone()))
                .collect()
        };
        let was = quotas(&old);
        for (qid, p) in quotas(&new) {
            let Some(op) = was.get(&qid) else { continue };
            let (li, lb) = new.nodes[&p].quota.expect("a quota");
            let (bi, bb) = old.usage(op);
            let (ai, ab) = new.usage(&p);
            if (ai > bi && li.is_some_and(|l| ai > l)) || (ab > bb && lb.is_some_and(|l| ab > l)) {
                return Res::Err(ErrorKind::QuotaExceeded);
            }
        }
        self.nodes = new.nodes;
        r
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
                let c = Self::comps(&p.to_str_lossy())?;
                if c.is_empty() {
                    return if *parents {
                        Ok(false)
                    } else {
                        Err(ErrorKind::AlreadyExists)
                    };
                }
                let (deep, existing) = self.walk_existing(&c)?;
                if existing == c.len() {
                    return if *parents && self.nodes[&deep].dir() {
                        Ok(false)
                    } else {
                        Err(ErrorKind::AlreadyExists)
                    };
                }
                if !*parents && existing + 1 < c.len() {
                    return Err(ErrorKind::NotFound);
                }
                let n = Node::new(FileType::Directory, *mode, owner, group);
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
                let f = Node::new(FileType::File, *mode, owner, group);
                self.create_new(&p.to_str_lossy(), *parents, f)
            }
            Command::Symlink {
                target,
                path: p,
                parents,
                owner,
                group,
            } => {
                if target.is_empty() {
                    return Err(ErrorKind::InvalidArgument);
                }
                let mut l = Node::new(FileType::Symlink, 0o777, owner, group);
                l.size = target.len() as u64;
                l.target = target.to_string();
                self.create_new(&p.to_str_lossy(), *parents, l)
            }
            Command::SetXattr {
                path: p,
                name,
                value,
                flag,
            } => {
                let n = self.xattr_target(&p.to_str_lossy(), name)?;
                let old = n.xattrs.get(name);
                match (flag, old) {
                    (XattrFlag::Create, Some(_)) => return Err(ErrorKind::AlreadyExists),
                    (XattrFlag::Replace, None) => return Err(ErrorKind::NotFound),
                    (_, Some(o)) if o == &value.0 => return Ok(false),
                    _ => {}
                }
                n.xattrs.insert(name.clone(), value.0.clone());
                Ok(true)
            }
            Command::RemoveXattr { path: p, name } => {
                let n = self.xattr_target(&p.to_str_lossy(), name)?;
                match n.xattrs.remove(name) {
                    Some(_) => Ok(true),
                    None => Err(ErrorKind::NotFound),
                }
            }
            Command::SetQuota {
                path: p,
                inodes,
                bytes,
            } => {
                let k = self.resolve(&Self::comps(&p.to_str_lossy())?)?;
                let n = self.nodes.get_mut(&k).expect("resolved");
                if !n.dir() {
                    return Err(ErrorKind::NotADirectory);
                }
                if n.quota == Some((*inodes, *bytes)) {
                    return Ok(false);
                }
                if n.quota.is_none() {
                    self.qids += 1;
                    n.qid = self.qids;
                }
                n.quota = Some((*inodes, *bytes));
                Ok(true)
            }
            Command::RecountQuota { path: p } => {
                // The counters are exact, so a recount finds them right.
                let k = self.resolve(&Self::comps(&p.to_str_lossy())?)?;
                let n = &self.nodes[&k];
                if !n.dir() {
                    return Err(ErrorKind::NotADirectory);
                }
                match n.quota {
                    Some(_) => Ok(false),
                    None => Err(ErrorKind::NotFound),
                }
            }
            Command::ClearQuota { path: p } => {
                let k = self.resolve(&Self::comps(&p.to_str_lossy())?)?;
                let n = self.nodes.get_mut(&k).expect("resolved");
                if !n.dir() {
                    return Err(ErrorKind::NotADirectory);
                }
                n.qid = 0;
                Ok(n.quota.take().is_some())
            }
            Command::Complete { path: p, size } => {
                let k = self.resolve(&Self::comps(&p.to_str_lossy())?)?;
                let n = self.nodes.get_mut(&k).expect("resolved");
                match n.kind {
                    FileType::Directory => return Err(ErrorKind::IsADirectory),
                    FileType::Symlink => return Err(ErrorKind::InvalidArgument),
                    FileType::File => {}
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
                let k = self.resolve(&Self::comps(&p.to_str_lossy())?)?;
                let n = self.nodes.get_mut(&k).expect("resolved");
                match n.kind {
                    FileType::Directory => return Err(ErrorKind::IsADirectory),
                    FileType::Symlink => return Err(ErrorKind::InvalidArgument),
                    FileType::File => {}
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
                let k = self.resolve(&Self::comps(&p.to_str_lossy())?)?;
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
                let k = self.resolve(&Self::comps(&p.to_str_lossy())?)?;
                if k == "/" {
                    return Err(ErrorKind::InvalidArgument);
                }
                if self.nodes[&k].dir() && !*recursive && self.has_children(&k) {
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
                let sc = Self::comps(&src.to_str_lossy())?;
                let dc = Self::comps(&dst.to_str_lossy())?;
                if sc.is_empty() || dc.is_empty() {
                    return Err(ErrorKind::InvalidArgument);
                }
                let s = self.resolve(&sc)?;
                let dp = self.resolve(&dc[..dc.len() - 1])?;
                if !self.nodes[&dp].dir() {
                    return Err(ErrorKind::NotADirectory);
                }
                let d = Self::join(&dc);
                if s == d {
                    return Ok(false);
                }
                let sdir = self.nodes[&s].dir();
                if sdir && path::is_within(&d, &s) {
                    return Err(ErrorKind::InvalidArgument);
                }
                if let Some(victim) = self.nodes.get(&d) {
                    if !*overwrite {
                        return Err(ErrorKind::AlreadyExists);
                    }
                    match (sdir, victim.dir()) {
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
        let mut n = node(&ino.attrs);
        if n.kind == FileType::Symlink {
            n.target = t.readlink(&p).unwrap().to_string();
        }
        n.xattrs = t
            .list_xattrs(&p)
            .unwrap()
            .into_iter()
            .map(|x| (x.name, x.value.0))
            .collect();
        if n.dir() {
            n.quota = t
                .count(&p)
                .unwrap()
                .quota
                .map(|q| (q.limit_inodes, q.limit_bytes));
        }
        out.insert(p.clone(), n);
        if ino.attrs.kind.is_dir() {
            // Small pages to exercise start_after paging.
            let mut after: Option<treelog::ByteString> = None;
            let mut names = Vec::new();
            loop {
                let page = t.list(&p, after.as_deref(), 2).unwrap();
                for e in page.entries {
                    names.push(e.name.clone());
                    stack.push((path::join(&p, &e.name).to_string(), e.inode));
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
        size: a.size,
        complete: a.complete,
        ..Node::new(a.kind, a.mode, &a.owner, &a.group)
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
                                .map(|e| (e.name.to_string(), node(&e.inode.attrs)))
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

fn arb_limit() -> impl Strategy<Value = Option<u64>> {
    prop_oneof![1 => Just(None), 2 => (0u64..6).prop_map(Some)]
}

fn arb_xattr_name() -> impl Strategy<Value = String> {
    prop::sample::select(vec!["user.a", "user.b", "bad"]).prop_map(str::to_owned)
}

fn arb_cmd() -> impl Strategy<Value = Command> {
    prop_oneof![
        2 => (prop::sample::select(vec!["t", "../x", ""]), arb_path(), any::<bool>(), arb_owner())
            .prop_map(|(target, path, parents, owner)| Command::Symlink {
                target: target.to_owned().into(), path: path.into(), parents, owner, group: String::new()
            }),
        2 => (arb_path(), arb_xattr_name(), prop::sample::select(vec![&b""[..], b"1", b"22"]),
              prop::sample::select(vec![XattrFlag::Either, XattrFlag::Create, XattrFlag::Replace]))
            .prop_map(|(path, name, value, flag)| Command::SetXattr {
                path: path.into(), name, value: Bytes(value.to_vec()), flag
            }),
        1 => (arb_path(), arb_xattr_name())
            .prop_map(|(path, name)| Command::RemoveXattr { path: path.into(), name }),
        2 => (arb_path(), arb_limit(), arb_limit())
            .prop_map(|(path, inodes, bytes)| Command::SetQuota { path: path.into(), inodes, bytes }),
        1 => arb_path().prop_map(|path| Command::ClearQuota { path: path.into() }),
        1 => arb_path().prop_map(|path| Command::RecountQuota { path: path.into() }),
        3 => (arb_path(), any::<bool>(), arb_mode(), arb_owner(), arb_owner())
            .prop_map(|(path, parents, mode, owner, group)| Command::Mkdir { path: path.into(), parents, mode, owner, group }),
        3 => (arb_path(), any::<bool>(), arb_mode(), arb_owner())
            .prop_map(|(path, parents, mode, owner)| Command::Create { path: path.into(), parents, mode, owner, group: String::new(), block_size: 4096 }),
        1 => (arb_path(), 0u64..3).prop_map(|(path, size)| Command::Complete { path: path.into(), size }),
        1 => (arb_path(), 0u64..3).prop_map(|(path, size)| Command::SetSize { path: path.into(), size }),
        1 => (arb_path(), proptest::option::of(arb_mode()), proptest::option::of(arb_owner()), proptest::option::of(arb_owner()))
            .prop_map(|(path, mode, owner, group)| Command::SetAttr { path: path.into(), mode, owner, group, mtime_ms: None }),
        2 => (arb_path(), any::<bool>()).prop_map(|(path, recursive)| Command::Delete { path: path.into(), recursive }),
        3 => (arb_path(), arb_path(), any::<bool>()).prop_map(|(src, dst, overwrite)| Command::Rename { src: src.into(), dst: dst.into(), overwrite }),
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
                    prop_assert_eq!(got.clone(), state.get(p).map(Node::attrs), "stat {} at {}", p, o.seq)
                }
                Seen::List(p, got) => {
                    let want: Option<Vec<(String, Node)>> = state.get(p).filter(|n| n.dir()).map(|_| {
                        state
                            .iter()
                            .filter(|(q, _)| q.as_str() != "/" && parent_of(q) == p.as_str())
                            .map(|(q, n)| (q.rsplit('/').next().unwrap().to_owned(), n.attrs()))
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
        let seen = |m: &Model| -> BTreeMap<String, Node> {
            m.nodes.iter().map(|(p, n)| (p.clone(), n.seen())).collect()
        };
        prop_assert_eq!(store_tree(&t), seen(&model));
        let live = digest(&t);
        let report = admin::verify(t.store()).unwrap();
        prop_assert!(report.problems.is_empty(), "{:?}", report.problems);
        prop_assert_eq!(&report.replay_digest, &live);
        t.close().unwrap();

        // Reopen: same index, same tree.
        let t = Treelog::open(dir.path(), opts()).unwrap();
        prop_assert_eq!(digest(&t), live.clone());
        prop_assert_eq!(store_tree(&t), seen(&model));
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
        prop_assert_eq!(store_tree(&t), seen(&model));
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
        t.create(format!("/big/sub/f{i}"), treelog::CreateOptions::default())
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
        t.delete(format!("{long}/{}{i}", "f".repeat(40)), false)
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
    t.create(format!("{deep}/f"), treelog::CreateOptions::default())
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
    assert!(t.stat(format!("{deep}/f")).is_ok());
    // A destination that leaves room is fine, and so is a shorter one.
    t.rename("/a", "/b", false).unwrap();
    t.rename("/b", format!("{}/b", &dst[..233]), false).unwrap();
}
