//! set_attr: modes, owners, groups and times.

use super::*;

#[test]
fn set_attr_changes_only_what_is_given_and_not_the_mtime() {
    let mut h = Harness::new();
    h.ok(create_as("/f", false, 0o644, "alice", "staff"));
    let f = h.ino("/f");
    let ev = h.ok(chmod("/f", 0o600));
    let mut new = f.attrs.clone();
    new.mode = 0o600;
    new.change_ms = h.last();
    assert_eq!(ev, vec![Event::SetAttr(update(&f, "/f", new.clone()))]);
    assert_eq!(h.ino("/f").attrs.mtime_ms, T0);

    let f = h.ino("/f");
    let ev = h.ok(chown("/f", None, Some("ml")));
    new.group = "ml".into();
    new.change_ms = h.last();
    assert_eq!(ev, vec![Event::SetAttr(update(&f, "/f", new.clone()))]);
    assert_eq!(h.ino("/f").attrs, new);
}

#[test]
fn set_attr_mtime_takes_the_callers_value_even_an_earlier_one() {
    let mut h = Harness::new();
    h.ok(mkdir("/d"));
    let d = h.ino("/d");
    let ev = h.ok(touch("/d", 5));
    let mut new = d.attrs.clone();
    new.mtime_ms = 5;
    new.change_ms = h.last();
    assert_eq!(ev, vec![Event::SetAttr(update(&d, "/d", new))]);
    assert_eq!(h.ino("/d").attrs.mtime_ms, 5);
    assert_eq!(h.ino("/d").attrs.ctime_ms, T0);
}

#[test]
fn set_attr_that_changes_nothing_is_a_noop() {
    let mut h = Harness::new();
    h.ok(create_as("/f", false, 0o644, "alice", "staff"));
    h.noop(chmod("/f", 0o644));
    h.noop(chown("/f", Some("alice"), Some("staff")));
    h.noop(chown("/f", None, None));
    h.noop(touch("/f", T0));
    assert_eq!(h.seq, 1);
}

#[test]
fn set_attr_of_the_root_is_allowed() {
    let mut h = Harness::new();
    let root = h.ino("/");
    let ev = h.ok(chmod("/", 0o700));
    let mut new = root.attrs.clone();
    new.mode = 0o700;
    new.change_ms = h.last();
    assert_eq!(
        ev,
        vec![Event::SetAttr(Update {
            id: ROOT_ID,
            parent: 0,
            name: String::new().into(),
            path: "/".into(),
            old: root.attrs,
            new,
            quotas: vec![],
        })]
    );
    assert_eq!(h.ino("/").attrs.mode, 0o700);
}

#[test]
fn set_attr_to_the_empty_owner_clears_it() {
    let mut h = Harness::new();
    h.ok(create_as("/f", false, 0o644, "alice", "staff"));
    h.ok(chown("/f", Some(""), Some("")));
    let a = h.ino("/f").attrs;
    assert_eq!((a.owner.as_str(), a.group.as_str()), ("", ""));
}

#[test]
fn set_attr_refuses_a_bad_mode_a_long_owner_and_a_missing_path() {
    let mut h = Harness::new();
    h.ok(create("/f"));
    assert_eq!(h.kind(chmod("/f", 0o17777)), InvalidArgument);
    let long = "x".repeat(256);
    assert_eq!(h.kind(chown("/f", Some(&long), None)), InvalidArgument);
    assert_eq!(h.kind(chown("/f", None, Some(&long))), InvalidArgument);
    assert_eq!(h.refused_at(chmod("/g", 0o600)), (NotFound, "/g".into()));
    assert_eq!(
        h.refused_at(chmod("/f/g", 0o600)),
        (NotADirectory, "/f".into())
    );
}

// ---------------------------------------------------------------------------
// Owner and group dictionaries
// ---------------------------------------------------------------------------

#[test]
fn owners_and_groups_are_interned_in_event_order_and_stored() {
    let mut h = Harness::new();
    h.ok(mkdir_as("/a", false, 0o755, "alice", "staff"));
    h.ok(create_as("/a/f", false, 0o644, "bob", "staff"));
    let get = |k: &[u8]| h.index.inodes.get(k).cloned();
    // Both directions and the counter, one key each.
    assert_eq!(
        get(&v2::dict_by_name_key(true, b"alice")),
        Some(1u32.to_le_bytes().to_vec())
    );
    assert_eq!(
        get(&v2::dict_by_name_key(true, b"bob")),
        Some(2u32.to_le_bytes().to_vec())
    );
    assert_eq!(get(&v2::dict_by_id_key(true, 2)), Some(b"bob".to_vec()));
    assert_eq!(
        get(&v2::dict_count_key(true)),
        Some(2u32.to_le_bytes().to_vec())
    );
    assert_eq!(
        get(&v2::dict_by_name_key(false, b"staff")),
        Some(1u32.to_le_bytes().to_vec())
    );
    assert_eq!(
        get(&v2::dict_count_key(false)),
        Some(1u32.to_le_bytes().to_vec())
    );
    let e = InodeEntryV2::decode(&h.index.inodes[&inode_key(h.id("/a/f"))[..]]).unwrap();
    assert_eq!((e.owner_id, e.group_id), (2, 1));
    assert_eq!((h.engine.state.owners, h.engine.state.groups), (2, 1));
}

#[test]
fn three_hundred_owners_and_groups_get_ids_past_format_1s_255() {
    let mut h = Harness::new();
    for i in 0..300 {
        h.ok(create_as(
            &format!("/f{i}"),
            false,
            0o644,
            &format!("user{i}"),
            &format!("group{i}"),
        ));
    }
    assert_eq!((h.engine.state.owners, h.engine.state.groups), (300, 300));
    for i in [0, 254, 255, 299] {
        let a = h.ino(&format!("/f{i}")).attrs;
        assert_eq!(
            (a.owner, a.group),
            (format!("user{i}"), format!("group{i}"))
        );
    }
    let e = InodeEntryV2::decode(&h.index.inodes[&inode_key(h.id("/f299"))[..]]).unwrap();
    assert_eq!((e.owner_id, e.group_id), (300, 300));
    h.ok(chown("/f0", Some("user299"), Some("group0")));
    assert_eq!(h.engine.state.owners, 300, "a known name adds nothing");
}

/// Puts a dictionary's counter at `n` in both indexes, as if `n` names
/// had been given.
fn fill_dictionary(h: &mut Harness, owner: bool, n: u32) {
    for index in [&mut h.index, &mut h.replica] {
        index
            .inodes
            .insert(v2::dict_count_key(owner).to_vec(), n.to_le_bytes().to_vec());
    }
    h.restart();
    h.replica_state = EngineState::load(&h.replica).unwrap();
}

#[test]
fn a_full_owner_dictionary_refuses_new_owners_only() {
    let mut h = Harness::new();
    h.ok(mkdir_as("/d0", false, 0o755, "u0", ""));
    fill_dictionary(&mut h, true, u32::MAX - 1);
    // The last id goes to one more name.
    h.ok(mkdir_as("/d1", false, 0o755, "u1", ""));
    assert_eq!(h.engine.state.owners, u32::MAX);
    let e = h.refused(mkdir_as("/x", false, 0o755, "new", ""));
    assert!(matches!(e, Error::DictionaryFull(DictKind::Owner)), "{e:?}");
    let e = h.refused(create_as("/x", true, 0o644, "new", ""));
    assert!(matches!(e, Error::DictionaryFull(DictKind::Owner)), "{e:?}");
    assert_eq!(h.kind(chown("/d0", Some("new"), None)), DictionaryFull);
    // Known owners, the empty one and the other dictionary still work.
    h.ok(mkdir_as("/x", false, 0o755, "u1", "g"));
    h.ok(create_as("/y", false, 0o644, "", "h"));
    h.ok(chown("/d1", Some("u0"), None));
    assert_eq!(h.ino("/d1").attrs.owner, "u0");
}

#[test]
fn a_group_sees_the_dictionary_entries_of_its_earlier_commands() {
    let mut h = Harness::new();
    fill_dictionary(&mut h, false, u32::MAX - 1);
    let ran = h.run_group(vec![
        mkdir_as("/x", false, 0o755, "", "last"),
        mkdir_as("/y", false, 0o755, "", "one-too-many"),
        mkdir_as("/z", false, 0o755, "", "last"),
    ]);
    assert!(matches!(ran[0], Ran::Applied(_)));
    assert!(
        matches!(ran[1], Ran::Refused(Error::DictionaryFull(DictKind::Group))),
        "{ran:?}"
    );
    assert!(matches!(ran[2], Ran::Applied(_)));
    assert_eq!(h.engine.state.groups, u32::MAX);
}
