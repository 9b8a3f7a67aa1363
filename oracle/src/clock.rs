//! Wall clocks the oracle reads its physical time from, injectable for tests.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock milliseconds since the Unix epoch. It may jump in either
/// direction: the oracle never relies on it for ordering, only for the physical part of fresh
/// timestamps.
pub trait Clock: Send + Sync + 'static {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The system wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64
    }
}

/// A clock that only moves when told to (tests: step it backwards, freeze it).
#[derive(Debug)]
pub struct ManualClock {
    ms: AtomicU64,
}

impl ManualClock {
    /// A clock reading `ms`.
    pub fn new(ms: u64) -> Self {
        ManualClock {
            ms: AtomicU64::new(ms),
        }
    }

    /// Sets the reading to `ms` (may go backwards).
    pub fn set(&self, ms: u64) {
        self.ms.store(ms, Ordering::SeqCst);
    }

    /// Moves the reading by `delta` milliseconds (negative: backwards).
    pub fn step(&self, delta: i64) {
        let now = self.ms.load(Ordering::SeqCst);
        self.set(now.saturating_add_signed(delta));
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.ms.load(Ordering::SeqCst)
    }
}

/// Another clock shifted by a fixed number of milliseconds (negative: behind). Used to
/// emulate a wall clock that stepped backwards across a restart.
#[derive(Clone)]
pub struct SkewedClock {
    inner: Arc<dyn Clock>,
    skew_ms: i64,
}

impl SkewedClock {
    /// `inner` shifted by `skew_ms`.
    pub fn new(inner: Arc<dyn Clock>, skew_ms: i64) -> Self {
        SkewedClock { inner, skew_ms }
    }
}

impl Clock for SkewedClock {
    fn now_ms(&self) -> u64 {
        self.inner.now_ms().saturating_add_signed(self.skew_ms)
    }
}
