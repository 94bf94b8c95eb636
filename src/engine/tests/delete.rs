//! delete, plain and recursive.

use super::*;

#[test]
fn delete_of_a_file_logs_its_attributes() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    h.ok(create_as("/d/f", false, 0o600, "alice", "ml"));
    h.ok(complete("/d/f", 99));
    let f = h.ino("/d/f");
    let ev = h.ok(rm("/d/f/"));
    assert_eq!(ev, vec![deleted(&f, "/d/f", Some(h.last()))]);
    assert!(h.missing("/d/f"));
    assert_eq!(h.ls("/d"), Vec::<String>::new());
}

#[test]
fn delete_of_an_empty_directory() {
    let mut h = Harness::new();
    h.ok(mkdir_p("/a/b"));
    let b = h.ino("/a/b");
    assert_eq!(h.ok(rm("/a/b")), vec![deleted(&b, "/a/b", Some(h.last()))]);
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn delete_of_a_non_empty_directory_needs_recursive() {
    let mut h = Harness::new();
    h.ok(create_p("/a/b/f"));
    assert_eq!(h.refused_at(rm("/a")), (NotEmpty, "/a".into()));
    assert_eq!(h.refused_at(rm("/a/b/")), (NotEmpty, "/a/b".into()));
    h.ok(rm_r("/a"));
    assert_eq!(h.tree(), Vec::<String>::new());
}

#[test]
fn delete_recursive_is_post_order_with_siblings_in_byte_order() {
    let mut h = Harness::new();
    for c in [
        mkdir("/d"),
        mkdir("/d/b"),
        mkdir("/d/a"),
        create("/d/a/y"),
        create("/d/a/x"),
        create("/d/c"),
        create("/d/B"),
        create("/e"),
    ] {
        h.ok(c);
    }
    let order = ["/d/B", "/d/a/x", "/d/a/y", "/d/a", "/d/b", "/d/c", "/d"];
    let t = h.now;
    let expected: Vec<Event> = order
        .iter()
        .map(|p| deleted(&h.ino(p), p, (*p == "/d").then_some(t)))
        .collect();
    assert_eq!(h.ok(rm_r("/d")), expected);
    assert_eq!(h.tree(), ["/e"]);
}

#[test]
fn delete_recursive_of_a_file_or_an_empty_directory_is_one_event() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    h.ok(mkdir("/d"));
    let (f, d) = (h.ino("/f"), h.ino("/d"));
    assert_eq!(h.ok(rm_r("/f")), vec![deleted(&f, "/f", Some(h.last()))]);
    assert_eq!(h.ok(rm_r("/d")), vec![deleted(&d, "/d", Some(h.last()))]);
}

#[test]
fn delete_of_the_root_is_invalid() {
    let mut h = Harness::new();
    h.ok(mkdir("/a"));
    assert_eq!(h.kind(rm("/")), InvalidArgument);
    assert_eq!(h.kind(rm_r("/")), InvalidArgument);
    assert_eq!(h.tree(), ["/a"]);
}

#[test]
fn delete_of_a_missing_path_is_not_found_and_under_a_file_not_a_directory() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.refused_at(rm("/g")), (NotFound, "/g".into()));
    assert_eq!(h.refused_at(rm_r("/g/h")), (NotFound, "/g".into()));
    assert_eq!(h.refused_at(rm("/f/h")), (NotADirectory, "/f".into()));
}

#[test]
fn delete_recursive_removes_at_most_max_delete_inodes() {
    let mut h = Harness::new();
    h.engine.max_delete_inodes = 3;
    for c in [
        create_p("/ok/a"),
        create_p("/ok/b"),
        create_p("/big/a/x"),
        create_p("/big/b"),
    ] {
        h.ok(c);
    }
    // /big holds 4 inodes, one of them under a subdirectory.
    let e = h.refused(rm_r("/big"));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("more than 3 inodes"), "{e}");
    // 3 inodes: exactly the limit.
    assert_eq!(h.ok(rm_r("/ok")).len(), 3);
    h.ok(rm_r("/big/a"));
    assert_eq!(h.ok(rm_r("/big")).len(), 2);

    h.engine.max_delete_inodes = 1;
    h.ok(create_p("/d/f"));
    assert_eq!(h.kind(rm_r("/d")), InvalidArgument);
    h.ok(rm("/d/f"));
    h.ok(rm_r("/d"));
}

#[test]
fn delete_recursive_is_refused_when_its_record_would_pass_max_record_bytes() {
    let name = "n".repeat(200);
    let build = |h: &mut Harness| {
        h.ok(mkdir("/d"));
        for i in 0..4 {
            h.ok(create(&format!("/d/{i}{name}")));
        }
    };
    // The engine's bound on the record: each event's strings plus 96.
    let mut probe = Harness::new();
    build(&mut probe);
    let mut bound = "/d".len() + "d".len() + EVENT_FIXED_BYTES;
    for i in 0..4 {
        let n = format!("{i}{name}");
        bound += "/d/".len() + 2 * n.len() + EVENT_FIXED_BYTES;
    }
    // The bound holds the exact size.
    let exact = postcard::to_allocvec(&probe.ok(rm_r("/d"))).unwrap().len();
    assert!(exact <= bound, "{exact} > {bound}");

    let mut h = Harness::new();
    build(&mut h);
    h.engine.max_record_bytes = bound - 1;
    let e = h.refused(rm_r("/d"));
    assert_eq!(e.kind(), InvalidArgument);
    assert!(e.to_string().contains("log record"), "{e}");
    h.engine.max_record_bytes = bound;
    assert_eq!(h.ok(rm_r("/d")).len(), 5);
}
