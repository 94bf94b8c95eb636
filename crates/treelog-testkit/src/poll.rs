//! Waiting for conditions and sampling values from within a test's tokio
//! runtime.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Polls `cond` every 5 ms until it holds; panics with `what` after `secs`
/// (a failure guard, not a timing assertion).
pub async fn eventually(secs: u64, what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Records the highest value `read` returns, every millisecond, until the
/// task is aborted.
pub fn peak(
    read: impl Fn() -> i64 + Send + 'static,
) -> (Arc<AtomicI64>, tokio::task::JoinHandle<()>) {
    let peak = Arc::new(AtomicI64::new(0));
    let p = peak.clone();
    let task = tokio::spawn(async move {
        loop {
            p.fetch_max(read(), Ordering::Relaxed);
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    });
    (peak, task)
}

/// A count that threads raise and a test waits on (acknowledgements made
/// by writer threads, typically).
#[derive(Default)]
pub struct Counter {
    n: std::sync::Mutex<u64>,
    cv: std::sync::Condvar,
}

impl Counter {
    pub fn add(&self) {
        *self.n.lock().unwrap() += 1;
        self.cv.notify_all();
    }

    pub fn get(&self) -> u64 {
        *self.n.lock().unwrap()
    }

    /// Waits until at least `n` were counted; false after `timeout` (a
    /// failure guard, not a timing assumption).
    pub fn wait_for(&self, n: u64, timeout: Duration) -> bool {
        let g = self.n.lock().unwrap();
        let (g, _) = self.cv.wait_timeout_while(g, timeout, |v| *v < n).unwrap();
        *g >= n
    }
}
