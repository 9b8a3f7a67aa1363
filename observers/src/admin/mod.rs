//! An operator's view of an observer application in a store, from any process: the worker
//! registry, the notification backlog, dead letters, locks, cells and their versions, and
//! whether the work is drained. Every function returns data and prints nothing
//! (`percolator-ctl` renders it); none of them needs the observers' registry.
//!
//! Ages are measured on oracle time (the client's timestamp source), as heartbeats, lock
//! TTLs and notification timestamps are.
//!
//! Reads here are raw: they decode heads, versions and notify keys as they are in the store
//! and never resolve, wait on or fence a lock (an inspection must not change what it
//! inspects). [`scan()`] therefore shows a cell's lock beside its committed versions instead of
//! resolving it, and versions below the GC safe point may be gone.
//!
//! One module per concern, everything re-exported here: `workers` (the registry),
//! `backlog` (the notify space), `letters` (dead letters), `locks` (locks held), `cells`
//! (cells and their versions), `quarantine` (input sources a loader quarantined) and `drain` (whether the work is drained, and why that holds
//! seen from another process: see [`is_drained`]).

mod backlog;
mod cells;
mod drain;
mod letters;
mod locks;
mod quarantine;
mod workers;

pub use backlog::{backlog, notifications, Backlog, ColumnBacklog, PendingNotification};
pub use cells::{scan, CellVersion, CellView, RowRange, StoredValue};
pub use drain::{is_drained, is_drained_beside, wait_until_drained, NotDrained};
pub use letters::{dead_letter_id, dead_letters, find_dead_letters, DeadLetterInfo};
pub use locks::{locks, LockInfo};
pub use quarantine::{
    clear_quarantine, quarantined, record_quarantine, Quarantined, QUARANTINE_META,
};
pub use workers::{workers, WorkerInfo};

use crate::error::WorkerError;
use percolator::{Client, Timestamp, TxnError};
use std::time::Duration;

/// How long a worker counts as live after its last heartbeat, unless told otherwise: three
/// heartbeats of the default worker configuration, as workers judge each other.
pub const DEFAULT_LIVENESS: Duration = Duration::from_millis(1500);

/// The current oracle time, in physical milliseconds.
pub(crate) async fn oracle_ms(client: &Client) -> Result<u64, WorkerError> {
    let now = client
        .oracle()
        .get_timestamp()
        .await
        .map_err(TxnError::from)?;
    Ok(now.physical_ms())
}

pub(crate) fn age(now_ms: u64, ts: u64) -> Duration {
    Duration::from_millis(now_ms.saturating_sub(Timestamp(ts).physical_ms()))
}

/// The meta records of the namespace whose names start with `prefix`: (the rest of the
/// name, value), in key order.
pub(crate) async fn meta_records(
    client: &Client,
    prefix: &[u8],
) -> Result<Vec<(Vec<u8>, Vec<u8>)>, WorkerError> {
    let pairs = percolator::kv::scan_all(
        client.store().as_ref(),
        client.codec().meta_prefix_range(prefix),
        percolator::kv::ScanOrder::Forward,
    )
    .await?;
    Ok(pairs
        .into_iter()
        .filter_map(|(key, value)| {
            let Ok(percolator::codec::Key::Meta(name)) = client.codec().decode(&key) else {
                return None;
            };
            Some((name.strip_prefix(prefix)?.to_vec(), value))
        })
        .collect())
}
