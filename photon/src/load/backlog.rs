//! Backpressure of the loader: it waits while the notification backlog (notify keys not yet
//! handled by the join) is above a bound, so that the join's latency measures the system,
//! not a queue growing without bound in front of it.
//!
//! The backlog is counted in the store, so it works whether the workers run in this process
//! or in others: a scan of the notify space from the notify floor, with a limit of bound + 1
//! (the floor keeps the keys the scan walks over to about the live ones). Checks are shared
//! by the files loading in parallel and made at most every [`CHECK_EVERY`]; between checks
//! the lines committed since are added to the count, so no burst of batches slips past a
//! stale answer.

use percolator::kv::ScanOrder;
use percolator::{Client, TxnError};
use std::time::{Duration, Instant};

/// How often the backlog is counted while the loader runs.
pub const CHECK_EVERY: Duration = Duration::from_millis(50);

/// How long the loader waits before it warns that the join may not be running.
const STALLED_AFTER: Duration = Duration::from_secs(10);

/// The last count and when it was made.
struct Last {
    at: Option<Instant>,
    count: usize,
}

/// The gate a loader passes before each batch.
pub struct Backlog {
    client: Client,
    bound: usize,
    last: tokio::sync::Mutex<Last>,
}

impl Backlog {
    /// A gate holding the loader while more than `bound` notifications wait.
    pub fn new(client: Client, bound: usize) -> Self {
        Backlog {
            client,
            bound,
            last: tokio::sync::Mutex::new(Last { at: None, count: 0 }),
        }
    }

    /// The notify keys in the store, counted up to `bound + 1`.
    pub async fn count(&self) -> Result<usize, TxnError> {
        let floor = self.client.notify_floor().await?;
        let range = self.client.codec().notify_from(floor);
        let keys = self
            .client
            .store()
            .scan(range, self.bound.saturating_add(1), ScanOrder::Forward)
            .await?;
        Ok(keys.len())
    }

    /// Waits until at most `bound` notifications wait, adding one to `waits` when it has to
    /// wait. A failed count lets the loader through (backpressure is a pace, not a guard).
    pub async fn wait_below(&self, waits: &std::sync::atomic::AtomicU64) {
        let mut waited = false;
        let mut warned = false;
        let since = Instant::now();
        loop {
            {
                let mut last = self.last.lock().await;
                if last.at.is_none_or(|at| at.elapsed() >= CHECK_EVERY) {
                    match self.count().await {
                        Ok(count) => last.count = count,
                        Err(e) => {
                            tracing::warn!(error = %e, "counting the notification backlog failed");
                            last.count = 0;
                        }
                    }
                    last.at = Some(Instant::now());
                }
                if last.count <= self.bound {
                    return;
                }
                if !waited {
                    waits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    tracing::debug!(
                        bound = self.bound,
                        "notification backlog above the bound; loader waits for the join"
                    );
                }
            }
            waited = true;
            if !warned && since.elapsed() >= STALLED_AFTER {
                warned = true;
                tracing::warn!(
                    bound = self.bound,
                    "the loader has waited {}s for the join to take the notification backlog \
                     below --max-backlog: is a worker (`photon work`) running? (--max-backlog 0 \
                     loads without waiting)",
                    STALLED_AFTER.as_secs()
                );
            }
            tokio::time::sleep(CHECK_EVERY).await;
        }
    }

    /// Counts `lines` just committed into the backlog until the next check.
    pub async fn loaded(&self, lines: usize) {
        let mut last = self.last.lock().await;
        last.count = last.count.saturating_add(lines);
    }
}
