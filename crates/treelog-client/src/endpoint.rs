//! Where a server is: `host:port`, `[v6::addr]:port` or `1.2.3.4:port`,
//! resolved at each connect (a name may move between two of them).

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

use crate::error::{Error, Result};

/// A server's address as given: a host name or an IP literal, and a port.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Endpoint {
    host: Host,
    port: u16,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Host {
    Ip(IpAddr),
    Name(String),
}

fn bad(text: &str, why: &str) -> Error {
    Error::InvalidArgument(format!("endpoint {text:?}: {why}"))
}

impl Endpoint {
    /// Parses one endpoint; the error names the text that did not parse.
    pub fn parse(text: &str) -> Result<Endpoint> {
        let t = text.trim();
        if t.is_empty() {
            return Err(bad(text, "empty"));
        }
        if let Ok(a) = t.parse::<SocketAddr>() {
            return Ok(Endpoint::from(a));
        }
        let (host, port) = if let Some(rest) = t.strip_prefix('[') {
            let (h, after) = rest
                .split_once(']')
                .ok_or_else(|| bad(text, "a '[' without its ']'"))?;
            let port = after
                .strip_prefix(':')
                .ok_or_else(|| bad(text, "no ':port' after the ']'"))?;
            let ip: std::net::Ipv6Addr = h
                .parse()
                .map_err(|_| bad(text, "not an IPv6 address between the brackets"))?;
            (Host::Ip(IpAddr::V6(ip)), port)
        } else {
            let (h, port) = t.rsplit_once(':').ok_or_else(|| bad(text, "no ':port'"))?;
            if h.contains(':') {
                return Err(bad(text, "an IPv6 address must be written [addr]:port"));
            }
            (Host::Name(parse_name(text, h)?), port)
        };
        let port = port
            .parse::<u16>()
            .map_err(|_| bad(text, "the port is not a number from 0 to 65535"))?;
        Ok(Endpoint { host, port })
    }

    /// Parses a comma-separated list (`a:7400,b:7400`), at least one.
    pub fn parse_list(text: &str) -> Result<Vec<Endpoint>> {
        let list = text
            .split(',')
            .filter(|s| !s.trim().is_empty())
            .map(Endpoint::parse)
            .collect::<Result<Vec<_>>>()?;
        if list.is_empty() {
            return Err(bad(text, "no endpoint in the list"));
        }
        Ok(list)
    }

    /// The host name, when the endpoint is not an IP literal.
    pub fn host_name(&self) -> Option<&str> {
        match &self.host {
            Host::Name(n) => Some(n),
            Host::Ip(_) => None,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The host as written (an IP address without brackets).
    pub fn host(&self) -> String {
        match &self.host {
            Host::Ip(ip) => ip.to_string(),
            Host::Name(n) => n.clone(),
        }
    }

    /// The addresses the endpoint stands for now: looked up each time
    /// (an IP literal is itself).
    pub async fn resolve(&self) -> Result<Vec<SocketAddr>> {
        match &self.host {
            Host::Ip(ip) => Ok(vec![SocketAddr::new(*ip, self.port)]),
            Host::Name(n) => {
                let addrs: Vec<SocketAddr> = tokio::net::lookup_host((n.as_str(), self.port))
                    .await
                    .map_err(|e| Error::Protocol(format!("resolving {self}: {e}")))?
                    .collect();
                if addrs.is_empty() {
                    return Err(Error::Protocol(format!("{self} resolves to no address")));
                }
                Ok(addrs)
            }
        }
    }
}

/// A DNS name: letters, digits, '-', '_' and dots.
fn parse_name(text: &str, h: &str) -> Result<String> {
    if h.is_empty() {
        return Err(bad(text, "no host before the ':port'"));
    }
    if h.len() > 253
        || !h
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_'))
    {
        return Err(bad(text, "the host is not a valid name"));
    }
    Ok(h.to_owned())
}

impl From<SocketAddr> for Endpoint {
    fn from(a: SocketAddr) -> Endpoint {
        Endpoint {
            host: Host::Ip(a.ip()),
            port: a.port(),
        }
    }
}

impl FromStr for Endpoint {
    type Err = Error;
    fn from_str(s: &str) -> Result<Endpoint> {
        Endpoint::parse(s)
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            Host::Ip(IpAddr::V6(ip)) => write!(f, "[{ip}]:{}", self.port),
            Host::Ip(ip) => write!(f, "{ip}:{}", self.port),
            Host::Name(n) => write!(f, "{n}:{}", self.port),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_v4_v6_and_names() {
        let e = Endpoint::parse("1.2.3.4:7400").unwrap();
        assert_eq!(e.host(), "1.2.3.4");
        assert_eq!(e.port(), 7400);
        assert_eq!(e.to_string(), "1.2.3.4:7400");
        let e = Endpoint::parse("[::1]:80").unwrap();
        assert_eq!(e.host(), "::1");
        assert_eq!(e.to_string(), "[::1]:80");
        let e = Endpoint::parse("[fe80::1:2]:9").unwrap();
        assert_eq!(e.port(), 9);
        let e = Endpoint::parse("node-1.example.com:7400").unwrap();
        assert_eq!(e.host(), "node-1.example.com");
        assert_eq!(e.to_string(), "node-1.example.com:7400");
        assert_eq!(
            Endpoint::parse(" localhost:1 ").unwrap(),
            "localhost:1".parse().unwrap()
        );
        let a: SocketAddr = "127.0.0.1:5".parse().unwrap();
        assert_eq!(Endpoint::from(a), Endpoint::parse("127.0.0.1:5").unwrap());
    }

    #[test]
    fn lists() {
        let l = Endpoint::parse_list("a:7400,b:7401, [::1]:7402,").unwrap();
        assert_eq!(l.len(), 3);
        assert_eq!(l[1].to_string(), "b:7401");
        assert_eq!(l[2].to_string(), "[::1]:7402");
        assert!(Endpoint::parse_list("").is_err());
        assert!(Endpoint::parse_list(" , ").is_err());
        let e = Endpoint::parse_list("a:1,b:x,c:3").unwrap_err().to_string();
        assert!(e.contains("\"b:x\""), "{e}");
    }

    #[test]
    fn errors_name_the_bad_text() {
        for (text, why) in [
            ("", "empty"),
            ("host", "no ':port'"),
            ("host:", "port"),
            ("host:99999", "port"),
            (":7400", "no host"),
            ("::1:7400", "[addr]:port"),
            ("[::1]7400", "no ':port'"),
            ("[::1:7400", "without its ']'"),
            ("[not-v6]:1", "IPv6"),
            ("bad host:1", "not a valid name"),
            ("h/x:1", "not a valid name"),
        ] {
            let e = Endpoint::parse(text).unwrap_err();
            assert_eq!(e.kind(), crate::error::ErrorKind::InvalidArgument);
            let m = e.to_string();
            assert!(m.contains(&format!("{text:?}")), "{text}: {m}");
            assert!(m.contains(why), "{text}: {m}");
        }
    }

    #[tokio::test]
    async fn resolves_names_and_literals() {
        let l = Endpoint::parse("127.0.0.1:7")
            .unwrap()
            .resolve()
            .await
            .unwrap();
        assert_eq!(l, vec!["127.0.0.1:7".parse::<SocketAddr>().unwrap()]);
        match Endpoint::parse("localhost:7").unwrap().resolve().await {
            Ok(l) => {
                assert!(!l.is_empty());
                assert!(
                    l.iter().all(|a| a.ip().is_loopback() && a.port() == 7),
                    "{l:?}"
                );
            }
            Err(e) => {
                assert!(
                    std::env::var("TREELOG_REQUIRE_LOCALHOST").as_deref() != Ok("1"),
                    "{e}"
                );
                println!("SKIP: localhost does not resolve here (/etc/hosts): {e}");
            }
        }
    }
}
