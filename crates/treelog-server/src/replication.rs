//! The replication source: the committed log streamed to a replica
//! (docs/PROTOCOL.md §14, docs/REPLICATION.md).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use treelog_proto::protocol::{self, ResponseBody};

use crate::context::ConnCtx;
use crate::out::respond;
use crate::streams::ended_before_room;

/// How often a replication stream with nothing to send says it is alive
/// (with the committed sequence and the clock).
const REPLICATION_HEARTBEAT: Duration = Duration::from_millis(500);

/// Largest `max_batch_bytes` a replica may ask for.
const MAX_REPLICATION_BATCH: u32 = 8 << 20;

/// Streams the committed log to a replica from `req.from` (docs/PROTOCOL.md
/// §14) until it is cancelled, the connection goes, or an error: batches
/// of stored records as soon as they are committed, a heartbeat when there
/// is nothing to send. Returns the outcome label for metrics.
pub(crate) async fn replication(
    ctx: &Arc<ConnCtx>,
    id: u64,
    req: protocol::ReplicateFrom,
    mut cancel_rx: watch::Receiver<bool>,
) -> &'static str {
    let t = ctx.t.clone();
    if let Err(e) = t.replication().check_replica(&req) {
        ctx.unregister(id);
        tracing::warn!(error = %e, from = req.from, "refused a replica");
        let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
        return e.kind().as_str();
    }
    if let Some(name) = &req.cursor {
        if let Err(e) = t.replication().hold_for_replica(name, req.from - 1) {
            ctx.unregister(id);
            let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
            return e.kind().as_str();
        }
    }
    let max_bytes = req.max_batch_bytes.clamp(1, MAX_REPLICATION_BATCH) as usize;
    let mut next = req.from;
    let mut shutdown = ctx.shutdown.clone();
    let outcome = loop {
        // Wait for something to send, or the heartbeat.
        let wm = t.watermark();
        if wm.get() < next {
            tokio::select! {
                _ = cancel_rx.changed() => {}
                _ = shutdown.changed() => {}
                _ = tokio::time::timeout(REPLICATION_HEARTBEAT, wm.wait_for_async(next)) => {}
            }
            if *cancel_rx.borrow() || *shutdown.borrow() {
                let _ = respond(&ctx.out, id, ResponseBody::StreamEnd).await;
                break "ok";
            }
        }
        let committed = wm.get();
        let batch = if committed >= next {
            let (t2, from) = (t.clone(), next);
            match tokio::task::spawn_blocking(move || t2.replication().batch(from, max_bytes)).await
            {
                Ok(Ok(b)) => b,
                Ok(Err(e)) => {
                    let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
                    break e.kind().as_str();
                }
                Err(_) => break "internal",
            }
        } else {
            Vec::new()
        };
        // A slow replica fills the connection's queue: wait for room
        // before reading further (one batch held, no more).
        if ended_before_room(ctx, id, &mut cancel_rx, &mut shutdown).await {
            break "ok";
        }
        let first = next;
        next += batch.len() as u64;
        let body = ResponseBody::Records {
            first,
            records: batch,
            committed,
            now_ms: treelog::now_ms(),
        };
        if !respond(&ctx.out, id, body).await {
            break "disconnected";
        }
    };
    ctx.unregister(id);
    outcome
}
