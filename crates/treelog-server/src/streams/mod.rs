//! Change streams served to clients: subscriptions (each delivered on the
//! delivery runtime, at a lower priority than requests and the writer),
//! and the wait for room in the connection's queue that every stream makes
//! before its next reply.

pub(crate) mod delivery;

use std::sync::Arc;

use tokio::sync::watch;
use treelog::ReadAt;
use treelog_proto::protocol::{self, ResponseBody};
use treelog_proto::v1;

use crate::context::ConnCtx;
use crate::out::respond;
use crate::reads::caught_up;

pub use delivery::{DeliveryPriority, DeliveryRuntime};

/// Waits until the connection's queue has room for a stream's next reply;
/// true, with `StreamEnd` sent, when the stream was cancelled or the
/// server began shutting down meanwhile.
pub(crate) async fn ended_before_room(
    ctx: &ConnCtx,
    id: u64,
    cancel_rx: &mut watch::Receiver<bool>,
    shutdown: &mut watch::Receiver<bool>,
) -> bool {
    room_by(ctx, id, cancel_rx, shutdown, None).await != Room::Made
}

#[derive(PartialEq, Eq)]
enum Room {
    Made,
    /// `StreamEnd` sent: cancelled, or the server shuts down.
    Ended,
    /// `deadline` passed first.
    Late,
}

/// [`ended_before_room`], giving up at `deadline`.
async fn room_by(
    ctx: &ConnCtx,
    id: u64,
    cancel_rx: &mut watch::Receiver<bool>,
    shutdown: &mut watch::Receiver<bool>,
    deadline: Option<tokio::time::Instant>,
) -> Room {
    let late = async {
        match deadline {
            Some(d) => tokio::time::sleep_until(d).await,
            None => std::future::pending().await,
        }
    };
    let room = tokio::select! {
        _ = cancel_rx.changed() => Room::Ended,
        _ = shutdown.changed() => Room::Ended,
        _ = ctx.out.room() => Room::Made,
        _ = late => Room::Late,
    };
    if room == Room::Ended {
        let _ = respond(&ctx.out, id, ResponseBody::StreamEnd).await;
    }
    room
}

/// Streams a subscription until it is cancelled, fails, or the server
/// shuts down. Returns the outcome label for metrics.
pub(crate) async fn subscription(
    ctx: &Arc<ConnCtx>,
    id: u64,
    opts: treelog::stream::SubscribeOptions,
    min_seq: u64,
    mut cancel_rx: watch::Receiver<bool>,
) -> &'static str {
    // `SubscribeAt`: from a state at least as new as the client's token.
    let subscribed = match caught_up(ctx, ReadAt::AtLeast(min_seq)).await {
        Ok(()) => ctx.t.subscribe(opts),
        Err(e) => Err(e),
    };
    let mut sub = match subscribed {
        Ok(s) => s,
        Err(e) => {
            ctx.unregister(id);
            let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
            return e.kind().as_str();
        }
    };
    if let Some(m) = &ctx.metrics {
        m.store.streams().subscribers.inc();
    }
    let mut shutdown = ctx.shutdown.clone();
    let outcome = loop {
        let item = tokio::select! {
            _ = cancel_rx.changed() => None,
            _ = shutdown.changed() => None,
            item = sub.next_async() => Some(item),
        };
        let body = match item {
            None => {
                let _ = respond(&ctx.out, id, ResponseBody::StreamEnd).await;
                break "ok";
            }
            Some(Ok(item)) => match expressible(ctx, &item) {
                Ok(()) => ResponseBody::Item(item),
                // An item a protocol-1 client cannot be sent ends its
                // stream with the error saying why, rather than going out
                // as an error in the middle of it.
                Err(e) => {
                    let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
                    break e.kind().as_str();
                }
            },
            Some(Err(e)) => {
                let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
                break e.kind().as_str();
            }
        };
        // A slow client fills the connection's queue: the subscription
        // then waits here, holding one item (shared with the other
        // subscribers until it is encoded) and making no more, instead of
        // buffering without bound. It encodes and queues the item only
        // once there is room. In a snapshot it also holds a RocksDB
        // snapshot, which keeps old versions from compaction: that wait,
        // and the snapshot's age, are bounded.
        let deadline = sub.snapshot_taken().map(|taken| {
            let old = tokio::time::Instant::from_std(taken + ctx.max_snapshot_age);
            old.min(tokio::time::Instant::now() + ctx.snapshot_stall_timeout)
        });
        match room_by(ctx, id, &mut cancel_rx, &mut shutdown, deadline).await {
            Room::Made => {}
            Room::Ended => break "ok",
            Room::Late => {
                drop(sub);
                let e = snapshot_too_slow(ctx);
                tracing::warn!(error = %e, "cut off a snapshot subscriber");
                let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
                break "snapshot_expired";
            }
        }
        if !respond(&ctx.out, id, body).await {
            break "disconnected";
        }
        if let Some(m) = &ctx.metrics {
            m.store.streams().delivered.inc();
        }
    };
    ctx.unregister(id);
    if let Some(m) = &ctx.metrics {
        m.store.streams().subscribers.dec();
    }
    outcome
}

/// Whether the connection's protocol can carry `item`.
fn expressible(ctx: &ConnCtx, item: &treelog::stream::StreamItem) -> treelog::Result<()> {
    if ctx.out.version() == v1::VERSION {
        v1::stream_item(item)?;
    }
    Ok(())
}

fn snapshot_too_slow(ctx: &ConnCtx) -> treelog::Error {
    treelog::Error::Busy(format!(
        "the snapshot was not read in time (a subscriber may hold one at most {} s, \
         and at most {} s without reading): its RocksDB snapshot is released; subscribe \
         again for a new one",
        ctx.max_snapshot_age.as_secs(),
        ctx.snapshot_stall_timeout.as_secs()
    ))
}
