//! Prometheus families of workers and observers ([`WorkerMetrics`]), labelled per
//! application namespace, observed column and observer.
//!
//! A process registers one [`WorkerMetrics`] into its registry
//! ([`WorkerMetrics::registered`]) and starts each of its workers with it
//! ([`crate::Worker::start_with_metrics`]); a worker started without one counts into families
//! no registry reads (its [`crate::Metrics`] snapshot still works). docs/metrics.md lists
//! every metric.
//!
//! | metric | type | labels |
//! |---|---|---|
//! | `percolator_observer_runs_total` | counter | namespace, table, column, observer |
//! | `percolator_observer_duplicates_total` | counter | same |
//! | `percolator_observer_failures_total` | counter | same |
//! | `percolator_observer_dead_letters_total` | counter | same |
//! | `percolator_observer_conflicts_total` | counter | same |
//! | `percolator_observer_retries_total` | counter | same |
//! | `percolator_observer_rolled_back_total` | counter | same |
//! | `percolator_observer_batch_splits_total` | counter | same |
//! | `percolator_observer_batch_notifications` | histogram | same |
//! | `percolator_observer_commit_to_run_seconds` | histogram | same |
//! | `percolator_observer_run_duration_seconds` | histogram | same |
//! | `percolator_worker_notifications_found_total` | counter | namespace, worker |
//! | `percolator_worker_notifications_hinted_total` | counter | namespace, worker |
//! | `percolator_worker_notify_keys_scanned_total` | counter | namespace, worker |
//! | `percolator_worker_backlog_notifications` | gauge | namespace, table, column, worker |
//! | `percolator_worker_backlog_oldest_age_seconds` | gauge | namespace, table, column, worker |

use percolator::Cell;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::atomic::AtomicU64;

/// Labels of an observer's series: the namespace, the observed column (table and column) and
/// the observer's name.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ObserverLabels {
    /// The application's key namespace.
    pub namespace: String,
    /// The observed column's table.
    pub table: String,
    /// The observed column.
    pub column: String,
    /// The observer's registered name.
    pub observer: String,
}

/// Labels of a worker's own series.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkerLabels {
    /// The application's key namespace.
    pub namespace: String,
    /// The worker's id in the worker registry.
    pub worker: String,
}

/// Labels of a worker's backlog gauges: one series per observed column.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ColumnLabels {
    /// The application's key namespace.
    pub namespace: String,
    /// The observed column's table.
    pub table: String,
    /// The observed column.
    pub column: String,
    /// The worker whose share of the notify space was counted.
    pub worker: String,
}

type Histograms<L> = Family<L, Histogram, fn() -> Histogram>;

fn latency_histogram() -> Histogram {
    Histogram::new(percolator_metrics::latency_buckets())
}

fn size_histogram() -> Histogram {
    Histogram::new(percolator_metrics::size_buckets())
}

/// The families of workers and observers (shared handles: clones count into the same series).
#[derive(Clone, Debug)]
pub struct WorkerMetrics {
    pub(crate) runs: Family<ObserverLabels, Counter>,
    pub(crate) duplicates: Family<ObserverLabels, Counter>,
    pub(crate) failures: Family<ObserverLabels, Counter>,
    pub(crate) dead_letters: Family<ObserverLabels, Counter>,
    pub(crate) conflicts: Family<ObserverLabels, Counter>,
    pub(crate) retries: Family<ObserverLabels, Counter>,
    pub(crate) rolled_back: Family<ObserverLabels, Counter>,
    pub(crate) splits: Family<ObserverLabels, Counter>,
    pub(crate) batch_size: Histograms<ObserverLabels>,
    pub(crate) commit_to_run: Histograms<ObserverLabels>,
    pub(crate) run_duration: Histograms<ObserverLabels>,
    pub(crate) found: Family<WorkerLabels, Counter>,
    pub(crate) hinted: Family<WorkerLabels, Counter>,
    pub(crate) scanned: Family<WorkerLabels, Counter>,
    pub(crate) backlog: Family<ColumnLabels, Gauge>,
    pub(crate) oldest_age: Family<ColumnLabels, Gauge<f64, AtomicU64>>,
}

impl Default for WorkerMetrics {
    fn default() -> Self {
        WorkerMetrics {
            runs: Family::default(),
            duplicates: Family::default(),
            failures: Family::default(),
            dead_letters: Family::default(),
            conflicts: Family::default(),
            retries: Family::default(),
            rolled_back: Family::default(),
            splits: Family::default(),
            batch_size: Family::new_with_constructor(size_histogram),
            commit_to_run: Family::new_with_constructor(latency_histogram),
            run_duration: Family::new_with_constructor(latency_histogram),
            found: Family::default(),
            hinted: Family::default(),
            scanned: Family::default(),
            backlog: Family::default(),
            oldest_age: Family::default(),
        }
    }
}

impl WorkerMetrics {
    /// Families registered in no registry yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// New families, registered in `metrics` (once per process: every worker of the process
    /// shares them, told apart by their labels).
    pub fn registered(metrics: &percolator_metrics::Metrics) -> Self {
        let families = Self::new();
        metrics.register(|r| families.register(r));
        families
    }

    /// Registers every family in `registry` (counters get their `_total` when rendered).
    pub fn register(&self, r: &mut Registry) {
        let counters = [
            (
                "percolator_observer_runs",
                "Observer runs that committed, one per notification handled.",
                &self.runs,
            ),
            (
                "percolator_observer_duplicates",
                "Notifications already covered by the observer's acknowledgment (no run).",
                &self.duplicates,
            ),
            (
                "percolator_observer_failures",
                "Observer runs that failed (its error or panic); retried until dead-lettered.",
                &self.failures,
            ),
            (
                "percolator_observer_dead_letters",
                "Notifications moved to the dead-letter space after too many failures.",
                &self.dead_letters,
            ),
            (
                "percolator_observer_conflicts",
                "Observer transactions that met a write conflict (and were retried).",
                &self.conflicts,
            ),
            (
                "percolator_observer_retries",
                "Notifications retried after a transient error (a store or oracle outage).",
                &self.retries,
            ),
            (
                "percolator_observer_rolled_back",
                "Notifications of writers that rolled back (deleted, nothing run).",
                &self.rolled_back,
            ),
            (
                "percolator_observer_batch_splits",
                "Batches split in halves after a conflict or a failure.",
                &self.splits,
            ),
        ];
        for (name, help, family) in counters {
            r.register(name, help, family.clone());
        }
        r.register(
            "percolator_observer_batch_notifications",
            "Notifications handled by one committed observer transaction (a batch, or 1).",
            self.batch_size.clone(),
        );
        r.register(
            "percolator_observer_commit_to_run_seconds",
            "Time from the writer's commit to the commit of the observer run it caused.",
            self.commit_to_run.clone(),
        );
        r.register(
            "percolator_observer_run_duration_seconds",
            "Duration of an observer run, from its transaction's begin to its commit.",
            self.run_duration.clone(),
        );
        let per_worker = [
            (
                "percolator_worker_notifications_found",
                "Notify keys taken by the worker's scans or commit hints.",
                &self.found,
            ),
            (
                "percolator_worker_notifications_hinted",
                "Notify keys dispatched from this process's commit hints (no scan needed).",
                &self.hinted,
            ),
            (
                "percolator_worker_notify_keys_scanned",
                "Keys read by the worker's scans of the notify space.",
                &self.scanned,
            ),
        ];
        for (name, help, family) in per_worker {
            r.register(name, help, family.clone());
        }
        r.register(
            "percolator_worker_backlog_notifications",
            "Notifications waiting in the worker's share, per observed column, as its last full scan pass found them.",
            self.backlog.clone(),
        );
        r.register_collector(Box::new(percolator_metrics::Sampled::counter(
            "percolator_observer_late_changes",
            "Timed changes delivered late (event time below their column's low watermark), per column: observers::time.",
            || {
                crate::time::late_changes()
                    .into_iter()
                    .map(|(c, n)| (vec![("column".to_string(), c.to_string())], n))
                    .collect()
            },
        )));
        r.register(
            "percolator_worker_backlog_oldest_age_seconds",
            "Age of the oldest notification waiting in the worker's share, per observed column (0: none), at its last full scan pass.",
            self.oldest_age.clone(),
        );
    }
}

/// A worker's families with its own labels.
#[derive(Debug)]
pub(crate) struct Telemetry {
    pub(crate) families: WorkerMetrics,
    namespace: String,
    worker: WorkerLabels,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry::new(WorkerMetrics::new(), String::new(), String::new())
    }
}

impl Telemetry {
    pub(crate) fn new(families: WorkerMetrics, namespace: String, worker: String) -> Self {
        Telemetry {
            families,
            worker: WorkerLabels {
                namespace: namespace.clone(),
                worker,
            },
            namespace,
        }
    }

    /// The labels of `observer`'s series for `cell`'s column.
    pub(crate) fn observer(&self, cell: &Cell, observer: &str) -> ObserverLabels {
        ObserverLabels {
            namespace: self.namespace.clone(),
            table: String::from_utf8_lossy(&cell.table).into_owned(),
            column: String::from_utf8_lossy(&cell.column).into_owned(),
            observer: observer.to_string(),
        }
    }

    /// Creates the counters of this worker and of every observer of `columns` (table,
    /// column, observer) at zero, so that they are exported (and `rate()` works) before
    /// their first event.
    pub(crate) fn init(&self, columns: &[(Vec<u8>, Vec<u8>, String)]) {
        let f = &self.families;
        for family in [&f.found, &f.hinted, &f.scanned] {
            let _ = family.get_or_create(&self.worker);
        }
        for (table, column, observer) in columns {
            let labels = ObserverLabels {
                namespace: self.namespace.clone(),
                table: String::from_utf8_lossy(table).into_owned(),
                column: String::from_utf8_lossy(column).into_owned(),
                observer: observer.clone(),
            };
            for family in [
                &f.runs,
                &f.duplicates,
                &f.failures,
                &f.dead_letters,
                &f.conflicts,
                &f.retries,
                &f.rolled_back,
                &f.splits,
            ] {
                let _ = family.get_or_create(&labels);
            }
        }
    }

    /// The labels of this worker's series.
    pub(crate) fn worker(&self) -> &WorkerLabels {
        &self.worker
    }

    /// The labels of this worker's backlog gauges of a column.
    pub(crate) fn column(&self, table: &[u8], column: &[u8]) -> ColumnLabels {
        ColumnLabels {
            namespace: self.namespace.clone(),
            table: String::from_utf8_lossy(table).into_owned(),
            column: String::from_utf8_lossy(column).into_owned(),
            worker: self.worker.worker.clone(),
        }
    }
}
