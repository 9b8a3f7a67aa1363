//! `/metrics`: the gauges of `status --json` in the Prometheus text format (version 0.0.4).
//!
//! Every figure is read from the store at the scrape, so a scrape of the dashboard sees what
//! `percolator-ctl status` would print. Names follow Prometheus conventions (base units,
//! `_seconds`, `_total` for counters); every series carries the application's `namespace`.

use serde_json::Value;
use std::fmt::Write;

/// Escapes a label value (backslash, double quote, newline).
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Accumulates metric families, each with its HELP and TYPE lines once.
struct Families {
    out: String,
    namespace: String,
}

impl Families {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        let mut l = format!("namespace=\"{}\"", label(&self.namespace));
        for (k, v) in labels {
            let _ = write!(l, ",{k}=\"{}\"", label(v));
        }
        let _ = writeln!(self.out, "{name}{{{l}}} {value}");
    }

    fn single(&mut self, name: &str, kind: &str, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap_or(0.0)
}

/// The Prometheus text of a `status --json` document.
pub fn render(status: &Value) -> String {
    let mut m = Families {
        out: String::new(),
        namespace: status["namespace"].as_str().unwrap_or("").to_string(),
    };
    let workers = status["workers"].as_array().cloned().unwrap_or_default();
    let live = workers.iter().filter(|w| w["live"] == true).count();
    m.family(
        "percolator_workers",
        "gauge",
        "Records of the worker registry, by state (live: heartbeat within the liveness horizon).",
    );
    m.sample("percolator_workers", &[("state", "live")], live as f64);
    m.sample(
        "percolator_workers",
        &[("state", "dead")],
        (workers.len() - live) as f64,
    );
    m.family(
        "percolator_worker_heartbeat_age_seconds",
        "gauge",
        "Time since the worker's last heartbeat (oracle time).",
    );
    for w in &workers {
        let id = w["id"].as_str().unwrap_or("?");
        m.sample(
            "percolator_worker_heartbeat_age_seconds",
            &[("worker", id)],
            f(&w["heartbeat_age_ms"]) / 1000.0,
        );
    }
    m.family(
        "percolator_worker_handled_total",
        "counter",
        "Notifications the worker has handled since it started, as it publishes with its heartbeat.",
    );
    for w in &workers {
        if let Some(n) = w["handled"].as_u64() {
            let id = w["id"].as_str().unwrap_or("?");
            m.sample(
                "percolator_worker_handled_total",
                &[("worker", id)],
                n as f64,
            );
        }
    }
    let columns = status["backlog"]["columns"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    m.family(
        "percolator_backlog_notifications",
        "gauge",
        "Notifications waiting per observed column.",
    );
    for c in &columns {
        let (t, col) = (
            c["table"].as_str().unwrap_or("?"),
            c["column"].as_str().unwrap_or("?"),
        );
        m.sample(
            "percolator_backlog_notifications",
            &[("table", t), ("column", col)],
            f(&c["count"]),
        );
    }
    m.family(
        "percolator_backlog_oldest_age_seconds",
        "gauge",
        "Age of the oldest notification waiting per observed column (oracle time).",
    );
    for c in &columns {
        let (t, col) = (
            c["table"].as_str().unwrap_or("?"),
            c["column"].as_str().unwrap_or("?"),
        );
        m.sample(
            "percolator_backlog_oldest_age_seconds",
            &[("table", t), ("column", col)],
            f(&c["oldest_age_ms"]) / 1000.0,
        );
    }
    m.single(
        "percolator_dead_letters",
        "gauge",
        "Notifications whose observer failed too often, waiting for an operator.",
        f(&status["dead_letters"]),
    );
    m.single(
        "percolator_locks",
        "gauge",
        "Locks held on cells.",
        f(&status["locks"]["total"]),
    );
    m.single(
        "percolator_locks_expired",
        "gauge",
        "Locks older than their TTL (left by crashed writers until resolved).",
        status["locks"]["expired"]
            .as_array()
            .map_or(0.0, |a| a.len() as f64),
    );
    // The safe point is a hybrid timestamp; its physical part is Unix milliseconds.
    let safe_point = status["gc_safe_point"].as_u64().unwrap_or(0);
    m.single(
        "percolator_gc_safe_point_seconds",
        "gauge",
        "The GC safe point as Unix time (0: never collected).",
        percolator::Timestamp(safe_point).physical_ms() as f64 / 1000.0,
    );
    let oracle = &status["oracle"];
    if !oracle.is_null() {
        m.single(
            "percolator_oracle_epoch",
            "gauge",
            "Epoch of the oracle's leadership record (grows with each leader change).",
            f(&oracle["epoch"]),
        );
        m.single(
            "percolator_oracle_window_ahead_seconds",
            "gauge",
            "How far the oracle's persisted window reaches ahead of its current time.",
            f(&oracle["window_ahead_ms"]) / 1000.0,
        );
        m.family(
            "percolator_oracle_leader_info",
            "gauge",
            "The oracle leader (1), labelled with its id and address.",
        );
        if let Some(leader) = oracle["leader"].as_object() {
            let id = leader.get("id").and_then(Value::as_str).unwrap_or("?");
            let addr = leader.get("addr").and_then(Value::as_str).unwrap_or("?");
            m.sample(
                "percolator_oracle_leader_info",
                &[("id", id), ("addr", addr)],
                1.0,
            );
        }
    }
    m.out
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
        });
        let text = render(&status);
        for line in [
            "percolator_workers{namespace=\"app\",state=\"live\"} 1",
            "percolator_worker_heartbeat_age_seconds{namespace=\"app\",worker=\"w\\\"1\"} 0.25",
            "percolator_worker_handled_total{namespace=\"app\",worker=\"w\\\"1\"} 42",
            "percolator_backlog_notifications{namespace=\"app\",table=\"docs\",column=\"body\"} 3",
            "percolator_backlog_oldest_age_seconds{namespace=\"app\",table=\"docs\",column=\"body\"} 1.5",
            "percolator_dead_letters{namespace=\"app\"} 1",
            "percolator_locks_expired{namespace=\"app\"} 1",
            "percolator_oracle_leader_info{namespace=\"app\",id=\"ab\",addr=\"127.0.0.1:7707\"} 1",
            "# TYPE percolator_worker_handled_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
    }
}
