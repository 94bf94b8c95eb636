//! The `treelog` binary: commands, JSON output, exit codes, admin tools.

use std::process::Command;

use treelog_testkit::cli;

fn treelog(data: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let r = cli::run(env!("CARGO_BIN_EXE_treelog"), data, args);
    (r.code(), r.stdout, r.stderr)
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
        // With RocksDB itself, as anything else on the machine could.
        let cfs = treelog::store::ALL_CFS;
        let s = rocksdb::DB::open_cf(&rocksdb::Options::default(), &db, cfs).unwrap();
        let cf = s.cf_handle(treelog::store::CF_INODES).unwrap();
        let k = treelog::format::inode_key(3);
        let mut v = s.get_cf(cf, k).unwrap().unwrap();
        v[8] ^= 1; // size
        s.put_cf(cf, k, v).unwrap();
        s.flush_cf(cf).unwrap();
    }
    let (code, out, _) = treelog(&db, &["admin", "verify"]);
    assert_eq!(code, 12, "{out}");
    assert!(out.contains("MISMATCH"), "{out}");
    // Rebuild repairs it.
    assert_eq!(treelog(&db, &["admin", "rebuild"]).0, 0);
    assert_eq!(treelog(&db, &["admin", "verify"]).0, 0);
}

fn run_in(
    data: &std::path::Path,
    server: Option<std::net::SocketAddr>,
    args: &[&str],
) -> (i32, String, String) {
    let mut all: Vec<String> = Vec::new();
    if let Some(a) = server {
        all.extend(["--server".into(), a.to_string()]);
    }
    all.extend(args.iter().map(|s| s.to_string()));
    let refs: Vec<&str> = all.iter().map(String::as_str).collect();
    treelog(data, &refs)
}

/// Runs treelog with its standard output on a pipe, reads `lines` lines,
/// then closes the pipe and waits: returns the lines read, the exit code
/// and standard error.
fn read_then_close(
    data: &std::path::Path,
    server: Option<std::net::SocketAddr>,
    args: &[&str],
    lines: usize,
) -> (Vec<String>, i32, String) {
    use std::io::BufRead;
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_treelog"));
    cmd.arg("--data").arg(data);
    if let Some(a) = server {
        cmd.arg("--server").arg(a.to_string());
    }
    let mut child = cmd
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run treelog");
    let mut r = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut got = Vec::new();
    for _ in 0..lines {
        let mut l = String::new();
        assert!(r.read_line(&mut l).unwrap() > 0, "output ended early");
        got.push(l);
    }
    drop(r);
    let out = child.wait_with_output().unwrap();
    (
        got,
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_clean_exit(code: i32, err: &str) {
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(code, 0, "{err}");
}

/// `n` records each bigger than a pipe's buffer (64 KiB) plus a reader's
/// (8 KiB): `mkdir -p` of a 120-deep path is one record of 121 creates with
/// paths of up to 3.8 KB. A writer of such lines cannot get one whole line
/// ahead of its reader.
fn big_records(db: &std::path::Path, n: usize) {
    let t = treelog::Treelog::open(
        db,
        treelog::Options::default().durability(treelog::Durability::None),
    )
    .unwrap();
    for i in 1..=n {
        let mut p = format!("/r{i}");
        for j in 0..120 {
            p.push_str(&format!("/d{j:030}"));
        }
        assert_eq!(t.mkdir_p(&p).unwrap(), i as u64);
    }
}

fn seq_of(json_line: &str) -> u64 {
    let v: serde_json::Value = serde_json::from_str(json_line).unwrap();
    let (_, body) = v.as_object().unwrap().iter().next().unwrap();
    body["seq"].as_u64().unwrap()
}

fn acked(db: &std::path::Path, server: Option<std::net::SocketAddr>, name: &str) -> u64 {
    let (code, out, err) = run_in(db, server, &["admin", "cursors", "--json"]);
    assert_eq!(code, 0, "{err}");
    let cs: serde_json::Value = serde_json::from_str(&out).unwrap();
    cs.as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no cursor {name}: {out}"))["state"]["acked"]
        .as_u64()
        .unwrap()
}

struct Server {
    rt: tokio::runtime::Runtime,
    h: Option<treelog_server::ServerHandle>,
}

impl Server {
    fn start(db: &std::path::Path) -> Server {
        let rt = tokio::runtime::Runtime::new().unwrap();
        let mut c = treelog_server::ServerConfig::new(db.to_path_buf());
        c.listen = "127.0.0.1:0".parse().unwrap();
        c.http = "127.0.0.1:0".parse().unwrap();
        c.store = c.store.durability(treelog::Durability::None);
        let h = rt.block_on(treelog_server::start(c)).unwrap();
        Server { rt, h: Some(h) }
    }

    fn addr(&self) -> Option<std::net::SocketAddr> {
        self.h.as_ref().map(|h| h.bound.rpc)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(h) = self.h.take() {
            let _ = self.rt.block_on(h.shutdown());
        }
    }
}

#[test]
fn tail_acknowledges_only_what_it_wrote_whole() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    big_records(&db, 8);
    // The reader takes 3 lines and leaves: the 4th cannot have been
    // written whole, so the cursor must stay at 3 (it used to panic, and
    // with --follow acknowledged each record before printing it). Into a
    // pipe only with --auto-ack: by default the consumer acknowledges.
    let (lines, code, err) = read_then_close(
        &db,
        None,
        &["tail", "--cursor", "c", "--json", "--auto-ack"],
        3,
    );
    assert_clean_exit(code, &err);
    assert_eq!(
        lines.iter().map(|l| seq_of(l)).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert_eq!(acked(&db, None, "c"), 3);
    let (code, out, err) = treelog(&db, &["tail", "--cursor", "c", "--json", "--limit", "1"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(seq_of(&out), 4, "{out}");

    // The same over a server, following.
    let s = Server::start(&db);
    let (lines, code, err) = read_then_close(
        &db,
        s.addr(),
        &[
            "tail",
            "--follow",
            "--from",
            "1",
            "--cursor",
            "f",
            "--json",
            "--auto-ack",
        ],
        5,
    );
    assert_clean_exit(code, &err);
    assert_eq!(seq_of(&lines[4]), 5);
    assert_eq!(acked(&db, s.addr(), "f"), 5);
    let (code, out, err) = run_in(
        &db,
        s.addr(),
        &["tail", "--cursor", "f", "--json", "--limit", "1"],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(seq_of(&out), 6, "{out}");
}

#[test]
fn ack_command_and_no_ack() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for p in ["/a", "/b", "/c", "/d", "/e"] {
        assert_eq!(treelog(&db, &["mkdir", p]).0, 0);
    }
    // --no-ack prints but leaves the cursor where it was created.
    let (code, out, err) = treelog(
        &db,
        &[
            "tail", "--cursor", "s", "--no-ack", "--json", "--limit", "2",
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 2, "{out}");
    assert_eq!(acked(&db, None, "s"), 0);
    let (code, out, _) = treelog(&db, &["tail", "--cursor", "s", "--no-ack", "--limit", "1"]);
    assert_eq!(code, 0);
    assert!(
        out.contains("cursor s not acknowledged (--no-ack); printed up to #1"),
        "{out}"
    );
    // The script acknowledges what it processed.
    let (code, out, err) = treelog(&db, &["ack", "s", "2", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["seq"].as_u64()),
        (Some(true), Some(2))
    );
    assert_eq!(acked(&db, None, "s"), 2);
    let (_, out, _) = treelog(&db, &["tail", "--cursor", "s", "--json", "--limit", "1"]);
    assert_eq!(seq_of(&out), 3, "{out}");
    // Errors keep their exit codes: unknown cursor, beyond the log.
    assert_eq!(treelog(&db, &["ack", "nope", "1"]).0, 3);
    assert_eq!(treelog(&db, &["ack", "s", "99"]).0, 8);
    // --no-ack needs a cursor.
    assert_eq!(treelog(&db, &["tail", "--no-ack"]).0, 2);

    let s = Server::start(&db);
    let (code, out, err) = run_in(&db, s.addr(), &["ack", "s", "4"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("cursor s acknowledged #4"), "{out}");
    assert_eq!(acked(&db, s.addr(), "s"), 4);
    assert_eq!(run_in(&db, s.addr(), &["ack", "nope", "1"]).0, 3);
}

fn items(out: &str) -> Vec<serde_json::Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn kind_of(v: &serde_json::Value) -> String {
    v.as_object().unwrap().keys().next().unwrap().clone()
}

#[test]
fn tail_resync_for_subtree_consumers_resuming_from_a_position() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for args in [
        &["mkdir", "/dst"][..],       // 1
        &["mkdir", "-p", "/src/d/x"], // 2
        &["touch", "/src/d/x/f"],     // 3
        &["mv", "/src/d", "/dst/d"],  // 4: a directory moves in
        &["touch", "/dst/d/g"],       // 5
    ] {
        assert_eq!(treelog(&db, args).0, 0, "{args:?}");
    }
    let base = ["tail", "--prefix", "/dst", "--from", "2", "--json"];
    let with = |extra: &[&'static str]| {
        let mut v = base.to_vec();
        v.extend_from_slice(extra);
        v
    };
    // Without --resync: the move only, its descendants unlisted.
    let (code, out, err) = treelog(&db, &base);
    assert_eq!(code, 0, "{err}");
    let kinds: Vec<String> = items(&out).iter().map(kind_of).collect();
    assert_eq!(kinds, ["Record", "Record"], "{out}");
    // With it, local and remote: the move, then a snapshot with them.
    let check = |out: &str| {
        let its = items(out);
        let kinds: Vec<String> = its.iter().map(kind_of).collect();
        assert_eq!(kinds[..2], ["Record", "SnapshotStart"], "{out}");
        assert_eq!(its[0]["Record"]["seq"], 4);
        assert_eq!(its[1]["SnapshotStart"]["resync"], true);
        assert_eq!(kinds.last().unwrap(), "SnapshotEnd", "{out}");
        let paths: Vec<&str> = its
            .iter()
            .filter_map(|v| v.get("SnapshotEntry"))
            .map(|e| e["path"].as_str().unwrap())
            .collect();
        assert_eq!(
            paths,
            ["/dst", "/dst/d", "/dst/d/g", "/dst/d/x", "/dst/d/x/f"],
            "{out}"
        );
    };
    let (code, out, err) = treelog(&db, &with(&["--resync"]));
    assert_eq!(code, 0, "{err}");
    check(&out);

    // A cursor stopped inside the resync is not acknowledged at the move
    // (resuming after it would skip the snapshot): it stays where it was
    // created, before --from 2.
    let (code, _, err) = treelog(&db, &with(&["--resync", "--cursor", "r", "--limit", "3"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(acked(&db, None, "r"), 1);
    let (code, out, err) = treelog(
        &db,
        &[
            "tail",
            "--prefix",
            "/dst",
            "--resync",
            "--cursor",
            "r",
            "--json",
            "--auto-ack",
        ],
    );
    assert_eq!(code, 0, "{err}");
    check(&out);
    assert_eq!(acked(&db, None, "r"), 5);

    let s = Server::start(&db);
    let (code, out, err) = run_in(&db, s.addr(), &with(&["--resync"]));
    assert_eq!(code, 0, "{err}");
    check(&out);
    let (code, _, err) = run_in(
        &db,
        s.addr(),
        &with(&["--resync", "--cursor", "q", "--limit", "1"]),
    );
    assert_eq!(code, 0, "{err}");
    assert_eq!(acked(&db, s.addr(), "q"), 1);
}

#[test]
fn closed_stdout_is_a_quiet_end() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    {
        let t = treelog::Treelog::open(
            &db,
            treelog::Options::default().durability(treelog::Durability::None),
        )
        .unwrap();
        t.mkdir_p("/many").unwrap();
        for i in 0..3000 {
            t.create(format!("/many/file-{i:05}"), Default::default())
                .unwrap();
        }
    }
    // About 250 KB of lines: far more than the pipe and the reader hold.
    for (args, lines) in [
        (&["ls", "-l", "-R", "/"][..], 2),
        (&["ls", "-R", "/", "--json"], 0), // one line
        (&["tail"], 2),
        (&["tail", "--json"], 2),
        (&["admin", "dump"], 2),
    ] {
        let (_, code, err) = read_then_close(&db, None, args, lines);
        assert_clean_exit(code, &err);
    }
}

#[test]
fn names_are_quoted_for_humans_and_raw_in_json() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let ok = |args: &[&str]| {
        let (code, out, err) = treelog(&db, args);
        assert_eq!(code, 0, "{args:?}: {err}");
        out
    };
    ok(&["mkdir", "/d ir"]);
    ok(&["touch", "/d ir/a\nb"]);
    ok(&["touch", "/d ir/\x1b[31mred"]);
    ok(&["touch", "/d ir/plain"]);
    let human = ok(&["ls", "/d ir"]);
    assert_eq!(human, "''$'\\033''[31mred'\n'a'$'\\n''b'\nplain\n");
    let long = ok(&["ls", "-l", "-R", "/"]);
    assert!(long.starts_with("/:\n"), "{long}");
    assert!(
        long.contains(" 'd ir'/ id=") && long.contains("\n'/d ir':\n"),
        "{long}"
    );
    assert!(long.contains(" 'a'$'\\n''b' (incomplete) id="), "{long}");
    assert!(!long.contains('\x1b'), "{long}");
    let rows: serde_json::Value = serde_json::from_str(&ok(&["ls", "/d ir", "--json"])).unwrap();
    let names: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["\x1b[31mred", "a\nb", "plain"]);
    let tail = ok(&["tail"]);
    assert!(
        tail.contains("create file '/d ir/a'$'\\n''b' id="),
        "{tail}"
    );
    assert!(!tail.contains('\x1b'), "{tail}");
    let tail = ok(&["tail", "--json"]);
    assert!(tail.contains(r#""path":"/d ir/a\nb""#), "{tail}");
}

#[test]
fn a_corrupt_sst_exits_with_the_corruption_code() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    {
        let t = treelog::Treelog::open(
            &db,
            treelog::Options::default().durability(treelog::Durability::None),
        )
        .unwrap();
        for i in 0..2000 {
            t.mkdir_p(format!("/dir-{i:05}")).unwrap();
        }
    }
    {
        let s = treelog::store::Store::open(&db, &Default::default()).unwrap();
        s.flush().unwrap();
    }
    // Flip bytes in the first data block of every table file.
    let mut n = 0;
    for e in std::fs::read_dir(&db).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "sst") {
            let mut b = std::fs::read(&p).unwrap();
            for x in &mut b[64..96] {
                *x ^= 0x5a;
            }
            std::fs::write(&p, b).unwrap();
            n += 1;
        }
    }
    assert!(n > 0, "no table files");
    let (code, out, err) = treelog(&db, &["admin", "verify"]);
    assert_eq!(code, 10, "{out}{err}");
    assert!(err.to_lowercase().contains("corrupt"), "{err}");
}

#[test]
fn errors_about_the_data_directory_name_it() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    let db = file.join("db");
    let (code, _, err) = treelog(&db, &["ls", "/"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains(&db.display().to_string()), "{err}");
}
