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
use treelog::catch_up::CatchUp;
use treelog::error::{Error, ErrorKind, Result};
use treelog::replication::replica::record_crc;
use treelog::replication::ReplicaState;
use treelog::store::Store;
use treelog::Treelog;
use treelog_client::{Client, ReplyStream};
use treelog_proto::protocol::{NodeStatus, ReplicateFrom, RequestBody, ResponseBody};

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

/// A failure to reach the source: retried, like a lost connection. The
/// client reports a refused or reset connection as an I/O error, which
/// here would otherwise read as this store's own failure and stop the
/// replica while its source restarts.
fn unreachable(cfg: &ReplicaConfig, e: Error) -> Error {
    match e.kind() {
        ErrorKind::Io => Error::Protocol(format!("cannot reach the source {}: {e}", cfg.source)),
        _ => e,
    }
}

fn gone() -> Error {
    Error::ShuttingDown
}

/// The request that continues `store` after its record `last`: its
/// namespace and the checksum of that record go along.
fn continue_after(store: &Store, last: u64, cfg: &ReplicaConfig) -> Result<RequestBody> {
    let prev_crc = match last {
        0 => None,
        s => store.read_record_bytes(s)?.as_deref().and_then(record_crc),
    };
    Ok(RequestBody::Replicate(ReplicateFrom {
        from: last + 1,
        namespace: store.namespace_id()?,
        prev_crc,
        max_batch_bytes: cfg.max_batch_bytes,
        cursor: cfg.cursor.clone(),
    }))
}

/// Connects to the source and learns whom it follows (writes go to the
/// chain's head); `None` when `stop` was set first.
async fn connect(
    cfg: &ReplicaConfig,
    state: &ReplicaState,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<(Client, NodeStatus)>> {
    let client = tokio::select! {
        c = Client::connect_to(&cfg.source, cfg.client_options()) => match c {
            Ok(c) => c,
            Err(e) => {
                state.connect_failed();
                return Err(unreachable(cfg, e));
            }
        },
        _ = stop.changed() => return Ok(None),
    };
    let status = match client.call(RequestBody::Status).await? {
        ResponseBody::Status(st) => st,
        other => {
            return Err(Error::Protocol(format!(
                "unexpected reply to Status: {other:?}"
            )))
        }
    };
    state.set_leader(status.leader.clone());
    Ok(Some((client, status)))
}

/// The next batch of a `Replicate` stream, which must start at `next`
/// (heartbeats are skipped; the source's committed sequence is noted);
/// `None` when `stop` was set first.
async fn next_batch(
    replies: &mut ReplyStream,
    next: u64,
    state: &ReplicaState,
    stop: &mut watch::Receiver<bool>,
) -> Result<Option<Vec<Vec<u8>>>> {
    loop {
        let reply = tokio::select! {
            _ = stop.changed() => return Ok(None),
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
            now_ms,
        } = body
        else {
            return Err(Error::Protocol(format!(
                "unexpected reply to Replicate: {body:?}"
            )));
        };
        state.heard(committed, now_ms);
        if records.is_empty() {
            continue;
        }
        if first != next {
            return Err(Error::Protocol(format!(
                "the source sent records from {first}, the replica expects {next}"
            )));
        }
        return Ok(Some(records));
    }
}

/// Before the replica serves: when its closed database is at least
/// `cfg.catch_up_min` records behind the source, appends the source's records
/// up to the source's committed sequence of now to the log and applies
/// them with the replay (`treelog::catch_up::CatchUp`, rather than one
/// group commit per batch as when serving).
/// Returns the records applied. `Compacted` when the position is gone
/// from the source.
pub(crate) async fn catch_up(
    cfg: &ReplicaConfig,
    state: &Arc<ReplicaState>,
    stop: &mut watch::Receiver<bool>,
) -> Result<u64> {
    let (data, so) = (cfg.server.data.clone(), cfg.server.store.store.clone());
    let cu = tokio::task::spawn_blocking(move || CatchUp::open(&data, &so))
        .await
        .map_err(|e| Error::Protocol(format!("catch-up task: {e}")))??;
    let Some((client, status)) = connect(cfg, state, stop).await? else {
        return Ok(0);
    };
    let from = cu.next_seq();
    let target = status.applied_seq;
    if target < from + cfg.catch_up_min {
        return Ok(0);
    }
    let t0 = Instant::now();
    tracing::info!(from, to = target, source = %cfg.source, "catching up before serving");
    let mut replies = client
        .stream(continue_after(cu.store(), from - 1, cfg)?, STREAM_QUEUE)
        .await?;
    // This task receives; a blocking thread appends (and another replays).
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<Vec<u8>>>(STREAM_QUEUE);
    let worker = tokio::task::spawn_blocking(move || cu.run(|| rx.blocking_recv()));
    let mut next = from;
    let received = async {
        while next <= target {
            let Some(records) = next_batch(&mut replies, next, state, stop).await? else {
                break;
            };
            next += records.len() as u64;
            if tx.send(records).await.is_err() {
                break;
            }
        }
        Ok::<(), Error>(())
    }
    .await;
    drop(tx);
    let reached = worker
        .await
        .map_err(|e| Error::Protocol(format!("catch-up task: {e}")))??;
    received?;
    let n = reached + 1 - from;
    state.caught_up(n);
    tracing::info!(
        records = n,
        reached,
        elapsed_ms = t0.elapsed().as_millis() as u64,
        "caught up"
    );
    Ok(n)
}

async fn stream(
    store: &Weak<Treelog>,
    cfg: &ReplicaConfig,
    state: &Arc<ReplicaState>,
    stop: &mut watch::Receiver<bool>,
    connected_before: &mut bool,
    progressed: &mut bool,
) -> Result<()> {
    let Some((client, _)) = connect(cfg, state, stop).await? else {
        return Ok(());
    };
    let (request, from) = {
        let t = store.upgrade().ok_or_else(gone)?;
        let last = t.committed_seq();
        (continue_after(t.store(), last, cfg)?, last + 1)
    };
    let mut replies = client.stream(request, STREAM_QUEUE).await?;
    if std::mem::replace(connected_before, true) {
        state.reconnected();
    }
    state.set_connected(true);
    tracing::info!(source = %cfg.source, from, "streaming from the source");
    let mut next = from;
    let mut acked = Instant::now();
    loop {
        let Some(records) = next_batch(&mut replies, next, state, stop).await? else {
            return Ok(());
        };
        let n = records.len() as u64;
        let t = store.upgrade().ok_or_else(gone)?;
        match t.replication().replicate(records).await {
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
