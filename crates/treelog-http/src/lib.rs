//! treelog's small HTTP ports (a server's `/healthz`, `/readyz` and
//! `/metrics`; a bridge's `/metrics`), bounded so that no client can hold
//! them: at most `max_connections` at once and `max_per_address` from one
//! address (an IPv6 /64 counts as one), each given `header_timeout` to send
//! a request's headers and closed after `max_age`, and a few slots kept for
//! probes: when the port is full, a probe (`/healthz`, `/readyz`) is still
//! answered on a short-lived connection, so an orchestrator does not
//! restart a server because clients are busy on its metrics port.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;

/// Slots kept for probes when the port is full.
pub const PROBE_SLOTS: usize = 8;
/// Time a probe on a reserved slot has to send its request.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(1);

/// The bounds of an HTTP port.
#[derive(Debug, Clone)]
pub struct Limits {
    pub max_connections: usize,
    pub max_per_address: usize,
    /// Time a client has to send a request's headers (also the longest an
    /// idle keep-alive connection stays open).
    pub header_timeout: Duration,
    /// A connection is closed this long after it was accepted (after the
    /// request in progress, if any).
    pub max_age: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 64,
            max_per_address: 16,
            header_timeout: Duration::from_secs(10),
            max_age: Duration::from_secs(300),
        }
    }
}

/// Connections open per address.
type ByAddress = Arc<Mutex<HashMap<IpAddr, usize>>>;

/// The connections of a port, by address.
pub struct Slots {
    limits: Limits,
    total: Arc<Semaphore>,
    probes: Arc<Semaphore>,
    by_address: ByAddress,
}

/// What [`Slots::admit`] gave a new connection.
pub enum Admitted {
    /// A slot: serve it as usual.
    Slot(Slot),
    /// The port (or its address's share) is full: answer a probe, if it is
    /// one, on a reserved slot, and refuse anything else.
    Probe(Slot),
    /// Nothing left: answer 503 and close.
    Refused,
}

/// A connection's place; given back when dropped.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    address: Option<(IpAddr, ByAddress)>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Some((ip, map)) = self.address.take() {
            let mut m = map.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(n) = m.get_mut(&ip) {
                *n -= 1;
                if *n == 0 {
                    m.remove(&ip);
                }
            }
        }
    }
}

/// The address a client's connections are counted under: an IPv6 address
/// by its /64 (one host usually holds a whole /64).
fn address_key(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            let s = v6.segments();
            IpAddr::V6(std::net::Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
        IpAddr::V6(v6) => IpAddr::V4(v6.to_ipv4_mapped().expect("mapped")),
        v4 => v4,
    }
}

impl Slots {
    pub fn new(limits: Limits) -> Slots {
        Slots {
            total: Arc::new(Semaphore::new(limits.max_connections.max(1))),
            probes: Arc::new(Semaphore::new(PROBE_SLOTS)),
            by_address: Arc::default(),
            limits,
        }
    }

    pub fn limits(&self) -> &Limits {
        &self.limits
    }

    /// A place for a new connection from `peer`.
    pub fn admit(&self, peer: IpAddr) -> Admitted {
        let ip = address_key(peer);
        {
            let mut m = self.by_address.lock().unwrap_or_else(|p| p.into_inner());
            let n = m.entry(ip).or_default();
            if *n < self.limits.max_per_address.max(1) {
                if let Ok(permit) = self.total.clone().try_acquire_owned() {
                    *n += 1;
                    return Admitted::Slot(Slot {
                        _permit: permit,
                        address: Some((ip, self.by_address.clone())),
                    });
                }
            }
            if *n == 0 {
                m.remove(&ip);
            }
        }
        match self.probes.clone().try_acquire_owned() {
            Ok(permit) => Admitted::Probe(Slot {
                _permit: permit,
                address: None,
            }),
            Err(_) => Admitted::Refused,
        }
    }
}

/// The answer to a connection refused outright.
pub const BUSY_RESPONSE: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 21\r\nconnection: close\r\n\r\ntoo many connections\n";

/// Serves one connection with `app` until the client closes it, its age
/// passes `limits.max_age`, or `shutdown` changes (each finishing the
/// request in progress, within a second).
pub async fn serve_connection<IO>(
    io: IO,
    app: axum::Router,
    limits: &Limits,
    mut shutdown: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let svc = hyper_util::service::TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(io, svc);
    tokio::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = shutdown.changed() => {}
        _ = tokio::time::sleep(limits.max_age) => {}
    }
    // Finish the request in progress, if any, then close.
    conn.as_mut().graceful_shutdown();
    let _ = tokio::time::timeout(Duration::from_secs(1), conn).await;
}

/// Answers one request on a reserved slot with `probes` (a router of the
/// probe paths, whose fallback should answer 503), then closes.
pub async fn serve_probe<IO>(io: IO, probes: axum::Router)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = hyper_util::rt::TokioIo::new(io);
    let svc = hyper_util::service::TowerToHyperService::new(probes);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(PROBE_TIMEOUT)
        .keep_alive(false)
        .serve_connection(io, svc);
    let _ = tokio::time::timeout(PROBE_TIMEOUT * 2, conn).await;
}

/// The fallback of a probe router: anything but a probe, on a full port.
pub async fn busy() -> (axum::http::StatusCode, &'static str) {
    (
        axum::http::StatusCode::SERVICE_UNAVAILABLE,
        "too many connections\n",
    )
}

/// Serves `app` on `listener` within `limits` until `shutdown` changes
/// (a port with no probes of its own: a bridge's metrics). `refused` is
/// told of each connection refused.
pub async fn serve(
    listener: TcpListener,
    app: axum::Router,
    limits: Limits,
    mut shutdown: watch::Receiver<bool>,
    refused: impl Fn(SocketAddr),
) {
    let slots = Slots::new(limits);
    let probes = axum::Router::new().fallback(busy);
    let mut conns = JoinSet::new();
    loop {
        let (sock, peer) = tokio::select! {
            _ = shutdown.changed() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            accepted = listener.accept() => match accepted {
                Ok(x) => x,
                Err(_) => {
                    // Out of descriptors or a reset before accept: retry
                    // shortly rather than spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        match slots.admit(peer.ip()) {
            Admitted::Slot(slot) => {
                let (app, limits, sd) = (app.clone(), slots.limits().clone(), shutdown.clone());
                conns.spawn(async move {
                    serve_connection(sock, app, &limits, sd).await;
                    drop(slot);
                });
            }
            Admitted::Probe(slot) => {
                refused(peer);
                let probes = probes.clone();
                conns.spawn(async move {
                    serve_probe(sock, probes).await;
                    drop(slot);
                });
            }
            Admitted::Refused => {
                refused(peer);
                let _ = sock.try_write(BUSY_RESPONSE);
            }
        }
    }
    while conns.join_next().await.is_some() {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_address_gets_its_share_then_probe_slots_then_nothing() {
        let slots = Slots::new(Limits {
            max_connections: 4,
            max_per_address: 2,
            ..Limits::default()
        });
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let mut held = Vec::new();
        for _ in 0..2 {
            match slots.admit(a) {
                Admitted::Slot(s) => held.push(s),
                _ => panic!("within the share"),
            }
        }
        // a's share is used; b still gets a slot.
        assert!(matches!(slots.admit(a), Admitted::Probe(_)));
        let b1 = match slots.admit(b) {
            Admitted::Slot(s) => s,
            _ => panic!("another address"),
        };
        let mut probes = Vec::new();
        for _ in 0..PROBE_SLOTS {
            match slots.admit(a) {
                Admitted::Probe(s) => probes.push(s),
                _ => panic!("a probe slot"),
            }
        }
        assert!(matches!(slots.admit(a), Admitted::Refused));
        drop(probes);
        drop(held.pop());
        assert!(matches!(slots.admit(a), Admitted::Slot(_)));
        drop(b1);
    }

    #[test]
    fn an_ipv6_64_is_one_address() {
        let x: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let y: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let z: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        assert_eq!(address_key(x), address_key(y));
        assert_ne!(address_key(x), address_key(z));
        let m: IpAddr = "::ffff:10.0.0.1".parse().unwrap();
        assert_eq!(address_key(m), "10.0.0.1".parse::<IpAddr>().unwrap());
    }
}
