//! Photon's metrics: the generic families of the application layer ([`app::metrics`]: worker
//! and observer series, the loader's, the GC's, all `percolator_*`) and Photon's own, read at
//! each scrape from their counters: the join's statistics per pipeline (`photon_*_total`,
//! labelled with `namespace` and `pipeline`) and the GC of Photon's own spaces
//! (`photon_gc_*_total`). Served on `--metrics-addr` by [`app::metrics::spawn`];
//! docs/metrics.md lists every metric.

use crate::join::JoinStats;
use crate::maintenance::GcMetrics;
use app::metrics::{labels, namespace_counters, CounterRow, Metrics, Sampled};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

fn get(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Registers Photon's own families in `metrics`: the join statistics of `pipelines` (name,
/// statistics) and, with `gc`, the periodic GC's counters (the version GC's as
/// `percolator_gc_*`, Photon's spaces' as `photon_gc_*`), all labelled with `namespace`.
pub fn register(
    metrics: &Metrics,
    namespace: &str,
    pipelines: &[(String, Arc<JoinStats>)],
    gc: Option<Arc<GcMetrics>>,
) {
    type Read = fn(&JoinStats) -> u64;
    let join: [(&str, &str, Read); 7] = [
        ("photon_joined", "Clicks joined (attempts).", |s| {
            get(&s.joined)
        }),
        (
            "photon_wasted_joins",
            "Runs that found the click already registered by a join of the same delivery.",
            |s| get(&s.wasted),
        ),
        (
            "photon_deduplicated",
            "Runs on a duplicate delivery of an already joined click (rejected by the IdRegistry).",
            |s| get(&s.deduplicated),
        ),
        (
            "photon_settled_again",
            "Runs on a click already settled without a join (expired, filtered, too old).",
            |s| get(&s.settled),
        ),
        (
            "photon_parked",
            "Clicks parked waiting for their query.",
            |s| get(&s.parked),
        ),
        ("photon_expired", "Clicks past the horizon.", |s| {
            get(&s.expired)
        }),
        (
            "photon_too_old",
            "Clicks older than the IdRegistry boundary.",
            |s| get(&s.too_old),
        ),
    ];
    let families = join.map(|(name, help, read)| {
        let (pipelines, namespace) = (pipelines.to_vec(), namespace.to_string());
        Sampled::counter(name, help, move || {
            pipelines
                .iter()
                .map(|(p, s)| (labels(&namespace, &[("pipeline", p.as_str())]), read(s)))
                .collect()
        })
    });
    metrics.register_sampled(families);
    let Some(gc) = gc else { return };
    app::metrics::register_gc(metrics, namespace, gc.clone());
    let own: [CounterRow<GcMetrics>; 3] = [
        (
            "photon_gc_registry_keys_deleted",
            "IdRegistry keys deleted behind the boundary.",
            |g| get(&g.registry_keys_deleted),
        ),
        (
            "photon_gc_registry_entries_deferred",
            "IdRegistry entries behind the boundary kept for a later pass (their transactions \
             not resolved by GC yet), counted once per pass.",
            |g| get(&g.registry_entries_deferred),
        ),
        (
            "photon_gc_parked_keys_deleted",
            "Keys of handled parked-click index cells deleted.",
            |g| get(&g.parked_keys_deleted),
        ),
    ];
    metrics.register_sampled(namespace_counters(namespace, gc, |g| g, own));
}
