//! The library's log events (it never prints): replay at open and
//! retention passes, captured as JSON lines on the calling thread.

use std::sync::{Arc, Mutex};

use treelog::format::meta;
use treelog::retention::RetentionPolicy;
use treelog::store::{Store, StoreOptions};
use treelog::{Durability, MkdirOptions, Options, Treelog};

/// The events `f` emits on this thread, as parsed JSON lines.
fn capture<T>(f: impl FnOnce() -> T) -> (T, Vec<serde_json::Value>) {
    let buf = Arc::new(Mutex::new(Vec::<u8>::new()));
    let sink = buf.clone();
    let sub = tracing_subscriber::fmt()
        .json()
        .with_max_level(tracing::Level::INFO)
        .with_writer(move || Sink(sink.clone()))
        .finish();
    let out = tracing::subscriber::with_default(sub, f);
    let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
    let events = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    (out, events)
}

struct Sink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Sink {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn event<'a>(events: &'a [serde_json::Value], message: &str) -> &'a serde_json::Value {
    events
        .iter()
        .find(|e| e["fields"]["message"] == message)
        .unwrap_or_else(|| panic!("no {message:?} event in {events:#?}"))
}

fn options() -> Options {
    Options::default().durability(Durability::None)
}

/// Writes `n` records, closes the store.
fn store_with_records(dir: &std::path::Path, n: usize) {
    let t = Treelog::open(dir, options()).unwrap();
    for i in 0..n {
        t.mkdir(format!("/d{i}"), MkdirOptions::default()).unwrap();
    }
    t.close().unwrap();
}

/// An open that replays the log logs how many records it will replay and,
/// at the end, how many it did (`replayed`) and how long it took; an open
/// with nothing to replay logs no replay.
#[test]
fn replay_at_open_is_logged_with_its_counts() {
    let dir = tempfile::tempdir().unwrap();
    store_with_records(dir.path(), 50);
    // Nothing to replay after a clean close.
    let (t, events) = capture(|| Treelog::open(dir.path(), options()).unwrap());
    assert_eq!(t.open_report().replayed, 0);
    assert!(
        !events.iter().any(|e| e["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("replay"))),
        "{events:#?}"
    );
    t.close().unwrap();
    // A rebuild mark: the next open replays the whole log.
    {
        let s = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        s.put_meta_synced(meta::REBUILD_KEY, &meta::encode_u64(1))
            .unwrap();
    }
    let (t, events) = capture(|| Treelog::open(dir.path(), options()).unwrap());
    let replayed = t.open_report().replayed;
    assert_eq!(replayed, 50);
    let start = event(&events, "replaying the log into the index");
    assert_eq!(start["fields"]["records"], replayed, "{start}");
    assert_eq!(start["level"], "INFO");
    assert!(start["target"].as_str().unwrap().starts_with("treelog::"));
    let done = event(&events, "replay done");
    assert_eq!(done["fields"]["replayed"], replayed, "{done}");
    assert!(done["fields"]["elapsed_ms"].is_u64(), "{done}");
    t.close().unwrap();
}

/// A retention pass that removes records logs the old and new start and
/// what it removed; one that removes nothing logs nothing.
#[test]
fn a_retention_pass_that_removes_records_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    store_with_records(dir.path(), 30);
    let t = Treelog::open(dir.path(), options()).unwrap();
    let policy = RetentionPolicy {
        max_records: Some(10),
        ..Default::default()
    };
    let (report, events) = capture(|| t.run_retention(&policy).unwrap());
    assert!(report.removed_records > 0, "{report:?}");
    let e = event(&events, "retention removed records");
    let f = &e["fields"];
    assert_eq!(f["old_start"], report.old_start, "{e}");
    assert_eq!(f["new_start"], report.new_start, "{e}");
    assert_eq!(f["removed_records"], report.removed_records, "{e}");
    assert_eq!(f["removed_bytes"], report.removed_bytes, "{e}");
    assert!(report.removed_bytes > 0);
    // Again: nothing more to remove, nothing logged.
    let (report, events) = capture(|| t.run_retention(&policy).unwrap());
    assert_eq!(report.removed_records, 0);
    assert!(events.is_empty(), "{events:#?}");
    t.close().unwrap();
}
