//! A join pipeline in this process: its observers on a worker ([`Pipeline::start`]), waiting
//! until it has settled in, draining it ([`drain`]), and the periodic sweep of parked clicks
//! ([`spawn_sweeper`]). Used by `photon work`, [`crate::demo`] and the tests.

use crate::join::{self, JoinConfig, JoinStats};
use app::drain::DrainError;
use app::pipeline::WorkerSpec;
use observers::telemetry::WorkerMetrics;
use observers::{Registry, Worker, WorkerConfig, WorkerError};
use percolator::{Client, TxnError};
use std::sync::Arc;
use std::time::Duration;

/// Errors of starting and draining pipelines.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PipelineError {
    /// The worker failed (registering the observers, or waiting for quiescence).
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The sweep of parked clicks failed.
    #[error(transparent)]
    Txn(#[from] TxnError),
    /// Draining failed otherwise.
    #[error(transparent)]
    Drain(DrainError),
}

/// What `photon work` (and the demo) run a pipeline with.
#[derive(Clone, Debug)]
pub struct PipelineSpec {
    /// The pipeline's worker: its name is the pipeline's (redundant pipelines run at once
    /// under different names).
    pub worker: WorkerSpec,
    /// Clicks whose query has not arrived this long after their event time are reported as
    /// expired.
    pub horizon: Duration,
}

/// One pipeline's join observers running on a worker of this process.
pub struct Pipeline {
    /// The worker running the observers.
    pub worker: Worker,
    /// The join's counters.
    pub stats: Arc<JoinStats>,
    /// The pipeline name.
    pub name: String,
}

impl Pipeline {
    /// Starts a pipeline as `photon work` does: the worker is named after `spec` (or the
    /// pipeline and this process), its id made unique with a random suffix.
    pub fn start(client: &Client, spec: &PipelineSpec) -> Result<Pipeline, PipelineError> {
        Pipeline::start_with_metrics(client, spec, WorkerMetrics::new())
    }

    /// [`Pipeline::start`], its worker counting into `families` (the process's worker and
    /// observer families, registered once; see [`crate::metrics`]).
    pub fn start_with_metrics(
        client: &Client,
        spec: &PipelineSpec,
        families: WorkerMetrics,
    ) -> Result<Pipeline, PipelineError> {
        let worker = &spec.worker;
        let join = JoinConfig {
            pipeline: worker.pipeline.clone(),
            worker: worker.worker_name(),
            process: JoinConfig::this_process(),
            horizon: spec.horizon,
            expiry: Default::default(),
            adapter: None,
            legacy_entries: crate::legacy::LegacyEntries::checked(client),
        };
        Pipeline::start_instrumented(client, join, worker.config(), families)
    }

    /// Starts a pipeline with the given join and worker settings.
    pub fn start_with(
        client: &Client,
        join: JoinConfig,
        config: WorkerConfig,
    ) -> Result<Pipeline, PipelineError> {
        Pipeline::start_instrumented(client, join, config, WorkerMetrics::new())
    }

    /// [`Pipeline::start_with`], its worker counting into `families`.
    pub fn start_instrumented(
        client: &Client,
        join: JoinConfig,
        config: WorkerConfig,
        families: WorkerMetrics,
    ) -> Result<Pipeline, PipelineError> {
        crate::schema::declare_columns(client);
        crate::schema::remember_loaded_events(client);
        let stats = Arc::new(JoinStats::default());
        let name = join.pipeline.clone();
        let mut registry = Registry::new();
        join::register(&mut registry, join, stats.clone())?;
        let worker =
            Worker::start_with_metrics(client.clone(), Arc::new(registry), config, families);
        Ok(Pipeline {
            worker,
            stats,
            name,
        })
    }

    /// Waits until the worker has settled in (joined the membership, owns its share). Load
    /// written before is hinted to it then, so only a run that times from its first load
    /// needs to wait.
    pub async fn settle(&self) {
        self.worker.wait_until_settled().await;
    }
}

/// Drains the join: waits until every worker is quiescent (every notification handled),
/// then sweeps the clicks parked while their query was being loaded, and again, until a
/// sweep wakes nothing or `max_rounds` rounds have run. `tick` is called every 100 ms while
/// waiting (progress display).
pub async fn drain(
    client: &Client,
    workers: &[&Worker],
    horizon: Duration,
    max_rounds: usize,
    tick: impl FnMut(),
) -> Result<(), PipelineError> {
    let sweep = || join::sweep_pending(client, horizon);
    app::drain::drain_workers(workers, max_rounds, sweep, tick)
        .await
        .map_err(|e| match e {
            DrainError::Worker(e) => PipelineError::Worker(e),
            DrainError::Txn(e) => PipelineError::Txn(e),
            other => PipelineError::Drain(other),
        })
}

/// Sweeps parked clicks every `period` ([`join::sweep_pending`]: the fallback for wake-ups
/// lost to a crash, and for clicks whose query passed the horizon) until the task is aborted.
pub fn spawn_sweeper(
    client: Client,
    horizon: Duration,
    period: Duration,
) -> app::pipeline::Periodic {
    app::pipeline::spawn_every(period, "sweep of parked clicks", move || {
        let client = client.clone();
        async move { join::sweep_pending(&client, horizon).await }
    })
}
