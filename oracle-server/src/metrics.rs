//! The oracle's metrics (`oracle serve --metrics-addr`): the server's counters
//! ([`oracle::ServerStats`]) as `percolator_oracle_*` families read at each scrape, labelled
//! with the oracle record's `namespace`. docs/metrics.md lists every metric.

use oracle::ServerStats;
use percolator_metrics::{labels, Metrics, Sampled};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// Registers the families of a server's `stats` in `metrics`.
pub fn register(metrics: &Metrics, namespace: &str, stats: Arc<ServerStats>) {
    let ns = namespace.to_string();
    let counter = |name: &str, help: &str, read: fn(&ServerStats) -> u64| {
        let (stats, ns) = (stats.clone(), ns.clone());
        Sampled::counter(name, help, move || vec![(labels(&ns, &[]), read(&stats))])
    };
    let changes = {
        let (stats, ns) = (stats.clone(), ns.clone());
        Sampled::counter(
            "percolator_oracle_leader_changes",
            "Leadership changes of this replica: took over as leader, or stepped down.",
            move || {
                vec![
                    (
                        labels(&ns, &[("change", "took_over")]),
                        stats.took_over.load(Ordering::Relaxed),
                    ),
                    (
                        labels(&ns, &[("change", "stepped_down")]),
                        stats.stepped_down.load(Ordering::Relaxed),
                    ),
                ]
            },
        )
    };
    let leader = {
        let (stats, ns) = (stats.clone(), ns.clone());
        Sampled::gauge(
            "percolator_oracle_leader",
            "1 while this replica leads (took over more often than it stepped down), else 0.",
            move || {
                let took = stats.took_over.load(Ordering::Relaxed);
                let stepped = stats.stepped_down.load(Ordering::Relaxed);
                vec![(labels(&ns, &[]), if took > stepped { 1.0 } else { 0.0 })]
            },
        )
    };
    metrics.register_sampled([
        counter(
            "percolator_oracle_timestamps_served",
            "Timestamps handed out by this replica.",
            |s| s.timestamps_served.load(Ordering::Relaxed),
        ),
        counter(
            "percolator_oracle_requests_served",
            "Timestamp requests this replica answered with timestamps.",
            |s| s.requests_served.load(Ordering::Relaxed),
        ),
        counter(
            "percolator_oracle_not_leader_replies",
            "Requests this replica answered with \"not leader\" (clients follow to the leader).",
            |s| s.not_leader_replies.load(Ordering::Relaxed),
        ),
        changes,
        leader,
    ]);
}
