//! Event time in the simulation (`observers::time`, issue 41): two loaders write timed
//! clicks out of order (within a bound), with redeliveries and a few late ones, and one of
//! them publishes its source's watermark; stragglers land just above the published
//! watermark; a strong observer adds on-time clicks to their 250 ms window (a cell per
//! click) and sets the window's timer; timer drivers on every worker fire each window once
//! its column's watermark passes the window's end, recording the count.
//!
//! Checked at the end ([`check`]): every loaded click ran once and was counted on time or
//! taken as late; each window fired at most once, and exactly once with the count of its
//! on-time clicks if it had any (a firing that missed an on-time click of its window is the
//! watermark passing a pending change, E1; two firings are a timer fired twice, E2); no
//! mark, timer or held-back watermark is left.

use crate::model::Shared;
use crate::rng::SimRng;
use crate::schema;
use crate::workload::{commit_retrying, Ctx};
use observers::time::{self, Column, TimerAt, TimerDriver, TimerSpec};
use observers::{ObserverError, Registry, Worker};
use percolator::{Cell, Client, Transaction, TxnError};
use std::collections::BTreeMap;
use std::time::Duration;

/// Loaders of timed clicks (processes `0..TIMED_LOADERS`).
pub const TIMED_LOADERS: usize = 2;
/// Clicks in the input.
const CLICKS: u64 = 160;
/// Stragglers (ids from `CLICKS` on): clicks written just above the column's published
/// watermark, below their source's promise ([`stragglers`]).
const STRAGGLERS: u64 = 40;
/// The loaders' allowed out-of-orderness (their input is disordered by less, but for the
/// late clicks).
const OUT_OF_ORDER_MS: u64 = 300;
/// Window length.
const WINDOW_MS: u64 = 250;
/// The timer observer's name.
const TIMERS: &str = "twindows";

/// The timed column.
pub fn column() -> Column {
    Column::new("tclicks", "at")
}

fn row(id: u64) -> String {
    format!("c{id:05}")
}

fn click(id: u64) -> Cell {
    Cell::new("tclicks", row(id), "at")
}

fn seen(id: u64) -> Cell {
    Cell::new("tseen", row(id), "s")
}

fn offset(j: usize) -> Cell {
    Cell::new("toffsets", format!("l{j}"), "pos")
}

/// The run's outcome for a click: `on <window>` or `late`.
fn outcome(id_row: &[u8]) -> Cell {
    Cell::new("tres", id_row, "o")
}

fn runs(id_row: &[u8]) -> Cell {
    schema::runs(id_row, "timed")
}

fn window_row(w: u64) -> String {
    format!("w{w:06}")
}

/// A click's contribution to its window (one cell per click, so runs adding to one window
/// do not conflict with each other; the firing counts the window's cells).
fn contribution(w_row: &str, id_row: &[u8]) -> Cell {
    let mut row = w_row.as_bytes().to_vec();
    row.push(b'/');
    row.extend_from_slice(id_row);
    Cell::new(CONTRIBUTIONS, row, "n")
}

const CONTRIBUTIONS: &str = "tcontrib";

/// The window's on-time clicks as of `txn`'s snapshot.
async fn window_count(txn: &Transaction, w_row: &[u8]) -> Result<u64, TxnError> {
    let mut start = w_row.to_vec();
    start.push(b'/');
    let mut end = w_row.to_vec();
    end.push(b'/' + 1);
    let cells = txn
        .scan(CONTRIBUTIONS.as_bytes(), &start, Some(&end))
        .await?;
    Ok(cells.len() as u64)
}

fn fired(w_row: &[u8]) -> Cell {
    Cell::new("tfired", w_row, "n")
}

fn emitted(w_row: &[u8]) -> Cell {
    Cell::new("tout", w_row, "n")
}

fn source_name(j: usize) -> String {
    format!("timed-l{j}")
}

/// The cells whose reads the fault layer may hold (`FaultRates::timed_hold`): the timed
/// column's published watermark (`_watermarks`, row `p` ‖ column id, column `wm`; the
/// layout of `observers::time`'s keys module), which an advance reads first, after its
/// snapshot, and a run reads when it takes its change.
pub fn held_cells() -> Vec<Cell> {
    let mut published = vec![b'p'];
    for part in [b"tclicks".as_slice(), b"at".as_slice()] {
        published.extend_from_slice(&(part.len() as u16).to_be_bytes());
        published.extend_from_slice(part);
    }
    vec![Cell::new(time::WATERMARK_TABLE, published, "wm")]
}

/// One past the last window an event time of the input can fall in.
fn last_window() -> u64 {
    // The latest event time an input click has, plus a window for the stragglers above it.
    (5_000 + 20 * CLICKS + 150) / WINDOW_MS + 2
}

/// The seed's timed input: each click's event time, and each loader's delivery order (all
/// clicks, adjacent ones swapped now and then, recent ones delivered again). About one
/// click in 15 is late: 0.31-0.7 s before its neighbours, past the out-of-orderness, so it
/// meets a watermark that has passed it or one that still lags (the run and the window's
/// firing then race).
pub fn inputs(rng: &SimRng) -> (BTreeMap<u64, u64>, Vec<Vec<u64>>) {
    let times: BTreeMap<u64, u64> = (0..CLICKS)
        .map(|id| {
            let on_time = 5_000 + 20 * id + rng.range(0, 150);
            let e = if rng.chance(0.07) {
                on_time - rng.range(310, 700)
            } else {
                on_time
            };
            (id, e)
        })
        .collect();
    let orders = (0..TIMED_LOADERS)
        .map(|_| {
            let mut order: Vec<u64> = (0..CLICKS).collect();
            for i in 1..order.len() {
                if rng.chance(0.2) {
                    order.swap(i - 1, i);
                }
            }
            let mut out = Vec::with_capacity(order.len() * 11 / 10);
            for (i, &id) in order.iter().enumerate() {
                out.push(id);
                if i >= 5 && rng.chance(0.1) {
                    out.push(order[i - rng.index(5)]);
                }
            }
            out
        })
        .collect();
    (times, orders)
}

/// Registers the window observer: a strong observer of the timed column.
pub fn register(r: &mut Registry) {
    r.strong(
        "tclicks",
        "at",
        "twindow",
        time::timed_observer_fn(|txn, cell: Cell, change| async move {
            let runs = runs(&cell.row);
            let n = schema::number(txn.get(&runs).await?).unwrap_or(0);
            txn.set(runs, (n + 1).to_string());
            let Some(change) = change else {
                return Ok(());
            };
            if change.late {
                txn.set(outcome(&cell.row), "late");
                return Ok(());
            }
            let w = change.event_time_ms / WINDOW_MS;
            let w_row = window_row(w);
            txn.set(contribution(&w_row, &cell.row), "1");
            // The window's timer, set again in every run that adds to it (a firing deletes
            // it, so the two conflict) unless the change held the watermark and the timer
            // is already there (`Change::held`).
            let at = TimerAt::EventTime((w + 1) * WINDOW_MS);
            let set = !change.held
                || time::timer(&txn, TIMERS, w_row.as_bytes(), "end")
                    .await?
                    .is_none();
            if set {
                time::set_timer(&txn, TIMERS, w_row.as_bytes(), "end", at).await?;
            }
            txn.set(outcome(&cell.row), format!("on {w}"));
            Ok::<_, ObserverError>(())
        }),
    )
    .expect("one observer per column");
}

/// Starts the window timers' driver on `worker` (its share of the rows).
pub fn driver(worker: &Worker) -> TimerDriver {
    let handler = time::on_timer_fn(|txn: Transaction, timer: time::Timer| async move {
        let count = window_count(&txn, &timer.row).await?;
        txn.set(emitted(&timer.row), count.to_string());
        let fired = fired(&timer.row);
        let n = schema::number(txn.get(&fired).await?).unwrap_or(0);
        txn.set(fired, (n + 1).to_string());
        Ok::<_, ObserverError>(())
    });
    let spec = TimerSpec {
        poll: Duration::from_millis(200),
        limit: 16,
        ..TimerSpec::new(TIMERS, Some(column()), handler)
    };
    TimerDriver::start_on(worker, spec)
}

/// Timed loader `j`: batches of 1-4 clicks from its committed offset, each new click written
/// as a timed change with its dedup cell and the offset in one transaction; after each
/// commit, loader 0 publishes its source's watermark (the latest event time in its input up
/// to the offset, less the out-of-orderness) in a transaction of its own, as `app::load`
/// does; loader 1 is a redundant copy that does not drive the watermark.
pub async fn loader(ctx: Ctx, j: usize) {
    let (times, order) = ctx
        .model
        .with(|m| (m.timed_times.clone(), m.timed_orders[j].clone()));
    loop {
        tokio::time::sleep(ctx.rng.millis(50, 300)).await;
        let take = ctx.rng.range(1, 5) as usize;
        let end = commit_retrying(&ctx, "timed load", |txn| {
            let (order, times) = (&order, &times);
            async move {
                let pos = schema::number(txn.get(&offset(j)).await?).unwrap_or(0) as usize;
                let end = (pos + take).min(order.len());
                let mut written = Vec::new();
                for &id in &order[pos..end] {
                    if txn.get(&seen(id)).await?.is_none() && !written.contains(&id) {
                        txn.set(seen(id), "L");
                        time::set_timed(&txn, click(id), id.to_string(), times[&id]).await?;
                        written.push(id);
                    }
                }
                txn.set(offset(j), end.to_string());
                Ok::<_, TxnError>(end)
            }
        })
        .await;
        let Some(end) = end else { return };
        if j != 0 {
            // A redundant copy of the input (as Photon's click logs): it does not drive
            // the watermark, so what it loads first is measured against loader 0's.
            if end == order.len() {
                return;
            }
            continue;
        }
        let latest = order[..end].iter().map(|id| times[id]).max().unwrap_or(0);
        let watermark = if end == order.len() {
            u64::MAX
        } else {
            latest.saturating_sub(OUT_OF_ORDER_MS)
        };
        publish(&ctx, j, watermark).await;
        if end == order.len() {
            return;
        }
    }
}

/// Stragglers: now and then a click whose event time lies just above the column's
/// published watermark, in the window about to fire (a record its loader let through
/// late, as a slow partition's). Its run and that window's firing race: the run must
/// either be counted by the firing or see the window closed (taken as late).
pub async fn stragglers(ctx: Ctx) {
    for id in CLICKS..CLICKS + STRAGGLERS {
        tokio::time::sleep(ctx.rng.millis(200, 900)).await;
        let offset = ctx.rng.range(0, WINDOW_MS);
        let written = commit_retrying(&ctx, "straggler", |txn| async move {
            let Some(w) = time::published(&txn, &column()).await? else {
                return Ok(false);
            };
            if w == u64::MAX || txn.get(&seen(id)).await?.is_some() {
                return Ok(false);
            }
            txn.set(seen(id), "S");
            time::set_timed(&txn, click(id), id.to_string(), w + offset).await?;
            Ok::<_, TxnError>(true)
        })
        .await;
        if written.is_none() {
            return;
        }
    }
}

async fn publish(ctx: &Ctx, j: usize, watermark: u64) {
    commit_retrying(ctx, "timed source", |txn| async move {
        time::publish_source(&txn, &column(), &source_name(j), watermark, false, 0).await?;
        Ok::<_, TxnError>(())
    })
    .await;
}

/// The end of the timed input (the loaders stopped with the workload): the source's
/// watermark goes to `u64::MAX`, so every window's timer comes due.
pub async fn finish(ctx: &Ctx) {
    publish(ctx, 0, u64::MAX).await;
}

/// Whether every window has fired: the column's watermark at the end of input, no change
/// pending and no timer left.
pub async fn all_fired(client: &Client) -> Result<bool, TxnError> {
    let txn = client.begin().await?;
    let published = time::published(&txn, &column()).await?;
    let (_, pending) = time::pending(&txn, &column()).await?;
    let (event, oracle) = time::pending_timers(&txn, TIMERS).await?;
    Ok(published == Some(u64::MAX) && pending == 0 && event + oracle == 0)
}

/// The final checks of event time (see the module's doc); returns the committed runs.
pub async fn check(client: &Client, model: &Shared) -> Result<u64, TxnError> {
    let txn = client.begin().await?;
    let mut on_time: BTreeMap<u64, u64> = BTreeMap::new();
    let mut total_runs = 0;
    let mut late = 0u64;
    for id in 0..CLICKS + STRAGGLERS {
        let r = row(id);
        let loaded = txn.get(&seen(id)).await?.is_some();
        let runs = schema::number(txn.get(&runs(r.as_bytes())).await?).unwrap_or(0);
        total_runs += runs;
        let outcome = txn.get(&outcome(r.as_bytes())).await?;
        if loaded != (runs == 1) {
            model.violation(format!(
                "timed click {id}: loaded {loaded} but {runs} committed runs"
            ));
        }
        if outcome.as_deref() == Some(b"late".as_slice()) {
            late += 1;
        }
        match outcome.as_deref().map(String::from_utf8_lossy).as_deref() {
            None if loaded => model.violation(format!("timed click {id}: no outcome")),
            Some(o) => {
                if let Some(w) = o.strip_prefix("on ").and_then(|w| w.parse::<u64>().ok()) {
                    *on_time.entry(w).or_default() += 1;
                } else if o != "late" {
                    model.violation(format!("timed click {id}: outcome {o:?}"));
                }
            }
            None => {}
        }
    }
    for w in 0..last_window() {
        let w_row = window_row(w);
        let fired = schema::number(txn.get(&fired(w_row.as_bytes())).await?).unwrap_or(0);
        let emitted = schema::number(txn.get(&emitted(w_row.as_bytes())).await?);
        let counted = on_time.get(&w).copied().unwrap_or(0);
        if fired > 1 {
            model.violation(format!("window {w} fired {fired} times"));
        }
        if counted > 0 && (fired != 1 || emitted != Some(counted)) {
            model.violation(format!(
                "window {w}: {counted} on-time clicks, fired {fired} times with count {emitted:?}"
            ));
        }
        if counted == 0 && fired > 0 {
            model.violation(format!("window {w} fired without an on-time click"));
        }
    }
    tracing::debug!(
        runs = total_runs,
        late,
        windows = on_time.len(),
        on_time = on_time.values().sum::<u64>(),
        "timed checks"
    );
    Ok(total_runs)
}
