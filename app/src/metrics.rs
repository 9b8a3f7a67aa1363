//! Metrics in the Prometheus text format: counters and gauges appended to a page
//! ([`counter`], [`gauge`]), a worker's counters under an application's prefix
//! ([`worker`]), and a minimal HTTP endpoint serving a page ([`serve`]).
//!
//! Written by hand rather than with a metrics crate: the counters already exist (the
//! worker's snapshot, the application's own atomics), need no registry, and the text format
//! is a few lines.

use observers::MetricsSnapshot;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Renders the current metrics as Prometheus text.
pub type Render = Arc<dyn Fn() -> String + Send + Sync>;

/// Serves `render()` on every request to `addr` until the task is dropped.
pub async fn serve(addr: std::net::SocketAddr, render: Render) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving metrics");
    loop {
        let (mut socket, _) = listener.accept().await?;
        let render = render.clone();
        tokio::spawn(async move {
            let mut buf = [0u8; 2048];
            // Read (and ignore) the request head; any path returns the metrics.
            let _ = tokio::time::timeout(std::time::Duration::from_secs(2), socket.read(&mut buf))
                .await;
            let body = render();
            let response = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain; version=0.0.4\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{}",
                body.len(),
                body
            );
            let _ = socket.write_all(response.as_bytes()).await;
        });
    }
}

/// Spawns [`serve`] on `addr`, logging its failure.
pub fn spawn_serve(addr: std::net::SocketAddr, render: Render) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        if let Err(e) = serve(addr, render).await {
            tracing::error!(%addr, error = %e, "metrics endpoint failed");
        }
    })
}

/// Appends one counter in Prometheus text format.
pub fn counter(out: &mut String, name: &str, help: &str, labels: &str, value: u64) {
    out.push_str(&format!(
        "# HELP {name} {help}\n# TYPE {name} counter\n{name}{{{labels}}} {value}\n"
    ));
}

/// Appends one gauge in Prometheus text format.
pub fn gauge(out: &mut String, name: &str, help: &str, labels: &str, value: f64) {
    out.push_str(&format!(
        "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{{{labels}}} {value}\n"
    ));
}

/// Appends a worker's counters and latencies as `<prefix>_observer_runs_total` and so on,
/// each with `labels` (e.g. `pipeline="A"`).
pub fn worker(out: &mut String, prefix: &str, labels: &str, m: &MetricsSnapshot) {
    let counters: [(&str, &str, u64); 8] = [
        (
            "notifications_found_total",
            "Notify keys found by scans or commit hints",
            m.found,
        ),
        (
            "notifications_hinted_total",
            "Notify keys dispatched from in-process commit hints",
            m.hinted,
        ),
        (
            "notify_keys_scanned_total",
            "Keys read by scans of the notify space",
            m.scanned,
        ),
        (
            "observer_runs_total",
            "Observer runs committed",
            m.processed,
        ),
        (
            "duplicate_runs_total",
            "Notifications already covered by the acknowledgment",
            m.duplicates,
        ),
        (
            "conflicts_total",
            "Observer transaction conflicts",
            m.conflicts,
        ),
        ("failures_total", "Observer failures", m.failures),
        (
            "dead_lettered_total",
            "Notifications dead-lettered",
            m.dead_lettered,
        ),
    ];
    for (name, help, value) in counters {
        counter(out, &format!("{prefix}_{name}"), help, labels, value);
    }
    let latencies = [
        (
            "observer_latency_p50_seconds",
            "Observer run latency, median",
            m.latency_p50,
        ),
        (
            "observer_latency_p99_seconds",
            "Observer run latency, 99th percentile",
            m.latency_p99,
        ),
    ];
    for (name, help, value) in latencies {
        gauge(
            out,
            &format!("{prefix}_{name}"),
            help,
            labels,
            value.as_secs_f64(),
        );
    }
}
