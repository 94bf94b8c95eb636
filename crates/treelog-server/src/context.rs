//! What the requests of one connection share ([`ConnCtx`]): the store, the
//! connection's reply queue and limits, who it is, its live streams, and
//! the counting of outcomes (and their audit lines).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use treelog::metrics::READ_OPS;

use crate::metrics::ServerMetrics;
use treelog::{Caller, Error, Result, Treelog, ViewPins};

use crate::audit::{self, Audit, Draft, Who};
use crate::backups::Backups;
use crate::config::{ClusterService, ClusterSlot};
use crate::out::Out;
use crate::roles::{Identity, Role};
use crate::state::State;

/// A request's place among the connection's requests in flight (see
/// [`ConnCtx::admit`]): given back when dropped.
pub(crate) struct InFlight {
    _count: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

pub(crate) struct ConnCtx {
    pub(crate) t: Arc<Treelog>,
    pub(crate) out: Out,
    /// Requests being answered at once, at most `max_in_flight`.
    in_flight: Arc<Semaphore>,
    /// Bytes of the frames of the requests being answered, at most
    /// `max_in_flight_bytes` (a larger frame takes them all, alone).
    in_flight_bytes: Arc<Semaphore>,
    max_in_flight_bytes: usize,
    /// The connection's live streams (subscriptions, replication), by
    /// request id: each one's cancel signal.
    subs: Mutex<HashMap<u64, watch::Sender<bool>>>,
    pub(crate) metrics: Option<Arc<ServerMetrics>>,
    pub(crate) shutdown: watch::Receiver<bool>,
    max_subscriptions: usize,
    /// See [`crate::ServerConfig::max_snapshot_age`].
    pub(crate) max_snapshot_age: std::time::Duration,
    /// See [`crate::ServerConfig::snapshot_stall_timeout`].
    pub(crate) snapshot_stall_timeout: std::time::Duration,
    /// Where streams run (see [`State::delivery`]).
    pub(crate) delivery: tokio::runtime::Handle,
    pub(crate) backups: Arc<Backups>,
    cluster: Option<ClusterSlot>,
    /// The read views this connection pinned: its own share, released
    /// when the connection closes.
    pub(crate) pins: ViewPins,
    /// Whose credential the handshake checked.
    pub(crate) identity: Identity,
    pub(crate) peer: SocketAddr,
    /// The name the client's verified TLS certificate carries (see
    /// `treelog_tls::peer_identity`); `None` without TLS or a client
    /// certificate.
    pub(crate) tls_identity: Option<String>,
    audit: Option<Arc<Audit>>,
    /// See [`crate::ServerConfig::enforce_permissions`].
    enforce_permissions: bool,
}

impl ConnCtx {
    /// The context of a connection from `peer`, authenticated as
    /// `identity` (its client's certificate naming `tls_identity`), of the
    /// server `state` to `t`, replying on `out`.
    pub(crate) fn new(
        t: Arc<Treelog>,
        out: Out,
        state: &State,
        mut identity: Identity,
        peer: SocketAddr,
        tls_identity: Option<String>,
    ) -> ConnCtx {
        let cfg = &state.cfg;
        // A node's certificate gives node powers whatever its credential.
        if tls_identity
            .as_ref()
            .is_some_and(|n| cfg.peer_tls_names.iter().any(|p| p == n))
        {
            identity.node = true;
        }
        ConnCtx {
            pins: t.view_pins(),
            t,
            out,
            in_flight: Arc::new(Semaphore::new(cfg.max_in_flight)),
            in_flight_bytes: Arc::new(Semaphore::new(cfg.max_in_flight_bytes)),
            max_in_flight_bytes: cfg.max_in_flight_bytes,
            subs: Default::default(),
            metrics: state.metrics().cloned(),
            shutdown: state.shutdown.clone(),
            max_subscriptions: cfg.max_subscriptions,
            max_snapshot_age: cfg.max_snapshot_age,
            snapshot_stall_timeout: cfg.snapshot_stall_timeout,
            delivery: state.delivery.handle().clone(),
            backups: state.backups.clone(),
            cluster: cfg.cluster.clone(),
            identity,
            peer,
            tls_identity,
            audit: state.audit.clone(),
            enforce_permissions: cfg.enforce_permissions,
        }
    }

    /// The user a request is checked as (`None`: not checked), given the
    /// caller it names (`RequestAs`): on a server that enforces
    /// permissions, that caller once the credential may act for users;
    /// without one, the user named after a credential that is not an
    /// admin's or a node's. A server that does not enforce checks no one.
    pub(crate) fn caller_for(&self, named: Option<Caller>) -> Result<Option<Caller>> {
        if !self.enforce_permissions {
            return Ok(None);
        }
        let id = &self.identity;
        match named {
            Some(c) if id.role.acts_for_users() => {
                c.validate()?;
                Ok(Some(c))
            }
            Some(c) => Err(Error::PermissionDenied(format!(
                "credential {} (role {}) may not make requests for user {} \
                 (a proxy or admin credential may)",
                id.name, id.role, c.user
            ))),
            None if id.node || id.role == Role::Admin => Ok(None),
            None => Ok(Some(Caller::new(id.name.clone(), Vec::new()))),
        }
    }

    /// Whether the audit log is on.
    pub(crate) fn auditing(&self) -> bool {
        self.audit.is_some()
    }

    /// Records `draft`'s line ending with `outcome`, waiting while the
    /// audit log's queue is full (this connection then reads nothing
    /// more).
    pub(crate) async fn audit(&self, draft: Draft, outcome: &str, seq: Option<u64>) {
        let Some(a) = &self.audit else { return };
        let who = Who {
            identity: &self.identity,
            peer: self.peer,
            tls_identity: self.tls_identity.as_deref(),
        };
        a.record(audit::line(&who, draft, outcome, seq)).await;
    }

    /// Counts a request refused for the connection's role.
    pub(crate) fn count_denied(&self) {
        if let Some(m) = &self.metrics {
            m.permission_denied
                .with_label_values(&[self.identity.role.as_str()])
                .inc();
        }
    }

    /// A place among the requests in flight for requests whose frames
    /// took `bytes`: waits (the connection reading nothing more meanwhile)
    /// until both their number and their bytes fit. `None` once the
    /// connection is closing.
    pub(crate) async fn admit(&self, bytes: usize) -> Option<InFlight> {
        let count = self.in_flight.clone().acquire_owned().await.ok()?;
        let n = bytes.clamp(1, self.max_in_flight_bytes);
        let bytes = self
            .in_flight_bytes
            .clone()
            .acquire_many_owned(u32::try_from(n).unwrap_or(u32::MAX))
            .await
            .ok()?;
        Some(InFlight {
            _count: count,
            _bytes: bytes,
        })
    }

    /// The node's cluster service, when it is a Raft node and Raft runs.
    pub(crate) fn cluster_service(&self) -> Option<&Arc<dyn ClusterService>> {
        self.cluster.as_ref().and_then(|slot| slot.get())
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
