//! `treelog serve`: the server on the data directory.

use crate::args::{Cli, ServeArgs};
use crate::backend::read_token;
use crate::error::Result;
use crate::server::check_secret_len;
use treelog::Options;

pub(crate) fn run(cli: &Cli, a: &ServeArgs) -> Result<u8> {
    crate::server::init_logging(a.log_format)?;
    let mut cfg = crate::server::ServerConfig::new(cli.data.clone());
    cfg.listen = a.listen;
    cfg.http = a.http;
    let token_file = a.token_file.as_deref().or(cli.token_file.as_deref());
    cfg.token = read_token(token_file)?;
    if let (Some(p), Some(t)) = (token_file, &cfg.token) {
        check_secret_len(&format!("token file {}", p.display()), t)?;
    }
    cfg.credentials = a.credentials.clone();
    cfg.peer_tls_names = a.peer_tls_names.clone();
    cfg.audit_log = a.audit_log.clone();
    cfg.enforce_permissions = a.enforce_permissions;
    cfg.max_connections = a.max_connections;
    cfg.max_handshaking = a.max_handshaking;
    cfg.max_in_flight = a.max_in_flight;
    cfg.max_in_flight_bytes = a.max_in_flight_bytes;
    cfg.max_snapshot_age = std::time::Duration::from_secs(a.max_snapshot_age_secs);
    cfg.snapshot_stall_timeout = std::time::Duration::from_secs(a.snapshot_stall_secs);
    cfg.max_frame = a.max_frame;
    cfg.max_conn_buffer_bytes = a.max_conn_buffer_bytes;
    cfg.max_http_connections = a.max_http_connections;
    cfg.http_header_timeout = std::time::Duration::from_secs(a.http_header_timeout_secs);
    cfg.max_http_per_address = a.max_http_per_address;
    cfg.http_connection_age = std::time::Duration::from_secs(a.http_connection_age_secs);
    cfg.allow_insecure_listen = a.allow_insecure_listen;
    cfg.tls = crate::tls::server_tls(cli, a)?;
    cfg.require_tls = a.require_tls;
    cfg.http_tls = a.http_tls;
    // Its links to other nodes, its source, its bridge: the same CA, and
    // its own certificate as its client certificate.
    let client_tls = crate::tls::client_tls(cli)?;
    cfg.exit_on_writer_failure = a.on_writer_failure == crate::args::OnWriterFailure::Exit;
    cfg.idle_timeout = std::time::Duration::from_secs(a.idle_timeout_secs);
    cfg.stream_priority = a.stream_priority;
    cfg.store = Options::default().durability(cli.durability.into());
    cfg.store.writer.max_delete_inodes = a.max_delete_inodes;
    cfg.store.writer.max_record_bytes = a.max_record_bytes;
    cfg.store.migrate = a.migrate;
    cfg.store.retention = crate::retention::RetentionPolicy {
        max_records: a.retain_records,
        max_age: a.retain_secs.map(std::time::Duration::from_secs),
        max_bytes: a.retain_bytes,
        max_cursor_lag: a.max_cursor_lag,
        interval: None,
    };
    let rt = crate::server::request_runtime(a.worker_policy)?;
    if let Some(id) = a.node_id {
        let mut node = treelog_raft::NodeConfig::new(
            id,
            a.advertise
                .clone()
                .unwrap_or_else(|| cfg.listen.to_string()),
        );
        node.token = match &a.peer_token_file {
            Some(p) => {
                let t = read_token(Some(p))?;
                if let Some(t) = &t {
                    check_secret_len(&format!("--peer-token-file {}", p.display()), t)?;
                }
                t
            }
            None => cfg.token.clone(),
        };
        node.tls = client_tls.clone();
        node.durability = cli.durability.into();
        node.heartbeat_ms = a.raft_heartbeat_ms;
        node.snapshot_every = a.raft_snapshot_every;
        node.keep_after_snapshot = a.raft_keep_after_snapshot;
        node.ready_max_lag = a.ready_max_lag;
        rt.block_on(treelog_raft::run(treelog_raft::ClusterConfig {
            server: cfg,
            node,
        }))?;
        return Ok(0);
    }
    match &a.replica_of {
        Some(source) => {
            let mut rc = treelog_replica::ReplicaConfig::new(cfg, source);
            rc.source_token = read_token(a.source_token_file.as_deref())?;
            rc.source_tls = client_tls;
            rc.catch_up_min = a.replica_catch_up_min;
            rc.max_batch_bytes = a.replica_batch_bytes;
            if let Some(c) = &a.replica_cursor {
                rc.cursor = Some(c.clone());
            }
            rt.block_on(treelog_replica::run(rc))?;
        }
        None => match crate::bridge::serve_bridge(
            a,
            cfg.listen,
            match &a.bridge_token_file {
                Some(f) => read_token(Some(f))?,
                None => cfg.token.clone(),
            },
            client_tls,
        ) {
            None => rt.block_on(crate::server::run(cfg))?,
            Some((bridge, nats)) => {
                rt.block_on(crate::bridge::serve_with_bridge(cfg, bridge, nats))?
            }
        },
    }
    Ok(0)
}
