//! Timestamp sources for tests that hold a transaction at a chosen step.

use async_trait::async_trait;
use percolator::ts::{LocalClock, Timestamp, TimestampError, TimestampSource};
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::sync::Semaphore;

/// A timestamp source that, once armed, holds its next timestamp back after drawing it,
/// until released: the reply of a slow oracle, a process paused right after it, or a writer
/// held between its prewrites and its commit point (the timestamp is its commit_ts).
pub struct StallingClock {
    inner: LocalClock,
    /// Set to hold the next timestamp drawn.
    pub armed: AtomicBool,
    /// Gets a permit once the held timestamp is drawn.
    pub drawn: Semaphore,
    /// A permit lets the held timestamp go.
    pub release: Semaphore,
}

impl StallingClock {
    /// An unarmed clock.
    pub fn new() -> Self {
        StallingClock {
            inner: LocalClock::new(),
            armed: AtomicBool::new(false),
            drawn: Semaphore::new(0),
            release: Semaphore::new(0),
        }
    }
}

impl Default for StallingClock {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl TimestampSource for StallingClock {
    async fn get_timestamp(&self) -> Result<Timestamp, TimestampError> {
        let ts = self.inner.next();
        if self.armed.swap(false, Ordering::SeqCst) {
            self.drawn.add_permits(1);
            self.release.acquire().await.expect("open").forget();
        }
        Ok(ts)
    }
}
