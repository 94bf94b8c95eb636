//! Names and paths for every command; groups, ids and records; the reads the engine offers, and failures of the index.

use super::*;

#[test]
fn every_command_refuses_bad_paths_and_names() {
    let long_name = format!("/{}", "x".repeat(256));
    let long_path: String = (0..17).map(|_| format!("/{}", "y".repeat(240))).collect();
    assert_eq!(long_path.len(), path::MAX_PATH_LEN + 1);
    let bad = [
        ("", InvalidPath),
        ("a/b", InvalidPath),
        ("/a//b", InvalidPath),
        ("/a/b//", InvalidPath),
        (long_path.as_str(), InvalidPath),
        ("/a/./b", InvalidName),
        ("/..", InvalidName),
        ("/a\0b", InvalidName),
        (long_name.as_str(), InvalidName),
    ];
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    for (p, kind) in bad {
        for cmd in [
            mkdir(p),
            mkdir_p(p),
            create(p),
            create_p(p),
            complete(p, 1),
            set_size(p, 1),
            chmod(p, 0o600),
            rm(p),
            rm_r(p),
            mv(p, "/z"),
            mv("/a", p),
            mv_over(p, p),
        ] {
            assert_eq!(h.kind(cmd.clone()), kind, "{cmd:?}");
        }
    }
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn names_and_paths_at_their_limits_are_accepted() {
    let mut h = Harness::new();
    let name = "é".repeat(127); // 254 bytes
    h.ok(mkdir(&format!("/{name}x")));
    let long: String = (0..16).map(|_| format!("/{}", "y".repeat(255))).collect();
    assert_eq!(long.len(), path::MAX_PATH_LEN);
    assert_eq!(h.ok(create_p(&long)).len(), 16);
    assert!(h.stat(&long).is_ok());
}

// ---------------------------------------------------------------------------
// Groups, ids, records
// ---------------------------------------------------------------------------

#[test]
fn a_group_sees_its_earlier_commands() {
    let mut h = Harness::new();
    let ran = h.run_group(vec![
        mkdir("/a"),
        create("/a/f"),
        rm("/a"),
        mv("/a/f", "/a/g"),
        complete("/a/g", 10),
        mkdir_p("/a"),
    ]);
    let kinds: Vec<&str> = ran
        .iter()
        .map(|r| match r {
            Ran::Applied(_) => "applied",
            Ran::NoOp => "noop",
            Ran::Refused(e) => e.kind().as_str(),
        })
        .collect();
    assert_eq!(
        kinds,
        [
            "applied",
            "applied",
            "not_empty",
            "applied",
            "applied",
            "noop"
        ]
    );
    assert_eq!(h.seq, 4);
    let g = h.ino("/a/g");
    assert_eq!((g.id, g.attrs.size, g.attrs.complete), (3, 10, true));
}

#[test]
fn a_refused_command_takes_no_id_from_its_group() {
    let mut h = Harness::new();
    let ran = h.run_group(vec![mkdir("/a"), mkdir("/a"), create("/x/y"), mkdir("/b")]);
    assert!(matches!(&ran[1], Ran::Refused(Error::AlreadyExists(_))));
    assert!(matches!(&ran[2], Ran::Refused(Error::NotFound(_))));
    assert_eq!((h.id("/a"), h.id("/b")), (2, 3));
    assert_eq!(h.seq, 2);
}

#[test]
fn all_events_of_a_group_take_its_time() {
    let mut h = Harness::new();
    let ran = h.run_group(vec![create("/f"), set_size("/f", 1), chmod("/f", 0o600)]);
    let mut times = Vec::new();
    for r in &ran {
        match r {
            Ran::Applied(ev) => match &ev[0] {
                Event::Create { attrs, .. } => times.push(attrs.mtime_ms),
                Event::SetSize(u) | Event::SetAttr(u) => times.push(u.new.mtime_ms),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(times, [T0, T0, T0]);
    h.ok(set_size("/f", 2));
    assert_eq!(h.ino("/f").attrs.mtime_ms, T0 + 1000);
}

#[test]
fn ids_reserve_blocks_of_1000_and_a_restart_skips_the_rest() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    // Id 2 crossed the initial bound: the next block is reserved.
    assert_eq!(h.engine.state.id_bound, 2 + ID_BLOCK);
    h.ok(mkdir("/b"));
    assert_eq!(h.id("/b"), 3);
    h.restart();
    let ev = h.ok(mkdir("/c"));
    assert_eq!(
        ev,
        vec![created(
            1002,
            ROOT_ID,
            "/c",
            dir_attrs(T0 + 2000, 0o755, "", "")
        )]
    );
    assert_eq!(h.engine.state.id_bound, 1002 + ID_BLOCK);
    h.ok(mkdir("/d"));
    assert_eq!(h.id("/d"), 1003);
}

#[test]
fn ids_are_refused_once_exhausted() {
    let mut h = Harness::new();
    h.engine.state.next_id = MAX_INODE_ID;
    assert_eq!(h.kind(mkdir("/a")), InvalidArgument);
    h.engine.state.next_id = MAX_INODE_ID - 1;
    // Two ids do not fit.
    assert_eq!(h.kind(mkdir_p("/a/b")), InvalidArgument);
    assert_eq!(h.kind(create_p("/a/f")), InvalidArgument);
    assert_eq!(h.tree(), Vec::<String>::new());
}

#[test]
fn the_last_ids_reserve_no_block_past_the_end() {
    let mut h = Harness::new();
    h.engine.state.next_id = MAX_INODE_ID - 1;
    h.engine.state.id_bound = MAX_INODE_ID - 1;
    // Used to overflow (`id + ID_BLOCK`): a panic in debug, a wrapped,
    // tiny `next_id` on disk in release.
    h.ok(mkdir("/a"));
    assert_eq!(h.id("/a"), MAX_INODE_ID - 1);
    assert_eq!(h.engine.state.id_bound, MAX_INODE_ID + 1);
    h.restart();
    assert!(h.engine.state.next_id > MAX_INODE_ID - 1);
    assert_eq!(h.kind(mkdir("/b")), InvalidArgument);
}

#[test]
fn a_multi_event_command_is_refused_when_its_record_passes_max_record_bytes() {
    let cmd = mkdir_p("/a/b/c");
    let events = Harness::new().ok(cmd.clone());
    let size = postcard::to_allocvec(&events).unwrap().len();

    let mut h = Harness::new();
    h.engine.max_record_bytes = size - 1;
    // Run by hand: the refused chain may have used up its ids.
    let mut ov = Overlay::new(&h.index);
    match h.engine.execute(&cmd, None, &mut ov, h.now) {
        Executed::Refused(e) => {
            assert_eq!(e.kind(), InvalidArgument);
            assert!(e.to_string().contains(&format!("{size} bytes")), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(ov.writes().is_empty());
    drop(ov);
    let loaded = EngineState::load(&h.index).unwrap();
    assert_eq!(
        (h.engine.state.owners, h.engine.state.groups),
        (loaded.owners, loaded.groups)
    );
    h.engine.max_record_bytes = size;
    assert_eq!(h.ok(cmd).len(), 3);
    assert_eq!(h.tree(), ["/a", "/a/b", "/a/b/c"]);
}

#[test]
fn a_single_event_is_never_refused_for_its_size() {
    let mut h = Harness::new();
    h.engine.max_record_bytes = 1;
    h.ok(mkdir("/a"));
    h.ok(create("/a/f"));
    h.ok(set_size("/a/f", 3));
    h.ok(chmod("/a/f", 0o600));
    h.ok(complete("/a/f", 3));
    h.ok(mv("/a/f", "/g"));
    // Two events are measured.
    h.ok(create("/h"));
    assert_eq!(h.kind(mv_over("/g", "/h")), InvalidArgument);
}

// ---------------------------------------------------------------------------
// Reads the engine offers, and failures of the index
// ---------------------------------------------------------------------------

#[test]
fn list_children_pages_in_byte_order() {
    let mut h = Harness::new();
    for p in ["/d/c", "/d/a", "/d/B", "/d/b"] {
        h.ok(create_p(p));
    }
    let dicts = &h.engine.names;
    let d = h.id("/d");
    let names = |(v, more): (Vec<DirEntry>, bool)| {
        (
            v.into_iter()
                .map(|e| e.name.to_string())
                .collect::<Vec<_>>(),
            more,
        )
    };
    let page = list_children(&h.index, dicts, d, None, 2).unwrap();
    assert_eq!(names(page), (vec!["B".to_owned(), "a".into()], true));
    let page = list_children(&h.index, dicts, d, Some(b"a"), 2).unwrap();
    assert_eq!(names(page), (vec!["b".to_owned(), "c".into()], false));
    let page = list_children(&h.index, dicts, d, Some(b"c"), 2).unwrap();
    assert_eq!(names(page), (vec![], false));
}

#[test]
fn path_of_follows_renames_and_knows_missing_ids() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    let f = h.id("/a/b/f");
    h.ok(mv("/a", "/z"));
    assert_eq!(path_of(&h.index, f).unwrap(), "/z/b/f");
    assert_eq!(path_of(&h.index, ROOT_ID).unwrap(), "/");
    assert!(matches!(
        path_of(&h.index, 999),
        Err(Error::InodeNotFound(999))
    ));
}

/// An index whose reads fail, as a failing disk would.
struct Unreadable;

impl IndexRead for Unreadable {
    fn get(&self, _: Cf, _: &[u8]) -> Result<Option<Vec<u8>>> {
        Err(Error::Io(std::io::Error::other("disk gone")))
    }

    fn scan(&self, _: Cf, _: &[u8], _: Option<&[u8]>, _: usize) -> Result<Vec<Kv>> {
        Err(Error::Io(std::io::Error::other("disk gone")))
    }
}

#[test]
fn a_failed_index_read_refuses_the_command_and_writes_nothing() {
    let h = Harness::new();
    let mut engine = Engine::new(h.engine.state.clone());
    let mut ov = Overlay::new(&Unreadable);
    for cmd in [mkdir("/a"), rm_r("/a"), mv("/a", "/b"), chmod("/", 0o700)] {
        match engine.execute(&cmd, None, &mut ov, T0) {
            Executed::Refused(e) => assert_eq!(e.kind(), Io, "{cmd:?}"),
            other => panic!("{cmd:?}: {other:?}"),
        }
    }
    assert!(ov.writes().is_empty());
    assert_eq!(engine.state, h.engine.state);
}

#[test]
fn an_edge_to_a_missing_inode_refuses_the_command_as_corruption() {
    let mut h = Harness::new();
    h.ok(create_p("/a/f"));
    let mut broken = h.index.clone();
    broken.inodes.remove(&inode_key(h.id("/a/f"))[..]);
    let mut ov = Overlay::new(&broken);
    for cmd in [complete("/a/f", 1), rm_r("/a"), mv("/a/f", "/g")] {
        match h.engine.execute(&cmd, None, &mut ov, T0) {
            Executed::Refused(e) => assert_eq!(e.kind(), Corruption, "{cmd:?}"),
            other => panic!("{cmd:?}: {other:?}"),
        }
    }
    assert!(ov.writes().is_empty());
}
