//! TLS for treelog's links (no engine here): the server's configuration
//! from PEM files, reloaded when they change ([`ServerTls`]), the
//! client's ([`ClientTls`]), the identity a verified client certificate
//! names ([`peer_identity`]), and certificates made without openssl
//! ([`certs`]).
//!
//! Everything runs on rustls' `ring` provider (see [`provider`]).
//!
//! The modules, from the bottom up: `error`, `pem` (files to
//! certificates and keys), `identity` (what a certificate names),
//! `server`, `client`, `certs`.

pub mod certs;
mod client;
mod error;
mod identity;
mod pem;
mod server;

use std::sync::Arc;

pub use client::ClientTls;
pub use error::{Error, Result};
pub use identity::{cert_name, fingerprint, peer_identity};
pub use pem::{load_certs, load_key, load_roots};
pub use server::{ClientAuth, ServerTls};

pub use tokio_rustls::{client::TlsStream as ClientStream, server::TlsStream as ServerStream};

/// The first byte of every TLS connection (a handshake record's content
/// type): a server that speaks both TLS and a plaintext protocol whose
/// frames never start with it tells them apart by it.
pub const TLS_HANDSHAKE_BYTE: u8 = 0x16;

/// The crypto provider of every configuration made here: `ring` (the one
/// async-nats already builds), named explicitly rather than installed
/// process-wide.
pub fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}
