//! The single writer: group commit of commands into the log and the index.
//!
//! One thread owns every mutation. It blocks for the first command, drains
//! more up to a budget, validates each against the index plus the group's
//! own earlier changes (the overlay), writes all of the group's log records
//! in one synced write, applies the index changes (without the WAL), publishes
//! the committed watermark, and replies to every caller. A failed log or
//! index write stops the writer for good: the callers of that group and every
//! later caller get [`Error::WriterStopped`]; nothing that is not durable is
//! acknowledged, and a restart recovers from the log.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crossbeam_channel::Receiver;
use rocksdb::WriteBatch;

use crate::command::Command;
use crate::engine::{Engine, EngineState, Outcome};
use crate::error::{Error, Result};
use crate::event::Record;
use crate::format::{self, record, DictSet};
use crate::index::Overlay;
use crate::store::{Store, CF_LOG};
use crate::watermark::Watermark;

/// Whether a group's log write is fsynced before it is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
pub enum Durability {
    /// fsync (the WAL) before acknowledging: acknowledged writes survive a
    /// power loss.
    #[default]
    Sync,
    /// No fsync: acknowledged writes survive a process crash (they are in
    /// the OS page cache) but not a power loss. For tests and bulk loads.
    None,
}

#[derive(Debug, Clone)]
pub struct WriterConfig {
    pub durability: Durability,
    /// Most commands in one group.
    pub max_group_commands: usize,
    /// Most (approximate) command bytes in one group.
    pub max_group_bytes: usize,
}

impl Default for WriterConfig {
    fn default() -> Self {
        WriterConfig {
            durability: Durability::Sync,
            max_group_commands: 1024,
            max_group_bytes: 4 << 20,
        }
    }
}

/// Counters of the writer, for tests, the CLI and metrics.
#[derive(Debug, Default)]
pub struct WriterStats {
    pub groups: AtomicU64,
    pub commands: AtomicU64,
    pub records: AtomicU64,
    pub max_group_commands: AtomicU64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct WriterStatsSnapshot {
    pub groups: u64,
    pub commands: u64,
    pub records: u64,
    pub max_group_commands: u64,
}

impl WriterStats {
    pub fn snapshot(&self) -> WriterStatsSnapshot {
        WriterStatsSnapshot {
            groups: self.groups.load(Ordering::Relaxed),
            commands: self.commands.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            max_group_commands: self.max_group_commands.load(Ordering::Relaxed),
        }
    }
}

/// State shared by the writer and the readers.
pub struct Shared {
    pub store: Store,
    /// The dictionaries readers decode with. The writer publishes a new
    /// snapshot *before* it writes index entries that use a new id.
    /// Readers load it without a shared lock (a read-write lock here was
    /// the most contended cache line of stat-heavy loads).
    pub dicts: arc_swap::ArcSwap<DictSet>,
    /// Highest sequence whose record is durable and applied to the index.
    pub committed: Watermark,
    /// Why the writer stopped, once it has.
    pub failure: Mutex<Option<String>>,
    pub stats: WriterStats,
    /// First sequence still in the log (raised by retention).
    pub log_start: AtomicU64,
    /// Bytes of record values in the log (approximate between a retention
    /// pass and the next group, which persists it).
    pub log_bytes: AtomicU64,
    /// Durable named cursors (mirrors `meta` `cursor/*`).
    pub cursors: Mutex<std::collections::BTreeMap<String, crate::retention::CursorState>>,
    /// Serialises retention passes.
    pub retention_lock: Mutex<()>,
    /// The latest committed records, decoded, for caught-up subscribers.
    pub tail: crate::tailcache::TailCache,
    /// Prometheus metrics; `None` when disabled.
    pub metrics: Option<Arc<crate::metrics::Metrics>>,
    /// The readers' cache of index entries; the writer updates it after
    /// each group's index write.
    pub read_cache: crate::readcache::IndexCache,
}

impl Shared {
    /// The current dictionaries, without touching a shared reference count.
    pub fn dicts(&self) -> arc_swap::Guard<Arc<DictSet>> {
        self.dicts.load()
    }

    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// A command and where to send its result (the record's sequence number).
pub struct Request {
    pub cmd: Command,
    pub reply: tokio::sync::oneshot::Sender<Result<u64>>,
    pub enqueued: Instant,
}

pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

pub struct Writer {
    shared: Arc<Shared>,
    engine: Engine,
    cfg: WriterConfig,
    last_seq: u64,
    last_time_ms: u64,
    replier: Option<crossbeam_channel::Sender<Vec<Reply>>>,
    cache: std::cell::RefCell<crate::index::ReadCache>,
}

impl Writer {
    pub fn new(
        shared: Arc<Shared>,
        state: EngineState,
        last_seq: u64,
        last_time_ms: u64,
        cfg: WriterConfig,
    ) -> Writer {
        Writer {
            shared,
            engine: Engine::new(state),
            cfg,
            last_seq,
            last_time_ms,
            replier: None,
            cache: std::cell::RefCell::new(crate::index::ReadCache::new(1 << 20)),
        }
    }

    /// Runs until every sender of `rx` is gone.
    pub fn run(mut self, rx: Receiver<Request>) {
        let (reply_tx, reply_rx) = crossbeam_channel::unbounded();
        let replier = std::thread::Builder::new()
            .name("treelog-replier".into())
            .spawn(move || replier(reply_rx))
            .ok();
        if replier.is_some() {
            self.replier = Some(reply_tx);
        }
        let mut group: Vec<Request> = Vec::with_capacity(self.cfg.max_group_commands);
        while let Ok(first) = rx.recv() {
            let mut bytes = first.cmd.approx_bytes();
            group.push(first);
            while group.len() < self.cfg.max_group_commands && bytes < self.cfg.max_group_bytes {
                match rx.try_recv() {
                    Ok(r) => {
                        bytes += r.cmd.approx_bytes();
                        group.push(r);
                    }
                    Err(_) => break,
                }
            }
            self.commit_group(&mut group);
            debug_assert!(group.is_empty());
        }
        // Let the replier drain and stop before the writer reports done.
        self.replier.take();
        if let Some(h) = replier {
            let _ = h.join();
        }
    }

    fn fail(&self, why: String) {
        let mut f = self
            .shared
            .failure
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if f.is_none() {
            *f = Some(why);
        }
    }

    fn commit_group(&mut self, group: &mut Vec<Request>) {
        if let Some(why) = self.shared.failure() {
            for r in group.drain(..) {
                let _ = r.reply.send(Err(Error::WriterStopped(why.clone())));
            }
            return;
        }
        let n = group.len() as u64;
        let t_group = Instant::now();
        if let Some(m) = &self.shared.metrics {
            for r in group.iter() {
                m.queue_wait
                    .observe(t_group.saturating_duration_since(r.enqueued).as_secs_f64());
            }
        }
        let time_ms = now_ms().max(self.last_time_ms);
        let dicts_before = (
            self.engine.state.dicts.owners.len(),
            self.engine.state.dicts.groups.len(),
        );
        let db_index = self.shared.store.index();
        let index = crate::index::CachedIndex {
            base: &db_index,
            cache: &self.cache,
        };
        let mut overlay = Overlay::new(&index);
        let mut batch = WriteBatch::default();
        let mut results: Vec<Result<u64>> = Vec::with_capacity(group.len());
        let mut seq = self.last_seq;
        let mut group_bytes = 0u64;
        let mut group_records: Vec<Arc<crate::event::SharedRecord>> = Vec::new();
        let mut fatal: Option<String> = None;
        let log_cf = match self.shared.store.cf(CF_LOG) {
            Ok(cf) => cf,
            Err(e) => {
                // Unreachable in practice: the CF is checked at open.
                self.fail(e.to_string());
                for r in group.drain(..) {
                    let _ = r.reply.send(Err(Error::WriterStopped(e.to_string())));
                }
                return;
            }
        };
        for req in group.iter() {
            match self.engine.execute(&req.cmd, &mut overlay, time_ms) {
                Ok(Ok(Outcome::Events(events))) => {
                    seq += 1;
                    let rec = Record {
                        seq,
                        time_ms,
                        events,
                    };
                    match record::encode_record(&rec) {
                        Ok(v) => {
                            group_bytes += v.len() as u64;
                            batch.put_cf(log_cf, format::log_key(seq), v);
                            results.push(Ok(seq));
                            group_records.push(Arc::new(rec.into()));
                        }
                        Err(e) => {
                            fatal = Some(format!("encoding record {seq}: {e}"));
                            break;
                        }
                    }
                }
                // A no-op changes nothing; its token is the state it saw.
                Ok(Ok(Outcome::NoOp)) => results.push(Ok(seq)),
                Ok(Err(e)) => results.push(Err(e)),
                Err(e) => {
                    // The overlay may hold half a command: nothing of this
                    // group may be written.
                    fatal = Some(format!("applying events: {e}"));
                    break;
                }
            }
        }
        let records = seq - self.last_seq;
        let t_validated = Instant::now();
        if fatal.is_none() && records > 0 {
            let sync = self.cfg.durability == Durability::Sync;
            if let Err(e) = self.shared.store.write_log(batch, sync) {
                fatal = Some(format!("log write failed: {e}"));
            }
        }
        let t_logged = Instant::now();
        if fatal.is_none() && records > 0 {
            let dicts_after = (
                self.engine.state.dicts.owners.len(),
                self.engine.state.dicts.groups.len(),
            );
            if dicts_after != dicts_before {
                let snapshot = Arc::new(self.engine.state.dicts.clone());
                self.shared.dicts.store(snapshot);
            }
            let log_bytes = self
                .shared
                .log_bytes
                .fetch_add(group_bytes, Ordering::AcqRel)
                + group_bytes;
            // The writes are about to be the committed index: the cache
            // takes them now (if the write fails the writer stops anyway).
            let writes = overlay.take_writes();
            self.cache.borrow_mut().absorb(&writes);
            match self.shared.store.write_index(&writes, seq, Some(log_bytes)) {
                // Readers' cache after RocksDB: see `readcache` on why.
                Ok(()) => self.shared.read_cache.apply(&writes),
                // The records are durable and will be replayed on restart,
                // but this process can no longer serve a consistent index.
                Err(e) => fatal = Some(format!("index write failed: {e}")),
            }
        }
        drop(overlay);
        let t_applied = Instant::now();
        if let Some(why) = fatal {
            if let Some(m) = &self.shared.metrics {
                m.writer_failed.set(1);
            }
            self.fail(why.clone());
            for r in group.drain(..) {
                let _ = r.reply.send(Err(Error::WriterStopped(why.clone())));
            }
            return;
        }
        self.last_seq = seq;
        self.last_time_ms = time_ms;
        // Subscribers woken by the watermark find the records in memory.
        self.shared.tail.extend(group_records);
        self.shared.committed.publish(seq);
        let st = &self.shared.stats;
        st.groups.fetch_add(1, Ordering::Relaxed);
        st.commands.fetch_add(n, Ordering::Relaxed);
        st.records.fetch_add(records, Ordering::Relaxed);
        st.max_group_commands.fetch_max(n, Ordering::Relaxed);
        if let Some(m) = &self.shared.metrics {
            let (hits, misses) = self.cache.borrow_mut().take_counts();
            m.writer_cache_hits.inc_by(hits);
            m.writer_cache_misses.inc_by(misses);
            m.validate.observe((t_validated - t_group).as_secs_f64());
            if records > 0 {
                m.log_write.observe((t_logged - t_validated).as_secs_f64());
                m.index_apply.observe((t_applied - t_logged).as_secs_f64());
            }
            m.group_commands.observe(n as f64);
            m.group_bytes.observe(group_bytes as f64);
            m.last_seq.set(seq as i64);
            m.applied_seq.set(seq as i64);
            m.log_bytes
                .set(self.shared.log_bytes.load(Ordering::Relaxed) as i64);
            let start = self.shared.log_start.load(Ordering::Relaxed);
            m.log_records.set((seq + 1).saturating_sub(start) as i64);
            let now = Instant::now();
            for (req, res) in group.iter().zip(&results) {
                let outcome = match res {
                    Ok(_) => "ok",
                    Err(e) => e.kind().as_str(),
                };
                m.ops.with_label_values(&[req.cmd.name(), outcome]).inc();
                m.end_to_end
                    .observe(now.saturating_duration_since(req.enqueued).as_secs_f64());
            }
        }
        // Waking the callers costs a syscall each; a separate thread does it
        // so that the writer can start the next group meanwhile. The group is
        // committed and published already: nothing here can fail it.
        let replies: Vec<Reply> = group.drain(..).map(|r| r.reply).zip(results).collect();
        match &self.replier {
            Some(tx) => {
                if let Err(e) = tx.send(replies) {
                    for (reply, res) in e.into_inner() {
                        let _ = reply.send(res);
                    }
                }
            }
            None => {
                for (reply, res) in replies {
                    let _ = reply.send(res);
                }
            }
        }
    }
}

type Reply = (tokio::sync::oneshot::Sender<Result<u64>>, Result<u64>);

/// Sends replies handed over by the writer until the writer is gone.
fn replier(rx: Receiver<Vec<Reply>>) {
    while let Ok(batch) = rx.recv() {
        for (reply, res) in batch {
            let _ = reply.send(res);
        }
    }
}
