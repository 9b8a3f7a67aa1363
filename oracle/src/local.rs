//! [`LocalOracle`]: the persisted window, in-process, for the embedded single-process mode.

use crate::lease::Lease;
use crate::{record_key, OracleError, WindowOptions};
use async_trait::async_trait;
use percolator::{RawKv, Timestamp, TimestampError, TimestampSource};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// An in-process oracle over a store that this process owns exclusively (the embedded store
/// holds a directory lock). It takes over the oracle record when opened (raising its epoch
/// and starting above the persisted window end), then serves from memory inside windows it
/// persists by compare-and-swap, so timestamps never repeat across restarts.
///
/// Once less than half a window is left, a call starts the next window's durable write in
/// the background (one at a time), so callers wait for it only when timestamps outrun it;
/// under a busy store that write (a compare-and-swap and a sync) can take seconds, and every
/// caller, worker heartbeats included, used to stall behind it.
///
/// It does not re-read the record per call: use it only where no other oracle serves the
/// same store. A window extension that finds the record changed fails with
/// [`OracleError::NotLeader`] and every later call fails too.
pub struct LocalOracle {
    lease: Arc<Lease>,
    /// Whether an early extension is under way.
    extending: Arc<AtomicBool>,
}

impl LocalOracle {
    /// Takes over the oracle record of `options.namespace` in `kv`.
    pub async fn open(kv: Arc<dyn RawKv>, options: WindowOptions) -> Result<Self, OracleError> {
        let key = record_key(&options.namespace);
        let id: u64 = rand::random();
        for _ in 0..16 {
            let observed = kv.get(&key).await?;
            if let Some(lease) = Lease::take_over(
                kv.clone(),
                key.clone(),
                options.clone(),
                id,
                "in-process".to_string(),
                observed,
            )
            .await?
            {
                tracing::debug!(epoch = lease.epoch(), "local oracle took over");
                return Ok(LocalOracle {
                    lease: Arc::new(lease),
                    extending: Arc::new(AtomicBool::new(false)),
                });
            }
        }
        Err(OracleError::TakeoverFailed(
            "the record kept changing under 16 attempts".to_string(),
        ))
    }

    /// `count` consecutive fresh timestamps; returns the first.
    pub async fn get_timestamps(&self, count: u32) -> Result<Timestamp, OracleError> {
        let (first, low) = self.lease.allocate(u64::from(count)).await?;
        if low {
            self.extend_early();
        }
        Ok(Timestamp(first))
    }

    /// Starts extending the window in the background (at most one extension at a time; none
    /// outside a Tokio runtime).
    fn extend_early(&self) {
        if self.lease.is_deposed() || self.extending.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            self.extending.store(false, Ordering::Release);
            return;
        };
        let (lease, extending) = (self.lease.clone(), self.extending.clone());
        runtime.spawn(async move {
            // A failure leaves the window as it was: the next call past its end extends it
            // itself and reports the error.
            if let Err(e) = lease.extend(None).await {
                tracing::debug!(error = %e, "early window extension failed");
            }
            extending.store(false, Ordering::Release);
        });
    }

    /// Marks the record as released (no leader); later calls fail with `NotLeader`.
    pub async fn close(self) -> Result<(), OracleError> {
        self.lease.release().await
    }
}

#[async_trait]
impl TimestampSource for LocalOracle {
    async fn get_timestamp(&self) -> Result<Timestamp, TimestampError> {
        self.get_timestamps(1)
            .await
            .map_err(|e| TimestampError::Unavailable(e.to_string()))
    }
}
