//! Running an application's observers in this process: a worker named after its pipeline
//! ([`WorkerSpec`]), and periodic tasks beside it ([`spawn_every`], [`Periodic`]).
//!
//! Redundant pipelines run the same observers under different names (each its own
//! acknowledgments); the application makes the output exactly once across them (Photon's
//! IdRegistry).

use observers::{Registry, Worker, WorkerConfig};
use percolator::Client;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// How a pipeline's worker runs.
#[derive(Clone, Debug)]
pub struct WorkerSpec {
    /// Pipeline name; redundant pipelines run at once under different names.
    pub pipeline: String,
    /// Worker name (default: `<pipeline>-<process id>`).
    pub worker: Option<String>,
    /// Observer runs in flight at most.
    pub max_in_flight: usize,
    /// Scanner tasks.
    pub scanners: usize,
    /// Notifications of one observer handled per transaction (see
    /// [`WorkerConfig::batch_size`]).
    pub batch_size: usize,
    /// The largest batch a burst of notifications grows runs to (see
    /// [`WorkerConfig::max_batch_size`]; the default: batches never grow).
    pub max_batch_size: usize,
    /// How often idle scanners read the store's shared count of notify keys put, to follow
    /// commits of other processes (`None`: only their idle periods; see
    /// [`WorkerConfig::follow_shared_counts`]).
    pub follow_shared_counts: Option<Duration>,
    /// Where the worker takes the notify keys loaders in other processes relay to it
    /// (see [`WorkerConfig::hint_listener`]; one per process, shared by its workers).
    pub hint_listener: Option<Arc<observers::HintListener>>,
}

impl WorkerSpec {
    /// The spec of pipeline `pipeline` with the worker's defaults ([`WorkerConfig::default`])
    /// and the default worker name.
    pub fn named(pipeline: impl Into<String>) -> WorkerSpec {
        let defaults = WorkerConfig::default();
        WorkerSpec {
            pipeline: pipeline.into(),
            worker: None,
            max_in_flight: defaults.max_in_flight,
            scanners: defaults.scanners,
            batch_size: defaults.batch_size,
            max_batch_size: defaults.max_batch_size,
            follow_shared_counts: defaults.follow_shared_counts,
            hint_listener: None,
        }
    }

    /// The worker's name: given, or the pipeline and this process.
    pub fn worker_name(&self) -> String {
        self.worker
            .clone()
            .unwrap_or_else(|| format!("{}-{}", self.pipeline, std::process::id()))
    }

    /// The worker's configuration; its id is the worker's name made unique with a random
    /// suffix.
    pub fn config(&self) -> WorkerConfig {
        WorkerConfig {
            id: format!("{}-{:08x}", self.worker_name(), rand::random::<u32>()),
            scanners: self.scanners,
            max_in_flight: self.max_in_flight,
            batch_size: self.batch_size,
            max_batch_size: self.max_batch_size,
            follow_shared_counts: self.follow_shared_counts,
            hint_listener: self.hint_listener.clone(),
            ..WorkerConfig::default()
        }
    }

    /// Starts a worker running `registry` on `client`.
    pub fn start(&self, client: &Client, registry: Registry) -> Worker {
        Worker::start(client.clone(), Arc::new(registry), self.config())
    }

    /// [`WorkerSpec::start`], counting into the process's worker families (see
    /// [`crate::metrics`]).
    pub fn start_with_metrics(
        &self,
        client: &Client,
        registry: Registry,
        families: observers::telemetry::WorkerMetrics,
    ) -> Worker {
        Worker::start_with_metrics(client.clone(), Arc::new(registry), self.config(), families)
    }
}

/// Runs `task` every `period` until stopped ([`Periodic::stop`], [`Periodic::abort`] or
/// dropping the handle); a failure is logged as `what` and retried at the next period, and a
/// non-zero count is logged at info.
pub fn spawn_every<F, Fut, E>(period: Duration, what: &'static str, task: F) -> Periodic
where
    F: Fn() -> Fut + Send + 'static,
    Fut: Future<Output = Result<u64, E>> + Send,
    E: std::fmt::Display,
{
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let handle = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(period) => {}
                // Stopped, or the handle dropped.
                _ = stopped.changed() => return,
            }
            match task().await {
                Ok(0) => {}
                Ok(n) => tracing::info!(n, what, "periodic task did work"),
                Err(e) => tracing::warn!(error = %e, what, "periodic task failed; will retry"),
            }
        }
    });
    Periodic {
        stop,
        task: tokio::sync::Mutex::new(Some(handle)),
    }
}

/// A task run every period ([`spawn_every`]).
pub struct Periodic {
    stop: tokio::sync::watch::Sender<bool>,
    task: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Periodic {
    /// Stops it: a pass in progress runs to its end, and this returns once it has; no pass
    /// starts after. (Photon's drain stops its periodic sweep so that no sweep of this
    /// process runs while the drain check scans: `photon::run`.)
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let mut task = self.task.lock().await;
        if let Some(handle) = task.take() {
            let _ = handle.await;
        }
    }

    /// Stops it at once, wherever it is (a pass in progress is dropped mid-way).
    pub fn abort(&self) {
        let _ = self.stop.send(true);
        if let Ok(mut task) = self.task.try_lock() {
            if let Some(handle) = task.take() {
                handle.abort();
            }
        }
    }
}
