//! Lanes: how many batch transactions of one observer go at once
//! (`crate::design::worker`, "Lanes": why, and what it changes).
//!
//! One lane per registration (table, column). A write conflict sets its limit to half of
//! the attempts going (at least one); as many clean attempts in a row as the limit raise it
//! by one (additive increase, multiplicative decrease). An attempt past the limit waits for
//! one to end, in the order attempts reach the lane. The lane decides only when an attempt
//! starts; single-cell runs are not paced (`Client::run` retries their conflicts itself).

use std::sync::Mutex;
use tokio::sync::{Semaphore, SemaphorePermit};

/// The most transactions of one observer a lane lets go at once (the worker's
/// `max_in_flight` bounds its runs before that).
const MOST: usize = 1024;

/// One registration's lane (shared by the workers that share its registry). Attempts wait
/// in the order they reach it (a fair semaphore).
pub(crate) struct Lane {
    /// One permit per transaction that may go.
    permits: Semaphore,
    state: Mutex<State>,
}

struct State {
    /// Transactions that may go at once.
    limit: usize,
    /// Transactions going.
    going: usize,
    /// Permits to forget as transactions end (the limit fell below those going).
    owed: usize,
    /// Transactions ended without a conflict since the limit last changed.
    clean: usize,
}

impl Default for Lane {
    fn default() -> Self {
        Lane {
            permits: Semaphore::new(MOST),
            state: Mutex::new(State {
                limit: MOST,
                going: 0,
                owed: 0,
                clean: 0,
            }),
        }
    }
}

impl Lane {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // Counters only: a poisoned lock is used as it is.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until the lane lets one more transaction go (in the order they came).
    pub(crate) async fn enter(&self) -> Entered<'_> {
        // The semaphore is never closed.
        let permit = self.permits.acquire().await.ok();
        self.lock().going += 1;
        Entered { lane: self, permit }
    }

    /// The lane's limit now.
    #[cfg(test)]
    fn limit(&self) -> usize {
        self.lock().limit
    }
}

/// A transaction of the lane, going: [`Entered::ended`] books how it ended; dropping it
/// without that (a run aborted) only gives its place back.
pub(crate) struct Entered<'a> {
    lane: &'a Lane,
    permit: Option<SemaphorePermit<'a>>,
}

impl Entered<'_> {
    /// Ends the transaction: a write conflict sets the lane's limit to half of those going
    /// (at least one), a run of clean ends as long as the limit raises it by one.
    pub(crate) fn ended(mut self, conflicted: bool) {
        let lane = self.lane;
        let mut state = lane.lock();
        if conflicted {
            let limit = (state.limit.min(state.going) / 2).max(1);
            if limit < state.limit {
                tracing::debug!(
                    limit,
                    "an observer's transactions conflicted: fewer at once"
                );
                // Free permits go at once, the rest as transactions end.
                let fewer = state.limit - limit;
                let forgotten = lane.permits.forget_permits(fewer);
                state.owed += fewer - forgotten;
                state.limit = limit;
            }
            state.clean = 0;
        } else if state.limit < MOST {
            state.clean += 1;
            if state.clean >= state.limit {
                state.clean = 0;
                state.limit += 1;
                if state.owed > 0 {
                    state.owed -= 1;
                } else {
                    lane.permits.add_permits(1);
                }
            }
        }
        self.release(&mut state);
    }

    /// Counts the transaction ended and returns its permit (or forgets it, if owed).
    fn release(&mut self, state: &mut State) {
        state.going = state.going.saturating_sub(1);
        if let Some(permit) = self.permit.take() {
            if state.owed > 0 {
                state.owed -= 1;
                permit.forget();
            }
        }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        if self.permit.is_some() {
            let lane = self.lane;
            let mut state = lane.lock();
            self.release(&mut state);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_conflict_halves_the_transactions_going_and_clean_ends_raise_the_limit() {
        let lane = Lane::default();
        let mut going = Vec::new();
        for _ in 0..8 {
            going.push(lane.enter().await);
        }
        // The first conflict halves the 8 going, the next ones what is left.
        going.pop().unwrap().ended(true);
        assert_eq!(lane.limit(), 4);
        going.pop().unwrap().ended(true);
        assert_eq!(lane.limit(), 2, "7 going: min(4, 7) / 2");
        going.pop().unwrap().ended(true);
        assert_eq!(lane.limit(), 1);
        going.pop().unwrap().ended(true);
        assert_eq!(lane.limit(), 1, "never below one");
        drop(going);
        // One clean end raises 1 to 2, two more raise 2 to 3.
        lane.enter().await.ended(false);
        assert_eq!(lane.limit(), 2);
        lane.enter().await.ended(false);
        assert_eq!(lane.limit(), 2);
        lane.enter().await.ended(false);
        assert_eq!(lane.limit(), 3);
    }

    #[tokio::test]
    async fn a_transaction_past_the_limit_waits_for_one_to_end() {
        let lane = std::sync::Arc::new(Lane::default());
        let first = lane.enter().await;
        let second = lane.enter().await;
        second.ended(true); // limit: min(1024, 2) / 2 = 1, with `first` going
        assert_eq!(lane.limit(), 1);
        let waiter = {
            let lane = lane.clone();
            tokio::spawn(async move {
                lane.enter().await.ended(false);
            })
        };
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "entered past the limit");
        first.ended(false);
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter)
            .await
            .expect("entered once the first ended")
            .expect("no panic");
    }
}
