//! TiKV raw mode as a [`RawKv`] backend, through `tikv-client` 0.4.0.
//!
//! [`TikvKv`] holds two handles on one connection: a plain raw client and an atomic one
//! (`with_atomic_for_cas()`). The adapter's rules, each answering a known pitfall of the
//! client (see `percolator_tikv::design`):
//!
//! - **Which client writes a key.** Every key that is ever CASed must only be written by the
//!   atomic client, or TiKV's latches do not cover the plain writes and a CAS can interleave
//!   with them. [`AtomicKeys`] names those keys: [`AtomicKeys::All`] (the default, always
//!   safe, slower writes), [`AtomicKeys::PercolatorLayout`] (derived from the key codec:
//!   the `H`, `M` and `W` spaces of every namespace; what the binaries use), a list of
//!   prefixes (e.g. [`AtomicKeys::percolator_spaces`]: the same spaces of one namespace) or a
//!   predicate. Writes of other keys use the plain
//!   client. A CAS of a key outside the atomic set is refused with
//!   [`KvError::InvalidArgument`]. Reads use the plain client (reads take no latches).
//! - **Deletes in atomic mode.** The atomic client refuses `batch_delete` and
//!   `delete_range`; atomic keys are deleted one `delete` each (with bounded concurrency),
//!   plain keys in one `batch_delete`.
//! - **Scans.** `RawClient::scan`/`scan_reverse` loop around in the last region (its end key
//!   is empty, so the client restarts from the beginning of the key space: duplicates, keys
//!   outside the range, an endless loop on an empty range), and `batch_scan` of a range sends
//!   one `RawBatchScan` per region of the range, each with the whole limit. Forward scans
//!   therefore walk regions with PD's region bounds (`GetRegion`, `GetPrevRegion`; a minimal
//!   PD client, since the client exposes none): one `batch_scan` of the range's part in the
//!   region holding the page's start, then the next region only while the page is not full,
//!   so a page costs O(regions its keys lie in) RPCs, not O(regions of the range); each
//!   answer is sorted, clipped to the part and truncated. The regions PD names are
//!   remembered for [`TikvConfig::region_cache_ttl`] (10 s), so a page inside a known
//!   region costs its `RawBatchScan` alone; a stale bound only cuts the range elsewhere (the
//!   client routes each part's `batch_scan` by its own cache), never loses or repeats a key. `scan_reverse` also asks the region
//!   of the range's *start*, not its end, and retries no gRPC error. Reverse scans therefore
//!   walk regions down from the end of the range, each region's part clipped below the part
//!   read before (so a region PD names after a merge is never read twice), a region below a
//!   bound trusted only when it ends at that bound (PD's `GetRegion` and `GetPrevRegion`
//!   can straddle a merge: the pair is asked again), and read each
//!   part with a key-only forward probe of the remaining limit (fewer keys: the probe is the
//!   answer) or else with `scan_reverse` confined to that part, whose answer is checked
//!   (exactly the limit, strictly descending, inside the part, no key of the part above its
//!   first). No bound outside the part's region is sent: an unbounded part (TiKV refuses an
//!   empty upper bound beyond the first region) is read as its keys from `[0xFF; 16]` on,
//!   forward, then the part below. A part failing a check is paged forward (O(that part),
//!   [`TikvKv::reverse_scan_fallbacks`] counts these). Cost: O(limit + regions touched).
//! - **`scan_many` in the last region.** The client's `batch_scan` groups ranges by region,
//!   but in the last region (empty end key) it ends every group after its first range: one
//!   `RawBatchScan` per range. When two or more ranges of a `scan_many` lie in the last
//!   region, they go as one `RawBatchScan` of the adapter's own to its leader, as the other
//!   requests sent directly (next item: the same regions, budget and refusals); a refused
//!   request's ranges are read through the client (`direct`;
//!   [`TikvKv::direct_batch_scans`]).
//! - **Requests sent directly.** tikv-client runs every request through its plan (cloned for
//!   its retries, sharded, dispatched, merged): about a fifth of photon's CPU per joined click
//!   through TiKV, where CASes are most of the RPCs. A CAS, get or put whose key lies in a
//!   region the adapter knows (remembered as PD named it, or asked of PD, until a request to
//!   it is refused; none while `region_cache_ttl` is zero), and a batch get or batch put (of
//!   one mode, up to 256 KiB and one raft entry) whose keys all lie in the region of its
//!   first, go to that region's leader as one request of the adapter's own
//!   (`RawCompareAndSwap`, `RawGet`, `RawBatchGet`, `RawBatchPut` with `for_cas` as the
//!   atomic client sets it), within the same budget as the scans'. Any refusal sends the
//!   request through the client (and drops the remembered region unless the store was only
//!   busy); a refused write is taken as one that may have applied, and resent it is the
//!   retry hazard below ([`TikvKv::direct_compare_and_swaps`], [`TikvKv::direct_puts`],
//!   [`TikvKv::direct_reads`]).
//! - **Scan limit.** At most 10,240 pairs per call, like the contract; ranges of any size page
//!   with [`percolator::kv::scan_all`] / [`percolator::kv::RangePager`].
//! - **CAS retry hazard.** The client retries a CAS after a transport error, and the retry can
//!   report `swapped == false` for a swap that did happen (it finds its own value). Callers
//!   must make every CASed value unique and read "not swapped, but `previous == new`" as
//!   success (percolator's heads do: `percolator::design::kv`). With
//!   [`TikvConfig::unique_cas_values`] set, the adapter does that translation itself. A CAS that fails with [`KvError::Unavailable`] (including the
//!   adapter's own deadline) has an unknown outcome: re-read.
//! - **Batched CAS**: tikv-client has no batched CAS, so `batch_compare_and_swap` runs the
//!   single CASes concurrently ([`TikvConfig::cas_concurrency`] in flight), each exactly as
//!   a lone CAS (its own retries, the retry-hazard translation), under one deadline; every
//!   request is answered (none is cancelled half-way) before the first error is returned.
//!   A batch naming a key outside the atomic set is refused before anything is sent.
//! - **CAS cannot delete**: the contract never asks it to.
//! - **`batch_put` is not atomic**: the client splits it into ~16 KB RPCs sent concurrently
//!   (a direct one is one request, but only when its keys lie in one region); the contract
//!   promises nothing across keys either.
//! - **Size limits.** Keys over TiKV's `max-key-size` and pairs that would not fit in one
//!   raft entry ([`TikvConfig::max_key_bytes`], [`TikvConfig::max_entry_bytes`]) are refused
//!   with [`KvError::InvalidArgument`] naming the key and the size, before anything is sent;
//!   TiKV's `RaftEntryTooLarge` (permanent) is reported the same way at once, never retried.
//! - **No hangs.** Every call runs under [`TikvConfig::op_timeout`] (the client's own retries
//!   with backoff can otherwise run for a long time when the cluster is down); each gRPC call
//!   also has [`TikvConfig::rpc_timeout`].
//! - **Weather.** Transient errors ([`RetryCause`]: `ServerIsBusy`, which the client returns
//!   at once; region errors the client gave up on; lost replies and broken connections; RPC
//!   deadlines) are retried by every call with jittered exponential backoff
//!   ([`TikvConfig::retry_base_delay`] doubling to [`TikvConfig::retry_max_delay`]) until
//!   `op_timeout`. The client's own backoff (used for the region and gRPC errors it retries
//!   itself) is jittered and sized to `op_timeout` instead of its default ~1.5 s. Why every
//!   call may be repeated (CAS included) is explained on the retry loop; counts by cause:
//!   [`TikvKv::retry_counts`].
//!
//! Errors name the failing call: [`KvError::Unavailable`] for transport, region and timeout
//! failures that outlived `op_timeout`, [`KvError::Engine`] for errors the server reported.
//!
//! Benchmark (next to the embedded store, through an in-process `minitikv` on loopback):
//! `cargo bench -p percolator-bench --bench kv`, backend `tikv`.

mod atomic_keys;
mod config;
pub mod design;
mod direct;
mod limits;
pub mod notify_tombstones;
mod pd;
mod retry;
mod scan;

pub use atomic_keys::{layout_space, space_is_atomic, AtomicKeys, KeyPredicate};
pub use config::{TikvConfig, TlsFiles, DEFAULT_CAS_CONCURRENCY};
pub use limits::ENTRY_OVERHEAD_BYTES;
pub use retry::{RetryCause, RetryCounts};

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use percolator::kv::{
    check_distinct_cas_keys, CasOutcome, CasRequest, KeyRange, KvError, KvPair, KvResult, RawKv,
    ScanOrder, MAX_SCAN_LIMIT,
};
use retry::{Deadline, RetryCounters};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use tikv_client::{Key, RawClient};

/// A [`RawKv`] over TiKV raw mode (see the crate documentation for the rules it follows).
pub struct TikvKv {
    plain: RawClient,
    atomic: RawClient,
    config: TikvConfig,
    reverse_fallbacks: AtomicU64,
    direct_scans: direct::DirectCounts,
    direct_cas: direct::DirectCounts,
    direct_puts: direct::DirectCounts,
    direct_reads: direct::DirectCounts,
    retries: RetryCounters,
    pd: pd::PdRegions,
}

impl std::fmt::Debug for TikvKv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TikvKv")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl TikvKv {
    /// Connects to the cluster through its PD endpoints.
    pub async fn connect(config: TikvConfig) -> KvResult<Self> {
        if config.pd_endpoints.is_empty() {
            return Err(KvError::InvalidArgument {
                op: "connect",
                message: "no PD endpoint given".into(),
            });
        }
        if let Some(tls) = &config.tls {
            // Checked here so a wrong path is an argument error, not "cluster unavailable".
            for (what, path) in [
                ("CA", &tls.ca),
                ("certificate", &tls.cert),
                ("private key", &tls.key),
            ] {
                if let Err(e) = std::fs::File::open(path) {
                    return Err(KvError::InvalidArgument {
                        op: "connect",
                        message: format!("cannot read the TLS {what} file {}: {e}", path.display()),
                    });
                }
            }
        }
        let connect =
            RawClient::new_with_config(config.pd_endpoints.clone(), config.client_config());
        let plain = match tokio::time::timeout(config.connect_timeout, connect).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                return Err(KvError::Unavailable {
                    op: "connect",
                    message: format!("PD {}: {e}", config.pd_endpoints.join(",")),
                })
            }
            Err(_) => {
                return Err(KvError::Unavailable {
                    op: "connect",
                    message: format!(
                        "PD {} did not answer within {:?}",
                        config.pd_endpoints.join(","),
                        config.connect_timeout
                    ),
                })
            }
        };
        let plain = plain.with_backoff(config.client_backoff());
        let atomic = plain.with_atomic_for_cas();
        tracing::debug!(endpoints = ?config.pd_endpoints, "connected to TiKV");
        let pd = pd::PdRegions::new(
            config.pd_endpoints.clone(),
            config.tls.clone(),
            config.rpc_timeout,
            config.region_cache_ttl,
            config.max_message_bytes,
        );
        Ok(TikvKv {
            plain,
            atomic,
            pd,
            config,
            reverse_fallbacks: AtomicU64::new(0),
            direct_scans: direct::DirectCounts::default(),
            direct_cas: direct::DirectCounts::default(),
            direct_puts: direct::DirectCounts::default(),
            direct_reads: direct::DirectCounts::default(),
            retries: RetryCounters::default(),
        })
    }

    /// Retries so far, by cause.
    pub fn retry_counts(&self) -> RetryCounts {
        self.retries.snapshot()
    }

    fn deadline(&self) -> Deadline {
        Deadline(Instant::now() + self.config.op_timeout)
    }

    /// The configuration in use.
    pub fn config(&self) -> &TikvConfig {
        &self.config
    }

    fn writer(&self, key: &[u8]) -> &RawClient {
        if self.config.atomic_keys.is_atomic(key) {
            &self.atomic
        } else {
            &self.plain
        }
    }

    async fn get_many(
        &self,
        keys: &[Vec<u8>],
        deadline: Deadline,
    ) -> KvResult<Vec<Option<Vec<u8>>>> {
        let Some(first) = keys.first() else {
            return Ok(Vec::new());
        };
        let direct = self
            .to_leader(first, &deadline, &self.direct_reads, |region| async move {
                if !keys.iter().all(|k| region.contains(k)) {
                    return Ok(None);
                }
                direct::raw_batch_get(&self.pd, &region, keys)
                    .await
                    .map(Some)
            })
            .await;
        let found: HashMap<Vec<u8>, Vec<u8>> = match direct {
            Some(pairs) => pairs.into_iter().collect(),
            None => self
                .call("batch_get", deadline, || {
                    self.plain.batch_get(keys.to_vec())
                })
                .await?
                .into_iter()
                .map(|p| {
                    let (k, v): (Key, Vec<u8>) = p.into();
                    (Vec::from(k), v)
                })
                .collect(),
        };
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }
}

#[async_trait]
impl RawKv for TikvKv {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        self.check_key("get", key)?;
        let deadline = self.deadline();
        let direct = self
            .to_leader(key, &deadline, &self.direct_reads, |region| async move {
                direct::raw_get(&self.pd, &region, key).await.map(Some)
            })
            .await;
        match direct {
            Some(value) => Ok(value),
            None => {
                self.call("get", deadline, || self.plain.get(key.to_vec()))
                    .await
            }
        }
    }

    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>> {
        for key in keys {
            self.check_key("batch_get", key)?;
        }
        self.get_many(keys, self.deadline()).await
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()> {
        self.check_write("put", &key, value.len())?;
        let writer = self.writer(&key);
        let deadline = self.deadline();
        let pair = [(key, value)];
        let for_cas = self.config.atomic_keys.is_atomic(&pair[0].0);
        if self.put_direct(&pair, for_cas, &deadline).await {
            return Ok(());
        }
        let [(key, value)] = pair;
        self.call("put", deadline, || writer.put(key.clone(), value.clone()))
            .await
            .map_err(|e| limits::name_key(e, &key, key.len() + value.len()))
    }

    /// Every pair is checked against TiKV's limits before anything is sent; a batch in one
    /// region that fits in one raft entry may go as one request of the adapter's own, any
    /// other is split by the client into requests of ~16 KiB (and one per region), so that
    /// no raft entry is larger than the largest pair or the limit.
    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()> {
        for (key, value) in &pairs {
            self.check_write("batch_put", key, value.len())?;
        }
        // Named should TiKV refuse an entry anyway (a lower limit than configured).
        let largest = pairs
            .iter()
            .max_by_key(|(k, v)| k.len() + v.len())
            .map(|(k, v)| (k.clone(), k.len() + v.len()));
        let name = |e: KvError| match &largest {
            Some((key, size)) => limits::name_key(e, key, *size),
            None => e,
        };
        let (atomic, plain): (Vec<KvPair>, Vec<KvPair>) = pairs
            .into_iter()
            .partition(|(k, _)| self.config.atomic_keys.is_atomic(k));
        let deadline = self.deadline();
        if !plain.is_empty() && !self.put_direct(&plain, false, &deadline).await {
            self.call("batch_put", deadline, || {
                self.plain.batch_put(plain.clone())
            })
            .await
            .map_err(name)?;
        }
        if !atomic.is_empty() && !self.put_direct(&atomic, true, &deadline).await {
            self.call("batch_put", deadline, || {
                self.atomic.batch_put(atomic.clone())
            })
            .await
            .map_err(name)?;
        }
        Ok(())
    }

    async fn delete(&self, key: Vec<u8>) -> KvResult<()> {
        self.check_key("delete", &key)?;
        let writer = self.writer(&key);
        self.call("delete", self.deadline(), || writer.delete(key.clone()))
            .await
    }

    async fn batch_delete(&self, keys: Vec<Vec<u8>>) -> KvResult<()> {
        for key in &keys {
            self.check_key("batch_delete", key)?;
        }
        let (atomic, plain): (Vec<Vec<u8>>, Vec<Vec<u8>>) = keys
            .into_iter()
            .partition(|k| self.config.atomic_keys.is_atomic(k));
        let deadline = self.deadline();
        if !plain.is_empty() {
            self.call("batch_delete", deadline, || {
                self.plain.batch_delete(plain.clone())
            })
            .await?;
        }
        // The atomic client refuses batch_delete: one delete per key.
        futures::stream::iter(atomic)
            .map(|key| {
                self.call("batch_delete", deadline, move || {
                    self.atomic.delete(key.clone())
                })
            })
            .buffer_unordered(self.config.delete_concurrency.max(1))
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    async fn scan(&self, range: KeyRange, limit: usize, order: ScanOrder) -> KvResult<Vec<KvPair>> {
        if limit == 0 || limit > MAX_SCAN_LIMIT {
            return Err(KvError::InvalidArgument {
                op: "scan",
                message: format!("limit {limit} is outside 1..={MAX_SCAN_LIMIT}"),
            });
        }
        if range.is_empty() {
            return Ok(Vec::new());
        }
        let deadline = self.deadline();
        match order {
            ScanOrder::Forward => self.scan_forward(&range, limit, deadline).await,
            ScanOrder::Reverse => self.scan_reverse(&range, limit, deadline).await,
        }
    }

    async fn scan_many(
        &self,
        ranges: Vec<KeyRange>,
        each_limit: usize,
    ) -> KvResult<Vec<Vec<KvPair>>> {
        if each_limit == 0 || each_limit > MAX_SCAN_LIMIT {
            return Err(KvError::InvalidArgument {
                op: "scan_many",
                message: format!("limit {each_limit} is outside 1..={MAX_SCAN_LIMIT}"),
            });
        }
        self.scan_ranges(&ranges, each_limit, self.deadline()).await
    }

    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome> {
        self.check_atomic(&key)?;
        self.check_write("compare_and_swap", &key, new.len())?;
        self.cas_one(key, expected, new, self.deadline()).await
    }

    async fn batch_compare_and_swap(&self, requests: Vec<CasRequest>) -> KvResult<Vec<CasOutcome>> {
        check_distinct_cas_keys(&requests)?;
        for r in &requests {
            self.check_atomic(&r.key)?;
            self.check_write("batch_compare_and_swap", &r.key, r.new.len())?;
        }
        let deadline = self.deadline();
        let answers: Vec<KvResult<CasOutcome>> = futures::stream::iter(requests)
            .map(|r| self.cas_one(r.key, r.expected, r.new, deadline))
            .buffered(self.config.cas_concurrency.max(1))
            .collect()
            .await;
        answers.into_iter().collect()
    }

    /// Nothing to do: TiKV acknowledges a raw write once its Raft log is persisted on a
    /// majority of the region's peers.
    async fn sync(&self) -> KvResult<()> {
        Ok(())
    }
}

impl TikvKv {
    /// Refuses a CAS of a key outside the atomic set.
    fn check_atomic(&self, key: &[u8]) -> KvResult<()> {
        if !self.config.atomic_keys.is_atomic(key) {
            return Err(KvError::InvalidArgument {
                op: "compare_and_swap",
                message: format!(
                    "key {key:?} is outside the configured atomic keys ({:?}); its plain writes \
                     would not be serialised with the CAS",
                    self.config.atomic_keys
                ),
            });
        }
        Ok(())
    }

    /// One CAS of an atomic key, retried within `deadline` (see `call` for why a CAS may be
    /// repeated), with the retry-hazard translation when values are unique.
    async fn cas_one(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
        deadline: Deadline,
    ) -> KvResult<CasOutcome> {
        let (previous, swapped) = match self.cas_direct(&key, &expected, &new, &deadline).await {
            Some(answer) => answer,
            None => self
                .call("compare_and_swap", deadline, || {
                    self.atomic
                        .compare_and_swap(key.clone(), expected.clone(), new.clone())
                })
                .await
                .map_err(|e| limits::name_key(e, &key, key.len() + new.len()))?,
        };
        let outcome = CasOutcome { previous, swapped };
        Ok(if self.config.unique_cas_values {
            // Our own write, reported by the client's retry (values are unique).
            outcome.own_write_decided(expected, &new)
        } else {
            outcome
        })
    }

    /// The CAS sent to the leader of the region holding `key` as the adapter's own
    /// request ([`TikvKv::to_leader`]); `None`: the caller sends it through tikv-client.
    async fn cas_direct(
        &self,
        key: &[u8],
        expected: &Option<Vec<u8>>,
        new: &[u8],
        deadline: &Deadline,
    ) -> Option<(Option<Vec<u8>>, bool)> {
        self.to_leader(key, deadline, &self.direct_cas, |region| async move {
            direct::raw_cas(&self.pd, &region, key, expected.as_deref(), new)
                .await
                .map(Some)
        })
        .await
    }

    /// Whether `pairs` (of one mode: `for_cas` for the atomic keys) were written by one
    /// `RawBatchPut` of the adapter's own ([`TikvKv::to_leader`]): only when they fit in
    /// [`direct::DIRECT_PUT_MAX_BYTES`] and in one raft entry (`max_entry_bytes`, with
    /// [`ENTRY_OVERHEAD_BYTES`] per pair) and their keys all lie in the region of the first.
    /// `false`: the caller writes them through tikv-client.
    async fn put_direct(&self, pairs: &[KvPair], for_cas: bool, deadline: &Deadline) -> bool {
        let bytes: usize = pairs.iter().map(|(k, v)| k.len() + v.len()).sum();
        let entry = bytes.saturating_add(pairs.len().saturating_mul(ENTRY_OVERHEAD_BYTES));
        let Some((first, _)) = pairs.first() else {
            return false;
        };
        if bytes > direct::DIRECT_PUT_MAX_BYTES || entry > self.config.max_entry_bytes {
            return false;
        }
        self.to_leader(first, deadline, &self.direct_puts, |region| async move {
            if !pairs.iter().all(|(k, _)| region.contains(k)) {
                return Ok(None);
            }
            direct::raw_batch_put(&self.pd, &region, pairs, for_cas)
                .await
                .map(Some)
        })
        .await
        .is_some()
    }

    /// A request of the adapter's own (`crate::direct`) to the leader of the region holding
    /// `key` (remembered, or named by PD), built and sent by `send`, which answers `Ok(None)`
    /// when the request does not fit that region (its keys span others). Only when regions
    /// are cached (`region_cache_ttl` above zero: else a PD lookup per request would double
    /// its RPCs), within the RPC's budget (`rpc_timeout`, at most half of what `deadline`
    /// leaves). `None` when the caller must send it through tikv-client; a refusal (the
    /// store's, the transport's, the budget's, or no region from PD) is counted in `counts`
    /// and forgets the region (not when the store was only busy), and the leader's channel
    /// too when the budget ran out.
    async fn to_leader<T, F, Fut>(
        &self,
        key: &[u8],
        deadline: &Deadline,
        counts: &direct::DirectCounts,
        send: F,
    ) -> Option<T>
    where
        F: FnOnce(pd::RegionBounds) -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>, direct::Refused>>,
    {
        if self.config.region_cache_ttl.is_zero() {
            return None;
        }
        let budget = self.config.rpc_timeout.min(deadline.remaining() / 2);
        let attempt = async {
            let region = self
                .pd
                .region_routed(key)
                .await
                .map_err(direct::Refused::Transport)?;
            let id = region.id;
            send(region).await.inspect_err(|refused| {
                tracing::debug!(%refused, region = id, "direct request refused; sent through tikv-client");
            })
        };
        let answer = tokio::time::timeout(budget, attempt).await;
        if !matches!(answer, Ok(Ok(_))) {
            counts.refused.fetch_add(1, Ordering::Relaxed);
        }
        match answer {
            Ok(Ok(Some(answer))) => {
                counts.sent.fetch_add(1, Ordering::Relaxed);
                Some(answer)
            }
            Ok(Ok(None)) => None,
            // Busy: the region and its leader are right; tikv-client's answer (and the
            // adapter's backoff on it) decides.
            Ok(Err(direct::Refused::Busy)) => None,
            Ok(Err(_)) => {
                self.pd.forget(key);
                None
            }
            Err(_) => {
                // No answer in time: the store's connection may hang (a half-open one
                // fails only when TCP gives up), so its channel goes with the region.
                tracing::debug!(
                    ?budget,
                    "direct request unanswered; sent through tikv-client"
                );
                self.pd.forget_with_leader(key);
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retry::transient_cause;
    use percolator::KeyCodec;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn atomic_key_rules() {
        assert!(AtomicKeys::All.is_atomic(b"anything"));
        let codec = KeyCodec::new("app");
        let rule = AtomicKeys::percolator_spaces(&codec);
        let cell = percolator::Cell::new("t", "r", "c");
        assert!(rule.is_atomic(&codec.head(&cell)));
        assert!(rule.is_atomic(&codec.meta("oracle")));
        assert!(!rule.is_atomic(&codec.version(&cell, 7)));
        assert!(!rule.is_atomic(&codec.data(&cell, 7)));
        assert!(!rule.is_atomic(&codec.notify(&cell, 7, 1)));
        // Another namespace's heads are not covered.
        assert!(!rule.is_atomic(&KeyCodec::new("appN").head(&cell)));
        let pred = AtomicKeys::Predicate(Arc::new(|k: &[u8]| k.first() == Some(&b'x')));
        assert!(pred.is_atomic(b"xy") && !pred.is_atomic(b"yx"));
    }

    #[test]
    fn transient_errors_are_classified_by_cause() {
        use tikv_client::Error as E;
        let region = |f: fn(&mut tikv_client::ProtoRegionError)| {
            let mut e = tikv_client::ProtoRegionError::default();
            f(&mut e);
            E::RegionError(Box::new(e))
        };
        let busy = region(|e| e.server_is_busy = Some(Default::default()));
        assert_eq!(transient_cause(&busy), Some(RetryCause::ServerBusy));
        let epoch = region(|e| e.epoch_not_match = Some(Default::default()));
        assert_eq!(transient_cause(&epoch), Some(RetryCause::Region));
        let lost_again = || E::GrpcAPI(tonic::Status::unavailable("reply lost"));
        let lost = lost_again();
        assert_eq!(transient_cause(&lost), Some(RetryCause::Transport));
        let late = E::GrpcAPI(tonic::Status::deadline_exceeded("late"));
        assert_eq!(transient_cause(&late), Some(RetryCause::Deadline));
        let nested = E::MultipleKeyErrors(vec![E::StringError("x".into()), busy]);
        assert_eq!(transient_cause(&nested), Some(RetryCause::ServerBusy));
        // A write over TiKV's raft entry limit is refused however often it is repeated, also
        // when the client collected it from one region of several.
        let too_large = region(|e| {
            let t = e.raft_entry_too_large.get_or_insert_with(Default::default);
            t.region_id = 7;
            t.entry_size = 9 << 20;
        });
        assert_eq!(transient_cause(&too_large), None);
        let both = E::MultipleKeyErrors(vec![lost_again(), too_large]);
        assert_eq!(transient_cause(&both), None);
        match retry::map_error("put", both) {
            KvError::InvalidArgument { op: "put", message } => {
                assert!(message.contains(&(9u64 << 20).to_string()), "{message}");
            }
            other => panic!("expected InvalidArgument, got {other:?}"),
        }
        // Errors the server reported, and refused arguments, are permanent.
        assert_eq!(
            transient_cause(&E::KvError {
                message: "bad".into()
            }),
            None
        );
        assert_eq!(
            transient_cause(&E::GrpcAPI(tonic::Status::internal("x"))),
            None
        );
        assert_eq!(transient_cause(&E::UnsupportedMode), None);
    }

    #[test]
    fn the_clients_backoff_is_sized_to_the_deadline() {
        let config = TikvConfig::new(vec!["pd:2379".into()]);
        let mut backoff = config.client_backoff();
        let mut total = Duration::ZERO;
        while let Some(d) = backoff.next_delay_duration() {
            total += d;
        }
        // Equal jitter waits at least half of each step.
        assert!(
            total >= config.op_timeout / 2,
            "client backoff adds up to {total:?} only"
        );
    }

    #[tokio::test]
    async fn missing_tls_files_are_refused_naming_connect() {
        let mut config = TikvConfig::new(vec!["127.0.0.1:1".into()]);
        config.tls = Some(TlsFiles {
            ca: "/nonexistent/ca.pem".into(),
            cert: "/nonexistent/cert.pem".into(),
            key: "/nonexistent/key.pem".into(),
        });
        match TikvKv::connect(config).await {
            Err(KvError::InvalidArgument {
                op: "connect",
                message,
            }) => {
                assert!(message.contains("ca.pem"), "{message}");
            }
            other => panic!("expected InvalidArgument in connect, got {other:?}"),
        }
    }

    #[tokio::test]
    async fn unreachable_pd_is_a_typed_error_naming_connect() {
        let mut config = TikvConfig::new(vec!["127.0.0.1:1".into()]);
        config.connect_timeout = Duration::from_secs(5);
        let started = std::time::Instant::now();
        match TikvKv::connect(config).await {
            Err(KvError::Unavailable { op: "connect", .. }) => {}
            other => panic!("expected Unavailable in connect, got {other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(10));
    }
}
