//! The commits of this client in flight, so that a reader of the same client that meets one
//! of their locks or records waits for the decision in memory instead of polling the primary
//! with backoff (`percolator::design::locks`, "Waiting on a writer of this client").
//!
//! - A commit is registered from before its first prewrite until its commit point has been
//!   decided by its own CAS, or it gave up; the entry goes when the [`InFlight`] guard drops,
//!   which wakes every reader waiting on it, in the order they began waiting (a
//!   `tokio::sync::Notify`: a `watch` channel wakes its receivers in an order drawn from
//!   the runtime's random source, which made the simulation's seeds replay differently).
//! - A commit that reached its commit point records `Committed(c)` in the client's status
//!   cache before its guard drops, so the woken readers' next status check needs no read.
//! - This only changes *when* a reader checks the primary again, never what the check says:
//!   a reader that wakes on a rollback, a lost entry or the recheck period reads the primary
//!   as before.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Notify;

/// How long a reader waits on a commit of this client before it checks the primary anyway
/// (the writer may be stalled past its TTL; the check then fences it, as for any writer).
pub(crate) const LOCAL_RECHECK: Duration = Duration::from_millis(250);

/// The commits of one client between their first prewrite and their decision, by start_ts.
#[derive(Default)]
pub(crate) struct LocalWriters {
    in_flight: Mutex<HashMap<u64, Arc<Notify>>>,
}

/// A registered commit; dropping it wakes the readers waiting on it.
pub(crate) struct InFlight<'a> {
    writers: &'a LocalWriters,
    start_ts: u64,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        // Waiters registered under the lock while the entry was there: all woken.
        if let Some(decided) = self.writers.lock().remove(&self.start_ts) {
            decided.notify_waiters();
        }
    }
}

impl LocalWriters {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Notify>>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers the commit of transaction `start_ts` until the guard drops.
    pub(crate) fn begin(&self, start_ts: u64) -> InFlight<'_> {
        self.lock().insert(start_ts, Arc::new(Notify::new()));
        InFlight {
            writers: self,
            start_ts,
        }
    }

    /// Whether transaction `start_ts` is a commit of this client in flight.
    #[cfg(test)]
    pub(crate) fn is_in_flight(&self, start_ts: u64) -> bool {
        self.lock().contains_key(&start_ts)
    }

    /// Waits before the next status check of undecided transaction `start_ts`: until its
    /// decision (at most [`LOCAL_RECHECK`]) if it is a commit of this client in flight, else
    /// for `backoff`.
    pub(crate) async fn wait(&self, start_ts: u64, backoff: Duration) {
        let Some(decided) = self.lock().get(&start_ts).cloned() else {
            tokio::time::sleep(backoff).await;
            return;
        };
        let woken = decided.notified();
        tokio::pin!(woken);
        // Registered before the entry is looked up again: a guard dropped after this point
        // wakes it; one dropped before removed the entry, and then there is nothing to wait
        // for.
        woken.as_mut().enable();
        if !self.lock().contains_key(&start_ts) {
            return;
        }
        let _ = tokio::time::timeout(LOCAL_RECHECK, woken).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A reader waiting on a registered commit wakes when the guard drops, long before the
    /// recheck period; one waiting on another transaction sleeps its backoff.
    #[tokio::test(start_paused = true)]
    async fn a_reader_wakes_when_the_commit_ends() {
        let writers = std::sync::Arc::new(LocalWriters::default());
        let guard = writers.begin(7);
        assert!(writers.is_in_flight(7));
        let waiting = {
            let writers = writers.clone();
            tokio::spawn(async move {
                let started = tokio::time::Instant::now();
                writers.wait(7, Duration::from_secs(3600)).await;
                started.elapsed()
            })
        };
        tokio::time::sleep(Duration::from_millis(10)).await;
        drop(guard);
        let waited = waiting.await.expect("join");
        assert!(waited < LOCAL_RECHECK, "woke after {waited:?}");
        assert!(!writers.is_in_flight(7));

        // Not in flight: the caller's backoff.
        let started = tokio::time::Instant::now();
        writers.wait(8, Duration::from_millis(40)).await;
        assert_eq!(started.elapsed(), Duration::from_millis(40));

        // In flight and never decided: the recheck period bounds the wait.
        let _stalled = writers.begin(9);
        let started = tokio::time::Instant::now();
        writers.wait(9, Duration::from_secs(3600)).await;
        assert_eq!(started.elapsed(), LOCAL_RECHECK);
    }
}
