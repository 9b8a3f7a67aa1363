//! A minimal HTTP endpoint serving counters in the Prometheus text format.

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
