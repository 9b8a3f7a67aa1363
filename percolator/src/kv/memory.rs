//! An in-memory backend: the reference model for property tests and a fast store for unit
//! tests. Nothing survives the process.

use super::{
    check_distinct_cas_keys, check_scan_limit, CasOutcome, CasRequest, KeyRange, KvPair, KvResult,
    RawKv, ScanOrder,
};
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::Mutex;

/// A [`RawKv`] held in a `BTreeMap` behind one mutex; every call is atomic.
#[derive(Debug, Default)]
pub struct MemoryKv {
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
}

impl MemoryKv {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of keys stored.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// A copy of every pair, in key order (for tests and debugging).
    pub fn dump(&self) -> Vec<KvPair> {
        self.lock()
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Vec<u8>, Vec<u8>>> {
        // A panic while holding the lock cannot leave the map half-updated (every update is a
        // single BTreeMap call), so a poisoned lock is safe to keep using.
        self.map
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// The `BTreeMap` bounds of a [`KeyRange`].
pub(crate) fn range_bounds(range: &KeyRange) -> (Bound<&[u8]>, Bound<&[u8]>) {
    (
        Bound::Included(range.start.as_slice()),
        match &range.end {
            Some(end) => Bound::Excluded(end.as_slice()),
            None => Bound::Unbounded,
        },
    )
}

#[async_trait]
impl RawKv for MemoryKv {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        crate::kv::yield_point().await;
        Ok(self.lock().get(key).cloned())
    }

    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>> {
        crate::kv::yield_point().await;
        let map = self.lock();
        Ok(keys.iter().map(|k| map.get(k).cloned()).collect())
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()> {
        crate::kv::yield_point().await;
        self.lock().insert(key, value);
        Ok(())
    }

    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()> {
        crate::kv::yield_point().await;
        let mut map = self.lock();
        for (k, v) in pairs {
            map.insert(k, v);
        }
        Ok(())
    }

    async fn delete(&self, key: Vec<u8>) -> KvResult<()> {
        crate::kv::yield_point().await;
        self.lock().remove(&key);
        Ok(())
    }

    async fn batch_delete(&self, keys: Vec<Vec<u8>>) -> KvResult<()> {
        crate::kv::yield_point().await;
        let mut map = self.lock();
        for k in keys {
            map.remove(&k);
        }
        Ok(())
    }

    async fn scan(&self, range: KeyRange, limit: usize, order: ScanOrder) -> KvResult<Vec<KvPair>> {
        crate::kv::yield_point().await;
        check_scan_limit(limit)?;
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let map = self.lock();
        let iter = map
            .range::<[u8], _>(range_bounds(&range))
            .map(|(k, v)| (k.clone(), v.clone()));
        Ok(match order {
            ScanOrder::Forward => iter.take(limit).collect(),
            ScanOrder::Reverse => iter.rev().take(limit).collect(),
        })
    }

    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome> {
        crate::kv::yield_point().await;
        let mut map = self.lock();
        let previous = map.get(&key).cloned();
        let swapped = previous == expected;
        if swapped {
            map.insert(key, new);
        }
        Ok(CasOutcome { previous, swapped })
    }

    async fn batch_compare_and_swap(&self, requests: Vec<CasRequest>) -> KvResult<Vec<CasOutcome>> {
        crate::kv::yield_point().await;
        check_distinct_cas_keys(&requests)?;
        let mut map = self.lock();
        Ok(requests
            .into_iter()
            .map(|r| {
                let previous = map.get(&r.key).cloned();
                let swapped = previous == r.expected;
                if swapped {
                    map.insert(r.key, r.new);
                }
                CasOutcome { previous, swapped }
            })
            .collect())
    }

    /// Nothing to sync: nothing outlives the process.
    async fn sync(&self) -> KvResult<()> {
        Ok(())
    }
}
