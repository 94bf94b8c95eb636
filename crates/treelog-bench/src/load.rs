//! The load of the network benchmarks: concurrent loops that take
//! operation numbers from one counter until a total is reached. treelog's
//! server (`network`, `cluster`) and Redis (`redis_peer`) run the same
//! loops, so that their rates compare.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::error::{Error, Result};

/// Runs `total` operations with `lanes` concurrent loops over `clients`
/// (round robin); returns ops/s.
pub(crate) async fn drive<F, Fut>(lanes: usize, total: usize, op: F) -> Result<f64>
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<()>> + Send,
{
    let op = Arc::new(op);
    let next = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for lane in 0..lanes {
        let op = op.clone();
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total as u64 {
                    return Ok::<(), Error>(());
                }
                op(lane, i).await?;
            }
        }));
    }
    for t in tasks {
        t.await.map_err(|e| Error::Protocol(e.to_string()))??;
    }
    Ok(total as f64 / t0.elapsed().as_secs_f64())
}
