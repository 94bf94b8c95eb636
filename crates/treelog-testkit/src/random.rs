//! Seeded randomness and the rounds of randomized loops, both from the
//! environment: `TREELOG_TEST_SEED` replays a run, `TREELOG_KILL_ROUNDS`
//! runs more rounds by hand.

/// A small xorshift generator seeded from the process id (each run tries
/// other kill points; the seed is printed for a failing run).
pub struct Rng(u64);

// `new` reads the seed from the environment and prints it (no `Default`);
// `next` is the generator's step (no `Iterator`).
#[allow(clippy::new_without_default, clippy::should_implement_trait)]
impl Rng {
    pub fn new() -> Rng {
        let seed = std::env::var("TREELOG_TEST_SEED")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(0x9E37_79B9_7F4A_7C15 ^ std::process::id() as u64);
        eprintln!("random seed {seed} (TREELOG_TEST_SEED)");
        Rng(seed.max(1))
    }

    /// A generator of its own for each of several tasks: `new()`'s seed
    /// mixed with `n`.
    pub fn nth(n: u64) -> Rng {
        let mut r = Rng::new();
        r.0 ^= n.wrapping_mul(0x2545_F491_4F6C_DD1D);
        r.0 = r.0.max(1);
        r
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// Rounds of a kill loop: `short` in CI, `TREELOG_KILL_ROUNDS` by hand.
pub fn rounds(short: usize) -> usize {
    std::env::var("TREELOG_KILL_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(short)
}
