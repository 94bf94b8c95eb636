//! PEM files to what rustls takes: certificate chains, a private key, a
//! CA's root store.

use std::path::Path;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::RootCertStore;

use crate::error::{Error, Result};

pub(crate) fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::Io {
        path: path.to_owned(),
        source,
    })
}

fn pem_error(path: &Path, why: impl Into<String>) -> Error {
    Error::Pem {
        path: path.to_owned(),
        why: why.into(),
    }
}

/// The certificates of a PEM file, in order (a chain: the end entity's
/// first); at least one.
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>> {
    let bytes = read(path)?;
    let certs = rustls_pemfile::certs(&mut &bytes[..])
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| pem_error(path, e.to_string()))?;
    if certs.is_empty() {
        return Err(pem_error(path, "no CERTIFICATE block in the file"));
    }
    Ok(certs)
}

/// The first private key of a PEM file (PKCS#8, PKCS#1 or SEC1).
pub fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>> {
    let bytes = read(path)?;
    rustls_pemfile::private_key(&mut &bytes[..])
        .map_err(|e| pem_error(path, e.to_string()))?
        .ok_or_else(|| pem_error(path, "no PRIVATE KEY block in the file"))
}

/// The CA certificates of a PEM file, as trust anchors.
pub fn load_roots(path: &Path) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    for c in load_certs(path)? {
        roots
            .add(c)
            .map_err(|e| pem_error(path, format!("not a usable CA certificate: {e}")))?;
    }
    Ok(roots)
}
