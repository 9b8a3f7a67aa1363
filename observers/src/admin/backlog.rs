//! The notification backlog: counts per observed column and the waiting notifications,
//! each one pass over the notify space from the notify floor.

use super::{age, oracle_ms};
use crate::error::WorkerError;
use percolator::codec::Key;
use percolator::kv::{RangePager, ScanOrder};
use percolator::record::Notification;
use percolator::{Cell, Client};
use std::collections::BTreeMap;
use std::time::Duration;

/// The backlog of one observed column.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ColumnBacklog {
    /// The table.
    pub table: Vec<u8>,
    /// The column.
    pub column: Vec<u8>,
    /// Notifications waiting.
    pub count: u64,
    /// Age of the oldest (from the timestamp in its key: the writer's start_ts, or the
    /// timestamp of a weak or replayed notification).
    pub oldest_age: Duration,
}

/// The notification backlog of a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Backlog {
    /// The notify floor the scan started from (a bucket: a wall-clock second).
    pub floor: u64,
    /// Per (table, column), in key order.
    pub columns: Vec<ColumnBacklog>,
    /// Keys in the notify space that do not decode as notify keys of this namespace.
    pub undecodable: u64,
}

impl Backlog {
    /// Notifications waiting, all columns together.
    pub fn total(&self) -> u64 {
        self.columns.iter().map(|c| c.count).sum::<u64>() + self.undecodable
    }
}

/// The notification backlog per column: one pass over the notify space from the notify
/// floor, so its cost is the live notifications plus the delete markers of the buckets since
/// the oldest one (`percolator::design::notify`).
pub async fn backlog(client: &Client) -> Result<Backlog, WorkerError> {
    let floor = client.notify_floor().await?;
    let now = oracle_ms(client).await?;
    let mut columns: BTreeMap<(Vec<u8>, Vec<u8>), (u64, u64)> = BTreeMap::new();
    let mut undecodable = 0;
    let range = client.codec().notify_from(floor);
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, 1024);
    while let Some(page) = pager.next_page().await? {
        for (key, _) in page {
            let Ok(Key::Notify { cell, ts, .. }) = client.codec().decode(&key) else {
                undecodable += 1;
                continue;
            };
            let entry = columns.entry((cell.table, cell.column)).or_insert((0, ts));
            entry.0 += 1;
            entry.1 = entry.1.min(ts);
        }
    }
    Ok(Backlog {
        floor,
        columns: columns
            .into_iter()
            .map(|((table, column), (count, oldest))| ColumnBacklog {
                table,
                column,
                count,
                oldest_age: age(now, oldest),
            })
            .collect(),
        undecodable,
    })
}

/// One notification waiting in the notify space.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PendingNotification {
    /// Its key.
    pub key: Vec<u8>,
    /// Its bucket (the wall-clock second it was put in).
    pub bucket: u64,
    /// The notified cell.
    pub cell: Cell,
    /// The timestamp in its key (the writer's start_ts for a strong notification).
    pub ts: u64,
    /// Its record (`None`: it does not decode; workers dead-letter such keys).
    pub notification: Option<Notification>,
    /// Age of `ts`.
    pub age: Duration,
}

/// The first `limit` notifications of the backlog, oldest bucket first (the order scanners
/// take them in).
pub async fn notifications(
    client: &Client,
    limit: usize,
) -> Result<Vec<PendingNotification>, WorkerError> {
    let floor = client.notify_floor().await?;
    let now = oracle_ms(client).await?;
    let range = client.codec().notify_from(floor);
    let mut out = Vec::new();
    let page_size = limit.clamp(1, 1024);
    let mut pager = RangePager::new(
        client.store().as_ref(),
        range,
        ScanOrder::Forward,
        page_size,
    );
    'pages: while let Some(page) = pager.next_page().await? {
        for (key, value) in page {
            if out.len() >= limit {
                break 'pages;
            }
            let Ok(Key::Notify { bucket, cell, ts }) = client.codec().decode(&key) else {
                continue;
            };
            out.push(PendingNotification {
                key,
                bucket,
                cell,
                ts,
                notification: Notification::decode(&value).ok(),
                age: age(now, ts),
            });
        }
    }
    Ok(out)
}
