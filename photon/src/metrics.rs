//! The pipelines' metrics in the Prometheus text format ([`render`]): each worker's counters
//! ([`app::metrics::worker`], named `photon_*`) and the join's statistics, labelled with
//! their pipeline. Served by [`app::metrics::serve`].

pub use app::metrics::{counter, gauge, serve, Render};

use crate::join::JoinStats;
use crate::pipeline::Pipeline;
use observers::Metrics;
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// The counters and latencies of `pipelines` (worker metrics and join statistics) in the
/// Prometheus text format, each labelled with its pipeline.
pub fn render(pipelines: &[Pipeline]) -> String {
    let workers: Vec<_> = pipelines
        .iter()
        .map(|p| (p.name.clone(), p.worker.metrics()))
        .collect();
    let joins: Vec<_> = pipelines.iter().map(|p| p.stats.clone()).collect();
    render_parts(&workers, &joins)
}

/// [`render`] from the pipelines' parts: (name, worker metrics) and join statistics, in the
/// same order (what a metrics endpoint keeps, without the pipelines themselves).
pub fn render_parts(workers: &[(String, Arc<Metrics>)], joins: &[Arc<JoinStats>]) -> String {
    let mut out = String::new();
    for ((name, metrics), s) in workers.iter().zip(joins) {
        let l = format!("pipeline=\"{name}\"");
        app::metrics::worker(&mut out, "photon", &l, &metrics.snapshot());
        let join: [(&str, &str, &std::sync::atomic::AtomicU64); 7] = [
            ("photon_joined_total", "Clicks joined (attempts)", &s.joined),
            (
                "photon_wasted_joins_total",
                "Runs that found the click already registered by a join of the same delivery",
                &s.wasted,
            ),
            (
                "photon_deduplicated_total",
                "Runs on a duplicate delivery of an already joined click (rejected by the IdRegistry)",
                &s.deduplicated,
            ),
            (
                "photon_settled_again_total",
                "Runs on a click already settled without a join (expired, filtered, too old)",
                &s.settled,
            ),
            ("photon_parked_total", "Clicks parked waiting for their query", &s.parked),
            ("photon_expired_total", "Clicks past the horizon", &s.expired),
            ("photon_too_old_total", "Clicks older than the IdRegistry boundary", &s.too_old),
        ];
        for (name, help, value) in join {
            counter(&mut out, name, help, &l, value.load(Ordering::Relaxed));
        }
    }
    out
}
