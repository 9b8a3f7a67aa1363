//! Prometheus metrics of the project's binaries: one [`Metrics`] registry per process, the
//! text a scrape reads ([`Metrics::encode`]), and the `/metrics` endpoint every long-running
//! binary serves on `--metrics-addr` ([`spawn`], [`router`]).
//!
//! The metric families themselves live with the code they count: the worker's and the
//! observers' in `observers::telemetry`, the loader's and GC's in `app::telemetry`, the
//! oracle's in `oracle::telemetry`, minitikv's in `minitikv`, the dashboard's status gauges in
//! `percolator_ctl::serve::prom`. Each registers its families once into the process's
//! [`Metrics`] and keeps clones of them (a family is a shared handle) to count into.
//!
//! Conventions (docs/metrics.md lists every metric): names carry their unit in base units
//! (`_seconds`), counters end in `_total` (prometheus-client appends it to a counter's
//! registered name), generic metrics start with `percolator_`, Photon's own with `photon_`;
//! every series carries the application's `namespace` where it has one.
//!
//! Built on `prometheus-client`, the Prometheus project's Rust client (why: see this crate's
//! Cargo.toml); the endpoint on axum 0.6, the HTTP stack the workspace already builds.

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use futures::future::BoxFuture;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};

pub use prometheus_client;
pub use sampled::{labels, Labels, Sampled, Value};

mod sampled;

/// The content type of [`Metrics::encode`]'s text: OpenMetrics 1.0, which Prometheus
/// negotiates and parses (it ends with `# EOF`).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Errors of the metrics endpoint.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MetricsError {
    /// The address could not be bound (in use, not local, no permission).
    #[error("metrics endpoint: cannot listen on {addr}: {source}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// What the operating system said.
        source: std::io::Error,
    },
    /// The HTTP server stopped with an error.
    #[error("metrics endpoint on {addr} failed: {source}")]
    Serve {
        /// The address it listened on.
        addr: SocketAddr,
        /// The server's error.
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

/// The label set of series that belong to one application namespace only.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NamespaceLabels {
    /// The application's key namespace in the store.
    pub namespace: String,
}

impl NamespaceLabels {
    /// The labels of `namespace`.
    pub fn new(namespace: impl Into<String>) -> Self {
        NamespaceLabels {
            namespace: namespace.into(),
        }
    }
}

/// A process's registry of metric families, shared by the parts that register into it and
/// the endpoint that encodes it. Cloning shares it.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    registry: Arc<RwLock<Registry>>,
}

impl Metrics {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers families: `f` gets the registry (once, at start-up; a name registered twice
    /// would be rendered twice).
    pub fn register(&self, f: impl FnOnce(&mut Registry)) {
        let mut registry = self.registry.write().unwrap_or_else(|p| p.into_inner());
        f(&mut registry);
    }

    /// Registers families read at each scrape (see [`Sampled`]).
    pub fn register_sampled(&self, families: impl IntoIterator<Item = Sampled>) {
        self.register(|r| {
            for family in families {
                r.register_collector(Box::new(family));
            }
        });
    }

    /// Every registered family in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let registry = self.registry.read().unwrap_or_else(|p| p.into_inner());
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &registry);
        out
    }

    /// What the endpoint serves for this registry: [`Metrics::encode`] at every scrape.
    pub fn render(&self) -> Render {
        let metrics = self.clone();
        Arc::new(move || {
            let metrics = metrics.clone();
            Box::pin(async move { Ok(metrics.encode()) })
        })
    }
}

/// The text of one scrape, made when the scrape comes (`Err`: a message served with status
/// 503, e.g. a store that could not be read).
pub type Render = Arc<dyn Fn() -> BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// Encodes a registry built for one scrape (the dashboard's status gauges are read from the
/// store at each scrape into a fresh registry).
pub fn encode_registry(registry: &Registry) -> String {
    let mut out = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut out, registry);
    out
}

/// Buckets of latency histograms, in seconds: 1 ms doubling to about 35 minutes.
pub fn latency_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(0.001, 2.0, 22)
}

/// Buckets of size histograms (items per batch): 1 doubling to 1024.
pub fn size_buckets() -> impl Iterator<Item = f64> {
    prometheus_client::metrics::histogram::exponential_buckets(1.0, 2.0, 11)
}

/// The answer to a scrape.
async fn scrape(render: Render) -> axum::response::Response {
    match render().await {
        Ok(text) => ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response(),
        Err(message) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, message).into_response(),
    }
}

/// A router answering `GET /metrics` with `render()`; a binary with its own HTTP server
/// (the dashboard) merges it into its own routes.
pub fn router<S: Clone + Send + Sync + 'static>(render: Render) -> axum::Router<S> {
    axum::Router::new().route("/metrics", get(move || scrape(render.clone())))
}

/// Binds `addr` now (so a bad address fails the start-up) and serves [`router`] on it in a
/// task until the task is aborted or the runtime ends. Returns the bound address (the port
/// chosen, for port 0) and the task. Must be called inside a Tokio runtime.
pub fn spawn(
    addr: SocketAddr,
    render: Render,
) -> Result<(SocketAddr, tokio::task::JoinHandle<()>), MetricsError> {
    let bind = |source| MetricsError::Bind { addr, source };
    let listener = std::net::TcpListener::bind(addr).map_err(bind)?;
    listener.set_nonblocking(true).map_err(bind)?;
    let bound = listener.local_addr().map_err(bind)?;
    let server = axum::Server::from_tcp(listener).map_err(|e| MetricsError::Serve {
        addr: bound,
        source: Box::new(e),
    })?;
    tracing::info!(addr = %bound, "serving metrics on /metrics");
    let task = tokio::spawn(async move {
        let app = router::<()>(render);
        if let Err(e) = server.serve(app.into_make_service()).await {
            tracing::error!(error = %MetricsError::Serve { addr: bound, source: Box::new(e) }, "metrics endpoint stopped");
        }
    });
    Ok((bound, task))
}

#[cfg(test)]
mod tests {
    use super::*;
    use prometheus_client::metrics::counter::Counter;
    use prometheus_client::metrics::family::Family;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn serves_the_registry_on_metrics() {
        let metrics = Metrics::new();
        let runs = Family::<NamespaceLabels, Counter>::default();
        metrics.register(|r| r.register("percolator_test_runs", "Runs.", runs.clone()));
        runs.get_or_create(&NamespaceLabels::new("a\"b")).inc_by(3);
        let (addr, task) = spawn("127.0.0.1:0".parse().unwrap(), metrics.render()).unwrap();
        let mut socket = tokio::net::TcpStream::connect(addr).await.unwrap();
        socket
            .write_all(b"GET /metrics HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = String::new();
        socket.read_to_string(&mut response).await.unwrap();
        task.abort();
        assert!(response.starts_with("HTTP/1.1 200"), "{response}");
        assert!(response.contains(CONTENT_TYPE), "{response}");
        assert!(
            response.contains("# TYPE percolator_test_runs counter\n"),
            "{response}"
        );
        assert!(
            response.contains("percolator_test_runs_total{namespace=\"a\\\"b\"} 3\n"),
            "{response}"
        );
    }

    #[test]
    fn sampled_families_read_their_values_at_each_scrape() {
        let metrics = Metrics::new();
        let n = Arc::new(std::sync::atomic::AtomicU64::new(1));
        let read = n.clone();
        metrics.register_sampled([
            Sampled::counter("percolator_test_lines", "Lines.", move || {
                vec![(
                    labels("ns", &[("source", "s")]),
                    read.load(std::sync::atomic::Ordering::Relaxed),
                )]
            }),
            Sampled::gauge("percolator_test_age_seconds", "Age.", || {
                vec![(labels("ns", &[]), 1.5)]
            }),
        ]);
        n.store(7, std::sync::atomic::Ordering::Relaxed);
        let text = metrics.encode();
        assert!(
            text.contains("# TYPE percolator_test_lines counter\n"),
            "{text}"
        );
        assert!(
            text.contains("percolator_test_lines_total{namespace=\"ns\",source=\"s\"} 7\n"),
            "{text}"
        );
        assert!(
            text.contains("percolator_test_age_seconds{namespace=\"ns\"} 1.5\n"),
            "{text}"
        );
    }

    #[test]
    fn a_taken_port_is_a_bind_error() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = taken.local_addr().unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _guard = rt.enter();
        let err = spawn(addr, Metrics::new().render()).unwrap_err();
        assert!(matches!(err, MetricsError::Bind { .. }), "{err}");
    }
}
