//! Certificates for a test or a small deployment, without openssl: a CA
//! ([`Ca`]) and the node and client certificates it issues, as PEM files
//! (`ca.pem`, `ca-key.pem`, `<name>.pem`, `<name>-key.pem`).

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, Certificate, CertificateParams, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
};
use time::{Duration, OffsetDateTime};

use crate::error::{Error, Result};
use crate::identity;

fn certs_error(e: impl std::fmt::Display) -> Error {
    Error::Certs(e.to_string())
}

/// What a node or client certificate is for and names.
#[derive(Debug, Clone)]
pub struct CertSpec {
    /// The subject's common name: the identity a server sees (see
    /// [`crate::peer_identity`]), and the files' name.
    pub name: String,
    pub ips: Vec<IpAddr>,
    pub dns: Vec<String>,
    pub days: u32,
    /// Usable by a server (a node: it also presents it to its peers as
    /// their client); otherwise by a client only.
    pub server: bool,
    /// Valid from two days ago until yesterday (for tests of refusal).
    pub expired: bool,
}

impl CertSpec {
    /// A node's certificate: server and client use, loopback IPs and
    /// `localhost` until more are given, a year.
    pub fn node(name: &str) -> CertSpec {
        CertSpec {
            name: name.to_owned(),
            ips: Vec::new(),
            dns: Vec::new(),
            days: 365,
            server: true,
            expired: false,
        }
    }

    /// A client's certificate: client use only, a year.
    pub fn client(name: &str) -> CertSpec {
        CertSpec {
            server: false,
            ..CertSpec::node(name)
        }
    }
}

/// A certificate and its key, in PEM.
pub struct Issued {
    pub cert: Certificate,
    pub key: KeyPair,
}

impl Issued {
    pub fn cert_pem(&self) -> String {
        self.cert.pem()
    }

    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }

    /// Writes `<dir>/<name>.pem` and `<dir>/<name>-key.pem` (the key
    /// readable by its owner only); returns their paths.
    pub fn write(&self, dir: &Path, name: &str) -> Result<(PathBuf, PathBuf)> {
        let cert = dir.join(format!("{name}.pem"));
        let key = dir.join(format!("{name}-key.pem"));
        write_file(&cert, &self.cert_pem(), false)?;
        write_file(&key, &self.key_pem(), true)?;
        Ok((cert, key))
    }
}

/// A certificate authority: its certificate and the key that signs.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    cert_pem: String,
    cert_der: Vec<u8>,
}

impl Ca {
    /// A new CA named `name`, valid for `days`.
    pub fn create(name: &str, days: u32) -> Result<Ca> {
        let mut params = ca_params(name);
        let (from, to) = validity(days, false);
        params.not_before = from;
        params.not_after = to;
        let key = KeyPair::generate().map_err(certs_error)?;
        let cert = params.self_signed(&key).map_err(certs_error)?;
        Ok(Ca {
            params,
            key,
            cert_pem: cert.pem(),
            cert_der: cert.der().to_vec(),
        })
    }

    /// The CA of `ca.pem` and `ca-key.pem` in `dir`, as [`Ca::create`]
    /// made it (its subject is rebuilt from its common name: a CA made
    /// otherwise is refused when what it issues would not chain to it).
    pub fn load(dir: &Path) -> Result<Ca> {
        let (cert_path, key_path) = Ca::paths(dir);
        let cert = crate::pem::load_certs(&cert_path)?.remove(0);
        let key_pem = String::from_utf8(crate::pem::read(&key_path)?).map_err(|_| Error::Pem {
            path: key_path.clone(),
            why: "not text".into(),
        })?;
        let key = KeyPair::from_pem(&key_pem).map_err(|e| Error::Pem {
            path: key_path.clone(),
            why: e.to_string(),
        })?;
        let name = identity::cert_name(&cert).ok_or_else(|| Error::Pem {
            path: cert_path.clone(),
            why: "the CA certificate has no common name".into(),
        })?;
        let ca = Ca {
            params: ca_params(&name),
            key,
            cert_pem: String::from_utf8(crate::pem::read(&cert_path)?).unwrap_or_default(),
            cert_der: cert.to_vec(),
        };
        // What it would issue must name it exactly as it names itself.
        let probe = ca.issue(&CertSpec::client("probe"))?;
        if identity::issuer_der(probe.cert.der()) != identity::subject_der(&ca.cert_der) {
            return Err(Error::Certs(format!(
                "{}: this CA was not made by `treelog admin certs` (its subject is more than a \
                 common name); issue certificates with the tool that made it",
                cert_path.display()
            )));
        }
        Ok(ca)
    }

    /// `<dir>/ca.pem` and `<dir>/ca-key.pem`.
    pub fn paths(dir: &Path) -> (PathBuf, PathBuf) {
        (dir.join("ca.pem"), dir.join("ca-key.pem"))
    }

    /// Writes `ca.pem` and `ca-key.pem` (owner-only) into `dir`.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let (cert, key) = Ca::paths(dir);
        write_file(&cert, &self.cert_pem, false)?;
        write_file(&key, &self.key.serialize_pem(), true)
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn cert_der(&self) -> &[u8] {
        &self.cert_der
    }

    /// A certificate for `spec`, signed by this CA.
    pub fn issue(&self, spec: &CertSpec) -> Result<Issued> {
        let mut params = CertificateParams::default();
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, spec.name.as_str());
        params.distinguished_name = dn;
        let mut sans = Vec::new();
        for d in &spec.dns {
            sans.push(SanType::DnsName(
                d.clone()
                    .try_into()
                    .map_err(|e| Error::Certs(format!("DNS name {d:?}: {e}")))?,
            ));
        }
        sans.extend(spec.ips.iter().map(|ip| SanType::IpAddress(*ip)));
        params.subject_alt_names = sans;
        params.is_ca = IsCa::ExplicitNoCa;
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        params.extended_key_usages = if spec.server {
            vec![
                ExtendedKeyUsagePurpose::ServerAuth,
                ExtendedKeyUsagePurpose::ClientAuth,
            ]
        } else {
            vec![ExtendedKeyUsagePurpose::ClientAuth]
        };
        params.use_authority_key_identifier_extension = true;
        let (from, to) = validity(spec.days, spec.expired);
        params.not_before = from;
        params.not_after = to;
        let key = KeyPair::generate().map_err(certs_error)?;
        let issuer = Issuer::from_params(&self.params, &self.key);
        let cert = params.signed_by(&key, &issuer).map_err(certs_error)?;
        Ok(Issued { cert, key })
    }
}

/// The parameters of a CA named `name` (its subject: that common name
/// only, so that [`Ca::load`] can rebuild it).
fn ca_params(name: &str) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    params
}

/// From an hour ago (clocks differ) for `days`; or, expired, from two days
/// ago until yesterday.
fn validity(days: u32, expired: bool) -> (OffsetDateTime, OffsetDateTime) {
    let now = OffsetDateTime::now_utc();
    if expired {
        (now - Duration::days(2), now - Duration::days(1))
    } else {
        (
            now - Duration::hours(1),
            now + Duration::days(i64::from(days)),
        )
    }
}

/// Writes `text` to `path` through a temporary file renamed into place (a
/// server polling the file never reads half of it); keys readable by
/// their owner only.
fn write_file(path: &Path, text: &str, secret: bool) -> Result<()> {
    let io = |source| Error::Io {
        path: path.to_owned(),
        source,
    };
    let tmp = path.with_extension("pem.tmp");
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if secret {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = secret;
    {
        use std::io::Write;
        let mut f = opts.open(&tmp).map_err(io)?;
        f.write_all(text.as_bytes()).map_err(io)?;
        f.sync_all().map_err(io)?;
    }
    std::fs::rename(&tmp, path).map_err(io)
}

/// Makes the CA in `dir` unless it has one (then loads it): the CA, and
/// whether it was made now.
pub fn ensure_ca(dir: &Path, name: &str, days: u32) -> Result<(Ca, bool)> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        path: dir.to_owned(),
        source,
    })?;
    if Ca::paths(dir).0.exists() {
        return Ok((Ca::load(dir)?, false));
    }
    let ca = Ca::create(name, days)?;
    ca.write(dir)?;
    Ok((ca, true))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loaded_ca_issues_certificates_that_chain_to_it() {
        let dir = tempfile::tempdir().unwrap();
        let (made, created) = ensure_ca(dir.path(), "loaded ca", 30).unwrap();
        assert!(created);
        let (loaded, created) = ensure_ca(dir.path(), "ignored", 30).unwrap();
        assert!(!created);
        assert_eq!(made.cert_der(), loaded.cert_der());
        let issued = loaded.issue(&CertSpec::node("n")).unwrap();
        assert_eq!(
            identity::issuer_der(issued.cert.der()),
            identity::subject_der(made.cert_der())
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join("ca-key.pem"))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
    }
}
