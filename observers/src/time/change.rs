//! Changes that carry an event time: the writer marks the cell pending at its event time
//! (in its transaction), the observer takes the mark (in its run's transaction) and learns
//! the event time and whether the change is late.

use super::keys;
use super::watermark::{self, Column};
use crate::error::ObserverError;
use crate::registry::Observer;
use async_trait::async_trait;
use percolator::{Cell, Client, Transaction, TxnError};
use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};

/// Marks `cell`'s change in `txn` as pending at event time `event_time_ms` (ms): the column's
/// low watermark stays at or below it until an observer takes the mark ([`take`]). A cell
/// written twice before its observer ran keeps the earlier event time.
pub async fn mark(txn: &Transaction, cell: &Cell, event_time_ms: u64) -> Result<(), TxnError> {
    let marker = keys::pending_cell(cell)?;
    let old = match txn.get(&marker).await? {
        Some(bytes) => {
            Some(keys::be_u64(&bytes).ok_or_else(|| keys::corrupt(&marker, "a pending marker"))?)
        }
        None => None,
    };
    put_mark(txn, cell, marker, old, event_time_ms)
}

/// Writes the mark of `cell` (found at `old`) at the least of `old` and `e`, with its
/// by-time index entry.
fn put_mark(
    txn: &Transaction,
    cell: &Cell,
    marker: Cell,
    old: Option<u64>,
    e: u64,
) -> Result<(), TxnError> {
    match old {
        Some(old) if old <= e => {}
        _ => {
            if let Some(old) = old {
                txn.delete(keys::by_time_cell(cell, old)?);
            }
            txn.set(keys::by_time_cell(cell, e)?, Vec::new());
            txn.set(marker, e.to_be_bytes().to_vec());
        }
    }
    Ok(())
}

/// [`mark`] for many cells at once (one batched read of their marks).
pub async fn mark_many(txn: &Transaction, cells: &[(Cell, u64)]) -> Result<(), TxnError> {
    if cells.is_empty() {
        return Ok(());
    }
    // The least event time per cell of the batch first (a cell written twice in it).
    let mut least: std::collections::BTreeMap<&Cell, u64> = std::collections::BTreeMap::new();
    for (cell, e) in cells {
        let entry = least.entry(cell).or_insert(*e);
        *entry = (*entry).min(*e);
    }
    let markers = least
        .keys()
        .map(|cell| keys::pending_cell(cell))
        .collect::<Result<Vec<_>, _>>()?;
    let found = txn.get_many(&markers).await?;
    for ((marker, old), (cell, e)) in markers.into_iter().zip(found).zip(least) {
        let old = match old {
            Some(bytes) => Some(
                keys::be_u64(&bytes).ok_or_else(|| keys::corrupt(&marker, "a pending marker"))?,
            ),
            None => None,
        };
        put_mark(txn, cell, marker, old, e)?;
    }
    Ok(())
}

/// Writes `value` to `cell` in `txn` as a change at event time `event_time_ms` ([`mark`]).
pub async fn set_timed(
    txn: &Transaction,
    cell: Cell,
    value: impl Into<Vec<u8>>,
    event_time_ms: u64,
) -> Result<(), TxnError> {
    mark(txn, &cell, event_time_ms).await?;
    txn.set(cell, value);
    Ok(())
}

/// A timed change as its observer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Change {
    /// The change's event time (the least of the writes the run covers).
    pub event_time_ms: u64,
    /// The column's published low watermark in the run's snapshot.
    pub watermark_ms: Option<u64>,
    /// The event time is below the watermark: whatever waited for the watermark to pass it
    /// (a timer, a window) may have fired already. The author decides: drop and count, or
    /// update and re-emit.
    pub late: bool,
    /// The change has held the column's watermark at or below its event time since it
    /// committed, and does until this run commits: not late, at or above every source's
    /// stored watermark in this run's snapshot, and the column has no upstream column (so no
    /// advance that missed its mark passed it either). Nothing that waits for the watermark to pass its event time (a window's
    /// timer) can fire before this run commits, so the run may rely on a timer already set
    /// instead of setting it again (the write conflict a firing needs otherwise:
    /// `crate::design::time`).
    pub held: bool,
}

/// Takes the pending mark of `cell`'s change in `txn` (an observer's run): deletes it (the
/// run's commit releases the column's watermark) and returns the change's event time and
/// lateness. `None`: the change carried no event time.
pub async fn take(txn: &Transaction, cell: &Cell) -> Result<Option<Change>, TxnError> {
    let marker = keys::pending_cell(cell)?;
    let Some(bytes) = txn.get(&marker).await? else {
        return Ok(None);
    };
    let event_time_ms =
        keys::be_u64(&bytes).ok_or_else(|| keys::corrupt(&marker, "a pending marker"))?;
    txn.delete(keys::by_time_cell(cell, event_time_ms)?);
    txn.delete(marker);
    let column = Column::of(cell);
    let watermark_ms = watermark::published(txn, &column).await?;
    let late = watermark_ms.is_some_and(|w| event_time_ms < w);
    if late {
        count_late(&column);
    }
    // At or above every source's stored watermark (each only grows, so no advance before
    // this snapshot used a larger one, idle or not). An upstream column's watermark is
    // computed, and need not only grow (a late change there lowers it): a column with one
    // is never held, its runs take the write conflict instead.
    let held = !late
        && watermark::upstreams(txn, &column).await?.is_empty()
        && watermark::sources(txn, &column)
            .await?
            .iter()
            .all(|(_, m)| event_time_ms >= m.watermark_ms);
    Ok(Some(Change {
        event_time_ms,
        watermark_ms,
        late,
        held,
    }))
}

/// Sets aside the pending mark of `cell`'s change, whose notification is being
/// dead-lettered: the column's watermark no longer waits for a change no worker will run
/// until an operator replays it ([`restore`] then marks it again, and its run is told it is
/// late if the watermark passed it meanwhile).
pub(crate) async fn set_aside(client: &Client, cell: &Cell) -> Result<(), TxnError> {
    let (marker, aside) = (keys::pending_cell(cell)?, keys::set_aside_cell(cell)?);
    client
        .run(|txn| {
            let (marker, aside) = (marker.clone(), aside.clone());
            async move {
                if let Some(bytes) = txn.get(&marker).await? {
                    if let Some(e) = keys::be_u64(&bytes) {
                        txn.delete(keys::by_time_cell(cell, e)?);
                    }
                    txn.delete(marker);
                    txn.set(aside, bytes);
                }
                Ok::<_, TxnError>(())
            }
        })
        .await
}

/// Marks `cell`'s change pending again at the event time [`set_aside`] kept (a dead letter
/// replayed).
pub(crate) async fn restore(client: &Client, cell: &Cell) -> Result<(), TxnError> {
    let aside = keys::set_aside_cell(cell)?;
    client
        .run(|txn| {
            let aside = aside.clone();
            async move {
                if let Some(bytes) = txn.get(&aside).await? {
                    let e = keys::be_u64(&bytes)
                        .ok_or_else(|| keys::corrupt(&aside, "a set-aside mark"))?;
                    txn.delete(aside);
                    mark(&txn, cell, e).await?;
                }
                Ok::<_, TxnError>(())
            }
        })
        .await
}

fn late_counts() -> &'static Mutex<BTreeMap<Column, u64>> {
    static LATE: OnceLock<Mutex<BTreeMap<Column, u64>>> = OnceLock::new();
    LATE.get_or_init(Default::default)
}

fn count_late(column: &Column) {
    let mut counts = late_counts().lock().unwrap_or_else(|p| p.into_inner());
    *counts.entry(column.clone()).or_default() += 1;
}

/// Late changes taken by this process, per column (a run retried after a conflict counts
/// its change again): what `percolator_observer_late_changes_total` exports.
pub fn late_changes() -> Vec<(Column, u64)> {
    let counts = late_counts().lock().unwrap_or_else(|p| p.into_inner());
    counts.iter().map(|(c, n)| (c.clone(), *n)).collect()
}

struct TimedFn<F>(F);

#[async_trait]
impl<F, Fut> Observer for TimedFn<F>
where
    F: Fn(Transaction, Cell, Option<Change>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ObserverError>> + Send + 'static,
{
    async fn observe(&self, txn: Transaction, cell: Cell) -> Result<(), ObserverError> {
        let change = take(&txn, &cell).await?;
        (self.0)(txn, cell, change).await
    }
}

/// An [`Observer`] of a timed column from an async closure `|txn, cell, change| async move {
/// ... }`: each run takes the change's pending mark ([`take`]) and gets its [`Change`]
/// (`None` for a write without an event time).
pub fn timed_observer_fn<F, Fut>(f: F) -> Arc<dyn Observer>
where
    F: Fn(Transaction, Cell, Option<Change>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ObserverError>> + Send + 'static,
{
    Arc::new(TimedFn(f))
}
