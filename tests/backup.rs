//! Backups and restores through the library: a backup taken while writer
//! threads create, rename and delete restores to exactly the namespace at
//! its sequence (checked against a model built from every acknowledged
//! command), the writers are not paused by it, the restored database
//! replays nothing and passes `admin verify`; a backup of a quiet store
//! restores byte for byte; damaged backups are refused, naming the file.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use treelog::backup::{self, Progress};
use treelog::{admin, CreateOptions, ErrorKind, Options, Treelog};

type Acks = treelog_testkit::poll::Counter;

/// One acknowledged command: its sequence and what it did to which paths.
#[derive(Debug, Clone)]
enum Done {
    Create(String),
    Rename(String, String),
    Delete(String),
}

/// A writer thread: creates files in its own directory, renames every
/// third and deletes every fifth, until `stop`; returns what was
/// acknowledged, with sequences.
fn writer(
    t: Arc<Treelog>,
    dir: String,
    stop: Arc<AtomicBool>,
    acks: Arc<Acks>,
) -> Vec<(u64, Done)> {
    let mut done = Vec::new();
    let mut k = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let f = format!("{dir}/f{k}");
        let owner = format!("u{}", k % 3);
        let seq = t
            .create(
                &f,
                CreateOptions {
                    owner,
                    ..Default::default()
                },
            )
            .unwrap();
        done.push((seq, Done::Create(f.clone())));
        acks.add();
        if k % 3 == 1 {
            let r = format!("{dir}/r{k}");
            let seq = t.rename(&f, &r, false).unwrap();
            done.push((seq, Done::Rename(f.clone(), r)));
            acks.add();
        } else if k % 5 == 2 {
            let seq = t.delete(&f, false).unwrap();
            done.push((seq, Done::Delete(f.clone())));
            acks.add();
        }
        k += 1;
    }
    done
}

/// The paths that exist after the commands acknowledged with a sequence
/// up to `seq` (every command up to it was acknowledged: sequences are
/// only given to committed records, and the writers were joined).
fn model_at(dirs: &[String], done: &[(u64, Done)], seq: u64) -> BTreeSet<String> {
    let mut ops: Vec<&(u64, Done)> = done.iter().filter(|(s, _)| *s <= seq).collect();
    ops.sort_by_key(|(s, _)| *s);
    let mut paths: BTreeSet<String> = dirs.iter().cloned().collect();
    for (_, d) in ops {
        match d {
            Done::Create(p) => assert!(paths.insert(p.clone()), "{p} created twice"),
            Done::Rename(a, b) => {
                assert!(paths.remove(a), "{a} renamed but absent");
                assert!(paths.insert(b.clone()));
            }
            Done::Delete(p) => assert!(paths.remove(p), "{p} deleted but absent"),
        }
    }
    paths
}

fn walk_paths(t: &Treelog) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    t.walk("/", |p, _| {
        out.insert(p.to_string());
        Ok(())
    })
    .unwrap();
    out
}

/// Every entry with its inode (ids and attributes), as a walk sees them.
fn walk_all(t: &Treelog) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    t.walk("/", |p, e| {
        out.insert(p.to_string(), format!("{:?}", e.inode));
        Ok(())
    })
    .unwrap();
    out
}

#[test]
fn backup_under_load_restores_the_namespace_at_its_sequence() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, dest, restored) = (
        tmp.path().join("data"),
        tmp.path().join("backups/b1"),
        tmp.path().join("restored"),
    );
    let t = Arc::new(Treelog::open(&data, Options::default()).unwrap());
    let dirs: Vec<String> = (0..4).map(|i| format!("/w{i}")).collect();
    for d in &dirs {
        t.mkdir_p(d).unwrap();
    }
    let (stop, acks) = (Arc::new(AtomicBool::new(false)), Arc::new(Acks::default()));
    let threads: Vec<_> = dirs
        .iter()
        .map(|d| {
            let (t, d, stop, acks) = (t.clone(), d.clone(), stop.clone(), acks.clone());
            std::thread::spawn(move || writer(t, d, stop, acks))
        })
        .collect();
    // Some history before the backup.
    assert!(acks.wait_for(400, Duration::from_secs(60)), "writers stuck");

    let before = acks.get();
    let mut at_checkpoint = None;
    let mut during_copy = None;
    let report = t
        .backup_with_progress(&dest, |p| match p {
            Progress::Checkpointed { seq, .. } => at_checkpoint = Some((seq, acks.get())),
            Progress::Copied { .. } if during_copy.is_none() => {
                // The backup is under way (its first file is copied, the
                // rest are not): the writers must keep being acknowledged.
                let want = acks.get() + 100;
                during_copy = Some(acks.wait_for(want, Duration::from_secs(60)));
            }
            Progress::Copied { .. } => {}
        })
        .unwrap();
    let after = acks.get();
    stop.store(true, Ordering::Relaxed);
    let done: Vec<(u64, Done)> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();

    assert_eq!(
        during_copy,
        Some(true),
        "the writers were not acknowledged while the backup copied its files"
    );
    let (cp_seq, _) = at_checkpoint.expect("no Checkpointed progress");
    assert_eq!(cp_seq, report.seq);
    assert!(
        after >= before + 100,
        "acknowledgements during the backup: {before} -> {after}"
    );
    assert!(report.seq > 400, "{report:?}");
    println!(
        "backup at {} ({} files, {} bytes, {} replayed, {} ms); {} acknowledgements during it",
        report.seq,
        report.files,
        report.bytes,
        report.replayed,
        report.elapsed_ms,
        after - before
    );
    // The source went on past the backup.
    assert!(t.committed_seq() > report.seq);

    let manifest = backup::read_manifest(&dest).unwrap();
    assert_eq!(manifest.seq, report.seq);
    assert_eq!(manifest.log_start, 1);
    assert_eq!(manifest.index_digest, report.index_digest);
    let owners: BTreeSet<&str> = manifest.owners.iter().map(String::as_str).collect();
    assert_eq!(owners, BTreeSet::from(["u0", "u1", "u2"]));

    let r = backup::restore(&dest, &restored, &mut |_| {}).unwrap();
    assert_eq!((r.seq, r.replayed), (report.seq, 0));
    assert_eq!(r.index_digest, report.index_digest);

    let rt = Treelog::open(&restored, Options::default()).unwrap();
    // Nothing to replay: the index is at the backup's sequence.
    assert_eq!(rt.open_report().replayed, 0);
    assert_eq!(rt.open_report().applied_seq, report.seq);
    assert_eq!(rt.committed_seq(), report.seq);
    let v = admin::verify(rt.store()).unwrap();
    assert!(v.ok(), "{v:?}");
    let expected = model_at(&dirs, &done, report.seq);
    let got = walk_paths(&rt);
    let mut expected_all = expected.clone();
    expected_all.insert("/".into());
    let got_all: BTreeSet<String> = got.iter().cloned().chain(["/".to_owned()]).collect();
    assert_eq!(
        got_all
            .symmetric_difference(&expected_all)
            .collect::<Vec<_>>(),
        Vec::<&String>::new(),
        "restored tree vs the model at {}",
        report.seq
    );
    // The restored store takes writes, continuing the sequence.
    let next = rt.mkdir_p("/after-restore").unwrap();
    assert_eq!(next, report.seq + 1);
    rt.close().unwrap();

    // The source, quiesced, still has what the backup does not: its own
    // later records.
    let model_now = model_at(&dirs, &done, u64::MAX);
    assert_eq!(walk_paths(&t), model_now);
    Arc::into_inner(t).unwrap().close().unwrap();
}

/// A store with a few hundred entries, attributes, a rename and a delete.
fn populate(t: &Treelog) {
    t.mkdir_p("/a/b/c").unwrap();
    for i in 0..200 {
        t.create(
            format!("/a/b/c/f{i}"),
            CreateOptions {
                owner: "alice".into(),
                group: format!("g{}", i % 4),
                ..Default::default()
            },
        )
        .unwrap();
    }
    t.complete("/a/b/c/f7", 4096).unwrap();
    t.rename("/a/b", "/a/moved", false).unwrap();
    t.delete("/a/moved/c/f9", false).unwrap();
}

#[test]
fn a_quiet_store_restores_byte_for_byte_online_and_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().join("data");
    let t = Treelog::open(&data, Options::default()).unwrap();
    populate(&t);
    // Not inside the data directory itself.
    let e = t.backup(data.join("b")).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(!data.join("b").exists());
    // The copy runs on a thread of its own, under SCHED_IDLE.
    let mut thread = None;
    let report = t
        .backup_with_progress(tmp.path().join("online"), |_| {
            let name = std::thread::current().name().map(str::to_owned);
            // SAFETY: a plain syscall about the calling thread.
            thread = Some((name, unsafe { libc::sched_getscheduler(0) }));
        })
        .unwrap();
    assert_eq!(
        thread,
        Some((Some("treelog-backup".to_owned()), libc::SCHED_IDLE))
    );
    assert_eq!(report.seq, t.committed_seq());
    let source_digest = admin::index_digest(t.store()).unwrap();
    assert_eq!(report.index_digest, source_digest);
    let source_tree = walk_all(&t);
    t.close().unwrap();

    // Offline, from the closed data directory: the same state.
    let offline = backup::backup_path(
        &data,
        &tmp.path().join("offline"),
        &Default::default(),
        &mut |_| {},
    )
    .unwrap();
    assert_eq!(
        (offline.seq, &offline.index_digest),
        (report.seq, &source_digest)
    );

    for (from, to) in [("online", "r1"), ("offline", "r2")] {
        let r = backup::restore(&tmp.path().join(from), &tmp.path().join(to), &mut |_| {}).unwrap();
        assert_eq!(r.seq, report.seq);
        let rt = Treelog::open(tmp.path().join(to), Options::default()).unwrap();
        assert_eq!(rt.open_report().replayed, 0);
        assert_eq!(admin::index_digest(rt.store()).unwrap(), source_digest);
        assert_eq!(walk_all(&rt), source_tree, "{from}");
        assert!(admin::verify(rt.store()).unwrap().ok());
        rt.close().unwrap();
    }
}

/// A backup of a store whose log was truncated by retention keeps the log
/// as it is (from its start); the restored store opens at the backup's
/// sequence (`admin verify` needs the whole log and says so).
#[test]
fn a_backup_keeps_the_log_from_its_start() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Treelog::open(tmp.path().join("data"), Options::default()).unwrap();
    populate(&t);
    let rep = t
        .run_retention(&treelog::retention::RetentionPolicy {
            max_records: Some(50),
            ..Default::default()
        })
        .unwrap();
    assert!(rep.new_start > 1);
    let report = t.backup(tmp.path().join("b")).unwrap();
    assert_eq!(report.log_start, rep.new_start);
    let digest = admin::index_digest(t.store()).unwrap();
    t.close().unwrap();
    backup::restore(&tmp.path().join("b"), &tmp.path().join("r"), &mut |_| {}).unwrap();
    let rt = Treelog::open(tmp.path().join("r"), Options::default()).unwrap();
    assert_eq!(rt.log_start(), rep.new_start);
    assert_eq!(admin::index_digest(rt.store()).unwrap(), digest);
    assert_eq!(
        admin::verify(rt.store()).unwrap_err().kind(),
        ErrorKind::Compacted
    );
    rt.close().unwrap();
}

fn small_backup(tmp: &Path) -> PathBuf {
    let t = Treelog::open(tmp.join("data"), Options::default()).unwrap();
    populate(&t);
    let dest = tmp.join("b");
    t.backup(&dest).unwrap();
    t.close().unwrap();
    dest
}

/// The largest table file of the backup.
fn biggest_sst(dest: &Path) -> PathBuf {
    std::fs::read_dir(dest.join(backup::DB_DIR))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sst"))
        .max_by_key(|p| std::fs::metadata(p).unwrap().len())
        .expect("an sst")
}

/// Refused as corrupt, naming `file`, and nothing made at the data
/// directory.
fn assert_refused(dest: &Path, data: &Path, file: &Path, words: &str) {
    let e = backup::restore(dest, data, &mut |_| {}).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Corruption, "{e}");
    let msg = e.to_string();
    assert!(msg.contains(&file.display().to_string()), "{msg}");
    assert!(msg.contains(words), "{msg}");
    assert!(!data.exists(), "{} was made", data.display());
    // No staging directory left beside it either.
    let left: Vec<_> = std::fs::read_dir(data.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("restoring"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn damaged_backups_are_refused_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let dest = small_backup(tmp.path());
    let data = tmp.path().join("new");

    // A flipped byte in a table file.
    let sst = biggest_sst(&dest);
    let orig = std::fs::read(&sst).unwrap();
    let mut bad = orig.clone();
    bad[orig.len() / 2] ^= 0x40;
    std::fs::write(&sst, &bad).unwrap();
    assert_refused(&dest, &data, &sst, "CRC-32C");
    // Truncated.
    std::fs::write(&sst, &orig[..orig.len() - 100]).unwrap();
    assert_refused(&dest, &data, &sst, "truncated");
    // Missing.
    std::fs::remove_file(&sst).unwrap();
    assert_refused(&dest, &data, &sst, "missing");
    std::fs::write(&sst, &orig).unwrap();

    // The manifest: damaged, truncated, missing.
    let mf = dest.join(backup::MANIFEST_FILE);
    let m = std::fs::read(&mf).unwrap();
    let mut bad = m.clone();
    let at = m.windows(5).position(|w| w == b"\"seq\"").unwrap() + 8;
    bad[at] = if bad[at] == b'1' { b'2' } else { b'1' };
    std::fs::write(&mf, &bad).unwrap();
    assert_refused(&dest, &data, &mf, "SHA-256");
    std::fs::write(&mf, &m[..m.len() / 2]).unwrap();
    assert_refused(&dest, &data, &mf, "manifest");
    std::fs::remove_file(&mf).unwrap();
    assert_refused(&dest, &data, &mf, "missing");
    std::fs::write(&mf, &m).unwrap();

    // Intact again: it restores.
    backup::restore(&dest, &data, &mut |_| {}).unwrap();
    // Not over an existing database.
    let e = backup::restore(&dest, &data, &mut |_| {}).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    // Nor into an existing backup.
    let t = Treelog::open(&data, Options::default()).unwrap();
    let e = t.backup(&dest).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::AlreadyExists, "{e}");
    t.close().unwrap();
}

/// A backup to be served (the server's `BackupBegin`): the manifest of a
/// caught-up checkpoint, and chunks of its files with their CRC-32C that
/// add up to the manifest's; nothing outside the manifest is served.
#[test]
fn a_served_backup_gives_the_manifest_and_checksummed_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let t = Treelog::open(tmp.path().join("data"), Options::default()).unwrap();
    populate(&t);
    // The standard check value of CRC-32C.
    assert_eq!(crc32c(b"123456789"), 0xe306_9283);
    let served = t.serve_backup().unwrap();
    let m = backup::Manifest::decode(served.manifest_bytes(), Path::new("served")).unwrap();
    assert_eq!(&m, served.manifest());
    assert_eq!(m.seq, t.committed_seq());
    assert_eq!(m.index_digest, admin::index_digest(t.store()).unwrap());
    for f in &m.files {
        let (mut at, mut crc) = (0u64, 0u32);
        while at < f.size {
            let (data, sum) = served.read_chunk(&f.name, at, 1000).unwrap();
            assert!(!data.is_empty() && data.len() <= 1000);
            assert_eq!(crc32c(&data), sum);
            crc = crc32c_append(crc, &data);
            at += data.len() as u64;
        }
        assert_eq!(
            (at, format!("{crc:08x}")),
            (f.size, f.crc32c.clone()),
            "{}",
            f.name
        );
        assert!(served.read_chunk(&f.name, f.size, 10).unwrap().0.is_empty());
        let e = served.read_chunk(&f.name, f.size + 1, 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    }
    for name in ["LOCK", "../data/CURRENT", "nope"] {
        let e = served.read_chunk(name, 0, 10).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotFound, "{name}");
    }
    // Its checkpoint lives in the data directory until it is dropped.
    let held = |t: &Treelog| {
        std::fs::read_dir(t.store().path())
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .starts_with(".treelog-checkpoint-")
            })
            .count()
    };
    assert_eq!(held(&t), 1);
    drop(served);
    assert_eq!(held(&t), 0);
    t.close().unwrap();
}

/// CRC-32C (Castagnoli), bit by bit: an independent check of the sums.
fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    let mut c = !crc;
    for &b in data {
        c ^= u32::from(b);
        for _ in 0..8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
        }
    }
    !c
}

fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}
