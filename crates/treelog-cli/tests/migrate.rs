//! `treelog admin migrate` against real processes and real files: killed
//! with SIGKILL at random moments and at each of its steps on a format-1
//! namespace of 100,101 inodes, it leaves either the old format intact or
//! a migration the next run finishes, never a half-migrated database that
//! opens; the finished database is byte for byte what an uninterrupted
//! migration makes, and `admin verify` passes. Also: a database another
//! process holds is refused, and `serve --migrate`.
//!
//! The kill loop runs a few rounds in CI; `TREELOG_KILL_ROUNDS=100` runs
//! more by hand (`TREELOG_TEST_SEED` replays a run's kill points).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use treelog::format::meta::{Migration, FORMAT_VERSION_KEY, MIGRATION_KEY};
use treelog::migrate::{write_format1, Format1Spec};
use treelog::store::{Store, StoreOptions};
use treelog::{admin, ErrorKind, Options, Treelog};
use treelog_testkit::{cli, rounds, Rng};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

/// 100 directories of 1,000 files: 100,101 inodes with the root.
fn spec() -> Format1Spec {
    Format1Spec {
        dirs: 100,
        files_per_dir: 1000,
        owners: 200,
        groups: 50,
        start_ms: 1_700_000_000_000,
    }
}

fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        if e.file_name() != "LOCK" {
            std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
        }
    }
}

fn so() -> StoreOptions {
    StoreOptions {
        create_if_missing: false,
        ..Default::default()
    }
}

/// The database's format version, migration marker and index digest, read
/// as it is (nothing replayed or written).
fn state(data: &Path) -> (u64, Option<Migration>, String) {
    let s = Store::open_unmigrated(data, &so()).unwrap();
    let v = s.meta_u64(FORMAT_VERSION_KEY).unwrap().unwrap();
    let m = s
        .get_meta(MIGRATION_KEY)
        .unwrap()
        .map(|b| Migration::decode(&b).unwrap());
    (v, m, admin::index_digest(&s).unwrap())
}

fn kill_during(data: &Path, args: &[&str], after: Duration) -> bool {
    cli::kill_during(BIN, data, args, after)
}

/// A format-1 namespace, and the digest an uninterrupted migration of it
/// gives, and how long that migration takes.
struct Fixture {
    _dir: tempfile::TempDir,
    v1: PathBuf,
    v1_digest: String,
    migrated_digest: String,
    span: Duration,
}

fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let v1 = dir.path().join("v1");
    assert_eq!(write_format1(&v1, &spec()).unwrap(), 100_101);
    let (v, m, v1_digest) = state(&v1);
    assert_eq!((v, m), (1, None));
    let reference = dir.path().join("reference");
    copy_dir(&v1, &reference);
    let t = Instant::now();
    let r = cli::run(BIN, &reference, &["admin", "migrate", "--no-verify"]);
    let span = t.elapsed();
    assert!(r.status.success(), "{}{}", r.stdout, r.stderr);
    let (v, m, migrated_digest) = state(&reference);
    assert_eq!((v, m), (2, None));
    Fixture {
        _dir: dir,
        v1,
        v1_digest,
        migrated_digest,
        span,
    }
}

/// What a kill left: the old format intact, a marker to resume from, or
/// the migration done, each checked. Returns which.
fn check_after_kill(f: &Fixture, data: &Path, what: &str) -> &'static str {
    let (v, m, digest) = state(data);
    match (v, m) {
        (1, None) => {
            assert_eq!(digest, f.v1_digest, "{what}: format 1, but not intact");
            "intact"
        }
        (2, Some(m)) => {
            assert_eq!((m.from, m.to), (1, 2), "{what}");
            let e = Treelog::open(data, Options::default())
                .err()
                .unwrap_or_else(|| panic!("{what}: a half-migrated database opened"));
            assert_eq!(e.kind(), ErrorKind::Incompatible, "{what}: {e}");
            assert!(e.to_string().contains("admin migrate"), "{what}: {e}");
            "resumable"
        }
        (2, None) => {
            assert_eq!(
                digest, f.migrated_digest,
                "{what}: migrated, but not as it should be"
            );
            "migrated"
        }
        other => panic!("{what}: {other:?}"),
    }
}

/// `admin migrate` on the database as the kills left it: it finishes, and
/// the result verifies and equals the uninterrupted migration.
fn finish_and_check(f: &Fixture, data: &Path, what: &str) {
    let r = cli::run(BIN, data, &["admin", "migrate"]);
    assert!(r.status.success(), "{what}: {}{}", r.stdout, r.stderr);
    let (v, m, digest) = state(data);
    assert_eq!((v, m), (2, None), "{what}");
    assert_eq!(digest, f.migrated_digest, "{what}");
    // A migration that ran verified itself (exit 12 otherwise); one that
    // found nothing to do did not.
    if r.stdout.contains("already") {
        let verify = cli::run(BIN, data, &["admin", "verify"]);
        assert!(verify.status.success(), "{what}: {}", verify.stdout);
    } else {
        assert!(
            r.stdout.contains("OK: the index equals a replay"),
            "{what}: {}",
            r.stdout
        );
    }
}

#[test]
fn migrate_killed_at_random_moments_leaves_the_old_format_or_a_resumable_one() {
    let f = fixture();
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    copy_dir(&f.v1, &data);
    let mut rng = Rng::new();
    let mut seen = std::collections::BTreeMap::new();
    for round in 0..rounds(6) {
        let at = Duration::from_micros(rng.below(f.span.as_micros() as u64 + 1));
        kill_during(&data, &["admin", "migrate", "--no-verify"], at);
        let what = format!("round {round}, killed at {at:?}");
        let left = check_after_kill(&f, &data, &what);
        *seen.entry(left).or_insert(0) += 1;
        if left == "migrated" {
            // Done: kill the next rounds in a migration from the start.
            copy_dir(&f.v1, &data);
        }
    }
    eprintln!(
        "migration of {} inodes ({:?} uninterrupted) killed {} times: {seen:?}",
        100_101,
        f.span,
        rounds(6)
    );
    finish_and_check(&f, &data, "after the kills");
}

#[test]
fn a_database_another_process_holds_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    write_format1(
        &data,
        &Format1Spec {
            dirs: 2,
            files_per_dir: 2,
            ..spec()
        },
    )
    .unwrap();
    let (.., before) = state(&data);
    {
        // This process holds RocksDB's lock, as a server would.
        let _held = Store::open_unmigrated(&data, &so()).unwrap();
        let r = cli::run(BIN, &data, &["admin", "migrate"]);
        assert_eq!(r.code(), 1, "{}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains("open in another process"), "{}", r.stderr);
    }
    let (v, m, after) = state(&data);
    assert_eq!((v, m, after), (1, None, before), "nothing was changed");
    let r = cli::run(BIN, &data, &["admin", "migrate"]);
    assert!(r.status.success(), "{}{}", r.stdout, r.stderr);
    let r = cli::run(BIN, &data, &["admin", "migrate", "--to", "3"]);
    assert_eq!(r.code(), 8, "{}", r.stderr);
}

#[test]
fn serve_migrates_when_asked_and_refuses_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    write_format1(
        &data,
        &Format1Spec {
            dirs: 3,
            files_per_dir: 5,
            ..spec()
        },
    )
    .unwrap();
    let serve = ["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"];
    let refused = cli::run(BIN, &data, &serve);
    assert_eq!(refused.code(), 10, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("admin migrate"),
        "{}",
        refused.stderr
    );
    let mut child = cli::command(BIN, &data, &serve)
        .arg("--migrate")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let rpc = cli::ready_rpc(&mut child);
    let server = rpc.to_string();
    let stat = cli::output(
        cli::command(
            BIN,
            &data,
            &["--server", &server, "--json", "stat", "/d2/f4"],
        )
        .env_remove("TREELOG_DATA"),
    );
    let _ = child.kill();
    child.wait().unwrap();
    assert!(stat.status.success(), "{}", stat.stderr);
    let v: serde_json::Value = serde_json::from_str(&stat.stdout).unwrap();
    assert_eq!(v["inode"]["attrs"]["kind"], "File");
    assert_eq!(state(&data).0, 2);
}

#[cfg(feature = "failpoints")]
mod crash_points {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// Every step of a migration, crashed: the same three outcomes, and
    /// the next run finishes it.
    #[test]
    fn migrate_crashed_at_every_step_resumes_or_starts_again() {
        let f = fixture();
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("db");
        for (point, want) in [
            ("migrate::before_start=return", "intact"),
            ("migrate::after_start=return", "resumable"),
            ("migrate::batch=return", "resumable"),
            ("migrate::batch=1*off->return", "resumable"),
            ("migrate::before_end=return", "resumable"),
            ("migrate::after_end=return", "migrated"),
        ] {
            copy_dir(&f.v1, &data);
            let r = cli::output(
                cli::command(BIN, &data, &["admin", "migrate"]).env("FAILPOINTS", point),
            );
            assert_eq!(
                r.status.signal(),
                Some(9),
                "{point} was not reached: {}",
                r.stderr
            );
            assert_eq!(check_after_kill(&f, &data, point), want, "{point}");
            if want == "resumable" {
                let (_, m, _) = state(&data);
                eprintln!("{point}: resumes at inode {}", m.unwrap().next_id);
            }
            finish_and_check(&f, &data, point);
        }
    }
}
