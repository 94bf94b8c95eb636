//! [`Leader`]: the role of a node that owns its log (a single node, or a
//! replica's source). It validates each command against the index plus
//! the changes not yet in it (earlier groups on their way, then the
//! group's own), turns it into one record, and appends the group's records
//! to the WAL without fsync; the pipeline makes them durable.

use std::sync::Arc;
use std::time::Instant;

use crate::commit::request::{Request, Work};
use crate::commit::role::{Appended, Core, Role};
use crate::engine::Executed;
use crate::error::{Error, Result};
use crate::event::Record;
use crate::format::record;
use crate::index::{CachedIndex, Overlay, PendingIndex};
use crate::now_ms;

/// The role of a node whose log is its own.
pub(crate) struct Leader;

impl Role for Leader {
    fn group(&mut self, core: &mut Core, requests: Vec<Request>) -> Option<Appended> {
        let t_group = Instant::now();
        core.queue_waits(&requests, t_group);
        let shared = core.shared.clone();
        let store = shared.store();
        let time_ms = now_ms().max(core.last_time_ms);
        let db_index = store.index();
        // The cache first: it holds the newest value, pending or committed,
        // of every key it holds (see `WriterCache`), so most lookups stop
        // there without searching every pending group.
        let pending = PendingIndex {
            pending: &core.pending,
            base: &db_index,
        };
        let index = CachedIndex {
            base: &pending,
            cache: &core.cache,
        };
        let mut overlay = Overlay::new(&index);
        let mut batch = match store.log_batch() {
            Ok(b) => b,
            Err(e) => {
                // Unreachable in practice: the CF is checked at open.
                shared.fail(e.to_string());
                Core::refuse_all(requests, &e.to_string(), false);
                return None;
            }
        };
        let mut results: Vec<Result<u64>> = Vec::with_capacity(requests.len());
        let mut seq = core.last_seq;
        let mut bytes = 0u64;
        let mut records: Vec<Record> = Vec::new();
        let mut fatal: Option<String> = None;
        for req in requests.iter() {
            let (cmd, caller) = match &req.work {
                Work::Command(cmd, caller) => (cmd, caller.as_deref()),
                Work::Records(_) => {
                    results.push(Err(Error::InvalidArgument(
                        "this node leads its log: it takes no records from another".into(),
                    )));
                    continue;
                }
            };
            match core.engine.execute(cmd, caller, &mut overlay, time_ms) {
                Executed::Applied(events) => {
                    seq += 1;
                    let rec = Record {
                        seq,
                        time_ms,
                        events,
                    };
                    match record::encode_record(&rec) {
                        Ok(v) => {
                            bytes += v.len() as u64;
                            batch.put(seq, &v);
                            results.push(Ok(seq));
                            records.push(rec);
                        }
                        Err(e) => {
                            fatal = Some(format!("encoding record {seq}: {e}"));
                            break;
                        }
                    }
                }
                // A no-op changes nothing; its token is the state it saw
                // (replied only once that state is committed).
                Executed::NoOp => results.push(Ok(seq)),
                Executed::Refused(e) => results.push(Err(e)),
                Executed::Fault(e) => {
                    // The overlay may hold half a command: nothing of this
                    // group may be written.
                    fatal = Some(format!("applying events: {e}"));
                    break;
                }
            }
        }
        let count = seq - core.last_seq;
        let t_validated = Instant::now();
        // A failed log write may still have reached the WAL file (whole, or
        // torn and dropped at recovery): its commands' outcome is unknown.
        let mut written = false;
        if fatal.is_none() && count > 0 {
            // Not synced here: the syncer's next fsync covers it, while
            // this thread goes on with the next group.
            let logged = if crate::sys::failpoint::injected("writer::write_log") {
                Err(Error::Io(std::io::Error::other(
                    "injected log write failure",
                )))
            } else {
                store.write_log(batch, false)
            };
            if let Err(e) = logged {
                fatal = Some(format!("log write failed: {e}"));
                written = true;
            }
        }
        let writes = Arc::new(overlay.take_writes());
        drop(overlay);
        if let Some(why) = fatal {
            // Earlier groups are unaffected: the pipeline still commits them.
            shared.fail(why.clone());
            Core::refuse_all(requests, &why, written);
            return None;
        }
        let t_logged = Instant::now();
        // The writer reads its own changes back through its cache (the keys
        // it holds take the new values now) or else the pending set, until
        // they are in the index.
        core.cache.borrow_mut().absorb(&writes);
        core.pending.push(seq, writes.clone());
        core.last_seq = seq;
        core.last_time_ms = time_ms;
        if let Some(m) = shared.metrics() {
            let m = &m.write;
            let (hits, misses) = core.cache.borrow_mut().take_counts();
            m.writer_cache_hits.inc_by(hits);
            m.writer_cache_misses.inc_by(misses);
            m.validate.observe((t_validated - t_group).as_secs_f64());
            if count > 0 {
                m.log_write.observe((t_logged - t_validated).as_secs_f64());
            }
            m.group_commands.observe(requests.len() as f64);
            m.group_bytes.observe(bytes as f64);
        }
        Some(Appended {
            requests,
            results,
            seq,
            record_count: count,
            bytes,
            writes,
            records,
            meta: Vec::new(),
        })
    }
}
