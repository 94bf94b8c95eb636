//! Request routing: each request to what answers it, its outcome counted
//! and its reply queued; streams (subscriptions, replication) handed to
//! their own loops.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use treelog::{Caller, Error, Result, Treelog};
use treelog_proto::protocol::{self, RequestBody, ResponseBody};

use crate::audit::Draft;
use crate::context::{ConnCtx, InFlight};
use crate::out::{respond, Gathered, GATHER_BYTES};
use crate::reads::{self, read_now};
use crate::replication::replication;
use crate::roles::audited;
use crate::streams::subscription;

/// Runs stream request `id` (a subscription or replication; `cancel`
/// ends it) until it ends. Its replies are its own; it gives `permit` back
/// once started.
pub(crate) async fn stream(
    ctx: &Arc<ConnCtx>,
    id: u64,
    body: RequestBody,
    caller: Option<Caller>,
    permit: InFlight,
    cancel: watch::Receiver<bool>,
) {
    let name = request_name(&body);
    let draft = (ctx.auditing() && audited(&body))
        .then(|| Draft::of(name, &body).for_user(caller.as_ref()));
    match body {
        RequestBody::Replicate(from) => {
            let outcome =
                streamed(ctx, name, permit, cancel, |c| replication(ctx, id, from, c)).await;
            if let Some(d) = draft {
                ctx.audit(d, outcome, None).await;
            }
        }
        RequestBody::SubscribeAt { opts, min_seq } => {
            streamed(ctx, name, permit, cancel, |c| {
                subscription(ctx, id, opts, min_seq, c)
            })
            .await;
        }
        RequestBody::Subscribe(opts) => {
            streamed(ctx, name, permit, cancel, |c| {
                subscription(ctx, id, opts, 0, c)
            })
            .await;
        }
        body => {
            drop(permit);
            let e = Error::corrupt(
                "server",
                format!("{} was taken for a stream", request_name(&body)),
            );
            ctx.count(name, e.kind().as_str());
            let _ = respond(&ctx.out, id, protocol::error_body(&e)).await;
        }
    }
}

/// Whether `body` starts a stream (see [`stream`]).
pub(crate) fn is_stream(body: &RequestBody) -> bool {
    matches!(
        body,
        RequestBody::Subscribe(_) | RequestBody::SubscribeAt { .. } | RequestBody::Replicate(_)
    )
}

/// The reply to request `id`, which is not a stream (holding `permit`,
/// its place among the connection's requests in flight, until then):
/// counted, and in the audit log when the request is.
pub(crate) async fn reply(
    ctx: Arc<ConnCtx>,
    id: u64,
    body: RequestBody,
    caller: Option<Caller>,
    permit: InFlight,
) -> (u64, ResponseBody) {
    if let Some(m) = &ctx.metrics {
        m.in_flight.inc();
    }
    let name = request_name(&body);
    let draft = (ctx.auditing() && audited(&body))
        .then(|| Draft::of(name, &body).for_user(caller.as_ref()));
    // Make a reply only while the connection's queue has room: the
    // requests read before it filled do not all add theirs at once.
    ctx.out.room().await;
    let res = answer(&ctx, body, caller).await;
    ctx.count_result(name, &res);
    if let Some(d) = draft {
        let (outcome, seq) = match &res {
            Ok(ResponseBody::Seq(s)) => ("ok", Some(*s)),
            Ok(_) => ("ok", None),
            Err(e) => (e.kind().as_str(), None),
        };
        ctx.audit(d, outcome, seq).await;
    }
    drop(permit);
    if let Some(m) = &ctx.metrics {
        m.in_flight.dec();
    }
    (id, res.unwrap_or_else(|e| protocol::error_body(&e)))
}

/// The reply to a request that is not a stream, checked as `caller` (see
/// [`ConnCtx::caller_for`]).
async fn answer(ctx: &ConnCtx, body: RequestBody, caller: Option<Caller>) -> Result<ResponseBody> {
    let t = &ctx.t;
    let who = caller.as_ref();
    match body {
        RequestBody::Mutate(cmd) => {
            if let Some(c) = ctx.cluster_service() {
                c.admit(&cmd)?;
            }
            t.submit_as(cmd, caller).await.map(ResponseBody::Seq)
        }
        body @ (RequestBody::Stat { .. }
        | RequestBody::StatId { .. }
        | RequestBody::List { .. }) => read_now(ctx, body, who).unwrap_or_else(not_a_read),
        body @ (RequestBody::StatAt { at, .. }
        | RequestBody::StatIdAt { at, .. }
        | RequestBody::ListAt { at, .. }) => reads::read_at(ctx, at, body, who)
            .await
            .unwrap_or_else(not_a_read),
        RequestBody::Readlink { path, at } => reads::readlink(ctx, path, at, who).await,
        RequestBody::GetXattrs { path, name, at } => reads::xattrs(ctx, path, name, at, who).await,
        RequestBody::Count { path, at } => reads::summary(ctx, path, at, caller).await,
        RequestBody::Ack { cursor, seq } => t.ack(&cursor, seq).map(|_| ResponseBody::Done),
        RequestBody::ListCursors => Ok(ResponseBody::Cursors(t.cursors())),
        RequestBody::DropCursor { cursor } => t.drop_cursor(&cursor).map(|_| ResponseBody::Done),
        RequestBody::Ping => Ok(ResponseBody::Seq(t.committed_seq())),
        RequestBody::Info => Ok(info(t)),
        RequestBody::WaitFor { seq, timeout_ms } => Ok(wait_for(t, seq, timeout_ms).await),
        RequestBody::Cancel { target } => cancel(ctx, target),
        RequestBody::PinView => ctx.pins.pin().map(ResponseBody::Seq),
        RequestBody::UnpinView { seq } => unpin_view(ctx, seq),
        RequestBody::BackupBegin { resume } => ctx.backups.begin(t, resume).await,
        RequestBody::BackupChunk {
            id,
            file,
            offset,
            len,
        } => ctx.backups.chunk(id, file, offset, len).await,
        RequestBody::BackupEnd { id } => ctx.backups.end(id).await,
        RequestBody::Status => Ok(status(ctx)),
        RequestBody::Raft { rpc, payload } => ctx
            .cluster()?
            .raft(rpc, payload)
            .await
            .map(ResponseBody::Raft),
        RequestBody::Cluster(req) => ctx.cluster()?.admin(req).await.map(ResponseBody::Cluster),
        // Streams run in `streamed` (see `handle`), never here.
        body @ (RequestBody::Replicate(_)
        | RequestBody::Subscribe(_)
        | RequestBody::SubscribeAt { .. }) => Err(Error::corrupt(
            "server",
            format!("{} was taken for a single reply", request_name(&body)),
        )),
    }
}

fn info(t: &Treelog) -> ResponseBody {
    ResponseBody::Info {
        committed_seq: t.committed_seq(),
        log_start: t.log_start(),
        log_bytes: t.log_bytes(),
    }
}

/// Waits until the store has committed `seq`, for at most `timeout_ms`
/// (a minute at most); the committed sequence then.
async fn wait_for(t: &Treelog, seq: u64, timeout_ms: u64) -> ResponseBody {
    let wm = t.watermark();
    let _ = tokio::time::timeout(
        Duration::from_millis(timeout_ms.min(60_000)),
        wm.wait_for_async(seq),
    )
    .await;
    ResponseBody::Seq(t.committed_seq())
}

/// Ends stream `target` of this connection.
fn cancel(ctx: &ConnCtx, target: u64) -> Result<ResponseBody> {
    if ctx.cancel(target) {
        Ok(ResponseBody::Done)
    } else {
        Err(Error::NotFound(format!("no active request {target}")))
    }
}

fn unpin_view(ctx: &ConnCtx, seq: u64) -> Result<ResponseBody> {
    if ctx.pins.unpin(seq) {
        Ok(ResponseBody::Done)
    } else {
        Err(Error::NotFound(format!(
            "this connection pins no read view at {seq}"
        )))
    }
}

/// The store's status, with the node's role and leader on a cluster.
fn status(ctx: &ConnCtx) -> ResponseBody {
    let mut st = ctx.t.replication().status();
    if let Ok(c) = ctx.cluster() {
        (st.role, st.leader) = c.role();
    }
    ResponseBody::Status(st)
}

/// Runs a streaming request (its replies are its own; it holds no
/// in-flight permit) and counts its outcome; the outcome.
async fn streamed<F, Fut>(
    ctx: &ConnCtx,
    name: &str,
    permit: InFlight,
    cancel: watch::Receiver<bool>,
    run: F,
) -> &'static str
where
    F: FnOnce(watch::Receiver<bool>) -> Fut,
    Fut: std::future::Future<Output = &'static str>,
{
    drop(permit);
    let outcome = run(cancel).await;
    ctx.count(name, outcome);
    outcome
}

/// A read to answer: its request id, body and the user it is checked as.
pub(crate) type Read = (u64, RequestBody, Option<Caller>);

/// Answers a batch of reads that need no wait (see [`reads::read_ready`]),
/// holding `permit` for them all; their replies go to the writer in one
/// piece.
pub(crate) async fn answer_reads(ctx: Arc<ConnCtx>, batch: Vec<Read>, permit: InFlight) {
    let mut gathered = Gathered::default();
    for (id, body, caller) in batch {
        // Large replies (listings) go as they are made, and each is made
        // only while the queue has room, as in `reply`: a batch adds at
        // most one reply past the bound, not sixteen.
        if gathered.len() >= GATHER_BYTES && !gathered.flush(&ctx.out).await {
            break;
        }
        if gathered.is_empty() {
            ctx.out.room().await;
        }
        let reply = answer_read(&ctx, body, caller.as_ref());
        gathered.respond(&ctx.out, id, reply);
    }
    gathered.flush(&ctx.out).await;
    drop(permit);
}

/// The reply to a read that needs no wait (see [`reads::read_ready`]),
/// made at once, and counted.
pub(crate) fn answer_read(
    ctx: &ConnCtx,
    body: RequestBody,
    caller: Option<&Caller>,
) -> ResponseBody {
    let name = request_name(&body);
    let res = read_now(ctx, body, caller).unwrap_or_else(not_a_read);
    ctx.count_result(name, &res);
    res.unwrap_or_else(|e| protocol::error_body(&e))
}

/// `read_now` given a request it does not answer (a bug, not the client's).
fn not_a_read(body: RequestBody) -> Result<ResponseBody> {
    Err(Error::corrupt(
        "server",
        format!("{} was taken for a read", request_name(&body)),
    ))
}

/// The request's name in metrics (`request` label) and logs.
pub(crate) fn request_name(b: &RequestBody) -> &'static str {
    match b {
        RequestBody::Mutate(c) => c.name(),
        RequestBody::Stat { .. } => "stat",
        RequestBody::StatId { .. } => "stat_id",
        RequestBody::List { .. } => "list",
        RequestBody::Subscribe(_) | RequestBody::SubscribeAt { .. } => "subscribe",
        RequestBody::Cancel { .. } => "cancel",
        RequestBody::Ack { .. } => "ack",
        RequestBody::ListCursors => "list_cursors",
        RequestBody::DropCursor { .. } => "drop_cursor",
        RequestBody::WaitFor { .. } => "wait_for",
        RequestBody::Ping => "ping",
        RequestBody::Info => "info",
        RequestBody::StatAt { .. } => "stat",
        RequestBody::StatIdAt { .. } => "stat_id",
        RequestBody::ListAt { .. } => "list",
        RequestBody::PinView => "pin_view",
        RequestBody::UnpinView { .. } => "unpin_view",
        RequestBody::BackupBegin { .. } => "backup_begin",
        RequestBody::BackupChunk { .. } => "backup_chunk",
        RequestBody::BackupEnd { .. } => "backup_end",
        RequestBody::Replicate(_) => "replicate",
        RequestBody::Status => "status",
        RequestBody::Raft { .. } => "raft",
        RequestBody::Cluster(_) => "cluster",
        RequestBody::Readlink { .. } => "readlink",
        RequestBody::GetXattrs { .. } => "get_xattrs",
        RequestBody::Count { .. } => "count",
    }
}
