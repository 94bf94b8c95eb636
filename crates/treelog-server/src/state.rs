//! What the ports and the connections share: the settings, the store once
//! it is open, the admission and authentication state, the stop signal.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, OnceLock};

use tokio::sync::watch;
use treelog::{Result, Treelog};

use crate::admission::Slots;
use crate::audit::Audit;
use crate::auth::Auth;
use crate::backups::Backups;
use crate::config::ServerConfig;
use crate::credentials::Credentials;
use crate::logging::Refusals;
use crate::metrics::ServerMetrics;
use crate::streams::delivery::DeliveryRuntime;

pub(crate) struct State {
    pub(crate) cfg: ServerConfig,
    pub(crate) store: OnceLock<Arc<Treelog>>,
    pub(crate) ready: AtomicBool,
    /// The server's metrics (on the store's registry), once the store is
    /// open.
    pub(crate) metrics: OnceLock<Arc<ServerMetrics>>,
    /// The RPC port's connection slots.
    pub(crate) slots: Arc<Slots>,
    /// The token, the credentials, and the delays of addresses that keep
    /// failing them.
    pub(crate) auth: Auth,
    /// The credentials file, reloaded by a task of its own.
    pub(crate) credentials: Option<Arc<Credentials>>,
    /// The audit log, when it is on.
    pub(crate) audit: Option<Arc<Audit>>,
    /// Rate limits of the refused-connection warnings.
    pub(crate) refusals: Refusals,
    pub(crate) shutdown: watch::Receiver<bool>,
    /// Stops both ports (the handle's shutdown, or the writer's failure).
    pub(crate) stop: Arc<watch::Sender<bool>>,
    /// Subscriptions are delivered here, at a lower priority than request
    /// handling and the writer (see [`DeliveryRuntime`]).
    pub(crate) delivery: DeliveryRuntime,
    /// Backups being fetched over the RPC port.
    pub(crate) backups: Arc<Backups>,
}

impl State {
    /// The state of a server with settings `cfg` (final: the connection
    /// limit already fitted to the open-file limit), stopped by `stop`.
    pub(crate) fn new(cfg: ServerConfig, stop: Arc<watch::Sender<bool>>) -> Result<State> {
        let delivery = DeliveryRuntime::new(cfg.stream_priority)?;
        let credentials = match &cfg.credentials {
            Some(p) => Some(Arc::new(Credentials::load(p)?)),
            None => None,
        };
        let audit = match &cfg.audit_log {
            Some(t) => Some(Arc::new(Audit::start(t)?)),
            None => None,
        };
        Ok(State {
            slots: Arc::new(Slots::new(cfg.max_connections, cfg.handshaking_limit())),
            auth: Auth::new(cfg.token.clone(), credentials.clone()),
            credentials,
            audit,
            cfg,
            store: OnceLock::new(),
            ready: AtomicBool::new(false),
            metrics: OnceLock::new(),
            refusals: Default::default(),
            shutdown: stop.subscribe(),
            stop,
            delivery,
            backups: Default::default(),
        })
    }

    pub(crate) fn metrics(&self) -> Option<&Arc<ServerMetrics>> {
        self.metrics.get()
    }
}
