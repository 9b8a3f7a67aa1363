//! The seed's one random generator: every choice of a run (faults, delays, crashes, the
//! workload, the product's retry jitter) is drawn from it, in the order the single-threaded
//! scheduler runs the tasks, so one seed is one run.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A shared handle on the seed's generator (cheap to clone; one thread uses it).
#[derive(Clone, Debug)]
pub struct SimRng(Arc<Mutex<ChaCha8Rng>>);

impl SimRng {
    /// The generator of `seed`.
    pub fn new(seed: u64) -> Self {
        SimRng(Arc::new(Mutex::new(ChaCha8Rng::seed_from_u64(seed))))
    }

    fn with<T>(&self, f: impl FnOnce(&mut ChaCha8Rng) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A uniform `u64`.
    pub fn u64(&self) -> u64 {
        self.with(|r| r.gen())
    }

    /// Uniform in `[low, high)`.
    pub fn range(&self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        self.with(|r| r.gen_range(low..high))
    }

    /// True with probability `p`.
    pub fn chance(&self, p: f64) -> bool {
        p > 0.0 && self.with(|r| r.gen_bool(p.min(1.0)))
    }

    /// A duration uniform in `[low_ms, high_ms)` milliseconds.
    pub fn millis(&self, low_ms: u64, high_ms: u64) -> Duration {
        Duration::from_millis(self.range(low_ms, high_ms))
    }

    /// An index below `n` (`n > 0`).
    pub fn index(&self, n: usize) -> usize {
        self.range(0, n as u64) as usize
    }
}

/// The product's random seam ([`percolator::random::RandomSource`]) on the seed's generator.
#[derive(Debug)]
pub struct SeededRandom(pub SimRng);

impl percolator::random::RandomSource for SeededRandom {
    fn next_u64(&self) -> u64 {
        self.0.u64()
    }
}
