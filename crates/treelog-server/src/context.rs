//! What the requests of one connection share ([`ConnCtx`]): the store, the
//! connection's reply queue and limits, its live streams, and the
//! counting of outcomes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Semaphore};
use treelog::metrics::READ_OPS;

use crate::metrics::ServerMetrics;
use treelog::{Error, Result, Treelog};

use crate::backups::Backups;
use crate::config::{ClusterService, ClusterSlot};
use crate::out::Out;
use crate::state::State;

pub(crate) struct ConnCtx {
    pub(crate) t: Arc<Treelog>,
    pub(crate) out: Out,
    /// Requests being answered at once, at most `max_in_flight`.
    pub(crate) in_flight: Arc<Semaphore>,
    /// The connection's live streams (subscriptions, replication), by
    /// request id: each one's cancel signal.
    subs: Mutex<HashMap<u64, watch::Sender<bool>>>,
    pub(crate) metrics: Option<Arc<ServerMetrics>>,
    pub(crate) shutdown: watch::Receiver<bool>,
    max_subscriptions: usize,
    /// Where streams run (see [`State::delivery`]).
    pub(crate) delivery: tokio::runtime::Handle,
    pub(crate) backups: Arc<Backups>,
    cluster: Option<ClusterSlot>,
    /// The name the client's verified TLS certificate carries (see
    /// `treelog_tls::peer_identity`); `None` without TLS or a client
    /// certificate.
    pub(crate) tls_identity: Option<String>,
}

impl ConnCtx {
    /// The context of a connection of the server `state` to `t`, replying
    /// on `out`, whose client's certificate names `tls_identity`.
    pub(crate) fn new(
        t: Arc<Treelog>,
        out: Out,
        state: &State,
        tls_identity: Option<String>,
    ) -> ConnCtx {
        let cfg = &state.cfg;
        ConnCtx {
            t,
            out,
            in_flight: Arc::new(Semaphore::new(cfg.max_in_flight)),
            subs: Default::default(),
            metrics: state.metrics().cloned(),
            shutdown: state.shutdown.clone(),
            max_subscriptions: cfg.max_subscriptions,
            delivery: state.delivery.handle().clone(),
            backups: state.backups.clone(),
            cluster: cfg.cluster.clone(),
            tls_identity,
        }
    }

    /// The node's cluster service; `InvalidArgument` on a single node,
    /// `Busy` until Raft runs.
    pub(crate) fn cluster(&self) -> Result<&Arc<dyn ClusterService>> {
        match &self.cluster {
            None => Err(Error::InvalidArgument(
                "this server is not a node of a Raft cluster (serve --node-id)".into(),
            )),
            Some(slot) => slot
                .get()
                .ok_or_else(|| Error::Busy("Raft is not running on this node yet".into())),
        }
    }

    /// Registers stream `id`; its cancel signal, or why it is refused.
    pub(crate) fn register_stream(
        &self,
        id: u64,
    ) -> std::result::Result<watch::Receiver<bool>, &'static str> {
        let (tx, rx) = watch::channel(false);
        match self.subs.lock() {
            Ok(subs) if subs.contains_key(&id) => Err("a request with this id is still active"),
            Ok(mut subs) if subs.len() < self.max_subscriptions => {
                subs.insert(id, tx);
                Ok(rx)
            }
            _ => Err("too many subscriptions on this connection"),
        }
    }

    /// Forgets stream `id` (it ended).
    pub(crate) fn unregister(&self, id: u64) {
        if let Ok(mut subs) = self.subs.lock() {
            subs.remove(&id);
        }
    }

    /// Cancels stream `target`; false when there is none.
    pub(crate) fn cancel(&self, target: u64) -> bool {
        match self.subs.lock().ok().and_then(|mut m| m.remove(&target)) {
            Some(tx) => {
                let _ = tx.send(true);
                true
            }
            None => false,
        }
    }

    /// Whether the connection carries a live stream (it is then not idle
    /// however quiet its client).
    pub(crate) fn has_streams(&self) -> bool {
        !self.subs.lock().map(|s| s.is_empty()).unwrap_or(true)
    }

    /// Tells every stream to end.
    pub(crate) fn end_streams(&self) {
        if let Ok(subs) = self.subs.lock() {
            for s in subs.values() {
                let _ = s.send(true);
            }
        }
    }

    /// Counts a request `name` that ended with `outcome` ("ok" or an
    /// error kind).
    pub(crate) fn count(&self, name: &str, outcome: &str) {
        if let Some(m) = &self.metrics {
            match READ_OPS.iter().position(|o| *o == name) {
                Some(i) if outcome == "ok" => m.requests_ok_by_op[i].inc(),
                _ => m.requests.with_label_values(&[name, outcome]).inc(),
            }
        }
    }

    /// Counts request `name` by its result.
    pub(crate) fn count_result<T>(&self, name: &str, res: &Result<T>) {
        self.count(
            name,
            match res {
                Ok(_) => "ok",
                Err(e) => e.kind().as_str(),
            },
        );
    }
}
