//! The index of parked clicks by due time, and the sweep that reads it (`photon::design::growth`).
//!
//! A click parked on its query's pending list also gets an index cell
//! `parked/<bucket:012>/<query_id>/<click_id>`, whose `bucket` (a second, ms / 1000) is at or
//! after the latest time its transaction could commit ([`entry_bucket`]). The sweep keeps a
//! cursor (`control/parked/cursor`): every index cell below it has been handled. A pass
//! reads the cursor `c` in a snapshot at `N`, handles the cells of buckets `[c, n)` with
//! `n` the second of `N`, and moves the cursor to `n`. Invariants:
//!
//! - **Committed before its bucket**: a transaction writing an index cell commits at a
//!   physical time at or before the cell's bucket, or not at all (the lifetime bound). So a
//!   snapshot at `N` already sees every index cell below `n` that will ever exist: nothing
//!   can appear behind the cursor.
//! - **Handled**: a cell `(q, c)` is handled when, in a snapshot after it was written, click
//!   `c` is not on `q`'s pending list (woken already: the cell is stale), or a transaction
//!   has woken it (query present or horizon passed), or has filed a new index cell for it
//!   (still waiting), whose bucket is later than that transaction's start, so above `n`.
//! - The cursor only grows (a transaction reads it and writes the maximum), and a pass moves
//!   it only over buckets it has handled completely; a failed pass moves it to the bucket
//!   where it failed at most.
//!
//! A pass therefore visits the index cells that fell due since the previous pass (plus the
//! pending rows they name), not the history: cells below the cursor are never read again.
//!
//! Index cells are write-once (`schema::declare_columns`): a park puts a record in its
//! commit's first round instead of locking and committing a head (two compare-and-swaps,
//! two RPCs on TiKV). Reads, and so the invariants above, are the same for records and
//! heads. A record is visible from its writer's commit_ts, as a version is, and a reader
//! waits on an undecided one, as on a lock. Two writers of one cell (a park and a refile in
//! the same second) write the same empty value, so no conflict between them is needed. A
//! refile that writes nothing else writes its first cell through the head, as every
//! transaction needs a primary. The sweep's scan reads heads and records, so cells written
//! as heads by earlier builds are read too.

use crate::event::Click;
use crate::expiry::Horizon;
use crate::schema::{click_cell, pending_cell, query_cell, Stored, CONTROL};
use percolator::{Cell, Client, Transaction, TxnError};
use std::collections::BTreeSet;

/// The index table: `parked/<bucket:012>/<query_id>/<click_id>` (value empty).
pub const PARKED: &str = "parked";

/// Index cells read per page of a sweep pass.
const PAGE: usize = 1024;

/// The sweep's cursor: every index cell of a bucket below it has been handled.
pub fn cursor_cell() -> Cell {
    Cell::new(CONTROL, "parked", "cursor")
}

/// The index cell of `click_id`, parked on `query_id`, due in `bucket`.
pub fn entry_cell(bucket: u64, query_id: &str, click_id: &str) -> Cell {
    Cell::new(PARKED, format!("{bucket:012}/{query_id}"), click_id)
}

/// The row prefix of `bucket` (rows of later buckets sort after it).
fn bucket_row(bucket: u64) -> String {
    format!("{bucket:012}/")
}

/// The bucket of an index cell written by `txn` for a click due at `due_ms` (0: as soon as
/// possible): not before `due_ms`, and not before the latest second at which `txn` could
/// commit, so that the cell is committed before its bucket comes (see the module doc).
pub fn entry_bucket(txn: &Transaction, due_ms: u64) -> u64 {
    txn.commit_deadline_ms().max(due_ms).div_ceil(1000)
}

/// Files `click_id` (waiting for `query_id`) in the index, in `txn`: the sweep looks at it
/// once `max_lifetime` has passed (a wake-up lost by a bug, a dead-lettered wake) and, if it
/// is still waiting then, again when its horizon passes.
pub fn file(txn: &Transaction, query_id: &str, click_id: &str) {
    txn.set(entry_cell(entry_bucket(txn, 0), query_id, click_id), "");
}

/// What one sweep pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SweepStats {
    /// Index cells read (due in this pass).
    pub visited: u64,
    /// Index cells whose click was no longer parked (woken meanwhile).
    pub stale: u64,
    /// Clicks notified (query present, or horizon passed).
    pub notified: u64,
    /// Clicks still waiting, filed again for their horizon.
    pub refiled: u64,
    /// Pending rows read by the one-off full pass of a store without a cursor.
    pub legacy_rows: u64,
}

/// One sweep pass: handles every index cell that fell due since the cursor, then moves the
/// cursor (see the module doc). A store without a cursor (new, or written before the index
/// existed) first gets one full pass over the pending table that files every waiting click.
pub async fn sweep(client: &Client, horizon: impl Into<Horizon>) -> Result<SweepStats, TxnError> {
    let horizon = horizon.into();
    let mut stats = SweepStats::default();
    let snapshot = client.snapshot().await?;
    let ts = snapshot.start_ts();
    let cursor = match read_cursor(&snapshot).await? {
        Some(cursor) => cursor,
        None => {
            legacy_pass(client, horizon, &mut stats).await?;
            advance_cursor(client, 0).await?;
            return Ok(stats);
        }
    };
    let now = ts.physical_ms() / 1000;
    if now <= cursor {
        return Ok(stats);
    }
    let (start, end) = (bucket_row(cursor), bucket_row(now));
    let mut after: Option<Cell> = None;
    loop {
        let page = snapshot
            .scan_page(
                PARKED.as_bytes(),
                start.as_bytes(),
                Some(end.as_bytes()),
                after.as_ref(),
                PAGE,
            )
            .await?;
        let full = page.len() >= PAGE;
        // Cells come in (bucket, query, click) order: one group per index row.
        let mut group: Vec<Cell> = Vec::new();
        for (cell, _) in page {
            if group.last().is_some_and(|last| last.row != cell.row) {
                handle_row(client, &snapshot, horizon, &group, &mut stats).await?;
                group.clear();
            }
            after = Some(cell.clone());
            group.push(cell);
        }
        if !group.is_empty() {
            handle_row(client, &snapshot, horizon, &group, &mut stats).await?;
        }
        if !full {
            break;
        }
    }
    advance_cursor(client, now).await?;
    Ok(stats)
}

/// Whether the index holds a cell in `snapshot` that no sweep has handled yet (at or after
/// the cursor): a click filed for a later second, which the first sweep after that second
/// visits. A drain that waits for every horizon to pass waits for these too.
pub async fn filed_ahead(snapshot: &Transaction) -> Result<bool, TxnError> {
    let start = bucket_row(read_cursor(snapshot).await?.unwrap_or(0));
    let page = snapshot
        .scan_page(PARKED.as_bytes(), start.as_bytes(), None, None, 1)
        .await?;
    Ok(!page.is_empty())
}

/// Handles the index cells of one row (one bucket, one query). On failure the cursor moves
/// to this row's bucket (everything before it is handled) and the error is returned.
async fn handle_row(
    client: &Client,
    snapshot: &Transaction,
    horizon: Horizon,
    cells: &[Cell],
    stats: &mut SweepStats,
) -> Result<(), TxnError> {
    let Some(first) = cells.first() else {
        return Ok(());
    };
    let row = String::from_utf8_lossy(&first.row).into_owned();
    let Some((bucket, query_id)) = row.split_once('/') else {
        return Ok(()); // Not an index row: nothing of ours.
    };
    let bucket: u64 = bucket.parse().unwrap_or(0);
    stats.visited += cells.len() as u64;
    let due: BTreeSet<String> = cells
        .iter()
        .map(|c| String::from_utf8_lossy(&c.column).into_owned())
        .collect();
    let result = async {
        // In the pass's snapshot first: a click no longer on the list was woken (a later
        // park of it files a cell of its own), so most cells cost this one read.
        let waiting = read_list(snapshot, query_id).await?;
        let still = due.iter().filter(|c| waiting.contains(*c)).count() as u64;
        stats.stale += due.len() as u64 - still;
        if still == 0 {
            return Ok(());
        }
        let (notified, refiled) = client
            .run(|txn| sweep_row(txn, query_id.to_string(), Some(due.clone()), horizon))
            .await?;
        stats.notified += notified;
        stats.refiled += refiled;
        Ok::<_, TxnError>(())
    }
    .await;
    if let Err(e) = result {
        if let Err(cursor_error) = advance_cursor(client, bucket).await {
            tracing::debug!(error = %cursor_error, "sweep cursor not moved");
        }
        return Err(e);
    }
    Ok(())
}

/// The clicks on `query_id`'s pending list in `txn`'s snapshot.
async fn read_list(txn: &Transaction, query_id: &str) -> Result<Vec<String>, TxnError> {
    Ok(match txn.get(&pending_cell(query_id)).await? {
        Some(b) => serde_json::from_slice(&b).unwrap_or_default(),
        None => Vec::new(),
    })
}

/// Wakes the clicks of `query_id`'s pending row whose query arrived or whose horizon passed,
/// taking them off the list in the same transaction (so a click is woken once), and files
/// the clicks of `refile` (all, if `None`) that still wait again, due at their horizon.
/// Writes nothing when nothing changes. Returns (clicks notified, clicks filed again).
async fn sweep_row(
    txn: Transaction,
    query_id: String,
    refile: Option<BTreeSet<String>>,
    horizon: Horizon,
) -> Result<(u64, u64), TxnError> {
    let cell = pending_cell(&query_id);
    let waiting = read_list(&txn, &query_id).await?;
    if waiting.is_empty() {
        return Ok((0, 0));
    }
    let arrived = txn.get(&query_cell(&query_id)).await?.is_some();
    let now = crate::expiry::now(&txn, horizon.expiry).await?;
    let mut still_waiting = Vec::new();
    let (mut notified, mut refiled) = (0, 0);
    for click_id in waiting {
        let event_time = match txn.get(&click_cell(&click_id)).await? {
            Some(b) => serde_json::from_slice::<Stored<Click>>(&b)
                .ok()
                .map(|s| s.event.event_time),
            None => None,
        };
        let due_ms = event_time.map(|t| t.saturating_add(horizon.ms()));
        let expired = due_ms.is_some_and(|due| now > due);
        if arrived || expired {
            txn.notify(click_cell(&click_id));
            notified += 1;
            continue;
        }
        if refile.as_ref().is_none_or(|r| r.contains(&click_id)) {
            let bucket = entry_bucket(&txn, due_ms.unwrap_or(0));
            txn.set(entry_cell(bucket, &query_id, &click_id), "");
            refiled += 1;
        }
        still_waiting.push(click_id);
    }
    if notified == 0 {
        if refiled == 0 {
            txn.rollback(); // Nothing to write.
        }
        return Ok((0, refiled));
    }
    if still_waiting.is_empty() {
        txn.delete(cell);
    } else {
        txn.set(cell, serde_json::to_vec(&still_waiting).unwrap_or_default());
    }
    Ok((notified, refiled))
}

/// The one-off pass of a store without a cursor: the whole pending table, filing every click
/// that still waits (rows parked before the index existed have no index cells).
async fn legacy_pass(
    client: &Client,
    horizon: Horizon,
    stats: &mut SweepStats,
) -> Result<(), TxnError> {
    let mut rows = Vec::new();
    crate::verify::for_each_cell(client, crate::schema::PENDING, |cell, _| {
        rows.push(cell.row)
    })
    .await?;
    for row in rows {
        stats.legacy_rows += 1;
        let query_id = String::from_utf8_lossy(&row).into_owned();
        let (notified, refiled) = client
            .run(|txn| sweep_row(txn, query_id.clone(), None, horizon))
            .await?;
        stats.notified += notified;
        stats.refiled += refiled;
    }
    Ok(())
}

/// Deletes outright (raw deletes of records, heads, versions and values) the index cells of
/// the buckets below both the sweep's cursor and the GC safe point `safe_ms`, which GC has
/// just passed; returns the keys deleted. Why nothing is lost: no pass reads below the cursor
/// again (a pass that read an older cursor only finds fewer cells it has handled anyway),
/// and below the safe point no transaction that could write or lock such a cell is left (a
/// transaction filing bucket `b` commits by `b`, GC resolved every lock and record below its
/// safe point, and no transaction older than the safe point can still put either). Without
/// this, every park would leave its index cell forever.
///
/// `from` is a bucket below which an earlier purge has deleted everything (0 if unknown):
/// the scans start there, so a pass does not walk the delete markers of earlier passes.
/// Returns the keys deleted and the bucket below which the index is now purged (the next
/// call's `from`).
pub async fn purge_handled(
    client: &Client,
    safe_ms: u64,
    from: u64,
) -> Result<(usize, u64), TxnError> {
    let txn = client.begin().await?;
    let cursor = read_cursor(&txn).await?;
    txn.rollback();
    let Some(limit) = cursor.map(|c| c.min(safe_ms / 1000)).filter(|l| *l > from) else {
        return Ok((0, from));
    };
    let (start, end) = (bucket_row(from), bucket_row(limit));
    // The index is never observed: it has no notify keys.
    let deleted =
        crate::schema::purge_rows(client, PARKED, start.as_bytes(), end.as_bytes()).await?;
    Ok((deleted, limit))
}

/// The sweep's cursor in `txn`'s snapshot (`None`: no sweep has set one).
async fn read_cursor(txn: &Transaction) -> Result<Option<u64>, TxnError> {
    Ok(txn
        .get(&cursor_cell())
        .await?
        .map(|bytes| parse_u64(&bytes)))
}

/// Moves the cursor up to `to` (never down).
async fn advance_cursor(client: &Client, to: u64) -> Result<(), TxnError> {
    client
        .run(|txn| async move {
            let current = read_cursor(&txn).await?;
            if current.is_none_or(|c| c < to) {
                txn.set(cursor_cell(), to.to_string());
            }
            Ok::<_, TxnError>(())
        })
        .await
}

fn parse_u64(bytes: &[u8]) -> u64 {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}
