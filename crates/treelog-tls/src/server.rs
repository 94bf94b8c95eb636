//! The server's TLS configuration ([`ServerTls`]): a certificate and key,
//! and optionally a CA that client certificates are verified against
//! (mutual TLS), from PEM files that are read again when they change.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwap;
use rustls::server::WebPkiClientVerifier;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsAcceptor;

use crate::error::{Error, Result};
use crate::identity::fingerprint;
use crate::pem::{load_certs, load_key, load_roots};

/// Whether a server with a CA requires its clients to present a
/// certificate, or only verifies one when presented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClientAuth {
    /// Clients without a certificate are served (with no TLS identity);
    /// one that presents a certificate the CA did not sign is refused.
    #[default]
    Optional,
    Required,
}

/// A server's TLS configuration. Cloning shares it: a reload is seen by
/// every clone, and by every connection accepted after it (connections
/// already open keep theirs).
#[derive(Clone)]
pub struct ServerTls(Arc<Inner>);

struct Inner {
    files: Files,
    current: ArcSwap<Loaded>,
    /// The files' stamps when a reload last failed: the same broken files
    /// are not reported again at every poll.
    failed: Mutex<Option<Stamps>>,
}

/// The files a configuration is read from.
struct Files {
    cert: PathBuf,
    key: PathBuf,
    ca: Option<(PathBuf, ClientAuth)>,
}

/// A configuration built from the files, and their stamps then.
struct Loaded {
    config: Arc<rustls::ServerConfig>,
    stamps: Stamps,
    fingerprint: String,
}

/// What tells that a file changed: its modification time, size and inode
/// (a file replaced by a rename within the same clock tick still differs).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamps(Vec<Option<(SystemTime, u64, u64)>>);

impl std::fmt::Debug for ServerTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerTls")
            .field("cert", &self.0.files.cert)
            .field("key", &self.0.files.key)
            .field("ca", &self.0.files.ca)
            .field("fingerprint", &self.fingerprint())
            .finish()
    }
}

impl ServerTls {
    /// The configuration of the certificate chain `cert` with its key
    /// `key`; with `ca`, client certificates are verified against that
    /// CA's certificates (`ClientAuth` says whether one is required).
    pub fn load(cert: &Path, key: &Path, ca: Option<(&Path, ClientAuth)>) -> Result<ServerTls> {
        let files = Files {
            cert: cert.to_owned(),
            key: key.to_owned(),
            ca: ca.map(|(p, a)| (p.to_owned(), a)),
        };
        Ok(ServerTls(Arc::new(Inner {
            current: ArcSwap::from_pointee(files.build()?),
            files,
            failed: Mutex::new(None),
        })))
    }

    /// An acceptor with the configuration in force now.
    pub fn acceptor(&self) -> TlsAcceptor {
        TlsAcceptor::from(self.config())
    }

    /// The rustls configuration in force now.
    pub fn config(&self) -> Arc<rustls::ServerConfig> {
        self.0.current.load().config.clone()
    }

    /// Runs the TLS handshake of an accepted connection.
    pub async fn accept<IO: AsyncRead + AsyncWrite + Unpin>(
        &self,
        io: IO,
    ) -> std::io::Result<tokio_rustls::server::TlsStream<IO>> {
        self.acceptor().accept(io).await
    }

    /// The SHA-256 fingerprint of the certificate served now.
    pub fn fingerprint(&self) -> String {
        self.0.current.load().fingerprint.clone()
    }

    /// Whether client certificates are verified (a CA was given).
    pub fn verifies_clients(&self) -> bool {
        self.0.files.ca.is_some()
    }

    /// Reads the files again and serves what they hold from the next
    /// connection on. When they do not make a working configuration (a
    /// key that does not match the certificate, a truncated file, ...),
    /// the configuration in force stays, and the error is logged and
    /// returned.
    pub fn reload(&self) -> Result<()> {
        match self.0.files.build() {
            Ok(loaded) => {
                tracing::info!(
                    cert = %self.0.files.cert.display(),
                    fingerprint = %loaded.fingerprint,
                    "TLS certificate loaded"
                );
                self.0.current.store(Arc::new(loaded));
                *self.0.failed.lock().unwrap_or_else(|e| e.into_inner()) = None;
                Ok(())
            }
            Err(e) => {
                tracing::error!(
                    error = %e,
                    fingerprint = %self.fingerprint(),
                    "TLS files not reloaded: still serving the certificate loaded before"
                );
                *self.0.failed.lock().unwrap_or_else(|e| e.into_inner()) =
                    Some(self.0.files.stamps());
                Err(e)
            }
        }
    }

    /// [`ServerTls::reload`] if a file changed since the last load (or the
    /// last failed reload); whether a new configuration is in force.
    pub fn reload_if_changed(&self) -> Result<bool> {
        let now = self.0.files.stamps();
        if now == self.0.current.load().stamps {
            return Ok(false);
        }
        if self
            .0
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            == Some(&now)
        {
            return Ok(false);
        }
        self.reload().map(|()| true)
    }

    /// Looks at the files every `every`, reloading them when they change;
    /// never ends (the server aborts it at shutdown).
    pub async fn watch(self, every: Duration) {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            // A failure is logged by `reload`.
            let _ = self.reload_if_changed();
        }
    }
}

impl Files {
    fn files(&self) -> Vec<&Path> {
        let mut f = vec![self.cert.as_path(), self.key.as_path()];
        if let Some((ca, _)) = &self.ca {
            f.push(ca);
        }
        f
    }

    fn stamps(&self) -> Stamps {
        Stamps(
            self.files()
                .into_iter()
                .map(|p| {
                    let m = std::fs::metadata(p).ok()?;
                    #[cfg(unix)]
                    let ino = std::os::unix::fs::MetadataExt::ino(&m);
                    #[cfg(not(unix))]
                    let ino = 0;
                    Some((m.modified().ok()?, m.len(), ino))
                })
                .collect(),
        )
    }

    /// A configuration from the files as they are now. The stamps are
    /// taken first: a file changed while it is read is read again at the
    /// next poll.
    fn build(&self) -> Result<Loaded> {
        let stamps = self.stamps();
        let certs = load_certs(&self.cert)?;
        let key = load_key(&self.key)?;
        let fingerprint = fingerprint(&certs[0]);
        let provider = crate::provider();
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?;
        let builder = match &self.ca {
            None => builder.with_no_client_auth(),
            Some((ca, auth)) => {
                let roots = Arc::new(load_roots(ca)?);
                let v = WebPkiClientVerifier::builder_with_provider(roots, provider);
                let v = match auth {
                    ClientAuth::Optional => v.allow_unauthenticated(),
                    ClientAuth::Required => v,
                };
                builder.with_client_cert_verifier(
                    v.build()
                        .map_err(|e| Error::Config(format!("{}: {e}", ca.display())))?,
                )
            }
        };
        let config = builder.with_single_cert(certs, key).map_err(|e| {
            Error::Config(format!(
                "{} with {}: {e}",
                self.cert.display(),
                self.key.display()
            ))
        })?;
        Ok(Loaded {
            config: Arc::new(config),
            stamps,
            fingerprint,
        })
    }
}
