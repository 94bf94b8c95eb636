//! Reads: stats and listings answered at once ([`read_now`], a pipelining
//! client's burst in batches of [`READ_BATCH`], each in one write), reads that first
//! wait for the store to reach the client's sequence ([`caught_up`]), and
//! their latency.

use treelog::{ByteString, Caller, Error, ReadAt, Result};
use treelog_proto::protocol::{RequestBody, ResponseBody};

use crate::context::ConnCtx;

/// Largest page a List request may ask for.
const MAX_LIST_LIMIT: u32 = 10_000;

/// Most reads one task answers in a row (see `connection`). Smaller
/// batches answer a burst's first reads sooner, so the client refills its
/// pipeline while the rest are read; larger ones spawn fewer tasks. One
/// connection × 64 stats in flight (`stat_client`): 64 → 285k/s, 32 →
/// 312k/s, 16 → 329–335k/s, 8 → 296k/s, 1 (a task per read) → 265k/s.
pub(crate) const READ_BATCH: usize = 16;

/// Whether `body` is a read [`read_now`] answers without waiting.
pub(crate) fn read_ready(ctx: &ConnCtx, body: &RequestBody) -> bool {
    let at = match body {
        RequestBody::Stat { .. } | RequestBody::StatId { .. } | RequestBody::List { .. } => {
            return true
        }
        RequestBody::StatAt { at, .. }
        | RequestBody::StatIdAt { at, .. }
        | RequestBody::ListAt { at, .. } => at,
        _ => return false,
    };
    match at {
        ReadAt::Latest | ReadAt::Exactly(_) => true,
        // The watermark only rises: ready now, ready when answered.
        ReadAt::AtLeast(seq) => ctx.t.watermark().get() >= *seq,
        ReadAt::Linearizable => false,
    }
}

/// Answers a stat or a listing at once; anything else comes back as it
/// was. The caller has made sure it needs no wait: [`read_ready`], or
/// `caught_up` done.
pub(crate) fn read_now(
    ctx: &ConnCtx,
    body: RequestBody,
    who: Option<&Caller>,
) -> std::result::Result<Result<ResponseBody>, RequestBody> {
    let t = &ctx.t;
    let limit = |l: u32| l.clamp(1, MAX_LIST_LIMIT) as usize;
    Ok(match body {
        RequestBody::Stat { path } => timed_read(ctx, "stat", || {
            t.stat_as(who, &path, ReadAt::Latest)
                .map(|r| ResponseBody::Inode(r.value))
        }),
        RequestBody::StatId { id } => {
            timed_read(ctx, "stat_id", || t.stat_id(id).map(ResponseBody::Inode))
        }
        RequestBody::List {
            path,
            start_after,
            limit: l,
        } => timed_read(ctx, "list", || {
            t.list_as(who, &path, start_after.as_deref(), limit(l), ReadAt::Latest)
                .map(|r| ResponseBody::Page(r.value))
        }),
        RequestBody::StatAt { path, at } => timed_read(ctx, "stat", || {
            t.stat_as(who, &path, at).map(|r| ResponseBody::InodeAt {
                inode: r.value,
                seq: r.seq,
            })
        }),
        RequestBody::StatIdAt { id, at } => timed_read(ctx, "stat_id", || {
            t.stat_id_at(id, at).map(|r| ResponseBody::InodeAt {
                inode: r.value,
                seq: r.seq,
            })
        }),
        RequestBody::ListAt {
            path,
            start_after,
            limit: l,
            at,
        } => timed_read(ctx, "list", || {
            t.list_as(who, &path, start_after.as_deref(), limit(l), at)
                .map(|r| ResponseBody::PageAt {
                    page: r.value,
                    seq: r.seq,
                })
        }),
        other => return Err(other),
    })
}

/// [`read_now`] once the store has caught up with `at` (see
/// [`caught_up`]).
pub(crate) async fn read_at(
    ctx: &ConnCtx,
    at: ReadAt,
    body: RequestBody,
    who: Option<&Caller>,
) -> std::result::Result<Result<ResponseBody>, RequestBody> {
    match caught_up(ctx, at).await {
        Ok(()) => read_now(ctx, body, who),
        Err(e) => Ok(Err(e)),
    }
}

/// A symbolic link's target at `at`.
pub(crate) async fn readlink(
    ctx: &ConnCtx,
    path: ByteString,
    at: ReadAt,
    who: Option<&Caller>,
) -> Result<ResponseBody> {
    caught_up(ctx, at).await?;
    timed_read(ctx, "readlink", || {
        ctx.t
            .readlink_as(who, &path, at)
            .map(|r| ResponseBody::Target {
                target: r.value,
                seq: r.seq,
            })
    })
}

/// The extended attributes of `path` (only `name`, when given) at `at`.
pub(crate) async fn xattrs(
    ctx: &ConnCtx,
    path: ByteString,
    name: Option<String>,
    at: ReadAt,
    who: Option<&Caller>,
) -> Result<ResponseBody> {
    caught_up(ctx, at).await?;
    timed_read(ctx, "get_xattrs", || {
        ctx.t
            .xattrs_as(who, &path, name.as_deref(), at)
            .map(|r| ResponseBody::Xattrs {
                xattrs: r.value,
                seq: r.seq,
            })
    })
}

/// The content summary (counts and sizes) of the subtree at `path`, at
/// `at`: a walk of up to `max_count_inodes` entries, off the workers.
pub(crate) async fn summary(
    ctx: &ConnCtx,
    path: ByteString,
    at: ReadAt,
    caller: Option<Caller>,
) -> Result<ResponseBody> {
    caught_up(ctx, at).await?;
    let t = ctx.t.clone();
    let t0 = std::time::Instant::now();
    let r = tokio::task::spawn_blocking(move || t.count_as(caller.as_ref(), &path, at))
        .await
        .unwrap_or_else(|_| Err(Error::corrupt("count", "the count task panicked")));
    if let Some(m) = &ctx.metrics {
        m.store.reads().observe("count", t0.elapsed().as_secs_f64());
    }
    r.map(|r| ResponseBody::Summary {
        summary: r.value,
        seq: r.seq,
    })
}

/// For a read at `ReadAt::AtLeast(seq)`: waits (without holding a
/// worker) until the store has committed `seq`, at most the store's
/// `min_seq_wait`; then `Lagging` on a replica, `Busy` on a leader.
pub(crate) async fn caught_up(ctx: &ConnCtx, at: ReadAt) -> Result<()> {
    let t = &ctx.t;
    let seq = match at {
        ReadAt::AtLeast(seq) => seq,
        // On a cluster's node: the leader's read index, applied here (the
        // read then sees the newest state, at least that); alone, the
        // newest state is linearizable.
        ReadAt::Linearizable => {
            return match ctx.cluster() {
                Ok(c) => c.read_index().await.map(|_| ()),
                Err(Error::InvalidArgument(_)) => Ok(()),
                Err(e) => Err(e),
            }
        }
        ReadAt::Latest | ReadAt::Exactly(_) => return Ok(()),
    };
    let wm = t.watermark();
    if wm.get() >= seq {
        return Ok(());
    }
    let wait = t.min_seq_wait();
    let _ = tokio::time::timeout(wait, wm.wait_for_async(seq)).await;
    if wm.get() >= seq {
        Ok(())
    } else {
        Err(t.replication().not_caught_up(seq, wait))
    }
}

fn timed_read<T>(ctx: &ConnCtx, op: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    // Counts are kept by the store itself; the server adds latency.
    let t0 = std::time::Instant::now();
    let r = f();
    if let Some(m) = &ctx.metrics {
        m.store.reads().observe(op, t0.elapsed().as_secs_f64());
    }
    r
}
