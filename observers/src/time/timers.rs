//! Timers: set in a transaction for a row and a tag, at an event time (fires once the low
//! watermark of a column passes it) or an oracle time (fires once the oracle passes it);
//! fired by [`fire_due`] (or a [`TimerDriver`]), each in its own transaction that deletes
//! the timer and runs the handler: a firing that commits is the only one.

use super::keys::{self, EVENT_KIND, ORACLE_KIND};
use super::watermark::{self, Column};
use crate::error::ObserverError;
use async_trait::async_trait;
use percolator::{Client, Transaction, TxnError};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// When a timer fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TimerAt {
    /// Once the low watermark of the driver's column passes this event time (ms): the
    /// watermark is above it (or is `u64::MAX`: all input ended).
    EventTime(u64),
    /// Once the oracle's physical time passes this (ms since the epoch).
    OracleTime(u64),
}

impl TimerAt {
    fn kind(self) -> u8 {
        match self {
            TimerAt::EventTime(_) => EVENT_KIND,
            TimerAt::OracleTime(_) => ORACLE_KIND,
        }
    }

    fn ms(self) -> u64 {
        match self {
            TimerAt::EventTime(t) | TimerAt::OracleTime(t) => t,
        }
    }

    fn from_parts(kind: u8, at: u64) -> TimerAt {
        if kind == ORACLE_KIND {
            TimerAt::OracleTime(at)
        } else {
            TimerAt::EventTime(at)
        }
    }
}

/// A timer as its handler gets it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timer {
    /// The row it was set for.
    pub row: Vec<u8>,
    /// Its tag (one timer per row and tag).
    pub tag: String,
    /// When it was due.
    pub at: TimerAt,
}

/// Sets (or moves) observer `observer`'s timer `tag` on `row` to `at`, in `txn`. Setting a
/// timer again, even to the same time, writes it again: a firing that runs concurrently
/// conflicts with this transaction, so one of the two retries and sees the other.
pub async fn set_timer(
    txn: &Transaction,
    observer: &str,
    row: &[u8],
    tag: &str,
    at: TimerAt,
) -> Result<(), TxnError> {
    let index = keys::index_cell(observer, row, tag)?;
    if let Some(bytes) = txn.get(&index).await? {
        let (kind, old) = keys::decode_index(&index, &bytes)?;
        txn.delete(keys::queue_cell(observer, kind, old, row, tag)?);
    }
    txn.set(
        keys::queue_cell(observer, at.kind(), at.ms(), row, tag)?,
        Vec::new(),
    );
    txn.set(index, keys::encode_index(at.kind(), at.ms()));
    Ok(())
}

/// The time observer `observer`'s timer `tag` on `row` is set to, in `txn`'s snapshot.
pub async fn timer(
    txn: &Transaction,
    observer: &str,
    row: &[u8],
    tag: &str,
) -> Result<Option<TimerAt>, TxnError> {
    let index = keys::index_cell(observer, row, tag)?;
    match txn.get(&index).await? {
        Some(bytes) => {
            let (kind, at) = keys::decode_index(&index, &bytes)?;
            Ok(Some(TimerAt::from_parts(kind, at)))
        }
        None => Ok(None),
    }
}

/// Deletes observer `observer`'s timer `tag` on `row` in `txn`; whether there was one.
pub async fn delete_timer(
    txn: &Transaction,
    observer: &str,
    row: &[u8],
    tag: &str,
) -> Result<bool, TxnError> {
    let Some(at) = timer(txn, observer, row, tag).await? else {
        return Ok(false);
    };
    txn.delete(keys::queue_cell(observer, at.kind(), at.ms(), row, tag)?);
    txn.delete(keys::index_cell(observer, row, tag)?);
    Ok(true)
}

/// Timers set and not fired yet for observer `observer`, in `txn`'s snapshot: (event-time,
/// oracle-time) counts.
pub async fn pending_timers(txn: &Transaction, observer: &str) -> Result<(u64, u64), TxnError> {
    let mut counts = [0u64; 2];
    for (i, kind) in [EVENT_KIND, ORACLE_KIND].into_iter().enumerate() {
        let prefix = keys::queue_prefix(observer, kind)?;
        let end = keys::prefix_end(&prefix);
        counts[i] = txn
            .scan(keys::TIMER_TABLE.as_bytes(), &prefix, end.as_deref())
            .await?
            .len() as u64;
    }
    Ok((counts[0], counts[1]))
}

/// Timers set and not fired yet, per observer, in `txn`'s snapshot: (observer, event-time,
/// oracle-time) counts.
pub async fn all_pending_timers(txn: &Transaction) -> Result<Vec<(String, u64, u64)>, TxnError> {
    let end = keys::prefix_end(b"q");
    let rows = txn
        .scan(keys::TIMER_TABLE.as_bytes(), b"q", end.as_deref())
        .await?;
    let mut counts: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
    for (cell, _) in rows {
        let Some((name, rest)) = keys::take_part(&cell.row[1..]) else {
            continue;
        };
        let entry = counts
            .entry(String::from_utf8_lossy(name).into_owned())
            .or_default();
        match rest.first() {
            Some(&ORACLE_KIND) => entry.1 += 1,
            _ => entry.0 += 1,
        }
    }
    Ok(counts.into_iter().map(|(n, (e, o))| (n, e, o)).collect())
}

/// Code run when a timer fires, in the transaction that deletes the timer (committed by the
/// framework, retried on conflicts).
#[async_trait]
pub trait OnTimer: Send + Sync + 'static {
    /// Handles `timer`; reads and writes go through `txn` (it may set timers again).
    async fn on_timer(&self, txn: Transaction, timer: Timer) -> Result<(), ObserverError>;
}

struct FnOnTimer<F>(F);

#[async_trait]
impl<F, Fut> OnTimer for FnOnTimer<F>
where
    F: Fn(Transaction, Timer) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ObserverError>> + Send + 'static,
{
    async fn on_timer(&self, txn: Transaction, timer: Timer) -> Result<(), ObserverError> {
        (self.0)(txn, timer).await
    }
}

/// An [`OnTimer`] from an async closure `|txn, timer| async move { ... }`.
pub fn on_timer_fn<F, Fut>(f: F) -> Arc<dyn OnTimer>
where
    F: Fn(Transaction, Timer) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), ObserverError>> + Send + 'static,
{
    Arc::new(FnOnTimer(f))
}

/// What one [`fire_due`] pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FireReport {
    /// The column's published watermark the pass fired event-time timers below.
    pub watermark_ms: Option<u64>,
    /// The oracle's physical time the pass fired oracle-time timers below.
    pub oracle_ms: u64,
    /// Timers whose firing committed.
    pub fired: u64,
    /// Due timers not fired: fired or moved by someone else meanwhile, or waiting for an
    /// earlier timer of their row.
    pub skipped: u64,
    /// Firings whose handler failed (the timer stays; tried again next pass).
    pub failed: u64,
    /// The pass found as many due timers as its limit: more may be due.
    pub more: bool,
}

/// A test of rows: whether a driver takes a row's timers.
pub type RowFilter = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

/// Which timers a pass fires, by row: `None` fires every one (see [`TimerSpec::takes`]).
pub type Takes = Option<RowFilter>;

/// One pass of observer `observer`'s timers: advances `watermark_of`'s low watermark
/// ([`watermark::advance`]), then fires, in time order, up to `limit` event-time timers
/// below it and up to `limit` oracle-time timers below the oracle's time, each in its own
/// transaction (conflicts retried). Exactly once: a firing deletes the timer in the
/// transaction that runs `handler`, so of two passes (two processes) only one commits it.
/// In time order per row: a timer waits while its row has an earlier one of its kind.
pub async fn fire_due(
    client: &Client,
    observer: &str,
    watermark_of: Option<&Column>,
    handler: &dyn OnTimer,
    limit: usize,
) -> Result<FireReport, ObserverError> {
    fire_due_taking(client, observer, watermark_of, handler, limit, &None).await
}

/// [`fire_due`], firing only the timers of rows `takes` accepts (a worker's share).
pub async fn fire_due_taking(
    client: &Client,
    observer: &str,
    watermark_of: Option<&Column>,
    handler: &dyn OnTimer,
    limit: usize,
    takes: &Takes,
) -> Result<FireReport, ObserverError> {
    let mut report = FireReport::default();
    if let Some(column) = watermark_of {
        report.watermark_ms = watermark::advance(client, column).await?;
    }
    let snapshot = client.snapshot().await?;
    report.oracle_ms = snapshot.start_ts().physical_ms();
    let limit = limit.max(1);
    let mut due = Vec::new();
    let mut full = false;
    let bounds = [
        (EVENT_KIND, report.watermark_ms),
        (ORACLE_KIND, Some(report.oracle_ms)),
    ];
    for (kind, below) in bounds {
        let Some(below) = below else { continue };
        let prefix = keys::queue_prefix(observer, kind)?;
        // Below the watermark; at the end of all input (`u64::MAX`) every timer, those set
        // at `u64::MAX` too (a window whose end saturated).
        let end = match below {
            u64::MAX => keys::prefix_end(&prefix),
            below => {
                let mut end = prefix.clone();
                end.extend_from_slice(&below.to_be_bytes());
                Some(end)
            }
        };
        // Pages from the start of the queue until `limit` timers this pass takes are found
        // (timers of other shares are passed over, not counted).
        let (mut taken, mut after) = (0, None);
        loop {
            let page = snapshot
                .scan_page(
                    keys::TIMER_TABLE.as_bytes(),
                    &prefix,
                    end.as_deref(),
                    after.as_ref(),
                    limit,
                )
                .await?;
            let exhausted = page.len() < limit;
            for (cell, _) in page {
                let Some((at, row, tag)) = keys::parse_queue_row(&prefix, &cell.row) else {
                    return Err(keys::corrupt(&cell, "a timer queue row").into());
                };
                after = Some(cell);
                if taken < limit && takes.as_ref().is_none_or(|t| t(&row)) {
                    taken += 1;
                    due.push(Timer {
                        row,
                        tag,
                        at: TimerAt::from_parts(kind, at),
                    });
                }
            }
            if taken >= limit {
                full = true;
                break;
            }
            if exhausted {
                break;
            }
        }
    }
    for timer in due {
        match fire_one(client, observer, handler, &timer).await {
            Ok(true) => report.fired += 1,
            Ok(false) => report.skipped += 1,
            Err(ObserverError::Txn(e)) if e.is_transient() => return Err(e.into()),
            Err(e) => {
                report.failed += 1;
                tracing::warn!(observer, row = %timer.row.escape_ascii(), tag = %timer.tag,
                    error = %e.render(), "a timer's handler failed; the timer stays and is tried again");
            }
        }
    }
    // More may be due only if this pass was cut at its limit and got somewhere (a pass of
    // failing or waiting timers does not loop at once).
    report.more = full && report.fired > 0;
    Ok(report)
}

/// Fires `timer` in its own transaction if it is still set to when it was found due and no
/// earlier timer of its kind waits on its row. Whether it fired.
async fn fire_one(
    client: &Client,
    observer: &str,
    handler: &dyn OnTimer,
    timer: &Timer,
) -> Result<bool, ObserverError> {
    client
        .run(|txn| async move {
            let (kind, at) = (timer.at.kind(), timer.at.ms());
            if timer_of(&txn, observer, timer).await? != Some(timer.at) {
                return Ok(false);
            }
            // An earlier timer of the row (another tag) fires first.
            let prefix = keys::index_prefix(observer, &timer.row)?;
            let end = keys::prefix_end(&prefix);
            for (cell, bytes) in txn
                .scan(keys::TIMER_TABLE.as_bytes(), &prefix, end.as_deref())
                .await?
            {
                let (k, t) = keys::decode_index(&cell, &bytes)?;
                if k == kind && t < at {
                    return Ok(false);
                }
            }
            txn.delete(keys::queue_cell(
                observer, kind, at, &timer.row, &timer.tag,
            )?);
            txn.delete(keys::index_cell(observer, &timer.row, &timer.tag)?);
            handler.on_timer(txn.clone(), timer.clone()).await?;
            Ok::<_, ObserverError>(true)
        })
        .await
}

async fn timer_of(
    txn: &Transaction,
    observer: &str,
    t: &Timer,
) -> Result<Option<TimerAt>, TxnError> {
    // The queue entry must still be there too (a reset to the same time rewrote it).
    let queue = keys::queue_cell(observer, t.at.kind(), t.at.ms(), &t.row, &t.tag)?;
    if txn.get(&queue).await?.is_none() {
        return Ok(None);
    }
    timer(txn, observer, &t.row, &t.tag).await
}

/// What a [`TimerDriver`] is to fire.
#[derive(Clone)]
pub struct TimerSpec {
    /// The observer whose timers these are (the name timers were set under).
    pub observer: String,
    /// The column whose low watermark event-time timers wait for (`None`: only oracle-time
    /// timers fire).
    pub watermark_of: Option<Column>,
    /// The handler.
    pub handler: Arc<dyn OnTimer>,
    /// Pause between passes that found nothing more due.
    pub poll: Duration,
    /// Timers fired per pass and kind at most.
    pub limit: usize,
    /// Fires only the timers of rows this accepts (`None`: all). [`TimerDriver::start_on`]
    /// sets a worker's share of the hash split, so the timers of a namespace are split
    /// across its workers and handed over with their shares when workers come and go
    /// (which one fires a timer never decides whether it fires once: the firing's
    /// transaction does).
    pub takes: Takes,
}

impl TimerSpec {
    /// Timers of `observer`, event-time ones on `watermark_of`, passes every 100 ms.
    pub fn new(observer: &str, watermark_of: Option<Column>, handler: Arc<dyn OnTimer>) -> Self {
        TimerSpec {
            observer: observer.to_string(),
            watermark_of,
            handler,
            poll: Duration::from_millis(100),
            limit: 256,
            takes: None,
        }
    }
}

/// Counters of a [`TimerDriver`].
#[derive(Debug, Default)]
pub struct TimerStats {
    /// Timers fired.
    pub fired: AtomicU64,
    /// Handler failures.
    pub failed: AtomicU64,
    /// Passes that failed on a store or oracle error (retried next pass).
    pub errors: AtomicU64,
    /// The last published watermark seen (`u64::MAX` at the end of input; 0: none yet).
    pub watermark_ms: AtomicU64,
}

/// A background task that runs [`fire_due`] passes for one observer until shut down.
pub struct TimerDriver {
    stop: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
    stats: Arc<TimerStats>,
}

impl TimerDriver {
    /// Starts the passes of `spec` on `client`.
    pub fn start(client: Client, spec: TimerSpec) -> Self {
        let stop = Arc::new(tokio::sync::Notify::new());
        let stats = Arc::new(TimerStats::default());
        let task = tokio::spawn(drive(client, spec, stop.clone(), stats.clone()));
        TimerDriver { stop, task, stats }
    }

    /// Starts the passes of `spec` on `worker`'s client, firing only the timers of the
    /// rows in `worker`'s share of the hash split (and of shares whose owner is stalled),
    /// as its scanners take notifications.
    pub fn start_on(worker: &crate::Worker, spec: TimerSpec) -> Self {
        let takes = worker.share_of_rows();
        Self::start(
            worker.client().clone(),
            TimerSpec {
                takes: Some(takes),
                ..spec
            },
        )
    }

    /// Its counters.
    pub fn stats(&self) -> &Arc<TimerStats> {
        &self.stats
    }

    /// Stops it at once, wherever its pass is (a process crash, in tests and simulations):
    /// a firing in flight commits or not, as a killed process's would.
    pub fn abort(self) {
        self.task.abort();
    }

    /// Stops it after the pass in progress.
    pub async fn shutdown(self) {
        self.stop.notify_one();
        let _ = self.task.await;
    }
}

async fn drive(
    client: Client,
    spec: TimerSpec,
    stop: Arc<tokio::sync::Notify>,
    stats: Arc<TimerStats>,
) {
    let mut backoff = spec.poll;
    loop {
        let pass = fire_due_taking(
            &client,
            &spec.observer,
            spec.watermark_of.as_ref(),
            spec.handler.as_ref(),
            spec.limit,
            &spec.takes,
        )
        .await;
        let pause = match pass {
            Ok(report) => {
                stats.fired.fetch_add(report.fired, Ordering::Relaxed);
                stats.failed.fetch_add(report.failed, Ordering::Relaxed);
                if let Some(w) = report.watermark_ms {
                    stats.watermark_ms.store(w, Ordering::Relaxed);
                }
                backoff = spec.poll;
                if report.more {
                    Duration::ZERO
                } else {
                    spec.poll
                }
            }
            Err(e) => {
                stats.errors.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(observer = %spec.observer, error = %e.render(), "a timer pass failed; retried");
                backoff = (backoff * 2).min(Duration::from_secs(5));
                backoff
            }
        };
        tokio::select! {
            biased;
            _ = stop.notified() => return,
            _ = tokio::time::sleep(pause) => {}
        }
    }
}
