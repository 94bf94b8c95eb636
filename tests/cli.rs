//! The `treelog` binary: commands, JSON output, exit codes, admin tools.

use std::process::Command;

fn treelog(data: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_treelog"))
        .arg("--data")
        .arg(data)
        .args(args)
        .output()
        .expect("run treelog");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn commands_json_and_exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let ok = |args: &[&str]| {
        let (code, out, err) = treelog(&db, args);
        assert_eq!(code, 0, "{args:?}: {out}{err}");
        out
    };
    ok(&["mkdir", "-p", "/a/b", "--owner", "alice", "--group", "ml"]);
    ok(&["touch", "/a/b/f"]);
    ok(&["complete", "/a/b/f", "42"]);
    ok(&["chmod", "600", "/a/b/f"]);
    ok(&["chown", "bob:ops", "/a/b/f"]);
    ok(&["mv", "/a/b/f", "/a/g"]);
    ok(&["setsize", "/a/g", "7"]);
    let v: serde_json::Value = serde_json::from_str(&ok(&["stat", "/a/g", "--json"])).unwrap();
    assert_eq!(v["inode"]["attrs"]["size"], 7);
    assert_eq!(v["inode"]["attrs"]["mode"], 0o600);
    assert_eq!(v["inode"]["attrs"]["owner"], "bob");
    assert_eq!(v["inode"]["attrs"]["complete"], true);
    let rows: serde_json::Value = serde_json::from_str(&ok(&["ls", "-R", "/", "--json"])).unwrap();
    let paths: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap())
        .collect();
    assert_eq!(paths, vec!["/a", "/a/b", "/a/g"]);
    let human = ok(&["ls", "-l", "/a"]);
    assert!(
        human.contains("-rw-------") && human.contains("bob"),
        "{human}"
    );

    // Typed failures have their own exit codes and JSON errors.
    let (code, out, _) = treelog(&db, &["stat", "/nope", "--json"]);
    assert_eq!(code, 3);
    let e: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(e["error"], "not_found");
    assert_eq!(treelog(&db, &["mkdir", "/a"]).0, 4);
    assert_eq!(treelog(&db, &["mkdir", "/a/g/x"]).0, 5);
    assert_eq!(treelog(&db, &["rm", "/a"]).0, 7);
    assert_eq!(treelog(&db, &["mkdir", "/a/.."]).0, 8);
    assert_eq!(treelog(&db, &["mv", "/a", "/a/b/c"]).0, 8);
    // Benchmarks compare durable writes only: asking for none is refused.
    let (code, _, err) = treelog(&db, &["--durability", "none", "bench", "create"]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("durable"), "{err}");
    ok(&["rm", "-r", "/a"]);

    let dump = ok(&["admin", "dump"]);
    assert!(
        dump.contains("create dir  /a id=2") && dump.contains("delete /a id=2"),
        "{dump}"
    );
    assert!(dump.contains("next_id"), "{dump}");
    let verify = ok(&["admin", "verify"]);
    assert!(verify.contains("OK"), "{verify}");
    let rebuilt = ok(&["admin", "rebuild", "--json"]);
    assert!(rebuilt.contains("\"replayed\":8"), "{rebuilt}");
    ok(&["admin", "verify"]);
}

#[test]
fn verify_detects_a_tampered_index() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    assert_eq!(treelog(&db, &["mkdir", "-p", "/x/y"]).0, 0);
    {
        // Change one inode's bytes behind treelog's back.
        let s = treelog::store::Store::open(&db, &Default::default()).unwrap();
        let cf = s.cf(treelog::store::CF_INODES).unwrap();
        let k = treelog::format::inode_key(3);
        let mut v = s.db().get_cf(cf, k).unwrap().unwrap();
        v[8] ^= 1; // size
        s.db().put_cf(cf, k, v).unwrap();
        s.flush().unwrap();
    }
    let (code, out, _) = treelog(&db, &["admin", "verify"]);
    assert_eq!(code, 12, "{out}");
    assert!(out.contains("MISMATCH"), "{out}");
    // Rebuild repairs it.
    assert_eq!(treelog(&db, &["admin", "rebuild"]).0, 0);
    assert_eq!(treelog(&db, &["admin", "verify"]).0, 0);
}
