//! `treelog._treelog`: the native half of the Python package. Python
//! objects over the Rust client (`treelog-client`): one implementation of
//! the protocol, its deadlines, reconnects and leader following.
//!
//! Both APIs run their requests on one tokio runtime owned by the module:
//! the blocking [`client::Client`] waits with the GIL released, the
//! asyncio [`aio::AsyncClient`] hands futures to the event loop through
//! pyo3-async-runtimes.

use std::future::Future;
use std::time::Duration;

use pyo3::prelude::*;

mod aio;
mod bench;
mod client;
mod core;
mod errors;
mod iters;
mod stream;
mod types;

/// How often a blocking wait looks at pending signals (Ctrl-C raises
/// `KeyboardInterrupt` within this).
const SIGNAL_POLL: Duration = Duration::from_millis(100);

pub(crate) fn runtime() -> &'static tokio::runtime::Runtime {
    pyo3_async_runtimes::tokio::get_runtime()
}

/// Runs `fut` to its end on the module's runtime with the GIL released,
/// in slices, so that a signal (Ctrl-C) interrupts the wait.
pub(crate) fn wait<F, T>(py: Python<'_>, fut: F) -> PyResult<T>
where
    F: Future<Output = PyResult<T>> + Send,
    T: Send,
{
    let rt = runtime();
    let mut fut = std::pin::pin!(fut);
    loop {
        let r = py.detach(|| {
            rt.block_on(async { tokio::time::timeout(SIGNAL_POLL, fut.as_mut()).await })
        });
        match r {
            Ok(v) => return v,
            Err(_) => py.check_signals()?,
        }
    }
}

#[pymodule]
fn _treelog(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The connections' readers and writers: a few threads are plenty
    // (Python itself is one at a time).
    let workers = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(2)
        .clamp(1, 4);
    let mut b = tokio::runtime::Builder::new_multi_thread();
    b.worker_threads(workers)
        .thread_name("treelog-client")
        .enable_all();
    pyo3_async_runtimes::tokio::init(b);
    m.add_function(wrap_pyfunction!(bench::_bench_rust, m)?)?;
    m.add_class::<client::Client>()?;
    m.add_class::<aio::AsyncClient>()?;
    m.add_class::<client::Tls>()?;
    m.add_class::<types::Stat>()?;
    m.add_class::<types::DirEntry>()?;
    m.add_class::<types::Page>()?;
    m.add_class::<types::Summary>()?;
    m.add_class::<types::Quota>()?;
    m.add_class::<types::Cursor>()?;
    m.add_class::<iters::Listing>()?;
    m.add_class::<iters::AsyncListing>()?;
    m.add_class::<iters::Walk>()?;
    m.add_class::<iters::AsyncWalk>()?;
    m.add_class::<stream::Subscription>()?;
    m.add_class::<stream::AsyncSubscription>()?;
    m.add_class::<stream::Event>()?;
    m.add_class::<stream::SnapshotStart>()?;
    m.add_class::<stream::SnapshotEntry>()?;
    m.add_class::<stream::SnapshotEnd>()?;
    m.add_class::<stream::Record>()?;
    m.add_class::<stream::Progress>()?;
    Ok(())
}
