//! The client's TLS configuration ([`ClientTls`]): the CA that server
//! certificates must chain to, optionally the client's own certificate
//! (mutual TLS), and the name the server's certificate must carry.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;

use crate::error::{Error, Result};
use crate::pem::{load_certs, load_key, load_roots};

/// A client's TLS configuration (cheap to clone).
#[derive(Clone)]
pub struct ClientTls {
    config: Arc<rustls::ClientConfig>,
    /// The name every server's certificate must carry; `None`: the IP
    /// address connected to (rcgen's and `treelog admin certs`'
    /// certificates carry their IPs).
    server_name: Option<ServerName<'static>>,
}

impl std::fmt::Debug for ClientTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientTls")
            .field("server_name", &self.server_name)
            .field(
                "client_cert",
                &self.config.client_auth_cert_resolver.has_certs(),
            )
            .finish()
    }
}

impl ClientTls {
    /// Trusts the CA certificates of `ca`; with `cert_and_key`, presents
    /// that certificate chain (and proves its key) to servers that ask.
    pub fn load(ca: &Path, cert_and_key: Option<(&Path, &Path)>) -> Result<ClientTls> {
        let roots = load_roots(ca)?;
        let builder = rustls::ClientConfig::builder_with_provider(crate::provider())
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
        let config = match cert_and_key {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => builder
                .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
                .map_err(|e| {
                    Error::Config(format!("{} with {}: {e}", cert.display(), key.display()))
                })?,
        };
        Ok(ClientTls {
            config: Arc::new(config),
            server_name: None,
        })
    }

    /// Verifies every server's certificate against `name` (a DNS name or
    /// an IP address) instead of the address connected to.
    pub fn with_server_name(mut self, name: &str) -> Result<ClientTls> {
        let n = ServerName::try_from(name.to_owned())
            .map_err(|e| Error::Config(format!("server name {name:?}: {e}")))?;
        self.server_name = Some(n);
        Ok(self)
    }

    /// Whether a server name was given ([`ClientTls::with_server_name`]).
    pub fn has_server_name(&self) -> bool {
        self.server_name.is_some()
    }

    /// The name the certificate of the server at `addr` must carry.
    pub fn server_name_for(&self, addr: SocketAddr) -> ServerName<'static> {
        self.server_name
            .clone()
            .unwrap_or_else(|| ServerName::IpAddress(addr.ip().into()))
    }

    /// Runs the TLS handshake with the server at `addr` over `io`.
    pub async fn connect<IO: AsyncRead + AsyncWrite + Unpin>(
        &self,
        addr: SocketAddr,
        io: IO,
    ) -> std::io::Result<tokio_rustls::client::TlsStream<IO>> {
        TlsConnector::from(self.config.clone())
            .connect(self.server_name_for(addr), io)
            .await
    }
}
