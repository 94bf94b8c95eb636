//! `treelog import` keeps every kind a namespace holds (symbolic links,
//! extended attributes, hard-linked files as files of their own), and
//! `treelog dump` / `treelog load` round-trip a subtree exactly.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use treelog_testkit::cli::{run, Ran};

fn ok(db: &Path, args: &[&str]) -> String {
    let r = treelog(db, args);
    assert_eq!(r.code(), 0, "{args:?}: {}{}", r.stdout, r.stderr);
    r.stdout
}

fn treelog(db: &Path, args: &[&str]) -> Ran {
    run(env!("CARGO_BIN_EXE_treelog"), db, args)
}

fn set_mtime(p: &Path, secs: i64) {
    let c = std::ffi::CString::new(p.to_str().unwrap()).unwrap();
    let times = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: a valid C string and two timespecs; AT_SYMLINK_NOFOLLOW
    // sets a link's own time.
    let rc = unsafe {
        libc::utimensat(
            libc::AT_FDCWD,
            c.as_ptr(),
            times.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    assert_eq!(rc, 0, "utimensat {}", p.display());
}

fn json(s: &str) -> serde_json::Value {
    serde_json::from_str(s).unwrap_or_else(|e| panic!("{e}: {s}"))
}

/// A tree with every kind: directories, files, a hard-linked file, links
/// (relative, absolute, dangling), extended attributes (one with a value
/// that is not text), and a FIFO.
fn source(root: &Path) {
    std::fs::create_dir_all(root.join("d/e")).unwrap();
    std::fs::write(root.join("d/f"), b"12345").unwrap();
    std::fs::write(root.join("a"), b"x").unwrap();
    std::fs::hard_link(root.join("a"), root.join("d/a-again")).unwrap();
    std::os::unix::fs::symlink("../a", root.join("d/rel")).unwrap();
    std::os::unix::fs::symlink("/nowhere/at all", root.join("dangling")).unwrap();
    xattr::set(root.join("d/f"), "user.checksum", b"sha256:9f2c").unwrap();
    xattr::set(root.join("d/f"), "user.bin", &[0, 159, 255, 10]).unwrap();
    xattr::set(root.join("d"), "user.owner-team", b"ml").unwrap();
    let fifo = std::ffi::CString::new(root.join("pipe").to_str().unwrap()).unwrap();
    // SAFETY: a valid C string.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    std::fs::set_permissions(root.join("d/e"), std::fs::Permissions::from_mode(0o750)).unwrap();
    set_mtime(&root.join("d/rel"), 1_500_000_000);
    set_mtime(&root.join("dangling"), 1_500_000_001);
    set_mtime(&root.join("d/e"), 1_400_000_000);
    set_mtime(&root.join("d"), 1_400_000_001);
}

#[test]
fn import_keeps_links_attributes_and_counts_hard_links() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    source(&src);
    let db = dir.path().join("db");
    let r = treelog(&db, &["--json", "import", src.to_str().unwrap(), "/m"]);
    // The FIFO is skipped, not failed.
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    let v = json(&r.stdout);
    assert_eq!(v["directories"], 2, "{v}");
    assert_eq!(v["files"], 3, "{v}");
    assert_eq!(v["symlinks"], 2, "{v}");
    assert_eq!(v["hard_links"], 1, "{v}");
    assert_eq!(v["xattrs"], 3, "{v}");
    assert_eq!(v["skipped"]["other"], 1, "{v}");
    assert!(r.stderr.contains("1 files had a hard link"), "{}", r.stderr);

    assert_eq!(ok(&db, &["readlink", "/m/d/rel"]).trim_end(), "../a");
    assert_eq!(
        ok(&db, &["readlink", "/m/dangling"]).trim_end(),
        "/nowhere/at all"
    );
    // Both names of the hard-linked file are files of their own.
    for p in ["/m/a", "/m/d/a-again"] {
        let st = json(&ok(&db, &["stat", p, "--json"]));
        assert_eq!(st["inode"]["attrs"]["size"], 1, "{p}: {st}");
    }
    // Values byte for byte (hex shows the one that is not text).
    let got = ok(&db, &["getfattr", "-n", "user.bin", "-e", "hex", "/m/d/f"]);
    assert!(got.contains("user.bin=0x009fff0a"), "{got}");
    let got = ok(&db, &["getfattr", "/m/d/f"]);
    assert!(got.contains("user.checksum=\"sha256:9f2c\""), "{got}");
    let got = ok(&db, &["getfattr", "/m/d"]);
    assert!(got.contains("user.owner-team=\"ml\""), "{got}");
    // Times: a link's own, and directories' once their entries were in.
    let mtime =
        |p: &str| json(&ok(&db, &["stat", p, "--json"]))["inode"]["attrs"]["mtime_ms"].clone();
    assert_eq!(mtime("/m/d/rel"), 1_500_000_000_000u64);
    assert_eq!(mtime("/m/dangling"), 1_500_000_001_000u64);
    assert_eq!(mtime("/m/d/e"), 1_400_000_000_000u64);
    assert_eq!(mtime("/m/d"), 1_400_000_001_000u64);
    let st = json(&ok(&db, &["stat", "/m/d/e", "--json"]));
    assert_eq!(st["inode"]["attrs"]["mode"], 0o750);

    // Without attributes when asked.
    let r = treelog(
        &db,
        &[
            "--json",
            "import",
            "--no-xattrs",
            src.to_str().unwrap(),
            "/n",
        ],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(json(&r.stdout)["xattrs"], 0);
    assert_eq!(ok(&db, &["getfattr", "/n/d/f"]).trim(), "");
}

/// A dump's entry lines (header and end line apart).
fn entries(dump: &str) -> Vec<serde_json::Value> {
    let lines: Vec<_> = dump.lines().map(json).collect();
    assert!(lines.len() >= 3, "{dump}");
    assert_eq!(lines[0]["treelog_dump"], 1, "{dump}");
    let end = lines.last().unwrap();
    assert_eq!(end["end"], true);
    assert_eq!(end["entries"], (lines.len() - 2) as u64);
    lines[1..lines.len() - 1].to_vec()
}

#[test]
fn dump_and_load_round_trip_a_subtree_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src");
    source(&src);
    let db = dir.path().join("db");
    ok(&db, &["import", src.to_str().unwrap(), "/m"]);
    // Kinds import does not make: an incomplete file with a size, a big
    // directory (several listing pages), a mode and owner of its own.
    ok(&db, &["touch", "/m/d/e/partial"]);
    ok(&db, &["setsize", "/m/d/e/partial", "77"]);
    ok(&db, &["chmod", "1777", "/m/d/e"]);
    ok(&db, &["mkdir", "-p", "/m/big"]);
    let names: Vec<String> = (0..2500).map(|i| format!("/m/big/f{i:05}")).collect();
    for chunk in names.chunks(500) {
        let mut args = vec!["touch"];
        args.extend(chunk.iter().map(String::as_str));
        ok(&db, &args);
    }

    let first = ok(&db, &["dump", "/m"]);
    let want = entries(&first);
    assert_eq!(want.len(), 1 + 2 + 3 + 2 + 1 + 1 + 2500, "{}", want.len());
    assert_eq!(want[0]["path"], "");
    // Depth first, a directory before its entries, names in order.
    let paths: Vec<&str> = want.iter().map(|e| e["path"].as_str().unwrap()).collect();
    let pos = |p: &str| paths.iter().position(|x| *x == p).unwrap();
    assert!(
        pos("d") < pos("d/e") && pos("d/e") < pos("d/e/partial") && pos("d/e/partial") < pos("d/f")
    );
    assert!(pos("big") < pos("big/f00000") && pos("big/f02499") < pos("d"));
    let f = &want[pos("d/f")];
    assert_eq!(f["xattrs"]["user.bin"], "009fff0a", "{f}");
    assert_eq!(want[pos("d/e/partial")]["complete"], false);
    assert_eq!(want[pos("d/e/partial")]["size"], 77);

    // Into another place, through a file and through standard input.
    let file = dir.path().join("m.jsonl");
    ok(&db, &["dump", "/m", "-o", file.to_str().unwrap()]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), first);
    let r = treelog(
        &db,
        &["--json", "load", file.to_str().unwrap(), "/copy/of/m"],
    );
    assert_eq!(r.code(), 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(json(&r.stdout)["loaded"], want.len() as u64);
    assert_eq!(entries(&ok(&db, &["dump", "/copy/of/m"])), want);

    let out = std::process::Command::new(env!("CARGO_BIN_EXE_treelog"))
        .args(["--data", db.to_str().unwrap(), "load", "-", "/stdin"])
        .stdin(std::fs::File::open(&file).unwrap())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(entries(&ok(&db, &["dump", "/stdin"])), want);
}

#[test]
fn a_damaged_dump_is_refused_before_anything_is_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&db, &["mkdir", "-p", "/m/a/b"]);
    ok(&db, &["touch", "/m/a/f"]);
    let dump = ok(&db, &["dump", "/m"]);
    let last_seq = || {
        json(&ok(&db, &["admin", "info", "--json"]))["last_seq"]
            .as_u64()
            .unwrap()
    };
    let before = last_seq();
    let lines: Vec<&str> = dump.lines().collect();
    let cases = [
        ("truncated", lines[..lines.len() - 1].join("\n")),
        (
            "an entry lost",
            [&lines[..2], &lines[3..]].concat().join("\n"),
        ),
        (
            "a bad line",
            [&lines[..2], &["{\"path\":"], &lines[2..]]
                .concat()
                .join("\n"),
        ),
        ("not a dump", "hello\n".to_owned()),
        (
            "a path that climbs",
            dump.replace("\"path\":\"a\"", "\"path\":\"../a\""),
        ),
        (
            "bad hex",
            dump.replace(
                "\"path\":\"a/f\"",
                "\"path\":\"a/f\",\"xattrs\":{\"user.x\":\"zz\"}",
            ),
        ),
    ];
    for (what, text) in cases {
        let file = dir.path().join("bad.jsonl");
        std::fs::write(&file, text + "\n").unwrap();
        let r = treelog(&db, &["load", file.to_str().unwrap(), "/copy"]);
        assert_ne!(r.code(), 0, "{what}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("dump"), "{what}: {}", r.stderr);
        assert_eq!(last_seq(), before, "{what}: something was written");
    }
}
