//! `photon run`: the join on a directory of logs in one process. The loader
//! ([`crate::load`]) loads the directory while this process's pipelines join it, with the
//! periodic sweep of parked clicks, periodic GC, progress and metrics, until a signal or,
//! with `--until-drained`, until loaded and drained ([`app::run`]). `photon demo` is
//! generate + this + verify.

use crate::load::LoadStats;
use crate::maintenance::{GcMetrics, GcSpec};
use crate::pipeline::{spawn_sweeper, Pipeline, PipelineError, PipelineSpec};
use crate::progress::{Counter, Display, Progress};
use app::drain::Waiting;
use app::run::{Outcome, Run, RunError, RunOptions};
use observers::telemetry::WorkerMetrics;
use percolator::Client;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// What a run does besides loading: pipelines' periodic tasks, what it shows.
#[derive(Clone, Debug)]
pub struct RunSpec {
    /// The loader and when the run ends.
    pub run: RunOptions,
    /// The join horizon (of the sweep of parked clicks).
    pub horizon: Duration,
    /// Period of the sweep of parked clicks.
    pub sweep_period: Duration,
    /// Periodic GC, if any.
    pub gc: Option<GcSpec>,
    /// Serve the process's metrics (`/metrics`) here.
    pub metrics_addr: Option<std::net::SocketAddr>,
    /// The process's registry: the pipelines' worker families are in it already (see
    /// [`start_pipelines`]); the run adds the loader's, the GC's and the join's.
    pub metrics: app::metrics::Metrics,
    /// How progress is shown.
    pub progress: Display,
    /// What the progress counts as loaded: events (with their total) or lines.
    pub loaded: Loaded,
    /// The joinable clicks, if known (the progress's total).
    pub joinable: Option<u64>,
}

/// What the progress counts as loaded.
#[derive(Clone, Copy, Debug)]
pub enum Loaded {
    /// Events written (of a known total).
    Events(Option<u64>),
    /// Input lines read (of the lines left to load, unknown while following).
    Lines(Option<u64>),
}

/// Starts `specs`' pipelines, their workers counting into `families`. A loader may start
/// at once: commits made before a worker settled are hinted to it once it has (a run that
/// times from the first load waits with [`settle_all`] first).
pub fn start_pipelines(
    client: &Client,
    specs: &[PipelineSpec],
    families: &WorkerMetrics,
) -> Result<Vec<Pipeline>, PipelineError> {
    specs
        .iter()
        .map(|spec| Pipeline::start_with_metrics(client, spec, families.clone()))
        .collect()
}

/// Waits until each of `pipelines` has settled in (owns its share of the notifications).
pub async fn settle_all(pipelines: &[Pipeline]) {
    for p in pipelines {
        p.settle().await;
    }
}

/// Loads `input` while `pipelines` join it, until `stop` resolves or (with
/// `until_drained`) loaded and drained. `tick` is called every 100 ms. The pipelines keep
/// running (the caller shuts them down).
pub async fn run(
    client: &Client,
    input: &Path,
    pipelines: &[Pipeline],
    spec: &RunSpec,
    stats: &Arc<LoadStats>,
    tick: impl FnMut(),
    stop: impl std::future::Future<Output = ()>,
) -> Result<Outcome, RunError> {
    let gc_metrics = Arc::new(GcMetrics::default());
    let namespace = String::from_utf8_lossy(&client.codec().namespace()).into_owned();
    let joins: Vec<_> = pipelines
        .iter()
        .map(|p| (p.name.clone(), p.stats.clone()))
        .collect();
    crate::metrics::register(&spec.metrics, &namespace, &joins, Some(gc_metrics.clone()));
    app::metrics::register_loader(&spec.metrics, &namespace, stats.clone());
    let metrics = match spec.metrics_addr {
        Some(addr) => Some(
            app::metrics::spawn(addr, spec.metrics.render())
                .map_err(RunError::Metrics)?
                .1,
        ),
        None => None,
    };
    let sweeper = spawn_sweeper(client.clone(), spec.horizon, spec.sweep_period);
    let gc = spec
        .gc
        .clone()
        .map(|gc| crate::maintenance::spawn_gc(client.clone(), gc, gc_metrics.clone()));
    let loaded = match spec.loaded {
        Loaded::Events(total) => Counter::new("loaded", "events", total, {
            let stats = stats.clone();
            move || stats.loaded.load(Ordering::Relaxed)
        }),
        Loaded::Lines(total) => Counter::new("loaded", "lines", total, {
            let stats = stats.clone();
            move || stats.lines.load(Ordering::Relaxed)
        }),
    };
    let joined_stats: Vec<_> = pipelines.iter().map(|p| p.stats.clone()).collect();
    let joined = Counter::new("joined", "clicks", spec.joinable, move || {
        joined_stats
            .iter()
            .map(|s| s.joined.load(Ordering::Relaxed))
            .sum()
    });
    let shown = Progress::start(spec.progress, vec![loaded, joined]);
    let lines = crate::load::loader();
    let run = Run {
        client,
        lines: &lines,
        input,
        workers: pipelines.iter().map(|p| &p.worker).collect(),
        stats,
        options: spec.run.clone(),
    };
    // The drain's release sweeps; it stops the periodic sweep first (after its pass in
    // progress), so that no sweep of this process can wake a click while the drain check
    // scans the notify space (its run would put a key the scan may pass: the check reads
    // this process's workers by their run marks, not their heartbeats).
    let sweep = || {
        let sweeper = &sweeper;
        async move {
            sweeper.stop().await;
            crate::join::sweep_pending(client, spec.horizon).await
        }
    };
    let waiting = app::drain::say_every(Duration::from_secs(10), |why: &Waiting| {
        eprintln!("photon: waiting for the drain: {why}")
    });
    let outcome = run.run(sweep, waiting, tick, stop).await;
    shown.finish();
    sweeper.abort();
    for task in gc.into_iter().chain(metrics) {
        task.abort();
    }
    outcome
}
