//! Golden fixtures of old formats (migrations/fixtures/, made by
//! migrations/fixtures/make-v1.sh with the code that wrote them): each holds
//! exactly what its files say, byte for byte; this build refuses to open
//! it until it is migrated; and a migrated copy holds every inode, edge
//! and dictionary entry it held, its log byte for byte, replays into the
//! same index, and takes what format 1 could not.
//!
//! `bless_v1_raw_listing` (ignored; with `TREELOG_BLESS_FIXTURES=1`) writes
//! the raw listing of a fixture instead of checking it: the script runs it
//! once, when it makes the fixture.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use treelog::store::{Store, StoreOptions, CF_EDGES, CF_INODES, CF_LOG, CF_META};
use treelog_testkit::cli;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../migrations/fixtures")
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

fn run(db: &Path, args: &[&str]) -> cli::Ran {
    cli::run(BIN, db, args)
}

fn lines(s: &str) -> Vec<Value> {
    s.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn the_v1_fixture_holds_what_format_1_wrote_and_is_refused_unmigrated() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_db("v1", dir.path());
    let want_raw = std::fs::read_to_string(fixture("v1/raw.txt")).unwrap();
    assert_eq!(
        raw_listing(&db),
        want_raw,
        "the stored bytes differ from migrations/fixtures/v1/raw.txt"
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
    let info = run(&db, &["--json", "admin", "info"]);
    assert_eq!(info.code(), 0, "{}", info.stderr);
    let info: Value = serde_json::from_str(&info.stdout).unwrap();
    assert_eq!(info["format_version"], 1);
    assert_eq!(info["needs_migration"], true);
    // A dry run reads it all and writes nothing.
    let dry = run(&db, &["--json", "admin", "migrate", "--dry-run"]);
    assert_eq!(dry.code(), 0, "{}{}", dry.stdout, dry.stderr);
    let dry: Value = serde_json::from_str(&dry.stdout).unwrap();
    assert_eq!(dry["report"]["inodes"], 13);
    assert_eq!(dry["report"]["owners"], 5);
    assert_eq!(dry["report"]["groups"], 3);
    assert_eq!(raw_listing(&db), want_raw, "the dry run wrote");
}

/// An inode of the fixture's dump as format 2 shows it: the change time
/// it gains is its modification time.
fn upgraded_inode(mut v: Value) -> Value {
    let attrs = v["inode"]["attrs"].as_object_mut().unwrap();
    let mtime = attrs["mtime_ms"].clone();
    let mut out = serde_json::Map::new();
    for (k, x) in attrs.iter() {
        out.insert(k.clone(), x.clone());
        if k == "mtime_ms" {
            out.insert("change_ms".into(), mtime.clone());
        }
    }
    *attrs = out;
    v
}

/// A schema-1 event of the fixture's dump as this build decodes it: the
/// fields schema 2 added, empty.
fn upgraded_event(ev: &Value) -> Value {
    let (kind, body) = ev.as_object().unwrap().iter().next().unwrap();
    let mut body = body.clone();
    let o = body.as_object_mut().unwrap();
    for attrs in ["attrs", "old", "new"] {
        if let Some(a) = o.get_mut(attrs) {
            let mtime = a["mtime_ms"].clone();
            a.as_object_mut().unwrap().insert("change_ms".into(), mtime);
        }
    }
    match kind.as_str() {
        "Create" | "Delete" => {
            o.insert("parent_mtime_ms".into(), Value::Null);
            o.insert("quotas".into(), serde_json::json!([]));
        }
        "Rename" => {
            o.insert("parent_mtime_ms".into(), Value::Null);
            o.insert("quotas_from".into(), serde_json::json!([]));
            o.insert("quotas_to".into(), serde_json::json!([]));
            o.insert(
                "usage".into(),
                serde_json::json!({"files": 0, "directories": 0, "symlinks": 0, "bytes": 0}),
            );
        }
        _ => {
            o.insert("quotas".into(), serde_json::json!([]));
        }
    }
    serde_json::json!({ kind.clone(): body })
}

/// Sorts JSON objects' keys (for comparing values whatever their order).
fn canonical(v: &Value) -> String {
    fn sort(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .map(|(k, x)| (k.clone(), sort(x)))
                    .collect::<BTreeMap<_, _>>()
                    .into_iter()
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(sort).collect()),
            x => x.clone(),
        }
    }
    sort(v).to_string()
}

#[test]
fn the_v1_fixture_migrates_entry_by_entry_and_its_log_replays() {
    let dir = tempfile::tempdir().unwrap();
    let db = copy_db("v1", dir.path());
    let before = raw_listing(&db);
    let m = run(&db, &["--json", "admin", "migrate"]);
    assert_eq!(m.code(), 0, "{}{}", m.stdout, m.stderr);
    let m: Value = serde_json::from_str(&m.stdout).unwrap();
    assert_eq!(m["ok"], true, "{m}");
    assert_eq!(m["report"]["from"], 1);
    assert_eq!(m["report"]["inodes"], 13);
    assert_eq!(
        m["report"]["verify"]["records"], 24,
        "the whole log replayed"
    );
    // The log is not rewritten: its records are the fixture's bytes.
    let log = |raw: &str| -> Vec<String> {
        raw.lines()
            .filter(|l| l.starts_with("log "))
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(log(&raw_listing(&db)), log(&before));

    let want = lines(&std::fs::read_to_string(fixture("v1/dump.jsonl")).unwrap());
    let dump = run(&db, &["--json", "admin", "dump"]);
    assert_eq!(dump.code(), 0, "{}", dump.stderr);
    let got = lines(&dump.stdout);
    // Every record, decoded by schema 1's rules into today's types.
    let records = |d: &[Value]| -> Vec<Value> {
        d.iter()
            .filter(|l| l.get("log").is_some())
            .cloned()
            .collect()
    };
    let (want_log, got_log) = (records(&want), records(&got));
    assert_eq!(want_log.len(), 24);
    assert_eq!(got_log.len(), want_log.len());
    for (w, g) in want_log.iter().zip(&got_log) {
        let mut w = w["log"].clone();
        let events: Vec<Value> = w["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(upgraded_event)
            .collect();
        w["events"] = Value::Array(events);
        assert_eq!(canonical(&w), canonical(&g["log"]), "record {}", w["seq"]);
    }
    // Every inode and edge, each as it was (an inode gains its change time).
    let of_cf = |d: &[Value], cf: &str| -> Vec<Value> {
        d.iter().filter(|l| l["cf"] == cf).cloned().collect()
    };
    let want_inodes: Vec<Value> = of_cf(&want, "inode")
        .into_iter()
        .map(upgraded_inode)
        .collect();
    assert_eq!(want_inodes.len(), 13);
    assert_eq!(
        of_cf(&got, "inode")
            .iter()
            .map(canonical)
            .collect::<Vec<_>>(),
        want_inodes.iter().map(canonical).collect::<Vec<_>>()
    );
    assert_eq!(of_cf(&got, "edge"), of_cf(&want, "edge"));
    // Every dictionary entry, with its id, both ways, and the counters.
    let specials: BTreeMap<(String, String), String> = of_cf(&got, "special")
        .iter()
        .map(|s| {
            (
                (
                    s["what"].as_str().unwrap().to_owned(),
                    s["key_hex"].as_str().unwrap().to_owned(),
                ),
                s["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let value_of = |what: &str, value: &str| -> Vec<&String> {
        specials
            .iter()
            .filter(|((w, _), v)| w == what && v.as_str() == value)
            .map(|(_, v)| v)
            .collect()
    };
    for (what, dict) in [("owner", "owner_dict"), ("group", "group_dict")] {
        let line = of_cf(&want, "special")
            .into_iter()
            .find(|s| s["what"] == dict)
            .unwrap();
        let names: Vec<String> = serde_json::from_str(line["value"].as_str().unwrap()).unwrap();
        for (i, n) in names.iter().enumerate() {
            let id = i + 1;
            assert_eq!(
                value_of(&format!("{what}_name"), &format!("{id} {n:?}")).len(),
                1,
                "{what} {id} {n}"
            );
            assert_eq!(
                value_of(&format!("{what}_id"), &format!("{n:?} {id}")).len(),
                1,
                "{what} {n} {id}"
            );
        }
        assert_eq!(
            value_of(&format!("{what}_count"), &names.len().to_string()).len(),
            1,
            "{what} counter"
        );
    }
    assert_eq!(value_of("next_id", "8002").len(), 1);

    // Migrating again: nothing to do.
    let again = run(&db, &["admin", "migrate"]);
    assert_eq!(again.code(), 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("at format version 2 already"),
        "{}",
        again.stdout
    );

    // What format 1 could not hold: 300 owners and groups, and the rest.
    let t = treelog::Treelog::open(&db, treelog::Options::default()).unwrap();
    for i in 0..300 {
        t.create(
            format!("/home/carol/f{i}"),
            treelog::CreateOptions {
                owner: format!("owner{i}"),
                group: format!("group{i}"),
                ..Default::default()
            },
        )
        .unwrap();
    }
    let a = t.stat("/home/carol/f299").unwrap().attrs;
    assert_eq!(
        (a.owner.as_str(), a.group.as_str()),
        ("owner299", "group299")
    );
    assert_eq!(t.stat("/data/cooked/a.bin").unwrap().attrs.owner, "alice");
    t.symlink("../cooked/a.bin", "/data/archive/l", Default::default())
        .unwrap();
    t.set_xattr("/data", "user.k", b"v", treelog::XattrFlag::Either)
        .unwrap();
    t.set_quota("/home", Some(1000), None).unwrap();
    assert_eq!(t.count("/home").unwrap().usage.files, 302);
    let report = treelog::admin::verify(t.store()).unwrap();
    assert!(report.ok(), "{report:?}");
    t.close().unwrap();
}

/// Not a test: the fixture script's tool (ignored, and a no-op without
/// `TREELOG_BLESS_FIXTURES=1`).
#[test]
#[ignore = "writes migrations/fixtures/v1/raw.txt: run by migrations/fixtures/make-v1.sh"]
fn bless_v1_raw_listing() {
    if std::env::var("TREELOG_BLESS_FIXTURES").as_deref() != Ok("1") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let db = copy_db("v1", dir.path());
    std::fs::write(fixture("v1/raw.txt"), raw_listing(&db)).unwrap();
}
