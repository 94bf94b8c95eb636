//! The async Rust client of `treelog serve`, and a blocking one
//! ([`blocking::Client`]).
//!
//! A [`Client`] pipelines many requests over one TCP (or TLS) connection
//! at a time to one of its endpoints: each request gets an id, and replies
//! are matched back to their caller as they arrive. A lost connection is
//! replaced on the next request, by trying the endpoints in turn with
//! back-off, within the request's deadline; reads are sent again, a
//! mutation that may have been applied is `OutcomeUnknown`
//! (`docs/CLIENT.md`). Subscriptions get a connection of their own
//! ([`Client::subscribe`]) so that they can be resumed independently: a
//! [`RemoteSubscription`] resumes from the last position it delivered (or
//! restarts an unfinished snapshot).

pub mod backoff;
pub mod blocking;
mod client;
mod connection;
mod endpoint;
mod leader;
mod ops;
mod options;
mod subscription;

pub use backoff::Backoff;
pub use client::Client;
pub use endpoint::Endpoint;
pub use options::{ClientOptions, SeenSeq};
pub use subscription::{RemoteSubscription, ReplyStream};
pub use treelog_tls::ClientTls;

use treelog_proto::{bytestr, command, cursor, error, path, protocol, read, stream, types};

pub use treelog_proto::caller::Caller;
pub use treelog_proto::ByteString;
