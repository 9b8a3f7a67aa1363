//! The worker registry as operators see it: liveness by heartbeat age, shares of the hash
//! split, notifications handled.

use super::oracle_ms;
use crate::error::WorkerError;
use crate::worker::membership::{decode_record, WORKERS_META};
use percolator::Client;
use std::time::Duration;

/// A record of the worker registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkerInfo {
    /// The worker's id (`WorkerConfig::id`).
    pub id: String,
    /// Time since its last heartbeat.
    pub heartbeat_age: Duration,
    /// Notifications it has handled since it started (`None`: an older worker that does not
    /// publish it).
    pub handled: Option<u64>,
    /// Whether it heartbeat within the liveness horizon (a killed worker's record stays
    /// until someone removes it; it no longer counts in the split).
    pub live: bool,
    /// Its index in the hash split among the live workers (`None` if not live): it owns the
    /// cells whose stable hash modulo the live count is this index.
    pub share_index: Option<usize>,
    /// Live workers the split is among (its share is `1 / live_workers` of the cells).
    pub live_workers: usize,
    /// Where it takes the notify keys loaders in other processes relay to it
    /// ([`crate::relay`]; `None`: it does not listen).
    pub hint_addr: Option<String>,
}

/// Raw records of the worker registry: (id, beat in oracle ms, progress), in key order.
pub(crate) async fn worker_records(
    client: &Client,
) -> Result<Vec<(String, u64, Option<u64>)>, WorkerError> {
    Ok(super::meta_records(client, WORKERS_META)
        .await?
        .into_iter()
        .filter_map(|(id, value)| {
            let (beat, handled) = decode_record(&value)?;
            Some((String::from_utf8_lossy(&id).into_owned(), beat, handled))
        })
        .collect())
}

/// Every record of the worker registry, live ones first in split order (as workers sort
/// them), then those whose heartbeat is older than `liveness`.
pub async fn workers(client: &Client, liveness: Duration) -> Result<Vec<WorkerInfo>, WorkerError> {
    let records = worker_records(client).await?;
    let hint_addrs = super::meta_records(client, crate::relay::HINT_ADDRS_META).await?;
    let now = oracle_ms(client).await?;
    let horizon = liveness.as_millis() as u64;
    let is_live = |beat: u64| beat.saturating_add(horizon) >= now;
    let live_workers = records.iter().filter(|(_, beat, _)| is_live(*beat)).count();
    let mut index = 0;
    let mut out: Vec<WorkerInfo> = records
        .into_iter()
        .map(|(id, beat, handled)| {
            let live = is_live(beat);
            let share_index = live.then(|| {
                index += 1;
                index - 1
            });
            let hint_addr = hint_addrs
                .iter()
                .find(|(of, _)| of.as_slice() == id.as_bytes())
                .map(|(_, addr)| String::from_utf8_lossy(addr).into_owned());
            WorkerInfo {
                id,
                heartbeat_age: Duration::from_millis(now.saturating_sub(beat)),
                handled,
                live,
                share_index,
                live_workers,
                hint_addr,
            }
        })
        .collect();
    out.sort_by_key(|w| (!w.live, w.share_index));
    Ok(out)
}
