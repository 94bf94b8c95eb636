//! `treelog admin backup` and `admin restore`, as a user runs them: the
//! restored data directory passes `admin verify` and lists the same tree;
//! a damaged, truncated or incomplete backup is refused with exit code 10
//! and a message naming the file, and leaves no data directory behind. A
//! backup fetched from a running `treelog serve` under load (in chunks,
//! interrupted and resumed) restores the namespace at its sequence.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use treelog::Command;
use treelog_testkit::cli::{self, Ran};
use treelog_testkit::{client::connect, commands, poll};

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

/// `treelog serve` on `data` (ports chosen by the OS), with `env` set;
/// returns the process and its RPC address once it is ready.
fn serve(data: &Path, env: &[(&str, &str)]) -> (Child, SocketAddr) {
    let mut cmd = cli::command(
        BIN,
        data,
        &["serve", "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"],
    );
    cmd.envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn treelog serve");
    let rpc = cli::ready_rpc(&mut child);
    (child, rpc)
}

/// Stops `treelog serve` with SIGTERM and waits for it.
fn stop(mut child: Child) {
    // SAFETY: kill(2) on our own child's pid.
    unsafe {
        libc::kill(child.id() as i32, libc::SIGTERM);
    }
    let st = child.wait().unwrap();
    assert!(st.success(), "serve: {st:?}");
}

type Acks = poll::Counter;

/// One acknowledged command.
#[derive(Debug, Clone)]
enum Done {
    Create(String),
    Rename(String, String),
    Delete(String),
}

/// Writers over the RPC port: each creates files in its own directory,
/// renames every third and deletes every fifth, until stopped.
struct Load {
    dirs: Vec<String>,
    stop: Arc<AtomicBool>,
    acks: Arc<Acks>,
    thread: std::thread::JoinHandle<Vec<(u64, Done)>>,
}

impl Load {
    fn start(rpc: SocketAddr, writers: usize) -> Load {
        let dirs: Vec<String> = (0..writers).map(|w| format!("/w{w}")).collect();
        let (stop, acks) = (Arc::new(AtomicBool::new(false)), Arc::new(Acks::default()));
        let (d, st, a) = (dirs.clone(), stop.clone(), acks.clone());
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let c = Arc::new(connect(rpc).await);
                let tasks: Vec<_> = d
                    .into_iter()
                    .map(|dir| {
                        let (c, stop, acks) = (c.clone(), st.clone(), a.clone());
                        tokio::spawn(async move {
                            c.submit(commands::mkdir(&dir)).await.unwrap();
                            let mut done = Vec::new();
                            let mut k = 0u64;
                            while !stop.load(Ordering::Relaxed) {
                                let f = format!("{dir}/f{k}");
                                let seq = c.submit(commands::create(&f)).await.unwrap();
                                done.push((seq, Done::Create(f.clone())));
                                acks.add();
                                if k % 3 == 1 {
                                    let r = format!("{dir}/r{k}");
                                    let cmd = Command::Rename {
                                        src: f.clone().into(),
                                        dst: r.clone().into(),
                                        overwrite: false,
                                    };
                                    let seq = c.submit(cmd).await.unwrap();
                                    done.push((seq, Done::Rename(f, r)));
                                    acks.add();
                                } else if k % 5 == 2 {
                                    let cmd = Command::Delete {
                                        path: f.clone().into(),
                                        recursive: false,
                                    };
                                    let seq = c.submit(cmd).await.unwrap();
                                    done.push((seq, Done::Delete(f)));
                                    acks.add();
                                }
                                k += 1;
                            }
                            done
                        })
                    })
                    .collect();
                let mut all = Vec::new();
                for t in tasks {
                    all.extend(t.await.unwrap());
                }
                all
            })
        });
        Load {
            dirs,
            stop,
            acks,
            thread,
        }
    }

    /// Stops the writers; every acknowledged command with its sequence.
    fn finish(self) -> (Vec<String>, Vec<(u64, Done)>) {
        self.stop.store(true, Ordering::Relaxed);
        (self.dirs, self.thread.join().unwrap())
    }
}

/// The paths after the commands acknowledged up to `seq` (all of them
/// were: the writers were joined).
fn model_at(dirs: &[String], done: &[(u64, Done)], seq: u64) -> BTreeSet<String> {
    let mut ops: Vec<&(u64, Done)> = done.iter().filter(|(s, _)| *s <= seq).collect();
    ops.sort_by_key(|(s, _)| *s);
    let mut paths: BTreeSet<String> = dirs.iter().cloned().collect();
    for (_, d) in ops {
        match d {
            Done::Create(p) => assert!(paths.insert(p.clone())),
            Done::Rename(a, b) => {
                assert!(paths.remove(a));
                assert!(paths.insert(b.clone()));
            }
            Done::Delete(p) => assert!(paths.remove(p)),
        }
    }
    paths
}

fn paths(data: &Path) -> BTreeSet<String> {
    tree(data)
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].as_str().unwrap().to_owned())
        .collect()
}

/// A backup fetched from a server while writers keep writing (with
/// `interrupt`: killed in the middle of its fetch, at a crash point after a
/// few chunks; the writers go on while the server holds the backup, and
/// the next run resumes the fetch where the last one recorded it was). The
/// restored database is the namespace at the backup's sequence, by the
/// writers' acknowledgements, and passes `admin verify`.
fn fetched_under_load(interrupt: bool) {
    let tmp = tempfile::tempdir().unwrap();
    let (data, dest, restored) = (
        tmp.path().join("data"),
        tmp.path().join("b"),
        tmp.path().join("restored"),
    );
    let (server, rpc) = serve(&data, &[]);
    let addr = rpc.to_string();
    let load = Load::start(rpc, 4);
    assert!(
        load.acks.wait_for(300, Duration::from_secs(120)),
        "the writers made {} acknowledgements, not 300",
        load.acks.get()
    );

    // Small chunks: many requests.
    let args = [
        "--server",
        &addr,
        "--json",
        "admin",
        "backup",
        s(&dest),
        "--chunk-bytes",
        "2048",
    ];
    if interrupt {
        use std::os::unix::process::ExitStatusExt;
        // A crash after the sixth chunk.
        let killed = cli::output(
            cli::command(BIN, tmp.path(), &args)
                .env("FAILPOINTS", "fetch::after_chunk=5*off->return"),
        );
        assert_eq!(killed.status.signal(), Some(9), "{killed:?}");
        assert!(!dest.exists());
        assert!(tmp.path().join(".b.fetching").is_dir());
        // The server holds the backup; writes go on meanwhile.
        let now = load.acks.get();
        assert!(
            load.acks.wait_for(now + 300, Duration::from_secs(120)),
            "the writers made {} acknowledgements, not {}",
            load.acks.get(),
            now + 300
        );
    }
    let before = load.acks.get();
    let out = cli::output(&mut cli::command(BIN, tmp.path(), &args));
    let during = load.acks.get() - before;
    assert_eq!(out.code(), 0, "{out:?}");
    let report: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let seq = report["report"]["seq"].as_u64().unwrap();
    let resumed = report["report"]["resumed_bytes"].as_u64().unwrap();
    if interrupt {
        assert!(out.stderr.contains("resuming backup"), "{}", out.stderr);
        assert!(resumed > 0, "{report}");
    } else {
        assert_eq!(resumed, 0);
    }
    assert!(!tmp.path().join(".b.fetching").exists());
    eprintln!("backup at {seq}; {during} acknowledgements during the last fetch; {report}");

    let (dirs, done) = load.finish();
    let last = done.iter().map(|(s, _)| *s).max().unwrap();
    if interrupt {
        assert!(last > seq + 300, "the writers went on: {seq} -> {last}");
    }
    stop(server);

    ok(tmp.path(), &["admin", "restore", s(&dest), s(&restored)]);
    let i = info(&restored);
    assert_eq!(
        (i["applied_seq"].as_u64(), i["last_seq"].as_u64()),
        (Some(seq), Some(seq))
    );
    let v = ok(&restored, &["admin", "verify"]);
    assert!(v.contains("OK"), "{v}");
    let expected = model_at(&dirs, &done, seq);
    assert_eq!(
        paths(&restored),
        expected,
        "the restored tree vs the model at {seq}"
    );
    // The server's own directory, now closed, has every later write.
    assert_eq!(paths(&data), model_at(&dirs, &done, u64::MAX));
}

#[test]
fn a_backup_fetched_from_a_server_under_load_restores_its_sequence() {
    fetched_under_load(false);
}

#[cfg(feature = "failpoints")]
#[test]
fn an_interrupted_fetch_under_load_is_resumed_and_restores_its_sequence() {
    fetched_under_load(true);
}

/// A chunk damaged on its way is fetched again; one that keeps arriving
/// damaged is refused (exit 10, naming the file), and the fetch can be
/// resumed later.
#[cfg(feature = "failpoints")]
#[test]
fn chunks_that_fail_their_checksum_are_fetched_again_or_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    populate(&data);
    let backup = |addr: &str, dest: &Path| {
        cli::run(
            BIN,
            tmp.path(),
            &[
                "--server",
                addr,
                "--json",
                "admin",
                "backup",
                s(dest),
                "--chunk-bytes",
                "4096",
            ],
        )
    };

    // The fourth chunk the server reads is damaged once.
    let (server, rpc) = serve(
        &data,
        &[("FAILPOINTS", "backup::bad_chunk=3*off->1*return")],
    );
    let dest = tmp.path().join("once");
    let out = backup(&rpc.to_string(), &dest);
    assert_eq!(out.code(), 0, "{out:?}");
    let r: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    assert_eq!(r["report"]["retried_chunks"], 1, "{r}");
    assert!(
        out.stderr.contains("failed its CRC-32C: fetching it again"),
        "{}",
        out.stderr
    );
    ok(
        tmp.path(),
        &["admin", "restore", s(&dest), s(&tmp.path().join("r1"))],
    );
    ok(&tmp.path().join("r1"), &["admin", "verify"]);
    stop(server);

    // Every chunk damaged.
    let (server, rpc) = serve(&data, &[("FAILPOINTS", "backup::bad_chunk=return")]);
    let dest = tmp.path().join("always");
    let out = backup(&rpc.to_string(), &dest);
    assert_eq!(out.code(), 10, "{out:?}");
    let e: serde_json::Value = serde_json::from_str(&out.stdout).unwrap();
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("failed its CRC-32C 3 times"), "{msg}");
    assert!(msg.contains(".always.fetching/db/"), "{msg}");
    assert!(!dest.exists());
    stop(server);

    // A healthy server: the interrupted fetch's backup is gone with the
    // old process, so the fetch starts over, and succeeds.
    let (server, rpc) = serve(&data, &[]);
    let out = backup(&rpc.to_string(), &dest);
    assert_eq!(out.code(), 0, "{out:?}");
    assert!(out.stderr.contains("cannot be resumed"), "{}", out.stderr);
    stop(server);
    ok(
        tmp.path(),
        &["admin", "restore", s(&dest), s(&tmp.path().join("r2"))],
    );
    assert_eq!(tree(&tmp.path().join("r2")), tree(&data));
}
