//! Scanners: passes over the notify space from the notify floor, oldest bucket first, for
//! other processes' writes and lost hints; and the quiescence scan.
//!
//! Invariants it keeps:
//! - A pass dispatches only keys of registered columns in this worker's share, older than
//!   `hint_grace` (while this process's own commits put notify keys within it: younger keys
//!   are then most likely on the hint path, and the pass ends at the bucket of
//!   `now - hint_grace`) and below the hint floor;
//!   every `sweep_every`-th pass also takes keys of a stalled owner older than `orphan_age`.
//! - At its end a pass raises the notify floor only to the oldest bucket in which it met a
//!   key (at most the previous second, and at most the bucket where the pass ended), so no
//!   notification that existed when the pass began falls below the floor; and it finishes a
//!   rescan the floor record still owes (a raise cut short), so readers soon start at the
//!   floor again.
//! - Each key's value is decoded once, here, and passed on typed.
//! - The candidates of a page go to dispatch together (in batches of `batch_size`), so a
//!   backlog is handled in batches; a cell appears at most once among them.
//! - Passes are rationed: after a pass that found nothing, or while hints did at least as
//!   much work, the scanner waits `idle_interval`, doubling up to `max_idle_interval`, or
//!   until other processes publish notify keys put since the pass began (the shared counts,
//!   read every `follow_shared_counts`: a worker follows a loader in another process; at
//!   least one such period after the pass, and every scanner so woken passes). An
//!   idle scanner whose wait ran out skips its pass when another scanner of the worker made
//!   an idle pass meanwhile (a pass covers the space from the floor, so an idle worker needs
//!   one per period, not one per scanner); a wake-up for lost hints always scans.
//! - The end bucket of a pass that leaves young keys to hints is read on this host's wall
//!   clock, while a key's bucket is its writer's (or the floor its writer saw, if higher):
//!   keys of a host whose clock runs ahead, or put above a floor raised by one, wait that
//!   much longer (pacing only; every bucket is scanned once this clock passes it).

use super::dispatch::dispatch;
use super::Inner;
use crate::error::WorkerError;
use crate::process::{Item, Payload};
use percolator::codec::Key;
use percolator::kv::{RangePager, ScanOrder};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

pub(super) async fn scanner_loop(inner: Arc<Inner>, scanner: u32) {
    let mut shutdown = inner.shutdown.clone();
    let mut pass: u32 = scanner;
    let mut idle = inner.config.idle_interval;
    let mut hinted_before = 0;
    // Other processes' notify keys put, as last read before a pass: puts published after
    // it wake the wait that follows. Read here once, then by the idle waits' polls (the
    // last one is read before the next pass); passes that find work do not read it, so
    // after them the count may be older than the pass, which costs at most one more pass.
    let mut others_seen = others_put(&inner).await;
    while !inner.stopping() {
        pass = pass.wrapping_add(1);
        let sweep = inner.config.sweep_every > 0 && pass.is_multiple_of(inner.config.sweep_every);
        let dispatched = match scan_pass(&inner, sweep).await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "notify scan failed");
                0
            }
        };
        // A pass walks the notify space from the floor (deleted keys included): when this
        // process's own commit hints carry most of the work, scanning is only the safety net
        // for other processes' writes and lost hints, so back off as when a pass finds nothing.
        let hinted = inner.metrics.hinted.load(Ordering::Relaxed);
        let hinted_since = hinted.saturating_sub(hinted_before);
        hinted_before = hinted;
        if dispatched == 0 || hinted_since as usize >= dispatched {
            let longest = inner
                .config
                .max_idle_interval
                .max(inner.config.idle_interval);
            inner.idle_passes.fetch_add(1, Ordering::Relaxed);
            loop {
                let before = inner.idle_passes.load(Ordering::Relaxed);
                let woken = wait(&inner, &mut shutdown, idle, &mut others_seen).await;
                idle = (idle * 2).min(longest);
                // Another scanner of this worker made an idle pass while this one waited:
                // it covered what this pass would have, so wait another period. A pass that
                // found work does not count (both scanners share a backlog), and lost hints
                // (and shutdown) end the wait at once.
                if woken || inner.stopping() || inner.idle_passes.load(Ordering::Relaxed) == before
                {
                    break;
                }
            }
        } else {
            idle = inner.config.idle_interval;
        }
    }
}

/// Waits `period`, or less if hints were lost, other processes published notify keys put
/// beyond `others_seen` ([`others_put_beyond`], which keeps it current) or the worker stops.
/// Returns whether it was woken before the period ran out.
async fn wait(
    inner: &Inner,
    shutdown: &mut watch::Receiver<bool>,
    period: Duration,
    others_seen: &mut Option<u64>,
) -> bool {
    // Biased: polled in this order, so a run is repeatable under one seed (simulation).
    tokio::select! {
        biased;
        _ = inner.hints.rescan.notified() => true,
        _ = others_put_beyond(inner, others_seen) => true,
        _ = tokio::time::sleep(period) => false,
        _ = shutdown.changed() => true,
    }
}

/// How many notify keys other processes have published as put (`SharedNotifyCounts::others`),
/// when the worker follows the shared counts (`WorkerConfig::follow_shared_counts`) and the
/// read succeeds.
async fn others_put(inner: &Inner) -> Option<u64> {
    inner.config.follow_shared_counts?;
    match inner.client.shared_notify_counts().await {
        Ok(counts) => Some(counts.others().put),
        Err(error) => {
            tracing::debug!(%error, "reading the shared notify counts failed");
            None
        }
    }
}

/// Returns once other processes have published more notify keys put than `seen`, read every
/// `WorkerConfig::follow_shared_counts` (the first read one period in, so a scanner's passes
/// are at least that far apart however often the count moves), leaving in `seen` the last
/// count read; a first count (none was read before) only sets it. Every idle scanner it
/// wakes passes, as for a backlog found by scanning: new work gets all of them. Pacing only:
/// a count that is lost or late costs at most the idle period, which still runs.
async fn others_put_beyond(inner: &Inner, seen: &mut Option<u64>) {
    let Some(every) = inner.config.follow_shared_counts else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(every).await;
        let Some(now) = others_put(inner).await else {
            continue;
        };
        // Counts only grow (a lost reply may add a client's counts twice: one more pass).
        let beyond = seen.is_some_and(|seen| now > seen);
        *seen = Some(now);
        if beyond {
            return;
        }
    }
}

/// One pass over the notify space from the notify floor, oldest bucket first (up to the
/// bucket of `now - hint_grace` while young keys are left to hints); at its end, raises the
/// floor to the oldest bucket that still holds a notification (at most the previous second,
/// and at most where the pass ended), so the next pass skips what this one found handled.
/// Returns how many notifications were dispatched to observer runs.
async fn scan_pass(inner: &Arc<Inner>, sweep: bool) -> Result<usize, WorkerError> {
    let record = inner.client.notify_floor_record().await?;
    let floor = record.scan_from;
    // The bucket of the first key met: every notification that existed when the pass
    // began at `floor` is in it or later.
    let mut oldest_left: Option<u64> = None;
    let kv = inner.client.store().clone();
    let mut dispatched = 0;
    let mut backlog = Backlog::default();
    let now_ms = inner.client.wall_ms();
    // Young keys wait for the hint path only if this process put any lately: a worker
    // beside a loader in another process takes them at once.
    let hint_grace_ms = if inner
        .hints
        .may_hold_young(inner.client.notify_counts().put, inner.config.hint_grace)
    {
        inner.config.hint_grace.as_millis() as u64
    } else {
        0
    };
    // Keys younger than the grace are left to the hint path (below), and so is the rest of
    // their bucket: the pass ends where the bucket of `now - hint_grace` begins. It would
    // otherwise walk the newest second or two of the notify space, where every handled key
    // is still a put and a delete in the store's memtable, only to skip what it finds there
    // (4.7 % of `photon demo`'s CPU). The older keys of that bucket wait for the next pass
    // (or their hints); the floor is raised no higher than that bucket.
    let end_bucket = (hint_grace_ms > 0).then(|| now_ms.saturating_sub(hint_grace_ms) / 1000);
    let range = match end_bucket {
        Some(end) => inner.client.codec().notify_between(floor, end),
        None => inner.client.codec().notify_from(floor),
    };
    inner.ledger.prune();
    if end_bucket.is_none_or(|end| end > floor) {
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, 256);
        while let Some(page) = pager.next_page().await? {
            let mut clumped = 0;
            // Candidates of this page, dispatched in batches (per observer, see dispatch).
            let mut items = Vec::new();
            for (key, value) in page {
                if inner.stopping() {
                    return Ok(dispatched);
                }
                inner.metrics.add_scanned(1);
                let Some(Key::Notify { bucket, cell, ts }) = inner.decode_notify(&key).await else {
                    // Not ours to judge (another codec version?): keep the floor below it.
                    oldest_left.get_or_insert(floor);
                    continue;
                };
                oldest_left.get_or_insert(bucket);
                if inner.registry.get(&cell).is_none() {
                    continue;
                }
                let age_ms = now_ms.saturating_sub(percolator::Timestamp(ts).physical_ms());
                let owned = inner.membership.owns(&cell);
                if owned {
                    backlog.count(&cell, age_ms);
                }
                if !owned {
                    // Another live worker's share: taken only from an owner that made no
                    // progress for `orphan_age` (one busy with a backlog keeps it).
                    if !sweep
                        || age_ms < inner.config.orphan_age.as_millis() as u64
                        || !inner.membership.owner_stalled(&cell)
                    {
                        continue;
                    }
                } else if age_ms < hint_grace_ms || ts >= inner.hints.floor() {
                    // Most likely waiting in the hint queue: leave it to the hint path.
                    continue;
                }
                if inner.ledger.handled_recently(&key) || inner.ledger.backing_off(&key) {
                    continue;
                }
                if inner.flights.busy(&cell) || items.iter().any(|i: &Item| i.cell == cell) {
                    // Another task of this process is on this cell: after a few in a row,
                    // stop following it (anti-clumping) and let the next pass jump.
                    clumped += 1;
                    if clumped >= 4 {
                        break;
                    }
                    continue;
                }
                clumped = 0;
                items.push(Item {
                    cell,
                    key,
                    payload: Payload::decode(&value),
                });
                if items.len() >= inner.config.batch_size.max(1) {
                    let report = dispatch(inner, std::mem::take(&mut items), false).await;
                    dispatched += report.started;
                    if report.stopped {
                        return Ok(dispatched);
                    }
                }
            }
            let report = dispatch(inner, items, false).await;
            dispatched += report.started;
            if report.stopped {
                return Ok(dispatched);
            }
        }
        // A whole pass: what it found waiting in this worker's share, per observed column
        // (up to where it ended: keys of the last second or so are not counted while hints
        // flow). A pass whose range was empty (the floor at its end) counts nothing.
        for (table, column, _) in inner.registry.columns() {
            let (waiting, oldest_ms) = backlog
                .columns
                .get(&(table.clone(), column.clone()))
                .copied()
                .unwrap_or_default();
            inner
                .metrics
                .set_backlog(&table, &column, waiting, Duration::from_millis(oldest_ms));
        }
    }
    // Keys still being put in the current second stay above the floor, and so do the
    // buckets this pass did not reach.
    let to = oldest_left
        .unwrap_or(u64::MAX)
        .min(inner.client.wall_bucket().saturating_sub(1))
        .min(end_bucket.unwrap_or(u64::MAX));
    // A raise cut short (here or in another process) left its rescan owed: any pass ends it.
    if to > floor || record.owes_rescan() {
        let raise = inner.client.raise_notify_floor(floor, to).await?;
        if raise.relocated > 0 {
            tracing::debug!(
                relocated = raise.relocated,
                "notify keys moved above the floor"
            );
        }
    }
    Ok(dispatched)
}

/// Notifications a pass met in this worker's share: per (table, column), how many and the
/// oldest's age (ms).
#[derive(Default)]
struct Backlog {
    columns: std::collections::HashMap<(Vec<u8>, Vec<u8>), (u64, u64)>,
}

impl Backlog {
    fn count(&mut self, cell: &percolator::Cell, age_ms: u64) {
        let entry = self
            .columns
            .entry((cell.table.clone(), cell.column.clone()))
            .or_default();
        entry.0 += 1;
        entry.1 = entry.1.max(age_ms);
    }
}

impl Inner {
    /// Whether a notify key of a registered column is left in the store (from the floor on).
    pub(super) async fn has_pending_notifications(&self) -> Result<bool, WorkerError> {
        let floor = self.client.notify_floor().await?;
        let range = self.client.codec().notify_from(floor);
        let kv = self.client.store().clone();
        let mut pager = RangePager::new(kv.as_ref(), range, ScanOrder::Forward, 1024);
        while let Some(page) = pager.next_page().await? {
            for (key, _) in page {
                if let Some(Key::Notify { cell, .. }) = self.decode_notify(&key).await {
                    if self.registry.get(&cell).is_some() {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}
