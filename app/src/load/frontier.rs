//! The [`Frontier`] that keeps the files of one [`super::lines::Lines::load_dir`] call loading in step by
//! event time.

use std::sync::Mutex;

/// Keeps the files of one [`super::lines::Lines::load_dir`] call loading in step by event time, as log readers
/// tailing live logs would: a file whose next batch starts more than `slack_ms` of event time
/// after the earliest pending batch of another file waits for it. Without it, a file of
/// clicks (fewer lines than its queries) runs ahead and most clicks arrive before their
/// query, park and must be woken.
///
/// Files may *lead* (`lead_ms`: events others depend on, as Photon's queries): a leading file
/// may run its lead further ahead, and a file with a smaller lead (one whose events depend on
/// it) waits until the leading file has moved past its batch's *last* event, capped at the
/// difference of their leads, so that the events it depends on are committed before it
/// commits (a click logged a batch after its query no longer parks). A paced replay's
/// batches do not wait so (`Frontier::wait_turn` without a last event): there the leading
/// files move with the wall clock, and waiting for them to pass a batch's last event held
/// the dependent file up to the lead, then released its backlog in a burst.
///
/// **No deadlock.** Every wait is for a file whose next batch starts earlier once leads are
/// taken off: with `k = first - lead` for each waiting file's batch, file `a` waits for
/// file `b` under the slack rule only if `first_a > first_b + slack + lead_a`, so `k_a >
/// k_b`; under the lead rule only if `lead_b > lead_a` and `first_b < first_a + lead_b -
/// lead_a` (the cap), so `k_a > k_b` again. So the waiting files with the least `k` wait for
/// no one: some file always goes (files not yet at a batch hold the others only until they
/// get to one, as before).
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

    /// Whether file `me` may commit a batch of events from `first` to `last` (event times):
    /// every other file still loading has a known next batch no earlier than `first -
    /// slack - lead(me)`, and, when `last` is given, every file with a larger lead has moved
    /// past it (at most the difference of the leads past `first`).
    pub(super) fn may_go(&self, me: usize, first: u64, last: Option<u64>) -> bool {
        let next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let done = self.done.lock().unwrap_or_else(|p| p.into_inner());
        let lead = self.lead_ms[me];
        let ahead = self.slack_ms.saturating_add(lead);
        next.iter().enumerate().all(|(i, t)| {
            if i == me || done[i] {
                return true;
            }
            let Some(t) = *t else {
                return false;
            };
            let in_step = t.saturating_add(ahead) >= first;
            let led = self.lead_ms[i].saturating_sub(lead);
            let passed = |last: u64| t >= last.min(first.saturating_add(led));
            in_step && (led == 0 || last.is_none_or(passed))
        })
    }

    /// Waits until file `me` may commit its batch of events from `first` to `last` (`None`:
    /// the batch does not wait for the leading files to pass its events, as a paced replay,
    /// where that would wait for the wall clock).
    pub(super) async fn wait_turn(&self, me: usize, first: u64, last: Option<u64>) {
        self.next.lock().unwrap_or_else(|p| p.into_inner())[me] = Some(first);
        self.changed.notify_waiters();
        loop {
            let notified = self.changed.notified();
            if self.may_go(me, first, last) {
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
    use rand::{Rng, SeedableRng};

    #[test]
    fn a_leading_file_runs_ahead_by_its_lead_and_the_others_stay_in_step() {
        // File 0 leads by 3 s (queries), file 1 does not (clicks); slack 100 ms.
        let f = Frontier::with_leads(vec![3_000, 0], 100);
        f.next.lock().unwrap()[1] = Some(10_000);
        assert!(
            f.may_go(0, 13_100, Some(13_500)),
            "up to slack and lead ahead"
        );
        assert!(!f.may_go(0, 13_101, Some(13_101)));
        f.next.lock().unwrap()[0] = Some(10_200);
        assert!(
            f.may_go(1, 10_100, Some(10_200)),
            "the other past the batch's last event"
        );
        assert!(
            !f.may_go(1, 10_100, Some(10_201)),
            "the leading file not past the batch's last event"
        );
        // A batch spanning more than the lead (an early click line seconds ahead) waits for
        // the leading file to be the lead past its first event only.
        f.next.lock().unwrap()[0] = Some(13_100);
        assert!(f.may_go(1, 10_100, Some(20_000)));
        f.next.lock().unwrap()[0] = Some(13_099);
        assert!(!f.may_go(1, 10_100, Some(20_000)));
        // Without a last event (a paced replay): the slack rule alone.
        assert!(f.may_go(1, 10_100, None));
        assert!(f.may_go(1, 13_099 + 100, None));
        assert!(!f.may_go(1, 13_099 + 101, None));
    }

    #[test]
    fn files_of_equal_leads_wait_for_first_events_only() {
        let f = Frontier::new(2, 100);
        f.next.lock().unwrap()[1] = Some(10_000);
        assert!(f.may_go(0, 10_100, Some(50_000)));
        assert!(!f.may_go(0, 10_101, Some(10_101)));
    }

    /// Whatever batches the files wait at (random leads, first and last event times), at
    /// least one of them may go: the rules cannot deadlock.
    #[test]
    fn some_file_always_may_go() {
        let mut rng = rand::rngs::StdRng::seed_from_u64(42);
        for round in 0..20_000 {
            let files = rng.gen_range(2..6);
            let leads: Vec<u64> = (0..files)
                .map(|_| [0, 0, 500, 3_000][rng.gen_range(0..4)])
                .collect();
            let f = Frontier::with_leads(leads.clone(), rng.gen_range(0..200));
            let batches: Vec<(u64, u64)> = (0..files)
                .map(|_| {
                    let first = rng.gen_range(0..10_000);
                    (first, first + rng.gen_range(0..8_000))
                })
                .collect();
            for (i, (first, _)) in batches.iter().enumerate() {
                f.next.lock().unwrap()[i] = Some(*first);
            }
            assert!(
                (0..files).any(|i| {
                    let last = (rng.gen_range(0..4) > 0).then_some(batches[i].1);
                    f.may_go(i, batches[i].0, last)
                }),
                "round {round}: leads {leads:?}, batches {batches:?}"
            );
        }
    }
}
