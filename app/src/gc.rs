//! Garbage collection on a schedule: version GC (`Client::gc`) at a safe point `lag` behind
//! the oracle ([`version_gc`]), and a periodic task that runs a pass (version GC and
//! whatever the application adds, e.g. Photon's IdRegistry days) while this process holds a
//! lease ([`spawn_leased`]).
//!
//! Several workers of one namespace each run the task; a lease cell (holder and expiry,
//! taken in a transaction) lets one of them run a pass at a time. The lease saves work, not
//! correctness: concurrent GCs are safe (the safe point is published with a CAS and never
//! moves back, lock resolution is idempotent, heads change only by CAS from the exact head
//! read, and each deletes only versions invisible at every snapshot at or above its own safe
//! point, which is at or below the published one), so a lease that expires under a slow
//! pass costs a duplicated pass at worst.

use percolator::ts::Timestamp;
use percolator::{Cell, Client, TxnError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Counters of the periodic GC (Prometheus: `percolator_gc_*`, [`crate::metrics::register_gc`]).
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
    /// Pending write-once records rewritten as committed, or deleted as rolled back.
    pub records_resolved: AtomicU64,
    /// Write-once records deleted under a newer committed write.
    pub records_deleted: AtomicU64,
    /// The safe point of the last pass (physical ms).
    pub last_safe_point_ms: AtomicU64,
    /// How long the last completed version GC pass took, ms. A pass reads every record and
    /// head kept, so this grows with the history; a pass longer than the period means GC
    /// falls behind (`docs/operating.md`, GC).
    pub last_pass_ms: AtomicU64,
}

impl AsRef<GcMetrics> for GcMetrics {
    fn as_ref(&self) -> &GcMetrics {
        self
    }
}

/// When and under which lease a periodic task runs.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Time between passes.
    pub every: Duration,
    /// The lease cell (`"<holder> <until_ms>"`).
    pub lease: Cell,
    /// Who holds the lease (unique per process).
    pub holder: String,
}

/// The GC lease of an application whose control cells are in `table`: `<table>/gc/lease`.
pub fn lease_cell(table: &str) -> Cell {
    Cell::new(table, "gc", "lease")
}

/// Takes `lease` for `ttl` if it is free, expired or ours. Returns whether we hold it.
pub async fn take_lease(
    client: &Client,
    lease: &Cell,
    holder: &str,
    ttl: Duration,
) -> Result<bool, TxnError> {
    client
        .run(|txn| async move {
            // The client's wall clock (the system clock unless configured otherwise).
            let now = client.wall_ms();
            if let Some(bytes) = txn.get(lease).await? {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                let (who, until) = text.split_once(' ').unwrap_or(("", "0"));
                if who != holder && until.parse::<u64>().unwrap_or(0) > now {
                    txn.rollback();
                    return Ok(false);
                }
            }
            let until = now + ttl.as_millis() as u64;
            txn.set(lease.clone(), format!("{holder} {until}"));
            Ok::<_, TxnError>(true)
        })
        .await
}

/// Gives `lease` back if we hold it.
pub async fn release_lease(client: &Client, lease: &Cell, holder: &str) -> Result<(), TxnError> {
    client
        .run(|txn| async move {
            let ours = txn
                .get(lease)
                .await?
                .is_some_and(|b| String::from_utf8_lossy(&b).split(' ').next() == Some(holder));
            if ours {
                txn.set(lease.clone(), format!("{holder} 0"));
            } else {
                txn.rollback();
            }
            Ok::<_, TxnError>(())
        })
        .await
}

/// Version GC at `lag` behind the oracle (at least the client's `gc_lag`, since
/// `Client::gc` refuses less). Records what it did in `metrics`; returns the oracle's
/// timestamp the pass began with and the safe point (physical ms).
pub async fn version_gc(
    client: &Client,
    lag: Duration,
    metrics: &GcMetrics,
) -> Result<(Timestamp, u64), TxnError> {
    let lag = lag.max(client.config().gc_lag) + Duration::from_secs(1);
    let now = client.oracle().get_timestamp().await?;
    let safe_ms = now.physical_ms().saturating_sub(lag.as_millis() as u64);
    let began = std::time::Instant::now();
    let stats = client.gc(Timestamp::compose(safe_ms, 0)).await?;
    let took_ms = u64::try_from(began.elapsed().as_millis()).unwrap_or(u64::MAX);
    let add = |c: &AtomicU64, n: usize| c.fetch_add(n as u64, Ordering::Relaxed);
    add(&metrics.versions_deleted, stats.versions_deleted);
    add(&metrics.heads_tombstoned, stats.heads_tombstoned);
    add(&metrics.locks_resolved, stats.locks_resolved);
    add(&metrics.records_resolved, stats.records_resolved);
    add(&metrics.records_deleted, stats.records_deleted);
    metrics.last_safe_point_ms.store(safe_ms, Ordering::Relaxed);
    metrics.last_pass_ms.store(took_ms, Ordering::Relaxed);
    Ok((now, safe_ms))
}

/// Runs `pass` every `schedule.every` while this process holds the lease, until the task is
/// aborted; counts passes, skipped periods and failures in `metrics` (the application's
/// counters, holding a [`GcMetrics`]). The lease outlives a normal pass (a GC walks every
/// head): twice the period.
pub fn spawn_leased<M, F, Fut, E>(
    client: Client,
    schedule: Schedule,
    metrics: Arc<M>,
    pass: F,
) -> tokio::task::JoinHandle<()>
where
    M: AsRef<GcMetrics> + Send + Sync + 'static,
    F: Fn() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<(), E>> + Send,
    E: std::fmt::Display,
{
    tokio::spawn(async move {
        let Schedule {
            every,
            lease,
            holder,
        } = schedule;
        let counts = || (*metrics).as_ref();
        loop {
            tokio::time::sleep(every).await;
            match take_lease(&client, &lease, &holder, every * 2).await {
                Ok(true) => {}
                Ok(false) => {
                    counts().skipped.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                Err(e) => {
                    counts().failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "gc lease not taken; will retry");
                    continue;
                }
            }
            match pass().await {
                Ok(()) => {
                    counts().passes.fetch_add(1, Ordering::Relaxed);
                    tracing::info!("periodic gc pass complete");
                }
                Err(e) => {
                    counts().failures.fetch_add(1, Ordering::Relaxed);
                    tracing::warn!(error = %e, "periodic gc pass failed; will retry");
                }
            }
            if let Err(e) = release_lease(&client, &lease, &holder).await {
                tracing::debug!(error = %e, "gc lease not released (it expires)");
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::{register_gc, Metrics};
    use percolator::kv::intercept::{Call, Hooks, Intercepted};
    use percolator::kv::{KvResult, MemoryKv};
    use percolator::ts::LocalClock;
    use percolator::txn::ClientConfig;

    /// Every scan takes 20 ms, so a GC pass (which scans) takes at least that long.
    struct SlowScans;

    #[async_trait::async_trait]
    impl Hooks for SlowScans {
        async fn before(&self, call: Call<'_>) -> KvResult<()> {
            if matches!(call, Call::Scan { .. }) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(())
        }
    }

    /// A pass adds the write-once records it resolved to the counters and keeps its own
    /// duration, and the scrape shows both.
    #[tokio::test]
    async fn a_version_gc_pass_counts_its_records_and_keeps_its_duration() {
        let config = ClientConfig {
            gc_lag: Duration::from_millis(20),
            ..ClientConfig::default()
        };
        let store = Intercepted::wrap(Arc::new(MemoryKv::new()), SlowScans);
        let client = Client::with_config(Arc::new(store), Arc::new(LocalClock::new()), config);
        client.write_once_column("events", "body");
        let txn = client.begin().await.unwrap();
        txn.set(Cell::new("t", "offset", "c"), "1");
        for i in 0..10 {
            txn.set(Cell::new("events", format!("e{i}"), "body"), "x");
        }
        txn.commit().await.unwrap();
        // `version_gc` keeps a second more than the lag behind the oracle.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let gc = Arc::new(GcMetrics::default());
        let metrics = Metrics::new();
        register_gc(&metrics, "ns", gc.clone());
        version_gc(&client, Duration::ZERO, &gc).await.unwrap();
        assert_eq!(gc.records_resolved.load(Ordering::Relaxed), 10);
        assert!(gc.last_safe_point_ms.load(Ordering::Relaxed) > 0);
        assert!(gc.last_pass_ms.load(Ordering::Relaxed) >= 20);
        let text = metrics.encode();
        assert!(
            text.contains("percolator_gc_records_resolved_total{namespace=\"ns\"} 10"),
            "{text}"
        );
        assert!(
            text.contains("percolator_gc_last_pass_seconds{namespace=\"ns\"}"),
            "{text}"
        );
    }
}
