//! Locks held on cells: one pass over the head space.

use super::oracle_ms;
use crate::error::WorkerError;
use percolator::codec::{Key, Space};
use percolator::kv::{RangePager, ScanOrder};
use percolator::record::{Head, Lock};
use percolator::{Cell, Client, Timestamp, TxnError};
use std::time::Duration;

/// A lock found on a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LockInfo {
    /// The locked cell.
    pub cell: Cell,
    /// The lock (its transaction's start_ts, primary, pending write and TTL).
    pub lock: Lock,
    /// Time since the transaction's start_ts.
    pub age: Duration,
    /// Whether oracle time has passed `physical(start_ts) + ttl`: the writer stopped
    /// heartbeating (crashed or stalled), and the next reader or `resolve_all_locks` rolls
    /// it forward or back.
    pub expired: bool,
}

impl LockInfo {
    pub(crate) fn new(cell: Cell, lock: Lock, now: u64) -> LockInfo {
        let start = Timestamp(lock.start_ts).physical_ms();
        LockInfo {
            expired: now > start.saturating_add(lock.ttl_ms),
            age: Duration::from_millis(now.saturating_sub(start)),
            cell,
            lock,
        }
    }
}

pub(crate) fn decode_head(key: &[u8], raw: &[u8]) -> Result<Head, WorkerError> {
    Head::decode(raw).map_err(|why| WorkerError::Txn(TxnError::corrupt(key, why)))
}

/// Every lock in the namespace (one pass over the head space: O(cells)).
pub async fn locks(client: &Client) -> Result<Vec<LockInfo>, WorkerError> {
    let now = oracle_ms(client).await?;
    let range = client.codec().space_range(Space::Head);
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, 1024);
    let mut out = Vec::new();
    while let Some(page) = pager.next_page().await? {
        for (key, raw) in page {
            let Ok(Key::Head(cell)) = client.codec().decode(&key) else {
                continue;
            };
            if let Some(lock) = decode_head(&key, &raw)?.lock {
                out.push(LockInfo::new(cell, lock, now));
            }
        }
    }
    Ok(out)
}
