//! Garbage collection on a schedule ([`spawn_gc`]): version GC (`Client::gc`) at a safe
//! point `lag` behind the oracle and, optionally, the IdRegistry days behind a retention
//! ([`crate::registry::gc_registry`]), run by `photon work` (and the demo's long runs).
//!
//! Several workers of one namespace each run the task; a lease cell (`control/gc/lease`,
//! holder and expiry, taken in a transaction) lets one of them run a pass at a time. The
//! lease saves work, not correctness: concurrent GCs are safe (the safe point is published
//! with a CAS and never moves back, lock resolution is idempotent, heads change only by CAS
//! from the exact head read, and each deletes only versions invisible at every snapshot at
//! or above its own safe point, which is at or below the published one), so a lease that
//! expires under a slow pass costs a duplicated pass at worst.

use crate::registry::RegistryError;
use crate::schema::{now_ms, CONTROL};
use percolator::ts::Timestamp;
use percolator::{Cell, Client, TxnError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What the periodic GC runs with.
#[derive(Clone, Debug)]
pub struct GcSpec {
    /// Time between passes.
    pub every: Duration,
    /// How far the safe point lags the oracle (at least the client's `gc_lag`; raised to it
    /// otherwise, since `Client::gc` refuses less).
    pub lag: Duration,
    /// IdRegistry days to keep (counted back from the oracle's today, UTC); `None`: keep
    /// every day.
    pub retention_days: Option<u64>,
    /// Who holds the lease (unique per process).
    pub holder: String,
}

/// Counters of the periodic GC (Prometheus: `photon_gc_*`).
#[derive(Debug, Default)]
pub struct GcMetrics {
    /// Passes completed.
    pub passes: AtomicU64,
    /// Passes skipped because another process held the lease.
    pub skipped: AtomicU64,
    /// Passes that failed (retried at the next period).
    pub failures: AtomicU64,
    /// `V` entries deleted.
    pub versions_deleted: AtomicU64,
    /// Heads shrunk to tombstones.
    pub heads_tombstoned: AtomicU64,
    /// Locks resolved.
    pub locks_resolved: AtomicU64,
    /// IdRegistry keys deleted behind the boundary.
    pub registry_keys_deleted: AtomicU64,
    /// Keys of handled parked-click index cells deleted (below the sweep's cursor and the
    /// safe point).
    pub parked_keys_deleted: AtomicU64,
    /// The bucket below which this process has deleted the parked-click index (where its
    /// next purge starts; 0 after a restart, which walks the old delete markers once).
    pub parked_purged_below: AtomicU64,
    /// The safe point of the last pass (physical ms).
    pub last_safe_point_ms: AtomicU64,
}

/// The GC lease: `"<holder> <until_ms>"`.
pub fn lease_cell() -> Cell {
    Cell::new(CONTROL, "gc", "lease")
}

/// Takes the lease for `ttl` if it is free, expired or ours. Returns whether we hold it.
pub async fn take_lease(client: &Client, holder: &str, ttl: Duration) -> Result<bool, TxnError> {
    client
        .run(|txn| async move {
            let now = now_ms();
            if let Some(bytes) = txn.get(&lease_cell()).await? {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let (who, until) = text.split_once(' ').unwrap_or(("", "0"));
                if who != holder && until.parse::<u64>().unwrap_or(0) > now {
                    txn.rollback();
                    return Ok(false);
                }
            }
            let until = now + ttl.as_millis() as u64;
            txn.set(lease_cell(), format!("{holder} {until}"));
            Ok::<_, TxnError>(true)
        })
        .await
}

/// Gives the lease back if we hold it.
async fn release_lease(client: &Client, holder: &str) -> Result<(), TxnError> {
    client
        .run(|txn| async move {
            let ours = txn
                .get(&lease_cell())
                .await?
                .is_some_and(|b| String::from_utf8_lossy(&b).split(' ').next() == Some(holder));
            if ours {
                txn.set(lease_cell(), format!("{holder} 0"));
            } else {
                txn.rollback();
            }
            Ok::<_, TxnError>(())
        })
        .await
}

/// One GC pass (without the lease): version GC at `lag` behind the oracle, then the
/// IdRegistry days behind the retention (counted back from the oracle's day; a move of the
/// boundary by more than a day fails the pass with [`RegistryError::Jump`]). Records what it
/// did in `metrics`.
pub async fn gc_pass(
    client: &Client,
    spec: &GcSpec,
    metrics: &GcMetrics,
) -> Result<(), RegistryError> {
    let lag = spec.lag.max(client.config().gc_lag) + Duration::from_secs(1);
    let now = client
        .oracle()
        .get_timestamp()
        .await
        .map_err(TxnError::from)?;
    let safe_ms = now.physical_ms().saturating_sub(lag.as_millis() as u64);
    let stats = client.gc(Timestamp::compose(safe_ms, 0)).await?;
    let add = |c: &AtomicU64, n: usize| c.fetch_add(n as u64, Ordering::Relaxed);
    add(&metrics.versions_deleted, stats.versions_deleted);
    add(&metrics.heads_tombstoned, stats.heads_tombstoned);
    add(&metrics.locks_resolved, stats.locks_resolved);
    metrics.last_safe_point_ms.store(safe_ms, Ordering::Relaxed);
    // The parked-click index below the sweep's cursor and the safe point; a failure is
    // logged and retried at the next pass, not a reason to skip the rest of this one.
    let from = metrics.parked_purged_below.load(Ordering::Relaxed);
    match crate::parked::purge_handled(client, safe_ms, from).await {
        Ok((deleted, below)) => {
            add(&metrics.parked_keys_deleted, deleted);
            metrics.parked_purged_below.store(below, Ordering::Relaxed);
        }
        Err(e) => tracing::warn!(error = %e, "deleting handled parked-click index cells failed"),
    }
    if let Some(days) = spec.retention_days {
        // Today by the oracle (the timestamp this pass began with), not by this host's
        // clock; a boundary more than a day ahead of the one in force is refused.
        let today = crate::event::day_of(now.physical_ms());
        let (_, deleted) =
            crate::registry::gc_registry(client, today.saturating_sub(days), false).await?;
        add(&metrics.registry_keys_deleted, deleted);
    }
    metrics.passes.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Runs [`gc_pass`] every `spec.every` while this process holds the lease, until the task
/// is aborted.
pub fn spawn_gc(
    client: Client,
    spec: GcSpec,
    metrics: Arc<GcMetrics>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(spec.every).await;
            // The lease outlives a normal pass (a GC walks every head): twice the period.
            match take_lease(&client, &spec.holder, spec.every * 2).await {
                Ok(true) => {}
                Ok(false) => {
                    metrics.skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(e) => {
                    metrics.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "gc lease not taken; will retry");
                    continue;
                }
            }
            match gc_pass(&client, &spec, &metrics).await {
                Ok(()) => tracing::info!("periodic gc pass complete"),
                Err(e) => {
                    metrics.failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "periodic gc pass failed; will retry");
                }
            }
            if let Err(e) = release_lease(&client, &spec.holder).await {
                tracing::debug!(error = %e, "gc lease not released (it expires)");
            }
        }
    })
}

/// The GC counters in the Prometheus text format.
pub fn render(metrics: &GcMetrics, out: &mut String) {
    use crate::metrics::counter;
    let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
    counter(
        out,
        "photon_gc_passes_total",
        "Periodic GC passes completed",
        "",
        get(&metrics.passes),
    );
    counter(
        out,
        "photon_gc_skipped_total",
        "GC periods skipped: another process held the lease",
        "",
        get(&metrics.skipped),
    );
    counter(
        out,
        "photon_gc_failures_total",
        "GC passes that failed",
        "",
        get(&metrics.failures),
    );
    counter(
        out,
        "photon_gc_versions_deleted_total",
        "Versions deleted by GC",
        "",
        get(&metrics.versions_deleted),
    );
    counter(
        out,
        "photon_gc_heads_tombstoned_total",
        "Heads shrunk to tombstones by GC",
        "",
        get(&metrics.heads_tombstoned),
    );
    counter(
        out,
        "photon_gc_locks_resolved_total",
        "Locks resolved by GC",
        "",
        get(&metrics.locks_resolved),
    );
    counter(
        out,
        "photon_gc_registry_keys_deleted_total",
        "IdRegistry keys deleted behind the boundary",
        "",
        get(&metrics.registry_keys_deleted),
    );
    counter(
        out,
        "photon_gc_parked_keys_deleted_total",
        "Keys of handled parked-click index cells deleted",
        "",
        get(&metrics.parked_keys_deleted),
    );
    crate::metrics::gauge(
        out,
        "photon_gc_safe_point_ms",
        "Safe point of the last GC pass (ms since the epoch)",
        "",
        get(&metrics.last_safe_point_ms) as f64,
    );
}
