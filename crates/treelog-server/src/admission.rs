//! Admission to the RPC port: a slot per connection, and a share of them
//! for connections that have not completed their handshake (the oldest of
//! which gives its slot up to a newer one).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, OwnedSemaphorePermit, Semaphore};

use crate::metrics::ServerMetrics;

/// The RPC port's connection slots.
pub(crate) struct Slots {
    free: Arc<Semaphore>,
    /// At most this many connections wait for their handshake at once.
    handshaking_limit: usize,
    handshakes: Mutex<Handshakes>,
}

/// A connection waiting for its handshake: its slot, and how to close it.
struct Waiting {
    permit: OwnedSemaphorePermit,
    evict: oneshot::Sender<()>,
}

/// Connections that hold a slot but have not completed their handshake,
/// oldest first (ids grow).
#[derive(Default)]
struct Handshakes {
    next_id: u64,
    waiting: BTreeMap<u64, Waiting>,
}

impl Handshakes {
    /// Closes the oldest connection waiting for its handshake; returns its
    /// slot.
    fn evict_oldest(
        &mut self,
        metrics: Option<&Arc<ServerMetrics>>,
    ) -> Option<OwnedSemaphorePermit> {
        let (_, w) = self.waiting.pop_first()?;
        let _ = w.evict.send(());
        if let Some(m) = metrics {
            m.handshake_evictions.inc();
        }
        Some(w.permit)
    }

    fn set_gauge(&self, metrics: Option<&Arc<ServerMetrics>>) {
        if let Some(m) = metrics {
            m.handshaking.set(self.waiting.len() as i64);
        }
    }
}

impl Slots {
    pub(crate) fn new(connections: usize, handshaking_limit: usize) -> Slots {
        Slots {
            free: Arc::new(Semaphore::new(connections)),
            handshaking_limit,
            handshakes: Default::default(),
        }
    }

    fn handshakes(&self) -> MutexGuard<'_, Handshakes> {
        self.handshakes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives a new connection a slot: a free one, else the slot of the
    /// oldest connection still waiting for its handshake. At most
    /// `handshaking_limit` connections wait at once (the oldest is closed
    /// to admit a newer one), so the rest of the slots stay with clients
    /// that completed the handshake. `None`: every slot belongs to a
    /// handshaken client.
    pub(crate) fn admit(
        self: &Arc<Slots>,
        metrics: Option<&Arc<ServerMetrics>>,
    ) -> Option<Admission> {
        let mut hs = self.handshakes();
        let permit = match self.free.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => hs.evict_oldest(metrics)?,
        };
        if hs.waiting.len() >= self.handshaking_limit {
            drop(hs.evict_oldest(metrics));
        }
        let id = hs.next_id;
        hs.next_id += 1;
        let (evict, evicted) = oneshot::channel();
        hs.waiting.insert(id, Waiting { permit, evict });
        hs.set_gauge(metrics);
        Some(Admission {
            slots: self.clone(),
            metrics: metrics.cloned(),
            id,
            evicted,
            permit: None,
        })
    }
}

/// A connection's slot. Until the handshake completes it sits among the
/// [`Slots`]' handshakes, where a newer connection may reclaim it.
pub(crate) struct Admission {
    slots: Arc<Slots>,
    metrics: Option<Arc<ServerMetrics>>,
    id: u64,
    /// Fires when the slot is reclaimed for a newer connection.
    pub(crate) evicted: oneshot::Receiver<()>,
    /// Held once the handshake completed.
    permit: Option<OwnedSemaphorePermit>,
}

impl Admission {
    /// Takes the slot out of the handshake share. False: it was reclaimed
    /// for a newer connection.
    pub(crate) fn complete(&mut self) -> bool {
        let mut hs = self.slots.handshakes();
        self.permit = hs.waiting.remove(&self.id).map(|w| w.permit);
        hs.set_gauge(self.metrics.as_ref());
        self.permit.is_some()
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        if self.permit.is_none() {
            let mut hs = self.slots.handshakes();
            hs.waiting.remove(&self.id);
            hs.set_gauge(self.metrics.as_ref());
        }
    }
}
