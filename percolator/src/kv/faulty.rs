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
}

impl Default for Faults {
    fn default() -> Self {
        Faults {
            cas_hazard: 0.1,
            delay: 0.1,
            max_delay: Duration::from_millis(3),
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
        self.inner.get(key).await
    }

    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>> {
        self.maybe_delay().await;
        self.inner.batch_get(keys).await
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()> {
        self.maybe_delay().await;
        self.inner.put(key, value).await
    }

    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()> {
        self.maybe_delay().await;
        self.inner.batch_put(pairs).await
    }

    async fn delete(&self, key: Vec<u8>) -> KvResult<()> {
        self.maybe_delay().await;
        self.inner.delete(key).await
    }

    async fn scan(&self, range: KeyRange, limit: usize, order: ScanOrder) -> KvResult<Vec<KvPair>> {
        self.maybe_delay().await;
        self.inner.scan(range, limit, order).await
    }

    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome> {
        self.maybe_delay().await;
        let out = self
            .inner
            .compare_and_swap(key, expected, new.clone())
            .await?;
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
