//! `treelog admin backup` and `admin restore`, as a user runs them: the
//! restored data directory passes `admin verify` and lists the same tree;
//! a damaged, truncated or incomplete backup is refused with exit code 10
//! and a message naming the file, and leaves no data directory behind.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};

use common::cli::{self, Ran};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

fn run(data: &Path, args: &[&str]) -> Ran {
    cli::run(BIN, data, args)
}

fn ok(data: &Path, args: &[&str]) -> String {
    let r = run(data, args);
    assert_eq!(r.code(), 0, "treelog {args:?}: {}{}", r.stdout, r.stderr);
    r.stdout
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// A small tree built with the CLI: directories, files with owners and
/// groups, a completed file, a rename and a delete.
fn populate(data: &Path) {
    ok(
        data,
        &[
            "mkdir",
            "-p",
            "/data/in",
            "/data/out",
            "--owner",
            "alice",
            "--group",
            "ml",
        ],
    );
    let files: Vec<String> = (0..50).map(|i| format!("/data/in/f{i}")).collect();
    let mut args = vec!["touch", "--owner", "bob"];
    args.extend(files.iter().map(String::as_str));
    ok(data, &args);
    ok(data, &["complete", "/data/in/f3", "4096"]);
    ok(data, &["mv", "/data/in/f4", "/data/out/g4"]);
    ok(data, &["rm", "/data/in/f5"]);
}

fn tree(data: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(data, &["--json", "ls", "-l", "-R", "/"])).unwrap()
}

fn info(data: &Path) -> serde_json::Value {
    serde_json::from_str(&ok(data, &["--json", "admin", "info"])).unwrap()
}

#[test]
fn backup_and_restore_give_the_same_verified_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, dest, restored) = (
        tmp.path().join("data"),
        tmp.path().join("backups/today"),
        tmp.path().join("restored"),
    );
    populate(&data);
    let out: serde_json::Value =
        serde_json::from_str(&ok(&data, &["--json", "admin", "backup", s(&dest)])).unwrap();
    let seq = out["report"]["seq"].as_u64().unwrap();
    assert_eq!(seq, info(&data)["last_seq"].as_u64().unwrap());
    assert!(dest.join("treelog-backup.manifest").is_file());

    let human = ok(&data, &["admin", "restore", s(&dest), s(&restored)]);
    assert!(
        human.contains(&format!("restored sequence {seq}")),
        "{human}"
    );
    let i = info(&restored);
    assert_eq!(
        (i["applied_seq"].as_u64(), i["last_seq"].as_u64()),
        (Some(seq), Some(seq))
    );
    let v = ok(&restored, &["admin", "verify"]);
    assert!(v.contains("OK"), "{v}");
    assert_eq!(tree(&restored), tree(&data));

    // The restored directory is an ordinary one: it takes writes.
    ok(&restored, &["mkdir", "/later"]);
    assert_eq!(
        info(&restored)["last_seq"].as_u64(),
        Some(seq + 1),
        "the sequence continues"
    );
}

/// A copy of the backup at `dest`, to damage.
fn copy_backup(dest: &Path, to: &Path) -> PathBuf {
    let st = std::process::Command::new("cp")
        .arg("-a")
        .arg(dest)
        .arg(to)
        .status()
        .unwrap();
    assert!(st.success());
    to.to_owned()
}

fn biggest_sst(backup: &Path) -> PathBuf {
    std::fs::read_dir(backup.join("db"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("an sst in the backup")
}

/// `admin restore SRC NEW` fails with exit code 10, names `file`, and
/// makes nothing at NEW.
fn refused(src: &Path, file: &Path, tmp: &Path) -> String {
    let new = tmp.join("never");
    let r = run(tmp, &["admin", "restore", s(src), s(&new)]);
    assert_eq!(r.code(), 10, "{r:?}");
    assert!(
        r.stderr.contains(s(file)),
        "does not name {file:?}: {}",
        r.stderr
    );
    assert!(!new.exists());
    let json = run(tmp, &["--json", "admin", "restore", s(src), s(&new)]);
    let e: serde_json::Value = serde_json::from_str(&json.stdout).unwrap();
    assert_eq!(e["error"], "corruption", "{json:?}");
    r.stderr
}

#[test]
fn damaged_backups_are_refused_with_exit_10_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, dest) = (tmp.path().join("data"), tmp.path().join("b"));
    populate(&data);
    ok(&data, &["admin", "backup", s(&dest)]);

    // A flipped byte in a table file.
    let b = copy_backup(&dest, &tmp.path().join("flipped"));
    let sst = biggest_sst(&b);
    let mut bytes = std::fs::read(&sst).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x01;
    std::fs::write(&sst, &bytes).unwrap();
    let err = refused(&b, &sst, tmp.path());
    assert!(err.contains("damaged"), "{err}");

    // A truncated table file.
    let b = copy_backup(&dest, &tmp.path().join("truncated"));
    let sst = biggest_sst(&b);
    let len = std::fs::metadata(&sst).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&sst)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = refused(&b, &sst, tmp.path());
    assert!(err.contains("truncated"), "{err}");

    // A missing file (the MANIFEST of the RocksDB database).
    let b = copy_backup(&dest, &tmp.path().join("missing"));
    let manifest = std::fs::read_dir(b.join("db"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("MANIFEST-")
        })
        .unwrap();
    std::fs::remove_file(&manifest).unwrap();
    refused(&b, &manifest, tmp.path());

    // No manifest: an incomplete backup.
    let b = copy_backup(&dest, &tmp.path().join("nomanifest"));
    let mf = b.join("treelog-backup.manifest");
    std::fs::remove_file(&mf).unwrap();
    let err = refused(&b, &mf, tmp.path());
    assert!(err.contains("not a complete treelog backup"), "{err}");

    // A truncated manifest.
    let b = copy_backup(&dest, &tmp.path().join("shortmanifest"));
    let mf = b.join("treelog-backup.manifest");
    let m = std::fs::read(&mf).unwrap();
    std::fs::write(&mf, &m[..m.len() - 10]).unwrap();
    refused(&b, &mf, tmp.path());

    // An edited manifest (its checksum line no longer matches).
    let b = copy_backup(&dest, &tmp.path().join("edited"));
    let mf = b.join("treelog-backup.manifest");
    let m = std::fs::read_to_string(&mf).unwrap();
    std::fs::write(&mf, m.replacen("\"inodes\": ", "\"inodes\": 1", 1)).unwrap();
    let err = refused(&b, &mf, tmp.path());
    assert!(err.contains("SHA-256"), "{err}");

    // The intact backup still restores; not over a non-empty directory,
    // nor into an existing backup.
    let target = tmp.path().join("target");
    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join("something"), b"x").unwrap();
    let r = run(tmp.path(), &["admin", "restore", s(&dest), s(&target)]);
    assert_eq!(r.code(), 4, "{r:?}");
    assert!(r.stderr.contains("not empty"), "{}", r.stderr);
    std::fs::remove_file(target.join("something")).unwrap();
    ok(tmp.path(), &["admin", "restore", s(&dest), s(&target)]);
    ok(&target, &["admin", "verify"]);
    let r = run(&data, &["admin", "backup", s(&dest)]);
    assert_eq!(r.code(), 4, "{r:?}");

    // A backup of a directory with no database makes nothing.
    let r = run(
        &tmp.path().join("nothing"),
        &["admin", "backup", s(&tmp.path().join("b2"))],
    );
    assert_eq!(r.code(), 10, "{r:?}");
    assert!(!tmp.path().join("nothing").exists());
    assert!(!tmp.path().join("b2").exists());
}

/// Crash points (the `failpoints` feature): a backup or a restore killed at
/// each step leaves no backup and no data directory under the names asked
/// for, and a source that opens and verifies; the next attempt succeeds
/// (and removes the checkpoint the killed process left in the data
/// directory).
#[cfg(feature = "failpoints")]
#[test]
fn backups_and_restores_killed_at_each_step_leave_nothing_half_made() {
    use std::os::unix::process::ExitStatusExt;

    let killed = |args: &[&str], data: &Path, point: &str| {
        let out =
            cli::output(cli::command(BIN, data, args).env("FAILPOINTS", format!("{point}=return")));
        assert_eq!(
            out.status.signal(),
            Some(9),
            "{args:?} did not reach the crash point {point}: {out:?}"
        );
    };
    let checkpoints = |data: &Path| -> Vec<String> {
        std::fs::read_dir(data)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(".treelog-checkpoint-"))
            .collect()
    };
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    populate(&data);
    for point in ["backup::after_checkpoint", "backup::before_install"] {
        let dest = tmp.path().join(point.replace("::", "-"));
        killed(&["admin", "backup", s(&dest)], &data, point);
        assert!(!dest.exists(), "{point}: {dest:?} was made");
        ok(&data, &["admin", "verify"]);
        if point == "backup::after_checkpoint" {
            assert_eq!(checkpoints(&data).len(), 1, "{point}");
        }
        ok(&data, &["admin", "backup", s(&dest)]);
        assert!(checkpoints(&data).is_empty(), "{point}");
    }

    let src = tmp.path().join("backup-before_install");
    let new = tmp.path().join("restored");
    killed(
        &["admin", "restore", s(&src), s(&new)],
        tmp.path(),
        "restore::before_install",
    );
    assert!(!new.exists());
    ok(tmp.path(), &["admin", "restore", s(&src), s(&new)]);
    ok(&new, &["admin", "verify"]);
    assert_eq!(tree(&new), tree(&data));
}
