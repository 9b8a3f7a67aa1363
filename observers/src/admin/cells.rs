//! Cells of a table as stored: each with its lock (shown, not resolved) and its visible
//! version or every version still stored.

use super::locks::{decode_head, LockInfo};
use super::oracle_ms;
use crate::error::WorkerError;
use percolator::codec::{Key, Space};
use percolator::kv::{scan_all, RangePager, ScanOrder};
use percolator::record::{Head, Op, Version};
use percolator::{Cell, Client, Timestamp, TxnError};
use std::collections::BTreeMap;

/// A committed value as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredValue {
    /// The value.
    Bytes(Vec<u8>),
    /// The version is a delete.
    Deleted,
    /// Stored out of line and no longer there (collected by GC), `len` bytes.
    Missing {
        /// Its length as the version records it.
        len: u64,
    },
}

/// One committed version of a cell.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellVersion {
    /// When its transaction committed.
    pub commit_ts: u64,
    /// When its transaction started.
    pub start_ts: u64,
    /// What it wrote.
    pub value: StoredValue,
}

/// A cell as [`scan`] found it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CellView {
    /// The cell.
    pub cell: Cell,
    /// Its lock, if a transaction holds one (not resolved by the scan).
    pub lock: Option<LockInfo>,
    /// The version visible at the scan's timestamp, or with `history` every version
    /// still stored, newest first.
    pub versions: Vec<CellVersion>,
}

/// Which rows of a table [`scan`] reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RowRange {
    /// First row (inclusive).
    pub start: Vec<u8>,
    /// End row (exclusive); `None`: to the end of the table.
    pub end: Option<Vec<u8>>,
}

impl RowRange {
    /// Every row of the table.
    pub fn all() -> RowRange {
        RowRange {
            start: Vec::new(),
            end: None,
        }
    }

    /// The rows starting with `prefix`.
    pub fn prefix(prefix: &[u8]) -> RowRange {
        RowRange {
            start: prefix.to_vec(),
            end: percolator::kv::prefix_successor(prefix),
        }
    }
}

/// Cells of `table` with rows in `rows`, in (row, column) order, at most `limit` of them:
/// each with its lock and, at `at` (default: the latest commit), its visible version, or
/// with `history` all its stored versions. Cells with nothing visible at `at` and no lock
/// are left out (deleted or not yet written), unless `history` shows them.
pub async fn scan(
    client: &Client,
    table: &[u8],
    rows: &RowRange,
    at: Option<Timestamp>,
    history: bool,
    limit: usize,
) -> Result<Vec<CellView>, WorkerError> {
    let now = oracle_ms(client).await?;
    let at = at.map_or(u64::MAX, |t| t.0);
    let range = client
        .codec()
        .rows_range(Space::Head, table, &rows.start, rows.end.as_deref());
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, 256);
    let mut out = Vec::new();
    'pages: while let Some(page) = pager.next_page().await? {
        for (key, raw) in page {
            if out.len() >= limit {
                break 'pages;
            }
            let Ok(Key::Head(cell)) = client.codec().decode(&key) else {
                continue;
            };
            let head = decode_head(&key, &raw)?;
            let versions = if history {
                versions_of(client, &cell, &head).await?
            } else {
                visible_at(client, &cell, &head, at).await?
            };
            let lock = head.lock.map(|l| LockInfo::new(cell.clone(), l, now));
            let shown = lock.is_some()
                || if history {
                    !versions.is_empty()
                } else {
                    versions
                        .first()
                        .is_some_and(|v| v.value != StoredValue::Deleted)
                };
            if shown {
                out.push(CellView {
                    cell,
                    lock,
                    versions,
                });
            }
        }
    }
    Ok(out)
}

async fn value_of(client: &Client, cell: &Cell, v: &Version) -> Result<CellVersion, WorkerError> {
    let value = match &v.op {
        Op::Put(bytes) => StoredValue::Bytes(bytes.clone()),
        Op::Delete => StoredValue::Deleted,
        Op::PutExternal(len) => match client
            .store()
            .get(&client.codec().data(cell, v.start_ts))
            .await?
        {
            Some(bytes) => StoredValue::Bytes(bytes),
            None => StoredValue::Missing { len: *len },
        },
    };
    Ok(CellVersion {
        commit_ts: v.commit_ts,
        start_ts: v.start_ts,
        value,
    })
}

/// The version of `cell` visible at `at` (the head's, else the newest `V` entry at or
/// below `at` that is not below the head's floor).
async fn visible_at(
    client: &Client,
    cell: &Cell,
    head: &Head,
    at: u64,
) -> Result<Vec<CellVersion>, WorkerError> {
    if let Some(v) = head.visible_at(at) {
        return Ok(vec![value_of(client, cell, v).await?]);
    }
    let range = client.codec().versions_at_or_below(cell, at);
    let found = client.store().scan(range, 1, ScanOrder::Forward).await?;
    for (key, bytes) in found {
        let v = Version::decode(&bytes).map_err(|why| TxnError::corrupt(&key, why))?;
        if v.commit_ts >= head.floor {
            return Ok(vec![value_of(client, cell, &v).await?]);
        }
    }
    Ok(Vec::new())
}

/// Every stored version of `cell`, newest first: the head's, then `V`'s (copies of the
/// head's and entries below the head's floor left out).
async fn versions_of(
    client: &Client,
    cell: &Cell,
    head: &Head,
) -> Result<Vec<CellVersion>, WorkerError> {
    let mut all: BTreeMap<u64, Version> = BTreeMap::new();
    for v in head.latest.iter().chain(head.recent.iter()) {
        all.insert(v.commit_ts, v.clone());
    }
    let range = client.codec().cell_range(Space::Version, cell);
    for (key, bytes) in scan_all(client.store().as_ref(), range, ScanOrder::Forward).await? {
        let v = Version::decode(&bytes).map_err(|why| TxnError::corrupt(&key, why))?;
        if v.commit_ts >= head.floor {
            all.entry(v.commit_ts).or_insert(v);
        }
    }
    let mut out = Vec::with_capacity(all.len());
    for v in all.values().rev() {
        out.push(value_of(client, cell, v).await?);
    }
    Ok(out)
}
