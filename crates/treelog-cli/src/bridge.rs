//! `treelog bridge nats`, and the bridge `treelog serve --bridge-nats`
//! runs beside the server (docs/BRIDGE.md).

use crate::args::{BridgeNatsArgs, BridgeOpts, Cli, ServeArgs};
use crate::backend::read_token;
use crate::error::{Error, Result};
use treelog_bridge::{BridgeConfig, BridgeError, Encoding, NatsConfig, Start};

/// A bridge of `server` into `stream` at `url`, with the library's
/// defaults for everything else (what `serve --bridge-nats` runs).
fn base_configs(
    server: impl ToString,
    token: Option<String>,
    url: &str,
    stream: &str,
    subject: Option<String>,
    stream_replicas: usize,
) -> (BridgeConfig, NatsConfig) {
    let mut cfg = BridgeConfig::new(server);
    cfg.token = token;
    cfg.cursor = treelog_bridge::default_cursor(stream);
    let mut nats = NatsConfig::new(url, stream);
    nats.subject = subject;
    nats.create_replicas = (stream_replicas > 0).then_some(stream_replicas);
    (cfg, nats)
}

/// The settings of `bridge nats` from its flags.
fn configs(
    server: &str,
    token: Option<String>,
    url: &str,
    stream: &str,
    o: &BridgeOpts,
) -> Result<(BridgeConfig, NatsConfig)> {
    let (mut cfg, mut nats) = base_configs(
        server,
        token,
        url,
        stream,
        o.subject.clone(),
        o.stream_replicas,
    );
    if let Some(c) = &o.bridge_cursor {
        cfg.cursor = c.clone();
    }
    cfg.encoding = Encoding::parse(&o.encoding).ok_or_else(|| {
        Error::InvalidArgument(format!("--encoding {:?}: json or postcard", o.encoding))
    })?;
    cfg.start = match o.start.as_str() {
        "beginning" => Start::Beginning,
        "now" => Start::Now,
        other => {
            return Err(Error::InvalidArgument(format!(
                "--start {other:?}: beginning or now"
            )))
        }
    };
    if o.max_in_flight == 0 {
        return Err(Error::InvalidArgument(
            "--max-in-flight must be at least 1".into(),
        ));
    }
    cfg.max_in_flight = o.max_in_flight;
    nats.max_payload = o.max_payload;
    Ok((cfg, nats))
}

fn bridge_error(e: BridgeError) -> Error {
    match e {
        BridgeError::Gap(m) => Error::PositionGone(m),
        BridgeError::Refused(m) => Error::InvalidArgument(m),
        BridgeError::Task(m) => Error::Protocol(m),
    }
}

/// `treelog bridge nats`: runs until SIGINT/SIGTERM, or an error it cannot
/// retry.
pub(crate) fn nats(cli: &Cli, a: &BridgeNatsArgs) -> Result<u8> {
    crate::server::init_logging(a.log_format)?;
    let Some(addr) = &cli.server else {
        return Err(Error::InvalidArgument(
            "bridge publishes a server's log: give --server ADDR".into(),
        ));
    };
    // Checked now (a typo is an error at start); resolved at each connect.
    treelog_client::Endpoint::parse_list(addr)?;
    let token = read_token(cli.token_file.as_deref())?;
    let (mut cfg, nats) = configs(addr, token, &a.nats, &a.stream, &a.opts)?;
    cfg.tls = crate::tls::client_tls(cli)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async {
        let registry = prometheus::Registry::new();
        if let Some(listen) = a.metrics_listen {
            let l = tokio::net::TcpListener::bind(listen).await?;
            tracing::info!(addr = %l.local_addr()?, "bridge metrics on /metrics");
            tokio::spawn(treelog_bridge::serve_metrics(l, registry.clone()));
        }
        let mut h = treelog_bridge::start_nats(cfg, nats, &registry).map_err(bridge_error)?;
        let signalled = treelog_server::signal_handlers();
        tokio::select! {
            signal = signalled => {
                tracing::info!(signal, "signal received: stopping the bridge");
                h.shutdown().await.map_err(bridge_error)
            }
            ended = h.ended() => ended.map_err(bridge_error),
        }
    })?;
    Ok(0)
}

/// The bridge of `serve --bridge-nats`, started once the server listens
/// (it is the server's own client, over its RPC port).
pub(crate) fn serve_bridge(
    a: &ServeArgs,
    listen: std::net::SocketAddr,
    token: Option<String>,
    tls: Option<std::sync::Arc<treelog_client::ClientTls>>,
) -> Option<(BridgeConfig, NatsConfig)> {
    let (Some(url), Some(stream)) = (&a.bridge_nats, &a.bridge_stream) else {
        return None;
    };
    let (mut cfg, nats) = base_configs(
        listen,
        token,
        url,
        stream,
        a.bridge_subject.clone(),
        a.bridge_stream_replicas,
    );
    cfg.tls = tls;
    Some((cfg, nats))
}

/// `serve --bridge-nats`: the server, and its bridge beside it. The bridge
/// stopping on an error it cannot retry is logged (and
/// `treelog_bridge_failed` set); the server goes on serving.
pub(crate) async fn serve_with_bridge(
    cfg: crate::server::ServerConfig,
    mut bridge: BridgeConfig,
    nats: NatsConfig,
) -> Result<()> {
    let mut h = treelog_server::start(cfg).await?;
    let signalled = treelog_server::signal_handlers();
    bridge.server = h.bound.rpc.to_string();
    let registry = match h.metrics() {
        Some(m) => m.registry().clone(),
        None => prometheus::Registry::new(),
    };
    tracing::info!(rpc = %h.bound.rpc, http = %h.bound.http, "ready");
    let mut b = Some(treelog_bridge::start_nats(bridge, nats, &registry).map_err(bridge_error)?);
    tokio::pin!(signalled);
    loop {
        tokio::select! {
            signal = &mut signalled => {
                tracing::info!(signal, "signal received: shutting down");
                if let Some(b) = b.take() {
                    let _ = b.shutdown().await;
                }
                return h.shutdown().await;
            }
            ended = h.ended() => {
                if let Some(b) = b.take() {
                    let _ = b.shutdown().await;
                }
                return ended;
            }
            failed = async { b.as_mut().expect("guarded").ended().await }, if b.is_some() => {
                tracing::error!(error = ?failed.err(), "the bridge stopped; the server goes on");
                b = None;
            }
        }
    }
}
