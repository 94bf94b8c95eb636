//! The permission rules of `access` (commands made for a user), run by the
//! engine harness: each refusal's kind (EACCES or EPERM), and what a new
//! entry's owner, group and mode become.

use super::*;
use treelog_proto::caller::Caller;

fn user(name: &str, groups: &[&str]) -> Option<Caller> {
    Some(Caller::new(
        name,
        groups.iter().map(|g| g.to_string()).collect(),
    ))
}

fn root() -> Option<Caller> {
    user("root", &["root"])
}

/// `/home` (root's, 0755) with `/home/alice` (alice:staff, 0750) and
/// `/tmp` (root's, 1777), made as root.
fn house() -> Harness {
    let mut h = Harness::new();
    h.caller = root();
    h.ok(mkdir_as("/home", false, 0o755, "root", "root"));
    h.ok(mkdir_as("/home/alice", false, 0o750, "alice", "staff"));
    h.ok(mkdir_as("/tmp", false, 0o1777, "root", "root"));
    h
}

#[test]
fn a_new_entry_is_its_callers_whatever_the_command_says() {
    let mut h = house();
    h.caller = user("alice", &["staff", "wheel"]);
    h.ok(create_as("/home/alice/f", false, 0o644, "root", "root"));
    let a = h.ino("/home/alice/f").attrs;
    assert_eq!((a.owner.as_str(), a.group.as_str()), ("alice", "staff"));
    // A group the caller is in is kept.
    h.ok(create_as("/home/alice/g", false, 0o644, "alice", "wheel"));
    assert_eq!(h.ino("/home/alice/g").attrs.group, "wheel");
    // Root gives any owner.
    h.caller = root();
    h.ok(create_as("/home/alice/h", false, 0o644, "bob", "users"));
    let a = h.ino("/home/alice/h").attrs;
    assert_eq!((a.owner.as_str(), a.group.as_str()), ("bob", "users"));
}

#[test]
fn creating_needs_write_and_search_on_the_parent() {
    let mut h = house();
    h.caller = user("bob", &["users"]);
    assert_eq!(h.kind(create("/home/f")), ErrorKind::PermissionDenied);
    assert_eq!(h.kind(mkdir("/home/d")), ErrorKind::PermissionDenied);
    // No search on /home/alice (0750, bob is not in staff).
    assert_eq!(h.kind(create("/home/alice/f")), ErrorKind::PermissionDenied);
    // A member of staff may search but not write.
    h.caller = user("carol", &["staff"]);
    assert_eq!(h.kind(create("/home/alice/f")), ErrorKind::PermissionDenied);
    // `mkdir -p` of what exists needs search only; EEXIST before EACCES.
    h.noop(mkdir_p("/home/alice"));
    assert_eq!(h.kind(mkdir("/home/alice")), ErrorKind::AlreadyExists);
    // A missing parent is still NotFound.
    assert_eq!(h.kind(create("/nope/f")), ErrorKind::NotFound);
    // /tmp is writable by all.
    h.ok(create("/tmp/carol"));
}

#[test]
fn the_sticky_bit_keeps_entries_to_their_owners() {
    let mut h = house();
    h.caller = user("alice", &["staff"]);
    h.ok(create("/tmp/a"));
    h.caller = user("bob", &["users"]);
    h.ok(create("/tmp/b"));
    assert_eq!(h.kind(rm("/tmp/a")), ErrorKind::NotPermitted);
    assert_eq!(h.kind(mv("/tmp/a", "/tmp/c")), ErrorKind::NotPermitted);
    // Nor may bob replace alice's entry by a rename onto it.
    assert_eq!(h.kind(mv_over("/tmp/b", "/tmp/a")), ErrorKind::NotPermitted);
    h.ok(mv("/tmp/b", "/tmp/b2"));
    h.ok(rm("/tmp/b2"));
    // The directory's owner may.
    h.caller = root();
    h.ok(rm("/tmp/a"));
}

#[test]
fn chmod_and_chown_are_the_owners_and_roots() {
    let mut h = house();
    h.caller = user("alice", &["staff", "wheel"]);
    h.ok(create("/home/alice/f"));
    h.caller = user("bob", &["staff"]);
    assert_eq!(
        h.kind(chmod("/home/alice/f", 0o600)),
        ErrorKind::NotPermitted
    );
    assert_eq!(
        h.kind(chown("/home/alice/f", None, Some("users"))),
        ErrorKind::NotPermitted
    );
    h.caller = user("alice", &["staff", "wheel"]);
    h.ok(chmod("/home/alice/f", 0o600));
    // The owner gives a group she is in, not one she is not.
    h.ok(chown("/home/alice/f", None, Some("wheel")));
    assert_eq!(
        h.kind(chown("/home/alice/f", None, Some("users"))),
        ErrorKind::NotPermitted
    );
    // Only root gives an entry away.
    assert_eq!(
        h.kind(chown("/home/alice/f", Some("bob"), None)),
        ErrorKind::NotPermitted
    );
    // A chown to what it is already changes nothing and is allowed.
    h.noop(chown("/home/alice/f", Some("alice"), None));
    h.caller = root();
    h.ok(chown("/home/alice/f", Some("bob"), Some("users")));
    assert_eq!(h.ino("/home/alice/f").attrs.owner, "bob");
}

#[test]
fn setuid_and_setgid_bits_follow_linux() {
    let mut h = house();
    h.caller = user("alice", &["staff"]);
    h.ok(create("/home/alice/f"));
    // The setgid bit of a file whose group she is not in is dropped.
    h.caller = root();
    h.ok(chown("/home/alice/f", None, Some("wheel")));
    h.caller = user("alice", &["staff"]);
    h.ok(chmod("/home/alice/f", 0o2755));
    assert_eq!(h.ino("/home/alice/f").attrs.mode, 0o755);
    // A change of owner or group drops setuid, and setgid with group
    // execute.
    h.caller = root();
    h.ok(chmod("/home/alice/f", 0o6755));
    h.ok(chown("/home/alice/f", None, Some("staff")));
    assert_eq!(h.ino("/home/alice/f").attrs.mode, 0o755);
}

#[test]
fn a_setgid_directory_gives_its_group_and_its_bit() {
    let mut h = house();
    h.ok(mkdir_as("/proj", false, 0o2777, "root", "devs"));
    h.caller = user("alice", &["staff"]);
    h.ok(create("/proj/f"));
    h.ok(mkdir("/proj/d"));
    assert_eq!(h.ino("/proj/f").attrs.group, "devs");
    let d = h.ino("/proj/d").attrs;
    assert_eq!(d.group, "devs");
    assert_eq!(d.mode & 0o2000, 0o2000, "{:o}", d.mode);
    // A setgid file made there by a non-member of devs keeps no setgid.
    h.ok(create_as("/proj/g", false, 0o2755, "", ""));
    assert_eq!(h.ino("/proj/g").attrs.mode, 0o755);
}

#[test]
fn moving_a_directory_elsewhere_needs_write_on_it() {
    let mut h = house();
    h.caller = root();
    h.ok(mkdir_as("/shared", false, 0o777, "root", "root"));
    h.ok(mkdir_as("/shared/ro", false, 0o555, "bob", "users"));
    h.ok(mkdir_as("/shared/other", false, 0o777, "root", "root"));
    h.caller = user("alice", &["staff"]);
    assert_eq!(
        h.kind(mv("/shared/ro", "/shared/other/ro")),
        ErrorKind::PermissionDenied
    );
    // Within its parent, `..` does not change: allowed.
    h.ok(mv("/shared/ro", "/shared/ro2"));
}

#[test]
fn contents_attributes_and_times_need_write() {
    let mut h = house();
    h.caller = user("alice", &["staff"]);
    h.ok(create_as("/tmp/f", false, 0o644, "", ""));
    h.caller = user("bob", &["users"]);
    assert_eq!(h.kind(set_size("/tmp/f", 9)), ErrorKind::PermissionDenied);
    assert_eq!(h.kind(touch("/tmp/f", 5)), ErrorKind::PermissionDenied);
    let setx = |name: &str| Command::SetXattr {
        path: "/tmp/f".into(),
        name: name.into(),
        value: b"v".to_vec().into(),
        flag: XattrFlag::Either,
    };
    assert_eq!(h.kind(setx("user.a")), ErrorKind::PermissionDenied);
    assert_eq!(h.kind(setx("trusted.a")), ErrorKind::NotPermitted);
    h.caller = user("alice", &["staff"]);
    h.ok(set_size("/tmp/f", 9));
    h.ok(touch("/tmp/f", 5));
    h.ok(setx("user.a"));
    // Once others may write, bob may too (but still not chmod).
    h.ok(chmod("/tmp/f", 0o666));
    h.caller = user("bob", &["users"]);
    h.ok(set_size("/tmp/f", 10));
    h.ok(touch("/tmp/f", 6));
    assert_eq!(h.kind(chmod("/tmp/f", 0o600)), ErrorKind::NotPermitted);
}

#[test]
fn a_recursive_delete_is_roots_and_quotas_too() {
    let mut h = house();
    h.caller = user("alice", &["staff"]);
    h.ok(mkdir("/home/alice/d"));
    h.ok(create("/home/alice/d/f"));
    assert_eq!(h.kind(rm_r("/home/alice/d")), ErrorKind::NotPermitted);
    h.ok(rm("/home/alice/d/f"));
    h.ok(rm_r("/home/alice/d"));
    let quota = Command::SetQuota {
        path: "/home/alice".into(),
        inodes: Some(5),
        bytes: None,
    };
    assert_eq!(h.kind(quota.clone()), ErrorKind::NotPermitted);
    h.caller = root();
    h.ok(quota);
}

#[test]
fn reads_need_search_and_listings_read() {
    let h = house();
    let names = &h.engine.names;
    let bob = Caller::new("bob", vec!["users".into()]);
    let carol = Caller::new("carol", vec!["staff".into()]);
    let check =
        |p: &str, c: &Caller, need| access::check_read(&h.index, names, p.as_bytes(), c, need);
    use access::ReadNeed::*;
    assert!(check("/home", &bob, List).is_ok());
    assert_eq!(
        check("/home/alice", &bob, List).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    assert_eq!(
        check("/home/alice/x", &bob, Lookup).unwrap_err().kind(),
        ErrorKind::PermissionDenied
    );
    // staff may search and list (0750).
    assert!(check("/home/alice", &carol, List).is_ok());
    assert!(check("/home/alice/x", &carol, Lookup).is_ok());
    // Missing entries are the read's to report.
    assert!(check("/nope/x", &bob, Lookup).is_ok());
}
