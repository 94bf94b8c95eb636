//! Names are bytes through the command line: an argument that is not
//! UTF-8 is taken as it is, human output shows its stray bytes as a
//! shell's `$'\377'` escapes (which give the bytes back), `--json` as
//! `{"base64": …}`; `import` takes such names from a local tree, and a
//! dump loads back to the same bytes.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use treelog_testkit::cli;

fn treelog(data: &std::path::Path, args: &[&OsStr]) -> (i32, Vec<u8>, String) {
    let out = cli::command(env!("CARGO_BIN_EXE_treelog"), data, args)
        .output()
        .expect("run treelog");
    (
        out.status.code().unwrap_or(-1),
        out.stdout,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn ok(data: &std::path::Path, args: &[&[u8]]) -> Vec<u8> {
    let args: Vec<&OsStr> = args.iter().map(|a| OsStr::from_bytes(a)).collect();
    let (code, out, err) = treelog(data, &args);
    assert_eq!(code, 0, "{args:?}: {}{err}", String::from_utf8_lossy(&out));
    out
}

fn json_lines(out: &[u8]) -> Vec<serde_json::Value> {
    String::from_utf8(out.to_vec())
        .expect("JSON output is UTF-8")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn arguments_and_output_carry_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    ok(&db, &[b"mkdir", b"/q"]);
    ok(&db, &[b"touch", b"/q/bad\xff"]);
    ok(&db, &[b"mkdir", b"/q/caf\xe9"]);
    ok(&db, &[b"ln", b"-s", b"t\xfe", b"/q/l"]);

    let human = ok(&db, &[b"ls", b"/q"]);
    assert_eq!(
        String::from_utf8(human).unwrap(),
        "'bad'$'\\377'\n'caf'$'\\351'/\nl\n"
    );
    let rows: serde_json::Value =
        serde_json::from_slice(&ok(&db, &[b"ls", b"/q", b"--json"])).unwrap();
    let names: Vec<&serde_json::Value> = rows
        .as_array()
        .unwrap()
        .iter()
        .map(|r| &r["name"])
        .collect();
    assert_eq!(
        names,
        [
            &serde_json::json!({"base64": "YmFk/w=="}),
            &serde_json::json!({"base64": "Y2Fm6Q=="}),
            &serde_json::json!("l"),
        ]
    );
    // readlink prints the target raw, as readlink(1) does.
    assert_eq!(ok(&db, &[b"readlink", b"/q/l"]), b"t\xfe\n");
    ok(&db, &[b"mv", b"/q/bad\xff", b"/q/caf\xe9/"]);
    let st = json_lines(&ok(&db, &[b"stat", b"/q/caf\xe9/bad\xff", b"--json"]));
    assert_eq!(
        st[0]["path"],
        serde_json::json!({"base64": "L3EvY2Fm6S9iYWT/"})
    );

    // The change stream's JSON uses the same escape.
    let items = json_lines(&ok(
        &db,
        &[b"tail", b"--from", b"1", b"--json", b"--limit", b"5"],
    ));
    let paths: Vec<String> = items
        .iter()
        .filter_map(|i| i.get("Record"))
        .flat_map(|r| r["events"].as_array().unwrap().clone())
        .map(|e| e["event"].to_string())
        .collect();
    assert!(
        paths
            .iter()
            .any(|p| p.contains(r#"{"base64":"L3EvYmFk/w=="}"#)),
        "{paths:#?}"
    );
}

#[test]
fn import_and_dump_keep_names_that_are_not_utf8() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let src = dir.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let latin1 = src.join(OsStr::from_bytes(b"caf\xe9"));
    std::fs::create_dir(&latin1).unwrap();
    std::fs::write(latin1.join(OsStr::from_bytes(b"f\xff")), b"abc").unwrap();
    std::os::unix::fs::symlink(OsStr::from_bytes(b"f\xff"), latin1.join("l")).unwrap();

    let r = json_lines(&ok(
        &db,
        &[b"--json", b"import", src.as_os_str().as_bytes(), b"/m"],
    ));
    assert_eq!(r.last().unwrap()["failed"], 0, "{r:?}");
    let st = json_lines(&ok(&db, &[b"stat", b"/m/caf\xe9/f\xff", b"--json"]));
    assert_eq!(st[0]["inode"]["attrs"]["size"], 3);
    assert_eq!(
        ok(&db, &[b"readlink", b"/m/caf\xe9/l"]),
        b"f\xff\n".to_vec()
    );

    let dump = dir.path().join("m.jsonl");
    ok(&db, &[b"dump", b"/m", b"-o", dump.as_os_str().as_bytes()]);
    let text = std::fs::read_to_string(&dump).unwrap();
    assert!(
        text.contains(r#""path":{"base64":"Y2Fm6S9m/w=="}"#),
        "{text}"
    );
    ok(&db, &[b"load", dump.as_os_str().as_bytes(), b"/n\xfe"]);
    let again = dir.path().join("n.jsonl");
    ok(
        &db,
        &[b"dump", b"/n\xfe", b"-o", again.as_os_str().as_bytes()],
    );
    // The same entries, byte for byte (the header names the other root).
    let body = |p: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap()
            .lines()
            .skip(1)
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                if let Some(o) = v.as_object_mut() {
                    o.remove("mtime_ms");
                }
                v.to_string()
            })
            .collect()
    };
    assert_eq!(body(&dump), body(&again));
}
