//! Cells of a table as stored: each with its lock (shown, not resolved) and its visible
//! version or every version still stored. Cells of write-once columns
//! (`percolator::design::once`) have records in the `W` space instead of (or besides) a
//! head: their committed records are their versions and a pending record is shown as their
//! lock, whether or not this client declared the column.

use super::locks::{decode_head, LockInfo};
use super::oracle_ms;
use crate::error::WorkerError;
use percolator::codec::{Key, Space};
use percolator::kv::{scan_all, RangePager, ScanOrder};
use percolator::record::{Head, Lock, OnceRecord, Op, Version};
use percolator::txn::TxnStatus;
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
            out.extend(shown(cell, lock, versions, history));
        }
    }
    // The write-once records of the same rows, merged in (row, column) order: the first
    // `limit` of both lists are the first `limit` cells of the table.
    let once = once_cells(client, table, rows, at, history, limit, now).await?;
    if once.is_empty() {
        return Ok(out);
    }
    let mut all: BTreeMap<Cell, CellView> = out.into_iter().map(|v| (v.cell.clone(), v)).collect();
    for view in once {
        match all.get_mut(&view.cell) {
            None => {
                all.insert(view.cell.clone(), view);
            }
            Some(found) => {
                found.lock = found.lock.take().or(view.lock);
                found.versions.extend(view.versions);
                found
                    .versions
                    .sort_by_key(|v| std::cmp::Reverse(v.commit_ts));
                found.versions.dedup_by_key(|v| v.commit_ts);
                if !history {
                    found.versions.truncate(1);
                }
            }
        }
    }
    Ok(all.into_values().take(limit).collect())
}

/// The cells of `table` in `rows` that have write-once records, at most `limit` of them
/// shown: their committed records as versions (with `history` all, else the newest at or
/// below `at`; a record still marked pending whose primary committed counts as committed),
/// the newest record of an undecided writer as their lock (not resolved).
async fn once_cells(
    client: &Client,
    table: &[u8],
    rows: &RowRange,
    at: u64,
    history: bool,
    limit: usize,
    now: u64,
) -> Result<Vec<CellView>, WorkerError> {
    let range = client
        .codec()
        .rows_range(Space::Once, table, &rows.start, rows.end.as_deref());
    let mut pager = RangePager::new(client.store().as_ref(), range, ScanOrder::Forward, 256);
    let mut out: Vec<CellView> = Vec::new();
    // The cell whose records are being read, its committed versions and its pending lock.
    let mut current: Option<(Cell, Vec<CellVersion>, Option<LockInfo>)> = None;
    let finish = |(cell, mut versions, lock): (Cell, Vec<CellVersion>, Option<LockInfo>),
                  out: &mut Vec<CellView>| {
        versions.sort_by_key(|v| std::cmp::Reverse(v.commit_ts));
        if !history {
            versions.retain(|v| v.commit_ts <= at);
            versions.truncate(1);
        }
        out.extend(shown(cell, lock, versions, history));
    };
    'pages: while let Some(page) = pager.next_page().await? {
        for (key, raw) in page {
            let Ok(Key::Once(cell, start_ts)) = client.codec().decode(&key) else {
                continue;
            };
            if current.as_ref().is_none_or(|(c, _, _)| *c != cell) {
                if let Some(done) = current.take() {
                    finish(done, &mut out);
                    if out.len() >= limit {
                        break 'pages;
                    }
                }
                current = Some((cell.clone(), Vec::new(), None));
            }
            let Some((_, versions, lock)) = current.as_mut() else {
                continue;
            };
            let record = OnceRecord::decode(&raw).map_err(|why| TxnError::corrupt(&key, why))?;
            match record {
                OnceRecord::Committed { commit_ts, op } => {
                    let version = Version {
                        commit_ts,
                        start_ts,
                        op,
                    };
                    versions.push(value_of(client, &cell, &version).await?);
                }
                OnceRecord::Pending {
                    primary,
                    ttl_ms,
                    op,
                } => {
                    // Records stay pending until a reader or GC rewrites them: their fate is
                    // their primary's, read here without fencing anyone (an infinite TTL).
                    let status = client
                        .txn_status_with_ttl(&primary, Timestamp(start_ts), u64::MAX)
                        .await?;
                    match status {
                        TxnStatus::Committed(commit_ts) => {
                            let version = Version {
                                commit_ts: commit_ts.0,
                                start_ts,
                                op,
                            };
                            versions.push(value_of(client, &cell, &version).await?);
                            continue;
                        }
                        TxnStatus::RolledBack => continue,
                        _ => {}
                    }
                    if lock.as_ref().is_none_or(|l| l.lock.start_ts < start_ts) {
                        let pending = Lock {
                            start_ts,
                            primary: Some(primary),
                            op,
                            ttl_ms,
                        };
                        *lock = Some(LockInfo::new(cell.clone(), pending, now));
                    }
                }
            }
        }
    }
    if let Some(done) = current.take() {
        if out.len() < limit {
            finish(done, &mut out);
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

/// The view of `cell` a scan shows, if any: a cell with a lock, or with versions (with
/// `history`), or whose visible version is not a delete.
fn shown(
    cell: Cell,
    lock: Option<LockInfo>,
    versions: Vec<CellVersion>,
    history: bool,
) -> Option<CellView> {
    let show = lock.is_some()
        || if history {
            !versions.is_empty()
        } else {
            versions
                .first()
                .is_some_and(|v| v.value != StoredValue::Deleted)
        };
    show.then_some(CellView {
        cell,
        lock,
        versions,
    })
}
