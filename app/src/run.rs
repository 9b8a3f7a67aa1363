//! A whole application in one process: a directory of line files loaded while this
//! process's workers run its observers, until a signal or until drained (`photon run`; a
//! second application calls [`Run::run`] with its own mapping and workers).
//!
//! - Without `follow` the directory is loaded once; with it, again every `poll`, picking up
//!   appended lines and new files.
//! - With `until_drained` the run ends once everything loadable is loaded and the observers
//!   are done: first in this process ([`drain_workers`], with the application's `release`,
//!   e.g. Photon's sweep of parked clicks), then, with `confirm_in_store`, as any process sees
//!   it ([`crate::drain::check`]: workers of other processes on a shared store included).
//! - A failing loader ends the run with its error; so does a failing check.

use crate::drain::{check, drain_workers, DrainError, Waiting};
use crate::load::lines::{LineMapping, Lines};
use crate::load::{LoadError, LoadOptions, LoadStats, Pace};
use observers::admin::DEFAULT_LIVENESS;
use observers::Worker;
use percolator::{Client, TxnError};
use std::future::Future;
use std::path::Path;
use std::time::Duration;

/// How a [`Run`] loads and when it ends.
#[derive(Clone, Debug)]
pub struct RunOptions {
    /// The loader's settings.
    pub load: LoadOptions,
    /// Keep loading what is appended and new files, every this often (`--follow`).
    pub follow: Option<Duration>,
    /// End once loaded and drained (`--until-drained`); otherwise run until stopped.
    pub until_drained: bool,
    /// After the drain in this process, confirm it as other processes see it (their
    /// workers and loaders on a shared store).
    pub confirm_in_store: bool,
    /// Rounds of the drain in this process (each: quiescent workers, then `release`).
    pub drain_rounds: usize,
    /// Replay the input at the pace of its event time.
    pub pace: Option<Pace>,
}

/// How a [`Run`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Loaded and drained (`until_drained`).
    Drained,
    /// Stopped (a signal) before that.
    Stopped,
}

/// Errors of a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunError {
    /// The loader failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Draining failed.
    #[error(transparent)]
    Drain(#[from] DrainError),
    /// The metrics endpoint could not start.
    #[error(transparent)]
    Metrics(#[from] percolator_metrics::MetricsError),
}

impl RunError {
    /// Whether the run failed before it started (nothing was loaded or run): a caller prints
    /// no summary of it.
    pub fn before_start(&self) -> bool {
        matches!(self, RunError::Metrics(_))
    }
}

/// A directory loaded with `lines` while `workers` run.
pub struct Run<'a, M> {
    /// The client the loader writes with (the workers have their own).
    pub client: &'a Client,
    /// The loader.
    pub lines: &'a Lines<M>,
    /// The directory.
    pub input: &'a Path,
    /// The workers of this process running the application's observers.
    pub workers: Vec<&'a Worker>,
    /// The loader's counters (shown as progress by the caller).
    pub stats: &'a LoadStats,
    /// How it loads and ends.
    pub options: RunOptions,
}

impl<M: LineMapping> Run<'_, M> {
    /// Runs until drained (with `until_drained`) or `stop` resolves. `release` releases the
    /// application's held work once the observers are quiet, returning how much (0: none;
    /// see [`crate::drain`]); `waiting` is told why the run is not drained yet (from the
    /// store-wide check); `tick` is called every 100 ms (progress, sampling).
    pub async fn run<R, RF>(
        &self,
        mut release: R,
        mut waiting: impl FnMut(&Waiting),
        mut tick: impl FnMut(),
        stop: impl Future<Output = ()>,
    ) -> Result<Outcome, RunError>
    where
        R: FnMut() -> RF,
        RF: Future<Output = Result<u64, TxnError>>,
    {
        let options = &self.options;
        // Following, a last line waits for its line break; otherwise the input is bounded.
        let load_options = LoadOptions {
            follow: options.follow.is_some(),
            ..options.load.clone()
        };
        let loaded = tokio::sync::Notify::new();
        let load = async {
            loop {
                self.lines
                    .load_dir_paced(
                        self.client,
                        self.input,
                        &load_options,
                        self.stats,
                        options.pace.as_ref(),
                    )
                    .await?;
                loaded.notify_one();
                match options.follow {
                    Some(poll) => tokio::time::sleep(poll).await,
                    None => return Ok::<(), LoadError>(()),
                }
            }
        };
        let drained = async {
            if !options.until_drained {
                return std::future::pending().await;
            }
            if options.follow.is_none() {
                loaded.notified().await;
                drain_workers(&self.workers, options.drain_rounds, &mut release, || {}).await?;
                if !options.confirm_in_store {
                    return Ok::<(), DrainError>(());
                }
            }
            loop {
                let files = self.lines.dir_status(self.client, self.input);
                match check(
                    self.client,
                    files,
                    &self.workers,
                    DEFAULT_LIVENESS,
                    release(),
                    "held items",
                )
                .await?
                {
                    Ok(()) => return Ok(()),
                    Err(why) => waiting(&why),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        };
        tokio::pin!(load, drained, stop);
        let mut ticks = tokio::time::interval(Duration::from_millis(100));
        let mut loading = true;
        loop {
            tokio::select! {
                r = &mut load, if loading => { r?; loading = false; }
                r = &mut drained => { r?; return Ok(Outcome::Drained); }
                _ = &mut stop => return Ok(Outcome::Stopped),
                _ = ticks.tick() => tick(),
            }
        }
    }
}
