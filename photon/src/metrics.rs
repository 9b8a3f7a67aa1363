//! The pipelines' metrics in the Prometheus text format ([`render`]), and a minimal HTTP
//! endpoint serving them ([`serve`]).
//!
//! Written by hand rather than with a metrics crate: a dozen counters and two gauges per
//! pipeline, read from counters that already exist (the worker's snapshot, [`JoinStats`]),
//! need no registry, and the text format is a few lines.
//!
//! [`JoinStats`]: crate::join::JoinStats

use crate::pipeline::Pipeline;
use std::sync::atomic::Ordering;
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

/// The counters and latencies of `pipelines` (worker metrics and join statistics) in the
/// Prometheus text format, each labelled with its pipeline.
pub fn render(pipelines: &[Pipeline]) -> String {
    let mut out = String::new();
    for p in pipelines {
        let l = format!("pipeline=\"{}\"", p.name);
        let m = p.worker.metrics().snapshot();
        counter(
            &mut out,
            "photon_notifications_found_total",
            "Notify keys found by scans or commit hints",
            &l,
            m.found,
        );
        counter(
            &mut out,
            "photon_notifications_hinted_total",
            "Notify keys dispatched from in-process commit hints",
            &l,
            m.hinted,
        );
        counter(
            &mut out,
            "photon_notify_keys_scanned_total",
            "Keys read by scans of the notify space",
            &l,
            m.scanned,
        );
        counter(
            &mut out,
            "photon_observer_runs_total",
            "Observer runs committed",
            &l,
            m.processed,
        );
        counter(
            &mut out,
            "photon_duplicate_runs_total",
            "Notifications already covered by the acknowledgment",
            &l,
            m.duplicates,
        );
        counter(
            &mut out,
            "photon_conflicts_total",
            "Observer transaction conflicts",
            &l,
            m.conflicts,
        );
        counter(
            &mut out,
            "photon_failures_total",
            "Observer failures",
            &l,
            m.failures,
        );
        counter(
            &mut out,
            "photon_dead_lettered_total",
            "Notifications dead-lettered",
            &l,
            m.dead_lettered,
        );
        gauge(
            &mut out,
            "photon_observer_latency_p50_seconds",
            "Observer run latency, median",
            &l,
            m.latency_p50.as_secs_f64(),
        );
        gauge(
            &mut out,
            "photon_observer_latency_p99_seconds",
            "Observer run latency, 99th percentile",
            &l,
            m.latency_p99.as_secs_f64(),
        );
        let s = &p.stats;
        counter(
            &mut out,
            "photon_joined_total",
            "Clicks joined (attempts)",
            &l,
            s.joined.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_wasted_joins_total",
            "Runs that found the click already registered by a join of the same delivery",
            &l,
            s.wasted.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_deduplicated_total",
            "Runs on a duplicate delivery of an already joined click (rejected by the IdRegistry)",
            &l,
            s.deduplicated.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_parked_total",
            "Clicks parked waiting for their query",
            &l,
            s.parked.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_expired_total",
            "Clicks past the horizon",
            &l,
            s.expired.load(Ordering::Relaxed),
        );
        counter(
            &mut out,
            "photon_too_old_total",
            "Clicks older than the IdRegistry boundary",
            &l,
            s.too_old.load(Ordering::Relaxed),
        );
    }
    out
}
