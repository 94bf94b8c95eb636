//! Every thread an open [`Treelog`](crate::Treelog) runs, started and
//! stopped in one place.
//!
//! The threads, and how each stops:
//!
//! | thread | started by | does | stops when |
//! |---|---|---|---|
//! | `treelog-writer` | [`Supervisor`] | validates, groups and appends commands ([`crate::commit::writer`]) | its command channel closes (the `Treelog` drops its sender first), after answering every queued command |
//! | `treelog-syncer`, `treelog-applier`, `treelog-cache` | the writer, as its pipeline | fsync and publish a round; write its index changes; grow the readers' cache | the writer ends: their channels close in turn, and the writer joins them before it returns |
//! | `treelog-notifier` | [`Supervisor`] (unless `wake_interval` is zero) | wakes waiting subscribers at most once per interval | its watermark's `stop_notifier` |
//! | `treelog-retention` | [`Supervisor`] (when a retention bound is set) | runs a retention pass every interval | its stop flag is set |
//! | `treelog-streams` | the server, as a `DeliveryRuntime` | delivers change streams at a lower priority | the runtime is dropped |
//! | `treelog-backup` | `Treelog::backup` / `serve_backup`, for the call's length | catches a checkpoint up, digests and copies it, under `SCHED_IDLE` | the call returns (it joins the thread) |
//!
//! [`Supervisor::stop_all`] stops the threads it started in the reverse
//! order of their start and joins each; a thread that panicked is reported,
//! not propagated (shutdown goes on: the log holds every acknowledged write).

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::error::Result;

/// How a supervised thread is asked to stop.
pub(crate) enum Stop {
    /// Call this, then join.
    Signal(Box<dyn FnOnce() + Send + Sync>),
    /// The thread ends by itself once its input closes (the caller closes
    /// it before [`Supervisor::stop_all`]); only join.
    InputClosed,
}

struct Supervised {
    name: &'static str,
    handle: JoinHandle<()>,
    stop: Stop,
}

/// The threads of one open store (see the module docs).
#[derive(Default)]
pub(crate) struct Supervisor {
    threads: Vec<Supervised>,
}

impl Supervisor {
    /// Starts `body` on a thread named `name`.
    pub(crate) fn spawn(
        &mut self,
        name: &'static str,
        stop: Stop,
        body: impl FnOnce() + Send + 'static,
    ) -> Result<()> {
        let handle = std::thread::Builder::new().name(name.into()).spawn(body)?;
        self.threads.push(Supervised { name, handle, stop });
        Ok(())
    }

    /// Starts `tick` every `interval` on a thread named `name` until it is
    /// stopped (the wait is a timer, not synchronisation).
    pub(crate) fn spawn_periodic(
        &mut self,
        name: &'static str,
        interval: Duration,
        mut tick: impl FnMut() + Send + 'static,
    ) -> Result<()> {
        let stop = Arc::new((Mutex::new(false), Condvar::new()));
        let stopper = stop.clone();
        self.spawn(
            name,
            Stop::Signal(Box::new(move || {
                *stopper.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
                stopper.1.notify_all();
            })),
            move || loop {
                {
                    let g = stop.0.lock().unwrap_or_else(|p| p.into_inner());
                    let (g, _) = stop
                        .1
                        .wait_timeout_while(g, interval, |stopped| !*stopped)
                        .unwrap_or_else(|p| p.into_inner());
                    if *g {
                        return;
                    }
                }
                tick();
            },
        )
    }

    /// The names of the running threads, in start order.
    pub(crate) fn names(&self) -> Vec<&'static str> {
        self.threads.iter().map(|t| t.name).collect()
    }

    /// Stops and joins every thread, the last started first.
    pub(crate) fn stop_all(&mut self) {
        while let Some(t) = self.threads.pop() {
            if let Stop::Signal(stop) = t.stop {
                stop();
            }
            if t.handle.join().is_err() {
                tracing::error!(thread = t.name, "a thread panicked before shutdown");
            }
        }
    }
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn threads_stop_in_reverse_start_order() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut s = Supervisor::default();
        for name in ["first", "second", "third"] {
            let (tx, rx) = crossbeam_channel::bounded::<()>(0);
            let o = order.clone();
            s.spawn(name, Stop::Signal(Box::new(move || drop(tx))), move || {
                let _ = rx.recv();
                o.lock().unwrap().push(name);
            })
            .unwrap();
        }
        assert_eq!(s.names(), ["first", "second", "third"]);
        s.stop_all();
        assert!(s.names().is_empty());
        assert_eq!(*order.lock().unwrap(), ["third", "second", "first"]);
    }

    #[test]
    fn a_periodic_thread_ticks_until_stopped() {
        let ticks = Arc::new(AtomicUsize::new(0));
        let (tx, rx) = crossbeam_channel::unbounded();
        let mut s = Supervisor::default();
        let t = ticks.clone();
        s.spawn_periodic("ticker", Duration::from_millis(1), move || {
            t.fetch_add(1, Ordering::SeqCst);
            let _ = tx.send(());
        })
        .unwrap();
        // Synchronised on the ticks themselves, not on time.
        for _ in 0..3 {
            rx.recv().unwrap();
        }
        // Returns only once the thread has stopped and been joined.
        s.stop_all();
        assert!(ticks.load(Ordering::SeqCst) >= 3);
        assert!(s.names().is_empty());
    }

    #[test]
    fn a_panicked_thread_does_not_stop_the_shutdown() {
        let mut s = Supervisor::default();
        let (tx, rx) = crossbeam_channel::bounded::<()>(0);
        s.spawn("panics", Stop::InputClosed, || panic!("on purpose"))
            .unwrap();
        s.spawn(
            "waits",
            Stop::Signal(Box::new(move || drop(tx))),
            move || {
                let _ = rx.recv();
            },
        )
        .unwrap();
        s.stop_all();
        assert!(s.names().is_empty());
    }
}
