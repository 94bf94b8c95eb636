//! What format 2 added, end to end through the `treelog` binary, on a data
//! directory and through a server (the same commands, the same answers):
//! `ln -s` and `readlink`, `setfattr` and `getfattr`, `quota` with its
//! refusals (exit 14, nothing written), `count`, and parents' times.

use std::path::Path;
use treelog_testkit::cli;
use treelog_testkit_server::server;

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

/// `treelog [--server ADDR] ARGS` on `db`: (exit code, stdout, stderr).
fn run(db: &Path, server: Option<&str>, args: &[&str]) -> (i32, String, String) {
    let mut cmd = cli::command::<&str>(BIN, db, &[]);
    if let Some(s) = server {
        cmd.args(["--server", s]);
    }
    let r = cli::output(cmd.args(args));
    (r.code(), r.stdout, r.stderr)
}

fn ok(db: &Path, server: Option<&str>, args: &[&str]) -> String {
    let (code, out, err) = run(db, server, args);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
    out
}

fn json(db: &Path, server: Option<&str>, args: &[&str]) -> serde_json::Value {
    let mut a = vec!["--json"];
    a.extend_from_slice(args);
    serde_json::from_str(&ok(db, server, &a)).unwrap()
}

fn last_seq(db: &Path, server: Option<&str>) -> u64 {
    match server {
        Some(_) => json(db, server, &["admin", "status"])["applied_seq"]
            .as_u64()
            .unwrap(),
        None => json(db, None, &["admin", "info"])["last_seq"]
            .as_u64()
            .unwrap(),
    }
}

/// The whole surface, against `server` when given.
fn exercise(db: &Path, server: Option<&str>) {
    ok(db, server, &["mkdir", "-p", "/p/data"]);
    let before = json(db, server, &["stat", "/p/data"])["inode"]["attrs"].clone();

    // Symbolic links: made, read, listed, not followed.
    ok(db, server, &["ln", "-s", "../elsewhere/x", "/p/data/l"]);
    assert_eq!(
        ok(db, server, &["readlink", "/p/data/l"]),
        "../elsewhere/x\n"
    );
    let st = json(db, server, &["stat", "/p/data/l"]);
    assert_eq!(st["inode"]["attrs"]["kind"], "Symlink");
    assert_eq!(st["inode"]["attrs"]["size"], 14);
    let ls = ok(db, server, &["ls", "-l", "/p/data"]);
    assert!(ls.contains("lrwxrwxrwx") && ls.contains(" l@"), "{ls}");
    let (code, _, err) = run(db, server, &["touch", "/p/data/l/f"]);
    assert_eq!(code, 5, "{err}");
    let (code, _, err) = run(db, server, &["readlink", "/p/data"]);
    assert_eq!(code, 8, "{err}");
    let (code, _, _) = run(db, server, &["ln", "/a", "/b"]);
    assert_eq!(code, 2, "ln without -s is a usage error");
    // The parent's times moved with the new entry.
    let after = json(db, server, &["stat", "/p/data"])["inode"]["attrs"].clone();
    assert!(after["mtime_ms"].as_u64() > before["mtime_ms"].as_u64());
    assert_eq!(after["mtime_ms"], after["change_ms"]);

    // Extended attributes.
    ok(db, server, &["touch", "/p/data/f"]);
    ok(
        db,
        server,
        &[
            "setfattr",
            "-n",
            "user.note",
            "-v",
            "hello \"x\"",
            "/p/data/f",
        ],
    );
    ok(
        db,
        server,
        &["setfattr", "-n", "user.bin", "-v", "0x00ff41", "/p/data/f"],
    );
    let got = ok(db, server, &["getfattr", "/p/data/f"]);
    assert_eq!(
        got,
        "# file: /p/data/f\nuser.bin=\"\\000\\377A\"\nuser.note=\"hello \\042x\\042\"\n\n"
    );
    let got = ok(
        db,
        server,
        &["getfattr", "-n", "user.bin", "-e", "hex", "/p/data/f"],
    );
    assert_eq!(got, "# file: /p/data/f\nuser.bin=0x00ff41\n\n");
    let j = json(db, server, &["getfattr", "/p/data/f"]);
    assert_eq!(j["xattrs"][0]["value_hex"], "00ff41");
    let (code, _, err) = run(db, server, &["getfattr", "-n", "user.none", "/p/data/f"]);
    assert_eq!(code, 3, "{err}");
    assert!(err.contains("No such attribute"), "{err}");
    let (code, _, err) = run(
        db,
        server,
        &[
            "setfattr",
            "--create",
            "-n",
            "user.bin",
            "-v",
            "1",
            "/p/data/f",
        ],
    );
    assert_eq!(code, 4, "{err}");
    assert!(err.contains("Attribute exists"), "{err}");
    let (code, _, err) = run(
        db,
        server,
        &["setfattr", "-n", "bad", "-v", "1", "/p/data/f"],
    );
    assert_eq!(code, 8, "{err}");
    ok(db, server, &["setfattr", "-x", "user.bin", "/p/data/f"]);
    let got = ok(db, server, &["getfattr", "--names-only", "/p/data/f"]);
    assert_eq!(got, "# file: /p/data/f\nuser.note\n\n");

    // Quotas: counted, refused past a limit with exit 14 and no record.
    ok(db, server, &["complete", "/p/data/f", "100"]);
    ok(
        db,
        server,
        &["quota", "set", "/p", "--inodes", "4", "--bytes", "1K"],
    );
    let q = json(db, server, &["quota", "show", "/p"]);
    assert_eq!(q["quota"]["limit_inodes"], 4);
    assert_eq!(q["quota"]["limit_bytes"], 1024);
    assert_eq!(
        q["quota"]["usage"],
        serde_json::json!({"files": 1, "directories": 1, "symlinks": 1, "bytes": 100})
    );
    ok(db, server, &["touch", "/p/data/g"]);
    let seq = last_seq(db, server);
    let (code, _, err) = run(db, server, &["mkdir", "/p/data/d"]);
    assert_eq!(code, 14, "{err}");
    assert!(
        err.contains("quota exceeded") && err.contains("/p allows 4 inodes"),
        "{err}"
    );
    assert_eq!(last_seq(db, server), seq, "the refused write wrote nothing");
    let (code, out, _) = run(db, server, &["--json", "setsize", "/p/data/g", "2000"]);
    assert_eq!(code, 14);
    assert!(out.contains("\"error\":\"quota_exceeded\""), "{out}");
    let shown = ok(db, server, &["quota", "show", "/p"]);
    assert!(shown.contains("inodes:        4 used of 4"), "{shown}");
    // `count`: dirs, files, links, bytes, the path included (du -s).
    let c = json(db, server, &["count", "/p"]);
    assert_eq!(
        c["summary"]["usage"],
        serde_json::json!({"files": 2, "directories": 2, "symlinks": 1, "bytes": 100})
    );
    let line = ok(db, server, &["count", "-q", "/p", "/p/data/f"]);
    let rows: Vec<Vec<&str>> = line
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows[0],
        ["4", "0", "1024", "924", "2", "2", "1", "100", "/p"]
    );
    assert_eq!(
        rows[1],
        [
            "none",
            "inf",
            "none",
            "inf",
            "0",
            "1",
            "0",
            "100",
            "/p/data/f"
        ]
    );
    ok(db, server, &["quota", "clear", "/p"]);
    ok(db, server, &["mkdir", "/p/data/d"]);
    assert_eq!(ok(db, server, &["quota", "show", "/p"]), "/p: no quota\n");
    // Removals move the parent's times too; the index is a replay of the log.
    ok(db, server, &["rm", "/p/data/l"]);
    let (code, _, _) = run(db, server, &["readlink", "/p/data/l"]);
    assert_eq!(code, 3);
}

#[test]
fn format_2_commands_on_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    exercise(&db, None);
    let v = ok(&db, None, &["admin", "verify"]);
    assert!(v.contains("OK"), "{v}");
    // The log shows them.
    let dump = ok(&db, None, &["admin", "dump", "--log"]);
    for needle in [
        "symlink /p/data/l -> ../elsewhere/x",
        "set_xattr /p/data/f id=",
        "remove_xattr /p/data/f id=",
        "set_quota /p id=2 inodes 4 bytes 1024 (usage: 3 inodes, 100 bytes)",
        "clear_quota /p id=2",
    ] {
        assert!(dump.contains(needle), "{needle}: {dump}");
    }
    let kinds = ok(
        &db,
        None,
        &[
            "--json",
            "tail",
            "--from",
            "1",
            "--kinds",
            "symlink,set_quota",
        ],
    );
    assert_eq!(
        kinds.lines().filter(|l| l.contains("\"Record\"")).count(),
        2,
        "{kinds}"
    );
}

#[test]
fn format_2_commands_through_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let h = rt.block_on(server::start(&db, |_| {}));
    let addr = h.bound.rpc.to_string();
    exercise(&db, Some(&addr));
    // The wire carries the typed error.
    let c = rt.block_on(server::client(&h));
    rt.block_on(c.set_quota("/p", Some(0), None)).unwrap();
    let e = rt.block_on(c.symlink("t", "/p/x")).unwrap_err();
    assert_eq!(e.kind(), treelog::ErrorKind::QuotaExceeded, "{e}");
    assert_eq!(
        rt.block_on(c.count("/p"))
            .unwrap()
            .quota
            .unwrap()
            .limit_inodes,
        Some(0)
    );
    rt.block_on(h.shutdown()).unwrap();
}
