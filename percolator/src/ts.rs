//! Timestamps and the [`TimestampSource`] trait that transactions draw them from.
//!
//! A timestamp is `physical milliseconds << 18 | logical counter`, so lock TTLs can be
//! measured on oracle time. The oracle crate provides the persistent, networked sources; this
//! module holds the trait and [`LocalClock`], a non-persistent source for tests.

use async_trait::async_trait;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Bits of a timestamp that hold the logical counter.
pub const LOGICAL_BITS: u32 = 18;
/// Largest logical counter within one millisecond.
pub const MAX_LOGICAL: u64 = (1 << LOGICAL_BITS) - 1;

/// A hybrid timestamp: physical milliseconds since the Unix epoch and a logical counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(pub u64);

impl Timestamp {
    /// The smallest timestamp; never handed out by a source.
    pub const ZERO: Timestamp = Timestamp(0);

    /// Composes a timestamp; `logical` must not exceed [`MAX_LOGICAL`].
    pub fn compose(physical_ms: u64, logical: u64) -> Timestamp {
        debug_assert!(logical <= MAX_LOGICAL);
        Timestamp((physical_ms << LOGICAL_BITS) | (logical & MAX_LOGICAL))
    }

    /// The physical part, in milliseconds since the Unix epoch.
    pub fn physical_ms(self) -> u64 {
        self.0 >> LOGICAL_BITS
    }

    /// The logical counter.
    pub fn logical(self) -> u64 {
        self.0 & MAX_LOGICAL
    }

    /// The first timestamp of the millisecond `duration` after this one's physical time.
    pub fn physical_after(self, duration: Duration) -> Timestamp {
        Timestamp::compose(self.physical_ms() + duration.as_millis() as u64, 0)
    }
}

impl std::fmt::Display for Timestamp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// Why a timestamp could not be had.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum TimestampError {
    /// No oracle could be reached or none is serving.
    #[error("timestamp oracle unavailable: {0}")]
    Unavailable(String),
    /// The oracle did not answer in time.
    #[error("timestamp oracle timed out after {0:?}")]
    Timeout(Duration),
}

/// A source of strictly increasing timestamps (invariant T1 of `ARCHITECTURE.md`: every
/// timestamp returned is larger than every timestamp returned, to anyone, before the request
/// began).
#[async_trait]
pub trait TimestampSource: Send + Sync + 'static {
    /// One fresh timestamp.
    async fn get_timestamp(&self) -> Result<Timestamp, TimestampError>;
}

/// A non-persistent in-process source on the local wall clock: strictly increasing within
/// one process, even if the wall clock steps back. For tests and throwaway stores only; after
/// a restart it may repeat timestamps (use the oracle crate for anything that persists).
#[derive(Debug, Default)]
pub struct LocalClock {
    last: AtomicU64,
}

impl LocalClock {
    /// A clock starting from the current wall-clock time.
    pub fn new() -> Self {
        Self::default()
    }

    /// The next timestamp, synchronously.
    pub fn next(&self) -> Timestamp {
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let candidate = Timestamp::compose(now_ms, 0).0;
        let next = |last: u64| (last + 1).max(candidate);
        // fetch_update retries until no other caller moved `last` in between.
        let previous = self
            .last
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |last| Some(next(last)))
            .unwrap_or_else(|last| last);
        Timestamp(next(previous))
    }
}

#[async_trait]
impl TimestampSource for LocalClock {
    async fn get_timestamp(&self) -> Result<Timestamp, TimestampError> {
        Ok(self.next())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compose_and_split() {
        let ts = Timestamp::compose(1_700_000_000_000, 42);
        assert_eq!(ts.physical_ms(), 1_700_000_000_000);
        assert_eq!(ts.logical(), 42);
        assert!(Timestamp::compose(5, MAX_LOGICAL) < Timestamp::compose(6, 0));
        assert_eq!(
            ts.physical_after(Duration::from_millis(10)).physical_ms(),
            1_700_000_000_010
        );
    }

    #[test]
    fn local_clock_strictly_increases() {
        let clock = LocalClock::new();
        let mut prev = clock.next();
        for _ in 0..100_000 {
            let ts = clock.next();
            assert!(ts > prev);
            prev = ts;
        }
    }
}
