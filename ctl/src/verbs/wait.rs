//! `wait`: until the work is drained (exit status 3, `percolator_cli::exit::INCOMPLETE`, if
//! the timeout passed first: 2 is clap's, for a wrong command line).

use super::ms;
use crate::cli::StoreArgs;
use crate::render;
use crate::{Answer, CtlError};
use observers::admin;
use percolator::Client;
use serde_json::json;
use std::time::Duration;

/// The exit status when the timeout passed first.
pub const TIMED_OUT: i32 = percolator_cli::exit::INCOMPLETE;

/// Waits until no notification is left and no run is in flight, or `timeout` seconds.
pub async fn wait(
    client: &Client,
    store: &StoreArgs,
    timeout: Option<f64>,
    poll_ms: u64,
) -> Result<Answer, CtlError> {
    let started = std::time::Instant::now();
    let timeout = timeout
        .map(Duration::try_from_secs_f64)
        .transpose()
        .map_err(|e| CtlError::Usage(format!("--timeout: {e}")))?;
    let drained = admin::wait_until_drained(
        client,
        store.liveness(),
        Duration::from_millis(poll_ms),
        timeout,
    )
    .await?;
    let waited = started.elapsed();
    let (text, status) = if drained {
        (format!("drained after {}\n", render::duration(waited)), 0)
    } else {
        let backlog = admin::backlog(client).await?;
        (
            format!(
                "timed out after {}: {} notifications waiting\n",
                render::duration(waited),
                backlog.total()
            ),
            TIMED_OUT,
        )
    };
    let json = json!({"drained": drained, "waited_ms": ms(waited)});
    Ok(Answer { text, json, status })
}
