//! The later stages of group commit, in log order.
//!
//! The **syncer** makes appended groups durable with one fsync for all the
//! groups that arrived since its last one; the **applier** writes their
//! index changes while that fsync runs; once both are done, the syncer
//! publishes them (a snapshot of the index for readers, the readers'
//! cache, the tail, the committed watermark: see [`Publication`]) and
//! replies. Each stage is its own thread, or both run inline when a thread
//! could not be started. A third thread grows the readers' cache when a
//! publish finds it full.
//!
//! Only a publish makes anything visible to readers, and only after the
//! fsync: readers read RocksDB at the published snapshot, so a round's
//! index changes, in RocksDB before their fsync has finished, stay unseen
//! until it has. Nor can they reach the disk ahead of their log records:
//! the index is written without the WAL, and before RocksDB installs a
//! flushed table it syncs the WALs that the flush's memtable switch closed
//! (`SyncClosedWals` in RocksDB's `db_impl_compaction_flush.cc`), which
//! hold those records.
//!
//! [`Publication`]: crate::read::publication::Publication

use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use crate::commit::config::Durability;
use crate::commit::role::{Appended, Core};
use crate::commit::shared::Shared;

/// Groups handed to the pipeline and not yet published (or refused): the
/// writer commits a small group inline only when none is, and drains the
/// pipeline before it replaces the index under it.
#[derive(Default)]
pub(crate) struct InFlight {
    groups: Mutex<u64>,
    drained: Condvar,
}

impl InFlight {
    fn lock(&self) -> std::sync::MutexGuard<'_, u64> {
        self.groups.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn add(&self, n: u64) {
        *self.lock() += n;
    }

    pub(crate) fn done(&self, n: u64) {
        let mut g = self.lock();
        assert!(*g >= n, "more groups done ({n}) than in flight ({})", *g);
        *g -= n;
        if *g == 0 {
            self.drained.notify_all();
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        *self.lock() == 0
    }

    /// Waits until every group handed over is published or refused.
    pub(crate) fn wait_drained(&self) {
        let mut g = self.lock();
        while *g > 0 {
            g = self.drained.wait(g).unwrap_or_else(|p| p.into_inner());
        }
    }
}

/// The running syncer, applier and cache-growing threads.
pub(crate) struct Pipeline {
    /// Takes appended groups to the syncer.
    pub(crate) tx: crossbeam_channel::Sender<Appended>,
    pub(crate) threads: Vec<std::thread::JoinHandle<()>>,
    /// Wakes the cache-growing thread, for the writer's inline commits.
    pub(crate) grower: Option<crossbeam_channel::Sender<()>>,
}

/// Groups the writer may have appended ahead of the syncer.
const SYNC_QUEUE: usize = 64;

/// One stage of the pipeline (or all of them, inline).
pub(crate) struct Committer {
    shared: Arc<Shared>,
    durability: Durability,
    /// Set once a sync or index write failed: nothing after it is committed.
    pub(crate) failed: Option<String>,
    /// Wakes the thread that grows the readers' cache; `None`: grow inline.
    pub(crate) grower: Option<crossbeam_channel::Sender<()>>,
}

impl Committer {
    pub(crate) fn new(shared: Arc<Shared>, durability: Durability) -> Committer {
        Committer {
            shared,
            durability,
            failed: None,
            grower: None,
        }
    }

    /// Starts the syncer and applier threads; `None` if either could not be
    /// started (the writer then commits inline). Also returns a way to wake
    /// the cache-growing thread, for the writer's own inline commits.
    ///
    /// The syncer hands each round (the groups one fsync covers) to the
    /// applier *before* its fsync, so that the index write and the fsync
    /// overlap; the applier hands the round back once it is written, and
    /// the syncer, whose fsync has returned by then, publishes it and takes
    /// its groups off `in_flight`.
    pub(crate) fn spawn(
        shared: &Arc<Shared>,
        durability: Durability,
        in_flight: &Arc<InFlight>,
    ) -> Option<Pipeline> {
        let (sync_tx, sync_rx) = crossbeam_channel::bounded::<Appended>(SYNC_QUEUE);
        // At most one round is at the applier: the syncer waits for it
        // before it takes the next.
        let (round_tx, round_rx) = crossbeam_channel::bounded::<Vec<Appended>>(1);
        // The round back, with why its index write failed, if it did.
        let (written_tx, written_rx) =
            crossbeam_channel::bounded::<(Vec<Appended>, Option<String>)>(1);
        // Grows the readers' cache when the syncer asks (one wake-up
        // pending at most); stops when its senders (the syncer's and the
        // writer's) are gone.
        let (grow_tx, grow_rx) = crossbeam_channel::bounded::<()>(1);
        let mut threads = Vec::new();
        let cache = shared.clone();
        let g = std::thread::Builder::new()
            .name("treelog-cache".into())
            .spawn(move || {
                for () in grow_rx {
                    cache.publication().cache().grow();
                }
            });
        let mut syncer = Committer::new(shared.clone(), durability);
        let mut writer_grower = None;
        if let Ok(g) = g {
            writer_grower = Some(grow_tx.clone());
            syncer.grower = Some(grow_tx);
            threads.push(g);
        }
        let mut applier = Committer::new(shared.clone(), durability);
        let a = std::thread::Builder::new()
            .name("treelog-applier".into())
            .spawn(move || {
                while let Ok(groups) = round_rx.recv() {
                    applier.write_index(&groups);
                    // The syncer stops only once it has its last round back.
                    if written_tx.send((groups, applier.failed.clone())).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        let in_flight = in_flight.clone();
        let s = std::thread::Builder::new()
            .name("treelog-syncer".into())
            .spawn(move || {
                while let Ok(first) = sync_rx.recv() {
                    let mut groups = vec![first];
                    groups.extend(sync_rx.try_iter());
                    let records = groups.iter().map(|g| g.record_count).sum();
                    let n = groups.len() as u64;
                    match round_tx.send(groups) {
                        Ok(()) => {
                            syncer.sync(records);
                            // Publishing here, on the thread that the fsync
                            // returned to, spares every round a wake-up of
                            // another thread (tens of microseconds on a busy
                            // machine) between its fsync and its replies;
                            // the next fsync waits for the publish, but
                            // covers the groups appended meanwhile.
                            match written_rx.recv() {
                                Ok((groups, failed)) => {
                                    if let Some(why) = failed {
                                        syncer.failed.get_or_insert(why);
                                    }
                                    syncer.publish(groups);
                                }
                                // The applier died with the round (its
                                // callers see their reply dropped): nothing
                                // after it may be committed.
                                Err(_) => {
                                    let why = "the index writer stopped".to_owned();
                                    syncer.shared.fail(why.clone());
                                    syncer.failed.get_or_insert(why);
                                }
                            }
                        }
                        // The applier is gone (a panic: it stops only when
                        // this sender is dropped): commit here.
                        Err(e) => syncer.commit(e.into_inner()),
                    }
                    in_flight.done(n);
                }
            });
        match s {
            Ok(s) => {
                threads.extend([s, a]);
                Some(Pipeline {
                    tx: sync_tx,
                    threads,
                    grower: writer_grower,
                })
            }
            // The applier stops once its senders (moved into the failed
            // closure) are dropped.
            Err(_) => {
                let _ = a.join();
                None
            }
        }
    }

    /// Every stage inline, in the same order as the threads.
    pub(crate) fn commit(&mut self, groups: Vec<Appended>) {
        self.write_index(&groups);
        self.sync(groups.iter().map(|g| g.record_count).sum());
        self.publish(groups);
    }

    /// Makes every group appended so far durable (`records` of them since
    /// the last sync): one fsync covers them all.
    pub(crate) fn sync(&mut self, records: u64) {
        if self.failed.is_none() && self.shared.failure().is_some() {
            // A later stage failed: syncing more is pointless.
            self.failed = self.shared.failure();
        }
        if self.failed.is_some() || records == 0 || self.durability != Durability::Sync {
            return;
        }
        let t = Instant::now();
        #[cfg(test)]
        if self
            .shared
            .inject
            .sync
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.failed = Some("injected fsync failure".into());
            return;
        }
        match self.shared.store().sync_log() {
            Ok(()) => {
                if let Some(m) = self.shared.metrics() {
                    m.write.wal_sync.observe(t.elapsed().as_secs_f64());
                }
            }
            Err(e) => self.failed = Some(format!("log sync failed: {e}")),
        }
    }

    /// Writes the groups' index changes (newer after older) and their meta
    /// with the new `applied_seq`, in one batch, which readers do not see
    /// until [`Committer::publish`].
    pub(crate) fn write_index(&mut self, groups: &[Appended]) {
        let Some(last) = groups.last() else {
            return;
        };
        let records: u64 = groups.iter().map(|g| g.record_count).sum();
        if self.failed.is_some() || records == 0 {
            return;
        }
        let t = Instant::now();
        #[cfg(test)]
        if self
            .shared
            .inject
            .index_write
            .load(std::sync::atomic::Ordering::SeqCst)
        {
            self.failed = Some("injected index write failure".into());
            return;
        }
        let bytes: u64 = groups.iter().map(|g| g.bytes).sum();
        let store = self.shared.store();
        let mut b = store.index_batch();
        let written = groups
            .iter()
            .try_for_each(|g| {
                store.add_index_writes(&mut b, &g.writes)?;
                g.meta
                    .iter()
                    .try_for_each(|(k, v)| store.add_meta_write(&mut b, k, v))
            })
            .and_then(|()| {
                let log_bytes = self.shared.retention().add_log_bytes(bytes);
                store.write_index_batch(b, last.seq, Some(log_bytes))
            });
        match written {
            Ok(()) => {
                if let Some(m) = self.shared.metrics() {
                    m.write.index_apply.observe(t.elapsed().as_secs_f64());
                }
            }
            // The records will be durable and replayed on restart, but this
            // process can no longer serve a consistent index.
            Err(e) => self.failed = Some(format!("index write failed: {e}")),
        }
    }

    /// Commits `groups` (in log order), durable and in the index now: a new
    /// snapshot for readers, the readers' cache, the tail, the watermark,
    /// then the replies. Refuses them all if a stage failed.
    pub(crate) fn publish(&mut self, groups: Vec<Appended>) {
        let Some(last) = groups.last() else {
            return;
        };
        let seq = last.seq;
        let records: u64 = groups.iter().map(|g| g.record_count).sum();
        if let Some(why) = &self.failed {
            self.shared.fail(why.clone());
            // Their records are in the WAL, maybe synced: a restart may
            // well replay them.
            for g in groups {
                Core::refuse_all(g.requests, why, g.record_count > 0);
            }
            return;
        }
        let shared = &self.shared;
        let publication = shared.publication();
        let mut groups = groups;
        let evicted = if records > 0 {
            let mut decoded = Vec::with_capacity(records as usize);
            for g in &mut groups {
                decoded.append(&mut g.records);
            }
            Some(publication.publish(
                shared.store().snapshot(),
                seq,
                groups.iter().map(|g| &*g.writes),
                decoded,
            ))
        } else {
            publication.advance(seq);
            None
        };
        let commands: usize = groups.iter().map(|g| g.requests.len()).sum();
        let st = shared.stats();
        use std::sync::atomic::Ordering::Relaxed;
        st.groups.fetch_add(groups.len() as u64, Relaxed);
        st.commands.fetch_add(commands as u64, Relaxed);
        st.records.fetch_add(records, Relaxed);
        for g in &groups {
            st.max_group_commands
                .fetch_max(g.requests.len() as u64, Relaxed);
        }
        if let Some(m) = shared.metrics() {
            let r = shared.retention();
            m.log.committed(seq, r.log_start(), r.log_bytes());
        }
        // The groups are committed and published: nothing here can fail
        // them. (Waking a caller is a syscall each; the syncer's next fsync
        // runs meanwhile.) Per-command counts are gathered while replying
        // and added after, one labelled-counter lookup per kind of command
        // and outcome rather than per command.
        let now = Instant::now();
        let mut counts: Vec<(&'static str, &'static str, u64)> = Vec::new();
        for g in groups {
            for (req, res) in g.requests.into_iter().zip(g.results) {
                if let Some(m) = shared.metrics() {
                    let outcome = match &res {
                        Ok(_) => "ok",
                        Err(e) => e.kind().as_str(),
                    };
                    let name = req.work.name();
                    match counts.iter_mut().find(|c| c.0 == name && c.1 == outcome) {
                        Some(c) => c.2 += 1,
                        None => counts.push((name, outcome, 1)),
                    }
                    m.write
                        .end_to_end
                        .observe(now.saturating_duration_since(req.enqueued).as_secs_f64());
                }
                let _ = req.reply.send(res);
            }
        }
        if let Some(m) = shared.metrics() {
            for (name, outcome, n) in counts {
                m.write.ops.with_label_values(&[name, outcome]).inc_by(n);
            }
        }
        // Frees the records the tail let go, now that nobody waits.
        drop(evicted);
        // Room for the next groups' entries, made beside this thread (or
        // here, now that nobody waits on us, if that thread is missing).
        let cache = publication.cache();
        if cache.wants_growth() {
            match self.grower.as_ref().map(|g| g.try_send(())) {
                // Woken, or already going to wake.
                Some(Ok(()) | Err(crossbeam_channel::TrySendError::Full(()))) => {}
                _ => cache.grow(),
            }
        }
    }
}
