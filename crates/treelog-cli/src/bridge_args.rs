//! `treelog bridge`'s command line.

use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub(crate) enum BridgeCmd {
    /// Into a NATS JetStream stream: one subject per namespace, one
    /// message per record (parts for a record above the server's
    /// max_payload), `Nats-Msg-Id` and `Nats-Expected-Last-Sequence` on
    /// each; after a restart it resumes after the stream's last message.
    Nats(Box<BridgeNatsArgs>),
}

#[derive(Args, Debug)]
pub(crate) struct BridgeNatsArgs {
    /// NATS server URL(s), comma-separated for a cluster. A URL with a
    /// user and password belongs in the environment
    /// (`TREELOG_NATS_URL`), not the command line.
    #[arg(
        long,
        value_name = "URL",
        env = "TREELOG_NATS_URL",
        default_value = "nats://127.0.0.1:4222"
    )]
    pub nats: String,
    /// The JetStream stream (one per namespace: it holds only --subject).
    #[arg(long, value_name = "NAME")]
    pub stream: String,
    #[command(flatten)]
    pub opts: BridgeOpts,
    /// Serve the bridge's metrics on GET /metrics at this address.
    #[arg(long, value_name = "ADDR")]
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Log events on standard error as text or as JSON lines.
    #[arg(long, default_value_t = crate::server::LogFormat::Text)]
    pub log_format: crate::server::LogFormat,
}

/// What `bridge nats` and `serve --bridge-nats` share.
#[derive(Args, Debug, Clone)]
pub(crate) struct BridgeOpts {
    /// The subject (default: treelog.<namespace id>.log).
    #[arg(long, value_name = "SUBJECT")]
    pub subject: Option<String>,
    /// The durable treelog cursor that keeps the log until published
    /// (default: bridge-<stream>).
    #[arg(long, value_name = "NAME")]
    pub bridge_cursor: Option<String>,
    /// Payload encoding: `json` (the `tail --json` record) or `postcard`.
    #[arg(long, default_value = "json")]
    pub encoding: String,
    /// Replicas of the stream when the bridge creates it (it does when
    /// the stream does not exist); 0: never create it.
    #[arg(long, default_value_t = 1)]
    pub stream_replicas: usize,
    /// Where to start when the stream holds nothing of the namespace and
    /// the cursor does not exist: `beginning` (the log's first record) or
    /// `now`.
    #[arg(long, default_value = "beginning")]
    pub start: String,
    /// Messages in flight (sent, not yet acknowledged by JetStream).
    #[arg(long, default_value_t = 1024)]
    pub max_in_flight: usize,
    /// Cut records into parts of at most this many bytes (default: the
    /// server's max_payload less 1 KiB for headers).
    #[arg(long, hide = true)]
    pub max_payload: Option<usize>,
}
