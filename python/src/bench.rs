//! The Rust client's side of `python/bench.py`: the same workloads driven
//! from Rust tasks (no Python in the loop), against the same server, in the
//! same run. Not part of the API (`treelog._treelog._bench_rust`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use pyo3::prelude::*;

use treelog_client::{Client, ClientOptions};
use treelog_proto::command::Command;

use crate::errors::{err, value_error};
use crate::wait;

/// Runs `n` operations `op` with `inflight` requests in flight over one
/// client; returns operations per second. `op`: `"create"` (files
/// `{dir}/r{start + i}`), `"stat"` (`{dir}/f{i % modulo}`) or
/// `"stat_many"` (the same paths in pipelined batches of `batch`).
#[pyfunction]
#[pyo3(signature = (endpoints, op, dir, n, inflight, start=0, modulo=1, batch=64))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn _bench_rust(
    py: Python<'_>,
    endpoints: String,
    op: String,
    dir: String,
    n: u64,
    inflight: usize,
    start: u64,
    modulo: u64,
    batch: u64,
) -> PyResult<f64> {
    if !matches!(op.as_str(), "create" | "stat" | "stat_many") || modulo == 0 || batch == 0 {
        return Err(value_error(
            "op: create, stat or stat_many; modulo, batch >= 1",
        ));
    }
    wait(py, async move {
        let c = Client::connect_to(&endpoints, ClientOptions::default())
            .await
            .map_err(err)?;
        let next = Arc::new(AtomicU64::new(0));
        let step = if op == "stat_many" { batch } else { 1 };
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for _ in 0..inflight.max(1) {
            let (c, next, op, dir) = (c.clone(), next.clone(), op.clone(), dir.clone());
            tasks.push(tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(step, Ordering::Relaxed);
                    if i >= n {
                        return Ok::<_, treelog_proto::Error>(());
                    }
                    match op.as_str() {
                        "create" => {
                            c.submit(Command::Create {
                                path: format!("{dir}/r{}", start + i).into(),
                                parents: false,
                                mode: 0o644,
                                owner: String::new(),
                                group: String::new(),
                                block_size: 128 << 20,
                            })
                            .await?;
                        }
                        "stat" => {
                            c.stat(&format!("{dir}/f{}", i % modulo)).await?;
                        }
                        _ => {
                            let paths: Vec<String> = (i..(i + batch).min(n))
                                .map(|k| format!("{dir}/f{}", k % modulo))
                                .collect();
                            let refs: Vec<&str> = paths.iter().map(String::as_str).collect();
                            for r in c.stat_many(&refs).await? {
                                r?;
                            }
                        }
                    }
                }
            }));
        }
        for t in tasks {
            t.await
                .map_err(|e| value_error(format!("a task failed: {e}")))?
                .map_err(err)?;
        }
        Ok(n as f64 / t0.elapsed().as_secs_f64())
    })
}
