//! Backpressure of the loader: it waits while the notification backlog (notify keys not yet
//! handled by the observers) is above a bound, so that latency measures the system,
//! not a queue growing without bound in front of it (and memory stays bounded).
//!
//! The backlog is counted in the store, so it works whether the workers run in this process
//! or in others: a scan of the notify space from the notify floor, with a limit (the floor
//! keeps the keys the scan walks over to about the live ones). A count walks up to `bound`
//! keys, so it is made rarely:
//! - between counts the loader keeps an *estimate*, the last count plus the lines committed
//!   since, and passes without counting while the estimate is at most the bound and younger
//!   than [`REFRESH_EVERY`] (the refresh catches what the estimate misses: loaders in other
//!   processes, notifications the observers themselves put);
//! - once the estimate is above the bound, the loader counts, and waits until at most half
//!   the bound is left (hysteresis): every count that lets it on is then followed by at
//!   least half a bound of lines before the next, instead of the few lines the observers took
//!   since the last one;
//! - while it waits it counts only up to half the bound, at intervals that double from
//!   [`FIRST_RECHECK`] to [`MAX_RECHECK`]; once they have reached [`MAX_RECHECK`] it counts
//!   up to the bound and goes on if the backlog is at or below it, so notifications that
//!   never drain (an unobserved column, keys backing off) stall it only above the bound.
//!
//! Measured (issue 14's profile of `photon demo --clicks 100000`): counting every 50 ms to
//! the full bound took 12% of the process's CPU; this scheme takes 4%, most of it walking
//! delete markers.

use percolator::kv::ScanOrder;
use percolator::{Client, TxnError};
use std::time::{Duration, Instant};

/// How long an estimate stands before the loader counts again anyway.
pub const REFRESH_EVERY: Duration = Duration::from_secs(1);

/// The first wait before the loader counts again while it waits.
pub const FIRST_RECHECK: Duration = Duration::from_millis(50);

/// The longest wait between two counts while the loader waits.
pub const MAX_RECHECK: Duration = Duration::from_millis(800);

/// How long the loader waits before it warns that no worker may be running.
const STALLED_AFTER: Duration = Duration::from_secs(10);

/// The estimate: the last count plus the lines loaded since, and when it was counted.
struct Estimate {
    at: Option<Instant>,
    count: usize,
}

/// The gate a loader passes before each batch.
pub struct Backlog {
    client: Client,
    bound: usize,
    estimate: tokio::sync::Mutex<Estimate>,
    counts: std::sync::atomic::AtomicU64,
}

impl Backlog {
    /// A gate holding the loader while more than `bound` notifications wait.
    pub fn new(client: Client, bound: usize) -> Self {
        Backlog {
            client,
            bound,
            estimate: tokio::sync::Mutex::new(Estimate { at: None, count: 0 }),
            counts: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The level the loader waits for once the backlog went above the bound.
    fn resume_at(&self) -> usize {
        self.bound / 2
    }

    /// How many times the backlog was counted in the store (each a scan of up to `bound`
    /// keys).
    pub fn counts(&self) -> u64 {
        self.counts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The notify keys in the store, counted up to `limit`.
    pub async fn count(&self, limit: usize) -> Result<usize, TxnError> {
        self.counts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let floor = self.client.notify_floor().await?;
        let range = self.client.codec().notify_from(floor);
        let keys = self
            .client
            .store()
            .scan(range, limit.max(1), ScanOrder::Forward)
            .await?;
        Ok(keys.len())
    }

    /// Waits until the loader may commit another batch (see the module's doc), adding one to
    /// `waits` when it has to wait. A failed count lets the loader through (backpressure is
    /// a pace, not a guard).
    pub async fn wait_below(&self, waits: &std::sync::atomic::AtomicU64) {
        let mut estimate = self.estimate.lock().await;
        let fresh = estimate.at.is_some_and(|at| at.elapsed() < REFRESH_EVERY);
        if fresh && estimate.count <= self.bound {
            return;
        }
        if !fresh {
            // A periodic refresh: on below the bound, as the estimate would have.
            match self.count(self.bound.saturating_add(1)).await {
                Ok(count) => {
                    estimate.count = count;
                    estimate.at = Some(Instant::now());
                    if count <= self.bound {
                        return;
                    }
                }
                Err(e) => return self.let_through(&mut estimate, e),
            }
        }
        // Above the bound: wait (other files of this loader queue behind the lock) until at
        // most `resume_at` are left.
        waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::debug!(
            bound = self.bound,
            "notification backlog above the bound; loader waits for the observers"
        );
        let since = Instant::now();
        let mut warned = false;
        let mut pause = FIRST_RECHECK;
        loop {
            // Half the bound while the observers drain fast; the bound itself once the waits are
            // long (a backlog that stopped falling above half the bound).
            let resume_at = if pause >= MAX_RECHECK {
                self.bound
            } else {
                self.resume_at()
            };
            match self.count(resume_at.saturating_add(1)).await {
                Ok(count) if count <= resume_at => {
                    estimate.count = count;
                    estimate.at = Some(Instant::now());
                    return;
                }
                Ok(_) => {}
                Err(e) => return self.let_through(&mut estimate, e),
            }
            if !warned && since.elapsed() >= STALLED_AFTER {
                warned = true;
                tracing::warn!(
                    bound = self.bound,
                    "the loader has waited {}s for the observers to take the notification backlog \
                     below --max-backlog: is a worker running? (--max-backlog 0 loads without \
                     waiting)",
                    STALLED_AFTER.as_secs()
                );
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(MAX_RECHECK);
        }
    }

    /// A failed count: warn and let the loader on until the next refresh.
    fn let_through(&self, estimate: &mut Estimate, error: TxnError) {
        tracing::warn!(error = %error, "counting the notification backlog failed");
        estimate.count = 0;
        estimate.at = Some(Instant::now());
    }

    /// Counts `lines` just committed into the backlog's estimate.
    pub async fn loaded(&self, lines: usize) {
        let mut estimate = self.estimate.lock().await;
        estimate.count = estimate.count.saturating_add(lines);
    }
}
