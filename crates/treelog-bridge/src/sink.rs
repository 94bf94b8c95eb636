//! The bus behind the bridge, as a small trait: NATS JetStream
//! ([`crate::nats`]) today; a Kafka sink would implement the same three
//! promises (docs/BRIDGE.md §2).

use std::future::Future;

use crate::payload::{Mark, Message};

/// Where the bus stands for a namespace, read when an attempt opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Opened {
    /// The last message of the namespace in the bus, if any.
    pub last: Option<Mark>,
    /// The largest payload one message may carry (the bus's limit, less
    /// room for headers).
    pub max_payload: usize,
}

/// A message the bus stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acked {
    /// The bus had it already (its de-duplication caught a re-send).
    pub duplicate: bool,
}

/// Why the bus refused or failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkError {
    /// Worth trying again (connection lost, timeout, a racing writer);
    /// false for a configuration the bridge cannot work with.
    pub retry: bool,
    pub message: String,
}

impl SinkError {
    pub fn retry(message: impl Into<String>) -> SinkError {
        SinkError {
            retry: true,
            message: message.into(),
        }
    }

    pub fn fatal(message: impl Into<String>) -> SinkError {
        SinkError {
            retry: false,
            message: message.into(),
        }
    }
}

impl std::fmt::Display for SinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// A bus the bridge publishes to. Its promises, which make the bridge
/// exactly-once:
///
/// 1. [`Sink::open`] reads the namespace's last stored message; should a
///    message of an earlier attempt still be stored after that read, the
///    new attempt's first message is refused (and the attempt starts
///    again from there).
/// 2. Messages of an attempt are stored in the order sent, and a message
///    is stored only if every message sent before it in the attempt was
///    (no gap, even with many in flight).
/// 3. A message's ack resolves only once the bus stored it durably.
pub trait Sink: Send {
    type Ack: Future<Output = Result<Acked, SinkError>> + Send + 'static;

    /// Connects (again) and reads where the bus stands for `namespace`.
    fn open(&mut self, namespace: &str) -> impl Future<Output = Result<Opened, SinkError>> + Send;

    /// Whether the bus is reachable now (for `treelog_bridge_connected`).
    fn connected(&self) -> bool {
        true
    }

    /// Sends a message of `namespace`; the returned future is its ack.
    fn send(
        &mut self,
        namespace: &str,
        msg: &Message,
    ) -> impl Future<Output = Result<Self::Ack, SinkError>> + Send;
}
