//! The wall clock a client reads ([`WallClock`]): the seam through which a deterministic
//! simulation (`percolator-sim`) gives every simulated host its own, skewed, clock on
//! simulated time. Production uses [`SystemClock`] (the default of
//! [`crate::ClientConfig::wall_clock`]), which reads `SystemTime` exactly as the code did
//! before the seam existed.
//!
//! What reads it: the bucket of new notify keys ([`crate::txn::wall_bucket`] is the
//! system clock's), the age of notifications a scanner reports, the GC lease of `app::gc`.
//! Durations a client measures (lifetimes, leases, backoff) use `tokio::time::Instant`
//! instead, which is the monotonic clock in production and follows paused time in tests.

/// A source of wall-clock time, in milliseconds since the Unix epoch. Different processes
/// (hosts) may disagree by a skew; nothing that needs agreement may rely on it (the oracle
/// orders transactions).
pub trait WallClock: Send + Sync + std::fmt::Debug + 'static {
    /// Milliseconds since the Unix epoch, now.
    fn now_ms(&self) -> u64;

    /// Seconds since the Unix epoch, now.
    fn now_secs(&self) -> u64 {
        self.now_ms() / 1000
    }
}

/// The host's clock (`std::time::SystemTime`).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl WallClock for SystemClock {
    fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64
    }

    fn now_secs(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs()
    }
}
