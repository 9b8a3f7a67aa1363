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
    /// Per file: how much further than `slack_ms` it may run ahead of the others.
    lead_ms: Vec<u64>,
    /// Files done (at their end) for this call.
    done: Mutex<Vec<bool>>,
    changed: tokio::sync::Notify,
    slack_ms: u64,
}

impl Frontier {
    /// A frontier over `files` files allowing `slack_ms` of event time ahead.
    pub fn new(files: usize, slack_ms: u64) -> Self {
        Self::with_leads(vec![0; files], slack_ms)
    }

    /// A frontier over one file per entry of `lead_ms`, each allowed `slack_ms` plus its
    /// lead of event time ahead of the others: the files of events others depend on (Photon's
    /// queries, which clicks are joined with) lead, so the events that depend on them find
    /// them loaded; the others stay within `slack_ms` of them.
    pub fn with_leads(lead_ms: Vec<u64>, slack_ms: u64) -> Self {
        let files = lead_ms.len();
        Frontier {
            next: Mutex::new(vec![None; files]),
            lead_ms,
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
        let ahead = self.slack_ms.saturating_add(self.lead_ms[me]);
        next.iter()
            .enumerate()
            .all(|(i, t)| i == me || done[i] || t.is_some_and(|t| t.saturating_add(ahead) >= at))
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

#[cfg(test)]
mod tests {
    use super::Frontier;

    #[test]
    fn a_leading_file_runs_ahead_by_its_lead_and_the_others_stay_in_step() {
        // File 0 leads by 3 s (queries), file 1 does not (clicks); slack 100 ms.
        let f = Frontier::with_leads(vec![3_000, 0], 100);
        f.next.lock().unwrap()[1] = Some(10_000);
        assert!(f.may_go(0, 13_100), "up to slack and lead ahead");
        assert!(!f.may_go(0, 13_101));
        f.next.lock().unwrap()[0] = Some(10_000);
        assert!(f.may_go(1, 10_100), "the other within the slack");
        assert!(!f.may_go(1, 10_101));
    }
}
