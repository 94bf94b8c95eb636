//! Raft's log storage over the store's `log` column family: an entry's
//! index is its sequence, its value the version-2 envelope
//! (`types::encode_entry`).
//!
//! Group commit: `append` writes the entries through the WAL without
//! syncing and hands openraft's callback to the **log syncer**, a thread
//! that makes every append made since its last round durable with one
//! fsync and then calls their callbacks. openraft 0.10 goes on appending
//! meanwhile, so a round's fsync covers all the appends that arrived during
//! the previous one.

use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use openraft::storage::{IOFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::OptionalSend;
use treelog::format::meta::RaftLogId;
use treelog::Durability;

use crate::metrics::RaftMetrics;
use crate::types::{
    decode_entry, encode_entry, entry_log_id, from_meta_id, from_meta_vote, io_err, to_meta_id,
    to_meta_vote, Entry, LogId, StoreRef, TypeConfig, Vote,
};

/// The log storage of one node (cheap to clone: the log reader is a clone).
#[derive(Clone)]
pub struct LogStore {
    t: StoreRef,
    syncer: Arc<LogSyncer>,
    metrics: Option<Arc<RaftMetrics>>,
}

impl LogStore {
    pub fn new(
        t: StoreRef,
        durability: Durability,
        metrics: Option<Arc<RaftMetrics>>,
    ) -> io::Result<LogStore> {
        let syncer = Arc::new(LogSyncer::start(t.clone(), durability, metrics.clone())?);
        Ok(LogStore { t, syncer, metrics })
    }
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let from = match range.start_bound() {
        Bound::Included(x) => *x,
        Bound::Excluded(x) => x.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let to = match range.end_bound() {
        Bound::Included(x) => x.saturating_add(1),
        Bound::Excluded(x) => *x,
        Bound::Unbounded => u64::MAX,
    };
    (from, to)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> io::Result<Vec<Entry>> {
        let (from, to) = bounds(&range);
        // What Raft purged is not Raft's any more, though durable cursors
        // may keep it in the log for their subscribers.
        let t = self.t.get()?;
        let log = t.raft_log();
        let from = match log.purged().map_err(io_err)? {
            Some(p) => from.max(p.index + 1),
            None => from,
        };
        let values = log.entries(from, to).map_err(io_err)?;
        values
            .iter()
            .map(|(seq, v)| decode_entry(*seq, v))
            .collect()
    }

    async fn read_vote(&mut self) -> io::Result<Option<Vote>> {
        Ok(self
            .t
            .get()?
            .raft_log()
            .vote()
            .map_err(io_err)?
            .map(|v| from_meta_vote(&v)))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let t = self.t.get()?;
        let log = t.raft_log();
        let purged = log.purged().map_err(io_err)?.map(|p| from_meta_id(&p));
        let last = match log.last().map_err(io_err)? {
            Some((seq, v)) => Some(entry_log_id(seq, &v)?),
            None => None,
        };
        // What the log holds at or below the purge point is not Raft's
        // (durable cursors keep it for subscribers).
        let last = match (last, &purged) {
            (Some(l), Some(p)) if l.index <= p.index => Some(*p),
            (None, p) => *p,
            (l, _) => l,
        };
        Ok(LogState {
            last_purged_log_id: purged,
            last_log_id: last,
        })
    }

    async fn get_log_reader(&mut self) -> LogStore {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> io::Result<()> {
        let t = self.t.get()?;
        let v = to_meta_vote(vote);
        tokio::task::spawn_blocking(move || t.raft_log().save_vote(&v))
            .await
            .map_err(io::Error::other)?
            .map_err(io_err)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        let c = committed.map(|c| to_meta_id(&c));
        self.t
            .get()?
            .raft_log()
            .save_committed(c.as_ref())
            .map_err(io_err)
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        Ok(self
            .t
            .get()?
            .raft_log()
            .committed()
            .map_err(io_err)?
            .map(|c| from_meta_id(&c)))
    }

    async fn append<I>(&mut self, entries: I, callback: IOFlushed<TypeConfig>) -> io::Result<()>
    where
        I: IntoIterator<Item = Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let values = entries
            .into_iter()
            .map(|e| Ok((e.log_id.index, encode_entry(&e)?)))
            .collect::<io::Result<Vec<_>>>()?;
        let n = values.len() as u64;
        let bytes = self.t.get()?.raft_log().append(&values).map_err(io_err)?;
        if let Some(m) = &self.metrics {
            m.appended(n, bytes);
        }
        // The entries are readable now; durable when the syncer says so.
        self.syncer.flush(callback);
        Ok(())
    }

    async fn truncate_after(&mut self, last: Option<LogId>) -> io::Result<()> {
        let after = last.map(|l| l.index);
        let t = self.t.get()?;
        tracing::info!(after, "truncating the log's uncommitted tail");
        tokio::task::spawn_blocking(move || t.raft_log().truncate_after(after))
            .await
            .map_err(io::Error::other)?
            .map_err(io_err)
    }

    async fn purge(&mut self, id: LogId) -> io::Result<()> {
        let t = self.t.get()?;
        let id: RaftLogId = to_meta_id(&id);
        tokio::task::spawn_blocking(move || t.raft_purge(&id))
            .await
            .map_err(io::Error::other)?
            .map_err(io_err)?;
        Ok(())
    }
}

/// The thread that makes appended entries durable: one fsync for every
/// append that arrived since its last one, then their callbacks.
pub struct LogSyncer {
    tx: Option<crossbeam_channel::Sender<IOFlushed<TypeConfig>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LogSyncer {
    fn start(
        t: StoreRef,
        durability: Durability,
        metrics: Option<Arc<RaftMetrics>>,
    ) -> io::Result<LogSyncer> {
        let (tx, rx) = crossbeam_channel::unbounded::<IOFlushed<TypeConfig>>();
        let thread = std::thread::Builder::new()
            .name("treelog-raft-sync".into())
            .spawn(move || {
                // Once an fsync failed nothing after it is durable: every
                // later append fails too (openraft then stops the node).
                let mut failed: Option<String> = None;
                while let Ok(first) = rx.recv() {
                    let mut round = vec![first];
                    round.extend(rx.try_iter());
                    if failed.is_none() && durability == Durability::Sync {
                        let started = std::time::Instant::now();
                        match t
                            .get()
                            .map_err(treelog::Error::Io)
                            .and_then(|t| t.raft_log().sync())
                        {
                            Ok(()) => {
                                if let Some(m) = &metrics {
                                    m.synced(started.elapsed(), round.len());
                                }
                            }
                            Err(e) => {
                                tracing::error!(error = %e, "the Raft log's fsync failed");
                                failed = Some(e.to_string());
                            }
                        }
                    }
                    for cb in round {
                        match &failed {
                            None => cb.io_completed(Ok(())),
                            Some(why) => cb.io_completed(Err(io::Error::other(why.clone()))),
                        }
                    }
                }
            })?;
        Ok(LogSyncer {
            tx: Some(tx),
            thread: Some(thread),
        })
    }

    fn flush(&self, cb: IOFlushed<TypeConfig>) {
        if let Some(tx) = &self.tx {
            if let Err(e) = tx.send(cb) {
                e.into_inner()
                    .io_completed(Err(io::Error::other("the Raft log syncer stopped")));
            }
        }
    }
}

impl Drop for LogSyncer {
    fn drop(&mut self) {
        drop(self.tx.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
