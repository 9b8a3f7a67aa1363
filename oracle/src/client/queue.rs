//! The batching queue of an [`OracleClient`](super::OracleClient): requests join the
//! current round ([`Round`]) until the connection task takes it; a round completes once, for
//! every requester in it ([`Serving`] completes it on drop, so no requester waits forever).

use super::ClientError;
use crate::proto::MAX_COUNT;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use tokio::sync::Notify;

/// The requests of one round trip. Each request takes the next index; the connection task
/// sets the outcome (the first timestamp of the range) once, then wakes every requester.
pub(super) struct Round {
    pub(super) outcome: OnceLock<Result<u64, ClientError>>,
    pub(super) done: Notify,
}

impl Round {
    pub(super) fn new() -> Arc<Round> {
        Arc::new(Round {
            outcome: OnceLock::new(),
            done: Notify::new(),
        })
    }
}

/// Requests not yet sent: `current` collects new ones; `full` holds rounds that reached
/// [`MAX_COUNT`] requests. `gone` once the connection task has ended: no round would be sent.
pub(super) struct Pending {
    pub(super) full: Vec<(Arc<Round>, u32)>,
    pub(super) current: Arc<Round>,
    pub(super) count: u32,
    pub(super) gone: bool,
}

pub(super) struct Queue {
    pub(super) pending: Mutex<Pending>,
    pub(super) notify: Notify,
    pub(super) closed: AtomicBool,
    pub(super) round_trips: AtomicU64,
    pub(super) served: AtomicU64,
}

pub(super) struct Inner {
    pub(super) queue: Arc<Queue>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.queue.closed.store(true, Ordering::Release);
        self.queue.notify.notify_one();
    }
}

impl Queue {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn pending_count(&self) -> u32 {
        let p = self.lock();
        p.count + p.full.len() as u32 * MAX_COUNT
    }

    /// Takes the oldest pending round and its request count, if any request is pending.
    pub(super) fn take_round(&self) -> Option<(Arc<Round>, u32)> {
        let mut p = self.lock();
        if !p.full.is_empty() {
            Some(p.full.remove(0))
        } else if p.count > 0 {
            let count = std::mem::replace(&mut p.count, 0);
            Some((std::mem::replace(&mut p.current, Round::new()), count))
        } else {
            None
        }
    }

    /// The connection task ended: fails every pending round, and every later request.
    pub(super) fn shut(&self) {
        let mut p = self.lock();
        p.gone = true;
        let mut rounds: Vec<Arc<Round>> = p.full.drain(..).map(|(r, _)| r).collect();
        rounds.push(p.current.clone());
        drop(p);
        for round in rounds {
            drop(Serving(round));
        }
    }
}

/// Completes a round when dropped, so no requester waits forever.
pub(super) struct Serving(pub(super) Arc<Round>);

impl Serving {
    pub(super) fn finish(&self, outcome: Result<u64, ClientError>) {
        let _ = self.0.outcome.set(outcome);
        self.0.done.notify_waiters();
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        if self.0.outcome.get().is_none() {
            self.finish(Err(ClientError::Closed));
        }
    }
}
