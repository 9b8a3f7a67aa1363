//! Garbage collection on a schedule ([`spawn_gc`]), run by `photon work` (and the long runs
//! of `photon run` and `photon demo`): version GC and its lease from the application layer
//! ([`app::gc`]), plus Photon's own spaces: the handled parked-click index below the
//! sweep's cursor and, optionally, the IdRegistry days behind a retention
//! ([`crate::registry::gc_registry`]). The lease is `control/gc/lease`.

use crate::registry::RegistryError;
use crate::schema::CONTROL;
use app::gc::{GcMetrics as VersionMetrics, Schedule};
use percolator::{Cell, Client};
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
    /// IdRegistry days to keep (counted back from the oracle's today, UTC, or the query
    /// logs' watermark's day when it is behind); `None`: keep every day.
    pub retention_days: Option<u64>,
    /// Who holds the lease (unique per process).
    pub holder: String,
}

/// Counters of the periodic GC (Prometheus: `percolator_gc_*` and `photon_gc_*`, see
/// [`crate::metrics::register`]): the version GC's
/// ([`app::gc::GcMetrics`], reached through `Deref`) and Photon's own.
#[derive(Debug, Default)]
pub struct GcMetrics {
    /// Passes, failures, versions, heads and locks.
    pub versions: VersionMetrics,
    /// IdRegistry keys deleted behind the boundary.
    pub registry_keys_deleted: AtomicU64,
    /// IdRegistry entries behind the boundary kept for a later pass, counted once per pass
    /// that kept them: a transaction that wrote them is not resolved by GC yet.
    pub registry_entries_deferred: AtomicU64,
    /// Keys of handled parked-click index cells deleted (below the sweep's cursor and the
    /// safe point).
    pub parked_keys_deleted: AtomicU64,
    /// The bucket below which this process has deleted the parked-click index (where its
    /// next purge starts; 0 after a restart, which walks the old delete markers once).
    pub parked_purged_below: AtomicU64,
}

impl AsRef<VersionMetrics> for GcMetrics {
    fn as_ref(&self) -> &VersionMetrics {
        &self.versions
    }
}

impl std::ops::Deref for GcMetrics {
    type Target = VersionMetrics;

    fn deref(&self) -> &VersionMetrics {
        &self.versions
    }
}

/// The GC lease: `"<holder> <until_ms>"`.
pub fn lease_cell() -> Cell {
    app::gc::lease_cell(CONTROL)
}

/// One GC pass (without the lease): version GC at `lag` behind the oracle, the handled
/// parked-click index, then the IdRegistry days behind the retention (counted back from the
/// oracle's day, or the query logs' watermark's when it is behind:
/// [`crate::registry::retention_day`]; a move of the boundary by more than a day fails the
/// pass with [`RegistryError::Jump`]). Records what it did in `metrics`.
pub async fn gc_pass(
    client: &Client,
    spec: &GcSpec,
    metrics: &GcMetrics,
) -> Result<(), RegistryError> {
    let (now, safe_ms) = app::gc::version_gc(client, spec.lag, &metrics.versions).await?;
    let add = |c: &AtomicU64, n: usize| c.fetch_add(n as u64, Ordering::Relaxed);
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
        // clock, or by the query logs' watermark when that is behind (a backfill); a
        // boundary more than a day ahead of the one in force is refused.
        let today = crate::registry::retention_day(client, now.physical_ms()).await?;
        let purge = crate::registry::gc_registry(
            client,
            today.day.saturating_sub(days),
            today.by_watermark,
        )
        .await?;
        add(&metrics.registry_keys_deleted, purge.deleted);
        add(&metrics.registry_entries_deferred, purge.deferred);
    }
    Ok(())
}

/// Runs [`gc_pass`] every `spec.every` while this process holds the lease, until the task
/// is aborted.
pub fn spawn_gc(
    client: Client,
    spec: GcSpec,
    metrics: Arc<GcMetrics>,
) -> tokio::task::JoinHandle<()> {
    let schedule = Schedule {
        every: spec.every,
        lease: lease_cell(),
        holder: spec.holder.clone(),
    };
    let (c, m) = (client.clone(), metrics.clone());
    // `spawn_leased` counts passes, skips and failures in the version metrics.
    app::gc::spawn_leased(client, schedule, metrics, move || {
        let (client, spec, metrics) = (c.clone(), spec.clone(), m.clone());
        async move { gc_pass(&client, &spec, &metrics).await }
    })
}
