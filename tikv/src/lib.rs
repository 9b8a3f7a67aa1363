//! TiKV raw mode as a [`RawKv`] backend, through `tikv-client` 0.4.0.
//!
//! [`TikvKv`] holds two handles on one connection: a plain raw client and an atomic one
//! (`with_atomic_for_cas()`). The adapter's rules, each answering a known pitfall of the
//! client (see `ARCHITECTURE.md`, "TiKV backend"):
//!
//! - **Which client writes a key.** Every key that is ever CASed must only be written by the
//!   atomic client, or TiKV's latches do not cover the plain writes and a CAS can interleave
//!   with them. [`AtomicKeys`] names those keys: [`AtomicKeys::All`] (the default, always
//!   safe, slower writes), a list of prefixes (e.g. [`AtomicKeys::percolator_spaces`]: the
//!   `H` and `M` spaces of a namespace) or a predicate. Writes of other keys use the plain
//!   client. A CAS of a key outside the atomic set is refused with
//!   [`KvError::InvalidArgument`]. Reads use the plain client (reads take no latches).
//! - **Deletes in atomic mode.** The atomic client refuses `batch_delete` and
//!   `delete_range`; atomic keys are deleted one `delete` each (with bounded concurrency),
//!   plain keys in one `batch_delete`.
//! - **Scans.** `RawClient::scan`/`scan_reverse` loop around in the last region (its end key
//!   is empty, so the client restarts from the beginning of the key space: duplicates, keys
//!   outside the range, an endless loop on an empty range). Forward scans therefore use
//!   `batch_scan` with one range, whose region split is correct; the result is sorted,
//!   clipped to the range and truncated to the limit. `scan_reverse` also asks the region of
//!   the range's *start*, not its end, and retries no gRPC error. Reverse scans therefore walk
//!   regions from the end of the range with PD's region bounds (`GetRegion`,
//!   `GetPrevRegion`; a minimal PD client, since the client exposes none), and read each
//!   region's part with a key-only forward probe of the remaining limit (fewer keys: the
//!   probe is the answer) or else with `scan_reverse` confined to that part, whose answer is
//!   checked (exactly the limit, strictly descending, inside the part, no key of the part
//!   above its first). A part failing a check is paged forward (O(that part),
//!   [`TikvKv::reverse_scan_fallbacks`] counts these). Cost: O(limit + regions touched).
//! - **Scan limit.** At most 10,240 pairs per call, like the contract; ranges of any size page
//!   with [`percolator::kv::scan_all`] / [`percolator::kv::RangePager`].
//! - **CAS retry hazard.** The client retries a CAS after a transport error, and the retry can
//!   report `swapped == false` for a swap that did happen (it finds its own value). Callers
//!   must make every CASed value unique and read "not swapped, but `previous == new`" as
//!   success (percolator's heads do: ARCHITECTURE.md, "The retry hazard"). With
//!   [`TikvConfig::unique_cas_values`] set, the adapter does that translation itself. A CAS that fails with [`KvError::Unavailable`] (including the
//!   adapter's own deadline) has an unknown outcome: re-read.
//! - **CAS cannot delete**: the contract never asks it to.
//! - **`batch_put` is not atomic**: the client splits it into ~16 KB RPCs sent concurrently;
//!   the contract promises nothing across keys either.
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

mod pd;

use async_trait::async_trait;
use futures::{StreamExt, TryStreamExt};
use percolator::codec::Space;
use percolator::kv::{
    CasOutcome, KeyRange, KvError, KvPair, KvResult, RawKv, ScanOrder, MAX_SCAN_LIMIT,
};
use percolator::KeyCodec;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tikv_client::{BoundRange, Key, RawClient};

/// Which keys are CASed, and so must only be written through the atomic client.
#[derive(Clone, Default)]
pub enum AtomicKeys {
    /// Every write goes through the atomic client (always safe; writes are slower because
    /// TiKV takes latches, and deletes cannot be batched).
    #[default]
    All,
    /// Keys starting with any of these prefixes are atomic; the rest are plain.
    Prefixes(Vec<Vec<u8>>),
    /// Keys for which the predicate holds are atomic; the rest are plain. It must give the
    /// same answer for a key for the life of the data.
    Predicate(KeyPredicate),
}

/// A rule on keys, as used by [`AtomicKeys::Predicate`].
pub type KeyPredicate = Arc<dyn Fn(&[u8]) -> bool + Send + Sync>;

impl AtomicKeys {
    /// The CAS-only spaces of the percolator key layout for one namespace: heads (`H`) and
    /// meta records (`M`).
    pub fn percolator_spaces(codec: &KeyCodec) -> Self {
        AtomicKeys::Prefixes(vec![
            codec.space_range(Space::Head).start,
            codec.space_range(Space::Meta).start,
        ])
    }

    /// Whether writes of `key` must use the atomic client.
    pub fn is_atomic(&self, key: &[u8]) -> bool {
        match self {
            AtomicKeys::All => true,
            AtomicKeys::Prefixes(prefixes) => prefixes.iter().any(|p| key.starts_with(p)),
            AtomicKeys::Predicate(f) => f(key),
        }
    }
}

impl std::fmt::Debug for AtomicKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AtomicKeys::All => write!(f, "All"),
            AtomicKeys::Prefixes(p) => f.debug_tuple("Prefixes").field(p).finish(),
            AtomicKeys::Predicate(_) => write!(f, "Predicate(..)"),
        }
    }
}

/// PEM files for mutual TLS with PD and TiKV (passed to `tikv_client::Config::with_security`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    /// CA certificate the servers' certificates are checked against.
    pub ca: PathBuf,
    /// This client's certificate.
    pub cert: PathBuf,
    /// This client's private key.
    pub key: PathBuf,
}

/// How to reach the cluster and how the adapter behaves.
#[derive(Clone, Debug)]
pub struct TikvConfig {
    /// PD endpoints (`host:port`, optionally with `http://` / `https://`).
    pub pd_endpoints: Vec<String>,
    /// Timeout of each gRPC call the client makes (default 2 s, the client's default).
    pub rpc_timeout: Duration,
    /// Deadline of one [`RawKv`] call, client retries included (default 20 s). On expiry the
    /// call fails with [`KvError::Unavailable`].
    pub op_timeout: Duration,
    /// Deadline for connecting to PD (default 10 s).
    pub connect_timeout: Duration,
    /// Mutual TLS files; `None` for plaintext.
    pub tls: Option<TlsFiles>,
    /// Which keys are CASed (default: all).
    pub atomic_keys: AtomicKeys,
    /// Largest gRPC message the client accepts (default 256 MiB; the client's default of 4 MiB
    /// would refuse a scan page of large values).
    pub max_message_bytes: usize,
    /// Every CASed value is unique (ARCHITECTURE.md, "The retry hazard"): read a failed CAS
    /// that found exactly the new value as a success (the client's retry hazard). Default
    /// `false`: outcomes are reported as the server gave them.
    pub unique_cas_values: bool,
    /// Concurrent single-key deletes used for atomic keys (default 16).
    pub delete_concurrency: usize,
    /// Reverse scans walk regions from the end of the range (PD region bounds, then a probe
    /// or a verified `RawClient::scan_reverse` per region; default `true`). `false` always
    /// pages the whole range forward (O(range size)).
    pub reverse_scan_fast_path: bool,
    /// First delay of the adapter's retries of transient errors (default 5 ms); each retry
    /// doubles it up to [`TikvConfig::retry_max_delay`], with jitter (a delay is drawn
    /// uniformly between half and all of the current step). Retries stop at `op_timeout`.
    pub retry_base_delay: Duration,
    /// Largest delay between two retries of one call (default 500 ms).
    pub retry_max_delay: Duration,
}

impl TikvConfig {
    /// Defaults for these PD endpoints.
    pub fn new(pd_endpoints: Vec<String>) -> Self {
        TikvConfig {
            pd_endpoints,
            rpc_timeout: Duration::from_secs(2),
            op_timeout: Duration::from_secs(20),
            connect_timeout: Duration::from_secs(10),
            tls: None,
            atomic_keys: AtomicKeys::All,
            max_message_bytes: 256 * 1024 * 1024,
            unique_cas_values: false,
            delete_concurrency: 16,
            reverse_scan_fast_path: true,
            retry_base_delay: Duration::from_millis(5),
            retry_max_delay: Duration::from_millis(500),
        }
    }

    /// tikv-client's own backoff, used for the region errors and gRPC errors it retries
    /// itself (refreshing its region cache in between). Its default
    /// (`DEFAULT_REGION_BACKOFF`: 10 attempts, 2 ms doubling to 500 ms, ~1.5 s in all) gives
    /// up long before `op_timeout` under region churn; this one is jittered (so that many
    /// clients hitting one split do not retry in step), its step grows to
    /// `max(retry_max_delay, op_timeout / 20)` and it has enough attempts for its delays to
    /// add up to about `op_timeout` (the adapter's deadline stops it first).
    /// Capped at 40 attempts: the client doubles its step without a bound, and 2 ms << 62
    /// overflows.
    fn client_backoff(&self) -> tikv_client::Backoff {
        const BASE_MS: u64 = 2;
        let budget_ms = self.op_timeout.as_millis() as u64;
        // A step of a twentieth of the deadline lets 40 attempts cover it.
        let max_ms = (self.retry_max_delay.as_millis() as u64)
            .max(budget_ms / 20)
            .max(BASE_MS);
        let (mut attempts, mut step, mut total) = (0u32, BASE_MS, 0u64);
        while total < budget_ms && attempts < 40 {
            // Equal jitter waits at least half of each step.
            total += step.min(max_ms) / 2;
            step = step.saturating_mul(2);
            attempts += 1;
        }
        tikv_client::Backoff::equal_jitter_backoff(BASE_MS, max_ms, attempts.max(10))
    }

    fn client_config(&self) -> tikv_client::Config {
        let mut config = tikv_client::Config::default()
            .with_timeout(self.rpc_timeout)
            .with_grpc_max_decoding_message_size(self.max_message_bytes);
        if let Some(tls) = &self.tls {
            config = config.with_security(tls.ca.clone(), tls.cert.clone(), tls.key.clone());
        }
        config
    }
}

/// Why the adapter retried a call (see [`TikvKv::retry_counts`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryCause {
    /// TiKV answered `ServerIsBusy` (its scheduler or raftstore is overloaded): nothing was
    /// applied. tikv-client 0.4.0 returns it at once, without backoff.
    ServerBusy,
    /// A region error the client did not resolve within its own backoff (`RegionNotFound`,
    /// `EpochNotMatch`, `NotLeader`, `StoreNotMatch`, stale command, no leader known) or a
    /// region lookup in PD that failed.
    Region,
    /// The connection failed or the reply was lost (gRPC `Unavailable`, `Unknown`,
    /// `Aborted`, broken channel, PD unreachable): a write may or may not have applied.
    Transport,
    /// An RPC outlived [`TikvConfig::rpc_timeout`]: a write may or may not have applied.
    Deadline,
}

/// How many times the adapter retried calls, by cause (a health figure: all stay near 0 on
/// a quiet cluster). Retries inside tikv-client (region errors it resolves itself) are not
/// counted here.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RetryCounts {
    /// Retries after `ServerIsBusy`.
    pub server_busy: u64,
    /// Retries after region errors.
    pub region: u64,
    /// Retries after transport errors (lost replies).
    pub transport: u64,
    /// Retries after an RPC deadline expired.
    pub deadline: u64,
    /// Calls that still failed with a transient error when `op_timeout` left no time for
    /// another attempt.
    pub gave_up: u64,
}

impl RetryCounts {
    /// Retries of every cause.
    pub fn total(&self) -> u64 {
        self.server_busy + self.region + self.transport + self.deadline
    }
}

#[derive(Default)]
struct RetryCounters {
    server_busy: AtomicU64,
    region: AtomicU64,
    transport: AtomicU64,
    deadline: AtomicU64,
    gave_up: AtomicU64,
}

impl RetryCounters {
    fn count(&self, cause: RetryCause) {
        let counter = match cause {
            RetryCause::ServerBusy => &self.server_busy,
            RetryCause::Region => &self.region,
            RetryCause::Transport => &self.transport,
            RetryCause::Deadline => &self.deadline,
        };
        counter.fetch_add(1, Ordering::Relaxed);
    }

    fn snapshot(&self) -> RetryCounts {
        RetryCounts {
            server_busy: self.server_busy.load(Ordering::Relaxed),
            region: self.region.load(Ordering::Relaxed),
            transport: self.transport.load(Ordering::Relaxed),
            deadline: self.deadline.load(Ordering::Relaxed),
            gave_up: self.gave_up.load(Ordering::Relaxed),
        }
    }
}

/// The deadline of one [`RawKv`] call: every attempt and every backoff of the call fits
/// before it.
#[derive(Clone, Copy, Debug)]
struct Deadline(Instant);

impl Deadline {
    fn remaining(&self) -> Duration {
        self.0.saturating_duration_since(Instant::now())
    }
}

/// A [`RawKv`] over TiKV raw mode (see the crate documentation for the rules it follows).
pub struct TikvKv {
    plain: RawClient,
    atomic: RawClient,
    config: TikvConfig,
    reverse_fallbacks: AtomicU64,
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
        );
        Ok(TikvKv {
            plain,
            atomic,
            pd,
            config,
            reverse_fallbacks: AtomicU64::new(0),
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

    /// Runs one client call until it succeeds, fails with a permanent error, or `deadline`
    /// leaves no time for another attempt. Transient errors ([`RetryCause`]) are retried
    /// after a jittered exponential backoff.
    ///
    /// Only calls that may be repeated go through here, and all of ours may:
    /// - reads are idempotent;
    /// - `put`/`batch_put` write fixed values: repeating one is the same as the first attempt
    ///   arriving late, which a concurrent writer can never tell from network delay (the
    ///   contract orders nothing between concurrent plain writes of one key);
    /// - `delete`/`batch_delete` are idempotent (deleting an absent key is a no-op);
    /// - a partly applied `batch_put` (the client splits it per region and sends the parts
    ///   concurrently) is completed by repeating the whole batch: the applied parts are
    ///   rewritten with the same values;
    /// - `compare_and_swap` is repeated with the same `expected`/`new`. If an earlier
    ///   attempt applied and only its reply was lost, the repeat answers `swapped = false`
    ///   with `previous == new` (the retry hazard; unique values make it recognisable, see
    ///   [`TikvConfig::unique_cas_values`]), or, if another writer replaced our value in
    ///   between, with that writer's value: callers treat a failed CAS as "re-read and
    ///   decide" (percolator checks the transaction's status), never as proof that nothing
    ///   was written.
    async fn call<T, F, Fut>(
        &self,
        op: &'static str,
        deadline: Deadline,
        mut attempt: F,
    ) -> KvResult<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = tikv_client::Result<T>>,
    {
        let policy = &self.config;
        let mut step = policy.retry_base_delay.max(Duration::from_micros(100));
        let mut attempts = 0u32;
        loop {
            attempts += 1;
            let remaining = deadline.remaining();
            let error = match tokio::time::timeout(remaining, attempt()).await {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => e,
                Err(_) => {
                    self.retries.gave_up.fetch_add(1, Ordering::Relaxed);
                    return Err(KvError::Unavailable {
                        op,
                        message: format!(
                            "no answer within {:?} after {attempts} attempt(s) (PD {})",
                            policy.op_timeout,
                            policy.pd_endpoints.join(",")
                        ),
                    });
                }
            };
            let Some(cause) = transient_cause(&error) else {
                return Err(map_error(op, error));
            };
            // Equal jitter: between half and all of the current step.
            let delay = step.mul_f64(0.5 + rand::random::<f64>() * 0.5);
            if delay >= deadline.remaining() {
                self.retries.gave_up.fetch_add(1, Ordering::Relaxed);
                tracing::warn!(op, ?cause, attempts, error = %error, "transient error; no time left for another attempt");
                return Err(map_error(op, error));
            }
            self.retries.count(cause);
            tracing::debug!(op, ?cause, attempts, ?delay, error = %error, "transient error; retrying");
            tokio::time::sleep(delay).await;
            step = (step * 2).min(policy.retry_max_delay.max(step));
        }
    }

    /// Up to `limit` pairs of a non-empty `range`, ascending, through `batch_scan`.
    async fn scan_forward(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        let mut pairs: Vec<KvPair> = self
            .call("scan", deadline, || {
                self.plain.batch_scan(vec![bound(range)], limit as u32)
            })
            .await?
            .into_iter()
            .map(|p| {
                let (k, v): (Key, Vec<u8>) = p.into();
                (Vec::from(k), v)
            })
            .filter(|(k, _)| range.contains(k))
            .collect();
        // One answer per region: sort, and keep the first `limit`.
        pairs.sort_by(|a, b| a.0.cmp(&b.0));
        pairs.dedup_by(|a, b| a.0 == b.0);
        pairs.truncate(limit);
        Ok(pairs)
    }

    /// Up to `limit` keys of a non-empty `range`, ascending, through `batch_scan_keys`.
    async fn scan_keys_forward(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<Vec<u8>>> {
        let mut keys: Vec<Vec<u8>> = self
            .call("scan", deadline, || {
                self.plain.batch_scan_keys(vec![bound(range)], limit as u32)
            })
            .await?
            .into_iter()
            .map(Vec::from)
            .filter(|k| range.contains(k))
            .collect();
        keys.sort();
        keys.dedup();
        keys.truncate(limit);
        Ok(keys)
    }

    /// The last `limit` pairs of a non-empty `range`, descending.
    ///
    /// With [`TikvConfig::reverse_scan_fast_path`] (the default), regions are walked from the
    /// end of the range with PD's region boundaries (`GetRegion`, then `GetPrevRegion`), and
    /// each region's part of the range is read by [`TikvKv::scan_reverse_in_region`] until
    /// `limit` pairs are found: O(limit + regions touched). A region whose answer cannot be
    /// trusted (the client's region cache disagrees with PD mid-split) is read by forward
    /// paging, which costs that region's part of the range only and is counted in
    /// [`TikvKv::reverse_scan_fallbacks`]. Without the fast path, the whole range is paged
    /// forward.
    async fn scan_reverse(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        if !self.config.reverse_scan_fast_path {
            return self.scan_reverse_by_paging(range, limit, deadline).await;
        }
        let mut out: Vec<KvPair> = Vec::new();
        let mut region = match &range.end {
            Some(end) => self.region_below(end, deadline).await?,
            None => Some(self.last_region(deadline).await?),
        };
        let mut regions_touched = 0u32;
        while let Some(r) = region {
            regions_touched += 1;
            // The range's part in this region (regions are visited downwards).
            let part = KeyRange {
                start: range.start.clone().max(r.start.clone()),
                end: match (&range.end, r.end.is_empty()) {
                    (Some(end), false) => Some(end.clone().min(r.end.clone())),
                    (Some(end), true) => Some(end.clone()),
                    (None, false) => Some(r.end.clone()),
                    (None, true) => None,
                },
            };
            if !part.is_empty() {
                let want = limit - out.len();
                let pairs = match self.scan_reverse_in_region(&part, want, deadline).await? {
                    Some(pairs) => pairs,
                    None => {
                        self.reverse_fallbacks.fetch_add(1, Ordering::Relaxed);
                        tracing::debug!(
                            ?part,
                            want,
                            "reverse scan of a region falls back to forward paging"
                        );
                        self.scan_reverse_by_paging(&part, want, deadline).await?
                    }
                };
                out.extend(pairs);
            }
            if out.len() >= limit || r.start.is_empty() || r.start <= range.start {
                break;
            }
            let start = r.start.clone();
            region = self
                .call("scan", deadline, || self.pd.prev_region(&start))
                .await?;
            if let Some(prev) = &region {
                if prev.end != start {
                    // The layout changed between two lookups: ask again for the region below.
                    region = self.region_below(&start, deadline).await?;
                }
            }
        }
        tracing::trace!(regions_touched, found = out.len(), "reverse scan");
        out.truncate(limit);
        Ok(out)
    }

    /// The region holding the keys just below `key` (`None`: no key is below it).
    async fn region_below(
        &self,
        key: &[u8],
        deadline: Deadline,
    ) -> KvResult<Option<pd::RegionBounds>> {
        if key.is_empty() {
            return Ok(None);
        }
        let holder = self.call("scan", deadline, || self.pd.region(key)).await?;
        if holder.start.as_slice() < key {
            return Ok(Some(holder));
        }
        self.call("scan", deadline, || self.pd.prev_region(key))
            .await
    }

    /// The last region of the key space: the one holding a key above any realistic key,
    /// walking forward should a split key be even higher.
    async fn last_region(&self, deadline: Deadline) -> KvResult<pd::RegionBounds> {
        let mut region = self
            .call("scan", deadline, || self.pd.region(&[0xFF; 16]))
            .await?;
        while !region.end.is_empty() {
            let next = region.end.clone();
            region = self
                .call("scan", deadline, || self.pd.region(&next))
                .await?;
        }
        Ok(region)
    }

    /// The last `limit` pairs of `range`, which lies inside one region, descending; `None`
    /// when the client's answer cannot be trusted.
    ///
    /// A key-only forward probe of `limit` keys comes first: if the range holds fewer, those
    /// are the answer (values by one `batch_get`). Otherwise the range holds at least `limit`
    /// keys, so `RawClient::scan_reverse` fills its limit from one region and stops before
    /// it can loop around the last region; its answer is accepted only if it is exactly
    /// `limit` keys, strictly descending, inside the range, with no key of the range above
    /// the first one (which rules out an answer from another region).
    async fn scan_reverse_in_region(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Option<Vec<KvPair>>> {
        let probe = self.scan_keys_forward(range, limit, deadline).await?;
        if probe.len() < limit {
            let keys: Vec<Vec<u8>> = probe.into_iter().rev().collect();
            let values = self.get_many(&keys, deadline).await?;
            if values.iter().all(Option::is_some) {
                return Ok(Some(
                    keys.into_iter().zip(values.into_iter().flatten()).collect(),
                ));
            }
            // A key was deleted between the probe and the read.
            return Ok(None);
        }
        self.try_client_scan_reverse(range, limit, deadline).await
    }

    /// `RawClient::scan_reverse` on a range of one region known to hold at least `limit` keys;
    /// `None` when its answer cannot be trusted.
    async fn try_client_scan_reverse(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Option<Vec<KvPair>>> {
        // `scan_reverse` retries no gRPC error itself (and gives up on region errors after
        // its fixed store backoff): lost replies are retried here like any other read.
        let pairs = self
            .call("scan", deadline, || async {
                let call = self.plain.scan_reverse(bound(range), limit as u32);
                // Should a concurrent delete leave fewer than `limit` keys, the client loops
                // around the last region; stop it and fall back.
                match tokio::time::timeout(self.config.rpc_timeout * 2, call).await {
                    Err(_) => Ok(None),
                    Ok(result) => result.map(Some),
                }
            })
            .await?;
        let Some(pairs) = pairs else {
            return Ok(None);
        };
        let pairs: Vec<KvPair> = pairs
            .into_iter()
            .map(|p| {
                let (k, v): (Key, Vec<u8>) = p.into();
                (Vec::from(k), v)
            })
            .collect();
        let plausible = pairs.len() == limit
            && pairs.iter().all(|(k, _)| range.contains(k))
            && pairs.windows(2).all(|w| w[0].0 > w[1].0);
        if !plausible {
            return Ok(None);
        }
        let mut above_start = pairs[0].0.clone();
        above_start.push(0);
        let above = KeyRange {
            start: above_start,
            end: range.end.clone(),
        };
        if !above.is_empty()
            && !self
                .scan_keys_forward(&above, 1, deadline)
                .await?
                .is_empty()
        {
            return Ok(None);
        }
        Ok(Some(pairs))
    }

    /// The last `limit` pairs of a non-empty `range`, descending, by forward key-only pages
    /// (keeping the last `limit` keys) and one `batch_get` for their values. Correct on any
    /// region layout; O(range size).
    async fn scan_reverse_by_paging(
        &self,
        range: &KeyRange,
        limit: usize,
        deadline: Deadline,
    ) -> KvResult<Vec<KvPair>> {
        // A key deleted between the key scan and the value read would shorten the page (and
        // a short page means "range exhausted" to pagers): retry a few times.
        let mut attempt = 0;
        loop {
            attempt += 1;
            let mut last: VecDeque<Vec<u8>> = VecDeque::with_capacity(limit);
            let mut rest = range.clone();
            loop {
                let page = self
                    .scan_keys_forward(&rest, MAX_SCAN_LIMIT, deadline)
                    .await?;
                let full = page.len() == MAX_SCAN_LIMIT;
                if let Some(k) = page.last() {
                    let mut next = k.clone();
                    next.push(0);
                    rest.start = next;
                }
                for k in page {
                    if last.len() == limit {
                        last.pop_front();
                    }
                    last.push_back(k);
                }
                if !full || rest.is_empty() {
                    break;
                }
            }
            let keys: Vec<Vec<u8>> = last.into_iter().rev().collect();
            let values = self.get_many(&keys, deadline).await?;
            let complete = values.iter().all(Option::is_some);
            let pairs: Vec<KvPair> = keys
                .into_iter()
                .zip(values)
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect();
            if complete || attempt >= 3 {
                return Ok(pairs);
            }
        }
    }

    /// How many reverse scans fell back from the fast path to forward paging (a health
    /// figure: it stays 0 on a healthy cluster without concurrent deletes in scanned ranges).
    pub fn reverse_scan_fallbacks(&self) -> u64 {
        self.reverse_fallbacks.load(Ordering::Relaxed)
    }

    async fn get_many(
        &self,
        keys: &[Vec<u8>],
        deadline: Deadline,
    ) -> KvResult<Vec<Option<Vec<u8>>>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let found: HashMap<Vec<u8>, Vec<u8>> = self
            .call("batch_get", deadline, || {
                self.plain.batch_get(keys.to_vec())
            })
            .await?
            .into_iter()
            .map(|p| {
                let (k, v): (Key, Vec<u8>) = p.into();
                (Vec::from(k), v)
            })
            .collect();
        Ok(keys.iter().map(|k| found.get(k).cloned()).collect())
    }
}

fn bound(range: &KeyRange) -> BoundRange {
    BoundRange::from((range.start.clone(), range.end.clone()))
}

/// The cause of a transient client error (worth retrying after a backoff), or `None` for a
/// permanent one.
fn transient_cause(e: &tikv_client::Error) -> Option<RetryCause> {
    use tikv_client::Error as E;
    match e {
        E::RegionError(region) if region.server_is_busy.is_some() => Some(RetryCause::ServerBusy),
        E::RegionError(_)
        | E::LeaderNotFound { .. }
        | E::RegionForKeyNotFound { .. }
        | E::RegionForRangeNotFound { .. }
        | E::RegionNotFoundInResponse { .. }
        | E::EntryNotFoundInRegionCache
        | E::NoCurrentRegions => Some(RetryCause::Region),
        E::Grpc(_)
        | E::Io(_)
        | E::Channel(_)
        | E::Canceled(_)
        | E::JoinError(_)
        | E::UndeterminedError(_)
        // PD connection failures ("PD cluster failed to respond", "failed to connect to").
        | E::InternalError { .. } => Some(RetryCause::Transport),
        E::GrpcAPI(status) => match status.code() {
            tonic_code::DeadlineExceeded => Some(RetryCause::Deadline),
            // tonic reports its own client-side timeout as `Cancelled: Timeout expired`.
            tonic_code::Cancelled if status.message().contains("Timeout expired") => {
                Some(RetryCause::Deadline)
            }
            tonic_code::Unavailable
            | tonic_code::Cancelled
            | tonic_code::Unknown
            | tonic_code::Aborted
            | tonic_code::ResourceExhausted => Some(RetryCause::Transport),
            _ => None,
        },
        E::ExtractedErrors(errors) | E::MultipleKeyErrors(errors) => {
            errors.iter().find_map(transient_cause)
        }
        _ => None,
    }
}

/// Whether a client error means "the cluster could not be reached or did not answer".
fn is_unavailable(e: &tikv_client::Error) -> bool {
    transient_cause(e).is_some()
}

use tonic::Code as tonic_code;

/// Maps a client error to a [`KvError`] naming the call.
fn map_error(op: &'static str, e: tikv_client::Error) -> KvError {
    let message = format!("tikv-client: {e}");
    if matches!(e, tikv_client::Error::MaxScanLimitExceeded { .. }) {
        KvError::InvalidArgument { op, message }
    } else if is_unavailable(&e) {
        KvError::Unavailable { op, message }
    } else {
        KvError::Engine { op, message }
    }
}

#[async_trait]
impl RawKv for TikvKv {
    async fn get(&self, key: &[u8]) -> KvResult<Option<Vec<u8>>> {
        self.call("get", self.deadline(), || self.plain.get(key.to_vec()))
            .await
    }

    async fn batch_get(&self, keys: &[Vec<u8>]) -> KvResult<Vec<Option<Vec<u8>>>> {
        self.get_many(keys, self.deadline()).await
    }

    async fn put(&self, key: Vec<u8>, value: Vec<u8>) -> KvResult<()> {
        let writer = self.writer(&key);
        self.call("put", self.deadline(), || {
            writer.put(key.clone(), value.clone())
        })
        .await
    }

    async fn batch_put(&self, pairs: Vec<KvPair>) -> KvResult<()> {
        let (atomic, plain): (Vec<KvPair>, Vec<KvPair>) = pairs
            .into_iter()
            .partition(|(k, _)| self.config.atomic_keys.is_atomic(k));
        let deadline = self.deadline();
        if !plain.is_empty() {
            self.call("batch_put", deadline, || {
                self.plain.batch_put(plain.clone())
            })
            .await?;
        }
        if !atomic.is_empty() {
            self.call("batch_put", deadline, || {
                self.atomic.batch_put(atomic.clone())
            })
            .await?;
        }
        Ok(())
    }

    async fn delete(&self, key: Vec<u8>) -> KvResult<()> {
        let writer = self.writer(&key);
        self.call("delete", self.deadline(), || writer.delete(key.clone()))
            .await
    }

    async fn batch_delete(&self, keys: Vec<Vec<u8>>) -> KvResult<()> {
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

    async fn compare_and_swap(
        &self,
        key: Vec<u8>,
        expected: Option<Vec<u8>>,
        new: Vec<u8>,
    ) -> KvResult<CasOutcome> {
        if !self.config.atomic_keys.is_atomic(&key) {
            return Err(KvError::InvalidArgument {
                op: "compare_and_swap",
                message: format!(
                    "key {key:?} is outside the configured atomic keys ({:?}); its plain writes \
                     would not be serialised with the CAS",
                    self.config.atomic_keys
                ),
            });
        }
        let check_own = self.config.unique_cas_values.then(|| new.clone());
        let (previous, swapped) = self
            .call("compare_and_swap", self.deadline(), || {
                self.atomic
                    .compare_and_swap(key.clone(), expected.clone(), new.clone())
            })
            .await?;
        if !swapped && check_own.is_some() && previous == check_own {
            // Our own write, reported by the client's retry (values are unique).
            return Ok(CasOutcome {
                previous: expected,
                swapped: true,
            });
        }
        Ok(CasOutcome { previous, swapped })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let lost = E::GrpcAPI(tonic::Status::unavailable("reply lost"));
        assert_eq!(transient_cause(&lost), Some(RetryCause::Transport));
        let late = E::GrpcAPI(tonic::Status::deadline_exceeded("late"));
        assert_eq!(transient_cause(&late), Some(RetryCause::Deadline));
        let nested = E::MultipleKeyErrors(vec![E::StringError("x".into()), busy]);
        assert_eq!(transient_cause(&nested), Some(RetryCause::ServerBusy));
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
