//! `photon work --until-drained`: waits until the logs are loaded and the join is drained.
//!
//! Drained means, in this order: every log file is loaded to its last complete line
//! ([`crate::load::status`]); no notification is left and no observer run is in flight in
//! any worker of any process ([`observers::admin::is_drained`]); and a sweep of parked clicks
//! ([`crate::join::sweep_pending`]) woke none (a woken click is a new notification: the
//! check starts again).

use crate::join;
use crate::load::status::{dir_status, started_status, FileStatus};
use crate::load::LoadError;
use observers::admin::{self, NotDrained};
use observers::WorkerError;
use percolator::{Client, TxnError};
use std::path::Path;
use std::time::Duration;

/// Errors of [`until_drained`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DrainedError {
    /// Reading the loader's progress failed.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Reading the worker registry or the notify space failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The sweep of parked clicks failed.
    #[error(transparent)]
    Txn(#[from] TxnError),
}

/// Why the join is not drained yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// A log file is not fully loaded.
    Loading(FileStatus),
    /// Notifications are waiting or runs are in flight.
    Join(NotDrained),
    /// The sweep woke parked clicks.
    Swept(u64),
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
            Waiting::Join(why) => write!(f, "{why}"),
            Waiting::Swept(n) => write!(f, "the sweep woke {n} parked clicks"),
        }
    }
}

/// One check: `Ok(())` if drained, else why not.
pub async fn check(
    client: &Client,
    input: Option<&Path>,
    horizon: Duration,
    liveness: Duration,
) -> Result<Result<(), Waiting>, DrainedError> {
    let files = match input {
        Some(dir) => dir_status(client, dir).await?,
        None => started_status(client).await?,
    };
    if let Some(file) = files.into_iter().find(|f| !f.done()) {
        return Ok(Err(Waiting::Loading(file)));
    }
    if let Err(why) = admin::is_drained(client, liveness).await? {
        return Ok(Err(Waiting::Join(why)));
    }
    match join::sweep_pending(client, horizon).await? {
        0 => Ok(Ok(())),
        n => Ok(Err(Waiting::Swept(n))),
    }
}

/// Checks every `poll` until the logs of `input` (or every file the loader started on) are
/// loaded and the join is drained; `waiting` is told why after each check that says no.
pub async fn until_drained(
    client: &Client,
    input: Option<&Path>,
    horizon: Duration,
    poll: Duration,
    mut waiting: impl FnMut(&Waiting),
) -> Result<(), DrainedError> {
    loop {
        match check(client, input, horizon, admin::DEFAULT_LIVENESS).await? {
            Ok(()) => return Ok(()),
            Err(why) => waiting(&why),
        }
        tokio::time::sleep(poll).await;
    }
}
