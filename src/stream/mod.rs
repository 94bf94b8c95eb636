//! Change streams: resumable, filtered subscriptions to the log, with an
//! optional consistent snapshot first.
//!
//! A [`Subscription`] reads the `log` column family through its own
//! iterator, in batches, up to the committed watermark; it never makes the
//! writer wait (the writer only bumps the watermark). When caught up it
//! parks on the watermark (a condition variable, or a `watch` for async
//! callers): no polling. Per-subscription memory is bounded by one batch of
//! records, or while a snapshot streams by one page of children per level
//! of the directory being walked. A snapshot is produced a page at a time
//! as the consumer reads it: a subscriber that stops reading holds no
//! thread and makes nothing more.
//!
//! Snapshots are exact: a RocksDB snapshot sees the index and `applied_seq`
//! of the same group (they are one write batch), so the snapshot at `S`
//! followed by the records from `S + 1` misses and repeats nothing.
//!
//! With a subtree filter, every event is tagged with a [`Scope`]: inside the
//! subtree, moved in, moved out, or about an ancestor (deleted or renamed,
//! which removes or replaces the whole subtree). A directory that moves in
//! brings descendants the stream cannot list from the log; subscriptions
//! that started from a snapshot then get a *resync*: a fresh snapshot of the
//! subtree at the current sequence (marked `resync: true`, meaning "replace
//! your model"), followed by the records after it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bytestr::ByteString;
use crate::commit::shared::Shared;
use crate::engine;
use crate::error::{Error, ErrorKind, Result};
use crate::read::view::PublishedView;
use crate::read::walk::TreeWalk;

pub use crate::read::memo::SharedRecord;
pub use treelog_proto::stream::*;

/// Records read per batch: bounds per-subscription memory.
const BATCH: u64 = 256;
/// A subscription that scanned this many records without a match reports
/// its position.
const PROGRESS_EVERY: u64 = 65_536;
/// Children read per page while a snapshot walks a directory.
const SNAPSHOT_PAGE: usize = 256;

/// A live subscription. Obtain one from [`crate::Treelog::subscribe`].
pub struct Subscription {
    shared: Arc<Shared>,
    filter: Arc<Filter>,
    resync_on_move_in: bool,
    /// Next log sequence to read.
    next_seq: u64,
    /// Highest sequence whose effects were put in `buf` or reported.
    reported: u64,
    /// The position of the last item handed to the caller.
    delivered: u64,
    buf: VecDeque<StreamItem>,
    /// Reused for reads from the tail cache.
    slice: crate::read::tail_cache::Slice,
    snapshot: Option<Box<SnapshotWalk>>,
    cursor: Option<String>,
}

impl Subscription {
    pub(crate) fn new(
        shared: Arc<Shared>,
        filter: Filter,
        from: StartFrom,
        resync_on_move_in: Option<bool>,
        cursor: Option<String>,
    ) -> Result<Subscription> {
        let filter = Arc::new(filter.canonical()?);
        let committed = shared.committed();
        let log_start = shared.retention().log_start();
        let mut s = Subscription {
            shared,
            filter,
            resync_on_move_in: resync_on_move_in.unwrap_or(from == StartFrom::Snapshot),
            next_seq: committed + 1,
            reported: committed,
            delivered: committed,
            buf: VecDeque::new(),
            slice: Default::default(),
            snapshot: None,
            cursor,
        };
        match from {
            StartFrom::Now => {}
            StartFrom::Seq(n) => {
                let n = n.max(1);
                if n < log_start {
                    return Err(Error::Compacted {
                        requested: n,
                        first_available: log_start,
                    });
                }
                s.next_seq = n;
                s.reported = n - 1;
                s.delivered = n - 1;
            }
            StartFrom::Snapshot => s.start_snapshot(false),
        }
        Ok(s)
    }

    /// The last sequence whose item was handed out (read-ahead not
    /// counted): once the caller processed it, resume with
    /// `StartFrom::Seq(position() + 1)`.
    pub fn position(&self) -> u64 {
        self.delivered
    }

    fn hand_out(&mut self, item: StreamItem) -> StreamItem {
        if let Some(p) = item.position() {
            self.delivered = p;
        }
        item
    }

    /// True while a snapshot (initial or resync) is being streamed.
    pub fn is_snapshotting(&self) -> bool {
        self.snapshot.is_some()
    }

    /// When the RocksDB snapshot this subscription's snapshot (or resync)
    /// reads was taken; `None` outside a snapshot. A snapshot keeps every
    /// version it sees from compaction, so a server bounds how long a
    /// client may take to read one.
    pub fn snapshot_taken(&self) -> Option<Instant> {
        self.snapshot.as_ref().map(|w| w.taken)
    }

    /// The durable cursor this subscription follows, if any.
    pub fn cursor(&self) -> Option<&str> {
        self.cursor.as_deref()
    }

    /// Starts a snapshot at the committed index as it is now; its items
    /// are made as the consumer asks for them.
    fn start_snapshot(&mut self, resync: bool) {
        let prefix = self.filter.prefix.clone().unwrap_or_else(|| "/".into());
        self.snapshot = Some(Box::new(SnapshotWalk {
            // The committed index (RocksDB's latest state may hold a round
            // whose fsync has not finished).
            snap: self.shared.publication().view(),
            taken: Instant::now(),
            prefix,
            resync,
            seq: 0,
            step: WalkStep::Start,
            walk: None,
        }));
    }

    /// The snapshot's next item. The snapshot ends (and the log resumes
    /// after it) with its `SnapshotEnd`, or with an error.
    fn next_snapshot_item(&mut self) -> Result<StreamItem> {
        let Some(walk) = self.snapshot.as_mut() else {
            return Err(Error::corrupt("snapshot", "no snapshot is active"));
        };
        match walk.next(&self.shared) {
            Ok(item) => {
                if let StreamItem::SnapshotEnd { seq } = item {
                    self.snapshot = None;
                    self.next_seq = seq + 1;
                    self.reported = seq;
                }
                Ok(self.hand_out(item))
            }
            Err(e) => {
                self.snapshot = None;
                Err(e)
            }
        }
    }

    /// Returns the next item if one is available without waiting.
    pub fn try_next(&mut self) -> Result<Option<StreamItem>> {
        loop {
            if let Some(item) = self.buf.pop_front() {
                return Ok(Some(self.hand_out(item)));
            }
            if self.snapshot.is_some() {
                // A snapshot always has a next item.
                return self.next_snapshot_item().map(Some);
            }
            if !self.fill_from_log()? {
                return Ok(None);
            }
        }
    }

    /// Blocks until the next item, or until `timeout` passes with nothing
    /// new committed (then `Ok(None)`).
    pub fn next_timeout(&mut self, timeout: Duration) -> Result<Option<StreamItem>> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(item) = self.try_next()? {
                return Ok(Some(item));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            self.shared
                .publication()
                .watermark()
                .wait_for(self.next_seq, deadline - now);
        }
    }

    /// Waits asynchronously for the next item.
    pub async fn next_async(&mut self) -> Result<StreamItem> {
        loop {
            if let Some(item) = self.try_next()? {
                return Ok(item);
            }
            self.shared
                .publication()
                .watermark()
                .wait_for_async(self.next_seq)
                .await;
        }
    }

    fn compacted(&self) -> Error {
        Error::Compacted {
            requested: self.next_seq,
            first_available: self.shared.retention().log_start(),
        }
    }

    /// Reads one batch of committed records. Returns whether anything was
    /// read (items may or may not have been produced).
    fn fill_from_log(&mut self) -> Result<bool> {
        let committed = self.shared.committed();
        if self.next_seq > committed {
            return Ok(false);
        }
        if self.next_seq < self.shared.retention().log_start() {
            return Err(self.compacted());
        }
        let end = committed.min(self.next_seq + BATCH - 1);
        let mut slice = std::mem::take(&mut self.slice);
        if self
            .shared
            .publication()
            .tail()
            .get(self.next_seq, end, BATCH as usize, &mut slice)
        {
            let mut resync = false;
            for rec in slice.records() {
                if self.take_record(rec) {
                    resync = true;
                    break;
                }
            }
            if !resync {
                self.report_progress(committed);
            }
            slice.clear();
            self.slice = slice;
            return Ok(true);
        }
        self.slice = slice;
        // Past the tail: read through the store's log iterator, which
        // checks every record's sequence (a gap is corruption).
        let shared = self.shared.clone();
        let mut it = shared.store().log_window(self.next_seq, end)?;
        while self.next_seq <= end {
            let seq = self.next_seq;
            let rec = match it.next() {
                Some(Ok(rec)) => SharedRecord::from(rec),
                Some(Err(e)) => {
                    // Retention may have removed what we were about to read.
                    if seq < shared.retention().log_start() {
                        return Err(self.compacted());
                    }
                    return Err(e);
                }
                None => {
                    if seq < shared.retention().log_start() {
                        return Err(self.compacted());
                    }
                    return Err(Error::corrupt("log", format!("record {seq} is missing")));
                }
            };
            if self.take_record(&rec) {
                return Ok(true);
            }
        }
        self.report_progress(committed);
        Ok(true)
    }

    /// Filters one record into the buffer. Returns true when a resync
    /// snapshot was started (stop reading the log).
    fn take_record(&mut self, rec: &SharedRecord) -> bool {
        debug_assert_eq!(rec.seq, self.next_seq);
        let (events, resync): (Arc<[ScopedEvent]>, bool) = if self.filter.is_everything() {
            (rec.unfiltered(), false)
        } else {
            rec.filtered(&self.filter)
        };
        self.next_seq = rec.seq + 1;
        if !events.is_empty() {
            self.buf.push_back(StreamItem::Record {
                seq: rec.seq,
                time_ms: rec.time_ms,
                events,
            });
            self.reported = rec.seq;
        }
        if resync && self.resync_on_move_in {
            self.start_snapshot(true);
            return true;
        }
        false
    }

    /// Reports the position of trailing filtered-out records when caught up
    /// (so a consumer can acknowledge it), or every `PROGRESS_EVERY` records.
    fn report_progress(&mut self, committed: u64) {
        let quiet = self.next_seq - 1 - self.reported;
        if quiet > 0 && (self.next_seq > committed || quiet >= PROGRESS_EVERY) {
            self.reported = self.next_seq - 1;
            self.buf
                .push_back(StreamItem::Progress { seq: self.reported });
        }
    }
}

enum WalkStep {
    /// `SnapshotStart` comes next.
    Start,
    /// The subtree's root comes next.
    Root,
    /// Walking the directories on `stack`.
    Walk,
    /// `SnapshotEnd` comes next.
    End,
}

/// A consistent snapshot of a subtree, walked depth-first a page of
/// children at a time (parents before their children). It holds a RocksDB
/// snapshot and one page per directory level, no thread.
struct SnapshotWalk {
    /// The committed state walked (its snapshot and sequence).
    snap: Arc<PublishedView>,
    /// When `snap` was taken.
    taken: Instant,
    prefix: ByteString,
    resync: bool,
    /// The sequence of the state walked.
    seq: u64,
    step: WalkStep,
    /// Set at `Root` when the root is a directory.
    walk: Option<TreeWalk>,
}

impl SnapshotWalk {
    fn next(&mut self, shared: &Shared) -> Result<StreamItem> {
        let view = shared.store().index_at(&self.snap.snap);
        let names = shared.publication().names();
        loop {
            match self.step {
                WalkStep::Start => {
                    self.seq = self.snap.seq;
                    self.step = WalkStep::Root;
                    return Ok(StreamItem::SnapshotStart {
                        seq: self.seq,
                        prefix: self.prefix.clone(),
                        resync: self.resync,
                    });
                }
                WalkStep::Root => {
                    self.step = WalkStep::End;
                    // Entries in the snapshot only use dictionary ids that
                    // existed then; the current dictionaries are a superset.
                    let root = match engine::resolve(&view, names, &self.prefix) {
                        Ok(r) => r,
                        Err(e)
                            if matches!(
                                e.kind(),
                                ErrorKind::NotFound | ErrorKind::NotADirectory
                            ) =>
                        {
                            continue
                        }
                        Err(e) => return Err(e),
                    };
                    if root.attrs.kind.is_dir() {
                        self.step = WalkStep::Walk;
                        self.walk =
                            Some(TreeWalk::new(root.id, self.prefix.clone(), SNAPSHOT_PAGE));
                    }
                    if self.prefix != "/" {
                        return Ok(StreamItem::SnapshotEntry {
                            path: self.prefix.clone(),
                            inode: Box::new(root),
                        });
                    }
                }
                WalkStep::Walk => {
                    let next = match self.walk.as_mut() {
                        Some(w) => w.next(&view, names)?,
                        None => None,
                    };
                    match next {
                        Some((path, e)) => {
                            return Ok(StreamItem::SnapshotEntry {
                                path,
                                inode: Box::new(e.inode),
                            })
                        }
                        None => {
                            self.walk = None;
                            self.step = WalkStep::End;
                        }
                    }
                }
                WalkStep::End => return Ok(StreamItem::SnapshotEnd { seq: self.seq }),
            }
        }
    }
}
