//! The coreutils-shaped surface of the `treelog` binary: several operands
//! per mutating command (each on its own, failures per operand, the exit
//! code of the first failure), `ls -l` dates and human sizes, `import`.

use std::path::Path;
use std::process::Command;

fn treelog(data: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_treelog"))
        .arg("--data")
        .arg(data)
        .args(args)
        // Dates in `ls -l` are local time: make them the same everywhere.
        .env("TZ", "UTC")
        .env_remove("TIME_STYLE")
        .output()
        .expect("run treelog");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a command that must succeed; returns its standard output.
fn ok(db: &Path, args: &[&str]) -> String {
    let (code, out, err) = treelog(db, args);
    assert_eq!(code, 0, "{args:?}: {out}{err}");
    out
}

fn stat(db: &Path, path: &str) -> Option<serde_json::Value> {
    let (code, out, err) = treelog(db, &["stat", path, "--json"]);
    match code {
        0 => Some(serde_json::from_str::<serde_json::Value>(&out).unwrap()["inode"].clone()),
        3 => None,
        c => panic!("stat {path}: exit {c}: {err}"),
    }
}

fn exists(db: &Path, path: &str) -> bool {
    stat(db, path).is_some()
}

#[test]
fn mkdir_and_touch_run_every_operand() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&db, &["touch", "/file"]);

    // The middle operand fails (a file is in its way): the others are
    // created, the exit code is that of the failure (5, not a directory),
    // and the message names the operand.
    let (code, out, err) = treelog(&db, &["mkdir", "-p", "/a/b", "/file/x", "/c"]);
    assert_eq!(code, 5, "{out}{err}");
    assert!(exists(&db, "/a/b") && exists(&db, "/c"), "{out}");
    assert_eq!(
        err.trim_end(),
        "treelog: cannot create directory '/file/x': Not a directory ('/file' is not a directory)"
    );
    assert_eq!(out.lines().count(), 2, "{out}");
    assert!(
        out.contains("mkdir /a/b (seq") && out.contains("mkdir /c (seq"),
        "{out}"
    );

    // Two failures of different kinds: the first one's code (4, already
    // exists), not the second's (3, not found); both reported.
    let (code, _, err) = treelog(&db, &["mkdir", "/c", "/d", "/missing/x"]);
    assert_eq!(code, 4, "{err}");
    assert!(exists(&db, "/d"));
    assert!(
        err.contains("cannot create directory '/c': File exists")
            && err.contains(
                "cannot create directory '/missing/x': No such file or directory ('/missing' does not exist)"
            ),
        "{err}"
    );

    let (code, out, err) = treelog(&db, &["touch", "/t1", "/file", "/t2", "--mode", "600"]);
    assert_eq!(code, 4, "{out}{err}");
    assert_eq!(err.trim_end(), "treelog: cannot touch '/file': File exists");
    for p in ["/t1", "/t2"] {
        assert_eq!(stat(&db, p).unwrap()["attrs"]["mode"], 0o600, "{p}");
    }

    // JSON: one line per operand, in order, the failure's kind named.
    let (code, out, err) = treelog(&db, &["--json", "mkdir", "/j1", "/t1", "/j2"]);
    assert_eq!(code, 4, "{err}");
    assert_eq!(err, "", "with --json the failure is a JSON line");
    let lines: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0]["ok"], true);
    assert_eq!(lines[0]["path"], "/j1");
    assert_eq!(lines[1]["ok"], false);
    assert_eq!(lines[1]["path"], "/t1");
    assert_eq!(lines[1]["error"], "already_exists");
    assert_eq!(lines[2]["path"], "/j2");
    assert!(lines[2]["seq"].as_u64().unwrap() > lines[0]["seq"].as_u64().unwrap());
}

#[test]
fn rm_chmod_chown_run_every_operand() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&db, &["mkdir", "-p", "/d1/x/y", "/d2/z", "/keep"]);
    ok(&db, &["touch", "/f1", "/f2", "/keep/k"]);

    let (code, out, err) = treelog(&db, &["chmod", "640", "/f1", "/nope", "/f2"]);
    assert_eq!(code, 3, "{out}{err}");
    assert_eq!(
        err.trim_end(),
        "treelog: cannot access '/nope': No such file or directory"
    );
    for p in ["/f1", "/f2"] {
        assert_eq!(stat(&db, p).unwrap()["attrs"]["mode"], 0o640, "{p}");
    }

    let (code, out, err) = treelog(&db, &["chown", "bob:ops", "/f1", "/nope", "/f2"]);
    assert_eq!(code, 3, "{out}{err}");
    assert!(err.contains("'/nope'"), "{err}");
    for p in ["/f1", "/f2"] {
        let a = &stat(&db, p).unwrap()["attrs"];
        assert_eq!(
            (a["owner"].as_str(), a["group"].as_str()),
            (Some("bob"), Some("ops"))
        );
    }
    // An owner refused by the engine (too long) fails every operand with
    // its own code (8), and changes nothing.
    let long = "x".repeat(300);
    let (code, _, err) = treelog(&db, &["chown", &long, "/f1", "/f2"]);
    assert_eq!(code, 8, "{err}");
    assert_eq!(err.lines().count(), 2, "{err}");
    assert_eq!(stat(&db, "/f1").unwrap()["attrs"]["owner"], "bob");

    // rm without -r: the non-empty directory in the middle is refused (7),
    // the files around it go.
    let (code, _, err) = treelog(&db, &["rm", "/f1", "/keep", "/f2"]);
    assert_eq!(code, 7, "{err}");
    assert_eq!(
        err.trim_end(),
        "treelog: cannot remove '/keep': Directory not empty"
    );
    assert!(!exists(&db, "/f1") && !exists(&db, "/f2") && exists(&db, "/keep/k"));

    // rm -r with a missing operand in the middle.
    let (code, _, err) = treelog(&db, &["rm", "-r", "/d1", "/nope", "/d2"]);
    assert_eq!(code, 3, "{err}");
    assert_eq!(
        err.trim_end(),
        "treelog: cannot remove '/nope': No such file or directory"
    );
    assert!(!exists(&db, "/d1") && !exists(&db, "/d2/z"));

    // rm -f: a missing path is neither an error nor mentioned; other
    // failures still are.
    let (code, out, err) = treelog(&db, &["rm", "-f", "/nope", "/keep/k", "/nope2"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(!exists(&db, "/keep/k"));
    let (code, _, err) = treelog(&db, &["rm", "-f", "/nope", "/", "/keep"]);
    assert_eq!(code, 8, "{err}");
    assert!(err.contains("cannot remove '/'"), "{err}");
    assert!(!exists(&db, "/keep"));
    assert_eq!(treelog(&db, &["rm", "-f"]).0, 0);
    assert_eq!(treelog(&db, &["rm"]).0, 2);
}

#[test]
fn mv_into_a_directory() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&db, &["mkdir", "/dst", "/d"]);
    ok(&db, &["touch", "/a", "/b", "/dst/b"]);
    // SRC... DIR: each into DIR under its own name; the one whose name is
    // taken fails alone.
    let (code, out, err) = treelog(&db, &["mv", "/a", "/b", "/d", "/dst"]);
    assert_eq!(code, 4, "{out}{err}");
    assert_eq!(
        err.trim_end(),
        "treelog: cannot move '/b' to '/dst/b': File exists"
    );
    assert!(out.contains("rename /a -> /dst/a (seq"), "{out}");
    assert!(exists(&db, "/dst/a") && exists(&db, "/dst/d") && exists(&db, "/b"));
    // SRC DIR/: into it. SRC DST: exactly DST (an existing directory is
    // not moved into).
    ok(&db, &["mv", "/b", "/dst/d/"]);
    assert!(exists(&db, "/dst/d/b"));
    ok(&db, &["mkdir", "/e"]);
    assert_eq!(treelog(&db, &["mv", "/e", "/dst/d"]).0, 4);
    assert!(exists(&db, "/e"));
}

/// The line of `ls` output that ends with `name id=...`.
fn line_of<'a>(listing: &'a str, name: &str) -> &'a str {
    listing
        .lines()
        .find(|l| {
            l.split(" id=")
                .next()
                .is_some_and(|h| h.ends_with(&format!(" {name}")))
        })
        .unwrap_or_else(|| panic!("no line for {name} in:\n{listing}"))
}

#[test]
fn ls_long_shows_dates_and_human_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&db, &["touch", "/small", "/mid", "/big", "/tiny"]);
    for (p, size) in [
        ("/small", "1536"),
        ("/mid", "24117248"),
        ("/big", "5368709120"),
        ("/tiny", "1023"),
    ] {
        ok(&db, &["complete", p, size]);
    }
    // 2020-01-02 03:04:05.678 UTC (complete sets the time: this comes after).
    ok(
        &db,
        &[
            "touchtime",
            "1577934245678",
            "/small",
            "/mid",
            "/big",
            "/tiny",
        ],
    );

    let long_iso = ok(&db, &["ls", "-l", "--time-style=long-iso", "/"]);
    let small = line_of(&long_iso, "small");
    assert!(small.contains(" 1536 2020-01-02 03:04 small"), "{small}");
    let full = ok(&db, &["ls", "--full-time", "/"]);
    assert!(
        line_of(&full, "small").contains(" 2020-01-02 03:04:05.678000000 +0000 small"),
        "{full}"
    );
    // The default, GNU's in the POSIX locale: a year for an old time.
    let default = ok(&db, &["ls", "-l", "/"]);
    assert!(
        line_of(&default, "small").contains(" Jan  2  2020 small"),
        "{default}"
    );
    // The time zone is the local one.
    let (code, tokyo, err) = {
        let o = Command::new(env!("CARGO_BIN_EXE_treelog"))
            .args(["--data".as_ref(), db.as_os_str()])
            .args(["ls", "-l", "--time-style", "long-iso", "/"])
            .env("TZ", "Asia/Tokyo")
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    assert_eq!(code, Some(0), "{err}");
    assert!(
        line_of(&tokyo, "small").contains(" 2020-01-02 12:04 small"),
        "{tokyo}"
    );
    // +FORMAT, and a bad style is a usage error.
    let epoch = ok(&db, &["ls", "-l", "--time-style=+%s", "/"]);
    assert!(
        line_of(&epoch, "small").contains(" 1577934245 small"),
        "{epoch}"
    );
    assert_eq!(treelog(&db, &["ls", "-l", "--time-style=nope", "/"]).0, 2);

    // -h: powers of 1024, rounded up, as GNU ls -lh.
    let human = ok(&db, &["ls", "-l", "-h", "/"]);
    for (name, size) in [
        ("small", "1.5K"),
        ("mid", "23M"),
        ("big", "5.0G"),
        ("tiny", "1023"),
    ] {
        let l = line_of(&human, name);
        assert!(l.contains(&format!(" {size} Jan  2  2020 {name}")), "{l}");
    }
    // --json keeps the milliseconds and the bytes.
    let rows: serde_json::Value =
        serde_json::from_str(&ok(&db, &["ls", "-l", "-h", "/", "--json"])).unwrap();
    let small = rows
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "small")
        .unwrap();
    assert_eq!(small["inode"]["attrs"]["mtime_ms"], 1_577_934_245_678u64);
    assert_eq!(small["inode"]["attrs"]["size"], 1536);
}

/// Sets a local path's modification time (as `touch -d` would).
fn set_mtime(p: &Path, secs: i64, nsec: i64) {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(p.as_os_str().as_bytes()).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 0,
            tv_nsec: libc::UTIME_OMIT,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: nsec,
        },
    ];
    // SAFETY: a NUL-terminated path and two timespecs, as utimensat wants.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}", p.display());
}

fn id(flag: &str) -> String {
    let o = Command::new("id").arg(flag).output().unwrap();
    String::from_utf8(o.stdout).unwrap().trim().to_owned()
}

/// A local entry and what it must become: (relative path, is a directory,
/// size, mode, mtime in ms).
type Expected = Vec<(&'static str, bool, u64, u32, u64)>;

/// Builds a small real tree under `root`: nested directories, files of
/// several sizes and modes, set modification times, and a symbolic link
/// (checked apart: `Expected` lists directories and files).
fn real_tree(root: &Path) -> Expected {
    use std::os::unix::fs::PermissionsExt;
    let files: [(&str, usize, u32, i64, i64); 5] = [
        ("top.txt", 0, 0o644, 1_577_934_245, 678_901_234),
        ("d1/a.bin", 1, 0o640, 1_600_000_000, 0),
        ("d1/d2/b.bin", 5000, 0o600, 1_700_000_000, 999_999_999),
        (
            "d1/d2/d3/c.bin",
            (1 << 20) + 7,
            0o755,
            1_234_567_890,
            500_000_000,
        ),
        ("d1/with space", 42, 0o444, 1_500_000_000, 1_000_000),
    ];
    let dirs: [(&str, u32, i64); 5] = [
        ("d1", 0o755, 1_400_000_000),
        ("d1/d2", 0o750, 1_410_000_000),
        ("d1/d2/d3", 0o700, 1_420_000_000),
        ("empty", 0o711, 1_430_000_000),
        ("empty2", 0o755, 1_440_000_000),
    ];
    for (d, _, _) in dirs {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let mut want = Vec::new();
    for (f, size, mode, secs, nsec) in files {
        let p = root.join(f);
        std::fs::write(&p, vec![7u8; size]).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        set_mtime(&p, secs, nsec);
        want.push((
            f,
            false,
            size as u64,
            mode,
            (secs * 1000 + nsec / 1_000_000) as u64,
        ));
    }
    std::os::unix::fs::symlink("top.txt", root.join("link")).unwrap();
    // Directories last, deepest first: creating an entry changes its
    // directory's time.
    for (d, mode, secs) in dirs.iter().rev() {
        let p = root.join(d);
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(*mode)).unwrap();
        set_mtime(&p, *secs, 0);
        want.push((d, true, 0, *mode, (*secs * 1000) as u64));
    }
    want.sort();
    want
}

/// Every entry under `dest` as (path, inode), by `ls -R --json`.
fn listed(db: &Path, server: Option<&str>, dest: &str) -> Vec<(String, serde_json::Value)> {
    let mut args = vec!["ls", "-R", dest, "--json"];
    if let Some(s) = server {
        args.splice(0..0, ["--server", s]);
    }
    let rows: serde_json::Value = serde_json::from_str(&ok(db, &args)).unwrap();
    rows.as_array()
        .unwrap()
        .iter()
        .map(|r| (r["path"].as_str().unwrap().to_owned(), r["inode"].clone()))
        .collect()
}

fn check_mirror(got: &[(String, serde_json::Value)], dest: &str, want: &Expected) {
    let (user, group) = (id("-un"), id("-gn"));
    // Symbolic links are checked by their own tests (tests/import_kinds.rs).
    let mut got: Vec<_> = got
        .iter()
        .filter(|(_, inode)| inode["attrs"]["kind"] != "Symlink")
        .collect();
    got.sort_by(|a, b| a.0.cmp(&b.0));
    let paths: Vec<&str> = got.iter().map(|(p, _)| p.as_str()).collect();
    let want_paths: Vec<String> = want.iter().map(|w| format!("{dest}/{}", w.0)).collect();
    assert_eq!(paths, want_paths);
    for ((path, inode), (_, is_dir, size, mode, mtime)) in got.iter().zip(want) {
        let a = &inode["attrs"];
        assert_eq!(a["kind"] == "Directory", *is_dir, "{path}: {inode}");
        assert_eq!(a["mode"], *mode, "{path} mode");
        assert_eq!(a["mtime_ms"], *mtime, "{path} mtime");
        assert_eq!(a["owner"], user.as_str(), "{path} owner");
        assert_eq!(a["group"], group.as_str(), "{path} group");
        if !is_dir {
            assert_eq!(a["size"], *size, "{path} size");
            assert_eq!(a["complete"], true, "{path}");
        }
    }
}

#[test]
fn import_mirrors_a_real_tree() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let want = real_tree(&src);
    let db = dir.path().join("db");
    let src_arg = src.to_str().unwrap();

    // Into a destination whose parents do not exist yet.
    let (code, out, err) = treelog(&db, &["--json", "import", src_arg, "/m/irror"]);
    assert_eq!(code, 0, "{out}{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        (
            v["directories"].as_u64(),
            v["files"].as_u64(),
            v["failed"].as_u64()
        ),
        (Some(5), Some(5), Some(0)),
        "{v}"
    );
    assert_eq!(v["bytes"], 5000 + 1 + 42 + (1 << 20) + 7);
    assert_eq!(v["symlinks"], 1, "{v}");
    assert_eq!(
        ok(&db, &["readlink", "/m/irror/link"]).trim_end(),
        "top.txt"
    );
    assert!(!err.contains("skipped"), "{err}");
    // No progress bar when standard error is not a terminal.
    assert!(!err.contains("importing"), "{err}");
    check_mirror(&listed(&db, None, "/m/irror"), "/m/irror", &want);
    let st = stat(&db, "/m/irror/d1/d2/d3/c.bin").unwrap();
    assert_eq!(st["attrs"]["size"], (1 << 20) + 7);

    // Again into the same place: every file exists (each fails alone and
    // is counted; the first ten are printed), directories merge, the exit
    // code is that of the failures (4).
    let (code, out, err) = treelog(&db, &["import", src_arg, "/m/irror"]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(
        err.contains("treelog: import: cannot import '/m/irror/top.txt': File exists"),
        "{err}"
    );
    assert!(out.contains("6 failed"), "{out}");
    check_mirror(&listed(&db, None, "/m/irror"), "/m/irror", &want);

    // A destination that is a file: nothing is imported (mkdir -p's
    // failure, 4, as GNU's "File exists").
    let last_seq = || {
        let info: serde_json::Value =
            serde_json::from_str(&ok(&db, &["admin", "info", "--json"])).unwrap();
        info["last_seq"].as_u64().unwrap()
    };
    let before = last_seq();
    let (code, out, err) = treelog(&db, &["import", src_arg, "/m/irror/top.txt"]);
    assert_eq!(code, 4, "{out}{err}");
    assert!(err.contains("already exists: /m/irror/top.txt"), "{err}");
    assert_eq!(last_seq(), before);
    // A source that is not a directory.
    let (code, _, err) = treelog(&db, &["import", &format!("{src_arg}/top.txt"), "/x"]);
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("top.txt"), "{err}");
}

#[test]
fn import_through_a_server() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let want = real_tree(&src);
    let db = dir.path().join("db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = treelog_server::ServerConfig::new(db.clone());
    c.listen = "127.0.0.1:0".parse().unwrap();
    c.http = "127.0.0.1:0".parse().unwrap();
    let h = rt.block_on(treelog_server::start(c)).unwrap();
    let addr = h.bound.rpc.to_string();
    let (code, out, err) = treelog(
        &db,
        &["--server", &addr, "import", src.to_str().unwrap(), "/"],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("imported 11 entries"), "{out}");
    let got: Vec<_> = listed(&db, Some(&addr), "/");
    check_mirror(&got, "", &want);
    rt.block_on(h.shutdown()).unwrap();
}
