//! Counters and latency histograms of a worker, readable through the API, and the
//! Prometheus series they feed ([`crate::telemetry`]).

use crate::telemetry::{ObserverLabels, Telemetry};
use hdrhistogram::Histogram;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// Live counters of a worker.
#[derive(Debug)]
pub struct Metrics {
    /// Notify keys found by scans (including ones found again).
    pub found: AtomicU64,
    /// Observer runs that committed.
    pub processed: AtomicU64,
    /// Notifications handled without a run because the acknowledgment already covered them
    /// (another worker or an earlier run did the work).
    pub duplicates: AtomicU64,
    /// Observer transactions that hit a conflict (and were retried).
    pub conflicts: AtomicU64,
    /// Observer runs that failed (error or panic).
    pub failures: AtomicU64,
    /// Notifications moved to the dead-letter space.
    pub dead_lettered: AtomicU64,
    /// Notifications of writers that rolled back (deleted, nothing run).
    pub rolled_back: AtomicU64,
    /// Keys read by scans of the notify space.
    pub scanned: AtomicU64,
    /// Notify keys dispatched straight from this process's commit hints, or from keys that
    /// loaders in other processes relayed ([`crate::relay`]): no scan needed.
    pub hinted: AtomicU64,
    /// Batch transactions (of two or more cells of one strong observer) that committed.
    pub batches: AtomicU64,
    /// Batches split in halves after a conflict or a failure.
    pub splits: AtomicU64,
    /// Notify keys whose handling met a transient error (a store or oracle outage, a commit whose
    /// outcome is unknown): retried with backoff, never counted towards a dead letter.
    pub transient: AtomicU64,
    /// Observer run latency (begin to commit), microseconds.
    latency_us: Mutex<Histogram<u64>>,
    /// The Prometheus series of the same events, with their labels.
    pub(crate) telemetry: Telemetry,
}

/// An event of one observer's notification, counted in [`Metrics`] and in its Prometheus
/// series.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Event {
    Ran,
    Duplicate,
    Failed,
    DeadLettered,
    Conflict,
    Retry,
    RolledBack,
    Split,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            found: AtomicU64::new(0),
            processed: AtomicU64::new(0),
            duplicates: AtomicU64::new(0),
            conflicts: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            dead_lettered: AtomicU64::new(0),
            rolled_back: AtomicU64::new(0),
            scanned: AtomicU64::new(0),
            hinted: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            splits: AtomicU64::new(0),
            transient: AtomicU64::new(0),
            latency_us: Mutex::new(
                Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"),
            ),
            telemetry: Telemetry::default(),
        }
    }
}

/// A point-in-time copy of [`Metrics`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricsSnapshot {
    /// See [`Metrics::found`].
    pub found: u64,
    /// See [`Metrics::processed`].
    pub processed: u64,
    /// See [`Metrics::duplicates`].
    pub duplicates: u64,
    /// See [`Metrics::conflicts`].
    pub conflicts: u64,
    /// See [`Metrics::failures`].
    pub failures: u64,
    /// See [`Metrics::dead_lettered`].
    pub dead_lettered: u64,
    /// See [`Metrics::rolled_back`].
    pub rolled_back: u64,
    /// See [`Metrics::scanned`].
    pub scanned: u64,
    /// See [`Metrics::hinted`].
    pub hinted: u64,
    /// See [`Metrics::batches`].
    pub batches: u64,
    /// See [`Metrics::splits`].
    pub splits: u64,
    /// See [`Metrics::transient`].
    pub transient: u64,
    /// Median observer latency.
    pub latency_p50: Duration,
    /// 99th percentile observer latency.
    pub latency_p99: Duration,
}

impl Metrics {
    pub(crate) fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add_n(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Metrics counting into `telemetry`'s series.
    pub(crate) fn with_telemetry(telemetry: Telemetry) -> Self {
        Metrics {
            telemetry,
            ..Metrics::default()
        }
    }

    /// The labels of `observer`'s series for `cell`'s column.
    pub(crate) fn labels(&self, cell: &percolator::Cell, observer: &str) -> ObserverLabels {
        self.telemetry.observer(cell, observer)
    }

    /// Counts one `event` of the observer labelled `labels` (`None`: the observer is not
    /// known, e.g. a corrupt notify key; only the worker's counter moves).
    pub(crate) fn count(&self, event: Event, labels: Option<&ObserverLabels>) {
        let f = &self.telemetry.families;
        let (counter, family) = match event {
            Event::Ran => (&self.processed, &f.runs),
            Event::Duplicate => (&self.duplicates, &f.duplicates),
            Event::Failed => (&self.failures, &f.failures),
            Event::DeadLettered => (&self.dead_lettered, &f.dead_letters),
            Event::Conflict => (&self.conflicts, &f.conflicts),
            Event::Retry => (&self.transient, &f.retries),
            Event::RolledBack => (&self.rolled_back, &f.rolled_back),
            Event::Split => (&self.splits, &f.splits),
        };
        Metrics::add(counter);
        if let Some(labels) = labels {
            family.get_or_create(labels).inc();
        }
    }

    /// Records a committed observer transaction of `notifications` runs that took
    /// `duration` (begin to commit).
    pub(crate) fn record_run(
        &self,
        labels: &ObserverLabels,
        notifications: usize,
        duration: Duration,
    ) {
        let f = &self.telemetry.families;
        f.batch_size
            .get_or_create(labels)
            .observe(notifications as f64);
        f.run_duration
            .get_or_create(labels)
            .observe(duration.as_secs_f64());
    }

    /// Records the time from a writer's commit (physical part of its timestamp, Unix
    /// milliseconds) to the commit of the observer run it caused.
    pub(crate) fn record_commit_to_run(&self, labels: &ObserverLabels, committed_ms: u64) {
        if committed_ms == 0 {
            return;
        }
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_millis() as u64;
        let seconds = now_ms.saturating_sub(committed_ms) as f64 / 1000.0;
        self.telemetry
            .families
            .commit_to_run
            .get_or_create(labels)
            .observe(seconds);
    }

    /// Counts `n` notify keys found (by scans or commit hints).
    pub(crate) fn add_found(&self, n: u64) {
        Metrics::add_n(&self.found, n);
        let f = &self.telemetry.families;
        f.found.get_or_create(self.telemetry.worker()).inc_by(n);
    }

    /// Counts `n` notify keys dispatched from commit hints.
    pub(crate) fn add_hinted(&self, n: u64) {
        Metrics::add_n(&self.hinted, n);
        let f = &self.telemetry.families;
        f.hinted.get_or_create(self.telemetry.worker()).inc_by(n);
    }

    /// Counts `n` keys read by a scan.
    pub(crate) fn add_scanned(&self, n: u64) {
        Metrics::add_n(&self.scanned, n);
        self.telemetry
            .families
            .scanned
            .get_or_create(self.telemetry.worker())
            .inc_by(n);
    }

    /// Sets the backlog gauges of one observed column: `waiting` notifications, the oldest
    /// `oldest_age` old.
    pub(crate) fn set_backlog(
        &self,
        table: &[u8],
        column: &[u8],
        waiting: u64,
        oldest_age: Duration,
    ) {
        let labels = self.telemetry.column(table, column);
        let f = &self.telemetry.families;
        f.backlog
            .get_or_create(&labels)
            .set(i64::try_from(waiting).unwrap_or(i64::MAX));
        f.oldest_age
            .get_or_create(&labels)
            .set(oldest_age.as_secs_f64());
    }

    pub(crate) fn record_latency(&self, latency: Duration) {
        let mut h = self.latency_us.lock().unwrap_or_else(|p| p.into_inner());
        let _ = h.record((latency.as_micros() as u64).max(1));
    }

    /// A copy of every counter and the latency percentiles.
    pub fn snapshot(&self) -> MetricsSnapshot {
        let h = self.latency_us.lock().unwrap_or_else(|p| p.into_inner());
        let load = |c: &AtomicU64| c.load(Ordering::Relaxed);
        MetricsSnapshot {
            found: load(&self.found),
            processed: load(&self.processed),
            duplicates: load(&self.duplicates),
            conflicts: load(&self.conflicts),
            failures: load(&self.failures),
            dead_lettered: load(&self.dead_lettered),
            rolled_back: load(&self.rolled_back),
            scanned: load(&self.scanned),
            hinted: load(&self.hinted),
            batches: load(&self.batches),
            splits: load(&self.splits),
            transient: load(&self.transient),
            latency_p50: Duration::from_micros(h.value_at_quantile(0.5)),
            latency_p99: Duration::from_micros(h.value_at_quantile(0.99)),
        }
    }
}
