//! mkdir, create, complete and set_size.

use super::*;

#[test]
fn mkdir_creates_one_directory_with_the_commands_attributes() {
    let mut h = Harness::new();
    let ev = h.ok(mkdir_as("/data", false, 0o700, "alice", "staff"));
    let attrs = dir_attrs(T0, 0o700, "alice", "staff");
    assert_eq!(ev, vec![created(2, ROOT_ID, "/data", attrs.clone())]);
    let ino = h.ino("/data");
    assert_eq!(
        (ino.id, ino.parent, ino.name.to_str().unwrap()),
        (2, ROOT_ID, "data")
    );
    assert_eq!(ino.attrs, attrs);
    assert_eq!(h.ls("/"), ["data"]);
}

#[test]
fn mkdir_logs_the_canonical_path() {
    let mut h = Harness::new();
    let ev = h.ok(mkdir("/a/"));
    assert_eq!(
        ev,
        vec![created(2, ROOT_ID, "/a", dir_attrs(T0, 0o755, "", ""))]
    );
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn mkdir_of_a_taken_name_is_already_exists() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/f"));
    assert_eq!(h.refused_at(mkdir("/a")), (AlreadyExists, "/a".into()));
    assert_eq!(h.refused_at(mkdir("/f")), (AlreadyExists, "/f".into()));
    assert_eq!(h.refused_at(mkdir("/a/")), (AlreadyExists, "/a".into()));
    // -p tolerates an existing directory, not a file.
    assert_eq!(h.refused_at(mkdir_p("/f")), (AlreadyExists, "/f".into()));
}

#[test]
fn mkdir_of_the_root_is_already_exists_and_with_parents_a_noop() {
    let mut h = Harness::new();
    assert_eq!(h.refused_at(mkdir("/")), (AlreadyExists, "/".into()));
    h.noop(mkdir_p("/"));
    assert_eq!(h.seq, 0);
}

#[test]
fn mkdir_without_parents_names_the_first_missing_component() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    assert_eq!(h.refused_at(mkdir("/a/b/c/d")), (NotFound, "/a/b".into()));
    assert_eq!(h.refused_at(mkdir("/x/y")), (NotFound, "/x".into()));
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn mkdir_p_creates_the_missing_components_top_down_with_consecutive_ids() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    let ev = h.ok(mkdir_as("/a/b/c/d", true, 0o750, "bob", "ml"));
    let t = T0 + 1000;
    let attrs = dir_attrs(t, 0o750, "bob", "ml");
    assert_eq!(
        ev,
        vec![
            created(3, 2, "/a/b", attrs.clone()),
            created(4, 3, "/a/b/c", attrs.clone()),
            created(5, 4, "/a/b/c/d", attrs.clone()),
        ]
    );
    assert_eq!(h.tree(), ["/a", "/a/b", "/a/b/c", "/a/b/c/d"]);
    assert_eq!(h.ino("/a/b/c/d").attrs, attrs);
    // The existing ancestor gained an entry: its times moved, and only
    // those.
    let mut a = dir_attrs(T0, 0o755, "", "");
    (a.mtime_ms, a.change_ms) = (t, t);
    assert_eq!(h.ino("/a").attrs, a);
}

#[test]
fn mkdir_p_of_an_existing_directory_is_a_noop_whatever_its_attributes() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    h.noop(mkdir_p("/a/b"));
    h.noop(mkdir_as("/a/b/", true, 0o700, "other", "other"));
    assert_eq!(h.seq, 1);
    assert_eq!(h.ino("/a/b").attrs.mode, 0o755);
}

#[test]
fn mkdir_under_a_file_is_not_a_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/a/f"));
    assert_eq!(
        h.refused_at(mkdir("/a/f/x")),
        (NotADirectory, "/a/f".into())
    );
    assert_eq!(
        h.refused_at(mkdir("/a/f/x/y")),
        (NotADirectory, "/a/f".into())
    );
    assert_eq!(
        h.refused_at(mkdir_p("/a/f/x/y")),
        (NotADirectory, "/a/f".into())
    );
}

#[test]
fn mkdir_refuses_a_mode_outside_0o7777() {
    let mut h = Harness::new();
    assert_eq!(
        h.kind(mkdir_as("/a", false, 0o10000, "", "")),
        InvalidArgument
    );
    assert_eq!(
        h.kind(mkdir_as("/a", true, 0o10755, "", "")),
        InvalidArgument
    );
    h.ok(mkdir_as("/a", false, 0o7777, "", ""));
    assert_eq!(h.ino("/a").attrs.mode, 0o7777);
}

#[test]
fn mkdir_refuses_an_owner_or_group_longer_than_255_bytes() {
    let mut h = Harness::new();
    let long = "o".repeat(256);
    assert_eq!(
        h.kind(mkdir_as("/a", false, 0o755, &long, "")),
        InvalidArgument
    );
    assert_eq!(
        h.kind(mkdir_as("/a", true, 0o755, "", &long)),
        InvalidArgument
    );
    h.ok(mkdir_as("/a", false, 0o755, &long[1..], &long[1..]));
    assert_eq!(h.ino("/a").attrs.owner.len(), 255);
}

// ---------------------------------------------------------------------------
// create
// ---------------------------------------------------------------------------

#[test]
fn create_makes_an_empty_incomplete_file_and_moves_its_parents_times() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    let parent = h.ino("/d");
    let cmd = Command::Create {
        path: "/d/f".into(),
        parents: false,
        mode: 0o600,
        owner: "alice".into(),
        group: "staff".into(),
        block_size: 4096,
    };
    let ev = h.ok(cmd);
    let t = T0 + 1000;
    let mut attrs = file_attrs(t, 0o600, "alice", "staff");
    attrs.block_size = 4096;
    assert_eq!(ev, vec![created(3, parent.id, "/d/f", attrs.clone())]);
    assert_eq!(h.ino("/d/f").attrs, attrs);
    let mut moved = parent.clone();
    (moved.attrs.mtime_ms, moved.attrs.change_ms) = (t, t);
    assert_eq!(h.ino("/d"), moved);
}

#[test]
fn create_of_a_taken_name_is_already_exists() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    h.ok(create("/f"));
    assert_eq!(h.refused_at(create("/f")), (AlreadyExists, "/f".into()));
    assert_eq!(h.refused_at(create_p("/f")), (AlreadyExists, "/f".into()));
    assert_eq!(h.refused_at(create("/a")), (AlreadyExists, "/a".into()));
    assert_eq!(h.refused_at(create("/")), (AlreadyExists, "/".into()));
    assert_eq!(h.refused_at(create_p("/")), (AlreadyExists, "/".into()));
}

#[test]
fn create_without_parents_needs_the_parent() {
    let mut h = Harness::new();
    assert_eq!(h.refused_at(create("/a/b/f")), (NotFound, "/a".into()));
    h.ok(mkdir("/a"));
    assert_eq!(h.refused_at(create("/a/b/f")), (NotFound, "/a/b".into()));
}

#[test]
fn create_with_parents_makes_the_missing_directories_0o755_then_the_file() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    let ev = h.ok(create_as("/a/b/c/f", true, 0o640, "alice", "staff"));
    let t = T0 + 1000;
    let dirs = dir_attrs(t, 0o755, "alice", "staff");
    assert_eq!(
        ev,
        vec![
            created(3, 2, "/a/b", dirs.clone()),
            created(4, 3, "/a/b/c", dirs),
            created(5, 4, "/a/b/c/f", file_attrs(t, 0o640, "alice", "staff")),
        ]
    );
    // With every directory there, only the file.
    let ev = h.ok(create_p("/a/b/g"));
    assert_eq!(
        ev,
        vec![created(
            6,
            3,
            "/a/b/g",
            file_attrs(T0 + 2000, 0o644, "", "")
        )]
    );
}

#[test]
fn create_under_a_file_is_not_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.refused_at(create("/f/g")), (NotADirectory, "/f".into()));
    assert_eq!(
        h.refused_at(create_p("/f/x/g")),
        (NotADirectory, "/f".into())
    );
}

#[test]
fn create_refuses_a_bad_mode_or_owner() {
    let mut h = Harness::new();
    assert_eq!(
        h.kind(create_as("/f", false, 0o20644, "", "")),
        InvalidArgument
    );
    let long = "g".repeat(256);
    assert_eq!(
        h.kind(create_as("/f", true, 0o644, "", &long)),
        InvalidArgument
    );
    assert_eq!(h.tree(), Vec::<String>::new());
}

// ---------------------------------------------------------------------------
// complete
// ---------------------------------------------------------------------------

#[test]
fn complete_sets_the_size_the_flag_and_the_mtime() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    let ev = h.ok(complete("/f/", 4096));
    let mut new = f.attrs.clone();
    new.size = 4096;
    new.complete = true;
    new.mtime_ms = T0 + 1000;
    new.change_ms = T0 + 1000;
    assert_eq!(ev, vec![Event::Complete(update(&f, "/f", new.clone()))]);
    assert_eq!(h.ino("/f").attrs, new);
    assert_eq!(h.ino("/f").attrs.ctime_ms, T0);
}

#[test]
fn complete_again_with_the_same_size_is_a_noop_and_with_another_refused() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    h.ok(complete("/f", 10));
    h.noop(complete("/f", 10));
    assert_eq!(h.kind(complete("/f", 11)), InvalidArgument);
    // After a set_size the size to repeat is the new one.
    h.ok(set_size("/f", 20));
    h.noop(complete("/f", 20));
    assert_eq!(h.kind(complete("/f", 10)), InvalidArgument);
    assert_eq!(h.seq, 3);
}

#[test]
fn complete_of_a_directory_is_is_a_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    assert_eq!(h.refused_at(complete("/d", 0)), (IsADirectory, "/d".into()));
    assert_eq!(h.refused_at(complete("/", 0)), (IsADirectory, "/".into()));
}

#[test]
fn complete_of_a_missing_path_is_not_found_and_under_a_file_not_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.refused_at(complete("/g", 1)), (NotFound, "/g".into()));
    assert_eq!(
        h.refused_at(complete("/f/g", 1)),
        (NotADirectory, "/f".into())
    );
    assert_eq!(h.refused_at(complete("/d/e/g", 1)), (NotFound, "/d".into()));
}

// ---------------------------------------------------------------------------
// set_size
// ---------------------------------------------------------------------------

#[test]
fn set_size_changes_the_size_and_mtime_and_keeps_the_completeness() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    let ev = h.ok(set_size("/f", 7));
    let mut new = f.attrs.clone();
    new.size = 7;
    new.mtime_ms = T0 + 1000;
    new.change_ms = T0 + 1000;
    assert_eq!(ev, vec![Event::SetSize(update(&f, "/f", new.clone()))]);
    assert!(!h.ino("/f").attrs.complete);

    h.ok(complete("/f", 7));
    let ev = h.ok(set_size("/f", 3));
    let Event::SetSize(u) = &ev[0] else {
        panic!("{ev:?}")
    };
    assert!(u.new.complete && u.old.complete);
    assert_eq!((u.old.size, u.new.size), (7, 3));
}

#[test]
fn set_size_to_the_same_size_still_logs_a_new_mtime() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    let f = h.ino("/f");
    let ev = h.ok(set_size("/f", 0));
    let mut new = f.attrs.clone();
    new.mtime_ms = T0 + 1000;
    new.change_ms = T0 + 1000;
    assert_eq!(ev, vec![Event::SetSize(update(&f, "/f", new))]);
}

#[test]
fn set_size_of_a_directory_is_is_a_directory() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    assert_eq!(h.refused_at(set_size("/d", 1)), (IsADirectory, "/d".into()));
    assert_eq!(h.refused_at(set_size("/", 1)), (IsADirectory, "/".into()));
    assert_eq!(h.refused_at(set_size("/e", 1)), (NotFound, "/e".into()));
}
