//! The committed-sequence watermark: published by the writer after each
//! group, waited on by readers (read-your-writes tokens) and, later, by
//! change-stream subscribers. Waiting never polls: blocking waiters park on
//! a condition variable, async waiters on a `tokio::sync::watch`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

pub struct Watermark {
    /// When set, waiters are woken by a notifier thread (see
    /// [`Watermark::run_notifier`]), not by the publisher.
    notify: Mutex<NotifyState>,
    notify_cond: Condvar,
    value: AtomicU64,
    lock: Mutex<()>,
    cond: Condvar,
    watch: tokio::sync::watch::Sender<u64>,
    /// The latest published value and when (nanoseconds after `base`), for
    /// delivery-latency figures; lock-free so that readers never contend
    /// with the writer.
    published_seq: AtomicU64,
    published_nanos: AtomicU64,
    base: Instant,
}

#[derive(Default)]
struct NotifyState {
    delegated: bool,
    pending: bool,
    stop: bool,
}

impl Watermark {
    pub fn new(v: u64) -> Watermark {
        Watermark {
            notify: Mutex::new(NotifyState::default()),
            notify_cond: Condvar::new(),
            value: AtomicU64::new(v),
            lock: Mutex::new(()),
            cond: Condvar::new(),
            watch: tokio::sync::watch::Sender::new(v),
            published_seq: AtomicU64::new(v),
            published_nanos: AtomicU64::new(0),
            base: Instant::now(),
        }
    }

    pub fn get(&self) -> u64 {
        self.value.load(Ordering::Acquire)
    }

    /// Raises the watermark and wakes every waiter (or has the notifier do
    /// it). Never lowers it.
    pub fn publish(&self, v: u64) {
        let prev = self.value.fetch_max(v, Ordering::AcqRel);
        debug_assert!(prev <= v, "watermark moved backwards: {prev} -> {v}");
        self.published_nanos
            .store(self.base.elapsed().as_nanos() as u64, Ordering::Release);
        self.published_seq.store(v, Ordering::Release);
        {
            let mut n = self.notify.lock().unwrap_or_else(|p| p.into_inner());
            if n.delegated {
                n.pending = true;
                self.notify_cond.notify_one();
                return;
            }
        }
        self.wake_all();
    }

    fn wake_all(&self) {
        let v = self.get();
        {
            // Taking the lock orders this notify after a waiter's check.
            let _g = self.lock.lock().unwrap_or_else(|p| p.into_inner());
            self.cond.notify_all();
        }
        self.watch.send_modify(|w| *w = (*w).max(v));
    }

    /// Wakes waiters on behalf of the publisher, at most once per
    /// `min_interval`: with many subscribers the writer does not pay for
    /// waking each of them on every group, and under load they wake once per
    /// interval for everything committed meanwhile. Runs until
    /// [`Watermark::stop_notifier`].
    pub fn run_notifier(&self, min_interval: Duration) {
        self.notify
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .delegated = true;
        loop {
            {
                let mut n = self.notify.lock().unwrap_or_else(|p| p.into_inner());
                while !n.pending && !n.stop {
                    n = self.notify_cond.wait(n).unwrap_or_else(|p| p.into_inner());
                }
                if n.stop {
                    n.delegated = false;
                    drop(n);
                    self.wake_all();
                    return;
                }
                n.pending = false;
            }
            self.wake_all();
            // Pacing, not synchronisation: publications during this pause
            // are delivered together by the next wake.
            std::thread::sleep(min_interval);
        }
    }

    pub fn stop_notifier(&self) {
        let mut n = self.notify.lock().unwrap_or_else(|p| p.into_inner());
        n.stop = true;
        self.notify_cond.notify_all();
    }

    /// Blocks until the watermark reaches `v` or `timeout` passes. Returns
    /// whether it was reached.
    pub fn wait_for(&self, v: u64, timeout: Duration) -> bool {
        // Most reads ask for a state already committed: no lock, no clock.
        if self.get() >= v {
            return true;
        }
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
        let seq = self.published_seq.load(Ordering::Acquire);
        let nanos = self.published_nanos.load(Ordering::Acquire);
        (seq, self.base + Duration::from_nanos(nanos))
    }

    /// A receiver that sees every published value.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.watch.subscribe()
    }
}
