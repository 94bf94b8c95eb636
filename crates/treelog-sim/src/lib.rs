//! A deterministic simulation of the cross-partition move of
//! docs/rfcs/0003 (a namespace partitioned by subtree, each partition a
//! treelog cluster with its own log).
//!
//! Everything is in process and sequential: a partition is its log (a
//! vector of records, durable once appended) and the state replayed from
//! it; the mover is a state machine that takes one step at a time and can
//! be crashed between any two steps (losing everything but the logs); an
//! append can be lost "in flight" (the mover does not learn whether it
//! landed) and a message can arrive late. After every step the checker
//! asks the questions of the RFC: does a reader see the moved subtree in
//! exactly one place, and does a subscriber of the merged change stream,
//! applying what it was delivered, see it in exactly one place, with no
//! entry appearing under a directory it has not seen created?
//!
//! Modules: [`log`] the partitions and their records, [`mover`] the
//! protocol and its recovery, [`stream`] the merged stream with its vector
//! cursor, [`check`] the invariants.

pub mod check;
pub mod log;
pub mod mover;
pub mod stream;

/// A small deterministic generator (xorshift64*), so that a failing
/// schedule is reproduced from its seed.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}
