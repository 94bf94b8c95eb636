//! The committed-sequence watermark: published by the writer after each
//! group, waited on by readers (read-your-writes tokens) and, later, by
//! change-stream subscribers. Waiting never polls: blocking waiters park on
//! a condition variable, async waiters on a `tokio::sync::watch`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct Watermark {
    value: AtomicU64,
    lock: Mutex<()>,
    cond: Condvar,
    watch: tokio::sync::watch::Sender<u64>,
    /// When the latest value was published (for delivery-latency figures).
    published: Mutex<(u64, Instant)>,
}

impl Watermark {
    pub fn new(v: u64) -> Watermark {
        Watermark {
            value: AtomicU64::new(v),
            lock: Mutex::new(()),
            cond: Condvar::new(),
            watch: tokio::sync::watch::Sender::new(v),
            published: Mutex::new((v, Instant::now())),
        }
    }

    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// Raises the watermark and wakes every waiter. Never lowers it.
    pub fn publish(&self, v: u64) {
        let prev = self.value.fetch_max(v, Ordering::AcqRel);
        debug_assert!(prev <= v, "watermark moved backwards: {prev} -> {v}");
        *self.published.lock().unwrap_or_else(|p| p.into_inner()) = (v, Instant::now());
        {
            // Taking the lock orders this notify after a waiter's check.
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.cond.notify_all();
        }
        self.watch.send_modify(|w| *w = (*w).max(v));
    }

    /// Blocks until the watermark reaches `v` or `timeout` passes. Returns
    /// whether it was reached.
    pub fn wait_for(&self, v: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if self.get() >= v {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            g = self
                .cond
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Waits asynchronously until the watermark reaches `v`.
    pub async fn wait_for_async(&self, v: u64) {
        let mut rx = self.watch.subscribe();
        // An error means the sender is gone, which cannot happen while
        // `self` is borrowed; return either way.
        let _ = rx.wait_for(|w| *w >= v).await;
    }

    /// The latest published value and when it was published.
    pub fn last_published(&self) -> (u64, Instant) {
        *self.published.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A receiver that sees every published value.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch.subscribe()
    }
}
