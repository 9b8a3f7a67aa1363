//! Retry: what the worker does after handling a notify key. It remembers keys handled
//! recently, backs off keys that failed or whose writer is undecided, and parks a key as a
//! dead letter after `max_failures` failures.
//!
//! Invariants it keeps:
//! - Only an observer's own failure (an error, a panic, a record that can never be handled)
//!   counts towards the dead letter; a conflict or an undecided writer is retried without
//!   counting, and so is a busy or unreachable store or oracle (transient errors keep the
//!   count they had).
//! - A key handled in the last [`RECENT_FOR`] is not handled again by this worker (a scanner
//!   holding a stale page skips it); a key put again later (e.g. rewritten by GC) is. Keys
//!   are remembered by a 64-bit hash: another key of the same hash waits `RECENT_FOR` at
//!   most, in the store, for a later pass.
//! - The ledger's lock is taken after the dispatch lock (`Flights::cells`), never before.
//! - Both maps stay bounded by what this worker is handling, not by what it ever handled: a
//!   retry entry whose retry time passed [`FORGET_RETRY_AFTER`] ago is dropped (another
//!   worker handled the key, or it was moved or deleted; a key still failing here only
//!   restarts its failure count, so it is retried longer before its dead letter, never lost).

use super::{lock, Inner};
use crate::deadletter::DeadLetter;
use crate::metrics::Event;
use crate::process::{Outcome, Payload};
use crate::telemetry::ObserverLabels;
use percolator::codec::Key;
use percolator::FastMap;
use std::sync::Mutex;
use std::time::Duration;
// Tokio's clock: the monotonic clock in production, paused time in tests and the simulation.
use tokio::time::Instant;

/// How long a handled notify key is remembered.
const RECENT_FOR: Duration = Duration::from_secs(5);

/// How long after its retry time a retry entry this worker has not met again is kept.
const FORGET_RETRY_AFTER: Duration = Duration::from_secs(60);

/// Entries above which a map is pruned.
const PRUNE_ABOVE: usize = 10_000;

/// A key's retry state.
#[derive(Clone, Copy)]
struct Retry {
    /// Observer failures so far (towards the dead letter).
    failures: u32,
    /// Transient errors in a row (an outage): they lengthen the backoff, never the count.
    outage: u32,
    /// When it may be tried again.
    after: Instant,
}

#[derive(Default)]
struct Entries {
    /// Per notify key: its retry state.
    retry: FastMap<Vec<u8>, Retry>,
    /// Notify keys this worker handled recently, by their hash (`Ledger::hashes`), so that a
    /// scanner holding a stale page does not handle them again (pruned after `RECENT_FOR`).
    /// Only the hash is kept: a key is not copied per notification handled. Two keys of one
    /// 64-bit hash (about once in 10^9 passes over a map of 150,000 keys) only delay the
    /// second: it is skipped as handled for at most `RECENT_FOR`, stays in the store, and a
    /// later pass takes it (pacing, as every use of this map).
    recent: FastMap<u64, Instant>,
}

/// Per notify key: failures, when to try again, and whether it was handled recently.
#[derive(Default)]
pub(super) struct Ledger {
    entries: Mutex<Entries>,
    /// Hashes the keys of `Entries::recent` (seeded per process).
    hashes: percolator::FastHashState,
}

impl Ledger {
    /// Whether this worker handled notify key `key` less than `RECENT_FOR` ago (a key put
    /// again later, e.g. rewritten by GC, is handled again).
    pub(super) fn handled_recently(&self, key: &[u8]) -> bool {
        let hash = self.hashes.hash_one(key);
        lock(&self.entries)
            .recent
            .get(&hash)
            .is_some_and(|at| at.elapsed() < RECENT_FOR)
    }

    /// Whether `key` is backing off (it may not be tried yet).
    pub(super) fn backing_off(&self, key: &[u8]) -> bool {
        lock(&self.entries)
            .retry
            .get(key)
            .is_some_and(|r| r.after > Instant::now())
    }

    /// Whether `key` is backing off after a failure or an outage (not after an undecided
    /// writer, whose backoff a committer's hint may end).
    pub(super) fn backing_off_after_failure(&self, key: &[u8]) -> bool {
        lock(&self.entries)
            .retry
            .get(key)
            .is_some_and(|r| (r.failures > 0 || r.outage > 0) && r.after > Instant::now())
    }

    /// Forgets the backoff of `key` (its committer reported its fate).
    pub(super) fn forget_backoff(&self, key: &[u8]) {
        lock(&self.entries).retry.remove(key);
    }

    /// Drops old entries once a map grew large: handled keys older than `RECENT_FOR`, and
    /// retry entries whose retry time passed `FORGET_RETRY_AFTER` ago.
    pub(super) fn prune(&self) {
        self.prune_at(Instant::now(), PRUNE_ABOVE);
    }

    fn prune_at(&self, now: Instant, above: usize) {
        let mut entries = lock(&self.entries);
        if entries.recent.len() > above {
            entries
                .recent
                .retain(|_, at| now.saturating_duration_since(*at) < RECENT_FOR);
        }
        if entries.retry.len() > above {
            entries
                .retry
                .retain(|_, r| now.saturating_duration_since(r.after) < FORGET_RETRY_AFTER);
        }
    }

    fn failures(&self, key: &[u8]) -> u32 {
        lock(&self.entries).retry.get(key).map_or(0, |r| r.failures)
    }

    fn retry_later(&self, key: &[u8], failures: u32, backoff: Duration) {
        let delay = backoff * 2u32.saturating_pow(failures.min(8));
        lock(&self.entries).retry.insert(
            key.to_vec(),
            Retry {
                failures,
                outage: 0,
                after: Instant::now() + delay,
            },
        );
    }

    /// After a transient error: the failure count stays, the backoff doubles with each
    /// transient error in a row (an outage is not hammered), up to 256 times `backoff`.
    fn retry_after_outage(&self, key: &[u8], backoff: Duration) {
        let mut entries = lock(&self.entries);
        let (failures, outage) = entries
            .retry
            .get(key)
            .map_or((0, 0), |r| (r.failures, r.outage));
        let outage = outage.saturating_add(1);
        let delay = backoff * 2u32.saturating_pow((failures + outage).min(8));
        entries.retry.insert(
            key.to_vec(),
            Retry {
                failures,
                outage,
                after: Instant::now() + delay,
            },
        );
    }

    fn done(&self, key: &[u8]) {
        let hash = self.hashes.hash_one(key);
        let now = Instant::now();
        let mut entries = lock(&self.entries);
        if !entries.retry.is_empty() {
            entries.retry.remove(key);
        }
        entries.recent.insert(hash, now);
    }
}

/// The labels of the observer of notify key `key`'s cell (`None`: not a notify key of a
/// registered column).
fn labels(inner: &Inner, key: &[u8]) -> Option<ObserverLabels> {
    let Ok(Key::Notify { cell, .. }) = inner.client.codec().decode(key) else {
        return None;
    };
    let registered = inner.registry.get(&cell)?;
    Some(inner.metrics.labels(&cell, &registered.name))
}

/// Books the outcome of handling notify key `key` (value `payload`).
pub(super) async fn after_handle(
    inner: &Inner,
    key: &[u8],
    payload: &Payload,
    outcome: Result<Outcome, percolator::TxnError>,
) {
    inner.membership.note_handled();
    let ledger = &inner.ledger;
    let retry_later = |failures: u32| ledger.retry_later(key, failures, inner.config.retry_backoff);
    match outcome {
        Ok(Outcome::Ran | Outcome::Covered | Outcome::RolledBack) => ledger.done(key),
        Ok(Outcome::Pending) => retry_later(0),
        Ok(Outcome::Unobserved) => {}
        // An outage met by the observer's transaction: retried with backoff, keeping the
        // failure count it had.
        Ok(Outcome::Transient { error }) => {
            #[cfg(feature = "planted")]
            if percolator::planted::active(percolator::planted::Bug::OutageCountsTowardsDeadLetter)
            {
                fail(inner, key, payload.to_bytes(), error.to_string()).await;
                return;
            }
            inner
                .metrics
                .count(Event::Retry, labels(inner, key).as_ref());
            tracing::debug!(%error, "transient error; notification retried later");
            ledger.retry_after_outage(key, inner.config.retry_backoff);
        }
        Ok(Outcome::Failed { error, resolved }) => {
            let value = match resolved {
                Some(resolved) => resolved.encode(),
                None => payload.to_bytes(),
            };
            fail(inner, key, value, error).await;
        }
        Err(percolator::TxnError::User(error)) => {
            fail(inner, key, payload.to_bytes(), error).await;
        }
        Err(e) if e.is_retryable() => retry_later(1),
        // A busy or unreachable store or oracle is not the observer's fault: retry with
        // backoff, without counting towards the dead letter.
        Err(e) if e.is_transient() => {
            #[cfg(feature = "planted")]
            if percolator::planted::active(percolator::planted::Bug::OutageCountsTowardsDeadLetter)
            {
                fail(inner, key, payload.to_bytes(), e.to_string()).await;
                return;
            }
            inner
                .metrics
                .count(Event::Retry, labels(inner, key).as_ref());
            tracing::debug!(error = %e, "transient error; notification retried later");
            ledger.retry_after_outage(key, inner.config.retry_backoff);
        }
        Err(e) => {
            // Anything else (a corrupt record met on the way, a storage error) counts as a
            // failure too, so a notification that can never be handled ends as a dead letter
            // instead of being retried forever.
            tracing::debug!(error = %e, "notification handling failed");
            fail(inner, key, payload.to_bytes(), e.to_string()).await;
        }
    }
}

/// Counts one failure of `key`: retried later with backoff, or parked as a dead letter (with
/// the notification `value`) once it reached `max_failures`.
async fn fail(inner: &Inner, key: &[u8], value: Vec<u8>, error: String) {
    let ledger = &inner.ledger;
    let backoff = inner.config.retry_backoff;
    let failures = ledger.failures(key) + 1;
    tracing::warn!(key = %key.escape_ascii(), failures, %error, "observer failed");
    if failures >= inner.config.max_failures {
        let letter = DeadLetter {
            notify_key: key.to_vec(),
            notification: value,
            error,
        };
        match DeadLetter::park(&inner.client, &letter).await {
            Ok(()) => {
                inner
                    .metrics
                    .count(Event::DeadLettered, labels(inner, key).as_ref());
                // Handled: a scan page read before the park, or a hinted copy queued behind
                // this run, must not run it again (it would fail from a count of zero, and
                // could park it a second time). A replay within `RECENT_FOR` that puts the
                // very same key (same second) waits that long on this worker: a scanner
                // keeps the floor below it and takes it after.
                ledger.done(key);
            }
            Err(e) => {
                tracing::warn!(error = %e, "dead-lettering failed");
                ledger.retry_later(key, failures, backoff);
            }
        }
    } else {
        ledger.retry_later(key, failures, backoff);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Retry entries of keys this worker no longer meets (handled elsewhere) are dropped
    /// once their retry time is long past; a key still backing off is kept with its count.
    #[test]
    fn retry_entries_of_keys_handled_elsewhere_are_forgotten() {
        let ledger = Ledger::default();
        let now = Instant::now();
        for i in 0..100u32 {
            ledger.retry_later(format!("gone-{i}").as_bytes(), 2, Duration::ZERO);
        }
        ledger.retry_later(b"live", 3, Duration::from_secs(3600));
        ledger.prune_at(now + FORGET_RETRY_AFTER / 2, 10);
        assert_eq!(lock(&ledger.entries).retry.len(), 101, "dropped too early");
        ledger.prune_at(now + FORGET_RETRY_AFTER * 2, 10);
        let entries = lock(&ledger.entries);
        assert_eq!(entries.retry.len(), 1);
        assert_eq!(
            entries.retry.get(b"live".as_slice()).map(|r| r.failures),
            Some(3)
        );
    }
}
