//! The command line's TLS: the global `--tls-*` flags made into a client
//! configuration (every command that talks to a server, and a node's,
//! replica's or bridge's own links) or a server's (`serve`), and `admin
//! certs`.

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use treelog_tls::certs::{ensure_ca, CertSpec};
use treelog_tls::{ClientAuth, ClientTls, ServerTls};

use crate::args::{Cli, ServeArgs};
use crate::error::{Error, Result};
use crate::output::{outln, Out};

fn tls_error(e: treelog_tls::Error) -> Error {
    Error::InvalidArgument(e.to_string())
}

/// The client configuration of `--tls-ca` (with `--tls-cert`/`--tls-key`
/// for mutual TLS, `--tls-server-name`); `None` without `--tls-ca`.
pub(crate) fn client_tls(cli: &Cli) -> Result<Option<Arc<ClientTls>>> {
    let Some(ca) = &cli.tls_ca else {
        if cli.tls_server_name.is_some() {
            return Err(Error::InvalidArgument(
                "--tls-server-name needs --tls-ca (the CA the server's certificate chains to)"
                    .into(),
            ));
        }
        return Ok(None);
    };
    let own = cert_and_key(cli)?;
    let mut tls = ClientTls::load(ca, own.as_ref().map(|(c, k)| (c.as_path(), k.as_path())))
        .map_err(tls_error)?;
    if let Some(name) = &cli.tls_server_name {
        tls = tls.with_server_name(name).map_err(tls_error)?;
    }
    Ok(Some(Arc::new(tls)))
}

fn cert_and_key(cli: &Cli) -> Result<Option<(PathBuf, PathBuf)>> {
    match (&cli.tls_cert, &cli.tls_key) {
        (Some(c), Some(k)) => Ok(Some((c.clone(), k.clone()))),
        (None, None) => Ok(None),
        _ => Err(Error::InvalidArgument(
            "--tls-cert and --tls-key go together".into(),
        )),
    }
}

/// The server configuration of `serve`: `--tls-cert`/`--tls-key`, with
/// `--tls-ca` the CA client certificates are verified against (required
/// with `--require-client-cert`); `None` without a certificate.
pub(crate) fn server_tls(cli: &Cli, a: &ServeArgs) -> Result<Option<ServerTls>> {
    let Some((cert, key)) = cert_and_key(cli)? else {
        if a.require_client_cert {
            return Err(Error::InvalidArgument(
                "--require-client-cert needs --tls-cert, --tls-key and --tls-ca".into(),
            ));
        }
        return Ok(None);
    };
    let auth = if a.require_client_cert {
        ClientAuth::Required
    } else {
        ClientAuth::Optional
    };
    if a.require_client_cert && cli.tls_ca.is_none() {
        return Err(Error::InvalidArgument(
            "--require-client-cert needs --tls-ca (the CA client certificates chain to)".into(),
        ));
    }
    let ca = cli.tls_ca.as_deref().map(|ca| (ca, auth));
    ServerTls::load(&cert, &key, ca)
        .map(Some)
        .map_err(tls_error)
}

/// `treelog admin certs`.
#[derive(clap::Args, Debug)]
pub(crate) struct CertsArgs {
    /// The directory of the PEM files (created; its CA is made unless it
    /// holds one: ca.pem, ca-key.pem).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,
    /// The common name of a new CA.
    #[arg(long, default_value = "treelog CA")]
    pub ca_name: String,
    /// A node's certificate (server and client use): NAME.pem,
    /// NAME-key.pem. Repeatable.
    #[arg(long, value_name = "NAME")]
    pub node: Vec<String>,
    /// A client's certificate (client use; its name is the identity the
    /// server sees). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub client: Vec<String>,
    /// IP addresses the node certificates are valid for (default:
    /// 127.0.0.1 and ::1). Repeatable.
    #[arg(long, value_name = "IP")]
    pub ip: Vec<IpAddr>,
    /// DNS names the node certificates are valid for (default:
    /// localhost). Repeatable.
    #[arg(long, value_name = "NAME")]
    pub dns: Vec<String>,
    /// Validity of the certificates (and of a new CA), in days.
    #[arg(long, default_value_t = 365)]
    pub days: u32,
    /// Make the certificates already expired (tests of refusal).
    #[arg(long, hide = true)]
    pub expired: bool,
}

pub(crate) fn certs(out: &Out, a: &CertsArgs) -> Result<u8> {
    if a.node.is_empty() && a.client.is_empty() && a.out.join("ca.pem").exists() {
        return Err(Error::InvalidArgument(
            "nothing to make: the CA exists; give --node or --client".into(),
        ));
    }
    let (ca, created) = ensure_ca(&a.out, &a.ca_name, a.days).map_err(tls_error)?;
    let mut made = Vec::new();
    if created {
        made.push(a.out.join("ca.pem"));
    }
    let ips = if a.ip.is_empty() {
        vec![
            IpAddr::from([127, 0, 0, 1]),
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
        ]
    } else {
        a.ip.clone()
    };
    let dns = if a.dns.is_empty() {
        vec!["localhost".to_owned()]
    } else {
        a.dns.clone()
    };
    let specs = a
        .node
        .iter()
        .map(|n| CertSpec {
            ips: ips.clone(),
            dns: dns.clone(),
            ..CertSpec::node(n)
        })
        .chain(a.client.iter().map(|n| CertSpec::client(n)));
    for mut spec in specs {
        spec.days = a.days;
        spec.expired = a.expired;
        let issued = ca.issue(&spec).map_err(tls_error)?;
        let (cert, _) = issued.write(&a.out, &spec.name).map_err(tls_error)?;
        made.push(cert);
    }
    if out.json {
        out.print_json(&serde_json::json!({
            "ok": true,
            "dir": a.out,
            "ca_created": created,
            "made": made,
        }))?;
    } else {
        for m in &made {
            outln!(out, "{}", m.display())?;
        }
    }
    Ok(0)
}
