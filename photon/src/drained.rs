//! `--until-drained`: waits until the logs are loaded and the join is drained, with the
//! application layer's check ([`app::drain::check`]): every log file loaded to its last
//! complete line ([`crate::load::status`]), no notification left and no observer run in
//! flight in any worker of any process, and a sweep of parked clicks
//! ([`crate::join::sweep_pending`]) that woke none (a woken click is a new notification:
//! the check starts again).

pub use app::drain::{DrainError as DrainedError, Waiting};

use crate::join;
use crate::load::status::{dir_status, started_status};
use observers::admin;
use percolator::Client;
use std::path::Path;
use std::time::Duration;

/// One check: `Ok(())` if drained, else why not.
pub async fn check(
    client: &Client,
    input: Option<&Path>,
    horizon: Duration,
    liveness: Duration,
) -> Result<Result<(), Waiting>, DrainedError> {
    let loading = async {
        match input {
            Some(dir) => dir_status(client, dir).await,
            None => started_status(client).await,
        }
    };
    let sweep = join::sweep_pending(client, horizon);
    app::drain::check(
        client,
        loading,
        &[],
        liveness,
        sweep,
        "parked clicks (swept)",
    )
    .await
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
