//! One [`RawKv`] wrapper that watches or disturbs a store's calls: tests inject faults with
//! it, and [`OpCounts`] counts a workload's calls by method (the demo reports them).
//!
//! [`Intercepted`] forwards every call of the [`RawKv`] contract to the store it wraps and
//! runs the [`Hooks`] it is given around each: before every call (with the call's kind and
//! arguments, able to hold it back or fail it), after every answered call (able to turn the
//! answer into a lost reply), after a scan (with the pairs it returned) and after a CAS (with
//! its outcome, able to replace it; unless the hooks say they never look, which spares a copy
//! of each request). Every hook does nothing unless a test overrides it, so a
//! test writes only what it watches. `FaultyKv` (feature `testkit`) is built on it too.
//!
//! The invariant it keeps: the wrapped store sees exactly the calls the caller made, in the
//! caller's order per task, with the caller's arguments (`batch_delete` included, which is
//! forwarded as one call, not split into deletes); only a hook changes what the caller sees.
//!
//! A batch of CASes ([`RawKv::batch_compare_and_swap`]) is watched at both levels: first
//! [`Hooks::before`] with [`Call::BatchCompareAndSwap`] (the whole batch; an error fails the
//! call before anything reaches the store), then, per request, the hooks of a single CAS
//! ([`Call::CompareAndSwap`] with `batched: true`, [`Op::CompareAndSwap`],
//! [`Hooks::swapped`]). The requests whose `before` passed are forwarded to the store as one
//! batch; a per-key error is returned once every forwarded request was answered, so an
//! injected fault hits any subset of a batch: some requests never reach the store, some
//! apply and lose their reply, the rest apply. That is exactly what the contract lets a
//! caller assume of a batch that returned `Err`.

use super::{CasOutcome, CasRequest, KeyRange, KvError, KvPair, KvResult, RawKv, ScanOrder};
use async_trait::async_trait;
use std::sync::Arc;

/// The kind of a [`RawKv`] call.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    /// [`RawKv::get`].
    Get,
    /// [`RawKv::batch_get`].
    BatchGet,
    /// [`RawKv::put`].
    Put,
    /// [`RawKv::batch_put`].
    BatchPut,
    /// [`RawKv::delete`].
    Delete,
    /// [`RawKv::batch_delete`].
    BatchDelete,
    /// [`RawKv::scan`].
    Scan,
    /// [`RawKv::scan_many`].
    ScanMany,
    /// [`RawKv::compare_and_swap`].
    CompareAndSwap,
    /// [`RawKv::batch_compare_and_swap`].
    BatchCompareAndSwap,
    /// [`RawKv::sync`].
    Sync,
}

impl Op {
    /// The method's name, as [`super::KvError`]'s `op` fields spell it (e.g. `"batch_get"`).
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::BatchGet => "batch_get",
            Op::Put => "put",
            Op::BatchPut => "batch_put",
            Op::Delete => "delete",
            Op::BatchDelete => "batch_delete",
            Op::Scan => "scan",
            Op::ScanMany => "scan_many",
            Op::CompareAndSwap => "compare_and_swap",
            Op::BatchCompareAndSwap => "batch_compare_and_swap",
            Op::Sync => "sync",
        }
    }
}

impl Op {
    /// Every kind of call, in declaration order.
    pub const ALL: [Op; 11] = [
        Op::Get,
        Op::BatchGet,
        Op::Put,
        Op::BatchPut,
        Op::Delete,
        Op::BatchDelete,
        Op::Scan,
        Op::ScanMany,
        Op::CompareAndSwap,
        Op::BatchCompareAndSwap,
        Op::Sync,
    ];

    fn index(self) -> usize {
        self as usize
    }
}

/// [`Hooks`] that count the calls of each kind and change nothing: how many store calls
/// (RPCs, on a remote store) a workload makes, by method, and how many keys the batched
/// CASes carried.
#[derive(Debug, Default)]
pub struct OpCounts {
    counts: [std::sync::atomic::AtomicU64; 11],
    batched_cas_keys: std::sync::atomic::AtomicU64,
}

impl OpCounts {
    /// Keys swapped (or tried) inside [`Op::BatchCompareAndSwap`] calls so far.
    pub fn batched_cas_keys(&self) -> u64 {
        self.batched_cas_keys
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Calls of kind `op` so far.
    pub fn get(&self, op: Op) -> u64 {
        self.counts[op.index()].load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Calls of every kind so far.
    pub fn total(&self) -> u64 {
        Op::ALL.iter().map(|op| self.get(*op)).sum()
    }

    /// (kind, calls) of every kind called at least once.
    pub fn snapshot(&self) -> Vec<(Op, u64)> {
        Op::ALL
            .iter()
            .map(|op| (*op, self.get(*op)))
            .filter(|(_, n)| *n > 0)
            .collect()
    }
}

#[async_trait]
impl Hooks for OpCounts {
    fn sees_swaps(&self) -> bool {
        false
    }

    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        let counter = match call {
            // A request of a batched CAS (the batch itself was counted).
            Call::CompareAndSwap { batched: true, .. } => &self.batched_cas_keys,
            call => &self.counts[call.op().index()],
        };
        counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(())
    }
}

/// One [`RawKv`] call with its arguments, as [`Hooks::before`] sees it.
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    /// [`RawKv::get`].
    Get {
        /// The key read.
        key: &'a [u8],
    },
    /// [`RawKv::batch_get`].
    BatchGet {
        /// The keys read.
        keys: &'a [Vec<u8>],
    },
    /// [`RawKv::put`].
    Put {
        /// The key written.
        key: &'a [u8],
        /// The value written.
        value: &'a [u8],
    },
    /// [`RawKv::batch_put`].
    BatchPut {
        /// The pairs written.
        pairs: &'a [KvPair],
    },
    /// [`RawKv::delete`].
    Delete {
        /// The key removed.
        key: &'a [u8],
    },
    /// [`RawKv::batch_delete`].
    BatchDelete {
        /// The keys removed.
        keys: &'a [Vec<u8>],
    },
    /// [`RawKv::scan`].
    Scan {
        /// The range scanned.
        range: &'a KeyRange,
        /// The most pairs asked for.
        limit: usize,
        /// The direction.
        order: ScanOrder,
    },
    /// [`RawKv::scan_many`].
    ScanMany {
        /// The ranges scanned.
        ranges: &'a [KeyRange],
        /// The most pairs asked for per range.
        each_limit: usize,
    },
    /// [`RawKv::compare_and_swap`].
    CompareAndSwap {
        /// The key swapped.
        key: &'a [u8],
        /// The value expected (`None`: absent).
        expected: Option<&'a [u8]>,
        /// The value to write.
        new: &'a [u8],
        /// Whether this CAS is one request of a [`RawKv::batch_compare_and_swap`] (whose
        /// [`Call::BatchCompareAndSwap`] was seen first).
        batched: bool,
    },
    /// [`RawKv::batch_compare_and_swap`], seen once before its requests are seen one by one.
    BatchCompareAndSwap {
        /// The requests, in the caller's order.
        requests: &'a [CasRequest],
    },
    /// [`RawKv::sync`].
    Sync,
}

impl Call<'_> {
    /// The call's kind.
    pub fn op(&self) -> Op {
        match self {
            Call::Get { .. } => Op::Get,
            Call::BatchGet { .. } => Op::BatchGet,
            Call::Put { .. } => Op::Put,
            Call::BatchPut { .. } => Op::BatchPut,
            Call::Delete { .. } => Op::Delete,
            Call::BatchDelete { .. } => Op::BatchDelete,
            Call::Scan { .. } => Op::Scan,
            Call::ScanMany { .. } => Op::ScanMany,
            Call::CompareAndSwap { .. } => Op::CompareAndSwap,
            Call::BatchCompareAndSwap { .. } => Op::BatchCompareAndSwap,
            Call::Sync => Op::Sync,
        }
    }
}

/// What an [`Intercepted`] store runs around each call. Every method does nothing by default.
///
/// Order within one call: [`Hooks::before`]; the store's call (an error from the store goes
/// straight back to the caller, no later hook runs); [`Hooks::after`]; then, for a scan,
/// [`Hooks::scanned`] and, for a CAS, [`Hooks::swapped`] (unless [`Hooks::sees_swaps`] is
/// `false`).
#[async_trait]
pub trait Hooks: Send + Sync + 'static {
    /// Runs before every call. It may wait (to hold the call back); an error is returned to
    /// the caller instead, and the call never reaches the store.
    async fn before(&self, call: Call<'_>) -> KvResult<()> {
        let _ = call;
        Ok(())
    }

    /// Runs after every call the store answered without error; an error is returned to the
    /// caller instead of the answer (as when the reply of an applied call is lost).
    async fn after(&self, op: Op) -> KvResult<()> {
        let _ = op;
        Ok(())
    }

    /// Runs after a scan the store answered, with its arguments and the pairs returned.
    fn scanned(&self, range: &KeyRange, limit: usize, order: ScanOrder, pairs: &[KvPair]) {
        let _ = (range, limit, order, pairs);
    }

    /// Whether [`Intercepted`] calls [`Hooks::swapped`]: only then does it keep a copy of
    /// each CAS's key and new value to hand it after the store answered. A hook that only
    /// counts or delays calls returns `false` to leave the copies out; a hook that overrides
    /// `swapped` must leave it `true`, or `swapped` is silently never called.
    fn sees_swaps(&self) -> bool {
        true
    }

    /// Runs after a CAS the store answered, with its key, the value it tried to write and
    /// the store's outcome; returns what the caller sees (by default, the store's outcome).
    async fn swapped(&self, key: &[u8], new: &[u8], outcome: CasOutcome) -> KvResult<CasOutcome> {
        let _ = (key, new);
        Ok(outcome)
    }
}

/// A store that forwards every call to `inner` through the hooks `H`.
pub struct Intercepted<H> {
    inner: Arc<dyn RawKv>,
    hooks: H,
}

impl<H: std::fmt::Debug> std::fmt::Debug for Intercepted<H> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Intercepted")
            .field("hooks", &self.hooks)
            .finish_non_exhaustive()
    }
}

impl<H: Hooks> Intercepted<H> {
    /// Wraps `inner`, running `hooks` around each of its calls.
    pub fn wrap(inner: Arc<dyn RawKv>, hooks: H) -> Self {
        Intercepted { inner, hooks }
    }

    /// The hooks (to arm, release or read what they count).
    pub fn hooks(&self) -> &H {
        &self.hooks
    }

    /// The wrapped store, which the hooks do not see.
    pub fn inner(&self) -> &Arc<dyn RawKv> {
        &self.inner
    }
}

#[async_trait]
impl<H: Hooks> RawKv for Intercepted<H> {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        self.hooks.before(Call::Get { key }).await?;
        let out = self.inner.get(key).await?;
        self.hooks.after(Op::Get).await?;
        Ok(out)
    }

    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>> {
        self.hooks.before(Call::BatchGet { keys }).await?;
        let out = self.inner.batch_get(keys).await?;
        self.hooks.after(Op::BatchGet).await?;
        Ok(out)
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()> {
        self.hooks
            .before(Call::Put {
                key: &key,
                value: &value,
            })
            .await?;
        self.inner.put(key, value).await?;
        self.hooks.after(Op::Put).await
    }

    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()> {
        self.hooks.before(Call::BatchPut { pairs: &pairs }).await?;
        self.inner.batch_put(pairs).await?;
        self.hooks.after(Op::BatchPut).await
    }

    async fn delete(&self, key: Vec<u8>) -> KvResult<()> {
        self.hooks.before(Call::Delete { key: &key }).await?;
        self.inner.delete(key).await?;
        self.hooks.after(Op::Delete).await
    }

    async fn batch_delete(&self, keys: Vec<Vec<u8>>) -> KvResult<()> {
        self.hooks.before(Call::BatchDelete { keys: &keys }).await?;
        self.inner.batch_delete(keys).await?;
        self.hooks.after(Op::BatchDelete).await
    }

    async fn scan(&self, range: KeyRange, limit: usize, order: ScanOrder) -> KvResult<Vec<KvPair>> {
        self.hooks
            .before(Call::Scan {
                range: &range,
                limit,
                order,
            })
            .await?;
        let out = self.inner.scan(range.clone(), limit, order).await?;
        self.hooks.after(Op::Scan).await?;
        self.hooks.scanned(&range, limit, order, &out);
        Ok(out)
    }

    async fn scan_many(
        &self,
        ranges: Vec<KeyRange>,
        each_limit: usize,
    ) -> KvResult<Vec<Vec<KvPair>>> {
        self.hooks
            .before(Call::ScanMany {
                ranges: &ranges,
                each_limit,
            })
            .await?;
        let out = self.inner.scan_many(ranges.clone(), each_limit).await?;
        self.hooks.after(Op::ScanMany).await?;
        for (range, pairs) in ranges.iter().zip(&out) {
            self.hooks
                .scanned(range, each_limit, ScanOrder::Forward, pairs);
        }
        Ok(out)
    }

    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome> {
        self.hooks
            .before(Call::CompareAndSwap {
                key: &key,
                expected: expected.as_deref(),
                new: &new,
                batched: false,
            })
            .await?;
        if !self.hooks.sees_swaps() {
            let out = self.inner.compare_and_swap(key, expected, new).await?;
            self.hooks.after(Op::CompareAndSwap).await?;
            return Ok(out);
        }
        let out = self
            .inner
            .compare_and_swap(key.clone(), expected, new.clone())
            .await?;
        self.hooks.after(Op::CompareAndSwap).await?;
        self.hooks.swapped(&key, &new, out).await
    }

    async fn batch_compare_and_swap(&self, requests: Vec<CasRequest>) -> KvResult<Vec<CasOutcome>> {
        super::check_distinct_cas_keys(&requests)?;
        self.hooks
            .before(Call::BatchCompareAndSwap {
                requests: &requests,
            })
            .await?;
        let mut first_error: Option<KvError> = None;
        let mut passed = Vec::with_capacity(requests.len());
        for r in &requests {
            let before = self
                .hooks
                .before(Call::CompareAndSwap {
                    key: &r.key,
                    expected: r.expected.as_deref(),
                    new: &r.new,
                    batched: true,
                })
                .await;
            passed.push(match before {
                Ok(()) => true,
                Err(e) => {
                    first_error.get_or_insert(e);
                    false
                }
            });
        }
        let count = requests.len();
        // The forwarded requests move to the store; `swapped` needs their keys and new values
        // afterwards, so those are kept (copied) only for hooks that look at them.
        let sees_swaps = self.hooks.sees_swaps();
        let mut kept: Vec<(Vec<u8>, Vec<u8>)> =
            Vec::with_capacity(if sees_swaps { count } else { 0 });
        let mut forwarded = Vec::with_capacity(count);
        let mut forwarded_at = Vec::with_capacity(count);
        for (i, (r, passed)) in requests.into_iter().zip(passed).enumerate() {
            if passed {
                if sees_swaps {
                    kept.push((r.key.clone(), r.new.clone()));
                }
                forwarded.push(r);
                forwarded_at.push(i);
            }
        }
        let answers = if forwarded.is_empty() {
            Vec::new()
        } else {
            self.inner.batch_compare_and_swap(forwarded).await?
        };
        let mut outcomes: Vec<Option<CasOutcome>> = vec![None; count];
        for (n, (i, outcome)) in forwarded_at.into_iter().zip(answers).enumerate() {
            if let Err(e) = self.hooks.after(Op::CompareAndSwap).await {
                first_error.get_or_insert(e);
                continue;
            }
            let seen = match kept.get(n) {
                Some((key, new)) => self.hooks.swapped(key, new, outcome).await,
                None => Ok(outcome),
            };
            match seen {
                Ok(seen) => outcomes[i] = Some(seen),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        outcomes
            .into_iter()
            .map(|o| {
                o.ok_or_else(|| KvError::Engine {
                    op: "batch_compare_and_swap",
                    message: "the store answered fewer requests than it was sent".to_string(),
                })
            })
            .collect()
    }

    async fn sync(&self) -> KvResult<()> {
        self.hooks.before(Call::Sync).await?;
        self.inner.sync().await?;
        self.hooks.after(Op::Sync).await
    }
}
