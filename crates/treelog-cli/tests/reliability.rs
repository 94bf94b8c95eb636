//! Reliability of the log's own lifecycle, against real processes and real
//! files: kill -9 at random moments of log-retention passes and of
//! `admin rebuild`, and corruption of the write-ahead log. After each
//! fault the database must open (or refuse clearly), and every
//! acknowledged operation must be there.
//!
//! The kill loops run a few rounds in CI; `TREELOG_KILL_ROUNDS=200` runs
//! more by hand (`TREELOG_TEST_SEED` replays a run's kill points).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use treelog::retention::RetentionPolicy;
use treelog::{admin, ErrorKind, Options, Treelog};
use treelog_testkit::{cli, rounds, worker, Expect, Rng, Worker};

const BIN: &str = env!("CARGO_BIN_EXE_treelog");

#[test]
#[ignore = "the crash worker's process entry: the kill tests run it in a child process"]
fn crash_worker_process() {
    worker::entry(|task| {
        let retention = RetentionPolicy {
            max_records: task.retain_records,
            interval: task.retention_interval,
            ..Default::default()
        };
        let t = Treelog::open(
            &task.data,
            Options {
                retention,
                ..Options::default()
            },
        )?;
        Ok((t.committed_seq(), move |cmd: treelog::Command| {
            t.submit(cmd)
        }))
    });
}

fn kill_during(data: &Path, args: &[&str], after: Duration) -> bool {
    cli::kill_during(BIN, data, args, after)
}

/// How long `treelog ARGS` takes when it runs to the end: kill points are
/// drawn from that span.
fn time_run(data: &Path, args: &[&str]) -> Duration {
    let t = Instant::now();
    let out = cli::run(BIN, data, args);
    assert!(out.status.success(), "treelog {args:?}: {}", out.stderr);
    t.elapsed()
}

fn open(data: &Path, what: &str) -> Treelog {
    Treelog::open(data, Options::default())
        .unwrap_or_else(|e| panic!("{what}: the database does not open: {e}"))
}

/// What [`reopens`] checks of the index.
enum Check {
    /// `admin::verify`: the index is exactly a replay of the log.
    Verify,
    /// `admin::check_structure`: the index's structure is sound.
    Structure,
}

/// After a fault: the database opens with every acknowledged operation
/// and passes `check`.
fn reopens(data: &Path, expect: &Expect, what: &str, check: Check) {
    let t = open(data, what);
    expect.check(|p| t.stat(p).is_ok(), u64::MAX, what);
    match check {
        Check::Verify => {
            let report = admin::verify(t.store()).unwrap();
            assert!(report.ok(), "{what}: {report:?}");
        }
        Check::Structure => {
            let problems = admin::check_structure(t.store()).unwrap();
            assert!(problems.is_empty(), "{what}: {problems:?}");
        }
    }
    t.close().unwrap();
}

/// Log retention under load, and `admin retention`, killed at random
/// moments: retention never removes a record that the index on disk lacks,
/// so every open replays what it needs.
#[test]
fn retention_killed_at_random_moments_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let mut rng = Rng::new();
    let mut expect = Expect::default();
    let mut calibrated: Option<Duration> = None;
    let mut truncated_rounds = 0;
    for round in 0..rounds(6) {
        // Passes every 2 ms, keeping 100 records, beside four writing
        // threads: passes run throughout the workload.
        let w = Worker::spawn(
            &data,
            4,
            &format!("r{round}"),
            &["--retain-records", "100", "--retention-interval-ms", "2"],
        );
        w.kill_after(&mut expect, 300 + rng.below(700) as usize);
        let what = format!("round {round}, after the workload with retention");
        let t = open(&data, &what);
        expect.check(|p| t.stat(p).is_ok(), u64::MAX, &what);
        if t.log_start() > 1 {
            truncated_rounds += 1;
        }
        // Left unflushed for the local pass below, as a crash leaves it.
        drop(t);

        // `admin retention` on the store the kill left: the killed
        // process's last records are only in the log.
        let w = Worker::spawn(&data, 1, &format!("s{round}"), &[]);
        w.kill_after(&mut expect, 50 + rng.below(200) as usize);
        let args = ["admin", "retention", "--max-records", "20"];
        let span = *calibrated.get_or_insert_with(|| time_run(&data, &args));
        let at = Duration::from_micros(rng.below(span.as_micros() as u64 + 1));
        kill_during(&data, &args, at);
        let what = format!("round {round}, after admin retention killed at {at:?}");
        reopens(&data, &expect, &what, Check::Structure);
    }
    assert!(
        truncated_rounds > 0,
        "retention never removed a record: the test did not exercise it"
    );
}

/// `admin rebuild` killed at random moments: every open afterwards
/// succeeds (finishing the rebuild if it was under way) and the index is
/// exactly a replay of the log.
#[test]
fn rebuild_killed_at_random_moments_always_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let mut rng = Rng::new();
    let mut expect = Expect::default();
    Worker::spawn(&data, 4, "w", &[]).kill_after(&mut expect, 1500);
    let args = ["admin", "rebuild"];
    let span = time_run(&data, &args);
    let mut interrupted = 0;
    for round in 0..rounds(25) {
        let at = Duration::from_micros(rng.below(span.as_micros() as u64 * 11 / 10 + 1));
        if !kill_during(&data, &args, at) {
            interrupted += 1;
        }
        let what = format!("round {round}, rebuild killed at {at:?} of {span:?}");
        reopens(&data, &expect, &what, Check::Verify);
    }
    assert!(interrupted > 0, "no rebuild was interrupted");
}

/// The write-ahead log files of a database, oldest first.
fn wal_files(data: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(data)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    v.sort();
    v
}

/// A database whose last `acks` acknowledged operations are only in the
/// write-ahead log (the writing process was killed), and its largest WAL.
fn killed_store(acks: usize) -> (tempfile::TempDir, PathBuf, Expect, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let mut expect = Expect::default();
    Worker::spawn(&data, 2, "w", &[]).kill_after(&mut expect, acks);
    let wal = wal_files(&data)
        .into_iter()
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("a WAL file");
    (dir, data, expect, wal)
}

fn max_acked_seq(e: &Expect) -> u64 {
    e.paths.values().map(|(_, s)| *s).max().unwrap()
}

#[test]
fn corruption_in_the_middle_of_the_wal_refuses_to_open_until_the_loss_is_accepted() {
    let (_dir, data, expect, wal) = killed_store(2000);
    let mut bytes = std::fs::read(&wal).unwrap();
    let at = bytes.len() / 3;
    for b in &mut bytes[at..at + 16] {
        *b ^= 0xA5;
    }
    std::fs::write(&wal, &bytes).unwrap();

    // Refused loudly, by the library and the CLI, and nothing changes.
    let e = Treelog::open(&data, Options::default())
        .err()
        .expect("open refused");
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    assert!(e.to_string().contains("accept-wal-loss"), "{e}");
    let out = cli::run(BIN, &data, &["ls", "/"]);
    assert_eq!(out.status.code(), Some(10), "{out:?}");
    let err = &out.stderr;
    assert!(err.contains("write-ahead log"), "{err}");
    assert_eq!(
        std::fs::read(&wal).unwrap(),
        bytes,
        "a refused open changed the WAL"
    );

    // The operator accepts the loss explicitly.
    let out = cli::run(BIN, &data, &["--json", "admin", "accept-wal-loss"]);
    assert!(out.status.success(), "{out:?}");
    let v: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let last = v["report"]["last_seq"].as_u64().unwrap();
    assert!(
        last < max_acked_seq(&expect),
        "the corruption lost nothing? log ends at {last}"
    );
    for _ in 0..2 {
        let t = open(&data, "after accept-wal-loss");
        assert_eq!(t.committed_seq(), last);
        expect.check(|p| t.stat(p).is_ok(), last, "after accept-wal-loss");
        let report = admin::verify(t.store()).unwrap();
        assert!(report.ok(), "{report:?}");
        t.close().unwrap();
    }
    let out = cli::run(BIN, &data, &["admin", "info"]);
    assert!(out.stdout.contains("wal loss"));
}

/// A torn tail (the last write of a crash, cut or half-written) is not an
/// error: the database opens with every record before it.
#[test]
fn a_torn_wal_tail_opens_with_every_record_before_it() {
    for garbage in [false, true] {
        let (_dir, data, expect, wal) = killed_store(1000);
        let mut bytes = std::fs::read(&wal).unwrap();
        let cut = 300.min(bytes.len() / 4);
        let end = bytes.len() - cut;
        if garbage {
            // A half-written page: the length stays, the bytes are wrong.
            let mut rng = Rng::new();
            for b in &mut bytes[end..] {
                *b = rng.next() as u8;
            }
        } else {
            bytes.truncate(end);
        }
        std::fs::write(&wal, &bytes).unwrap();
        let what = if garbage { "garbage tail" } else { "cut tail" };
        let t = open(&data, what);
        let last = t.committed_seq();
        assert!(last > 0 && last < max_acked_seq(&expect), "{what}: {last}");
        expect.check(|p| t.stat(p).is_ok(), last, what);
        let report = admin::verify(t.store()).unwrap();
        assert!(report.ok(), "{what}: {report:?}");
        t.close().unwrap();
        // And again, now that recovery has retired the torn WAL.
        let t = open(&data, what);
        assert_eq!(t.committed_seq(), last);
        t.close().unwrap();
    }
}

/// Crash points (the `failpoints` feature): the process kills itself with
/// SIGKILL at each named step of a retention pass and of a rebuild, so that
/// every step boundary is crashed at, not only the ones random kills hit.
#[cfg(feature = "failpoints")]
mod crash_points {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// SIGKILL.
    const KILLED: i32 = 9;

    fn killed_at(status: std::process::ExitStatus, point: &str) {
        assert_eq!(
            status.signal(),
            Some(KILLED),
            "the process did not reach the crash point {point}: {status:?}"
        );
    }

    fn run_env(data: &Path, args: &[&str], failpoints: &str) -> cli::Ran {
        cli::output(cli::command(BIN, data, args).env("FAILPOINTS", failpoints))
    }

    /// A database whose creation was interrupted at any step is created
    /// again by the next command (before, every later open refused it as
    /// "not a treelog database", found by cutting power with LazyFS).
    #[test]
    fn a_creation_crashed_at_every_step_is_started_over() {
        for point in [
            "create::after_mark",
            "create::after_open",
            "create::before_unmark",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let data = dir.path().join("db");
            let out = run_env(&data, &["mkdir", "/x"], &format!("{point}=return"));
            killed_at(out.status, point);
            assert!(data.join("TREELOG-CREATING").exists(), "{point}");
            let again = cli::run(BIN, &data, &["mkdir", "/x"]);
            assert!(again.status.success(), "{point}: {}", again.stderr);
            assert!(!data.join("TREELOG-CREATING").exists(), "{point}");
            let verify = cli::run(BIN, &data, &["admin", "verify"]);
            assert!(verify.status.success(), "{point}: {}", verify.stderr);
        }
    }

    #[test]
    fn retention_crashed_at_every_step_loses_nothing_acknowledged() {
        for point in [
            "retention::before_start",
            "retention::after_start",
            "retention::after_delete",
        ] {
            let dir = tempfile::tempdir().unwrap();
            let data = dir.path().join("db");
            let mut expect = Expect::default();
            // The server's path: passes beside the workload, until one
            // reaches the point.
            let fp = format!("{point}=return");
            let w = Worker::spawn_env(
                &data,
                4,
                "w",
                &["--retain-records", "50", "--retention-interval-ms", "2"],
                &[("FAILPOINTS", fp.as_str())],
            );
            killed_at(w.until_exit(&mut expect), point);
            let t = open(&data, point);
            if point != "retention::before_start" {
                assert!(t.log_start() > 1, "{point}: the log start did not move");
            }
            expect.check(|p| t.stat(p).is_ok(), u64::MAX, point);
            drop(t);
            // The local pass, on a store whose last records are only in
            // the log.
            Worker::spawn(&data, 1, "x", &[]).kill_after(&mut expect, 200);
            let out = run_env(&data, &["admin", "retention", "--max-records", "10"], &fp);
            killed_at(out.status, point);
            reopens(&data, &expect, point, Check::Structure);
        }
    }

    #[test]
    fn rebuild_crashed_at_every_step_reopens() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("db");
        let mut expect = Expect::default();
        Worker::spawn(&data, 4, "w", &[]).kill_after(&mut expect, 1500);
        // `1*off->return`: the second time the point is reached.
        for fp in [
            "rebuild::after_mark=return",
            "rebuild::after_drop=return",
            "rebuild::after_drop=1*off->return",
            "rebuild::after_create=return",
            "rebuild::after_create=1*off->return",
            "rebuild::after_reset=return",
            "replay::batch=return",
            "rebuild::before_unmark=return",
        ] {
            let out = run_env(&data, &["admin", "rebuild"], fp);
            killed_at(out.status, fp);
            // Every command opens it (finishing the rebuild), the CLI too.
            let out = cli::run(BIN, &data, &["ls", "/"]);
            assert!(out.status.success(), "{fp}: {out:?}");
            reopens(&data, &expect, fp, Check::Verify);
        }
    }
}

/// A full disk: the writer stops (its callers told `OutcomeUnknown` or
/// `WriterStopped`, never success), and once there is room again the
/// database opens with every acknowledged write. Needs to mount a small
/// tmpfs (root, as in CI); says so and does nothing elsewhere.
#[test]
fn a_full_disk_stops_the_writer_and_loses_nothing_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mount = |opts: &str| {
        Command::new("mount")
            .args(["-t", "tmpfs", "-o", opts, "tmpfs"])
            .arg(&mnt)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !mount("size=6m") {
        eprintln!("SKIPPED: cannot mount a tmpfs here (not root?)");
        return;
    }
    struct Unmount(PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = Command::new("umount").arg(&self.0).status();
        }
    }
    let _unmount = Unmount(mnt.clone());
    let data = mnt.join("db");
    let mut expect = Expect::default();
    let status = Worker::spawn(&data, 4, "w", &[]).until_exit(&mut expect);
    assert_eq!(
        status.code(),
        Some(1),
        "the worker should stop on the full disk"
    );
    assert!(expect.acks > 100, "only {} acknowledgements", expect.acks);
    // Room again (the same files, a bigger filesystem).
    let remount = Command::new("mount")
        .args(["-o", "remount,size=256m"])
        .arg(&mnt)
        .status()
        .unwrap();
    assert!(remount.success());
    reopens(&data, &expect, "after the disk was full", Check::Verify);
}

/// A stopped writer ends `treelog serve` (crash-only: the restart recovers),
/// with a log-append failure injected by a failure point.
#[cfg(feature = "failpoints")]
mod writer_failure {
    use super::*;
    use std::net::SocketAddr;
    use std::process::Stdio;
    use treelog_testkit::{client::connect, commands};

    /// `treelog serve` on `data` with the log appends after the first 30
    /// failing, and `extra` arguments; its addresses once ready.
    fn serve_failing_after_30(
        data: &Path,
        extra: &[&str],
    ) -> (std::process::Child, SocketAddr, SocketAddr) {
        let serve = ["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"];
        let mut child = cli::command(BIN, data, &serve)
            .args(extra)
            .env("FAILPOINTS", "writer::write_log=30*off->return")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn treelog serve");
        let (rpc, http) = cli::ready_addrs(&mut child);
        (child, rpc, http)
    }

    /// Creates `/f0`, `/f1`, ... on `rpc` until one fails; returns the
    /// acknowledged paths and the failure.
    fn create_until_failure(
        rt: &tokio::runtime::Runtime,
        rpc: SocketAddr,
    ) -> (Vec<String>, treelog::Error) {
        rt.block_on(async {
            let c = connect(rpc).await;
            let mut acked = Vec::new();
            for i in 0.. {
                let p = format!("/f{i}");
                match c.submit(commands::create(&p)).await {
                    Ok(_) => acked.push(p),
                    Err(e) => return (acked, e),
                }
            }
            unreachable!()
        })
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A failed log write stops the writer; `serve` then drains, closes the
    /// store and exits (for its service manager to restart it), instead of
    /// staying up with writes refused for good. The restart has every
    /// acknowledged write, and writes again.
    #[test]
    fn serve_ends_when_its_writer_stops_and_a_restart_recovers() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("db");
        let (mut child, rpc, _) = serve_failing_after_30(&data, &[]);
        let (acked, failure) = create_until_failure(&runtime(), rpc);
        // The group whose append failed: its outcome is unknown to the
        // caller (not applied, as it happens).
        assert!(
            matches!(
                failure.kind(),
                ErrorKind::OutcomeUnknown | ErrorKind::WriterStopped
            ),
            "{failure}"
        );
        assert!(acked.len() >= 30, "{} acknowledged", acked.len());
        // The server ends by itself (a guard against a hang, not a wait).
        let deadline = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            assert!(
                Instant::now() < deadline,
                "serve did not end after its writer stopped"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(!status.success(), "{status:?}");
        // The restart (here: an open of the same directory) recovers.
        let t = open(&data, "after the writer stopped");
        for p in &acked {
            assert!(t.stat(p).is_ok(), "{p} was acknowledged but is missing");
        }
        t.mkdir("/again", Default::default()).unwrap();
        assert!(admin::verify(t.store()).unwrap().ok());
        t.close().unwrap();
    }

    /// With `--on-writer-failure stay` the server stays up for reads: the
    /// writes are refused, `/readyz` fails, a stat is answered.
    #[test]
    fn serve_told_to_stay_serves_reads_after_its_writer_stops() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("db");
        let (mut child, rpc, http) =
            serve_failing_after_30(&data, &["--on-writer-failure", "stay"]);
        let rt = runtime();
        let (acked, _) = create_until_failure(&rt, rpc);
        rt.block_on(async {
            let c = connect(rpc).await;
            let e = c.submit(commands::create("/later")).await.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::WriterStopped, "{e}");
            assert!(c.stat(&acked[0]).await.is_ok());
            let (status, body) = treelog_testkit::http::get(http, "/readyz").await;
            assert_eq!(status, 503, "{body}");
        });
        assert!(child.try_wait().unwrap().is_none(), "serve ended");
        child.kill().unwrap();
        child.wait().unwrap();
    }
}
