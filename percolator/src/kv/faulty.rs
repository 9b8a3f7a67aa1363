//! A fault-injecting [`RawKv`](super::RawKv) wrapper for tests (feature `testkit`).
//!
//! It reproduces tikv-client's CAS retry hazard (the swap is applied but reported as failed,
//! with the current value, which is then the caller's own), delays calls by random amounts
//! so that concurrent calls land in a different order than they were issued, and fails calls
//! as unavailable (before they reach the store, or after it applied them: a lost reply). It
//! is an [`Intercepted`] store whose hooks are [`FaultHooks`].

use super::intercept::{Call, Hooks, Intercepted, Op};
use super::{CasOutcome, KvError, KvResult, RawKv};
use async_trait::async_trait;
use rand::Rng;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Fault rates of a [`FaultyKv`].
#[derive(Clone, Debug)]
pub struct Faults {
    /// Probability that a CAS which swapped is reported as not swapped.
    pub cas_hazard: f64,
    /// Probability that a call is delayed before it reaches the store.
    pub delay: f64,
    /// Upper bound of one delay.
    pub max_delay: Duration,
    /// Probability that a call fails with [`KvError::Unavailable`]: half of them
    /// before reaching the store, half after it applied the call (a lost reply).
    pub unavailable: f64,
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            cas_hazard: 0.1,
            delay: 0.1,
            max_delay: Duration::from_millis(3),
            unavailable: 0.0,
        }
    }
}

/// A store wrapped so that it injects [`Faults`].
pub type FaultyKv = Intercepted<FaultHooks>;

impl FaultyKv {
    /// Wraps `inner`, injecting `faults`.
    pub fn new(inner: Arc<dyn RawKv>, faults: Faults) -> Self {
        Intercepted::wrap(
            inner,
            FaultHooks {
                faults,
                hazards: AtomicU64::new(0),
            },
        )
    }

    /// How many swaps were reported as failed although they applied.
    pub fn hazards_injected(&self) -> u64 {
        self.hooks().hazards.load(Ordering::Relaxed)
    }
}

/// The hooks of a [`FaultyKv`]: its [`Faults`] and the count of hazards injected.
pub struct FaultHooks {
    faults: Faults,
    hazards: AtomicU64,
}

impl FaultHooks {
    /// Whether to fail with probability `p` (drawing nothing when `p` is 0).
    fn roll(p: f64) -> bool {
        p > 0.0 && rand::thread_rng().gen_bool(p.min(1.0))
    }
}

#[async_trait]
impl Hooks for FaultHooks {
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        let delay = {
            let mut rng = rand::thread_rng();
            if rng.gen_bool(self.faults.delay) {
                Some(rng.gen_range(Duration::ZERO..=self.faults.max_delay))
            } else {
                None
            }
        };
        match delay {
            Some(d) => tokio::time::sleep(d).await,
            None => tokio::task::yield_now().await,
        }
        // Half of the unavailable calls fail here, before reaching the store.
        if Self::roll(self.faults.unavailable / 2.0) {
            return Err(lost(call.op()));
        }
        Ok(())
    }

    async fn after(&self, op: Op) -> KvResult<()> {
        // The other half lose their reply after the store applied them: among the calls that
        // got past `before`, that is a share of (u/2) / (1 - u/2).
        let half = self.faults.unavailable / 2.0;
        if half > 0.0 && Self::roll(half / (1.0 - half)) {
            return Err(lost(op));
        }
        Ok(())
    }

    async fn swapped(&self, _key: &[u8], new: &[u8], outcome: CasOutcome) -> KvResult<CasOutcome> {
        if outcome.swapped && rand::thread_rng().gen_bool(self.faults.cas_hazard) {
            // What tikv-client reports when its retry of an applied CAS fails: not swapped,
            // and the current value, which is the one this very call wrote.
            self.hazards.fetch_add(1, Ordering::Relaxed);
            return Ok(CasOutcome {
                previous: Some(new.to_vec()),
                swapped: false,
            });
        }
        Ok(outcome)
    }
}

fn lost(op: Op) -> KvError {
    KvError::Unavailable {
        op: op.name(),
        message: "injected: no reply".to_string(),
    }
}
