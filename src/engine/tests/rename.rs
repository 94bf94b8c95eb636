//! rename: moves, overwrites, and the limits of a move.

use super::*;

#[test]
fn rename_of_a_file_to_another_directory_keeps_its_id_and_attributes() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(mkdir("/b"));
    h.ok(create("/a/f"));
    let (f, b) = (h.ino("/a/f"), h.id("/b"));
    let ev = h.ok(mv("/a/f", "/b/g/"));
    assert_eq!(ev, vec![renamed(&f, "/a/f", b, "/b/g", h.last())]);
    assert!(h.missing("/a/f"));
    let g = h.ino("/b/g");
    assert_eq!((g.id, g.parent, g.name.to_str().unwrap()), (f.id, b, "g"));
    // The file's change time and both directories' times move with it.
    let t = h.last();
    let mut want = f.attrs.clone();
    want.change_ms = t;
    assert_eq!(g.attrs, want);
    for d in ["/a", "/b"] {
        let a = h.ino(d).attrs;
        assert_eq!(
            (a.mtime_ms, a.change_ms, a.ctime_ms < t),
            (t, t, true),
            "{d}"
        );
    }
}

#[test]
fn rename_within_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    assert_eq!(
        h.ok(mv("/f", "/g")),
        vec![renamed(&f, "/f", ROOT_ID, "/g", h.last())]
    );
    assert_eq!(h.tree(), ["/g"]);
}

#[test]
fn rename_of_a_directory_moves_its_subtree_with_one_event() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/c/f"));
    h.ok(mkdir("/z"));
    let ids: Vec<u64> = ["/a/b", "/a/b/c", "/a/b/c/f"]
        .iter()
        .map(|p| h.id(p))
        .collect();
    let b = h.ino("/a/b");
    let ev = h.ok(mv("/a/b", "/z/y"));
    assert_eq!(ev, vec![renamed(&b, "/a/b", h.id("/z"), "/z/y", h.last())]);
    assert_eq!(h.tree(), ["/a", "/z", "/z/y", "/z/y/c", "/z/y/c/f"]);
    let moved: Vec<u64> = ["/z/y", "/z/y/c", "/z/y/c/f"]
        .iter()
        .map(|p| h.id(p))
        .collect();
    assert_eq!(moved, ids);
    assert_eq!(path_of(&h.index, ids[2]).unwrap(), "/z/y/c/f");
}

#[test]
fn rename_onto_itself_is_a_noop_once_the_source_exists() {
    let mut h = Harness::new();
    h.ok(create_p("/a/f"));
    h.noop(mv("/a/f", "/a/f"));
    h.noop(mv("/a", "/a/"));
    h.noop(mv_over("/a/f/", "/a/f"));
    assert_eq!(h.refused_at(mv("/a/g", "/a/g")), (NotFound, "/a/g".into()));
    assert_eq!(h.seq, 1);
}

#[test]
fn rename_needs_the_source_and_the_destination_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/f"));
    assert_eq!(h.refused_at(mv("/x", "/y")), (NotFound, "/x".into()));
    assert_eq!(h.refused_at(mv("/a", "/x/y")), (NotFound, "/x".into()));
    assert_eq!(h.refused_at(mv("/a", "/f/y")), (NotADirectory, "/f".into()));
    assert_eq!(
        h.refused_at(mv("/a", "/f/y/z")),
        (NotADirectory, "/f".into())
    );
    // A file cannot go under itself either: it is no directory.
    assert_eq!(h.refused_at(mv("/f", "/f/g")), (NotADirectory, "/f".into()));
}

#[test]
fn rename_of_or_onto_the_root_is_invalid() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    assert_eq!(h.kind(mv("/", "/b")), InvalidArgument);
    assert_eq!(h.kind(mv("/a", "/")), InvalidArgument);
    assert_eq!(h.kind(mv_over("/a", "/")), InvalidArgument);
    assert_eq!(h.kind(mv("/", "/")), InvalidArgument);
}

#[test]
fn rename_of_a_directory_under_itself_is_invalid() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    assert_eq!(h.kind(mv("/a", "/a/c")), InvalidArgument);
    assert_eq!(h.kind(mv("/a", "/a/b/c")), InvalidArgument);
    assert_eq!(h.kind(mv_over("/a", "/a/b")), InvalidArgument);
    // A sibling sharing its prefix is not under it.
    h.ok(mkdir("/ab"));
    h.ok(mv("/a", "/ab/a"));
    assert_eq!(h.tree(), ["/ab", "/ab/a", "/ab/a/b"]);
}

#[test]
fn rename_onto_an_existing_name_needs_overwrite() {
    let mut h = Harness::new();
    for c in [create("/f"), create("/g"), mkdir("/d"), mkdir("/e")] {
        h.ok(c);
    }
    assert_eq!(h.refused_at(mv("/f", "/g")), (AlreadyExists, "/g".into()));
    assert_eq!(h.refused_at(mv("/d", "/e")), (AlreadyExists, "/e".into()));
    assert_eq!(h.refused_at(mv("/f", "/e")), (AlreadyExists, "/e".into()));
    assert_eq!(h.refused_at(mv("/d", "/g")), (AlreadyExists, "/g".into()));
}

#[test]
fn rename_overwrite_of_a_file_deletes_it_then_renames() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    h.ok(mkdir("/d"));
    h.ok(create("/d/g"));
    h.ok(complete("/d/g", 5));
    let (f, g, d) = (h.ino("/f"), h.ino("/d/g"), h.id("/d"));
    let ev = h.ok(mv_over("/f", "/d/g"));
    let t = h.last();
    assert_eq!(
        ev,
        vec![
            deleted(&g, "/d/g", Some(t)),
            renamed(&f, "/f", d, "/d/g", t)
        ]
    );
    assert_eq!(h.id("/d/g"), f.id);
    assert_eq!(h.tree(), ["/d", "/d/g"]);
    assert_eq!(get_inode(&h.index, &h.engine.names, g.id).unwrap(), None);
}

#[test]
fn rename_overwrite_of_an_empty_directory_deletes_it_then_renames() {
    let mut h = Harness::new();
    h.ok(create_p("/a/f"));
    h.ok(mkdir("/b"));
    let (a, b) = (h.ino("/a"), h.ino("/b"));
    let ev = h.ok(mv_over("/a", "/b"));
    assert_eq!(
        ev,
        vec![
            deleted(&b, "/b", Some(h.last())),
            renamed(&a, "/a", ROOT_ID, "/b", h.last())
        ]
    );
    assert_eq!(h.tree(), ["/b", "/b/f"]);
}

#[test]
fn rename_overwrite_with_nothing_to_replace_is_a_plain_rename() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    assert_eq!(
        h.ok(mv_over("/f", "/g")),
        vec![renamed(&f, "/f", ROOT_ID, "/g", h.last())]
    );
}

#[test]
fn rename_overwrite_refuses_other_kinds_and_non_empty_directories() {
    let mut h = Harness::new();
    for c in [create("/f"), mkdir("/d"), mkdir("/full"), create("/full/x")] {
        h.ok(c);
    }
    assert_eq!(
        h.refused_at(mv_over("/f", "/d")),
        (IsADirectory, "/d".into())
    );
    assert_eq!(
        h.refused_at(mv_over("/d", "/f")),
        (NotADirectory, "/f".into())
    );
    assert_eq!(
        h.refused_at(mv_over("/d", "/full")),
        (NotEmpty, "/full".into())
    );
    // Replacing one's own parent: it is not empty (or not a file).
    assert_eq!(
        h.refused_at(mv_over("/full/x", "/full")),
        (IsADirectory, "/full".into())
    );
    h.ok(mkdir("/full/sub"));
    h.ok(rm("/full/x"));
    assert_eq!(
        h.refused_at(mv_over("/full/sub", "/full")),
        (NotEmpty, "/full".into())
    );
}

#[test]
fn moving_a_directory_is_refused_when_a_path_under_it_would_pass_4096_bytes() {
    let mut h = Harness::new();
    let long = "x".repeat(255);
    // 15 components of 256 bytes each: 3840 bytes.
    let base: String = (0..15).map(|_| format!("/{long}")).collect();
    h.ok(mkdir_p(&base));
    // The deepest path under /s is 200 bytes below it.
    let deep = format!("/d/{}", "c".repeat(197));
    h.ok(create_p(&format!("/s{deep}")));
    // 3840 + 57 + 200 = 4096 + 1.
    let too_far = format!("{base}/{}", "m".repeat(56));
    let e = h.refused(mv("/s", &too_far));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("4097 bytes"), "{e}");
    // 4096 exactly: allowed, and the deepest path still resolves.
    let just = format!("{base}/{}", "m".repeat(55));
    h.ok(mv("/s", &just));
    assert_eq!(format!("{just}{deep}").len(), path::MAX_PATH_LEN);
    assert!(h.stat(&format!("{just}{deep}")).is_ok());
}

#[test]
fn a_move_that_lengthens_paths_walks_at_most_max_delete_inodes() {
    let mut h = Harness::new();
    h.engine.max_delete_inodes = 2;
    for c in [
        create_p("/s/1"),
        create_p("/s/2"),
        create_p("/t/1"),
        create_p("/t/2"),
    ] {
        h.ok(c);
    }
    h.ok(create("/t/3"));
    // Two inodes under /s: walked. Three under /t: refused...
    h.ok(mv("/s", "/ss"));
    let e = h.refused(mv("/t", "/tt"));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("more than 2 inodes"), "{e}");
    // ... unless its paths do not grow.
    h.ok(mv("/t", "/u"));
    h.ok(mv("/u", "/t"));
    assert_eq!(
        h.tree(),
        ["/ss", "/ss/1", "/ss/2", "/t", "/t/1", "/t/2", "/t/3"]
    );
}
