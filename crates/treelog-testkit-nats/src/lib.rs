//! Real NATS servers for the bridge's tests (one, or a 3-node JetStream
//! cluster, on loopback ports: [`server`]), the check that a stream holds
//! the treelog log exactly: every record once, in order, no gap, each
//! payload the record's `tail --json` line byte for byte ([`stream`]),
//! and a writer's load to publish ([`load`]).
//!
//! The server is `nats-server` from PATH (`.ci/run` installs it), or
//! `TREELOG_NATS_SERVER`. Without one the tests say so and pass, unless
//! `TREELOG_REQUIRE_NATS=1` (CI) makes that a failure.

pub mod load;
pub mod server;
pub mod stream;

pub use load::write_load;
pub use server::{nats_server_bin, NatsCluster, NatsServer};
pub use stream::{check_stream, jetstream, last_published, stream_messages, wait_published};

/// The bridge's log events on the test's output (`RUST_LOG` filters;
/// default: the bridge's info).
pub fn logs() {
    let _ = tracing_subscriber::fmt()
        .with_test_writer()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "treelog_bridge=info".into()),
        )
        .try_init();
}
