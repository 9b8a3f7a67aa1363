//! The [`Frontier`] that keeps the files of one [`super::lines::Lines::load_dir`] call loading in step by
//! event time.

use std::sync::Mutex;

/// Keeps the files of one [`super::lines::Lines::load_dir`] call loading in step by event time, as log readers
/// tailing live logs would: a file whose next batch starts more than `slack_ms` of event time
/// after the earliest pending batch of another file waits for it. Without it, a file of
/// clicks (fewer lines than its queries) runs ahead and most clicks arrive before their
/// query, park and must be woken.
pub struct Frontier {
    /// Per file: event time of the first event of its next batch; `None` until known.
    next: Mutex<Vec<Option<u64>>>,
    /// Files done (at their end) for this call.
    done: Mutex<Vec<bool>>,
    changed: tokio::sync::Notify,
    slack_ms: u64,
}

impl Frontier {
    /// A frontier over `files` files allowing `slack_ms` of event time ahead.
    pub fn new(files: usize, slack_ms: u64) -> Self {
        Frontier {
            next: Mutex::new(vec![None; files]),
            done: Mutex::new(vec![false; files]),
            changed: tokio::sync::Notify::new(),
            slack_ms,
        }
    }

    /// Whether file `me` may commit a batch starting at event time `at`: every other file
    /// still loading has a known next batch no earlier than `at - slack`.
    pub(super) fn may_go(&self, me: usize, at: u64) -> bool {
        let next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        next.iter().enumerate().all(|(i, t)| {
            i == me || done[i] || t.is_some_and(|t| t.saturating_add(self.slack_ms) >= at)
        })
    }

    /// Waits until file `me` may commit its batch starting at `at`.
    pub(super) async fn wait_turn(&self, me: usize, at: u64) {
        self.next.lock().unwrap_or_else(|p| p.into_inner())[me] = Some(at);
        self.changed.notify_waiters();
        loop {
            let notified = self.changed.notified();
            if self.may_go(me, at) {
                return;
            }
            // A bounded wait: a file with a slow next read cannot stall the others for long.
            let _ = tokio::time::timeout(std::time::Duration::from_millis(50), notified).await;
        }
    }

    /// Marks file `me` done for this call (it no longer holds the others back).
    pub(super) fn finish(&self, me: usize) {
        self.done.lock().unwrap_or_else(|p| p.into_inner())[me] = true;
        self.changed.notify_waiters();
    }
}
