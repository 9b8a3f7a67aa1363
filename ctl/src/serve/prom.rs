//! `/metrics`: the gauges of `status --json` as Prometheus metrics (OpenMetrics text, through
//! prometheus-client like every binary's; see `percolator-metrics`).
//!
//! Every figure is read from the store at the scrape, so a scrape of the dashboard sees what
//! `percolator-ctl status` would print. Names follow Prometheus conventions (base units,
//! `_seconds`, `_total` for counters); every series carries the application's `namespace`.
//! These are the store-wide views (all workers, all columns); each worker's own series
//! (`percolator_observer_*`, `percolator_worker_*`) come from its `--metrics-addr`.
//! docs/metrics.md lists every metric.

use percolator_metrics::prometheus_client::registry::Registry;
use percolator_metrics::{labels, Labels, Sampled};
use serde_json::Value;

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// Families whose samples are all known when the scrape comes.
struct Families {
    registry: Registry,
    namespace: String,
}

impl Families {
    fn labels(&self, more: &[(&str, &str)]) -> Labels {
        labels(&self.namespace, more)
    }

    fn gauge(&mut self, name: &str, help: &str, samples: Vec<(Labels, f64)>) {
        self.registry
            .register_collector(Box::new(Sampled::gauge(name, help, move || {
                samples.clone()
            })));
    }

    fn counter(&mut self, name: &str, help: &str, samples: Vec<(Labels, u64)>) {
        self.registry
            .register_collector(Box::new(Sampled::counter(name, help, move || {
                samples.clone()
            })));
    }

    fn single(&mut self, name: &str, help: &str, value: f64) {
        let samples = vec![(self.labels(&[]), value)];
        self.gauge(name, help, samples);
    }
}

/// The metrics text of a `status --json` document.
pub fn render(status: &Value) -> String {
    let mut m = Families {
        registry: Registry::default(),
        namespace: status["namespace"].as_str().unwrap_or("").to_string(),
    };
    let workers = status["workers"].as_array().cloned().unwrap_or_default();
    let live = workers.iter().filter(|w| w["live"] == true).count();
    let states = vec![
        (m.labels(&[("state", "live")]), live as f64),
        (
            m.labels(&[("state", "dead")]),
            (workers.len() - live) as f64,
        ),
    ];
    m.gauge(
        "percolator_workers",
        "Records of the worker registry, by state (live: heartbeat within the liveness horizon).",
        states,
    );
    let ages = workers
        .iter()
        .map(|w| {
            let id = w["id"].as_str().unwrap_or("?");
            (
                m.labels(&[("worker", id)]),
                f(&w["heartbeat_age_ms"]) / 1000.0,
            )
        })
        .collect();
    m.gauge(
        "percolator_worker_heartbeat_age_seconds",
        "Time since the worker's last heartbeat (oracle time).",
        ages,
    );
    let handled = workers
        .iter()
        .filter_map(|w| {
            let n = w["handled"].as_u64()?;
            Some((m.labels(&[("worker", w["id"].as_str().unwrap_or("?"))]), n))
        })
        .collect();
    m.counter(
        "percolator_worker_handled",
        "Notifications the worker has handled since it started, as it publishes with its heartbeat.",
        handled,
    );
    let columns = status["backlog"]["columns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let per_column = |m: &Families, key: &str, scale: f64| -> Vec<(Labels, f64)> {
        columns
            .iter()
            .map(|c| {
                let table = c["table"].as_str().unwrap_or("?");
                let column = c["column"].as_str().unwrap_or("?");
                let labels = m.labels(&[("table", table), ("column", column)]);
                (labels, f(&c[key]) / scale)
            })
            .collect()
    };
    let counts = per_column(&m, "count", 1.0);
    m.gauge(
        "percolator_backlog_notifications",
        "Notifications waiting per observed column (all workers' shares).",
        counts,
    );
    let oldest = per_column(&m, "oldest_age_ms", 1000.0);
    m.gauge(
        "percolator_backlog_oldest_age_seconds",
        "Age of the oldest notification waiting per observed column (oracle time).",
        oldest,
    );
    let timed = status["event_time"].as_array().cloned().unwrap_or_default();
    let lags: Vec<(Labels, f64)> = timed
        .iter()
        .filter_map(|c| {
            let lag = c["lag_ms"].as_i64()?;
            let column = c["column"].as_str().unwrap_or("?");
            Some((m.labels(&[("column", column)]), lag as f64 / 1000.0))
        })
        .collect();
    m.gauge(
        "percolator_watermark_lag_seconds",
        "How far a timed column's published low watermark lags the oracle (observers::time; absent at the end of input).",
        lags,
    );
    let pending: Vec<(Labels, f64)> = timed
        .iter()
        .map(|c| {
            let column = c["column"].as_str().unwrap_or("?");
            (m.labels(&[("column", column)]), f(&c["pending"]))
        })
        .collect();
    m.gauge(
        "percolator_watermark_pending_changes",
        "Cells of a timed column with a change its observer has not taken yet (they hold its watermark).",
        pending,
    );
    let timers: Vec<(Labels, f64)> = status["timers"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|t| {
            let observer = t["observer"].as_str().unwrap_or("?");
            [
                (
                    m.labels(&[("observer", observer), ("kind", "event_time")]),
                    f(&t["event_time"]),
                ),
                (
                    m.labels(&[("observer", observer), ("kind", "oracle_time")]),
                    f(&t["oracle_time"]),
                ),
            ]
        })
        .collect();
    m.gauge(
        "percolator_timers_pending",
        "Timers set and not fired yet, per observer and kind (observers::time).",
        timers,
    );
    m.single(
        "percolator_dead_letters",
        "Notifications whose observer failed too often, waiting for an operator.",
        f(&status["dead_letters"]),
    );
    m.single(
        "percolator_locks",
        "Locks held on cells.",
        f(&status["locks"]["total"]),
    );
    m.single(
        "percolator_locks_expired",
        "Locks older than their TTL (left by crashed writers until resolved).",
        status["locks"]["expired"]
            .as_array()
            .map_or(0.0, |a| a.len() as f64),
    );
    // The safe point is a hybrid timestamp; its physical part is Unix milliseconds.
    let safe_point = status["gc_safe_point"].as_u64().unwrap_or(0);
    m.single(
        "percolator_gc_safe_point_timestamp_seconds",
        "The namespace's published GC safe point as Unix time (0: never collected).",
        percolator::Timestamp(safe_point).physical_ms() as f64 / 1000.0,
    );
    let oracle = &status["oracle"];
    if !oracle.is_null() {
        m.single(
            "percolator_oracle_epoch",
            "Epoch of the oracle's leadership record (grows with each leader change).",
            f(&oracle["epoch"]),
        );
        m.single(
            "percolator_oracle_window_ahead_seconds",
            "How far the oracle's persisted window reaches ahead of its current time.",
            f(&oracle["window_ahead_ms"]) / 1000.0,
        );
        let leader = oracle["leader"]
            .as_object()
            .map(|leader| {
                let id = leader.get("id").and_then(Value::as_str).unwrap_or("?");
                let addr = leader.get("addr").and_then(Value::as_str).unwrap_or("?");
                vec![(m.labels(&[("id", id), ("addr", addr)]), 1.0)]
            })
            .unwrap_or_default();
        m.gauge(
            "percolator_oracle_leader_info",
            "The oracle leader (1), labelled with its id and address.",
            leader,
        );
    }
    percolator_metrics::encode_registry(&m.registry)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_the_status_gauges_with_escaped_labels() {
        let status = json!({
            "namespace": "app",
            "workers": [{"id": "w\"1", "live": true, "heartbeat_age_ms": 250, "handled": 42}],
            "backlog": {"total": 3, "columns": [{"table": "docs", "column": "body", "count": 3, "oldest_age_ms": 1500}]},
            "dead_letters": 1,
            "locks": {"total": 2, "expired": [{}]},
            "gc_safe_point": 0,
            "oracle": {"epoch": 4, "window_ahead_ms": 2000, "leader": {"id": "ab", "addr": "127.0.0.1:7707"}},
            "event_time": [
                {"column": "clicks/event", "watermark_ms": 1000, "lag_ms": 2500, "sources": [], "pending": 7},
                {"column": "done/event", "watermark_ms": u64::MAX, "lag_ms": null, "sources": [], "pending": 0},
            ],
            "timers": [{"observer": "windows", "event_time": 3, "oracle_time": 1}],
        });
        let text = render(&status);
        assert!(
            !text.contains(
                "percolator_watermark_lag_seconds{namespace=\"app\",column=\"done/event\"}"
            ),
            "{text}"
        );
        for line in [
            "percolator_watermark_lag_seconds{namespace=\"app\",column=\"clicks/event\"} 2.5",
            "percolator_watermark_pending_changes{namespace=\"app\",column=\"clicks/event\"} 7.0",
            "percolator_timers_pending{namespace=\"app\",observer=\"windows\",kind=\"event_time\"} 3.0",
            "percolator_timers_pending{namespace=\"app\",observer=\"windows\",kind=\"oracle_time\"} 1.0",
            "percolator_workers{namespace=\"app\",state=\"live\"} 1.0",
            "percolator_worker_heartbeat_age_seconds{namespace=\"app\",worker=\"w\\\"1\"} 0.25",
            "percolator_worker_handled_total{namespace=\"app\",worker=\"w\\\"1\"} 42",
            "percolator_backlog_notifications{namespace=\"app\",table=\"docs\",column=\"body\"} 3.0",
            "percolator_backlog_oldest_age_seconds{namespace=\"app\",table=\"docs\",column=\"body\"} 1.5",
            "percolator_dead_letters{namespace=\"app\"} 1.0",
            "percolator_locks_expired{namespace=\"app\"} 1.0",
            "percolator_oracle_leader_info{namespace=\"app\",id=\"ab\",addr=\"127.0.0.1:7707\"} 1.0",
            "# TYPE percolator_worker_handled counter",
            "# EOF",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
