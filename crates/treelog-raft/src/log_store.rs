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
use treelog::format::meta::{self, RaftLogId, RaftVote};
use treelog::Durability;
use treelog::Treelog;

use crate::metrics::RaftMetrics;
use crate::types::{
    decode_entry, encode_entry, entry_log_id, from_meta_id, from_meta_vote, io_err, to_meta_id,
    to_meta_vote, Entry, LogId, StoreRef, TypeConfig, Vote,
};

/// Raft's log on the store, through its replication port: the entries
/// (an entry's index is its sequence) and Raft's own `meta` values (the
/// vote, the committed and purged log ids).
pub struct RaftLog<'a> {
    t: &'a Treelog,
}

impl<'a> RaftLog<'a> {
    pub fn new(t: &'a Treelog) -> RaftLog<'a> {
        RaftLog { t }
    }

    /// Appends entries (log values at their sequences), not synced:
    /// [`RaftLog::sync`] makes them durable. Returns their bytes.
    pub fn append(&self, entries: &[(u64, Vec<u8>)]) -> treelog::Result<u64> {
        self.t.replication().append(entries)
    }

    /// Makes every entry appended so far durable (one fsync).
    pub fn sync(&self) -> treelog::Result<()> {
        self.t.replication().sync()
    }

    /// Removes every entry after `seq` (synced; `None`: every entry).
    pub fn truncate_after(&self, seq: Option<u64>) -> treelog::Result<()> {
        self.t.replication().truncate_after(seq)
    }

    /// The entries with sequences in `from..to` that the log holds.
    pub fn entries(&self, from: u64, to: u64) -> treelog::Result<Vec<(u64, Vec<u8>)>> {
        self.t.replication().entries(from, to)
    }

    /// The last entry, if the log holds any.
    pub fn last(&self) -> treelog::Result<Option<(u64, Vec<u8>)>> {
        self.t.replication().last()
    }

    fn log_id(&self, key: &[u8]) -> treelog::Result<Option<RaftLogId>> {
        match self.t.replication().meta(key)? {
            Some(v) => Ok(Some(RaftLogId::decode("raft log id", &v)?)),
            None => Ok(None),
        }
    }

    pub fn vote(&self) -> treelog::Result<Option<RaftVote>> {
        match self.t.replication().meta(meta::RAFT_VOTE_KEY)? {
            Some(v) => Ok(Some(RaftVote::decode(&v)?)),
            None => Ok(None),
        }
    }

    /// Saves a vote, synced: Raft acts on it once this returns.
    pub fn save_vote(&self, v: &RaftVote) -> treelog::Result<()> {
        self.t
            .replication()
            .put_meta(meta::RAFT_VOTE_KEY, &v.encode(), true)
    }

    pub fn committed(&self) -> treelog::Result<Option<RaftLogId>> {
        self.log_id(meta::RAFT_COMMITTED_KEY)
    }

    /// Saves the committed log id through the WAL (made durable by the
    /// next sync): an open replays up to it.
    pub fn save_committed(&self, id: Option<&RaftLogId>) -> treelog::Result<()> {
        let r = self.t.replication();
        match id {
            Some(id) => r.put_meta(meta::RAFT_COMMITTED_KEY, &id.encode(), false),
            None => r.delete_meta(meta::RAFT_COMMITTED_KEY),
        }
    }

    pub fn purged(&self) -> treelog::Result<Option<RaftLogId>> {
        self.log_id(meta::RAFT_PURGED_KEY)
    }

    /// A store that becomes a cluster's first node: Raft reads nothing up
    /// to `upto`, its last record, and the index is at it (synced).
    pub fn init_purged(&self, upto: &RaftLogId) -> treelog::Result<()> {
        let r = self.t.replication();
        r.put_meta(meta::RAFT_PURGED_KEY, &upto.encode(), true)?;
        r.put_meta(meta::RAFT_APPLIED_KEY, &upto.encode(), true)
    }

    /// Raft reads nothing up to `id` any more: the log goes too, as far as
    /// durable cursors allow. Returns the log's new start.
    pub fn purge(&self, id: &RaftLogId) -> treelog::Result<u64> {
        self.t
            .replication()
            .purge(id.index, &[(meta::RAFT_PURGED_KEY, &id.encode())])
    }
}

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
        let log = RaftLog::new(&t);
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
        let t = self.t.get()?;
        Ok(RaftLog::new(&t)
            .vote()
            .map_err(io_err)?
            .map(|v| from_meta_vote(&v)))
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> io::Result<LogState<TypeConfig>> {
        let t = self.t.get()?;
        let log = RaftLog::new(&t);
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
        tokio::task::spawn_blocking(move || RaftLog::new(&t).save_vote(&v))
            .await
            .map_err(io::Error::other)?
            .map_err(io_err)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> io::Result<()> {
        let c = committed.map(|c| to_meta_id(&c));
        let t = self.t.get()?;
        RaftLog::new(&t).save_committed(c.as_ref()).map_err(io_err)
    }

    async fn read_committed(&mut self) -> io::Result<Option<LogId>> {
        let t = self.t.get()?;
        Ok(RaftLog::new(&t)
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
        let t = self.t.get()?;
        let bytes = RaftLog::new(&t).append(&values).map_err(io_err)?;
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
        tokio::task::spawn_blocking(move || RaftLog::new(&t).truncate_after(after))
            .await
            .map_err(io::Error::other)?
            .map_err(io_err)
    }

    async fn purge(&mut self, id: LogId) -> io::Result<()> {
        let t = self.t.get()?;
        let id: RaftLogId = to_meta_id(&id);
        tokio::task::spawn_blocking(move || RaftLog::new(&t).purge(&id))
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
                            .and_then(|t| RaftLog::new(&t).sync())
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
