//! Replay's log events: at its start, the records to replay; then progress
//! at most once a second; at its end, how many and how long. The target is
//! `treelog::replay_progress`.

use std::time::{Duration, Instant};

/// One replay's events (see the module doc).
pub(crate) struct ReplayProgress {
    applied: u64,
    total: u64,
    started: Instant,
    last_event: Instant,
}

impl ReplayProgress {
    /// At most one progress event this often.
    const EVERY: Duration = Duration::from_secs(1);

    /// A replay of the records after `applied` up to `last`.
    pub(crate) fn start(applied: u64, last: u64) -> ReplayProgress {
        let total = last.saturating_sub(applied);
        tracing::info!(
            records = total,
            from = applied + 1,
            to = last,
            "replaying the log into the index"
        );
        let now = Instant::now();
        ReplayProgress {
            applied,
            total,
            started: now,
            last_event: now,
        }
    }

    /// Records up to `seq` are applied.
    pub(crate) fn at(&mut self, seq: u64) {
        let now = Instant::now();
        if now.duration_since(self.last_event) < Self::EVERY {
            return;
        }
        self.last_event = now;
        let replayed = seq.saturating_sub(self.applied);
        tracing::info!(
            replayed,
            total = self.total,
            rate = rate(replayed, now.duration_since(self.started)),
            "replay progress"
        );
    }

    /// The replay applied `replayed` records.
    pub(crate) fn end(&self, replayed: u64) {
        let elapsed = self.started.elapsed();
        tracing::info!(
            replayed,
            elapsed_ms = elapsed.as_millis() as u64,
            rate = rate(replayed, elapsed),
            "replay done"
        );
    }
}

/// Records per second.
fn rate(records: u64, elapsed: Duration) -> u64 {
    let secs = elapsed.as_secs_f64();
    if secs > 0.0 {
        (records as f64 / secs) as u64
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// The JSON lines of the events `f` emits on this thread.
    fn capture(f: impl FnOnce()) -> Vec<serde_json::Value> {
        let buf = Arc::new(Mutex::new(Vec::<u8>::new()));
        let writer = {
            let buf = buf.clone();
            move || Writer(buf.clone())
        };
        let sub = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::INFO)
            .with_writer(writer)
            .finish();
        tracing::subscriber::with_default(sub, f);
        let text = String::from_utf8(buf.lock().unwrap().clone()).unwrap();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    struct Writer(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Writer {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// Progress comes at most once a second, with the records replayed so
    /// far (from the start, not the sequence), the total and a rate.
    #[test]
    fn progress_is_logged_at_most_once_a_second() {
        let events = capture(|| {
            let mut p = ReplayProgress::start(100, 1100);
            // Within the first second: nothing.
            p.at(200);
            p.last_event -= Duration::from_secs(2);
            p.started -= Duration::from_secs(2);
            p.at(500);
            // Right after one: nothing.
            p.at(600);
            p.end(1000);
        });
        let msgs: Vec<&str> = events
            .iter()
            .map(|e| e["fields"]["message"].as_str().unwrap())
            .collect();
        assert_eq!(
            msgs,
            [
                "replaying the log into the index",
                "replay progress",
                "replay done"
            ],
            "{events:?}"
        );
        let f = |i: usize| &events[i]["fields"];
        assert_eq!(f(0)["records"], 1000);
        assert_eq!(f(0)["from"], 101);
        assert_eq!(f(1)["replayed"], 400);
        assert_eq!(f(1)["total"], 1000);
        let rate = f(1)["rate"].as_u64().unwrap();
        assert!((150..=200).contains(&rate), "{rate}");
        assert_eq!(f(2)["replayed"], 1000);
        assert!(f(2)["elapsed_ms"].as_u64().unwrap() >= 2000);
        assert!(events.iter().all(|e| e["level"] == "INFO"));
    }
}
