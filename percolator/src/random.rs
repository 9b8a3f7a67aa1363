//! The randomness a client draws ([`RandomSource`]): retry jitter of
//! [`crate::Client::run`]. A seam for deterministic simulation (`percolator-sim` draws it
//! from the seed); production uses [`ThreadRandom`] (the default of
//! [`crate::ClientConfig::random`]), the thread-local generator the code used before.

/// A source of uniformly distributed random numbers, shared by a client's tasks.
pub trait RandomSource: Send + Sync + std::fmt::Debug + 'static {
    /// A uniformly distributed `u64`.
    fn next_u64(&self) -> u64;

    /// A uniformly distributed number in `[low, high)`.
    fn range_f64(&self, low: f64, high: f64) -> f64 {
        // 53 random bits: every double in [0, 1) with equal spacing.
        let unit = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        low + (high - low) * unit
    }
}

/// The thread-local generator (`rand::thread_rng`).
#[derive(Clone, Copy, Debug, Default)]
pub struct ThreadRandom;

impl RandomSource for ThreadRandom {
    fn next_u64(&self) -> u64 {
        rand::Rng::gen(&mut rand::thread_rng())
    }

    fn range_f64(&self, low: f64, high: f64) -> f64 {
        rand::Rng::gen_range(&mut rand::thread_rng(), low..high)
    }
}
