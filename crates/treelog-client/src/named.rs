//! Servers named by `host:port` (a DNS name, an IPv4 address, or an IPv6
//! address in brackets): the name is resolved at every connect, never once
//! for all, so that a server that moved to another address (a restarted
//! container, a DNS change) is found again.

use std::net::SocketAddr;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::{Client, ClientOptions};

/// Checks that `addr` is `host:port` or `[v6]:port` (the syntax only:
/// nothing is resolved); the error names the text.
pub fn check_host_port(addr: &str) -> Result<()> {
    split_host_port(addr).map(|_| ())
}

/// `addr`'s host (without brackets) and port.
fn split_host_port(addr: &str) -> Result<(&str, u16)> {
    let bad = |why: &str| {
        Error::InvalidArgument(format!(
            "address {addr:?}: {why} (expected host:port or [v6 address]:port)"
        ))
    };
    let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or_else(|| bad("no closing bracket"))?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad("not an IPv6 address in the brackets"));
        }
        let port = after
            .strip_prefix(':')
            .ok_or_else(|| bad("no port after the brackets"))?;
        (host, port)
    } else {
        let (host, port) = addr.rsplit_once(':').ok_or_else(|| bad("no port"))?;
        if host.contains(':') {
            return Err(bad("an IPv6 address needs brackets"));
        }
        (host, port)
    };
    if host.is_empty() {
        return Err(bad("no host"));
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | ':'))
    {
        return Err(bad("the host has characters a host name cannot hold"));
    }
    let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
    if port == 0 {
        return Err(bad("port 0"));
    }
    Ok((host, port))
}

/// The addresses `addr` names now (`tokio::net::lookup_host`).
pub async fn resolve(addr: &str) -> Result<Vec<SocketAddr>> {
    let (host, port) = split_host_port(addr)?;
    if let Ok(ip) = host.parse::<std::net::IpAddr>() {
        return Ok(vec![SocketAddr::new(ip, port)]);
    }
    let found: Vec<SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|e| Error::Protocol(format!("cannot resolve {addr:?}: {e}")))?
        .collect();
    if found.is_empty() {
        return Err(Error::Protocol(format!("{addr:?} resolves to no address")));
    }
    Ok(found)
}

impl Client {
    /// Connects to the server named `addr` (`host:port`, `[v6]:port`),
    /// resolving it now and trying each address it resolves to in turn.
    /// Over TLS without a server name of its own, a host name is the name
    /// the server's certificate must carry (an IP literal: that address).
    pub async fn connect_named(addr: &str, opts: ClientOptions) -> Result<Client> {
        let (host, _) = split_host_port(addr)?;
        let named = host.parse::<std::net::IpAddr>().is_err();
        let addrs = resolve(addr).await?;
        let opts = match &opts.tls {
            Some(tls) if named && !tls.has_server_name() => {
                let tls = tls
                    .as_ref()
                    .clone()
                    .with_server_name(host)
                    .map_err(|e| Error::InvalidArgument(format!("address {addr:?}: {e}")))?;
                ClientOptions {
                    tls: Some(Arc::new(tls)),
                    ..opts
                }
            }
            _ => opts,
        };
        let mut last = None;
        for a in addrs {
            match Client::connect(a, opts.clone()).await {
                Ok(c) => return Ok(c),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Protocol(format!("{addr:?} resolves to no address"))))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        for ok in [
            "localhost:7400",
            "node-1.example.com:1",
            "127.0.0.1:7400",
            "[::1]:7400",
            "[fe80::1]:65535",
        ] {
            check_host_port(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        assert_eq!(split_host_port("[::1]:9").unwrap(), ("::1", 9));
        assert_eq!(split_host_port("a.b:9").unwrap(), ("a.b", 9));
        for bad in [
            "localhost",
            ":7400",
            "::1:7400",
            "[::1]7400",
            "[::1:7400",
            "[localhost]:7400",
            "host:port",
            "host:0",
            "host:70000",
            "ho st:1",
            "http://h:1",
        ] {
            let e = check_host_port(bad).unwrap_err().to_string();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn literals_resolve_without_a_lookup_and_localhost_resolves() {
        assert_eq!(
            resolve("127.0.0.1:5").await.unwrap(),
            vec!["127.0.0.1:5".parse().unwrap()]
        );
        assert_eq!(
            resolve("[::1]:5").await.unwrap(),
            vec!["[::1]:5".parse().unwrap()]
        );
        let l = resolve("localhost:5").await.unwrap();
        assert!(
            l.iter().all(|a| a.ip().is_loopback() && a.port() == 5),
            "{l:?}"
        );
    }
}
