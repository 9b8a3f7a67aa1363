//! The hint path: commits of this process hand their notify keys straight to the worker
//! (`Client::notify_hints()`), which dispatches each key of a cell it observes and owns at
//! once, as the hint's typed notification (`Committed { c }` or `Weak`: the committer knows
//! the fate, so no status lookup and no decoding).
//!
//! Invariants it keeps:
//! - Hints are best-effort: a lagging receiver lost some, so it wakes the scanners, and the
//!   notify space stays the source of truth.
//! - While a hint is being dispatched, `hint_floor` holds its notify timestamp (scanners
//!   leave keys at or above it to this path, as they are most likely queued as hints); once
//!   the queue is empty it is lifted to `u64::MAX`, so no key is left to hints forever.
//! - Hints wait in the channel until the worker has settled (it owns nothing before), so
//!   the commits of a loader that starts with the worker are usually hinted, not found by
//!   scanning (pacing only: a receiver that lags, or a worker fenced or holding an undecided
//!   record when it takes them, leaves them to the scanners).
//! - Keys younger than `hint_grace` are left to this path only while this process's client
//!   has put notify keys within `hint_grace`, or keys of this worker were relayed from
//!   another process within it ([`HintState::may_hold_young`]): a hint carries only the keys
//!   its own client put, so a worker whose process loads nothing and to which no loader
//!   relays takes young keys at once instead of finding them a pass later, in bursts. While
//!   relays go on, a young key of a writer that does not relay (`--no-hint-relay`, an
//!   application's client without a relay, GC's rewrites) waits up to `hint_grace` and a
//!   scanner's idle period.

use super::dispatch::dispatch;
use super::Inner;
use crate::process::{Item, Payload};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::time::Instant;

/// What the hint path shares with the scanners.
pub(super) struct HintState {
    /// While commit hints wait to be dispatched: the notify ts of the one being dispatched
    /// (newer keys are most likely queued as hints, so scanners leave them); `u64::MAX`
    /// when no hint waits.
    floor: AtomicU64,
    /// Wakes the scanners early (hints were lost: scan for what they carried).
    pub(super) rescan: tokio::sync::Notify,
    /// The client's count of notify keys put, as last sampled, and when it was last seen to
    /// change ([`HintState::may_hold_young`]).
    own_puts: Mutex<OwnPuts>,
    /// When keys relayed from another process last came ([`crate::relay`]).
    relayed_at: Mutex<Option<Instant>>,
}

/// A sample of the client's count of notify keys put.
#[derive(Default)]
struct OwnPuts {
    count: u64,
    changed_at: Option<Instant>,
}

impl HintState {
    pub(super) fn new() -> Self {
        HintState {
            floor: AtomicU64::new(u64::MAX),
            rescan: tokio::sync::Notify::new(),
            own_puts: Mutex::new(OwnPuts::default()),
            relayed_at: Mutex::new(None),
        }
    }

    /// The notify ts at and above which keys are most likely queued as hints.
    pub(super) fn floor(&self) -> u64 {
        self.floor.load(Ordering::Relaxed)
    }

    /// Notes that keys relayed from another process came now: while they keep coming,
    /// young keys are most likely relayed too ([`HintState::may_hold_young`]).
    pub(super) fn note_relayed(&self) {
        *self.relayed_at.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }

    /// Whether keys younger than `grace` may be on the hint path (or on the relayed path,
    /// while relayed keys came within `grace`), given `puts_now`, the
    /// client's count of notify keys put ([`percolator::Client::notify_counts`]): whether
    /// the count was seen to change within `grace` before now. Scanners sample it at the
    /// start of each pass; a change is dated at the sample that saw it, never earlier, so
    /// "no change within `grace`" means no key put by this client is younger than `grace`
    /// (bar the keys put since the sample, or in the instant between a put and its count:
    /// a scanner may then take a key its hint also carries, which per-cell exclusion and
    /// the handled-keys ledger turn into at most one more run, as for any duplicate
    /// notification). Only pacing rests on this answer, never what must hold.
    pub(super) fn may_hold_young(&self, puts_now: u64, grace: Duration) -> bool {
        let now = Instant::now();
        let relayed = *self.relayed_at.lock().unwrap_or_else(|p| p.into_inner());
        if relayed.is_some_and(|at| now.saturating_duration_since(at) < grace) {
            return true;
        }
        let mut own = self.own_puts.lock().unwrap_or_else(|p| p.into_inner());
        if own.count != puts_now {
            own.count = puts_now;
            own.changed_at = Some(now);
        }
        own.changed_at
            .is_some_and(|at| now.saturating_duration_since(at) < grace)
    }
}

/// Handles the hints of this process's commits: each notify key this worker observes and
/// owns is dispatched at once, without waiting for a scan. Lost hints wake the scanners.
/// `hints` is subscribed when the worker starts, so no commit after its start is missed.
pub(super) async fn hint_loop(
    inner: Arc<Inner>,
    mut hints: tokio::sync::broadcast::Receiver<Arc<percolator::txn::CommittedNotify>>,
) {
    use tokio::sync::broadcast::error::{RecvError, TryRecvError};
    let mut shutdown = inner.shutdown.clone();
    // Hints of commits made before the worker settled wait in the channel (a receiver that
    // lags behind its capacity rescans instead) and are dispatched once it owns its share:
    // a loader in this process need not wait for the worker to settle.
    inner.wait_until_settled().await;
    while !inner.stopping() {
        // Biased: polled in this order, so a run is repeatable under one seed (simulation).
        let hint = tokio::select! {
            biased;
            hint = hints.recv() => hint,
            _ = shutdown.changed() => return,
        };
        // Hints that queued up while runs were busy join this one (up to a batch), so a
        // busy worker hands them to its observers in batches.
        let mut batch = vec![hint];
        while batch.len() < inner.config.batch_size.max(1) {
            match hints.try_recv() {
                Ok(hint) => batch.push(Ok(hint)),
                Err(TryRecvError::Lagged(lost)) => batch.push(Err(RecvError::Lagged(lost))),
                Err(_) => break,
            }
        }
        let mut items = Vec::new();
        let mut floor = u64::MAX;
        for hint in batch {
            match hint {
                Ok(hint) => {
                    floor = floor.min(hint.notify_ts);
                    for cell in &hint.cells {
                        if inner.registry.get(cell).is_none() || !inner.membership.owns(cell) {
                            continue;
                        }
                        let key = inner
                            .client
                            .codec()
                            .notify(cell, hint.notify_ts, hint.bucket);
                        // The committer knows the fate: no earlier "undecided" backoff applies.
                        inner.ledger.forget_backoff(&key);
                        items.push(Item {
                            cell: cell.clone(),
                            key,
                            payload: Payload::Record(hint.notification.clone()),
                        });
                    }
                }
                Err(RecvError::Lagged(lost)) => {
                    tracing::debug!(lost, "notify hints lost; scanning instead");
                    inner.hints.rescan.notify_waiters();
                }
                Err(RecvError::Closed) => return,
            }
        }
        if floor != u64::MAX {
            inner.hints.floor.store(floor, Ordering::Relaxed);
        }
        let dispatched = dispatch(&inner, items, true).await;
        inner.metrics.add_hinted(dispatched.started as u64);
        if dispatched.stopped {
            return;
        }
        if hints.is_empty() {
            inner.hints.floor.store(u64::MAX, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Young keys wait for hints only after the client's put count was seen to change, for
    /// `grace` from the sample that saw it (not from a later sample of the same count).
    #[test]
    fn young_keys_wait_for_hints_only_after_own_puts() {
        let hints = HintState::new();
        let hour = Duration::from_secs(3600);
        assert!(!hints.may_hold_young(0, hour), "nothing put yet");
        assert!(hints.may_hold_young(5, hour), "a put seen now");
        assert!(
            hints.may_hold_young(5, hour),
            "the same put, within the grace"
        );
        assert!(
            !hints.may_hold_young(5, Duration::ZERO),
            "past a zero grace"
        );
        std::thread::sleep(Duration::from_millis(5));
        assert!(
            !hints.may_hold_young(5, Duration::from_millis(1)),
            "the put is dated at the sample that first saw it"
        );
        assert!(
            hints.may_hold_young(6, Duration::from_millis(1)),
            "a new put"
        );
    }
}
