//! Golden fixtures of old formats (tests/fixtures/, made by
//! tests/fixtures/make-v1.sh with the code that wrote them): each holds
//! exactly what its files say, byte for byte, and this build refuses to
//! open it until it is migrated.
//!
//! `bless_v1_raw_listing` (ignored; with `TREELOG_BLESS_FIXTURES=1`) writes
//! the raw listing of a fixture instead of checking it: the script runs it
//! once, when it makes the fixture.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use treelog::store::{Store, StoreOptions, CF_EDGES, CF_INODES, CF_LOG, CF_META};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures")
        .join(name)
}

/// A copy of the fixture's database (never opened in place).
fn copy_db(name: &str, to: &Path) -> PathBuf {
    let db = to.join("db");
    std::fs::create_dir_all(&db).unwrap();
    for e in std::fs::read_dir(fixture(name).join("db")).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), db.join(e.file_name())).unwrap();
    }
    db
}

/// Every key and value of the column families that make the database, in
/// hex, one `cf key value` line each, read without checking its format
/// version and without writing (the meta CF without what an open rewrites:
/// nothing in format 1).
fn raw_listing(db: &Path) -> String {
    let so = StoreOptions {
        create_if_missing: false,
        ..Default::default()
    };
    let store = Store::open_unmigrated(db, &so).unwrap();
    let mut out = String::new();
    for cf in [CF_META, CF_INODES, CF_EDGES, CF_LOG] {
        for kv in store.scan_cf(cf).unwrap() {
            let (k, v) = kv.unwrap();
            out.push_str(&format!("{cf} {} {}\n", hex::encode(&k), hex::encode(&v)));
        }
    }
    out
}

fn run(db: &Path, args: &[&str]) -> common::cli::Ran {
    common::cli::run(BIN, db, args)
}

#[test]
fn the_v1_fixture_holds_what_format_1_wrote_and_is_refused_unmigrated() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_db("v1", dir.path());
    let want_raw = std::fs::read_to_string(fixture("v1/raw.txt")).unwrap();
    assert_eq!(
        raw_listing(&db),
        want_raw,
        "the stored bytes differ from tests/fixtures/v1/raw.txt"
    );
    let want_dump = std::fs::read_to_string(fixture("v1/dump.jsonl")).unwrap();
    // What the dump holds: every event kind, both dictionaries.
    for needle in [
        "\"Create\"",
        "\"Complete\"",
        "\"SetSize\"",
        "\"SetAttr\"",
        "\"Delete\"",
        "\"Rename\"",
        "owner_dict",
        "group_dict",
        "\"dave\"",
        "\"ops\"",
    ] {
        assert!(want_dump.contains(needle), "the fixture has no {needle}");
    }
    // Refused, saying how to migrate, and untouched.
    for args in [&["stat", "/"][..], &["admin", "dump"], &["admin", "verify"]] {
        let r = run(&db, args);
        assert_eq!(r.code(), 10, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("format version 1 must be migrated")
                && r.stderr.contains("admin migrate"),
            "{args:?}: {}",
            r.stderr
        );
    }
    assert_eq!(raw_listing(&db), want_raw, "the refused opens wrote");
}

/// Not a test: the fixture script's tool (ignored, and a no-op without
/// `TREELOG_BLESS_FIXTURES=1`).
#[test]
#[ignore = "writes tests/fixtures/v1/raw.txt: run by tests/fixtures/make-v1.sh"]
fn bless_v1_raw_listing() {
    if std::env::var("TREELOG_BLESS_FIXTURES").as_deref() != Ok("1") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = copy_db("v1", dir.path());
    std::fs::write(fixture("v1/raw.txt"), raw_listing(&db)).unwrap();
}
