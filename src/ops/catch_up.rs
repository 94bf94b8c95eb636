//! A replica's catch-up from far behind, before it serves.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};
use crate::format::record;

/// A replica's catch-up from far behind, before it serves: the source's
/// records are appended to the log as they arrive (checked: envelope,
/// checksum, sequence) while a second thread applies them to the index
/// with the replay of an open ([`crate::ops::recovery::replay_upto`]: sorted
/// batches on two threads; docs/BENCHMARKS.md has the rate), instead of
/// one group commit per batch. Nothing reads the store meanwhile. A crash
/// leaves a log longer than the index, which the next open replays.
pub struct CatchUp {
    store: crate::store::Store,
    /// The next sequence to append.
    next: u64,
}

/// Records appended before the replaying thread starts a replay (fewer
/// only at the end).
const CATCH_UP_REPLAY_MIN: u64 = 50_000;

impl CatchUp {
    /// Opens the (closed) replica database at `path`, replaying what its
    /// index lacks.
    pub fn open(path: &std::path::Path, so: &crate::store::StoreOptions) -> Result<CatchUp> {
        let store = crate::store::Store::open(
            path,
            &crate::store::StoreOptions {
                create_if_missing: false,
                ..so.clone()
            },
        )?;
        crate::ops::recovery::replay(&store, |_, _| {})?;
        let next = store.last_log_seq()? + 1;
        Ok(CatchUp { store, next })
    }

    pub fn store(&self) -> &crate::store::Store {
        &self.store
    }

    /// The next sequence the log takes.
    pub fn next_seq(&self) -> u64 {
        self.next
    }

    /// Appends the batches `next_batch` returns, until `None` (each must
    /// continue the log; one that fails its checks ends the catch-up with
    /// `Corruption`, nothing of it appended), while a second thread
    /// replays them into the index; then applies the rest, makes it
    /// durable and closes the store. Returns the last sequence applied.
    pub fn run(self, mut next_batch: impl FnMut() -> Option<Vec<Vec<u8>>>) -> Result<u64> {
        let CatchUp { store, mut next } = self;
        let appended = AtomicU64::new(next - 1);
        let (tick, ticks) = crossbeam_channel::bounded::<()>(1);
        let store = &store;
        let result = std::thread::scope(|s| -> Result<()> {
            let appended = &appended;
            let replayer = s.spawn(move || -> Result<()> {
                let mut applied = store.applied_seq()?;
                loop {
                    let more = ticks.recv().is_ok();
                    let upto = appended.load(Ordering::Acquire);
                    if upto > applied && (upto - applied >= CATCH_UP_REPLAY_MIN || !more) {
                        crate::ops::recovery::replay_upto(store, upto, |_, _| {})?;
                        applied = upto;
                    }
                    if !more {
                        return Ok(());
                    }
                }
            });
            let mut appending = Ok(());
            while let Some(batch) = next_batch() {
                if let Err(e) = append(store, &mut next, &batch) {
                    appending = Err(e);
                    break;
                }
                appended.store(next - 1, Ordering::Release);
                // A replay in progress picks the rest up at its next round.
                let _ = tick.try_send(());
            }
            drop(tick);
            let replayed = replayer.join().unwrap_or_else(|_| {
                Err(Error::corrupt("catch-up", "the replaying thread panicked"))
            });
            appending.and(replayed)
        });
        // What was appended is applied (or replayed at the next open).
        result?;
        store.sync_log()?;
        store.flush()?;
        Ok(next - 1)
    }
}

/// Appends `records` to `store`'s log at `next` (advanced past them),
/// after checking each one's envelope, checksum and sequence.
fn append(store: &crate::store::Store, next: &mut u64, records: &[Vec<u8>]) -> Result<()> {
    let mut batch = store.log_batch()?;
    for (i, v) in records.iter().enumerate() {
        let want = *next + i as u64;
        record::decode_record_ref(v, Some(want)).map_err(|e| {
            Error::corrupt(
                "replicated record",
                format!("record {want} from the source: {e}"),
            )
        })?;
        batch.put(want, v);
    }
    store.write_log(batch, false)?;
    crate::sys::failpoint::crash_point("catch_up::append");
    *next += records.len() as u64;
    Ok(())
}
