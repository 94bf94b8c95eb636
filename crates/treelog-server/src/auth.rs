//! Who may use the ports: the shared token (checked in constant time) or
//! a credential of the credentials file, and the delay that makes guessing
//! them from one address slow ([`AuthThrottle`]).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use subtle::ConstantTimeEq;
use treelog::{Error, Result};

use crate::credentials::Credentials;
use crate::metrics::ServerMetrics;
use crate::roles::{Identity, Role};

/// The secrets clients must present (if any): the shared token, the
/// credentials file; and the failed checks of each address.
pub(crate) struct Auth {
    token: Option<String>,
    credentials: Option<Arc<Credentials>>,
    throttle: Mutex<AuthThrottle>,
}

impl Auth {
    pub(crate) fn new(token: Option<String>, credentials: Option<Arc<Credentials>>) -> Auth {
        Auth {
            token,
            credentials,
            throttle: Default::default(),
        }
    }

    /// Whether clients must present a secret.
    pub(crate) fn required(&self) -> bool {
        self.token.is_some() || self.credentials.is_some()
    }

    /// Checks `given` against the configured token, first waiting as long
    /// as [`AuthThrottle`] says for `peer`. `Err` when the wait would be
    /// too long.
    pub(crate) async fn check(
        &self,
        peer: IpAddr,
        given: &Option<String>,
        metrics: Option<&Arc<ServerMetrics>>,
    ) -> Result<bool> {
        Ok(self.identify(peer, given, metrics).await?.is_some())
    }

    /// Whose secret `given` is: the shared token (an admin with node
    /// powers: the single-token cluster), a credential, or `None` (a wrong
    /// or missing secret). Waits first as long as [`AuthThrottle`] says for
    /// `peer`; `Err` when the wait would be too long.
    pub(crate) async fn identify(
        &self,
        peer: IpAddr,
        given: &Option<String>,
        metrics: Option<&Arc<ServerMetrics>>,
    ) -> Result<Option<Identity>> {
        if !self.required() {
            return Ok(Some(Identity::anonymous()));
        }
        let wait = self.throttle().reserve(peer, Instant::now());
        match wait {
            None => {
                return Err(Error::Busy(
                    "too many failed authentications from this address; retry later".into(),
                ))
            }
            Some(d) if !d.is_zero() => tokio::time::sleep(d).await,
            Some(_) => {}
        }
        let who = if self.token.is_some() && token_ok(&self.token, given) {
            Some(Identity {
                name: "token".into(),
                role: Role::Admin,
                node: true,
            })
        } else {
            match (&self.credentials, given) {
                (Some(c), Some(g)) => c.find(g),
                _ => None,
            }
        };
        let mut throttle = self.throttle();
        if who.is_some() {
            throttle.succeeded(peer);
        } else {
            throttle.failed(peer, Instant::now());
            if let Some(m) = metrics {
                m.auth_failures.inc();
            }
        }
        Ok(who)
    }

    fn throttle(&self) -> MutexGuard<'_, AuthThrottle> {
        self.throttle.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Failed token checks per client address (IPv6 by /64): after a failure,
/// the address's next check waits 50 ms, doubling per further failure up
/// to 5 s, and checks from one address are spaced by that much, so
/// guessing from one address is slow however many connections it opens.
/// An address is forgotten 10 minutes after its last failure, or at once
/// when it presents the right token.
#[derive(Default)]
struct AuthThrottle {
    peers: HashMap<IpAddr, Failures>,
}

struct Failures {
    count: u32,
    /// When the next token check from this address may run.
    next_check: Instant,
    last: Instant,
}

impl AuthThrottle {
    const FIRST_DELAY: Duration = Duration::from_millis(50);
    const MAX_DELAY: Duration = Duration::from_secs(5);
    /// A check further off than this is refused (Busy) instead of waited for.
    const MAX_WAIT: Duration = Duration::from_secs(10);
    const FORGET: Duration = Duration::from_secs(600);
    /// Addresses tracked at most.
    const MAX_PEERS: usize = 10_000;

    fn key(ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => IpAddr::V4(v4),
                None => {
                    let mut o = v6.octets();
                    o[8..].fill(0);
                    IpAddr::V6(o.into())
                }
            },
            v4 => v4,
        }
    }

    fn delay(count: u32) -> Duration {
        Self::FIRST_DELAY
            .saturating_mul(1 << count.saturating_sub(1).min(16))
            .min(Self::MAX_DELAY)
    }

    /// How long a token check from `ip` must wait (zero for an address
    /// without recent failures); `None`: too long, refuse.
    fn reserve(&mut self, ip: IpAddr, now: Instant) -> Option<Duration> {
        let Some(f) = self.peers.get_mut(&Self::key(ip)) else {
            return Some(Duration::ZERO);
        };
        if now.duration_since(f.last) > Self::FORGET {
            self.peers.remove(&Self::key(ip));
            return Some(Duration::ZERO);
        }
        let at = f.next_check.max(now);
        let wait = at - now;
        if wait > Self::MAX_WAIT {
            return None;
        }
        f.next_check = at + Self::delay(f.count);
        Some(wait)
    }

    fn failed(&mut self, ip: IpAddr, now: Instant) {
        if self.peers.len() >= Self::MAX_PEERS {
            self.peers
                .retain(|_, f| now.duration_since(f.last) <= Self::FORGET);
            if self.peers.len() >= Self::MAX_PEERS {
                // Still full: forget the address that failed longest ago.
                if let Some(k) = self
                    .peers
                    .iter()
                    .min_by_key(|(_, f)| f.last)
                    .map(|(k, _)| *k)
                {
                    self.peers.remove(&k);
                }
            }
        }
        let f = self.peers.entry(Self::key(ip)).or_insert(Failures {
            count: 0,
            next_check: now,
            last: now,
        });
        f.count = f.count.saturating_add(1);
        f.last = now;
        f.next_check = f.next_check.max(now + Self::delay(f.count));
    }

    fn succeeded(&mut self, ip: IpAddr) {
        self.peers.remove(&Self::key(ip));
    }
}

fn token_ok(expected: &Option<String>, given: &Option<String>) -> bool {
    match expected {
        None => true,
        Some(want) => {
            let got = given.as_deref().unwrap_or("");
            // Constant time in the token's content (length leaks, as usual).
            bool::from(want.as_bytes().ct_eq(got.as_bytes()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_tokens_space_the_checks_of_their_address() {
        let ms = Duration::from_millis;
        let mut t = AuthThrottle::default();
        let ip: IpAddr = "10.0.0.1".parse().unwrap();
        let now = Instant::now();
        assert_eq!(t.reserve(ip, now), Some(Duration::ZERO));
        t.failed(ip, now);
        // Checks arriving together are spaced by the delay.
        assert_eq!(t.reserve(ip, now), Some(ms(50)));
        assert_eq!(t.reserve(ip, now), Some(ms(100)));
        // Other addresses are not affected; the same IPv6 /64 is.
        assert_eq!(
            t.reserve("10.0.0.2".parse().unwrap(), now),
            Some(Duration::ZERO)
        );
        t.failed("2001:db8::1".parse().unwrap(), now);
        assert_eq!(t.reserve("2001:db8::2".parse().unwrap(), now), Some(ms(50)));
        assert_eq!(
            t.reserve("2001:db8:0:1::2".parse().unwrap(), now),
            Some(Duration::ZERO)
        );
        // The delay doubles per failure, up to 5 s.
        let ip2: IpAddr = "10.0.0.3".parse().unwrap();
        for _ in 0..10 {
            t.failed(ip2, now);
        }
        assert_eq!(t.reserve(ip2, now), Some(AuthThrottle::MAX_DELAY));
        // A check more than 10 s away is refused, not queued.
        assert_eq!(t.reserve(ip2, now), Some(ms(10_000)));
        assert_eq!(t.reserve(ip2, now), None);
        // Forgotten after a quiet while, or at once by the right token.
        assert_eq!(
            t.reserve(ip2, now + AuthThrottle::FORGET + ms(1)),
            Some(Duration::ZERO)
        );
        t.succeeded(ip);
        assert_eq!(t.reserve(ip, now), Some(Duration::ZERO));
    }
}
