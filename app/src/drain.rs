//! Waiting until an application is drained: its input loaded and its observers done.
//!
//! Drained means, in this order: every input file is loaded to its last complete line
//! ([`crate::load::lines::Lines::dir_status`]); no notification is left and no observer run
//! is in flight in any worker of any process ([`observers::admin::is_drained_beside`]); and the
//! application released no more work (`release`: e.g. Photon's sweep of parked clicks; work
//! released is a new notification, so the check starts again).
//!
//! In one process, [`drain_workers`] waits on the workers themselves instead of the store.

use crate::load::lines::FileStatus;
use crate::load::LoadError;
use observers::admin::{self, NotDrained};
use observers::{Worker, WorkerError};
use percolator::{Client, TxnError};
use std::future::Future;
use std::time::Duration;

/// Errors of the drain checks.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainError {
    /// Reading the loader's progress failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Reading the worker registry or the notify space failed, or a worker failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Releasing the application's held work failed.
    #[error(transparent)]
    Txn(#[from] TxnError),
}

/// Why the application is not drained yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// An input file is not fully loaded.
    Loading(FileStatus),
    /// Notifications are waiting or runs are in flight.
    Observers(NotDrained),
    /// The application released held work (`what` says which, as its `release` counted it).
    Released {
        /// How much.
        n: u64,
        /// What (e.g. `parked clicks`).
        what: &'static str,
    },
}

impl std::fmt::Display for Waiting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waiting::Loading(file) => write!(
                f,
                "{} loaded {} of {} bytes",
                file.path.display(),
                file.loaded,
                file.loadable
            ),
            Waiting::Observers(why) => write!(f, "{why}"),
            Waiting::Released { n, what } => write!(f, "released {n} {what}"),
        }
    }
}

/// One check: `Ok(())` if drained, else why not. `loading` reads the input's progress;
/// `local` are the workers of this process (checked by their own counters, the others by
/// their heartbeats: [`admin::is_drained_beside`]); `release` releases the application's
/// held work once nothing else is left, returning how much it released (0: none), which
/// it names `what`.
pub async fn check<L, R>(
    client: &Client,
    loading: L,
    local: &[&Worker],
    liveness: Duration,
    release: R,
    what: &'static str,
) -> Result<Result<(), Waiting>, DrainError>
where
    L: Future<Output = Result<Vec<FileStatus>, LoadError>>,
    R: Future<Output = Result<u64, TxnError>>,
{
    if let Some(file) = loading.await?.into_iter().find(|f| !f.done()) {
        return Ok(Err(Waiting::Loading(file)));
    }
    if let Err(why) = admin::is_drained_beside(client, liveness, local).await? {
        return Ok(Err(Waiting::Observers(why)));
    }
    match release.await? {
        0 => Ok(Ok(())),
        n => Ok(Err(Waiting::Released { n, what })),
    }
}

/// Says why not drained: the first answer, then at most every `every` (for a person
/// watching stderr).
pub fn say_every(every: Duration, say: impl Fn(&Waiting)) -> impl FnMut(&Waiting) {
    let mut said: Option<std::time::Instant> = None;
    move |why| {
        if said.is_none_or(|at| at.elapsed() >= every) {
            say(why);
            said = Some(std::time::Instant::now());
        }
    }
}

/// Drains the workers of this process: waits until every worker is quiescent (every
/// notification handled), then calls `release` (the application's held work) and again,
/// until it releases nothing or `max_rounds` rounds have run. `tick` is called every
/// 100 ms while waiting (progress display).
pub async fn drain_workers<R, RF>(
    workers: &[&Worker],
    max_rounds: usize,
    mut release: R,
    mut tick: impl FnMut(),
) -> Result<(), DrainError>
where
    R: FnMut() -> RF,
    RF: Future<Output = Result<u64, TxnError>>,
{
    for _ in 0..max_rounds {
        let quiescent = async {
            for w in workers {
                w.wait_until_quiescent().await?;
            }
            Ok::<(), WorkerError>(())
        };
        tokio::pin!(quiescent);
        loop {
            tokio::select! {
                r = &mut quiescent => { r?; break; }
                _ = tokio::time::sleep(Duration::from_millis(100)) => tick(),
            }
        }
        if release().await? == 0 {
            break;
        }
    }
    Ok(())
}
