//! The runtime that delivers change streams ([`DeliveryRuntime`]), at a
//! lower scheduling priority than requests and the writer
//! ([`DeliveryPriority`]).

use treelog::{Error, Result};

/// The scheduling priority of the delivery thread (see [`DeliveryRuntime`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeliveryPriority {
    /// Linux `SCHED_IDLE`: delivery runs only on CPU that nothing else
    /// wants. Subscribers never take CPU from writes and requests; under a
    /// load that keeps every core busy they fall behind (and catch up from
    /// the tail cache or the log when it eases). The default.
    #[default]
    Idle,
    /// An ordinary thread at this niceness (0..=19): under full load,
    /// subscribers keep a share of the CPU (about 10% of a contended core
    /// at 10, by the scheduler's weights) at some cost to write throughput.
    Nice(i32),
}

impl std::str::FromStr for DeliveryPriority {
    type Err = Error;

    /// `idle`, or a niceness `0`..`19`.
    fn from_str(s: &str) -> Result<Self> {
        if s == "idle" {
            return Ok(DeliveryPriority::Idle);
        }
        match s.parse::<i32>() {
            Ok(n) if (0..=19).contains(&n) => Ok(DeliveryPriority::Nice(n)),
            _ => Err(Error::InvalidArgument(format!(
                "stream priority {s:?}: expected `idle` or a niceness 0..19"
            ))),
        }
    }
}

impl std::fmt::Display for DeliveryPriority {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeliveryPriority::Idle => f.write_str("idle"),
            DeliveryPriority::Nice(n) => write!(f, "{n}"),
        }
    }
}

/// The runtime that delivers change streams: one worker thread at a lower
/// scheduling priority ([`DeliveryPriority`]) than the writer, its callers
/// and the request handlers. When the CPU is short, the scheduler then
/// takes it from subscribers, which catch up later from the tail cache or
/// the log, not from the writer. (With idle CPU the priority changes
/// nothing.)
///
/// Dropping it shuts the runtime down in the background, so it may be
/// dropped from async code.
pub struct DeliveryRuntime {
    handle: tokio::runtime::Handle,
    /// Taken on drop, to shut down in the background.
    rt: Option<tokio::runtime::Runtime>,
}

impl DeliveryRuntime {
    pub fn new(priority: DeliveryPriority) -> Result<DeliveryRuntime> {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("treelog-streams")
            .on_thread_start(move || lower_thread_priority(priority))
            .enable_all()
            .build()?;
        Ok(DeliveryRuntime {
            handle: rt.handle().clone(),
            rt: Some(rt),
        })
    }

    pub fn handle(&self) -> &tokio::runtime::Handle {
        &self.handle
    }
}

impl Drop for DeliveryRuntime {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

/// Lowers the calling thread's priority (Linux: per thread). Best effort: a
/// failure leaves the default priority.
fn lower_thread_priority(priority: DeliveryPriority) {
    #[cfg(target_os = "linux")]
    match priority {
        DeliveryPriority::Idle => crate::sched::set_policy(libc::SCHED_IDLE),
        DeliveryPriority::Nice(n) => crate::sched::set_niceness(n),
    }
    #[cfg(not(target_os = "linux"))]
    let _ = priority;
}

#[cfg(test)]
mod tests {
    use super::*;
    use treelog::ErrorKind;

    #[test]
    fn parses_idle_and_niceness() {
        assert_eq!(
            "idle".parse::<DeliveryPriority>().ok(),
            Some(DeliveryPriority::Idle)
        );
        assert_eq!(
            "10".parse::<DeliveryPriority>().ok(),
            Some(DeliveryPriority::Nice(10))
        );
        for bad in ["", "-1", "20", "high"] {
            let e = bad.parse::<DeliveryPriority>().err().map(|e| e.kind());
            assert_eq!(e, Some(ErrorKind::InvalidArgument), "{bad:?}");
        }
        assert_eq!(DeliveryPriority::Nice(7).to_string(), "7");
    }

    /// The delivery thread really runs at the asked priority.
    #[cfg(target_os = "linux")]
    #[test]
    fn delivery_thread_gets_the_priority() {
        for (p, policy, nice) in [
            (DeliveryPriority::Idle, libc::SCHED_IDLE, None),
            (DeliveryPriority::Nice(7), libc::SCHED_OTHER, Some(7)),
        ] {
            let rt = DeliveryRuntime::new(p).expect("runtime");
            let (got_policy, got_nice) = rt
                .handle()
                .block_on(async { tokio::spawn(async { crate::sched::current() }).await })
                .expect("task");
            assert_eq!(got_policy, policy, "{p}");
            if let Some(n) = nice {
                assert_eq!(got_nice, n, "{p}");
            }
        }
    }
}
