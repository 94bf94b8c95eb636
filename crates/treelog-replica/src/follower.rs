//! Streams the source's log into the replica's store.
//!
//! Each connection asks for the log from the store's committed sequence + 1
//! with the store's namespace id and the checksum of its last record (the
//! source refuses another namespace, and a position it no longer has or
//! whose history differs), then hands every batch to
//! `Treelog::replicate`, which appends and applies it durably before the
//! next. Up to [`STREAM_QUEUE`] batches are read ahead meanwhile. A lost
//! connection, a silent source or a damaged batch: reconnect and resume
//! from what is committed, with a growing pause.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tokio::sync::watch;
use treelog::error::{Error, ErrorKind, Result};
use treelog::replica::{record_crc, ReplicaState};
use treelog::Treelog;
use treelog_proto::protocol::{ReplicateFrom, RequestBody, ResponseBody};

use crate::ReplicaConfig;

/// How often the replica moves its cursor on the source.
const ACK_EVERY: Duration = Duration::from_secs(1);

/// Batches read ahead of the one being applied.
const STREAM_QUEUE: usize = 16;

/// A source that sends nothing (not even its heartbeat, every 500 ms) for
/// this long is taken for gone.
const SILENCE: Duration = Duration::from_secs(5);

/// Why following ended.
pub(crate) enum FollowEnd {
    /// `stop` was set.
    Stopped,
    /// The replica's position is not in the source's log.
    Rebootstrap(String),
    /// Following cannot go on (the store failed, or the source is of
    /// another namespace).
    Fatal(Error),
}

pub(crate) async fn follow(
    store: Weak<Treelog>,
    cfg: &ReplicaConfig,
    state: &Arc<ReplicaState>,
    mut stop: watch::Receiver<bool>,
) -> FollowEnd {
    let mut connected_before = false;
    let mut wait = Duration::from_millis(50);
    loop {
        if *stop.borrow() {
            return FollowEnd::Stopped;
        }
        let mut progressed = false;
        let r = stream(
            &store,
            cfg,
            state,
            &mut stop,
            &mut connected_before,
            &mut progressed,
        )
        .await;
        state.set_connected(false);
        if progressed {
            wait = Duration::from_millis(50);
        }
        match r {
            Ok(()) => return FollowEnd::Stopped,
            Err(e) => match e.kind() {
                ErrorKind::Compacted => return FollowEnd::Rebootstrap(e.to_string()),
                ErrorKind::Incompatible => return FollowEnd::Fatal(e),
                // The store's own failures: the server ends by itself.
                ErrorKind::WriterStopped | ErrorKind::OutcomeUnknown | ErrorKind::Io => {
                    return FollowEnd::Fatal(e)
                }
                ErrorKind::ShuttingDown => return FollowEnd::Stopped,
                _ => {
                    tracing::warn!(error = %e, source = %cfg.source, "replication interrupted: reconnecting")
                }
            },
        }
        if crate::pause(wait, &mut stop).await {
            return FollowEnd::Stopped;
        }
        wait = (wait * 2).min(Duration::from_secs(2));
    }
}

fn gone() -> Error {
    Error::ShuttingDown
}

/// Where the store continues: (from, the CRC of its record `from - 1`,
/// its namespace id).
fn position(store: &Weak<Treelog>) -> Result<(u64, Option<u32>, String)> {
    let t = store.upgrade().ok_or_else(gone)?;
    let committed = t.committed_seq();
    let prev_crc = match committed {
        0 => None,
        s => t
            .store()
            .read_record_bytes(s)?
            .as_deref()
            .and_then(record_crc),
    };
    Ok((committed + 1, prev_crc, t.store().namespace_id()?))
}

async fn stream(
    store: &Weak<Treelog>,
    cfg: &ReplicaConfig,
    state: &Arc<ReplicaState>,
    stop: &mut watch::Receiver<bool>,
    connected_before: &mut bool,
    progressed: &mut bool,
) -> Result<()> {
    let client = tokio::select! {
        c = treelog_client::Client::connect(cfg.source, cfg.client_options()) => c?,
        _ = stop.changed() => return Ok(()),
    };
    // Whom the source follows, if anyone: writes go to the chain's head.
    if let Ok(ResponseBody::Status(st)) = client.call(RequestBody::Status).await {
        state.set_leader(st.leader);
    }
    let (from, prev_crc, namespace) = position(store)?;
    let mut replies = client
        .stream(
            RequestBody::Replicate(ReplicateFrom {
                from,
                namespace,
                prev_crc,
                max_batch_bytes: cfg.max_batch_bytes,
                cursor: cfg.cursor.clone(),
            }),
            STREAM_QUEUE,
        )
        .await?;
    if std::mem::replace(connected_before, true) {
        state.reconnected();
    }
    state.set_connected(true);
    tracing::info!(source = %cfg.source, from, "streaming from the source");
    let mut next = from;
    let mut acked = Instant::now();
    loop {
        let reply = tokio::select! {
            _ = stop.changed() => return Ok(()),
            r = tokio::time::timeout(SILENCE, replies.next()) => r,
        };
        let body = match reply {
            Err(_) => {
                return Err(Error::Protocol(format!(
                    "the source sent nothing for {SILENCE:?}"
                )))
            }
            Ok(None) => return Err(Error::Protocol("the source ended the stream".into())),
            Ok(Some(r)) => r?,
        };
        let ResponseBody::Records {
            first,
            records,
            committed,
            ..
        } = body
        else {
            return Err(Error::Protocol(format!(
                "unexpected reply to Replicate: {body:?}"
            )));
        };
        state.heard(committed);
        if records.is_empty() {
            continue;
        }
        if first != next {
            return Err(Error::Protocol(format!(
                "the source sent records from {first}, the replica expects {next}"
            )));
        }
        let n = records.len() as u64;
        let t = store.upgrade().ok_or_else(gone)?;
        match t.replicate(records).await {
            Ok(_) => {
                next += n;
                *progressed = true;
                if let Some(cursor) = cfg.cursor.as_ref().filter(|_| acked.elapsed() >= ACK_EVERY) {
                    // Moves the source's cursor (best effort: its retention
                    // may only remove what this replica has applied).
                    acked = Instant::now();
                    let (c, cursor, seq) = (client.clone(), cursor.clone(), next - 1);
                    tokio::spawn(async move {
                        if let Err(e) = c.ack(&cursor, seq).await {
                            tracing::debug!(error = %e, "the source refused the replica's ack");
                        }
                    });
                }
            }
            // A damaged batch (checksum, sequence): nothing of it was
            // applied; ask again from what is committed.
            Err(e) if e.kind() == ErrorKind::Corruption => {
                tracing::warn!(error = %e, "a batch from the source failed its checks: reconnecting");
                return Err(Error::Protocol(e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
}
