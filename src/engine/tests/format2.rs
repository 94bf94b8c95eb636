//! Format 2: parents' times, symbolic links, extended attributes, quotas and content summaries.

use super::*;

fn symlink(target: &str, p: &str) -> Command {
    Command::Symlink {
        target: target.into(),
        path: p.into(),
        parents: false,
        owner: String::new(),
        group: String::new(),
    }
}

fn setxattr(p: &str, name: &str, value: &[u8], flag: XattrFlag) -> Command {
    Command::SetXattr {
        path: p.into(),
        name: name.into(),
        value: Bytes(value.to_vec()),
        flag,
    }
}

fn rmxattr(p: &str, name: &str) -> Command {
    Command::RemoveXattr {
        path: p.into(),
        name: name.into(),
    }
}

fn quota(p: &str, inodes: Option<u64>, bytes: Option<u64>) -> Command {
    Command::SetQuota {
        path: p.into(),
        inodes,
        bytes,
    }
}

fn stored_quota_of(h: &Harness, p: &str) -> Option<Quota> {
    stored_quota(&h.index, h.id(p))
        .unwrap()
        .map(|q| q.to_quota())
}

fn usage(files: u64, directories: u64, symlinks: u64, bytes: u64) -> Usage {
    Usage {
        files,
        directories,
        symlinks,
        bytes,
    }
}

#[test]
fn create_delete_and_rename_move_their_parents_times() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    h.ok(mkdir("/c"));
    let t = h.now;
    h.ok(create("/a/b/f"));
    let b = h.ino("/a/b").attrs;
    assert_eq!((b.mtime_ms, b.change_ms), (t, t));
    assert!(h.ino("/a").attrs.mtime_ms < t, "only the parent");
    let t = h.now;
    h.ok(mv("/a/b/f", "/c/g"));
    for p in ["/a/b", "/c"] {
        let a = h.ino(p).attrs;
        assert_eq!((a.mtime_ms, a.change_ms), (t, t), "{p}");
    }
    let g = h.ino("/c/g").attrs;
    assert_eq!(
        (g.mtime_ms < t, g.change_ms),
        (true, t),
        "the moved inode changed"
    );
    let t = h.now;
    h.ok(rm_r("/a"));
    assert_eq!(h.ino("/").attrs.mtime_ms, t);
    // A no-op moves nothing.
    let before = h.ino("/c").attrs;
    h.noop(mkdir_p("/c"));
    assert_eq!(h.ino("/c").attrs, before);
}

#[test]
fn a_recursive_delete_times_only_the_surviving_parent() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    let (a, b, f) = (h.ino("/a"), h.ino("/a/b"), h.ino("/a/b/f"));
    let t = h.now;
    assert_eq!(
        h.ok(rm_r("/a")),
        vec![
            deleted(&f, "/a/b/f", None),
            deleted(&b, "/a/b", None),
            deleted(&a, "/a", Some(t))
        ]
    );
}

#[test]
fn symlinks_keep_their_target_through_renames_and_attribute_changes() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    let t = h.now;
    let ev = h.ok(symlink("../x/target", "/d/l"));
    let mut attrs = dir_attrs(t, 0o777, "", "");
    attrs.kind = FileType::Symlink;
    attrs.size = 11;
    assert_eq!(
        ev,
        vec![Event::Symlink {
            id: h.id("/d/l"),
            parent: h.id("/d"),
            name: "l".into(),
            path: "/d/l".into(),
            target: "../x/target".into(),
            attrs: attrs.clone(),
            parent_mtime_ms: t,
            quotas: vec![],
        }]
    );
    assert_eq!(h.ino("/d/l").attrs, attrs);
    h.ok(chown("/d/l", Some("alice"), None));
    h.ok(mv("/d/l", "/m"));
    assert_eq!(
        readlink(&h.index, &h.engine.names, b"/m").unwrap(),
        "../x/target"
    );
    assert_eq!(h.ino("/m").attrs.owner, "alice");
    // Not followed: a link in a path is not a directory.
    assert_eq!(h.refused_at(create("/m/f")), (NotADirectory, "/m".into()));
    assert_eq!(h.kind(complete("/m", 3)), InvalidArgument);
    assert_eq!(h.kind(symlink("x", "/m")), AlreadyExists);
    assert_eq!(h.kind(symlink("", "/n")), InvalidArgument);
    assert_eq!(h.kind(symlink(&"t".repeat(4097), "/n")), InvalidArgument);
    assert_eq!(h.kind(symlink("a\0b", "/n")), InvalidArgument);
    h.ok(symlink(&"t".repeat(4096), "/n"));
    assert_eq!(
        readlink(&h.index, &h.engine.names, b"/d")
            .unwrap_err()
            .kind(),
        InvalidArgument
    );
    // A link replaces a file and a file a link; neither a directory.
    h.ok(create("/f"));
    h.ok(mv_over("/m", "/f"));
    assert_eq!(h.kind(mv_over("/f", "/d")), IsADirectory);
    h.ok(rm("/f"));
    assert!(h.missing("/f"));
}

#[test]
fn extended_attributes_follow_linux_rules() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let t = h.now;
    let ev = h.ok(setxattr("/f", "user.a", b"1", XattrFlag::Either));
    assert_eq!(
        ev,
        vec![Event::SetXattr {
            id: h.id("/f"),
            path: "/f".into(),
            name: "user.a".into(),
            value: Bytes(b"1".to_vec()),
            old: None,
            change_ms: t,
        }]
    );
    assert_eq!(h.ino("/f").attrs.change_ms, t);
    h.noop(setxattr("/f", "user.a", b"1", XattrFlag::Either));
    assert_eq!(
        h.kind(setxattr("/f", "user.a", b"2", XattrFlag::Create)),
        AlreadyExists
    );
    assert_eq!(
        h.kind(setxattr("/f", "user.b", b"2", XattrFlag::Replace)),
        NotFound
    );
    h.ok(setxattr("/f", "user.a", b"2", XattrFlag::Replace));
    h.ok(setxattr("/f", "trusted.z", b"", XattrFlag::Create));
    let all = get_xattrs(&h.index, &h.engine.names, b"/f", None).unwrap();
    let names: Vec<&str> = all.iter().map(|x| x.name.as_str()).collect();
    assert_eq!(names, ["trusted.z", "user.a"]);
    assert_eq!(all[1].value.0, b"2");
    // Names and values.
    for bad in ["user.", "other.x", "x", "user.a\0"] {
        assert_eq!(
            h.kind(setxattr("/f", bad, b"", XattrFlag::Either)),
            InvalidArgument,
            "{bad}"
        );
    }
    let long = format!("user.{}", "n".repeat(250));
    h.ok(setxattr("/f", &long, b"", XattrFlag::Either));
    let too_long = format!("user.{}", "n".repeat(251));
    assert_eq!(
        h.kind(setxattr("/f", &too_long, b"", XattrFlag::Either)),
        InvalidArgument
    );
    assert_eq!(
        h.kind(setxattr(
            "/f",
            "user.big",
            &vec![0; 65_537],
            XattrFlag::Either
        )),
        InvalidArgument
    );
    h.ok(setxattr(
        "/f",
        "user.big",
        &vec![7; 65_536],
        XattrFlag::Either,
    ));
    // Per inode: 256 KiB of names and values, 128 attributes.
    h.ok(setxattr(
        "/f",
        "user.big2",
        &vec![7; 65_536],
        XattrFlag::Either,
    ));
    h.ok(setxattr(
        "/f",
        "user.big3",
        &vec![7; 65_536],
        XattrFlag::Either,
    ));
    assert_eq!(
        h.kind(setxattr(
            "/f",
            "user.big4",
            &vec![7; 65_536],
            XattrFlag::Either
        )),
        InvalidArgument
    );
    h.ok(create("/g"));
    for i in 0..128 {
        h.ok(setxattr("/g", &format!("user.{i}"), b"", XattrFlag::Either));
    }
    assert_eq!(
        h.kind(setxattr("/g", "user.x", b"", XattrFlag::Either)),
        InvalidArgument
    );
    // Removal: the last one takes the flag and the key with it.
    assert_eq!(h.kind(rmxattr("/f", "user.none")), NotFound);
    let g = h.id("/g");
    for i in 0..128 {
        h.ok(rmxattr("/g", &format!("user.{i}")));
    }
    assert!(!h.index.inodes.contains_key(&v2::xattrs_key(g)[..]));
    let e = InodeEntryV2::decode(&h.index.inodes[&inode_key(g)[..]]).unwrap();
    assert_eq!(e.flags & FLAG_HAS_XATTRS, 0);
    // A delete takes them with the inode.
    let f = h.id("/f");
    h.ok(rm("/f"));
    assert!(!h.index.inodes.contains_key(&v2::xattrs_key(f)[..]));
}

#[test]
fn a_quota_counts_its_subtree_and_refuses_what_would_pass_it() {
    let mut h = Harness::new();
    h.ok(create_p("/q/a/f1"));
    h.ok(complete("/q/a/f1", 100));
    h.ok(symlink("x", "/q/l"));
    let ev = h.ok(quota("/q", Some(5), Some(150)));
    let want = Quota {
        limit_inodes: Some(5),
        limit_bytes: Some(150),
        usage: usage(1, 1, 1, 100),
    };
    assert_eq!(
        ev,
        vec![Event::SetQuota {
            id: h.id("/q"),
            path: "/q".into(),
            quota: want
        }]
    );
    assert_eq!(stored_quota_of(&h, "/q"), Some(want));
    assert!(h.engine.state.quotas.contains(&h.id("/q")));
    // Creates count, and carry the quota's id.
    let ev = h.ok(create("/q/a/f2"));
    assert!(matches!(&ev[0], Event::Create { quotas, .. } if quotas == &[h.id("/q")]));
    h.ok(mkdir("/q/b"));
    assert_eq!(
        stored_quota_of(&h, "/q").unwrap().usage,
        usage(2, 2, 1, 100)
    );
    // The sixth inode is refused, and writes nothing.
    let e = h.refused(create("/q/b/f3"));
    assert_eq!(e.kind(), QuotaExceeded);
    assert!(
        matches!(&e, Error::QuotaExceeded { path, resource: "inodes", limit: 5, would_be: 6 } if path == "/q"),
        "{e:?}"
    );
    assert_eq!(h.kind(create_p("/q/c/d/f")), QuotaExceeded);
    // Bytes: growing past the limit is refused, shrinking is not.
    assert_eq!(h.kind(complete("/q/a/f2", 51)), QuotaExceeded);
    h.ok(complete("/q/a/f2", 50));
    assert_eq!(h.kind(set_size("/q/a/f1", 101)), QuotaExceeded);
    h.ok(set_size("/q/a/f1", 10));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage, usage(2, 2, 1, 60));
    // A delete frees; outside the quota nothing is counted.
    h.ok(rm("/q/l"));
    h.ok(create("/q/b/f3"));
    h.ok(create_p("/out/x"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage, usage(3, 2, 0, 60));
    // Lowering a limit below the usage keeps the counters and refuses growth.
    h.ok(quota("/q", Some(1), None));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage, usage(3, 2, 0, 60));
    assert_eq!(h.kind(mkdir("/q/z")), QuotaExceeded);
    h.ok(rm("/q/b/f3"));
    h.noop(quota("/q", Some(1), None));
    // Clearing removes it; a directory without one is a no-op.
    h.ok(Command::ClearQuota { path: "/q".into() });
    assert_eq!(stored_quota_of(&h, "/q"), None);
    assert!(h.engine.state.quotas.is_empty());
    h.noop(Command::ClearQuota { path: "/q".into() });
    h.ok(mkdir("/q/z"));
    assert_eq!(h.kind(quota("/q/a/f1", Some(1), None)), NotADirectory);
    assert_eq!(h.kind(quota("/q", Some(u64::MAX), None)), InvalidArgument);
}

#[test]
fn a_quotas_usage_past_its_counters_range_is_refused_before_the_log() {
    // An inode limit and no byte limit: nothing but the counter's range
    // bounds the bytes.
    let mut h = Harness::new();
    h.ok(mkdir("/q"));
    h.ok(quota("/q", Some(100), None));
    for f in ["/q/a", "/q/b", "/q/c"] {
        h.ok(create(f));
    }
    let big = i64::MAX as u64;
    h.ok(set_size("/q/a", big));
    h.ok(set_size("/q/b", big));
    let e = h.refused(set_size("/q/c", big));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    assert!(e.to_string().contains("/q's quota would pass 2^64"), "{e}");
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, 2 * big);
    // The engine goes on: shrinking and other writes are applied.
    h.ok(set_size("/q/a", 0));
    h.ok(set_size("/q/c", big));
    h.ok(rm("/q/b"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, big);
}

#[test]
fn a_subtree_past_a_counters_range_is_not_moved_into_a_quota_nor_given_one() {
    // Outside any quota nothing counts the bytes, so they may sum past
    // 2^64; what would have to count them exactly is refused, not
    // saturated (a saturated counter stopped the writer later, when the
    // files shrank).
    let mut h = Harness::new();
    h.ok(mkdir_p("/o/d"));
    h.ok(mkdir("/q"));
    h.ok(quota("/q", Some(100), None));
    let big = i64::MAX as u64;
    for f in ["/o/a", "/o/b", "/o/d/c"] {
        h.ok(create(f));
        h.ok(set_size(f, big));
    }
    let e = h.refused(mv("/o", "/q/o"));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    assert!(e.to_string().contains("past 2^64"), "{e}");
    let e = h.refused(quota("/o", None, None));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    // A quota below, exact, and a sum of counters past the range above it.
    h.ok(set_size("/o/a", 0));
    h.ok(quota("/o/d", None, None));
    assert_eq!(stored_quota_of(&h, "/o/d").unwrap().usage.bytes, big);
    h.ok(set_size("/o/a", big));
    let e = h.refused(quota("/o", None, None));
    assert_eq!(e.kind(), InvalidArgument, "{e}");
    // What fits is counted exactly and the writer goes on.
    h.ok(mv("/o/d", "/q/d"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, big);
    h.ok(set_size("/q/d/c", 0));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, 0);
    h.ok(rm_r("/q/d"));
    assert_eq!(stored_quota_of(&h, "/q").unwrap().usage.bytes, 0);
}

#[test]
fn nested_quotas_and_moves_between_them_keep_exact_counts() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/top/in"));
    h.ok(mkdir_p("/other"));
    h.ok(quota("/top", None, None));
    h.ok(quota("/top/in", Some(3), None));
    h.ok(quota("/other", Some(100), Some(10)));
    h.ok(create_p("/top/in/d/f"));
    h.ok(complete("/top/in/d/f", 7));
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(1, 2, 0, 7)
    );
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        usage(1, 1, 0, 7)
    );
    // Out of both into another: the subtree's usage moves.
    let ev = h.ok(mv("/top/in/d", "/other/d"));
    match &ev[0] {
        Event::Rename {
            quotas_from,
            quotas_to,
            usage: u,
            ..
        } => {
            assert_eq!(quotas_from, &[h.id("/top"), h.id("/top/in")]);
            assert_eq!(quotas_to, &[h.id("/other")]);
            assert_eq!(*u, usage(1, 1, 0, 7));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(0, 1, 0, 0)
    );
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        Usage::default()
    );
    assert_eq!(
        stored_quota_of(&h, "/other").unwrap().usage,
        usage(1, 1, 0, 7)
    );
    // Within one quota nothing moves.
    h.ok(mkdir("/other/e"));
    let ev = h.ok(mv("/other/d", "/other/e/d"));
    assert!(
        matches!(&ev[0], Event::Rename { quotas_from, quotas_to, .. }
        if quotas_from.is_empty() && quotas_to.is_empty())
    );
    // A move that would pass the destination's limits is refused.
    h.ok(create_p("/big/f"));
    h.ok(complete("/big/f", 20));
    assert_eq!(h.kind(mv("/big", "/other/big")), QuotaExceeded);
    h.ok(mv("/big/f", "/top/in/f"));
    // Moving a directory with its own quota uses its counters.
    h.ok(mkdir("/top/in/q"));
    h.ok(quota("/top/in/q", None, None));
    h.ok(create("/top/in/q/a"));
    h.ok(mv("/top/in/q", "/top/q"));
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        usage(1, 0, 0, 20)
    );
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(2, 2, 0, 20)
    );
    // A recursive delete frees its quotas above it; the ones inside go.
    let q = h.id("/top/q");
    h.ok(rm_r("/top/q"));
    assert!(!h.engine.state.quotas.contains(&q));
    assert_eq!(
        stored_quota_of(&h, "/top").unwrap().usage,
        usage(1, 1, 0, 20)
    );
    // Replaced on a rename: the victim's usage goes, the source's comes.
    h.ok(create("/top/in/g"));
    h.ok(create("/x"));
    h.ok(mv_over("/x", "/top/in/g"));
    assert_eq!(
        stored_quota_of(&h, "/top/in").unwrap().usage,
        usage(2, 0, 0, 20)
    );
}

#[test]
fn a_content_summary_walks_and_takes_the_counters_it_meets() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    h.ok(complete("/a/b/f", 5));
    h.ok(symlink("t", "/a/l"));
    let sum =
        |h: &Harness, p: &str, max| content_summary(&h.index, &h.engine.names, p.as_bytes(), max);
    let s = sum(&h, "/a", 100).unwrap();
    assert_eq!(s.usage, usage(1, 2, 1, 5));
    assert_eq!((s.quota, s.from_counters, s.walked), (None, 0, 4));
    let s = sum(&h, "/a/b/f", 100).unwrap();
    assert_eq!((s.usage, s.walked), (usage(1, 0, 0, 5), 1));
    assert_eq!(sum(&h, "/a", 3).unwrap_err().kind(), InvalidArgument);
    h.ok(quota("/a/b", None, None));
    let s = sum(&h, "/a", 3).unwrap();
    assert_eq!(s.usage, usage(1, 2, 1, 5));
    assert_eq!((s.from_counters, s.walked), (1, 3));
    h.ok(quota("/a", Some(10), None));
    let s = sum(&h, "/a", 1).unwrap();
    assert_eq!(s.usage, usage(1, 2, 1, 5), "its own counters, and itself");
    assert_eq!(s.quota.unwrap().limit_inodes, Some(10));
    assert_eq!(s.quota.unwrap().usage, usage(1, 1, 1, 5));
}

/// docs/FORMAT.md §11: what applying record 1 (`mkdir /data` at
/// 1700000000000) writes into a new database, byte for byte, and §14.3:
/// the same command as schema 1 wrote it leaves the root alone.
#[test]
fn the_documented_record_1_writes_the_documented_bytes() {
    let hex = |s: &str| -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    };
    let two = hex(
        "01 02 9076e37c 01 80d095ffbc31 01 00 02 01 04 64617461 05 2f64617461 01 00 00
         80d095ffbc31 80d095ffbc31 80d095ffbc31 ed03 01 00 00 01 80d095ffbc31 00",
    );
    let one = hex(
        "01 01 8835fe29 01 80d095ffbc31 01 00 02 01 04 64617461 05 2f64617461 01 00 00
         80d095ffbc31 80d095ffbc31 ed03 01 00 00",
    );
    let data = hex(
        "0100000000000000 0000000000000000 0000000000000000 0068e5cf8b010000
         0068e5cf8b010000 0068e5cf8b010000 ed010000 01 01 04 00 00000000 00000000 64617461",
    );
    let touched_root = hex(
        "0000000000000000 0000000000000000 0000000000000000 0000000000000000
         0068e5cf8b010000 0068e5cf8b010000 ed010000 01 01 00 00 00000000 00000000",
    );
    let root = format::empty_namespace_inodes()[0].1.clone();
    for (bytes, want_root) in [(two, touched_root), (one, root)] {
        let h = Harness::new();
        let mut state = h.engine.state.clone();
        let rec = decode_record_ref(&bytes, Some(1)).unwrap();
        let mut ov = Overlay::new(&h.index);
        apply_events(rec.events, &mut ov, &mut state).unwrap();
        let w = ov.take_writes();
        let put = |k: &[u8]| w.inodes.get(k).cloned().flatten();
        assert_eq!(put(&inode_key(2)), Some(data.clone()));
        assert_eq!(
            w.edges.get(&edge_key(1, b"data")[..]).cloned().flatten(),
            Some(2u64.to_be_bytes().to_vec())
        );
        assert_eq!(put(&inode_key(NEXT_ID_KEY)), Some(hex("ea03000000000000")));
        let root_now = put(&inode_key(ROOT_ID))
            .unwrap_or_else(|| h.index.inodes[&inode_key(ROOT_ID)[..]].clone());
        assert_eq!(root_now, want_root);
        // Nothing else: the dictionaries are not written.
        assert_eq!(
            w.inodes.len() + w.edges.len(),
            3 + usize::from(put(&inode_key(ROOT_ID)).is_some())
        );
    }
}
