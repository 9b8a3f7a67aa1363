//! Dispatch: starting observer runs for notify keys, at most one run per cell at a time and
//! at most `max_in_flight` runs in all, with a queue of hinted keys per busy cell. A run
//! handles a batch: up to [`run_size`] keys (`batch_size`, more in a burst) of distinct cells
//! of one strong observer, in one
//! transaction ([`crate::process::handle_batch`]), strong or weak.
//!
//! Invariants it keeps:
//! - Per-cell exclusion: a cell is in `in_flight` while a run of this worker is on it; a
//!   second key of that cell is not started beside it (nor put in the same batch). A hinted
//!   key of a busy cell is queued in `deferred` for the run on the cell to take next, in the
//!   same slot.
//! - No hinted key is stranded: a run releases its cell only when its queue is empty, and it
//!   checks the queue and releases the cell under the one lock that guards both (`cells`),
//!   so no key can be queued between the check and the release.
//! - Backpressure: a run holds a semaphore permit from before it is marked in flight until it
//!   ends; both paths (hints and scanners) wait for one, and no queue grows without bound
//!   except the per-cell queue of hints, which the cell's run drains.
//! - Lock order: `cells`, then the retry ledger; never the other way round.

use super::{lock, Inner};
use crate::process::{handle_batch, Item, Payload};
use percolator::{Cell, FastMap, FastSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Cells with a run in flight, and the hinted keys waiting for those runs.
#[derive(Default)]
struct Cells {
    in_flight: FastSet<Cell>,
    /// Per cell in flight: hinted notify keys (key, payload) that came while it was: the
    /// run on the cell takes them next, instead of leaving them to a scan.
    deferred: FastMap<Cell, Vec<(Vec<u8>, Payload)>>,
    /// The ordinals (the count of runs started, when each started) of the runs in flight:
    /// a run is here while it holds a cell.
    runs: std::collections::BTreeSet<u64>,
}

/// The observer runs of one worker.
pub(super) struct Flights {
    cells: Mutex<Cells>,
    permits: Arc<Semaphore>,
    /// Observer runs in flight (so that [`super::Worker::kill`] can stop them dead).
    runs: Mutex<tokio::task::JoinSet<()>>,
    /// Observer runs started so far (a quiescence check compares it before and after).
    runs_started: AtomicU64,
    /// Set by [`Flights::abort_all`] under the `runs` lock: a run marked before the kill but
    /// not yet spawned is then not spawned (it would outlive the "crash").
    killed: std::sync::atomic::AtomicBool,
}

impl Flights {
    pub(super) fn new(max_in_flight: usize) -> Self {
        Flights {
            cells: Mutex::new(Cells::default()),
            permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
            runs: Mutex::new(tokio::task::JoinSet::new()),
            runs_started: AtomicU64::new(0),
            killed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether no run is in flight.
    pub(super) fn idle(&self) -> bool {
        lock(&self.cells).in_flight.is_empty()
    }

    /// Observer runs started so far.
    pub(super) fn runs_started(&self) -> u64 {
        self.runs_started.load(Ordering::SeqCst)
    }

    /// The ordinal of the oldest run in flight (its place in [`Flights::runs_started`]).
    pub(super) fn oldest_run(&self) -> Option<u64> {
        lock(&self.cells).runs.first().copied()
    }

    /// Waits until every run has ended (all `max_in_flight` permits are free).
    pub(super) async fn drain(&self, max_in_flight: usize) {
        if let Ok(permits) = self.permits.acquire_many(max_in_flight.max(1) as u32).await {
            drop(permits);
        }
    }

    /// Aborts every run wherever it is, and forgets their cells: no run of this worker is on
    /// them any more (a check by [`super::Worker::runs_mark`] then sees it idle, as the
    /// heartbeat check sees a killed worker dead).
    pub(super) fn abort_all(&self) {
        {
            // Under the lock that spawns runs: a run spawned after this sees the flag.
            let mut runs = lock(&self.runs);
            self.killed.store(true, Ordering::SeqCst);
            runs.abort_all();
        }
        let mut cells = lock(&self.cells);
        cells.in_flight.clear();
        cells.deferred.clear();
        cells.runs.clear();
    }
}

/// What [`dispatch`] did with the notify keys it was given.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Dispatched {
    /// Keys that went to an observer run (or were queued for the run on their cell).
    pub started: usize,
    /// Keys whose cell is already in flight in this worker, or handled recently.
    pub busy: usize,
    /// Whether the worker is stopping (keys after that point were left alone).
    pub stopped: bool,
}

impl Flights {
    /// Whether a run of this worker is on `cell`.
    pub(super) fn busy(&self, cell: &Cell) -> bool {
        lock(&self.cells).in_flight.contains(cell)
    }
}

/// An observer by the (table, column) it watches.
type ObserverKey = (Vec<u8>, Vec<u8>);

/// How many runs a burst of one observer's keys fills while their batches can still grow:
/// a dispatch holding `n` keys of one observer runs them `ceil(n / BURST_RUNS)` at a time, at
/// least `batch_size`, up to [`crate::WorkerConfig::max_batch_size`] (`batch_size` 1: one at
/// a time). Past `BURST_RUNS x max_batch_size` keys a burst takes more runs than this.
pub const BURST_RUNS: usize = 8;

/// Keys of one observer per run when one dispatch holds `keys` of them: `batch_size`, or
/// more for a burst (the hint of a loader's commit at saturation, hints that queued up
/// behind busy runs, relayed keys gathered up to [`gather_limit`]; scans come in batches
/// already), so that it fills [`BURST_RUNS`] runs, up to `max_batch_size` keys each (more
/// runs past `BURST_RUNS x max_batch_size` keys). Below
/// `BURST_RUNS x batch_size` keys nothing changes: a trickle is run as before, at once and
/// in parallel. A burst costs fewer transactions per key this way (fewer commits, oracle
/// calls, and on a store of many regions fewer requests per key), and its keys are all
/// there at once, so larger runs add no wait for them. `batch_size` 1 turns batches off.
pub(super) fn run_size(keys: usize, batch_size: usize, max_batch_size: usize) -> usize {
    let batch_size = batch_size.max(1);
    if batch_size == 1 {
        return 1;
    }
    keys.div_ceil(BURST_RUNS)
        .clamp(batch_size, max_batch_size.max(batch_size))
}

/// How many keys a path that gathers what queued up (relayed datagrams) takes into one
/// dispatch: a batch, or [`BURST_RUNS`] of the largest when batches may grow.
pub(super) fn gather_limit(config: &super::WorkerConfig) -> usize {
    let batch_size = config.batch_size.max(1);
    if batch_size > 1 && config.max_batch_size > batch_size {
        BURST_RUNS * config.max_batch_size
    } else {
        batch_size
    }
}

/// Starts observer runs for `items`, batched per observer (up to [`run_size`] cells of one
/// observer per run), waiting for a free slot before each run (backpressure instead
/// of an unbounded queue). With `defer_if_busy` (hints), a key whose cell is in flight is
/// queued for the run on that cell to take next (counted as started).
pub(super) async fn dispatch(
    inner: &Arc<Inner>,
    items: Vec<Item>,
    defer_if_busy: bool,
) -> Dispatched {
    let mut report = Dispatched::default();
    let mut wanted = Vec::with_capacity(items.len());
    for item in items {
        if inner.ledger.handled_recently(&item.key) {
            report.busy += 1;
            continue;
        }
        if inner.registry.get(&item.cell).is_none() {
            continue;
        }
        wanted.push(item);
    }
    // Keys per observer (table, column), in the order met, for the size of their runs.
    let mut counts: Vec<(ObserverKey, usize)> = Vec::new();
    for item in &wanted {
        match counts
            .iter_mut()
            .find(|(o, _)| o.0 == item.cell.table && o.1 == item.cell.column)
        {
            Some((_, n)) => *n += 1,
            None => counts.push(((item.cell.table.clone(), item.cell.column.clone()), 1)),
        }
    }
    // Per observer, in the order met.
    let mut groups: Vec<(ObserverKey, Vec<Item>)> = Vec::new();
    for item in wanted {
        let observer = (item.cell.table.clone(), item.cell.column.clone());
        let keys = counts
            .iter()
            .find(|(o, _)| *o == observer)
            .map_or(1, |(_, n)| *n);
        let size = run_size(keys, inner.config.batch_size, inner.config.max_batch_size);
        match groups
            .iter_mut()
            .rev()
            .find(|(o, batch)| *o == observer && batch.len() < size)
        {
            Some((_, batch)) => batch.push(item),
            None => groups.push((observer, vec![item])),
        }
    }
    for (_, batch) in groups {
        if report.stopped {
            break;
        }
        start(inner, batch, defer_if_busy, &mut report).await;
    }
    report
}

/// Queues `item` for the run on its cell (hints only); the caller holds `cells`.
fn defer(cells: &mut Cells, item: Item, defer_if_busy: bool, report: &mut Dispatched) {
    if defer_if_busy && cells.in_flight.contains(&item.cell) {
        cells
            .deferred
            .entry(item.cell.clone())
            .or_default()
            .push((item.key, item.payload));
        report.started += 1;
    } else {
        report.busy += 1;
    }
}

/// Starts one run for `batch` (keys of one observer): takes a slot, marks the cells in
/// flight (keys of cells already in flight are deferred or skipped), spawns the run.
async fn start(inner: &Arc<Inner>, batch: Vec<Item>, defer_if_busy: bool, report: &mut Dispatched) {
    let flights = &inner.flights;
    let mut fresh = Vec::with_capacity(batch.len());
    {
        let mut cells = lock(&flights.cells);
        for item in batch {
            if cells.in_flight.contains(&item.cell) {
                defer(&mut cells, item, defer_if_busy, report);
            } else {
                fresh.push(item);
            }
        }
    }
    if fresh.is_empty() {
        return;
    }
    inner.metrics.add_found(fresh.len() as u64);
    let Ok(permit) = flights.permits.clone().acquire_owned().await else {
        report.stopped = true;
        return;
    };
    if inner.stopping() {
        report.stopped = true;
        return;
    }
    let mut run = Vec::with_capacity(fresh.len());
    let ordinal = {
        let mut cells = lock(&flights.cells);
        for item in fresh {
            if inner.ledger.handled_recently(&item.key) {
                report.busy += 1;
            } else if !cells.in_flight.insert(item.cell.clone()) {
                // Taken meanwhile, or a second key of a cell of this batch.
                defer(&mut cells, item, defer_if_busy, report);
            } else {
                run.push(item);
            }
        }
        if run.is_empty() {
            return;
        }
        // Counted after its cells are marked (`Worker::runs_mark` relies on that order).
        let ordinal = flights.runs_started.fetch_add(1, Ordering::SeqCst) + 1;
        cells.runs.insert(ordinal);
        ordinal
    };
    report.started += run.len();
    let task_inner = inner.clone();
    let mut runs = lock(&flights.runs);
    if flights.killed.load(Ordering::SeqCst) {
        // Killed between marking its cells and here: a crash starts nothing more. Its marks
        // go (the kill cleared them already unless they were made after it).
        drop(runs);
        let mut cells = lock(&flights.cells);
        for item in &run {
            cells.in_flight.remove(&item.cell);
            cells.deferred.remove(&item.cell);
        }
        cells.runs.remove(&ordinal);
        return;
    }
    // Reap finished runs so the set stays small.
    while runs.try_join_next().is_some() {}
    runs.spawn(async move {
        let inner = task_inner;
        let mut batch = run;
        loop {
            let outcomes =
                handle_batch(&inner.client, &inner.registry, &inner.metrics, &batch).await;
            for (item, outcome) in batch.iter().zip(outcomes) {
                super::retry::after_handle(&inner, &item.key, &item.payload, outcome).await;
            }
            // Keys hinted while this run was on its cells: take the next one of each now, in
            // the same slot; release a cell only when none is left for it (one lock: none
            // can slip in).
            let next = {
                let mut cells = lock(&inner.flights.cells);
                let mut next = Vec::new();
                for item in &batch {
                    let cell = &item.cell;
                    let taken = loop {
                        let Some(queue) = cells.deferred.get_mut(cell) else {
                            break None;
                        };
                        let taken = queue.pop();
                        if queue.is_empty() {
                            cells.deferred.remove(cell);
                        }
                        match taken {
                            // Handled meanwhile, or a repeat of a key that just failed (its
                            // backoff applies: the scanners retry it when it ends). A key
                            // backing off only because its writer was undecided runs: a
                            // hint that knows the fate may be what queued it.
                            Some((k, _))
                                if inner.ledger.handled_recently(&k)
                                    || inner.ledger.backing_off_after_failure(&k) =>
                            {
                                continue
                            }
                            other => break other,
                        }
                    };
                    match taken {
                        Some((key, payload)) if !inner.stopping() => next.push(Item {
                            cell: cell.clone(),
                            key,
                            payload,
                        }),
                        _ => {
                            cells.in_flight.remove(cell);
                        }
                    }
                }
                if next.is_empty() {
                    // Its last cell released: the run is over (one lock with the cells).
                    cells.runs.remove(&ordinal);
                }
                next
            };
            if next.is_empty() {
                break;
            }
            batch = next;
        }
        drop(permit);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trickle runs at the batch size; a burst fills `BURST_RUNS` runs, up to the maximum;
    /// batch size 1 never grows.
    #[test]
    fn runs_grow_with_bursts_only() {
        assert_eq!(run_size(1, 32, 128), 32);
        assert_eq!(run_size(8 * 32, 32, 128), 32);
        assert_eq!(run_size(8 * 32 + 1, 32, 128), 33);
        assert_eq!(run_size(667, 32, 128), 84);
        assert_eq!(run_size(10_000, 32, 128), 128);
        assert_eq!(
            run_size(10_000, 32, 16),
            32,
            "a maximum below the size changes nothing"
        );
        assert_eq!(run_size(10_000, 1, 128), 1, "batches off");
        assert_eq!(run_size(10_000, 0, 128), 1);
    }
}
