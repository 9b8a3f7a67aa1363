//! A fault-injecting [`RawKv`] wrapper for tests (feature `testkit`).
//!
//! It reproduces tikv-client's CAS retry hazard (the swap is applied but reported as failed,
//! with the current value, which is then the caller's own) and delays calls by random amounts
//! so that concurrent calls land in a different order than they were issued.

use super::{CasOutcome, KeyRange, KvPair, KvResult, RawKv, ScanOrder};
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
    /// Probability that a call fails with [`super::KvError::Unavailable`]: half of them
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

/// Wraps a store, injecting [`Faults`].
pub struct FaultyKv {
    inner: Arc<dyn RawKv>,
    faults: Faults,
    hazards: AtomicU64,
}

impl FaultyKv {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn RawKv>, faults: Faults) -> Self {
        FaultyKv {
            inner,
            faults,
            hazards: AtomicU64::new(0),
        }
    }

    /// How many swaps were reported as failed although they applied.
    pub fn hazards_injected(&self) -> u64 {
        self.hazards.load(Ordering::Relaxed)
    }

    /// Whether to fail this call: `Some(true)` after applying it, `Some(false)` before.
    fn unavailable(&self) -> Option<bool> {
        let mut rng = rand::thread_rng();
        (self.faults.unavailable > 0.0 && rng.gen_bool(self.faults.unavailable))
            .then(|| rng.gen_bool(0.5))
    }

    async fn maybe_delay(&self) {
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
    }
}

#[async_trait]
impl RawKv for FaultyKv {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        self.maybe_delay().await;
        let fail = self.unavailable();
        if fail == Some(false) {
            return Err(lost("get"));
        }
        let out = self.inner.get(key).await?;
        if fail == Some(true) {
            return Err(lost("get"));
        }
        Ok(out)
    }

    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>> {
        self.maybe_delay().await;
        let fail = self.unavailable();
        if fail == Some(false) {
            return Err(lost("batch_get"));
        }
        let out = self.inner.batch_get(keys).await?;
        if fail == Some(true) {
            return Err(lost("batch_get"));
        }
        Ok(out)
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()> {
        self.maybe_delay().await;
        let fail = self.unavailable();
        if fail == Some(false) {
            return Err(lost("put"));
        }
        let out = self.inner.put(key, value).await?;
        if fail == Some(true) {
            return Err(lost("put"));
        }
        Ok(out)
    }

    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()> {
        self.maybe_delay().await;
        let fail = self.unavailable();
        if fail == Some(false) {
            return Err(lost("batch_put"));
        }
        let out = self.inner.batch_put(pairs).await?;
        if fail == Some(true) {
            return Err(lost("batch_put"));
        }
        Ok(out)
    }

    async fn delete(&self, key: Vec<u8>) -> KvResult<()> {
        self.maybe_delay().await;
        let fail = self.unavailable();
        if fail == Some(false) {
            return Err(lost("delete"));
        }
        let out = self.inner.delete(key).await?;
        if fail == Some(true) {
            return Err(lost("delete"));
        }
        Ok(out)
    }

    async fn scan(&self, range: KeyRange, limit: usize, order: ScanOrder) -> KvResult<Vec<KvPair>> {
        self.maybe_delay().await;
        let fail = self.unavailable();
        if fail == Some(false) {
            return Err(lost("scan"));
        }
        let out = self.inner.scan(range, limit, order).await?;
        if fail == Some(true) {
            return Err(lost("scan"));
        }
        Ok(out)
    }

    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome> {
        self.maybe_delay().await;
        let fail = self.unavailable();
        if fail == Some(false) {
            return Err(lost("compare_and_swap"));
        }
        let out = self
            .inner
            .compare_and_swap(key, expected, new.clone())
            .await?;
        if fail == Some(true) {
            return Err(lost("compare_and_swap"));
        }
        if out.swapped && rand::thread_rng().gen_bool(self.faults.cas_hazard) {
            // What tikv-client reports when its retry of an applied CAS fails: not swapped,
            // and the current value, which is the one this very call wrote.
            self.hazards.fetch_add(1, Ordering::Relaxed);
            return Ok(CasOutcome {
                previous: Some(new),
                swapped: false,
            });
        }
        Ok(out)
    }
}

fn lost(op: &'static str) -> super::KvError {
    super::KvError::Unavailable {
        op,
        message: "injected: no reply".to_string(),
    }
}
