//! Reprocessing: queue a notification for every existing cell of an observed column, so an
//! observer added (or changed) after the cells were written runs on them.
//!
//! [`renotify`] goes through the rows of a table in pages (optionally only the rows
//! starting with a prefix). For each page it lists the column's cells from the head space,
//! reads them in a read-only snapshot at a fresh timestamp ([`Client::snapshot`]: locks
//! below it are resolved, or waited for, exactly as a reader does), and for each cell that
//! holds a value puts the notify key `Q(bucket, cell, c) = Committed { c }`, where `c` is
//! the commit_ts of the version read, through [`Client::put_notifications`]: the path a
//! commit's notify keys take, so the bucket is at or above the notify floor and settled
//! against it after the put (`percolator::design::notify`). Then it records the last
//! row done in a progress record in the meta space ([`RenotifyProgress`], by CAS). Cells
//! deleted or never committed are skipped.
//!
//! **Every committed value is processed.** A worker handling `Committed { c }` reads the
//! cell in a fresh transaction (start_ts above `c` and above the page's snapshot) and runs a
//! strong observer iff `max(c, latest commit_ts) > ack`: it sees the cell's newest value at
//! least as new as the one read. A value committed above the page's snapshot is committed
//! after the snapshot was drawn, by a transaction that puts its own notify key if its client
//! declares the column (`Client::observe_column`, done by `Registry::declare`): so run
//! renotify once every writer of the column declares it (writers started before the
//! observer existed do not). A cell locked by a running
//! transaction below the snapshot is waited for by the read; one locked above it notifies
//! on its own commit.
//!
//! **At most one run per cell, even across a resumed pass** (strong observers). A page cut
//! short after its keys were put and before its progress was recorded is done again on the
//! next call; it puts the same keys (same cell, same `c`: a cell changed meanwhile has its
//! own notification with a larger `c`), and the acknowledgment absorbs the second
//! (`m <= ack`). The acknowledgment also means a strong observer that has already handled a
//! cell's latest value does not run again: to reprocess with a *changed* observer, pass
//! `force`, which puts every key at `max(F, c)` with one timestamp `F` drawn when the pass
//! began and kept in its progress record (so a redone page still puts the same keys, and a
//! cell's first forced run sets `ack = F`). Weak observers run without acknowledgments: a
//! redone page may run them again (at least once, as always).
//!
//! **Write-once cells** (`percolator::design::once`) have records in the `W` space and no
//! head (or a head and records): a page lists the column's cells from both spaces, merged in
//! row order. Once it met a record, the pass declares the column write-once on `client`
//! ([`Client::write_once_column`]) before reading, so its snapshot reads the records (the
//! declaration only adds the records to what the client reads; a column with records must be
//! declared by every client that reads it anyway).
//!
//! Keys carry the version's commit_ts, so operators see old ages in the backlog (`status`,
//! `notifications`) for them; scanners take them at once (they are older than `hint_grace`).
//! A redone page's key that a worker handled (and deleted) less than a few seconds before,
//! in the same bucket, is left alone by that worker's scanners until its memory of recently
//! handled keys lets go of it, then handled as a duplicate: later, never lost.

mod progress;

pub use progress::{renotifies_in_progress, RenotifyProgress, RENOTIFY_META};

use crate::error::WorkerError;
use percolator::codec::{Key, Space};
use percolator::kv::{prefix_successor, RangePager, ScanOrder};
use percolator::record::Notification;
use percolator::{Cell, Client, TxnError};

/// Cells of the column per page unless told otherwise.
pub const DEFAULT_PAGE_SIZE: usize = 256;

/// How [`renotify`] goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenotifyOptions {
    /// Only rows starting with this (empty: every row). Passes with different prefixes have
    /// their own progress records.
    pub prefix: Vec<u8>,
    /// Cells of the column per page (at least 1): one snapshot read, one put of notify
    /// keys and one progress record write each.
    pub page_size: usize,
    /// Stop after this many pages (`None`: go to the end). The pass is then left in
    /// progress and the next call resumes it.
    pub max_pages: Option<usize>,
    /// Run strong observers again on cells they already handled (see the module docs). A
    /// pass in progress resumes only with the `force` it began with.
    pub force: bool,
}

impl Default for RenotifyOptions {
    fn default() -> Self {
        RenotifyOptions {
            prefix: Vec::new(),
            page_size: DEFAULT_PAGE_SIZE,
            max_pages: None,
            force: false,
        }
    }
}

/// What one call of [`renotify`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RenotifyReport {
    /// The pass's progress after this call (totals since the pass began).
    pub progress: RenotifyProgress,
    /// Whether this call resumed a pass an earlier call began.
    pub resumed: bool,
    /// Pages done by this call.
    pub pages: usize,
    /// Whether the pass reached the end (its progress record is then deleted); `false`:
    /// stopped at `max_pages`, call again to go on.
    pub finished: bool,
}

/// Queues a notification for every cell of `table`/`column` that holds a value (rows
/// starting with `options.prefix`), in pages, resuming a pass cut short where its progress
/// record says. See the module docs for what is guaranteed.
pub async fn renotify(
    client: &Client,
    table: &[u8],
    column: &[u8],
    options: &RenotifyOptions,
) -> Result<RenotifyReport, WorkerError> {
    let key = client
        .codec()
        .meta(RenotifyProgress::name(table, column, &options.prefix));
    let (mut raw, mut progress, resumed) = begin(client, &key, table, column, options).await?;
    let end = prefix_successor(&options.prefix).filter(|_| !options.prefix.is_empty());
    let mut pages = 0;
    loop {
        if options.max_pages.is_some_and(|max| pages >= max) {
            return Ok(RenotifyReport {
                progress,
                resumed,
                pages,
                finished: false,
            });
        }
        let start = match &progress.last_row {
            // The smallest row after the last one done.
            Some(row) => [row.as_slice(), &[0]].concat(),
            None => options.prefix.clone(),
        };
        let page = column_page(client, table, column, &start, end.as_deref(), options).await?;
        if page.written_once {
            client.write_once_column(table, column);
        }
        let notified = notify_page(client, &page.cells, progress.force_ts).await?;
        pages += 1;
        let mut next = progress.clone();
        next.rows_done += page.cells.len() as u64;
        next.notified += notified;
        if let Some(last) = page.cells.last() {
            next.last_row = Some(last.row.clone());
        }
        if page.last {
            client.store().delete(key.clone()).await?;
            tracing::info!(
                table = %table.escape_ascii(),
                column = %column.escape_ascii(),
                rows = next.rows_done,
                notified = next.notified,
                "renotify finished"
            );
            return Ok(RenotifyReport {
                progress: next,
                resumed,
                pages,
                finished: true,
            });
        }
        let new = next.encode();
        let out = client
            .store()
            .compare_and_swap(key.clone(), Some(raw.clone()), new.clone())
            .await?;
        if out.swapped || out.previous.as_deref() == Some(new.as_slice()) {
            (raw, progress) = (new, next);
        } else {
            // Another call of the same pass moved it (or finished it): go on from there.
            let Some(found) = out.previous else {
                return Ok(RenotifyReport {
                    progress: next,
                    resumed,
                    pages,
                    finished: true,
                });
            };
            tracing::debug!("renotify progress moved by another call; going on from it");
            progress = RenotifyProgress::decode(&key, &found)?;
            raw = found;
        }
    }
}

/// Forgets the pass over `table`/`column` (rows starting with `prefix`) that is in
/// progress: its progress record is deleted (a later call begins afresh); the
/// notifications it put stay queued. Returns the pass as it stood, if there was one.
pub async fn abandon(
    client: &Client,
    table: &[u8],
    column: &[u8],
    prefix: &[u8],
) -> Result<Option<RenotifyProgress>, WorkerError> {
    let key = client
        .codec()
        .meta(RenotifyProgress::name(table, column, prefix));
    let found = progress::read(client, &key).await?;
    if found.is_some() {
        client.store().delete(key).await?;
        tracing::info!(
            table = %table.escape_ascii(),
            column = %column.escape_ascii(),
            "renotify pass abandoned"
        );
    }
    Ok(found.map(|(_, progress)| progress))
}

/// Reads the pass's progress record, or creates it (the force timestamp is drawn and kept
/// before any notification is put). Returns its bytes, its meaning and whether it existed.
async fn begin(
    client: &Client,
    key: &[u8],
    table: &[u8],
    column: &[u8],
    options: &RenotifyOptions,
) -> Result<(Vec<u8>, RenotifyProgress, bool), WorkerError> {
    loop {
        if let Some((raw, found)) = progress::read(client, key).await? {
            if found.force_ts.is_some() != options.force {
                return Err(WorkerError::RenotifyMismatch {
                    table: table.escape_ascii().to_string(),
                    column: column.escape_ascii().to_string(),
                    force: found.force_ts.is_some(),
                });
            }
            tracing::info!(
                table = %table.escape_ascii(),
                column = %column.escape_ascii(),
                rows = found.rows_done,
                "resuming a renotify pass"
            );
            return Ok((raw, found, true));
        }
        let now = client
            .oracle()
            .get_timestamp()
            .await
            .map_err(TxnError::from)?;
        let fresh = RenotifyProgress::new(table, column, &options.prefix, now.0, options.force);
        let bytes = fresh.encode();
        let out = client
            .store()
            .compare_and_swap(key.to_vec(), None, bytes.clone())
            .await?;
        if out.swapped || out.previous.as_deref() == Some(bytes.as_slice()) {
            return Ok((bytes, fresh, false));
        }
        // Another call began the pass first: take its record.
    }
}

/// The cells of one page.
struct Page {
    /// The column's cells, in row order.
    cells: Vec<Cell>,
    /// Whether no row of the range is left after these.
    last: bool,
    /// Whether some of them have write-once records.
    written_once: bool,
}

/// Up to `page_size` cells of `column` in rows `[start, end)` of `table`: those with a head
/// and those with write-once records, merged in row order (one cell per row: the column is
/// fixed).
async fn column_page(
    client: &Client,
    table: &[u8],
    column: &[u8],
    start: &[u8],
    end: Option<&[u8]>,
    options: &RenotifyOptions,
) -> Result<Page, WorkerError> {
    let want = options.page_size.max(1);
    let (heads, heads_done) =
        column_cells(client, Space::Head, table, column, start, end, want).await?;
    let (once, once_done) =
        column_cells(client, Space::Once, table, column, start, end, want).await?;
    let written_once = !once.is_empty();
    let all: std::collections::BTreeSet<Cell> = heads.into_iter().chain(once).collect();
    let last = heads_done && once_done && all.len() <= want;
    Ok(Page {
        cells: all.into_iter().take(want).collect(),
        last,
        written_once,
    })
}

/// Up to `want` distinct cells of `column` in rows `[start, end)` of `table` with keys in
/// `space` (heads, or write-once records: several per cell), in row order, and whether the
/// range holds no more.
async fn column_cells(
    client: &Client,
    space: Space,
    table: &[u8],
    column: &[u8],
    start: &[u8],
    end: Option<&[u8]>,
    want: usize,
) -> Result<(Vec<Cell>, bool), WorkerError> {
    let range = client.codec().rows_range(space, table, start, end);
    let mut pager = RangePager::new(
        client.store().as_ref(),
        range,
        ScanOrder::Forward,
        want.min(1024),
    );
    let mut cells: Vec<Cell> = Vec::new();
    while let Some(keys) = pager.next_page().await? {
        for (key, _) in keys {
            let cell = match client.codec().decode(&key) {
                Ok(Key::Head(cell) | Key::Once(cell, _)) if cell.column == column => cell,
                _ => continue,
            };
            if cells.last() == Some(&cell) {
                continue;
            }
            if cells.len() >= want {
                return Ok((cells, false));
            }
            cells.push(cell);
        }
    }
    Ok((cells, true))
}

/// Reads `cells` in a snapshot at a fresh timestamp and puts a `Committed` notification for
/// each that holds a value. Returns how many were put.
async fn notify_page(
    client: &Client,
    cells: &[Cell],
    force_ts: Option<u64>,
) -> Result<u64, WorkerError> {
    if cells.is_empty() {
        return Ok(0);
    }
    let snapshot = client.snapshot().await?;
    let read = snapshot.get_many_versioned(cells).await?;
    let entries: Vec<(Cell, u64, Vec<u8>)> = cells
        .iter()
        .zip(read)
        .filter_map(|(cell, (value, commit_ts))| {
            value.as_ref()?;
            let c = force_ts.map_or(commit_ts?, |f| f.max(commit_ts.unwrap_or(0)));
            let record = Notification::Committed { commit_ts: c }.encode();
            Some((cell.clone(), c, record))
        })
        .collect();
    client.put_notifications(&entries).await?;
    Ok(entries.len() as u64)
}
