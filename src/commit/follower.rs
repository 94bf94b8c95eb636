//! [`Follower`]: the role of a node whose log another writes — a replica,
//! which copies its source's records into its own log, or a node of a
//! consensus cluster, whose committed entries the protocol has written into
//! the log already. It refuses commands (`NotLeader`) and applies stored
//! records in order with [`Core::apply_stored`], which the consensus
//! leader's role uses for its committed entries too: one function, the
//! replay's, for every copy of the log.

use std::sync::Arc;
use std::time::Instant;

use crate::commit::port::LeaderHint;
use crate::commit::request::{Request, StoredRecords, Work};
use crate::commit::role::{split, Appended, Core, Role};
use crate::engine::EngineState;
use crate::error::Error;
use crate::event::{Event, Record};
use crate::format::record;
use crate::index::{IndexRead, IndexWrite, Overlay, PendingIndex};

/// The role of a node that applies another's log.
pub(crate) struct Follower {
    leader: Arc<dyn LeaderHint>,
}

impl Follower {
    pub(crate) fn new(leader: Arc<dyn LeaderHint>) -> Follower {
        Follower { leader }
    }
}

impl Role for Follower {
    fn group(&mut self, core: &mut Core, group: Vec<Request>) -> Option<Appended> {
        core.queue_waits(&group, Instant::now());
        let (commands, records) = split(group);
        if !commands.is_empty() {
            let leader = self.leader.leader();
            for r in commands {
                let _ = r.reply.send(Err(Error::NotLeader {
                    leader: leader.clone(),
                }));
            }
        }
        if records.is_empty() {
            return None;
        }
        core.apply_stored(records)
    }
}

/// Why a batch of stored records was not applied.
enum NotApplied {
    /// It failed its checks (envelope, checksum, order): nothing of it was
    /// applied, and the caller may send it again.
    Refused(Error),
    /// It passed them and could not be applied: this index is not the
    /// log's, and the writer stops.
    Fault(Error),
}

impl Core {
    /// Applies each request's stored records (every request is
    /// `Work::Records`) with the state of everything applied so far,
    /// appending them to the log first where asked; returns the group for
    /// the pipeline. A batch that fails its checks is refused alone.
    pub(crate) fn apply_stored(&mut self, requests: Vec<Request>) -> Option<Appended> {
        let shared = self.shared.clone();
        let store = shared.store();
        let db_index = store.index();
        let pending = PendingIndex {
            pending: &self.pending,
            base: &db_index,
        };
        let mut overlay = Overlay::new(&pending);
        let mut batch = None;
        let mut results = Vec::with_capacity(requests.len());
        let (mut seq, mut count, mut bytes) = (self.last_seq, 0u64, 0u64);
        let mut time_ms = self.last_time_ms;
        let mut records = Vec::new();
        let mut meta = Vec::new();
        let mut fatal = None;
        for req in &requests {
            let Work::Records(stored) = &req.work else {
                results.push(Err(Error::InvalidArgument(
                    "a command is not a stored record".into(),
                )));
                continue;
            };
            match apply_records(&mut self.engine.state, stored, seq, &mut overlay) {
                Ok(applied) => {
                    if stored.append {
                        let b = match batch.as_mut() {
                            Some(b) => b,
                            None => match store.log_batch() {
                                Ok(b) => batch.insert(b),
                                Err(e) => {
                                    fatal = Some(e.to_string());
                                    break;
                                }
                            },
                        };
                        for (rec, v) in applied.iter().zip(&stored.records) {
                            b.put(rec.seq, v);
                        }
                    }
                    for (rec, v) in applied.into_iter().zip(&stored.records) {
                        seq = rec.seq;
                        time_ms = time_ms.max(rec.time_ms);
                        count += 1;
                        bytes += v.len() as u64;
                        records.push(rec);
                    }
                    meta.extend(stored.meta.iter().cloned());
                    results.push(Ok(seq));
                }
                Err(NotApplied::Refused(e)) => results.push(Err(e)),
                Err(NotApplied::Fault(e)) => {
                    fatal = Some(format!("applying stored records: {e}"));
                    break;
                }
            }
        }
        // A failed log write may still have reached the WAL file: the
        // outcome of its batches is unknown.
        let mut written = false;
        if let (None, Some(b)) = (&fatal, batch) {
            if let Err(e) = store.write_log(b, false) {
                fatal = Some(format!("log write failed: {e}"));
                written = true;
            }
        }
        let writes = Arc::new(overlay.take_writes());
        drop(overlay);
        if let Some(why) = fatal {
            // The overlay and the engine state may hold part of a batch:
            // stop; the records stay in the log for the next open's replay.
            shared.fail(why.clone());
            Core::refuse_all(requests, &why, written);
            return None;
        }
        self.pending.push(seq, writes.clone());
        self.last_seq = seq;
        self.last_time_ms = time_ms;
        if let Some(m) = shared.metrics() {
            m.write.group_commands.observe(requests.len() as f64);
            m.write.group_bytes.observe(bytes as f64);
        }
        Some(Appended {
            requests,
            results,
            seq,
            record_count: count,
            bytes,
            writes,
            records,
            meta,
        })
    }
}

/// Checks a batch of stored records and applies their events to `overlay`
/// with the function replay uses. Each must continue the log: a record
/// appended here right after `last` (a replica's log has no gaps); one
/// already in the log after `last`, and right after it if it has events
/// (a consensus protocol's own entries are records without events, which
/// its storage tests may place after a gap). A record that fails its
/// checks refuses the whole batch before anything is applied.
fn apply_records(
    state: &mut EngineState,
    stored: &StoredRecords,
    last: u64,
    overlay: &mut (impl IndexWrite + IndexRead),
) -> std::result::Result<Vec<Record>, NotApplied> {
    let refuse = |detail: String| NotApplied::Refused(Error::corrupt("stored record", detail));
    let mut out = Vec::with_capacity(stored.records.len());
    let mut prev = last;
    let mut first = stored.from_empty;
    for v in &stored.records {
        let rec: Record = if stored.append {
            let want = prev + 1;
            record::decode_record(v, Some(want))
                .map_err(|e| refuse(format!("record {want} from the source: {e}")))?
        } else {
            let rec = record::decode_record(v, None).map_err(|e| refuse(e.to_string()))?;
            // The protocol's own entries (no events) may follow a gap, and
            // the very first may be at 0 (openraft's log starts there).
            let in_order = if rec.events.is_empty() {
                rec.seq > prev || (first && rec.seq == 0)
            } else {
                rec.seq == prev + 1
            };
            if !in_order {
                return Err(refuse(format!(
                    "record {} does not follow the last applied, {prev}",
                    rec.seq
                )));
            }
            rec
        };
        prev = rec.seq;
        first = false;
        out.push(rec);
    }
    for r in &out {
        let events = r.events.iter().map(Event::borrowed);
        crate::engine::apply_events(events, overlay, state).map_err(NotApplied::Fault)?;
    }
    Ok(out)
}
