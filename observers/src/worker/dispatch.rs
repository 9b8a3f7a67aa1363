//! Dispatch: starting observer runs for notify keys, at most one run per cell at a time and
//! at most `max_in_flight` runs in all, with a queue of hinted keys per busy cell.
//!
//! Invariants it keeps:
//! - Per-cell exclusion: a cell is in `in_flight` while a run of this worker is on it; a
//!   second key of that cell is not started beside it. A hinted key of a busy cell is queued
//!   in `deferred` for the run on the cell to take next, in the same slot.
//! - No hinted key is stranded: a run releases its cell only when its queue is empty, and it
//!   checks the queue and releases the cell under the one lock that guards both (`cells`),
//!   so no key can be queued between the check and the release.
//! - Backpressure: a run holds a semaphore permit from before it is marked in flight until it
//!   ends; both paths (hints and scanners) wait for one, and no queue grows without bound
//!   except the per-cell queue of hints, which the cell's run drains.
//! - Lock order: `cells`, then the retry ledger; never the other way round.

use super::{lock, Inner};
use crate::metrics::Metrics;
use crate::process::{handle, Payload};
use percolator::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::Semaphore;

/// Cells with a run in flight, and the hinted keys waiting for those runs.
#[derive(Default)]
struct Cells {
    in_flight: HashSet<Cell>,
    /// Per cell in flight: hinted notify keys (key, payload) that came while it was: the
    /// run on the cell takes them next, instead of leaving them to a scan.
    deferred: HashMap<Cell, Vec<(Vec<u8>, Payload)>>,
}

/// The observer runs of one worker.
pub(super) struct Flights {
    cells: Mutex<Cells>,
    permits: Arc<Semaphore>,
    /// Observer runs in flight (so that [`super::Worker::kill`] can stop them dead).
    runs: Mutex<tokio::task::JoinSet<()>>,
    /// Observer runs started so far (a quiescence check compares it before and after).
    runs_started: AtomicU64,
}

impl Flights {
    pub(super) fn new(max_in_flight: usize) -> Self {
        Flights {
            cells: Mutex::new(Cells::default()),
            permits: Arc::new(Semaphore::new(max_in_flight.max(1))),
            runs: Mutex::new(tokio::task::JoinSet::new()),
            runs_started: AtomicU64::new(0),
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

    /// Waits until every run has ended (all `max_in_flight` permits are free).
    pub(super) async fn drain(&self, max_in_flight: usize) {
        if let Ok(permits) = self.permits.acquire_many(max_in_flight.max(1) as u32).await {
            drop(permits);
        }
    }

    /// Aborts every run wherever it is.
    pub(super) fn abort_all(&self) {
        lock(&self.runs).abort_all();
    }
}

/// What [`dispatch`] did with a notify key.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Dispatch {
    /// An observer run started.
    Started,
    /// The cell is already in flight in this worker, or the key was handled recently.
    Busy,
    /// The worker is stopping.
    Stopped,
}

/// Starts an observer run for notify key `key` of `cell`, waiting for a free slot first
/// (backpressure instead of an unbounded queue). With `defer_if_busy` (hints), a key whose
/// cell is in flight is queued for the run on that cell to take next (reported `Started`).
pub(super) async fn dispatch(
    inner: &Arc<Inner>,
    cell: &Cell,
    key: &[u8],
    payload: Payload,
    defer_if_busy: bool,
) -> Dispatch {
    let flights = &inner.flights;
    // Queues the key for the run on its cell (hints only); the caller holds `cells`.
    let defer = |cells: &mut Cells, payload: Payload| {
        if defer_if_busy && cells.in_flight.contains(cell) {
            cells
                .deferred
                .entry(cell.clone())
                .or_default()
                .push((key.to_vec(), payload));
            true
        } else {
            false
        }
    };
    if inner.ledger.handled_recently(key) {
        return Dispatch::Busy;
    }
    {
        let mut cells = lock(&flights.cells);
        if cells.in_flight.contains(cell) {
            return if defer(&mut cells, payload) {
                Dispatch::Started
            } else {
                Dispatch::Busy
            };
        }
    }
    Metrics::add(&inner.metrics.found);
    let Ok(permit) = flights.permits.clone().acquire_owned().await else {
        return Dispatch::Stopped;
    };
    if inner.stopping() {
        return Dispatch::Stopped;
    }
    if inner.ledger.handled_recently(key) {
        return Dispatch::Busy;
    }
    {
        let mut cells = lock(&flights.cells);
        if !cells.in_flight.insert(cell.clone()) {
            return if defer(&mut cells, payload) {
                Dispatch::Started
            } else {
                Dispatch::Busy
            };
        }
    }
    flights.runs_started.fetch_add(1, Ordering::SeqCst);
    let task_inner = inner.clone();
    let (cell, key) = (cell.clone(), key.to_vec());
    let mut runs = lock(&flights.runs);
    // Reap finished runs so the set stays small.
    while runs.try_join_next().is_some() {}
    runs.spawn(async move {
        let inner = task_inner;
        let (mut key, mut payload) = (key, payload);
        loop {
            let outcome = handle(
                &inner.client,
                &inner.registry,
                &inner.metrics,
                &cell,
                &key,
                &payload,
            )
            .await;
            super::retry::after_handle(&inner, &key, &payload, outcome).await;
            // Keys hinted while this run was on the cell: take the next one now, in the same
            // slot; release the cell only when none is left (one lock: none can slip in).
            let next = {
                let mut cells = lock(&inner.flights.cells);
                let next = loop {
                    let Some(queue) = cells.deferred.get_mut(&cell) else {
                        break None;
                    };
                    let next = queue.pop();
                    if queue.is_empty() {
                        cells.deferred.remove(&cell);
                    }
                    match next {
                        Some((k, _)) if inner.ledger.handled_recently(&k) => continue,
                        other => break other,
                    }
                };
                if next.is_none() || inner.stopping() {
                    cells.in_flight.remove(&cell);
                }
                next
            };
            match next {
                Some((k, p)) if !inner.stopping() => (key, payload) = (k, p),
                _ => break,
            }
        }
        drop(permit);
    });
    Dispatch::Started
}
