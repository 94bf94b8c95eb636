//! What this crate's integration tests share (each test file uses a part).
#![allow(dead_code)]

/// A real server in this process, on loopback ports the OS picks: what
/// `treelog-testkit-server` gives the crates built on the server, which
/// cannot be this crate's dev-dependency (it depends on this crate).
pub(crate) mod server {
    use std::path::Path;
    use std::sync::Arc;

    use treelog::Durability;
    use treelog_client::Client;
    use treelog_server::{ServerConfig, ServerHandle, ServerMetrics};

    /// The configuration of a test server on `data`: the RPC and HTTP
    /// ports on loopback, chosen by the OS, and no fsync; the defaults
    /// otherwise.
    pub(crate) fn config(data: &Path) -> ServerConfig {
        let mut c = ServerConfig::new(data.to_path_buf());
        c.listen = "127.0.0.1:0".parse().unwrap();
        c.http = "127.0.0.1:0".parse().unwrap();
        c.store = c.store.durability(Durability::None);
        c
    }

    /// Starts a server on `data` with [`config`] as `overrides` changes it
    /// (`|_| {}` for none).
    pub(crate) async fn start(
        data: &Path,
        overrides: impl FnOnce(&mut ServerConfig),
    ) -> ServerHandle {
        let mut cfg = config(data);
        overrides(&mut cfg);
        treelog_server::start(cfg).await.expect("start the server")
    }

    /// A client of `h`, with the default options.
    pub(crate) async fn client(h: &ServerHandle) -> Client {
        treelog_testkit::client::connect(h.bound.rpc).await
    }

    /// The server's own metrics (connections, requests, queues).
    pub(crate) fn server_metrics(h: &ServerHandle) -> Arc<ServerMetrics> {
        h.server_metrics().expect("metrics").clone()
    }
}
