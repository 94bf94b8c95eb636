//! Jittered exponential back-off between connection attempts.

use std::time::Duration;

/// The first pause's ceiling.
pub const BASE: Duration = Duration::from_millis(50);
/// The ceiling never grows past this.
pub const CAP: Duration = Duration::from_secs(2);

/// "Full jitter": each pause is uniform in `[0, min(CAP, BASE * 2^n))`, so
/// that clients that lost the same server do not come back in step.
#[derive(Debug, Clone, Default)]
pub struct Backoff {
    attempt: u32,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff::default()
    }

    /// The ceiling of the next pause.
    pub fn ceiling(&self) -> Duration {
        BASE.saturating_mul(1u32 << self.attempt.min(16)).min(CAP)
    }

    /// The next pause (and doubles the ceiling for the one after).
    pub fn next_pause(&mut self) -> Duration {
        let ceiling = self.ceiling();
        self.attempt = self.attempt.saturating_add(1);
        let ms = ceiling.as_millis() as u64;
        Duration::from_millis(fastrand::u64(0..ms.max(1)))
    }

    /// After a success: the next failure starts small again.
    pub fn reset(&mut self) {
        self.attempt = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_stay_under_a_ceiling_that_doubles_to_the_cap() {
        let mut b = Backoff::new();
        let mut ceilings = Vec::new();
        for _ in 0..12 {
            let c = b.ceiling();
            ceilings.push(c);
            for _ in 0..50 {
                let mut probe = b.clone();
                assert!(probe.next_pause() < c);
            }
            b.next_pause();
        }
        assert_eq!(ceilings[0], Duration::from_millis(50));
        assert_eq!(ceilings[1], Duration::from_millis(100));
        assert_eq!(ceilings[5], Duration::from_millis(1600));
        assert_eq!(ceilings[6], CAP);
        assert_eq!(ceilings[11], CAP);
        b.reset();
        assert_eq!(b.ceiling(), BASE);
    }

    #[test]
    fn pauses_are_jittered() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..100 {
            let mut b = Backoff::new();
            for _ in 0..6 {
                b.next_pause();
            }
            seen.insert(b.next_pause());
        }
        // 100 draws from [0, 2 s) in whole milliseconds: not all alike.
        assert!(seen.len() > 10, "{seen:?}");
    }
}
