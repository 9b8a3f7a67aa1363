//! Metrics of an application process: the registry and `/metrics` endpoint of
//! `percolator-metrics` ([`Metrics`], [`spawn`]), the worker and observer families of
//! `observers::telemetry`, and the families of this crate's parts, read at each scrape from
//! their counters: the loader's ([`register_loader`], `percolator_loader_*`) and the periodic
//! GC's ([`register_gc`], `percolator_gc_*`). Every series carries the application's
//! `namespace`. docs/metrics.md lists every metric.

use crate::gc::GcMetrics;
use crate::load::LoadStats;
pub use observers::telemetry::WorkerMetrics;
pub use percolator_metrics::{labels, spawn, Metrics, MetricsError, Render, Sampled};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// One counter of a [`namespace_counters`] table: name, help, and how to read it from `T`.
pub type CounterRow<T> = (&'static str, &'static str, fn(&T) -> u64);

/// Counter families read from `source` at each scrape (through `view`), one series each,
/// labelled with `namespace`: one per row of `table`.
pub fn namespace_counters<S, T>(
    namespace: &str,
    source: Arc<S>,
    view: fn(&S) -> &T,
    table: impl IntoIterator<Item = CounterRow<T>>,
) -> Vec<Sampled>
where
    S: Send + Sync + 'static,
    T: 'static,
{
    table
        .into_iter()
        .map(|(name, help, read)| {
            let (source, namespace) = (source.clone(), namespace.to_string());
            Sampled::counter(name, help, move || {
                vec![(labels(&namespace, &[]), read(view(&source)))]
            })
        })
        .collect()
}

/// Registers the counters of the process's listener for relayed hints (labelled with the
/// `namespace` of its workers) in `metrics`: datagrams refused and dropped.
pub fn register_hint_listener(
    metrics: &Metrics,
    namespace: &str,
    listener: Arc<observers::HintListener>,
) {
    let counters: [CounterRow<observers::HintListener>; 2] = [
        (
            "percolator_hint_datagrams_malformed",
            "Datagrams received on the hint listener that were not relayed hints of this version.",
            |l| l.malformed(),
        ),
        (
            "percolator_hint_datagrams_dropped",
            "Relayed-hint datagrams dropped: no worker of their namespace in this process, or its queue full (their keys are found by scanning).",
            |l| l.dropped(),
        ),
    ];
    metrics.register_sampled(namespace_counters(namespace, listener, |l| l, counters));
}

/// Registers the loader's counters (`stats`, labelled with `namespace`) in `metrics`.
pub fn register_loader(metrics: &Metrics, namespace: &str, stats: Arc<LoadStats>) {
    let counters: [CounterRow<LoadStats>; 9] = [
        (
            "percolator_loader_lines",
            "Input lines behind the loader's committed batches (records, rejects and blanks).",
            |s| get(&s.lines),
        ),
        (
            "percolator_loader_records",
            "Records the loader wrote.",
            |s| get(&s.loaded),
        ),
        (
            "percolator_loader_rejects",
            "Input lines the loader rejected (malformed), reported to the rejects file.",
            |s| get(&s.rejected),
        ),
        (
            "percolator_loader_batches",
            "Loader transactions committed (each with its source's offset).",
            |s| get(&s.batches),
        ),
        (
            "percolator_loader_backpressure_waits",
            "Loader batches that waited for the notification backlog to fall below its bound.",
            |s| get(&s.backlog_waits),
        ),
        (
            "percolator_loader_unreadable_sources",
            "Input sources (files) the loader could not open.",
            |s| get(&s.unreadable),
        ),
        (
            "percolator_loader_quarantined_sources",
            "Input files quarantined (loaded bytes changed or cut short, taken for another log, \
             read errors): skipped, with their lines after the offset not loaded.",
            |s| get(&s.quarantined),
        ),
        (
            "percolator_loader_long_lines",
            "Input lines longer than the line limit, rejected and skipped (also in rejects).",
            |s| get(&s.long_lines),
        ),
        (
            "percolator_loader_nul_bytes_skipped",
            "NUL bytes skipped before lines (holes of copytruncate under a writer without \
             O_APPEND).",
            |s| get(&s.nul_bytes),
        ),
    ];
    metrics.register_sampled(namespace_counters(namespace, stats, |s| s, counters));
}

/// Registers the periodic GC's counters (`gc`, labelled with `namespace`) in `metrics`.
pub fn register_gc<M>(metrics: &Metrics, namespace: &str, gc: Arc<M>)
where
    M: AsRef<GcMetrics> + Send + Sync + 'static,
{
    let counters: [CounterRow<GcMetrics>; 8] = [
        (
            "percolator_gc_passes",
            "Periodic GC passes completed.",
            |g| get(&g.passes),
        ),
        (
            "percolator_gc_skipped",
            "GC periods skipped: another process held the lease.",
            |g| get(&g.skipped),
        ),
        (
            "percolator_gc_failures",
            "GC passes (or lease takes) that failed; retried at the next period.",
            |g| get(&g.failures),
        ),
        (
            "percolator_gc_versions_deleted",
            "Versions deleted by GC.",
            |g| get(&g.versions_deleted),
        ),
        (
            "percolator_gc_heads_tombstoned",
            "Heads shrunk to tombstones by GC.",
            |g| get(&g.heads_tombstoned),
        ),
        (
            "percolator_gc_locks_resolved",
            "Locks resolved by GC.",
            |g| get(&g.locks_resolved),
        ),
        (
            "percolator_gc_records_resolved",
            "Pending write-once records GC rewrote as committed or deleted as rolled back.",
            |g| get(&g.records_resolved),
        ),
        (
            "percolator_gc_records_deleted",
            "Write-once records GC deleted under a newer committed write.",
            |g| get(&g.records_deleted),
        ),
    ];
    let mut families = namespace_counters(namespace, gc.clone(), M::as_ref, counters);
    let gauge = |name: &'static str, help: &'static str, ms_of: fn(&GcMetrics) -> u64| {
        let (gc, namespace) = (gc.clone(), namespace.to_string());
        Sampled::gauge(name, help, move || {
            let ms = ms_of((*gc).as_ref());
            vec![(labels(&namespace, &[]), ms as f64 / 1000.0)]
        })
    };
    families.push(gauge(
        "percolator_gc_safe_point_timestamp_seconds",
        "Safe point of this process's last GC pass, as Unix time (0: none yet).",
        |g| get(&g.last_safe_point_ms),
    ));
    families.push(gauge(
        "percolator_gc_last_pass_seconds",
        "How long this process's last version GC pass took (0: none yet); it grows with \
         the history kept, and a pass longer than the period means GC falls behind.",
        |g| get(&g.last_pass_ms),
    ));
    metrics.register_sampled(families);
}
